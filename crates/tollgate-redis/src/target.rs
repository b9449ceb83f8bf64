//! Where the counters live: a single node, a cluster or a Sentinel-managed master.

use std::fmt;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClientBuilder;
use redis::sentinel::{
    SentinelClient, SentinelClientBuilder, SentinelNodeConnectionInfo, SentinelServerType,
};
use redis::{
    Client, ConnectionAddr, ErrorKind, IntoConnectionInfo, RedisError, RedisResult,
    TlsCertificates, TlsMode,
};

use crate::Connection;
use crate::worker_connection::WorkerConnections;

/// A store's connection, and for a single node what a worker needs to open its own.
pub(crate) type Connected = (Connection, Option<std::sync::Arc<WorkerConnections>>);

/// A Redis deployment, parsed from a URL.
#[derive(Clone, PartialEq, Eq)]
pub enum RedisTarget {
    /// One node: `redis://[user:password@]host:port[/db]`, `rediss://…` (TLS), `unix:///path`.
    Single(String),
    /// A cluster: `redis-cluster://[user:password@]host:port,host:port,…`
    /// (seed nodes), or `rediss-cluster://…` for TLS to every node.
    Cluster {
        /// `redis://[auth@]host:port` (`rediss://` over TLS) for each seed node.
        nodes: Vec<String>,
    },
    /// A master found through Sentinel:
    /// `redis-sentinel://[user:password@]master-name@host:port,host:port,…`,
    /// or `rediss-sentinel://…` for TLS to the sentinels and the master.
    Sentinel {
        /// The name the sentinels know the master by.
        master: String,
        /// `redis://host:port` (`rediss://` over TLS) of each sentinel.
        sentinels: Vec<String>,
        /// `redis://[auth@]` settings used for the master itself.
        auth: Option<String>,
        /// Whether the sentinels and the master are spoken to over TLS.
        tls: bool,
    },
}

impl fmt::Debug for RedisTarget {
    /// Prints the target with any password hidden.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.redacted())
    }
}

/// Why a store URL was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TargetError(pub String);

impl fmt::Display for TargetError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for TargetError {}

impl RedisTarget {
    /// Parses a store URL; the error names what is wrong with it.
    pub fn parse(url: &str) -> Result<Self, TargetError> {
        let bad = |why: &str| Err(TargetError(format!("store URL {:?}: {why}", redact(url))));
        if let Some((node_scheme, rest)) = strip_tls_prefix(url, "cluster") {
            let (auth, hosts) = split_auth(rest);
            let nodes: Vec<String> = hosts
                .split(',')
                .filter(|h| !h.is_empty())
                .map(|h| {
                    format!(
                        "{node_scheme}://{}{h}",
                        auth.map(|a| format!("{a}@")).unwrap_or_default()
                    )
                })
                .collect();
            if nodes.is_empty() {
                return bad("names no cluster node (expected redis-cluster://host:port,host:port)");
            }
            for node in &nodes {
                if node.as_str().into_connection_info().is_err() {
                    return bad("a cluster node is not host:port");
                }
            }
            return Ok(RedisTarget::Cluster { nodes });
        }
        if let Some((node_scheme, rest)) = strip_tls_prefix(url, "sentinel") {
            let Some((front, hosts)) = rest.rsplit_once('@') else {
                return bad("names no master (expected redis-sentinel://master@host:port,…)");
            };
            let (auth, master) = match front.rsplit_once('@') {
                Some((auth, master)) => (Some(auth.to_owned()), master),
                None => (None, front),
            };
            if master.is_empty() {
                return bad("the master name is empty");
            }
            let sentinels: Vec<String> = hosts
                .split(',')
                .filter(|h| !h.is_empty())
                .map(|h| format!("{node_scheme}://{h}"))
                .collect();
            if sentinels.is_empty() {
                return bad("names no sentinel");
            }
            for sentinel in &sentinels {
                if sentinel.as_str().into_connection_info().is_err() {
                    return bad("a sentinel is not host:port");
                }
            }
            return Ok(RedisTarget::Sentinel {
                master: master.to_owned(),
                sentinels,
                auth,
                tls: node_scheme == "rediss",
            });
        }
        if ["redis://", "rediss://", "unix://", "redis+unix://"]
            .iter()
            .any(|s| url.starts_with(s))
        {
            return match url.into_connection_info() {
                Ok(_) => Ok(RedisTarget::Single(url.to_owned())),
                Err(e) => bad(&e.to_string()),
            };
        }
        bad(
            "must start with redis://, rediss://, unix://, redis-cluster://, rediss-cluster://, \
             redis-sentinel:// or rediss-sentinel://",
        )
    }

