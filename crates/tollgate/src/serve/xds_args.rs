//! `tollgate serve`'s flags for limits from an xDS management server, combined with upstream's `CONFIG_TYPE=GRPC_XDS_SOTW` and `CONFIG_GRPC_XDS_*` / `XDS_CLIENT_*` variables.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use clap::builder::BoolishValueParser;
use tollgate_rules::LoadOptions;
use tollgate_server::xds::{XdsOptions, XdsServer};
use tollgate_tls::ClientTlsFiles;
use tonic::metadata::{AsciiMetadataKey, AsciiMetadataValue};

use crate::CommandError;
use crate::upstream_env::UpstreamEnv;

use super::args::{parse_cap, parse_timeout};

/// The most bytes of one update by default (gRPC's usual message bound).
pub const DEFAULT_MAX_UPDATE_BYTES: usize = 4 << 20;

/// Upstream's `CONFIG_GRPC_XDS_SERVER_URL` default.
const UPSTREAM_SERVER_URL: &str = "localhost:18000";

/// Upstream's `CONFIG_GRPC_XDS_NODE_ID` default.
const UPSTREAM_NODE_ID: &str = "default";

/// Limits from an xDS management server instead of limits files.
#[derive(Args, Debug, Clone)]
pub struct XdsArgs {
    /// Take the limits from this xDS management server (`host:port`,
    /// `http://host:port` or `https://host:port`): `RateLimitConfig`
    /// resources over the Aggregated Discovery Service, as
    /// envoyproxy/ratelimit's CONFIG_TYPE=GRPC_XDS_SOTW with
    /// CONFIG_GRPC_XDS_SERVER_URL. Excludes --config. `serve` listens once
    /// the first config has arrived (unless --force-start-without-initial-config).
    #[arg(long, env = "TOLLGATE_CONFIG_XDS", value_name = "URL")]
    pub config_xds: Option<String>,
    /// The node id sent to the xDS server (CONFIG_GRPC_XDS_NODE_ID) [default: default].
    #[arg(long, env = "TOLLGATE_CONFIG_XDS_NODE_ID", value_name = "ID")]
    pub config_xds_node_id: Option<String>,
    /// The node metadata sent to the xDS server, `KEY=VALUE` pairs separated
    /// by commas (CONFIG_GRPC_XDS_NODE_METADATA).
    #[arg(
        long,
        env = "TOLLGATE_CONFIG_XDS_NODE_METADATA",
        value_name = "KEY=VALUE,…"
    )]
    pub config_xds_node_metadata: Option<String>,
    /// gRPC metadata sent on the xDS stream, `NAME:VALUE` (repeatable, or
    /// comma-separated; CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS).
    #[arg(
        long,
        env = "TOLLGATE_CONFIG_XDS_HEADERS",
        value_name = "NAME:VALUE",
        value_delimiter = ','
    )]
    pub config_xds_header: Vec<String>,
    /// Connect to the xDS server over TLS (CONFIG_GRPC_XDS_SERVER_USE_TLS);
    /// implied by an `https://` URL.
    #[arg(long, env = "TOLLGATE_CONFIG_XDS_TLS", value_parser = BoolishValueParser::new())]
    pub config_xds_tls: bool,
    /// The CA bundle the xDS server's certificate must chain to
    /// (CONFIG_GRPC_XDS_SERVER_TLS_CACERT) [default: the system's trust store].
    #[arg(long, env = "TOLLGATE_CONFIG_XDS_TLS_CA", value_name = "PATH")]
    pub config_xds_tls_ca: Option<PathBuf>,
    /// A client certificate chain to present to the xDS server (mutual TLS;
    /// CONFIG_GRPC_XDS_CLIENT_TLS_CERT); needs --config-xds-tls-key.
    #[arg(long, env = "TOLLGATE_CONFIG_XDS_TLS_CERT", value_name = "PATH")]
    pub config_xds_tls_cert: Option<PathBuf>,
    /// The client certificate's private key (CONFIG_GRPC_XDS_CLIENT_TLS_KEY).
    #[arg(long, env = "TOLLGATE_CONFIG_XDS_TLS_KEY", value_name = "PATH")]
    pub config_xds_tls_key: Option<PathBuf>,
    /// The name the xDS server's certificate must carry
    /// (CONFIG_GRPC_XDS_SERVER_TLS_SAN) [default: the URL's host].
    #[arg(long, env = "TOLLGATE_CONFIG_XDS_TLS_SERVER_NAME", value_name = "NAME")]
    pub config_xds_tls_server_name: Option<String>,
    /// The bound of the first wait before reconnecting to the xDS server,
    /// doubled after each failure; each wait is drawn between half its bound
    /// and the bound (XDS_CLIENT_BACKOFF_INITIAL_INTERVAL, else
    /// CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL) [default: 1s].
    #[arg(long, env = "TOLLGATE_CONFIG_XDS_BACKOFF_INITIAL", value_name = "DURATION", value_parser = parse_timeout)]
    pub config_xds_backoff_initial: Option<Duration>,
    /// The longest wait before reconnecting (XDS_CLIENT_BACKOFF_MAX_INTERVAL) [default: 30s].
    #[arg(long, env = "TOLLGATE_CONFIG_XDS_BACKOFF_MAX", value_name = "DURATION", value_parser = parse_timeout)]
    pub config_xds_backoff_max: Option<Duration>,
    /// The most bytes of one update from the xDS server; a bigger one is
    /// refused (NACKed) and the running config kept
    /// (XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES) [default: 4194304].
    #[arg(long, env = "TOLLGATE_CONFIG_XDS_MAX_UPDATE_BYTES", value_name = "BYTES", value_parser = parse_cap)]
    pub config_xds_max_update_bytes: Option<usize>,
}

