//! The TLS flags: `serve`'s listener certificates and mutual TLS, and a client's CA, certificate and server name (`check`, `limits`).

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use clap::builder::BoolishValueParser;
use tollgate_tls::{
    ALPN_H2, ALPN_HTTP1, ClientTlsFiles, DEFAULT_HANDSHAKE_TIMEOUT, ServerTlsFiles, TlsAcceptor,
    TlsConnector,
};

use crate::CommandError;
use crate::upstream_env::UpstreamEnv;

/// TLS on `serve`'s listeners (off unless `--tls-cert` is given).
#[derive(Args, Debug, Clone)]
pub struct ServeTlsArgs {
    /// Serve gRPC over TLS with this PEM certificate chain (leaf first);
    /// it and its key are reloaded when the files change or on SIGHUP.
    #[arg(
        long,
        env = "TOLLGATE_TLS_CERT",
        value_name = "PATH",
        requires = "tls_key"
    )]
    pub tls_cert: Option<PathBuf>,
    /// The PEM private key of `--tls-cert`.
    #[arg(
        long,
        env = "TOLLGATE_TLS_KEY",
        value_name = "PATH",
        requires = "tls_cert"
    )]
    pub tls_key: Option<PathBuf>,
    /// Mutual TLS: require every client to present a certificate chaining to this PEM CA bundle.
    #[arg(
        long,
        env = "TOLLGATE_TLS_CLIENT_CA",
        value_name = "PATH",
        requires = "tls_cert"
    )]
    pub tls_client_ca: Option<PathBuf>,
    /// With `--tls-client-ca`: the client certificate must also name one of
    /// these (DNS names or IP addresses among its SANs); repeat the flag or
    /// separate with commas.
    #[arg(
        long,
        env = "TOLLGATE_TLS_CLIENT_SAN",
        value_name = "NAME",
        value_delimiter = ',',
        requires = "tls_client_ca"
    )]
    pub tls_client_san: Vec<String>,
    /// Also serve the HTTP API (`--http-addr`) over TLS with the same certificate and client-certificate rules.
    #[arg(long, env = "TOLLGATE_HTTP_TLS", value_parser = BoolishValueParser::new(), requires = "tls_cert")]
    pub http_tls: bool,
    /// How long a client may take to complete the TLS handshake before the connection is closed.
    #[arg(long, env = "TOLLGATE_TLS_HANDSHAKE_TIMEOUT", value_name = "DURATION", default_value = "10s", value_parser = tollgate_core::duration::parse_duration)]
    pub tls_handshake_timeout: Duration,
}

impl ServeTlsArgs {
    /// The files these flags name, if TLS is on; else upstream's
    /// `GRPC_SERVER_USE_TLS=true` with `GRPC_SERVER_TLS_CERT`,
    /// `GRPC_SERVER_TLS_KEY`, and for mutual TLS `GRPC_CLIENT_TLS_CACERT` and
    /// `GRPC_CLIENT_TLS_SAN`.
    pub fn files(&self, env: &UpstreamEnv) -> Result<Option<ServerTlsFiles>, CommandError> {
        if let (Some(cert), Some(key)) = (self.tls_cert.clone(), self.tls_key.clone()) {
            return Ok(Some(ServerTlsFiles {
                cert,
                key,
                client_ca: self.tls_client_ca.clone(),
                client_sans: self.tls_client_san.clone(),
            }));
        }
        if !env.bool("GRPC_SERVER_USE_TLS")?.unwrap_or(false) {
            return Ok(None);
        }
        let required = |name: &str| {
            env.get(name)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
                .ok_or_else(|| {
                    CommandError::Usage(format!("GRPC_SERVER_USE_TLS=true needs {name}"))
                })
        };
        Ok(Some(ServerTlsFiles {
            cert: required("GRPC_SERVER_TLS_CERT")?,
            key: required("GRPC_SERVER_TLS_KEY")?,
            client_ca: env
                .get("GRPC_CLIENT_TLS_CACERT")
                .filter(|v| !v.is_empty())
                .map(PathBuf::from),
            client_sans: env
                .get("GRPC_CLIENT_TLS_SAN")
                .filter(|v| !v.is_empty())
                .map(|san| vec![san.to_owned()])
                .unwrap_or_default(),
        }))
    }

    /// The gRPC listener's acceptor (ALPN `h2`) and the HTTP listener's (ALPN `http/1.1`, with `--http-tls`), for `files`.
    pub fn acceptors(
        &self,
        files: Option<&ServerTlsFiles>,
    ) -> Result<(Option<TlsAcceptor>, Option<TlsAcceptor>), CommandError> {
        let Some(files) = files else {
            return Ok((None, None));
        };
        let acceptor = |alpn: &[&'static [u8]]| {
            TlsAcceptor::new(files.clone(), alpn, self.tls_handshake_timeout)
                .map_err(|error| CommandError::Failed(format!("TLS: {error}")))
        };
        let grpc = acceptor(&[ALPN_H2])?;
        let http = if self.http_tls {
            Some(acceptor(&[ALPN_HTTP1])?)
        } else {
            None
        };
        Ok((Some(grpc), http))
    }
}

const _: () = assert!(
    DEFAULT_HANDSHAKE_TIMEOUT.as_secs() == 10,
    "--tls-handshake-timeout's default"
);

/// TLS towards a service (`https://` addresses): the CA to trust, a client certificate, the server name.
#[derive(Args, Debug, Clone)]
pub struct ClientTlsArgs {
    /// The PEM CA bundle the server's certificate must chain to (default: the system's trust store).
    #[arg(long, env = "TOLLGATE_CHECK_TLS_CA", value_name = "PATH")]
    pub tls_ca: Option<PathBuf>,
    /// A PEM client certificate to present (mutual TLS).
    #[arg(
        long = "tls-cert",
        env = "TOLLGATE_CHECK_TLS_CERT",
        value_name = "PATH",
        requires = "client_key"
    )]
    pub client_cert: Option<PathBuf>,
    /// The PEM private key of `--tls-cert`.
    #[arg(
        long = "tls-key",
        env = "TOLLGATE_CHECK_TLS_KEY",
        value_name = "PATH",
        requires = "client_cert"
    )]
    pub client_key: Option<PathBuf>,
    /// The name to send as SNI and check in the server's certificate (default: the address's host).
    #[arg(long, env = "TOLLGATE_CHECK_TLS_SERVER_NAME", value_name = "NAME")]
    pub tls_server_name: Option<String>,
}

impl ClientTlsArgs {
    /// A connector offering ALPN `h2` (gRPC).
    pub fn grpc_connector(&self) -> Result<TlsConnector, CommandError> {
        self.files()
            .connector(&[ALPN_H2])
            .map_err(|error| CommandError::Failed(format!("TLS: {error}")))
    }

    /// A connector offering ALPN `http/1.1` (the HTTP API).
    pub fn https_connector(&self) -> Result<TlsConnector, CommandError> {
        self.files()
            .connector(&[ALPN_HTTP1])
            .map_err(|error| CommandError::Failed(format!("TLS: {error}")))
    }

    /// Whether any of these flags was given.
    pub fn is_set(&self) -> bool {
        self.files() != ClientTlsFiles::default()
    }

    fn files(&self) -> ClientTlsFiles {
        ClientTlsFiles {
            ca: self.tls_ca.clone(),
            cert: self.client_cert.clone(),
            key: self.client_key.clone(),
            server_name: self.tls_server_name.clone(),
        }
    }
}