    /// The URL with any password replaced by `***`.
    pub fn redacted(&self) -> String {
        match self {
            RedisTarget::Single(url) => redact(url),
            RedisTarget::Cluster { nodes } => format!(
                "{}-cluster://{}",
                node_scheme(nodes),
                nodes
                    .iter()
                    .map(|n| without_scheme(&redact(n)).to_owned())
                    .collect::<Vec<_>>()
                    .join(",")
            ),
            RedisTarget::Sentinel {
                master, sentinels, ..
            } => format!(
                "{}-sentinel://{master}@{}",
                node_scheme(sentinels),
                sentinels
                    .iter()
                    .map(|s| without_scheme(s))
                    .collect::<Vec<_>>()
                    .join(",")
            ),
        }
    }

    /// Opens the multiplexed connection for this target.
    pub(crate) async fn connect(
        &self,
        timeout: Duration,
        tls: Option<TlsCertificates>,
    ) -> RedisResult<Connected> {
        let connect_timeout = connect_timeout(timeout);
        let speaks_tls = match self {
            RedisTarget::Single(_) => true,
            RedisTarget::Cluster { nodes } => node_scheme(nodes) == "rediss",
            RedisTarget::Sentinel { tls, .. } => *tls,
        };
        if tls.is_some() && !speaks_tls {
            return Err(RedisError::from((
                ErrorKind::InvalidClientConfig,
                "TLS certificates need a TLS store URL (rediss-cluster://, rediss-sentinel://)",
            )));
        }
        match self {
            RedisTarget::Single(url) => {
                let client = match tls {
                    Some(certificates) => Client::build_with_tls(url.as_str(), certificates)?,
                    None => Client::open(url.as_str())?,
                };
                managed(client, connect_timeout).await
            }
            RedisTarget::Cluster { nodes } => {
                // The first node's scheme sets TLS for every node the cluster names.
                let mut builder = ClusterClientBuilder::new(nodes.iter().map(String::as_str))
                    .connection_timeout(connect_timeout)
                    .response_timeout(connect_timeout)
                    .retries(2);
                if let Some(certificates) = tls {
                    builder = builder.certs(certificates);
                }
                Ok((
                    Connection::Cluster(builder.build()?.get_async_connection().await?),
                    None,
                ))
            }
            RedisTarget::Sentinel {
                master,
                sentinels,
                auth,
                tls: true,
            } => {
                let mut sentinel = tls_sentinel_client(master, sentinels, auth.as_deref(), tls)?;
                let client = sentinel.async_get_client().await?;
                managed(client, connect_timeout).await
            }
            RedisTarget::Sentinel {
                master,
                sentinels,
                auth,
                tls: false,
            } => {
                let mut node = SentinelNodeConnectionInfo::default();
                if let Some(auth) = auth {
                    let info = format!("redis://{auth}@localhost").into_connection_info()?;
                    node = node.set_redis_connection_info(info.redis_settings().clone());
                }
                let mut sentinel = SentinelClient::build(
                    sentinels.iter().map(String::as_str).collect(),
                    master.as_str(),
                    Some(node),
                    SentinelServerType::Master,
                )?;
                let client = sentinel.async_get_client().await?;
                managed(client, connect_timeout).await
            }
        }
    }
}

