//! The xDS client: one Aggregated Discovery Service stream at a time, subscribed to `RateLimitConfig`, reconnecting with jittered exponential backoff.
//!
//! State of the world, as upstream's client: each response carries every
//! config, and together they are the configuration. A response that loads
//! goes into service and is ACKed (its version and nonce); one that does
//! not keeps the running configuration, counts in `config_load_error`, is
//! logged diagnostic by diagnostic and is NACKed with them as the error
//! detail (the version stays the last one ACKed). A response bigger than
//! the update bound is refused the same way and ends the stream. A
//! reconnection sends the last version ACKed, so the server need not
//! resend a configuration the client has.

use std::sync::Arc;
use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBuilder};
use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use envoy_types::pb::envoy::service::discovery::v3::{DiscoveryRequest, DiscoveryResponse};
use envoy_types::pb::google::protobuf::value::Kind;
use envoy_types::pb::google::protobuf::{Struct, Value};
use envoy_types::pb::google::rpc::Status;
use prost::Message;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tollgate_core::Clock;
use tollgate_rules::LoadOptions;
use tollgate_runtime::{AbortOnDrop, error_chain};
use tollgate_tls::TlsConnector;
use tonic::metadata::{AsciiMetadataKey, AsciiMetadataValue};
use tonic::transport::Endpoint;

use super::convert::{RATE_LIMIT_CONFIG_TYPE, load_update};
use super::gauges::XdsState;
use crate::reload::LiveEngine;

/// How long one connection attempt may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The most diagnostics a NACK's error detail spells out (the rest are counted).
const MAX_NACK_DIAGNOSTICS: usize = 20;

/// Where the management server is and how to reach it.
#[derive(Clone)]
pub struct XdsServer {
    /// `http://host:port` or `https://host:port`.
    pub uri: String,
    /// TLS towards it (with `https`).
    pub tls: Option<TlsConnector>,
}

/// What the xDS client needs.
#[derive(Clone)]
pub struct XdsOptions {
    /// The management server.
    pub server: XdsServer,
    /// The node id sent with every request (upstream's `CONFIG_GRPC_XDS_NODE_ID`).
    pub node_id: String,
    /// The node metadata, string values (upstream's `CONFIG_GRPC_XDS_NODE_METADATA`).
    pub node_metadata: Vec<(String, String)>,
    /// gRPC metadata sent on the stream (upstream's `CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS`).
    pub headers: Vec<(AsciiMetadataKey, AsciiMetadataValue)>,
    /// The longest first wait before reconnecting (doubled each failure;
    /// each wait is jittered between half its bound and the bound).
    pub backoff_first: Duration,
    /// The longest wait before reconnecting.
    pub backoff_longest: Duration,
    /// The most bytes one response may have.
    pub max_update_bytes: usize,
    /// How updates are loaded (merging domains, allowing an empty set, YAML bounds).
    pub load: LoadOptions,
}

impl std::fmt::Debug for XdsOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("XdsOptions")
            .field("uri", &self.server.uri)
            .field("tls", &self.server.tls.is_some())
            .field("node_id", &self.node_id)
            .field("backoff_first", &self.backoff_first)
            .field("backoff_longest", &self.backoff_longest)
            .field("max_update_bytes", &self.max_update_bytes)
            .finish_non_exhaustive()
    }
}

/// Starts the client on the current runtime: it keeps `live`'s rules those
/// the server sends until the guard is dropped.
pub fn spawn<C>(live: Arc<LiveEngine<C>>, options: XdsOptions, state: Arc<XdsState>) -> AbortOnDrop
where
    C: Clock + Clone + Send + Sync + 'static,
{
    AbortOnDrop::new([tokio::spawn(run(live, options, state))])
}

/// Waits whose bound starts at `first` and doubles up to `longest`, each
/// drawn between half its bound and the bound, without end.
fn reconnect_backoff(first: Duration, longest: Duration) -> ExponentialBuilder {
    // backon's jitter adds up to the delay again, so half of each bound
    // jittered gives waits between half of the bound and the bound.
    ExponentialBuilder::default()
        .with_min_delay(first / 2)
        .with_max_delay(longest / 2)
        .with_jitter()
        .without_max_times()
}

/// How a stream ended.
struct Ended {
    /// Whether an update went into service on it (the backoff starts over).
    applied: bool,
    /// Why it ended.
    reason: String,
}

