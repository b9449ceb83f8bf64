//! A small xDS management server (the Aggregated Discovery Service, state of the world) on a loopback port that a test drives.
//!
//! The test sets the full set of `RateLimitConfig` resources with a
//! version ([`AdsServer::serve`]); every open stream gets it at once, and a
//! new stream gets the current set in answer to its first request. Every
//! request a client sends (its subscription, ACKs and NACKs) is recorded
//! for the test to read ([`AdsServer::reply_to`]). Each response's nonce is
//! its version, so a test finds the answer to a given update by version.
//! [`AdsServer::stop`] ends every stream and closes the port, and
//! [`AdsServer::start_on`] starts again on the same address (a restart);
//! [`AdsServer::start_tls`] serves over mutual TLS ([`crate::xds_tls`]).

use std::net::SocketAddr;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_server::{
    AggregatedDiscoveryService, AggregatedDiscoveryServiceServer,
};
use envoy_types::pb::envoy::service::discovery::v3::{
    DeltaDiscoveryRequest, DeltaDiscoveryResponse, DiscoveryRequest, DiscoveryResponse,
};
use envoy_types::pb::google::protobuf::Any;
use envoy_types::pb::ratelimit::config::ratelimit::v3::RateLimitConfig;
use prost::Message;
use tokio::net::TcpListener;
use tokio::sync::{Mutex, mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use tokio_stream::Stream;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

use crate::budget::BUDGET;

/// The type URL of `RateLimitConfig` resources.
pub const RATE_LIMIT_CONFIG_TYPE: &str =
    "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig";

/// One state of the world: a version and every resource.
#[derive(Clone, Debug)]
struct Snapshot {
    version: String,
    resources: Vec<Any>,
}

/// What the service and the test share.
struct Shared {
    snapshot: watch::Sender<Option<Snapshot>>,
    requests: mpsc::UnboundedSender<DiscoveryRequest>,
    stopping: watch::Sender<bool>,
}

/// The ADS server a test drives; stopped when dropped.
pub struct AdsServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    requests: Mutex<mpsc::UnboundedReceiver<DiscoveryRequest>>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for AdsServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdsServer")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl AdsServer {
    /// Starts on a free loopback port, serving nothing until [`AdsServer::serve`].
    pub async fn start() -> AdsServer {
        AdsServer::start_on(SocketAddr::from(([127, 0, 0, 1], 0))).await
    }

    /// Starts on `addr` (the address of a server stopped before, for a restart).
    pub async fn start_on(addr: SocketAddr) -> AdsServer {
        AdsServer::launch(addr, None).await
    }

    /// Starts on a free loopback port over TLS with the certificate `cert`
    /// and key `key`, requiring a client certificate that `client_ca` signed
    /// (as Envoy Gateway's xDS server does).
    pub async fn start_tls(cert: &Path, key: &Path, client_ca: &Path) -> AdsServer {
        let config = super::xds_tls::server_config(cert, key, client_ca);
        AdsServer::launch(SocketAddr::from(([127, 0, 0, 1], 0)), Some(config)).await
    }

    async fn launch(addr: SocketAddr, tls: Option<Arc<rustls::ServerConfig>>) -> AdsServer {
        let listener = TcpListener::bind(addr)
            .await
            .unwrap_or_else(|error| panic!("the ADS server binds {addr}: {error}"));
        let addr = listener.local_addr().expect("a bound address");
        let (requests_tx, requests) = mpsc::unbounded_channel();
        let shared = Arc::new(Shared {
            snapshot: watch::Sender::new(None),
            requests: requests_tx,
            stopping: watch::Sender::new(false),
        });
        let (stop, stopped) = oneshot::channel::<()>();
        let service = AggregatedDiscoveryServiceServer::new(Service(Arc::clone(&shared)));
        let stopped = async {
            let _ = stopped.await;
        };
        let server = tonic::transport::Server::builder().add_service(service);
        let task = match tls {
            None => tokio::spawn(async move {
                let incoming = tonic::transport::server::TcpIncoming::from(listener);
                let _ = server.serve_with_incoming_shutdown(incoming, stopped).await;
            }),
            Some(config) => tokio::spawn(async move {
                let (incoming, accepting) = super::xds_tls::incoming(listener, config);
                let _ = server.serve_with_incoming_shutdown(incoming, stopped).await;
                accepting.abort();
            }),
        };
        AdsServer {
            addr,
            shared,
            requests: Mutex::new(requests),
            stop: Some(stop),
            task: Some(task),
        }
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Serves `configs` as the whole set at `version`, pushed to every open stream.
    pub fn serve(&self, version: &str, configs: &[RateLimitConfig]) {
        let resources = configs
            .iter()
            .map(|config| Any {
                type_url: RATE_LIMIT_CONFIG_TYPE.to_owned(),
                value: config.encode_to_vec(),
            })
            .collect();
        self.serve_resources(version, resources);
    }

    /// Serves `resources` (of any type, or not decodable) as the whole set at `version`.
    pub fn serve_resources(&self, version: &str, resources: Vec<Any>) {
        self.shared.snapshot.send_replace(Some(Snapshot {
            version: version.to_owned(),
            resources,
        }));
    }

    /// The next request a client sent, waiting at most [`BUDGET`].
    pub async fn next_request(&self) -> DiscoveryRequest {
        let mut requests = self.requests.lock().await;
        tokio::time::timeout(BUDGET, requests.recv())
            .await
            .unwrap_or_else(|_| panic!("no xDS request within {BUDGET:?}"))
            .expect("the service keeps the sender")
    }

    /// The client's answer (ACK or NACK) to the response of `version`,
    /// skipping other requests, waiting at most [`BUDGET`] for each.
    pub async fn reply_to(&self, version: &str) -> DiscoveryRequest {
        loop {
            let request = self.next_request().await;
            if request.response_nonce == version {
                return request;
            }
        }
    }

    /// Ends every stream and closes the port, waiting at most [`BUDGET`].
    pub async fn stop(mut self) {
        self.shutdown();
        if let Some(task) = self.task.take() {
            tokio::time::timeout(BUDGET, task)
                .await
                .expect("the ADS server stops in time")
                .expect("the ADS server task ends");
        }
    }

    fn shutdown(&mut self) {
        self.shared.stopping.send_replace(true);
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

impl Drop for AdsServer {
    fn drop(&mut self) {
        self.shutdown();
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// The gRPC service.
struct Service(Arc<Shared>);

/// How long a response may wait for room in a stream's queue.
const SEND_TIMEOUT: Duration = Duration::from_secs(5);

type Responses<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send + 'static>>;

#[tonic::async_trait]
impl AggregatedDiscoveryService for Service {
    type StreamAggregatedResourcesStream = Responses<DiscoveryResponse>;
    type DeltaAggregatedResourcesStream = Responses<DeltaDiscoveryResponse>;

    async fn stream_aggregated_resources(
        &self,
        request: Request<Streaming<DiscoveryRequest>>,
    ) -> Result<Response<Self::StreamAggregatedResourcesStream>, Status> {
        let (responses, outgoing) = mpsc::channel(8);
        tokio::spawn(follow(Arc::clone(&self.0), request.into_inner(), responses));
        Ok(Response::new(Box::pin(ReceiverStream::new(outgoing))))
    }

    async fn delta_aggregated_resources(
        &self,
        _request: Request<Streaming<DeltaDiscoveryRequest>>,
    ) -> Result<Response<Self::DeltaAggregatedResourcesStream>, Status> {
        Err(Status::unimplemented("state of the world only"))
    }
}

/// One stream: records each request, answers the first with the current
/// set, and pushes every later set; ends when the client does or the server stops.
async fn follow(
    shared: Arc<Shared>,
    mut incoming: Streaming<DiscoveryRequest>,
    responses: mpsc::Sender<Result<DiscoveryResponse, Status>>,
) {
    let mut snapshot = shared.snapshot.subscribe();
    let mut stopping = shared.stopping.subscribe();
    let mut subscribed = false;
    loop {
        let send_now = tokio::select! {
            request = incoming.message() => match request {
                Ok(Some(request)) => {
                    let first = !subscribed;
                    subscribed = true;
                    let _ = shared.requests.send(request);
                    first
                }
                _ => return,
            },
            changed = snapshot.changed(), if subscribed => {
                if changed.is_err() {
                    return;
                }
                true
            },
            _ = stopping.wait_for(|stop| *stop) => return,
        };
        if !send_now {
            continue;
        }
        let current = snapshot.borrow_and_update().clone();
        if let Some(current) = current {
            let response = DiscoveryResponse {
                version_info: current.version.clone(),
                resources: current.resources,
                type_url: RATE_LIMIT_CONFIG_TYPE.to_owned(),
                nonce: current.version,
                ..DiscoveryResponse::default()
            };
            if responses
                .send_timeout(Ok(response), SEND_TIMEOUT)
                .await
                .is_err()
            {
                return;
            }
        }
    }
}
