//! A test certificate authority (rcgen) that writes PEM files into a scratch directory.

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};

/// A self-signed CA whose PEM certificate is written to `DIR/NAME-ca.pem`, and that issues leaf certificates.
pub struct TestCa {
    issuer: CertifiedIssuer<'static, KeyPair>,
    dir: PathBuf,
    name: String,
    ca_path: PathBuf,
}

/// A certificate and key written as PEM files.
#[derive(Clone, Debug)]
pub struct Issued {
    /// The certificate chain (the leaf, then the CA).
    pub cert: PathBuf,
    /// The leaf's private key.
    pub key: PathBuf,
}

impl TestCa {
    /// A new CA called `name`, writing its files into `dir`.
    pub fn new(dir: &Path, name: &str) -> TestCa {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA parameters");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, format!("{name} test CA"));
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let key = KeyPair::generate().expect("CA key");
        let issuer = CertifiedIssuer::self_signed(params, key).expect("CA certificate");
        let ca_path = dir.join(format!("{name}-ca.pem"));
        std::fs::write(&ca_path, issuer.pem()).expect("write the CA certificate");
        TestCa {
            issuer,
            dir: dir.to_path_buf(),
            name: name.to_owned(),
            ca_path,
        }
    }

    /// The CA's certificate (PEM).
    pub fn ca(&self) -> &Path {
        &self.ca_path
    }

    /// Issues a leaf for `sans` (DNS names or IP addresses), usable by servers and clients, written as `DIR/NAME-STEM.pem` and `-key.pem`.
    pub fn issue(&self, stem: &str, sans: &[&str]) -> Issued {
        let sans: Vec<String> = sans.iter().map(|san| (*san).to_owned()).collect();
        let mut params = CertificateParams::new(sans).expect("leaf parameters");
        params.distinguished_name.push(DnType::CommonName, stem);
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        let key = KeyPair::generate().expect("leaf key");
        let cert = params
            .signed_by(&key, &self.issuer)
            .expect("leaf certificate");
        let issued = Issued {
            cert: self.dir.join(format!("{}-{stem}.pem", self.name)),
            key: self.dir.join(format!("{}-{stem}-key.pem", self.name)),
        };
        std::fs::write(&issued.cert, format!("{}{}", cert.pem(), self.issuer.pem()))
            .expect("write the certificate");
        std::fs::write(&issued.key, key.serialize_pem()).expect("write the key");
        issued
    }
}
