//! OpenTelemetry tracing for `serve` and `proxy`: spans exported over OTLP (gRPC or HTTP), off by default, with W3C trace context or B3.
//!
//! With `--tracing` (or upstream's `TRACING_ENABLED=true` for `serve`), a
//! check and a proxied request each make a span (a child of the caller's
//! trace when its `traceparent` header says so), the store call and the
//! upstream call make child spans, and warnings inside them become span
//! events. Spans go in batches to `--otlp-endpoint`
//! (`OTEL_EXPORTER_OTLP_ENDPOINT`, default `http://127.0.0.1:4317`) over
//! `--otlp-protocol` (`grpc`, or `http`: protobuf posted to the endpoint's
//! `/v1/traces`, default `http://127.0.0.1:4318`; upstream's
//! `TRACING_EXPORTER_PROTOCOL`, whose default is `http`) and the
//! rest are flushed at shutdown. Off, no span is made at all.
//!
//! The caller's trace is read from, and passed on in, the headers that
//! `--trace-propagation` names ([`Propagation`]): W3C `traceparent` by
//! default, or Zipkin's B3 (`b3`, or `X-B3-TraceId` and its siblings; both
//! are read either way), or both.

use std::time::Duration;

use clap::Args;
use clap::builder::BoolishValueParser;
use opentelemetry::propagation::{TextMapCompositePropagator, TextMapPropagator};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider};
#[expect(
    deprecated,
    reason = "the B3 propagator ships only in opentelemetry-zipkin, deprecated with its exporter; no maintained B3 propagator exists for opentelemetry 0.33"
)]
use opentelemetry_zipkin::{B3Encoding, Propagator as B3Propagator};
use tracing_subscriber::Layer;
use tracing_subscriber::registry::Registry;

use crate::CommandError;

/// How long the exporter may take to send what is left at shutdown.
const FLUSH_TIMEOUT: Duration = Duration::from_secs(5);

/// The tracing flags of `serve` and `proxy`.
#[derive(Args, Clone, Debug, PartialEq)]
pub struct TracingArgs {
    /// Export spans over OTLP (upstream's `TRACING_ENABLED`).
    #[arg(long = "tracing", env = "TOLLGATE_TRACING", value_parser = BoolishValueParser::new())]
    pub enabled: bool,
    /// Where spans go: an OTLP collector (over HTTP, its base URL: `/v1/traces` is added).
    #[arg(
        long,
        env = "OTEL_EXPORTER_OTLP_ENDPOINT",
        value_name = "URL",
        default_value = DEFAULT_GRPC_ENDPOINT
    )]
    pub otlp_endpoint: String,
    /// The `service.name` of the spans [default: tollgate; `serve`: upstream's `TRACING_SERVICE_NAME` when set].
    #[arg(long, env = "TOLLGATE_TRACING_SERVICE_NAME", value_name = "NAME")]
    pub tracing_service_name: Option<String>,
    /// The share of new traces recorded, 0 to 1; a caller's sampled trace is
    /// always followed [default: 1; `serve`: upstream's `TRACING_SAMPLING_RATE` when set].
    #[arg(long, env = "TOLLGATE_TRACING_SAMPLING_RATE", value_name = "RATE", value_parser = sampling_rate)]
    pub tracing_sampling_rate: Option<f64>,
    /// The trace headers read from callers and written to the next hop,
    /// comma-separated: `tracecontext` (W3C `traceparent`), `b3` (one `b3`
    /// header), `b3multi` (`X-B3-TraceId`, `X-B3-SpanId`, `X-B3-Sampled`).
    /// Either B3 form reads both B3 forms.
    #[arg(
        long,
        env = "TOLLGATE_TRACE_PROPAGATION",
        value_name = "LIST",
        value_delimiter = ',',
        default_value = "tracecontext"
    )]
    pub trace_propagation: Vec<Propagation>,
    /// How spans travel to the collector: `grpc`, or `http` (protobuf over
    /// plain HTTP) [`serve`: upstream's `TRACING_EXPORTER_PROTOCOL` when set,
    /// and `http`, upstream's default, with `TRACING_ENABLED=true`].
    #[arg(
        long,
        env = "TOLLGATE_OTLP_PROTOCOL",
        value_name = "PROTOCOL",
        default_value = "grpc"
    )]
    pub otlp_protocol: OtlpProtocol,
}