/// A Sentinel client speaking TLS to the sentinels and to the master they
/// name, presenting `certificates` (a CA to trust, a client certificate) to both.
fn tls_sentinel_client(
    master: &str,
    sentinels: &[String],
    auth: Option<&str>,
    certificates: Option<TlsCertificates>,
) -> RedisResult<SentinelClient> {
    let addresses = sentinels
        .iter()
        .map(|url| Ok(url.as_str().into_connection_info()?.addr().clone()))
        .collect::<RedisResult<Vec<ConnectionAddr>>>()?;
    let mut builder = SentinelClientBuilder::new(addresses, master, SentinelServerType::Master)?
        .set_client_to_sentinel_tls_mode(TlsMode::Secure)
        .set_client_to_redis_tls_mode(TlsMode::Secure);
    if let Some(auth) = auth {
        let info = format!("redis://{auth}@localhost").into_connection_info()?;
        if let Some(username) = info.redis_settings().username() {
            builder = builder.set_client_to_redis_username(username);
        }
        if let Some(password) = info.redis_settings().password() {
            builder = builder.set_client_to_redis_password(password);
        }
    }
    if let Some(certificates) = certificates {
        builder = builder
            .set_client_to_sentinel_certificates(certificates.clone())
            .set_client_to_redis_certificates(certificates);
    }
    builder.build()
}

/// `redis-cluster://` or `redis-sentinel://` (`which`), or their TLS forms
/// with `rediss`: the scheme of each node's URL, and what follows `://`.
fn strip_tls_prefix<'a>(url: &'a str, which: &str) -> Option<(&'static str, &'a str)> {
    ["redis", "rediss"].into_iter().find_map(|scheme| {
        url.strip_prefix(&format!("{scheme}-{which}://"))
            .map(|rest| (scheme, rest))
    })
}

/// `rediss` when the first of `urls` speaks TLS, else `redis`.
fn node_scheme(urls: &[String]) -> &'static str {
    match urls.first() {
        Some(url) if url.starts_with("rediss://") => "rediss",
        _ => "redis",
    }
}

/// `url` without its `redis://` or `rediss://`.
fn without_scheme(url: &str) -> &str {
    url.split_once("://").map_or(url, |(_, rest)| rest)
}

/// How long connecting (and the first `PING`) may take: never less than a second.
pub(crate) fn connect_timeout(timeout: Duration) -> Duration {
    timeout.max(Duration::from_secs(1))
}

/// A connection manager that reconnects by itself, with short backoff
/// (and the same settings for the connections of workers).
///
/// It has no response timeout of its own: the store bounds every call on
/// it with its own timeout (`--store-timeout`, a [`StoreError::Timeout`]
/// when it passes), so a second timer per call would only cost (one more
/// timer entry set and cleared per check). The manager's default (500 ms)
/// also cut a simulation's large shares calls (a leaving instance's tens of
/// thousands of keys) short whatever the store's timeout said. A timeout
/// never made the manager reconnect (it is not a dropped connection).
///
/// [`StoreError::Timeout`]: tollgate_store::StoreError::Timeout
async fn managed(client: Client, connect_timeout: Duration) -> RedisResult<Connected> {
    let config = ConnectionManagerConfig::new()
        .set_connection_timeout(Some(connect_timeout))
        .set_response_timeout(None)
        .set_number_of_retries(1)
        .set_min_delay(Duration::from_millis(10))
        .set_max_delay(Duration::from_millis(500));
    let workers = WorkerConnections::new(client.clone(), config.clone());
    Ok((
        Connection::Single(ConnectionManager::new_with_config(client, config).await?),
        Some(std::sync::Arc::new(workers)),
    ))
}

/// Splits `[auth@]rest` at its last `@`.
fn split_auth(s: &str) -> (Option<&str>, &str) {
    match s.rsplit_once('@') {
        Some((auth, rest)) => (Some(auth), rest),
        None => (None, s),
    }
}

