//! The admin API's TLS identity: the files given (`--admin-tls-cert-file`,
//! `--admin-tls-key-file`, say from cert-manager or the chart), or a
//! self-signed certificate made at start for the replica's name,
//! `localhost` and 127.0.0.1. A self-signed certificate, or the CA of
//! `--admin-tls-ca-file`, is published, PEM, on the replica's own Lease
//! ([`CERT_ANNOTATION`]): a client that may read the ring's Leases trusts
//! exactly that, so trust is rooted in the API server and the CLI needs no
//! CA of its own.

use thiserror::Error;

/// The annotation on a replica's Lease that holds its admin certificate
/// (PEM).
pub use crate::shard::lease::CERT_ANNOTATION;

/// A certificate and its private key, PEM.
#[derive(Clone)]
pub struct TlsIdentity {
    pub cert_pem: String,
    pub key_pem: String,
    /// What clients are told to trust, on the Lease: the self-signed
    /// certificate, or the CA given with the files; `None`: a CA the
    /// clients bring (the CLI's `--ca-file`).
    pub published: Option<String>,
}

impl std::fmt::Debug for TlsIdentity {
    // The key never reaches a log.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsIdentity")
            .field("published", &self.published.is_some())
            .finish_non_exhaustive()
    }
}

#[derive(Debug, Error)]
pub enum TlsError {
    #[error("reading {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("making a self-signed certificate: {0}")]
    Generate(#[from] rcgen::Error),
}

impl TlsIdentity {
    /// Reads the certificate, the key and, to publish, the CA that signed
    /// the certificate from PEM files.
    pub fn from_files(cert: &str, key: &str, ca: Option<&str>) -> Result<Self, TlsError> {
        let read = |path: &str| {
            std::fs::read_to_string(path).map_err(|source| TlsError::Read {
                path: path.to_owned(),
                source,
            })
        };
        Ok(Self {
            cert_pem: read(cert)?,
            key_pem: read(key)?,
            published: ca.map(read).transpose()?,
        })
    }

    /// A self-signed certificate for `replica`, `localhost` and 127.0.0.1.
    pub fn self_signed(replica: &str) -> Result<Self, TlsError> {
        let names = vec![
            replica.to_owned(),
            "localhost".to_owned(),
            "127.0.0.1".to_owned(),
        ];
        let certified = rcgen::generate_simple_self_signed(names)?;
        let cert_pem = certified.cert.pem();
        Ok(Self {
            published: Some(cert_pem.clone()),
            cert_pem,
            key_pem: certified.signing_key.serialize_pem(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_self_signed_identity_is_pem_and_keeps_its_key_out_of_debug() {
        let identity = TlsIdentity::self_signed("r0").expect("a certificate");
        assert!(identity.cert_pem.starts_with("-----BEGIN CERTIFICATE-----"));
        assert!(identity.key_pem.contains("PRIVATE KEY"));
        assert!(!format!("{identity:?}").contains("PRIVATE"));
        assert_eq!(identity.published, Some(identity.cert_pem.clone()));
    }

    #[test]
    fn given_files_publish_their_ca_or_nothing() {
        let dir = tempfile::tempdir().expect("a directory");
        let file = |name: &str, text: &str| {
            let path = dir.path().join(name);
            std::fs::write(&path, text).expect("write");
            path.to_string_lossy().into_owned()
        };
        let (cert, key, ca) = (file("c", "CERT"), file("k", "KEY"), file("ca", "CA"));
        let with_ca = TlsIdentity::from_files(&cert, &key, Some(&ca)).expect("read");
        assert_eq!(with_ca.published.as_deref(), Some("CA"));
        let without = TlsIdentity::from_files(&cert, &key, None).expect("read");
        assert_eq!(without.published, None);
        let missing = TlsIdentity::from_files(&cert, &key, Some("/nonexistent/ca"));
        assert!(matches!(missing, Err(TlsError::Read { path, .. }) if path == "/nonexistent/ca"));
    }
}