/// Where and how `serve` takes its limits from an xDS server, flags and upstream's variables combined.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct XdsSetting {
    /// `http://host:port` or `https://host:port`.
    pub uri: String,
    /// TLS towards the server, if on.
    pub tls: Option<ClientTlsFiles>,
    pub node_id: String,
    pub node_metadata: Vec<(String, String)>,
    pub headers: Vec<(String, String)>,
    pub backoff_first: Duration,
    pub backoff_longest: Duration,
    pub max_update_bytes: usize,
}

impl XdsSetting {
    /// The client's options, reading the TLS files now (an unreadable one stops the start).
    pub fn options(&self, load: LoadOptions) -> Result<XdsOptions, CommandError> {
        let tls = self
            .tls
            .as_ref()
            .map(|files| files.connector(&[b"h2"]))
            .transpose()
            .map_err(|error| CommandError::Usage(format!("TLS towards the xDS server: {error}")))?;
        let headers = self
            .headers
            .iter()
            .map(|(name, value)| {
                let key = AsciiMetadataKey::from_bytes(name.as_bytes());
                let value = AsciiMetadataValue::try_from(value.as_str());
                match (key, value) {
                    (Ok(key), Ok(value)) => Ok((key, value)),
                    _ => Err(CommandError::Usage(format!(
                        "xDS header {name:?} is not a gRPC metadata name and ASCII value"
                    ))),
                }
            })
            .collect::<Result<_, _>>()?;
        Ok(XdsOptions {
            server: XdsServer {
                uri: self.uri.clone(),
                tls,
            },
            node_id: self.node_id.clone(),
            node_metadata: self.node_metadata.clone(),
            headers,
            backoff_first: self.backoff_first,
            backoff_longest: self.backoff_longest,
            max_update_bytes: self.max_update_bytes,
            load,
        })
    }
}

/// Whether `value` is one of upstream's config types Tollgate has (`FILE`, `GRPC_XDS_SOTW`).
pub fn is_known_config_type(value: &str) -> bool {
    value.eq_ignore_ascii_case("FILE") || value.eq_ignore_ascii_case("GRPC_XDS_SOTW")
}

