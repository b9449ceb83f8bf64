//! Reading PEM files: certificate chains, private keys and CA bundles.

use std::io;
use std::path::Path;
use std::sync::Arc;

use rustls::RootCertStore;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::error::TlsError;

/// Every certificate of the PEM file at `path` (a chain: leaf first); at least one.
pub(crate) fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certificates = CertificateDer::pem_file_iter(path)
        .and_then(Iterator::collect::<Result<Vec<_>, _>>)
        .map_err(|error| read_error(path, error))?;
    if certificates.is_empty() {
        return Err(TlsError::NoCertificate {
            path: path.to_path_buf(),
        });
    }
    Ok(certificates)
}

/// The first private key (PKCS#8, PKCS#1 or SEC1) of the PEM file at `path`.
pub(crate) fn private_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_file(path).map_err(|error| read_error(path, error))
}

/// The trust anchors of the CA bundle at `path`.
pub(crate) fn roots(path: &Path) -> Result<Arc<RootCertStore>, TlsError> {
    let mut roots = RootCertStore::empty();
    for certificate in certificates(path)? {
        roots.add(certificate).map_err(|source| TlsError::BadCa {
            path: path.to_path_buf(),
            source,
        })?;
    }
    Ok(Arc::new(roots))
}

/// A PEM reading error as a [`TlsError::Read`] naming `path`.
fn read_error(path: &Path, error: rustls::pki_types::pem::Error) -> TlsError {
    let source = match error {
        rustls::pki_types::pem::Error::Io(source) => source,
        rustls::pki_types::pem::Error::NoItemsFound => io::Error::new(
            io::ErrorKind::InvalidData,
            "no PEM block of the kind needed",
        ),
        other => io::Error::new(io::ErrorKind::InvalidData, format!("{other:?}")),
    };
    TlsError::Read {
        path: path.to_path_buf(),
        source,
    }
}