/// OTLP's transport (`--otlp-protocol`, upstream's `TRACING_EXPORTER_PROTOCOL`).
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum OtlpProtocol {
    /// OTLP/gRPC (port 4317).
    Grpc,
    /// OTLP/HTTP with protobuf bodies (port 4318).
    Http,
}

/// The flag's default endpoint, an OTLP/gRPC one.
const DEFAULT_GRPC_ENDPOINT: &str = "http://127.0.0.1:4317";

/// The endpoint used over HTTP when the flag is left at its gRPC default.
const DEFAULT_HTTP_ENDPOINT: &str = "http://127.0.0.1:4318";

/// One trace header format (`--trace-propagation`), named as `OTEL_PROPAGATORS` names them.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Propagation {
    /// W3C trace context: `traceparent`, `tracestate`.
    Tracecontext,
    /// Zipkin B3, written as the single `b3` header.
    B3,
    /// Zipkin B3, written as `X-B3-TraceId`, `X-B3-SpanId` and `X-B3-Sampled`.
    B3multi,
}

impl Propagation {
    /// The propagator of this format.
    #[expect(
        deprecated,
        reason = "the B3 propagator ships only in opentelemetry-zipkin, deprecated with its exporter"
    )]
    fn propagator(self) -> Box<dyn TextMapPropagator + Send + Sync> {
        match self {
            Propagation::Tracecontext => Box::new(TraceContextPropagator::new()),
            Propagation::B3 => Box::new(B3Propagator::with_encoding(B3Encoding::SingleHeader)),
            Propagation::B3multi => {
                Box::new(B3Propagator::with_encoding(B3Encoding::MultipleHeader))
            }
        }
    }
}

impl TracingArgs {
    /// These flags, completed by upstream's `TRACING_*` variables where a flag is not given.
    pub fn with_upstream(
        &self,
        env: &crate::upstream_env::UpstreamEnv,
    ) -> Result<TracingArgs, CommandError> {
        let upstream_on = env
            .get("TRACING_ENABLED")
            .and_then(crate::upstream_env::parse_bool)
            .unwrap_or(false);
        let otlp_protocol = match env.get("TRACING_EXPORTER_PROTOCOL").map(str::trim) {
            Some(p) if p.eq_ignore_ascii_case("grpc") => OtlpProtocol::Grpc,
            Some(p) if p.eq_ignore_ascii_case("http") => OtlpProtocol::Http,
            Some(protocol) => {
                return Err(CommandError::Usage(format!(
                    "TRACING_EXPORTER_PROTOCOL={protocol:?} is not http or grpc"
                )));
            }
            // Upstream's default, when its variables switch tracing on.
            None if upstream_on && !self.enabled => OtlpProtocol::Http,
            None => self.otlp_protocol,
        };
        let rate = match (self.tracing_sampling_rate, env.get("TRACING_SAMPLING_RATE")) {
            (Some(rate), _) => Some(rate),
            (None, Some(text)) => Some(
                sampling_rate(text)
                    .map_err(|e| CommandError::Usage(format!("TRACING_SAMPLING_RATE: {e}")))?,
            ),
            (None, None) => None,
        };
        Ok(TracingArgs {
            enabled: self.enabled || upstream_on,
            otlp_endpoint: self.otlp_endpoint.clone(),
            tracing_service_name: self
                .tracing_service_name
                .clone()
                .or_else(|| env.get("TRACING_SERVICE_NAME").map(str::to_owned)),
            tracing_sampling_rate: rate,
            trace_propagation: self.trace_propagation.clone(),
            otlp_protocol,
        })
    }
}