/// `url` with every password hidden: the `user:password@` part of
/// `scheme://user:password@…`, and a `pass=` or `password=` in its query
/// (`unix:///path?pass=…`).
fn redact(url: &str) -> String {
    let (head, query) = match url.split_once('?') {
        Some((head, query)) => (head, Some(query)),
        None => (url, None),
    };
    let mut out = match head.split_once("://") {
        Some((scheme, rest)) => match rest.rsplit_once('@') {
            Some((auth, host)) => {
                let user = auth.split_once(':').map_or("", |(u, _)| u);
                format!("{scheme}://{user}:***@{host}")
            }
            None => head.to_owned(),
        },
        None => head.to_owned(),
    };
    if let Some(query) = query {
        let pairs: Vec<String> = query
            .split('&')
            .map(|pair| match pair.split_once('=') {
                Some((name, _)) if name == "pass" || name == "password" => format!("{name}=***"),
                _ => pair.to_owned(),
            })
            .collect();
        out.push('?');
        out.push_str(&pairs.join("&"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_form_parses_and_bad_ones_say_why() {
        assert_eq!(
            RedisTarget::parse("redis://127.0.0.1:6379/0").unwrap(),
            RedisTarget::Single("redis://127.0.0.1:6379/0".into())
        );
        assert!(matches!(
            RedisTarget::parse("rediss://u:p@h:6380").unwrap(),
            RedisTarget::Single(_)
        ));
        assert_eq!(
            RedisTarget::parse("redis-cluster://u:p@a:1,b:2").unwrap(),
            RedisTarget::Cluster {
                nodes: vec!["redis://u:p@a:1".into(), "redis://u:p@b:2".into()]
            }
        );
        assert_eq!(
            RedisTarget::parse("redis-sentinel://mymaster@s1:26379,s2:26379").unwrap(),
            RedisTarget::Sentinel {
                master: "mymaster".into(),
                sentinels: vec!["redis://s1:26379".into(), "redis://s2:26379".into()],
                auth: None,
                tls: false,
            }
        );
        // The TLS forms: every node, and every sentinel and the master, over TLS.
        assert_eq!(
            RedisTarget::parse("rediss-cluster://u:p@a:1,b:2").unwrap(),
            RedisTarget::Cluster {
                nodes: vec!["rediss://u:p@a:1".into(), "rediss://u:p@b:2".into()]
            }
        );
        assert_eq!(
            RedisTarget::parse("rediss-sentinel://:pw@mymaster@s1:26379").unwrap(),
            RedisTarget::Sentinel {
                master: "mymaster".into(),
                sentinels: vec!["rediss://s1:26379".into()],
                auth: Some(":pw".into()),
                tls: true,
            }
        );
        let e = RedisTarget::parse("memcached://x").unwrap_err().0;
        assert!(e.contains("must start with redis://"), "{e}");
        let e = RedisTarget::parse("redis-cluster://").unwrap_err().0;
        assert!(e.contains("names no cluster node"), "{e}");
        let e = RedisTarget::parse("redis-sentinel://s1:1").unwrap_err().0;
        assert!(e.contains("names no master"), "{e}");
        let e = RedisTarget::parse("rediss-sentinel://m@s1:port")
            .unwrap_err()
            .0;
        assert!(e.contains("a sentinel is not host:port"), "{e}");
        let e = RedisTarget::parse("redis-clusters://a:1").unwrap_err().0;
        assert!(e.contains("rediss-cluster://"), "{e}");
    }

    #[test]
    fn a_tls_target_prints_its_scheme_without_its_password() {
        for (url, printed) in [
            (
                "rediss-cluster://alice:secret@a:1,b:2",
                "rediss-cluster://alice:***@a:1,alice:***@b:2",
            ),
            ("redis-cluster://a:1,b:2", "redis-cluster://a:1,b:2"),
            (
                "rediss-sentinel://:secret@m@s1:1,s2:2",
                "rediss-sentinel://m@s1:1,s2:2",
            ),
            ("redis-sentinel://m@s1:1", "redis-sentinel://m@s1:1"),
        ] {
            let target = RedisTarget::parse(url).unwrap();
            assert_eq!(target.redacted(), printed);
        }
    }

    #[test]
    fn passwords_never_print() {
        let t = RedisTarget::parse("redis://alice:secret@h:1").unwrap();
        assert_eq!(format!("{t:?}"), "redis://alice:***@h:1");
        let t = RedisTarget::parse("redis-cluster://alice:secret@a:1,b:2").unwrap();
        assert!(!format!("{t:?}").contains("secret"));
        // A unix socket's password is in its query, as upstream's REDIS_AUTH becomes.
        let t = RedisTarget::parse("unix:///run/redis.sock?db=2&pass=s3cret").unwrap();
        assert_eq!(format!("{t:?}"), "unix:///run/redis.sock?db=2&pass=***");
        let t = RedisTarget::parse("redis://h:1/0?password=s3cret&protocol=resp3").unwrap();
        assert_eq!(
            format!("{t:?}"),
            "redis://h:1/0?password=***&protocol=resp3"
        );
        let e = RedisTarget::parse("memcached://u:s3cret@h?pass=s3cret")
            .unwrap_err()
            .0;
        assert!(!e.contains("s3cret"), "{e}");
    }
}
