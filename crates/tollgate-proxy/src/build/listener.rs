//! [`ListenerSpec`]: one configured listener with its connection limits and TLS files read.

use std::net::SocketAddr;
use std::path::Path;

use tollgate_tls::{ALPN_H2, ALPN_HTTP1, DEFAULT_HANDSHAKE_TIMEOUT, ServerTlsFiles, TlsAcceptor};

use crate::config::{
    ConfigError, ConfigPath, FieldError, LimitSettings, ListenerLimits, ProxyConfig,
};

/// One listener as configured.
#[derive(Clone, Debug)]
pub struct ListenerSpec {
    /// Where it listens.
    pub address: SocketAddr,
    /// Its name in logs and metrics (the configured name, else the address).
    pub name: String,
    /// What it allows a client connection.
    pub limits: ListenerLimits,
    /// TLS on its connections, its files read (`None`: plain).
    pub tls: Option<TlsAcceptor>,
}

impl PartialEq for ListenerSpec {
    /// The same listener: the same address, name, limits and TLS files.
    fn eq(&self, other: &Self) -> bool {
        self.address == other.address
            && self.name == other.name
            && self.limits == other.limits
            && self.tls.as_ref().map(TlsAcceptor::files)
                == other.tls.as_ref().map(TlsAcceptor::files)
    }
}

impl Eq for ListenerSpec {}

/// The listeners of `config` (read from `file`): at least one, each with its limits and TLS files read.
pub(super) fn listeners(
    config: &ProxyConfig,
    file: &Path,
) -> Result<Vec<ListenerSpec>, ConfigError> {
    let root = ConfigPath::root();
    let in_file = |e: FieldError| ConfigError::field(file, e);
    if config.listeners.is_empty() {
        return Err(in_file(
            root.key("listeners")
                .error("at least one listener is needed"),
        ));
    }
    config
        .listeners
        .iter()
        .enumerate()
        .map(|(i, l)| {
            let at = root.key("listeners").index(i);
            Ok(ListenerSpec {
                address: l.address,
                name: l.name.clone().unwrap_or_else(|| l.address.to_string()),
                limits: ListenerLimits::default()
                    .with(&LimitSettings::from(l), &at)
                    .map_err(in_file)?,
                tls: l
                    .tls
                    .as_ref()
                    .map(|tls| {
                        let files = ServerTlsFiles {
                            cert: tls.cert.clone(),
                            key: tls.key.clone(),
                            client_ca: tls.client_ca.clone(),
                            client_sans: tls.client_sans.clone(),
                        };
                        TlsAcceptor::new(files, &[ALPN_H2, ALPN_HTTP1], DEFAULT_HANDSHAKE_TIMEOUT)
                            .map_err(|e| in_file(at.key("tls").error(e.to_string())))
                    })
                    .transpose()?,
            })
        })
        .collect()
}