/// The URL OTLP/HTTP posts spans to: the endpoint (the HTTP default if the
/// flag is at its gRPC one) with `/v1/traces` added, as the OTLP spec adds
/// it to `OTEL_EXPORTER_OTLP_ENDPOINT`. Plain `http://` only.
fn http_traces_url(endpoint: &str) -> Result<String, CommandError> {
    let base = if endpoint == DEFAULT_GRPC_ENDPOINT {
        DEFAULT_HTTP_ENDPOINT
    } else {
        endpoint
    };
    if !base.starts_with("http://") {
        return Err(CommandError::Usage(format!(
            "--otlp-endpoint (OTEL_EXPORTER_OTLP_ENDPOINT) {endpoint:?}: OTLP over HTTP is sent to an http:// collector only (no TLS)"
        )));
    }
    let base = base.trim_end_matches('/');
    if base.ends_with("/v1/traces") {
        Ok(base.to_owned())
    } else {
        Ok(format!("{base}/v1/traces"))
    }
}

fn sampling_rate(text: &str) -> Result<f64, String> {
    let rate: f64 = text
        .parse()
        .map_err(|_| format!("`{text}` is not a number"))?;
    if (0.0..=1.0).contains(&rate) {
        Ok(rate)
    } else {
        Err(format!("{rate} is not between 0 and 1"))
    }
}

/// The exporter, flushed and shut down when dropped.
#[derive(Debug)]
pub struct Traces {
    provider: SdkTracerProvider,
}

impl Drop for Traces {
    fn drop(&mut self) {
        if let Err(error) = self.provider.shutdown_with_timeout(FLUSH_TIMEOUT) {
            tracing::warn!(%error, "spans were lost at shutdown");
        }
    }
}

/// A layer that turns the request spans into OpenTelemetry spans.
pub type TraceLayer = Box<dyn Layer<Registry> + Send + Sync>;

/// Starts the exporter `args` describe, when tracing is on: the layer to
/// install and the guard that flushes at shutdown. Needs a Tokio runtime.
pub fn start(args: &TracingArgs) -> Result<Option<(TraceLayer, Traces)>, CommandError> {
    if !args.enabled {
        return Ok(None);
    }
    let exporter = match args.otlp_protocol {
        OtlpProtocol::Grpc => opentelemetry_otlp::SpanExporter::builder()
            .with_tonic()
            .with_endpoint(args.otlp_endpoint.clone())
            .build(),
        OtlpProtocol::Http => {
            let url = http_traces_url(&args.otlp_endpoint)?;
            opentelemetry_otlp::SpanExporter::builder()
                .with_http()
                .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
                .with_http_client(crate::otlp_http::OtlpHttpClient::new(FLUSH_TIMEOUT))
                .with_endpoint(url)
                .build()
        }
    }
    .map_err(|error| {
        CommandError::Usage(format!("--otlp-endpoint {}: {error}", args.otlp_endpoint))
    })?;
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_sampler(Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(
            args.tracing_sampling_rate.unwrap_or(1.0),
        ))))
        .with_resource(
            Resource::builder()
                .with_service_name(
                    args.tracing_service_name
                        .clone()
                        .unwrap_or_else(|| "tollgate".to_owned()),
                )
                .build(),
        )
        .build();
    opentelemetry::global::set_text_map_propagator(TextMapCompositePropagator::new(
        args.trace_propagation
            .iter()
            .map(|p| p.propagator())
            .collect(),
    ));
    let tracer = provider.tracer("tollgate");
    // The request spans and what happens inside them (warnings become span events).
    let layer = tracing_opentelemetry::layer()
        .with_tracer(tracer)
        .with_filter(tracing_subscriber::filter::filter_fn(|meta| {
            meta.target() == tollgate_runtime::trace_context::TARGET
                || *meta.level() <= tracing::Level::WARN
        }))
        .boxed();
    tollgate_runtime::trace_context::enable();
    Ok(Some((layer, Traces { provider })))
}
