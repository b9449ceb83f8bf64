//! [`TlsError`]: why a TLS configuration could not be built, naming the file at fault.

use std::fmt;
use std::io;
use std::path::PathBuf;

/// Why a TLS configuration could not be built from its files.
#[derive(Debug)]
pub enum TlsError {
    /// A file could not be read or holds no PEM block of the kind needed.
    Read {
        /// The file.
        path: PathBuf,
        /// What was wrong.
        source: io::Error,
    },
    /// A file holds no certificate.
    NoCertificate {
        /// The file.
        path: PathBuf,
    },
    /// A CA bundle holds a certificate rustls cannot use as a trust anchor.
    BadCa {
        /// The file.
        path: PathBuf,
        /// What rustls said.
        source: rustls::Error,
    },
    /// A name of the SAN allow-list, or a server name, is neither a DNS name nor an IP address.
    BadName {
        /// The name.
        name: String,
    },
    /// An allow-list or client certificate was given without what it needs (a CA bundle, a key).
    Incomplete {
        /// What is missing.
        missing: &'static str,
    },
    /// rustls refused the configuration (for instance a key that does not match the certificate).
    Config(rustls::Error),
    /// The client-certificate verifier could not be built.
    Verifier(String),
}

impl fmt::Display for TlsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TlsError::Read { path, source } => write!(f, "{}: {source}", path.display()),
            TlsError::NoCertificate { path } => {
                write!(f, "{}: no PEM certificate in the file", path.display())
            }
            TlsError::BadCa { path, source } => {
                write!(
                    f,
                    "{}: not a usable CA certificate: {source}",
                    path.display()
                )
            }
            TlsError::BadName { name } => {
                write!(f, "{name:?} is neither a DNS name nor an IP address")
            }
            TlsError::Incomplete { missing } => write!(f, "missing {missing}"),
            TlsError::Config(error) => write!(f, "the TLS configuration is refused: {error}"),
            TlsError::Verifier(error) => {
                write!(f, "cannot build the client-certificate verifier: {error}")
            }
        }
    }
}

impl std::error::Error for TlsError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            TlsError::Read { source, .. } => Some(source),
            TlsError::BadCa { source, .. } | TlsError::Config(source) => Some(source),
            _ => None,
        }
    }
}
