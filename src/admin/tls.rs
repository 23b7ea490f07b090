//! The admin API's TLS identity: the files given (`--admin-tls-cert-file`,
//! `--admin-tls-key-file`, say from cert-manager), or a self-signed
//! certificate made at start for the replica's name, `localhost` and
//! 127.0.0.1. A self-signed certificate is published, PEM, on the
//! replica's own Lease ([`CERT_ANNOTATION`]): a client that may read the
//! ring's Leases trusts exactly that certificate, so trust is rooted in the
//! API server and no CA is needed.

use thiserror::Error;

/// The annotation on a replica's Lease that holds its admin certificate
/// (PEM).
pub use crate::shard::lease::CERT_ANNOTATION;

/// A certificate and its private key, PEM.
#[derive(Clone)]
pub struct TlsIdentity {
    pub cert_pem: String,
    pub key_pem: String,
    /// Made here (then published on the Lease), not read from files.
    pub self_signed: bool,
}

impl std::fmt::Debug for TlsIdentity {
    // The key never reaches a log.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsIdentity")
            .field("self_signed", &self.self_signed)
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
    /// Reads the certificate and the key from PEM files.
    pub fn from_files(cert: &str, key: &str) -> Result<Self, TlsError> {
        let read = |path: &str| {
            std::fs::read_to_string(path).map_err(|source| TlsError::Read {
                path: path.to_owned(),
                source,
            })
        };
        Ok(Self {
            cert_pem: read(cert)?,
            key_pem: read(key)?,
            self_signed: false,
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
        Ok(Self {
            cert_pem: certified.cert.pem(),
            key_pem: certified.signing_key.serialize_pem(),
            self_signed: true,
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
    }
}
