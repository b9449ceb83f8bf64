//! `tollgate bench rls`: ShouldRateLimit calls (RLS v3, gRPC) spread over a
//! few HTTP/2 connections, counted as OK, OVER_LIMIT or an error by code.
//!
//! The calls are made straight on `h2` ([`super::grpc`]), so the load costs
//! less per call than the service it loads.

use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use http::Uri;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tollgate_protocol::rls::wire::{self, RateLimitRequest, SHOULD_RATE_LIMIT_PATH};

use super::grpc::GrpcConnection;
use super::load::{LoadArgs, Sender, drive, runtime};
use super::report::Heading;
use super::tally::{Counts, ErrorCounts};
use super::template::{Template, parse_template};
use crate::CommandError;

/// The arguments of `tollgate bench rls`.
#[derive(Args, Debug)]
#[command(
    after_help = "`{k}` in a descriptor value becomes a key index in 0..KEYS, drawn uniformly \
                  per request by a seeded generator.\n\
                  Exit status: 0 done (whatever the calls answered), 1 cannot connect, 2 usage."
)]
pub struct RlsArgs {
    /// The service's address (`http://host:port`: HTTP/2 without TLS).
    #[arg(long, default_value = "http://127.0.0.1:8081", value_name = "URL")]
    pub addr: String,
    /// The rate limit domain.
    #[arg(long)]
    pub domain: String,
    /// A descriptor as `key=value[,key=value…]`; `{k}` in a value is replaced by the key index.
    #[arg(long = "descriptor", value_name = "DESCRIPTOR", required = true)]
    pub descriptors: Vec<String>,
    /// How many distinct values `{k}` takes (1 = one hot key).
    #[arg(long, default_value_t = 1)]
    pub keys: u64,
    /// HTTP/2 connections the calls are spread over.
    #[arg(long, default_value_t = 4)]
    pub connections: usize,
    /// Hits each call counts (the request's `hits_addend`; 0 means 1).
    #[arg(long, default_value_t = 0)]
    pub hits: u32,
    /// The seed of the key generator.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// The load's shape.
    #[command(flatten)]
    pub load: LoadArgs,
}

/// The answers of `bench rls`: OK, OVER_LIMIT, or an error by code.
#[derive(Default)]
struct RlsCounts {
    ok: u64,
    over_limit: u64,
    errors: ErrorCounts,
}

impl Counts for RlsCounts {
    type Answer = Result<wire::RateLimitResponse, tonic::Status>;
    const ERRORS_BY: &'static str = "errors_by_code";

    fn count(&mut self, answer: Self::Answer) -> bool {
        match answer {
            Ok(response) if response.overall_code == wire::CODE_OK => {
                self.ok += 1;
                true
            }
            Ok(response) if response.overall_code == wire::CODE_OVER_LIMIT => {
                self.over_limit += 1;
                true
            }
            Ok(response) => {
                self.errors
                    .add(format!("overall_code {}", response.overall_code));
                false
            }
            Err(status) => {
                self.errors.add(format!("{:?}", status.code()));
                false
            }
        }
    }

    fn merge(&mut self, other: RlsCounts) {
        self.ok += other.ok;
        self.over_limit += other.over_limit;
        self.errors.merge(other.errors);
    }

    fn answered(&self) -> u64 {
        self.ok + self.over_limit
    }

    fn errors(&self) -> &ErrorCounts {
        &self.errors
    }

    fn text_lines(&self) -> String {
        format!("ok          {}\nover_limit  {}\n", self.ok, self.over_limit)
    }

    fn json_fields(&self) -> Vec<(&'static str, serde_json::Value)> {
        vec![
            ("ok", self.ok.into()),
            ("over_limit", self.over_limit.into()),
        ]
    }
}

/// What every `bench rls` worker asks for.
struct RlsPlan {
    domain: String,
    templates: Vec<Template>,
    keys: u64,
    hits: u32,
}

