//! Where the counters live: a single node, a cluster or a Sentinel-managed master.

use std::fmt;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClientBuilder;
use redis::sentinel::{SentinelClient, SentinelNodeConnectionInfo, SentinelServerType};
use redis::{Client, ErrorKind, IntoConnectionInfo, RedisError, RedisResult, TlsCertificates};

use crate::Connection;

/// A Redis deployment, parsed from a URL.
#[derive(Clone, PartialEq, Eq)]
pub enum RedisTarget {
    /// One node: `redis://[user:password@]host:port[/db]`, `rediss://…` (TLS), `unix:///path`.
    Single(String),
    /// A cluster: `redis-cluster://[user:password@]host:port,host:port,…` (seed nodes).
    Cluster {
        /// `redis://[auth@]host:port` for each seed node.
        nodes: Vec<String>,
    },
    /// A master found through Sentinel:
    /// `redis-sentinel://[user:password@]master-name@host:port,host:port,…`.
    Sentinel {
        /// The name the sentinels know the master by.
        master: String,
        /// `redis://host:port` of each sentinel.
        sentinels: Vec<String>,
        /// `redis://[auth@]` settings used for the master itself.
        auth: Option<String>,
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
        if let Some(rest) = url.strip_prefix("redis-cluster://") {
            let (auth, hosts) = split_auth(rest);
            let nodes: Vec<String> = hosts
                .split(',')
                .filter(|h| !h.is_empty())
                .map(|h| {
                    format!(
                        "redis://{}{h}",
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
        if let Some(rest) = url.strip_prefix("redis-sentinel://") {
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
                .map(|h| format!("redis://{h}"))
                .collect();
            if sentinels.is_empty() {
                return bad("names no sentinel");
            }
            return Ok(RedisTarget::Sentinel {
                master: master.to_owned(),
                sentinels,
                auth,
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
        bad("must start with redis://, rediss://, unix://, redis-cluster:// or redis-sentinel://")
    }

    /// The URL with any password replaced by `***`.
    pub fn redacted(&self) -> String {
        match self {
            RedisTarget::Single(url) => redact(url),
            RedisTarget::Cluster { nodes } => format!(
                "redis-cluster://{}",
                nodes
                    .iter()
                    .map(|n| redact(n).trim_start_matches("redis://").to_owned())
                    .collect::<Vec<_>>()
                    .join(",")
            ),
            RedisTarget::Sentinel {
                master, sentinels, ..
            } => format!(
                "redis-sentinel://{master}@{}",
                sentinels
                    .iter()
                    .map(|s| s.trim_start_matches("redis://"))
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
    ) -> RedisResult<Connection> {
        let connect_timeout = connect_timeout(timeout);
        if tls.is_some() && !matches!(self, RedisTarget::Single(_)) {
            return Err(RedisError::from((
                ErrorKind::InvalidClientConfig,
                "client certificates are supported with a single node only",
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
                let client = ClusterClientBuilder::new(nodes.iter().map(String::as_str))
                    .connection_timeout(connect_timeout)
                    .response_timeout(connect_timeout)
                    .retries(2)
                    .build()?;
                Ok(Connection::Cluster(client.get_async_connection().await?))
            }
            RedisTarget::Sentinel {
                master,
                sentinels,
                auth,
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

/// How long connecting (and the first `PING`) may take: never less than a second.
pub(crate) fn connect_timeout(timeout: Duration) -> Duration {
    timeout.max(Duration::from_secs(1))
}

/// A connection manager that reconnects by itself, with short backoff.
async fn managed(client: Client, connect_timeout: Duration) -> RedisResult<Connection> {
    let config = ConnectionManagerConfig::new()
        .set_connection_timeout(Some(connect_timeout))
        .set_number_of_retries(1)
        .set_min_delay(Duration::from_millis(10))
        .set_max_delay(Duration::from_millis(500));
    Ok(Connection::Single(
        ConnectionManager::new_with_config(client, config).await?,
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
                auth: None
            }
        );
        let e = RedisTarget::parse("memcached://x").unwrap_err().0;
        assert!(e.contains("must start with redis://"), "{e}");
        let e = RedisTarget::parse("redis-cluster://").unwrap_err().0;
        assert!(e.contains("names no cluster node"), "{e}");
        let e = RedisTarget::parse("redis-sentinel://s1:1").unwrap_err().0;
        assert!(e.contains("names no master"), "{e}");
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