async fn run<C>(live: Arc<LiveEngine<C>>, options: XdsOptions, state: Arc<XdsState>)
where
    C: Clock + Clone + Send + Sync + 'static,
{
    let builder = reconnect_backoff(options.backoff_first, options.backoff_longest);
    let mut backoff = builder.build();
    let mut session = Session {
        live,
        options,
        state,
        acked_version: String::new(),
    };
    loop {
        let ended = session.stream().await;
        session.state.set_connected(false);
        if ended.applied {
            backoff = builder.build();
        }
        let wait = backoff.next().unwrap_or(session.options.backoff_longest);
        tracing::warn!(
            server = %session.options.server.uri,
            reason = %ended.reason,
            retry_in = ?wait,
            "xDS stream ended; keeping the running config and reconnecting"
        );
        tokio::time::sleep(wait).await;
    }
}

/// The client's state across streams.
struct Session<C: Clock> {
    live: Arc<LiveEngine<C>>,
    options: XdsOptions,
    state: Arc<XdsState>,
    /// The version of the last update ACKed (sent again on reconnection).
    acked_version: String,
}

impl<C> Session<C>
where
    C: Clock + Clone + Send + Sync + 'static,
{
    /// Opens one stream and follows it until it ends.
    async fn stream(&mut self) -> Ended {
        let mut applied = false;
        let ended = |applied: bool, reason: String| Ended { applied, reason };
        let server = &self.options.server;
        let endpoint = match Endpoint::from_shared(server.uri.clone()) {
            Ok(endpoint) => endpoint.connect_timeout(CONNECT_TIMEOUT).tcp_nodelay(true),
            Err(error) => return ended(false, format!("bad server address: {error}")),
        };
        let channel = match &server.tls {
            Some(tls) => {
                endpoint
                    .connect_with_connector(tollgate_protocol::rls::client::tls_connector(
                        tls.clone(),
                    ))
                    .await
            }
            None => endpoint.connect().await,
        };
        let channel = match channel {
            Ok(channel) => channel,
            Err(error) => return ended(false, format!("cannot connect: {}", error_chain(&error))),
        };
        let mut client = AggregatedDiscoveryServiceClient::new(channel)
            .max_decoding_message_size(self.options.max_update_bytes);
        let (requests, outgoing) = mpsc::channel(4);
        let _ = requests.send(self.request(String::new(), None)).await;
        let mut call = tonic::Request::new(ReceiverStream::new(outgoing));
        for (key, value) in &self.options.headers {
            call.metadata_mut().insert(key.clone(), value.clone());
        }
        let mut responses = match client.stream_aggregated_resources(call).await {
            Ok(response) => response.into_inner(),
            Err(status) => return ended(false, format!("the server refused the stream: {status}")),
        };
        self.state.set_connected(true);
        tracing::info!(server = %server.uri, node = %self.options.node_id, "xDS stream open, subscribed to RateLimitConfig");
        loop {
            match responses.message().await {
                Ok(Some(response)) => {
                    let reply = self.take(response).await;
                    applied |= reply.error_detail.is_none();
                    if requests.send(reply).await.is_err() {
                        return ended(applied, "the request stream closed".to_owned());
                    }
                }
                Ok(None) => return ended(applied, "the server closed the stream".to_owned()),
                Err(status) if status.code() == tonic::Code::OutOfRange => {
                    // An update over the bound: refused like a bad one; the stream cannot go on.
                    self.refused(format!(
                        "an update exceeds --config-xds-max-update-bytes ({} bytes): {}",
                        self.options.max_update_bytes,
                        status.message()
                    ));
                    return ended(
                        applied,
                        format!("an oversized update: {}", status.message()),
                    );
                }
                Err(status) => return ended(applied, format!("{status}")),
            }
        }
    }

    /// Loads one response and answers it: an ACK when it went into service, else a NACK.
    async fn take(&mut self, mut response: DiscoveryResponse) -> DiscoveryRequest {
        self.state.record_size(response.encoded_len());
        if response.type_url != RATE_LIMIT_CONFIG_TYPE {
            let message = format!(
                "Tollgate subscribes to {RATE_LIMIT_CONFIG_TYPE} only, not {}",
                response.type_url
            );
            tracing::warn!(type_url = %response.type_url, "xDS response of a type not subscribed to; NACKed");
            let mut nack = self.request(response.nonce, Some(message));
            nack.type_url = response.type_url;
            return nack;
        }
        let configs = response.resources.len();
        // Loading a large update takes a while: off the runtime's workers.
        let resources = std::mem::take(&mut response.resources);
        let load = self.options.load;
        let update = match tokio::task::spawn_blocking(move || load_update(&resources, load)).await
        {
            Ok(update) => update,
            Err(error) => {
                self.refused(format!("loading the update failed: {error}"));
                return self.request(response.nonce, Some(format!("loading failed: {error}")));
            }
        };
        match update.loaded.into_result() {
            Ok((rules, warnings)) => {
                for warning in warnings.all() {
                    tracing::warn!("{warning}");
                }
                let (domains, count) = (rules.domain_count(), rules.rule_count());
                self.live.put_rules(rules, update.hash);
                self.state.record_applied();
                tracing::info!(
                    version = %response.version_info,
                    configs,
                    domains,
                    rules = count,
                    hash = %format_args!("{:016x}", update.hash),
                    "config from the xDS server applied"
                );
                self.acked_version = response.version_info;
                self.request(response.nonce, None)
            }
            Err(diagnostics) => {
                for diagnostic in diagnostics.all() {
                    tracing::error!("{diagnostic}");
                }
                let mut detail: Vec<String> = diagnostics
                    .errors()
                    .take(MAX_NACK_DIAGNOSTICS)
                    .map(ToString::to_string)
                    .collect();
                let more = diagnostics
                    .error_count()
                    .saturating_sub(MAX_NACK_DIAGNOSTICS);
                if more > 0 {
                    detail.push(format!("and {more} more error(s)"));
                }
                tracing::error!(
                    version = %response.version_info,
                    errors = diagnostics.error_count(),
                    "the config from the xDS server has errors; keeping the running config (NACK)"
                );
                self.refused_quietly();
                self.request(response.nonce, Some(detail.join("\n")))
            }
        }
    }

    /// Counts a refused update and logs why.
    fn refused(&self, why: String) {
        tracing::error!(reason = %why, "the config from the xDS server is refused; keeping the running config");
        self.refused_quietly();
    }

    fn refused_quietly(&self) {
        self.live.count_refused();
        self.state.record_refused();
    }

    /// A request for `RateLimitConfig` answering `nonce` with the last version
    /// ACKed, and `error` as the detail when it is a NACK.
    fn request(&self, nonce: String, error: Option<String>) -> DiscoveryRequest {
        DiscoveryRequest {
            version_info: self.acked_version.clone(),
            node: Some(node(&self.options)),
            type_url: RATE_LIMIT_CONFIG_TYPE.to_owned(),
            response_nonce: nonce,
            error_detail: error.map(|message| Status {
                code: tonic::Code::InvalidArgument as i32,
                message,
                details: Vec::new(),
            }),
            ..DiscoveryRequest::default()
        }
    }
}

