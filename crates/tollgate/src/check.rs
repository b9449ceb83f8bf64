//! `tollgate check`: asks a running rate limit service (RLS v3 over gRPC) for one decision and prints it.

use std::time::Duration;

use clap::Args;
use tollgate_protocol::rls::RlsClient;
use tollgate_protocol::rls::client::tls_connector;
use tollgate_protocol::rls::convert::{code_name, unit_of};
use tollgate_protocol::rls::wire::{
    self, DescriptorStatus, Entry, RateLimitDescriptor, RateLimitRequest, UInt64Value,
};
use tonic::transport::Endpoint;

use crate::CommandError;
use crate::tls_args::ClientTlsArgs;

/// The arguments of `tollgate check`.
///
/// Exit codes: 0 when the answer is OK, 3 when it is OVER_LIMIT, 1 when the
/// service cannot be reached or rejects the request, 2 for a bad command line.
#[derive(Args, Debug)]
#[command(
    after_help = "Exit status: 0 OK, 3 OVER_LIMIT, 1 error (unreachable, rejected), 2 usage."
)]
pub struct CheckArgs {
    /// How log lines, warnings and errors are written.
    #[command(flatten)]
    pub log: crate::logging::LogArgs,
    /// The service's address.
    #[arg(
        long,
        env = "TOLLGATE_CHECK_ADDR",
        default_value = "http://127.0.0.1:8081",
        value_name = "URL"
    )]
    pub addr: String,
    /// The rate limit domain.
    #[arg(long)]
    pub domain: String,
    /// A descriptor as `key=value[,key=value…]`; one status is printed per descriptor.
    #[arg(value_name = "DESCRIPTOR")]
    pub descriptors: Vec<String>,
    /// More descriptors, as with the positional ones.
    #[arg(long = "descriptor", value_name = "DESCRIPTOR")]
    pub more_descriptors: Vec<String>,
    /// Hits each descriptor counts; 0 checks without consuming anything (sent as each descriptor's `hits_addend`).
    #[arg(long, default_value_t = 1)]
    pub hits: u32,
    /// TLS towards an `https://` address.
    #[command(flatten)]
    pub tls: ClientTlsArgs,
    /// How long to wait for the connection and for the answer.
    #[arg(long, default_value = "5s", value_parser = tollgate_core::duration::parse_duration)]
    pub timeout: Duration,
}

/// What the check found, which decides the exit code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The service answered OK.
    Ok,
    /// The service answered OVER_LIMIT.
    OverLimit,
}

/// Sends one `ShouldRateLimit` call and prints the overall code and each status on stdout.
pub fn run(args: &CheckArgs) -> Result<Verdict, CommandError> {
    let descriptors = args
        .descriptors
        .iter()
        .chain(&args.more_descriptors)
        .map(|text| parse_descriptor(text, args.hits))
        .collect::<Result<Vec<_>, _>>()?;
    if descriptors.is_empty() {
        return Err(CommandError::Usage(
            "give at least one descriptor, e.g. `remote_address=10.0.0.1`".to_owned(),
        ));
    }
    let request = RateLimitRequest {
        domain: args.domain.clone(),
        descriptors,
        hits_addend: 0,
    };
    let endpoint = Endpoint::from_shared(args.addr.clone())
        .map_err(|error| CommandError::Usage(format!("bad --addr {:?}: {error}", args.addr)))?
        .connect_timeout(args.timeout)
        .timeout(args.timeout);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|error| CommandError::Failed(format!("cannot start the runtime: {error}")))?;
    let tls = if args.addr.starts_with("https://") {
        Some(args.tls.grpc_connector()?)
    } else {
        None
    };
    let response = runtime.block_on(async {
        let channel = match tls {
            Some(tls) => endpoint.connect_with_connector(tls_connector(tls)).await,
            None => endpoint.connect().await,
        }
        .map_err(|error| {
            CommandError::Failed(format!("cannot connect to {}: {error}", args.addr))
        })?;
        RlsClient::new(channel)
            .should_rate_limit(request.clone())
            .await
            .map_err(|status| {
                CommandError::Failed(format!(
                    "ShouldRateLimit failed: {:?}: {}",
                    status.code(),
                    status.message()
                ))
            })
    })?;
    let mut text = format!("{}\n", code_name(response.overall_code));
    for (descriptor, status) in request.descriptors.iter().zip(&response.statuses) {
        text.push_str(&format!(
            "  {}: {}\n",
            descriptor_text(descriptor),
            status_text(status)
        ));
    }
    crate::stdout_text::print(&text)
        .map_err(|error| CommandError::Failed(format!("cannot write the answer: {error}")))?;
    if response.overall_code == wire::CODE_OVER_LIMIT {
        Ok(Verdict::OverLimit)
    } else {
        Ok(Verdict::Ok)
    }
}

/// Parses `key=value[,key=value…]` (a value may be empty, a key may not) into a descriptor costing `hits`.
fn parse_descriptor(text: &str, hits: u32) -> Result<RateLimitDescriptor, CommandError> {
    let mut entries = Vec::new();
    for part in text.split(',') {
        let Some((key, value)) = part.split_once('=') else {
            return Err(CommandError::Usage(format!(
                "descriptor {text:?}: `{part}` is not key=value"
            )));
        };
        if key.is_empty() {
            return Err(CommandError::Usage(format!(
                "descriptor {text:?}: a key is empty"
            )));
        }
        entries.push(Entry {
            key: key.to_owned(),
            value: value.to_owned(),
        });
    }
    Ok(RateLimitDescriptor {
        entries,
        hits_addend: Some(UInt64Value {
            value: u64::from(hits),
        }),
        ..RateLimitDescriptor::default()
    })
}

fn descriptor_text(descriptor: &RateLimitDescriptor) -> String {
    descriptor
        .entries
        .iter()
        .map(|e| format!("{}={}", e.key, e.value))
        .collect::<Vec<_>>()
        .join(",")
}

/// Formats one status on a line, like `OK limit=3/minute name=login remaining=2 reset=50s`.
///
/// A multiplied unit reads `limit=3/15 minute`.
fn status_text(status: &DescriptorStatus) -> String {
    let mut text = code_name(status.code).to_owned();
    match &status.current_limit {
        Some(limit) => {
            let unit = unit_of(limit.unit)
                .map_or_else(|| format!("unit#{}", limit.unit), |u| u.name().to_owned());
            let limit_text = match limit.unit_multiplier.map_or(1, |m| m.value) {
                0 | 1 => format!("{}/{unit}", limit.requests_per_unit),
                n => format!("{}/{n} {unit}", limit.requests_per_unit),
            };
            text.push_str(&format!(" limit={limit_text}"));
            if !limit.name.is_empty() {
                text.push_str(&format!(" name={}", limit.name));
            }
        }
        None => text.push_str(" limit=none"),
    }
    text.push_str(&format!(" remaining={}", status.limit_remaining));
    if let Some(reset) = &status.duration_until_reset {
        text.push_str(&format!(" reset={}s", reset.seconds));
    }
    text
}