/// The xDS setting, if the limits come from an xDS server: `--config-xds`,
/// or upstream's `CONFIG_TYPE=GRPC_XDS_SOTW`. Without it, upstream's xDS
/// variables that are set are added to `notes` (they change nothing).
pub fn xds_setting(
    args: &XdsArgs,
    env: &UpstreamEnv,
    config: Option<&PathBuf>,
    notes: &mut Vec<String>,
) -> Result<Option<XdsSetting>, CommandError> {
    let upstream_xds = env
        .get("CONFIG_TYPE")
        .is_some_and(|t| t.trim().eq_ignore_ascii_case("GRPC_XDS_SOTW"));
    if args.config_xds.is_none() && !upstream_xds {
        for name in XDS_VARIABLES {
            if env.get(name).is_some() {
                notes.push(format!(
                    "{name} is set and changes nothing: read only with CONFIG_TYPE=GRPC_XDS_SOTW (or --config-xds)"
                ));
            }
        }
        return Ok(None);
    }
    if let Some(path) = config {
        return Err(CommandError::Usage(format!(
            "--config {} and an xDS server (--config-xds or CONFIG_TYPE=GRPC_XDS_SOTW) both say where the limits come from; keep one",
            path.display()
        )));
    }
    let url = args
        .config_xds
        .clone()
        .or_else(|| {
            env.get("CONFIG_GRPC_XDS_SERVER_URL")
                .map(|u| u.trim().to_owned())
        })
        .unwrap_or_else(|| UPSTREAM_SERVER_URL.to_owned());
    let use_tls =
        args.config_xds_tls || env.bool("CONFIG_GRPC_XDS_SERVER_USE_TLS")?.unwrap_or(false);
    let (uri, tls_on) = server_uri(&url, use_tls)?;
    let path = |flag: &Option<PathBuf>, name: &str| {
        flag.clone()
            .or_else(|| env.get(name).map(|v| PathBuf::from(v.trim())))
    };
    let tls_files = ClientTlsFiles {
        ca: path(&args.config_xds_tls_ca, "CONFIG_GRPC_XDS_SERVER_TLS_CACERT"),
        cert: path(&args.config_xds_tls_cert, "CONFIG_GRPC_XDS_CLIENT_TLS_CERT"),
        key: path(&args.config_xds_tls_key, "CONFIG_GRPC_XDS_CLIENT_TLS_KEY"),
        server_name: args.config_xds_tls_server_name.clone().or_else(|| {
            env.get("CONFIG_GRPC_XDS_SERVER_TLS_SAN")
                .map(|v| v.trim().to_owned())
        }),
    };
    if !tls_on && tls_files != ClientTlsFiles::default() {
        return Err(CommandError::Usage(
            "TLS files for the xDS server are set but TLS is off: use an https:// URL, --config-xds-tls or CONFIG_GRPC_XDS_SERVER_USE_TLS=true".to_owned(),
        ));
    }
    let node_id = args
        .config_xds_node_id
        .clone()
        .or_else(|| {
            env.get("CONFIG_GRPC_XDS_NODE_ID")
                .map(|v| v.trim().to_owned())
        })
        .unwrap_or_else(|| UPSTREAM_NODE_ID.to_owned());
    let node_metadata = match (
        &args.config_xds_node_metadata,
        env.get("CONFIG_GRPC_XDS_NODE_METADATA"),
    ) {
        (Some(text), _) => pairs(text, '=', "--config-xds-node-metadata")?,
        (None, Some(text)) => pairs(text, '=', "CONFIG_GRPC_XDS_NODE_METADATA")?,
        (None, None) => Vec::new(),
    };
    let headers = if args.config_xds_header.is_empty() {
        match env.get("CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS") {
            Some(text) => pairs(text, ':', "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS")?,
            None => Vec::new(),
        }
    } else {
        pairs(
            &args.config_xds_header.join(","),
            ':',
            "--config-xds-header",
        )?
    };
    let duration = |name: &str| -> Result<Option<Duration>, CommandError> {
        env.get(name)
            .map(|value| {
                parse_timeout(value.trim())
                    .map_err(|error| CommandError::Usage(format!("{name}={value:?}: {error}")))
            })
            .transpose()
    };
    let backoff_first = match args.config_xds_backoff_initial {
        Some(first) => first,
        None => duration("XDS_CLIENT_BACKOFF_INITIAL_INTERVAL")?
            .or(duration("CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL")?)
            .unwrap_or(Duration::from_secs(1)),
    };
    let backoff_longest = match args.config_xds_backoff_max {
        Some(longest) => longest,
        None => duration("XDS_CLIENT_BACKOFF_MAX_INTERVAL")?
            .unwrap_or(Duration::from_secs(30).max(backoff_first)),
    };
    if backoff_longest < backoff_first {
        return Err(CommandError::Usage(format!(
            "the xDS reconnection's longest wait ({backoff_longest:?}) is shorter than its first ({backoff_first:?})"
        )));
    }
    let max_update_bytes = match (
        args.config_xds_max_update_bytes,
        env.get("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES"),
    ) {
        (Some(bytes), _) => bytes,
        (None, Some(value)) => parse_cap(value).map_err(|error| {
            CommandError::Usage(format!("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES: {error}"))
        })?,
        (None, None) => DEFAULT_MAX_UPDATE_BYTES,
    };
    Ok(Some(XdsSetting {
        uri,
        tls: tls_on.then_some(tls_files),
        node_id,
        node_metadata,
        headers,
        backoff_first,
        backoff_longest,
        max_update_bytes,
    }))
}

