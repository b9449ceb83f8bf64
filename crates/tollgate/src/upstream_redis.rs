//! The Redis store upstream's variables describe: `REDIS_URL` and its companions turned into a store URL.
//!
//! `REDIS_TYPE` picks the deployment (`single`, `cluster`, `sentinel`, any
//! case); `REDIS_URL` is `host:port` (or a socket path with
//! `REDIS_SOCKET_TYPE=unix`), `host:port,host:port,…` for a cluster and
//! `master-name,host:port,…` for Sentinel. `REDIS_AUTH` is `password` or
//! `user:password`; `REDIS_TLS=true` speaks TLS (to every node of a cluster,
//! to the sentinels and the master), trusting `REDIS_TLS_CACERT` (else the
//! system's roots) and presenting `REDIS_TLS_CLIENT_CERT` and
//! `REDIS_TLS_CLIENT_KEY`. A `REDIS_URL` that already has a scheme
//! (`redis://…`) is taken as Tollgate's store URL.

use std::path::Path;

use tollgate_redis::{ClientTlsConfig, TlsCertificates};

use crate::CommandError;
use crate::upstream_env::UpstreamEnv;

/// Where counters go according to upstream's variables.
#[derive(Clone, Debug, PartialEq)]
pub struct UpstreamStore {
    /// Tollgate's store URL.
    pub url: String,
    /// The TLS files, read, when `REDIS_TLS` names any.
    pub tls: Option<TlsFiles>,
}

/// The certificate files `REDIS_TLS_*` name, read at start.
#[derive(Clone, Debug, PartialEq)]
pub struct TlsFiles {
    /// The client certificate and key (PEM).
    pub client: Option<(Vec<u8>, Vec<u8>)>,
    /// The CA to trust instead of the system's roots (PEM).
    pub ca: Option<Vec<u8>>,
}

impl TlsFiles {
    /// The certificates for the Redis client.
    pub fn certificates(&self) -> TlsCertificates {
        TlsCertificates {
            client_tls: self.client.as_ref().map(|(cert, key)| ClientTlsConfig {
                client_cert: cert.clone(),
                client_key: key.clone(),
            }),
            root_cert: self.ca.clone(),
        }
    }
}

/// The store upstream's variables ask for, or `None` without `REDIS_URL`.
pub fn upstream_store(env: &UpstreamEnv) -> Result<Option<UpstreamStore>, CommandError> {
    let Some(url) = env.get("REDIS_URL").map(str::trim) else {
        return Ok(None);
    };
    if url.contains("://") {
        return Ok(Some(UpstreamStore {
            url: url.to_owned(),
            tls: None,
        }));
    }
    let usage = |message: String| CommandError::Usage(message);
    let tls = env.bool("REDIS_TLS")?.unwrap_or(false);
    let auth = env.get("REDIS_AUTH").map(auth_part).unwrap_or_default();
    let socket = env.get("REDIS_SOCKET_TYPE").unwrap_or("unix").trim();
    let kind = env.get("REDIS_TYPE").unwrap_or("single").trim();
    let scheme = if tls { "rediss" } else { "redis" };
    let url = match kind.to_ascii_lowercase().as_str() {
        "single" => match socket.to_ascii_lowercase().as_str() {
            "unix" if tls => {
                return Err(usage(
                    "REDIS_TLS=true needs REDIS_SOCKET_TYPE=tcp".to_owned(),
                ));
            }
            "unix" => format!("unix://{url}{}", unix_auth(env)),
            "tcp" => format!("{scheme}://{auth}{url}"),
            _ => {
                return Err(usage(format!(
                    "REDIS_SOCKET_TYPE={socket:?} is not tcp or unix"
                )));
            }
        },
        "cluster" => format!("{scheme}-cluster://{auth}{url}"),
        "sentinel" => {
            let Some((master, sentinels)) = url.split_once(',') else {
                return Err(usage(format!(
                    "REDIS_URL={url:?} with REDIS_TYPE=sentinel must be master-name,host:port,…"
                )));
            };
            format!("{scheme}-sentinel://{auth}{master}@{sentinels}")
        }
        _ => {
            return Err(usage(format!(
                "REDIS_TYPE={kind:?} is not single, cluster or sentinel"
            )));
        }
    };
    let tls = if tls { Some(tls_files(env)?) } else { None };
    Ok(Some(UpstreamStore { url, tls }))
}

/// `REDIS_AUTH` (`password` or `user:password`) as the `user:password@` part of a URL.
fn auth_part(auth: &str) -> String {
    let (user, password) = auth.split_once(':').unwrap_or(("", auth));
    format!("{}:{}@", userinfo(user), userinfo(password))
}

/// `text` percent-encoded for a URL's user or password. Form encoding
/// writes a space as `+`, which a URL's userinfo keeps as a `+` (the
/// password would be wrong), so a space is written `%20`; a `+` of the text
/// is already `%2B`.
fn userinfo(text: &str) -> String {
    form_urlencoded::byte_serialize(text.as_bytes())
        .collect::<String>()
        .replace('+', "%20")
}

