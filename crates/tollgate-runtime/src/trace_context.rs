//! W3C trace context for the spans a request makes, when tracing is on: continue the caller's trace, pass it on to the next hop.
//!
//! Tracing is off by default, and then nothing here costs more than one
//! atomic load per request: [`enabled`] says whether to make a span at all.
//! The binary switches it on ([`enable`]) after installing an exporter and
//! the W3C `traceparent` / `tracestate` propagator.

use std::sync::atomic::{AtomicBool, Ordering};

use opentelemetry_http::{HeaderExtractor, HeaderInjector};
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The target of the spans and events a request makes for its trace.
pub const TARGET: &str = "tollgate::trace";

/// Whether spans are made and exported.
static ENABLED: AtomicBool = AtomicBool::new(false);

/// Switches spans on for the process (the exporter is installed by the caller).
pub fn enable() {
    ENABLED.store(true, Ordering::Relaxed);
}

/// Whether a request should make spans.
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// Makes `span` a child of the trace `headers` carry (`traceparent`), if any.
pub fn continue_from(span: &tracing::Span, headers: &http::HeaderMap) {
    let parent = opentelemetry::global::get_text_map_propagator(|propagator| {
        propagator.extract(&HeaderExtractor(headers))
    });
    let _ = span.set_parent(parent);
}

/// Writes the trace context of `span` into `headers` for the next hop.
pub fn pass_on(span: &tracing::Span, headers: &mut http::HeaderMap) {
    let context = span.context();
    opentelemetry::global::get_text_map_propagator(|propagator| {
        propagator.inject_context(&context, &mut HeaderInjector(headers));
    });
}