/// One `bench rls` worker's connection and key generator.
struct RlsSender {
    plan: Arc<RlsPlan>,
    connection: Arc<GrpcConnection>,
    /// The method's URI on the service.
    uri: Uri,
    /// How long a call may wait for its answer.
    timeout: Duration,
    rng: SmallRng,
}

impl Sender for RlsSender {
    type Counts = RlsCounts;

    fn send(
        &mut self,
    ) -> impl Future<Output = Result<wire::RateLimitResponse, tonic::Status>> + Send {
        let plan = &self.plan;
        let key = if plan.keys <= 1 {
            0
        } else {
            self.rng.random_range(0..plan.keys)
        };
        let request = RateLimitRequest {
            domain: plan.domain.clone(),
            descriptors: plan.templates.iter().map(|t| t.render(key)).collect(),
            hits_addend: plan.hits,
        };
        Arc::clone(&self.connection).unary(self.uri.clone(), &request, self.timeout)
    }
}

/// Runs `tollgate bench rls`.
pub(super) fn run(args: &RlsArgs) -> Result<(), CommandError> {
    let templates = args
        .descriptors
        .iter()
        .map(|text| parse_template(text))
        .collect::<Result<Vec<_>, _>>()?;
    if args.keys == 0 {
        return Err(CommandError::Usage("--keys must be at least 1".to_owned()));
    }
    if args.connections == 0 {
        return Err(CommandError::Usage(
            "--connections must be at least 1".to_owned(),
        ));
    }
    let rate = args.load.checked_rate()?;
    let (addr, uri) = method_uri(&args.addr)?;
    let timeout = args.load.timeout;
    let report = runtime()?.block_on(async {
        let mut connections = Vec::with_capacity(args.connections);
        for _ in 0..args.connections {
            let connection = GrpcConnection::connect(addr.clone(), timeout)
                .await
                .map_err(|error| {
                    CommandError::Failed(format!("cannot connect to {}: {error}", args.addr))
                })?;
            connections.push(connection);
        }
        let plan = Arc::new(RlsPlan {
            domain: args.domain.clone(),
            templates,
            keys: args.keys,
            hits: args.hits,
        });
        let senders = (0..args.load.concurrency)
            .map(|i| RlsSender {
                plan: Arc::clone(&plan),
                connection: Arc::clone(&connections[i % connections.len()]),
                uri: uri.clone(),
                timeout,
                rng: SmallRng::seed_from_u64(args.seed.wrapping_add(i as u64)),
            })
            .collect();
        drive(&args.load, rate, senders).await
    })?;
    report.print(&args.load, &heading(args));
    Ok(())
}

/// `--addr` as a URI, and the URI of `ShouldRateLimit` on it.
fn method_uri(addr: &str) -> Result<(Uri, Uri), CommandError> {
    let bad = |error: String| CommandError::Usage(format!("bad --addr {addr:?}: {error}"));
    let uri: Uri = addr
        .parse()
        .map_err(|error: http::uri::InvalidUri| bad(error.to_string()))?;
    if uri.scheme_str() != Some("http") {
        return Err(bad(
            "the load speaks plain HTTP/2 (h2c): give an http:// address".to_owned(),
        ));
    }
    let authority = uri
        .authority()
        .ok_or_else(|| bad("no host and port".to_owned()))?;
    let method = Uri::builder()
        .scheme("http")
        .authority(authority.clone())
        .path_and_query(SHOULD_RATE_LIMIT_PATH)
        .build()
        .map_err(|error| bad(error.to_string()))?;
    Ok((uri, method))
}

/// What a `bench rls` report says about the service it loaded.
fn heading(args: &RlsArgs) -> Heading {
    Heading {
        text: format!(
            "{} domain {}, {} key{}",
            args.addr,
            args.domain,
            args.keys,
            if args.keys == 1 { "" } else { "s" },
        ),
        json: vec![
            ("addr", args.addr.clone().into()),
            ("domain", args.domain.clone().into()),
            ("descriptors", args.descriptors.clone().into()),
            ("keys", args.keys.into()),
        ],
        connections: args.connections,
    }
}