/// `REDIS_AUTH` as the query of a `unix://` URL.
fn unix_auth(env: &UpstreamEnv) -> String {
    let Some(auth) = env.get("REDIS_AUTH") else {
        return String::new();
    };
    let (user, password) = auth.split_once(':').unwrap_or(("", auth));
    let mut query = form_urlencoded::Serializer::new(String::new());
    if !user.is_empty() {
        query.append_pair("user", user);
    }
    query.append_pair("pass", password);
    format!("?{}", query.finish())
}

/// The files `REDIS_TLS_CLIENT_CERT`, `REDIS_TLS_CLIENT_KEY` and `REDIS_TLS_CACERT` name, read.
fn tls_files(env: &UpstreamEnv) -> Result<TlsFiles, CommandError> {
    let read = |name: &str| -> Result<Option<Vec<u8>>, CommandError> {
        env.get(name)
            .map(|path| {
                std::fs::read(Path::new(path.trim())).map_err(|error| {
                    CommandError::Usage(format!("{name}={path:?} cannot be read: {error}"))
                })
            })
            .transpose()
    };
    let client = match (
        read("REDIS_TLS_CLIENT_CERT")?,
        read("REDIS_TLS_CLIENT_KEY")?,
    ) {
        (Some(cert), Some(key)) => Some((cert, key)),
        (None, None) => None,
        _ => {
            return Err(CommandError::Usage(
                "REDIS_TLS_CLIENT_CERT and REDIS_TLS_CLIENT_KEY go together".to_owned(),
            ));
        }
    };
    Ok(TlsFiles {
        client,
        ca: read("REDIS_TLS_CACERT")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(pairs: &[(&str, &str)]) -> Result<Option<String>, CommandError> {
        upstream_store(&UpstreamEnv::from_pairs(pairs.iter().copied()))
            .map(|store| store.map(|s| s.url))
    }

    #[test]
    fn each_redis_type_and_socket_becomes_a_store_url() {
        assert_eq!(url(&[]).unwrap(), None);
        assert_eq!(
            url(&[("REDIS_URL", "/run/redis.sock")]).unwrap().unwrap(),
            "unix:///run/redis.sock"
        );
        let tcp = [("REDIS_URL", "redis:6379"), ("REDIS_SOCKET_TYPE", "tcp")];
        assert_eq!(url(&tcp).unwrap().unwrap(), "redis://redis:6379");
        let auth = [
            ("REDIS_URL", "redis:6379"),
            ("REDIS_SOCKET_TYPE", "tcp"),
            ("REDIS_AUTH", "alice:p@ss"),
        ];
        assert_eq!(
            url(&auth).unwrap().unwrap(),
            "redis://alice:p%40ss@redis:6379"
        );
        // A space stays a space: `+` in a URL's password is a plus.
        let spaced = [
            ("REDIS_URL", "redis:6379"),
            ("REDIS_SOCKET_TYPE", "tcp"),
            ("REDIS_AUTH", ":a b+c"),
        ];
        assert_eq!(
            url(&spaced).unwrap().unwrap(),
            "redis://:a%20b%2Bc@redis:6379"
        );
        let cluster = [("REDIS_URL", "a:1,b:2"), ("REDIS_TYPE", "CLUSTER")];
        assert_eq!(url(&cluster).unwrap().unwrap(), "redis-cluster://a:1,b:2");
        let sentinel = [
            ("REDIS_URL", "mymaster,s1:26379,s2:26379"),
            ("REDIS_TYPE", "sentinel"),
            ("REDIS_AUTH", "pw"),
        ];
        assert_eq!(
            url(&sentinel).unwrap().unwrap(),
            "redis-sentinel://:pw@mymaster@s1:26379,s2:26379"
        );
        // REDIS_TLS=true with a cluster or Sentinel: TLS to every node.
        let tls = ("REDIS_TLS", "true");
        assert_eq!(
            url(&[cluster[0], cluster[1], tls]).unwrap().unwrap(),
            "rediss-cluster://a:1,b:2"
        );
        assert_eq!(
            url(&[sentinel[0], sentinel[1], sentinel[2], tls])
                .unwrap()
                .unwrap(),
            "rediss-sentinel://:pw@mymaster@s1:26379,s2:26379"
        );
        for (bad, name) in [
            ([("REDIS_URL", "r:1"), ("REDIS_TYPE", "ring")], "REDIS_TYPE"),
            (
                [("REDIS_URL", "r:1"), ("REDIS_SOCKET_TYPE", "udp")],
                "REDIS_SOCKET_TYPE",
            ),
            ([("REDIS_URL", "r:1"), ("REDIS_TLS", "maybe")], "REDIS_TLS"),
        ] {
            match url(&bad) {
                Err(CommandError::Usage(message)) => assert!(message.contains(name), "{message}"),
                other => panic!("{bad:?}: {other:?}"),
            }
        }
    }
}