/// The node Tollgate says it is: the id and the metadata's string values.
fn node(options: &XdsOptions) -> Node {
    let fields = options
        .node_metadata
        .iter()
        .map(|(key, value)| {
            (
                key.clone(),
                Value {
                    kind: Some(Kind::StringValue(value.clone())),
                },
            )
        })
        .collect();
    Node {
        id: options.node_id.clone(),
        metadata: (!options.node_metadata.is_empty()).then_some(Struct { fields }),
        user_agent_name: "tollgate".to_owned(),
        ..Node::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// backon's jitter adds up to the delay again: with the bounds given to
    /// it as they are, a 1s maximum let waits of up to 2s through.
    #[test]
    fn every_reconnection_wait_is_between_half_its_bound_and_the_bound() {
        let (first, longest) = (Duration::from_millis(100), Duration::from_secs(1));
        let waits: Vec<Duration> = reconnect_backoff(first, longest)
            .with_jitter_seed(7)
            .build()
            .take(200)
            .collect();
        assert_eq!(waits.len(), 200, "it never gives up");
        assert!(waits[0] >= first / 2 && waits[0] <= first, "{:?}", waits[0]);
        for wait in &waits {
            assert!(*wait >= first / 2 && *wait <= longest, "{wait:?}");
        }
        let top: Vec<&Duration> = waits.iter().skip(10).collect();
        assert!(top.iter().all(|w| **w >= longest / 2), "{top:?}");
        assert!(
            top.iter().any(|w| **w != *top[0]),
            "jittered, not all equal: {top:?}"
        );
    }
}