/// Upstream's xDS variables other than `CONFIG_TYPE`.
pub const XDS_VARIABLES: &[&str] = &[
    "CONFIG_GRPC_XDS_SERVER_URL",
    "CONFIG_GRPC_XDS_NODE_ID",
    "CONFIG_GRPC_XDS_NODE_METADATA",
    "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS",
    "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL",
    "CONFIG_GRPC_XDS_SERVER_USE_TLS",
    "CONFIG_GRPC_XDS_CLIENT_TLS_CERT",
    "CONFIG_GRPC_XDS_CLIENT_TLS_KEY",
    "CONFIG_GRPC_XDS_SERVER_TLS_CACERT",
    "CONFIG_GRPC_XDS_SERVER_TLS_SAN",
    "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL",
    "XDS_CLIENT_BACKOFF_MAX_INTERVAL",
    "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES",
];

/// The URI tonic connects to, and whether it is TLS: `host:port` takes
/// `use_tls`; `http://` and `https://` say it themselves (and must agree).
fn server_uri(url: &str, use_tls: bool) -> Result<(String, bool), CommandError> {
    let url = url.trim().trim_end_matches('/');
    let (tls, rest) = if let Some(rest) = url.strip_prefix("https://") {
        (true, rest)
    } else if let Some(rest) = url.strip_prefix("http://") {
        if use_tls {
            return Err(CommandError::Usage(format!(
                "xDS server {url:?} is http:// but TLS is asked for; use https://"
            )));
        }
        (false, rest)
    } else {
        (use_tls, url)
    };
    let authority = rest
        .parse::<http::uri::Authority>()
        .ok()
        .filter(|a| a.port().is_some() && rest == a.as_str());
    let Some(authority) = authority else {
        return Err(CommandError::Usage(format!(
            "xDS server {url:?} is not host:port, http://host:port or https://host:port"
        )));
    };
    let scheme = if tls { "https" } else { "http" };
    Ok((format!("{scheme}://{authority}"), tls))
}

/// `a=1,b=2` (or `a:1` with `separator` `:`) as pairs; an entry without the separator is an error naming `origin`.
fn pairs(text: &str, separator: char, origin: &str) -> Result<Vec<(String, String)>, CommandError> {
    text.split(',')
        .map(str::trim)
        .filter(|entry| !entry.is_empty())
        .map(|entry| match entry.split_once(separator) {
            Some((key, value)) if !key.trim().is_empty() => {
                Ok((key.trim().to_owned(), value.trim().to_owned()))
            }
            _ => Err(CommandError::Usage(format!(
                "{origin}: {entry:?} is not KEY{separator}VALUE"
            ))),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_addresses_take_a_scheme_or_the_tls_switch() {
        assert_eq!(
            server_uri("localhost:18000", false).unwrap(),
            ("http://localhost:18000".to_owned(), false)
        );
        assert_eq!(
            server_uri("eg.example:18001", true).unwrap(),
            ("https://eg.example:18001".to_owned(), true)
        );
        assert_eq!(
            server_uri("https://eg.example:18001", false).unwrap(),
            ("https://eg.example:18001".to_owned(), true)
        );
        assert!(server_uri("http://eg.example:18001", true).is_err());
        assert!(server_uri("eg.example", false).is_err());
        assert!(server_uri("dns:///eg.example:1/x", false).is_err());
    }

    #[test]
    fn metadata_and_headers_are_pairs_and_a_bare_entry_is_named() {
        assert_eq!(
            pairs("a=1, b=x=y", '=', "M").unwrap(),
            vec![
                ("a".to_owned(), "1".to_owned()),
                ("b".to_owned(), "x=y".to_owned())
            ]
        );
        let error = pairs("a=1,oops", '=', "CONFIG_GRPC_XDS_NODE_METADATA").unwrap_err();
        assert!(error.to_string().contains("\"oops\""), "{error}");
    }
}
