//! HTTP/1.1 over TLS for a replica's authenticated HTTP surfaces (the
//! metrics endpoint, the aggregated API), with the admin API's certificate. Every connection
//! is bounded as every listener's are ([`listener`]: at most 256 at once,
//! headers within 10 s, kept at most 300 s), and its TLS handshake done
//! within [`HANDSHAKE_DEADLINE`].

use super::tls::TlsIdentity;
use crate::telemetry::listener;
use axum::Router;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::sync::Arc;
use std::time::Duration;
use thiserror::Error;
use tokio::net::TcpListener;

pub const HANDSHAKE_DEADLINE: Duration = Duration::from_secs(10);

#[derive(Debug, Error)]
pub enum HttpsError {
    #[error("the certificate (PEM): {0}")]
    Certificate(rustls::pki_types::pem::Error),
    #[error("the private key (PEM): {0}")]
    Key(rustls::pki_types::pem::Error),
    #[error("the TLS configuration: {0}")]
    Tls(#[from] rustls::Error),
    #[error("the client CA: {0}")]
    ClientCa(String),
}

/// A server configuration presenting `identity` (its whole chain), asking
/// no client certificate.
pub fn server_config(identity: &TlsIdentity) -> Result<Arc<rustls::ServerConfig>, HttpsError> {
    configured(identity, None)
}

/// As [`server_config`], asking for a client certificate signed by
/// `client_ca_pem`: one that is not is refused at the handshake; a client
/// with none is let through, to be answered (with a clear refusal) by the
/// routes, which see the certificate ([`serve`]).
pub fn server_config_asking_clients(
    identity: &TlsIdentity,
    client_ca_pem: &str,
) -> Result<Arc<rustls::ServerConfig>, HttpsError> {
    configured(identity, Some(client_ca_pem))
}

fn configured(
    identity: &TlsIdentity,
    client_ca_pem: Option<&str>,
) -> Result<Arc<rustls::ServerConfig>, HttpsError> {
    let chain = CertificateDer::pem_slice_iter(identity.cert_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(HttpsError::Certificate)?;
    let key =
        PrivateKeyDer::from_pem_slice(identity.key_pem.as_bytes()).map_err(HttpsError::Key)?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()?;
    let builder = match client_ca_pem {
        None => builder.with_no_client_auth(),
        Some(pem) => {
            let bad = |e: &dyn std::fmt::Display| HttpsError::ClientCa(e.to_string());
            let mut roots = rustls::RootCertStore::empty();
            for cert in CertificateDer::pem_slice_iter(pem.as_bytes()) {
                roots.add(cert.map_err(|e| bad(&e))?).map_err(|e| bad(&e))?;
            }
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots),
                provider,
            )
            .allow_unauthenticated()
            .build()
            .map_err(|e| bad(&e))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder.with_single_cert(chain, key)?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// Serves on `listener` over TLS until the process ends: each connection,
/// once its handshake is done, by the router `router_for` makes for it
/// from its verified client certificate, if any.
pub async fn serve<F>(listener: TcpListener, tls: Arc<rustls::ServerConfig>, router_for: F)
where
    F: Fn(Option<&CertificateDer<'static>>) -> Router + Send + Sync + 'static,
{
    serve_changing(listener, tokio::sync::watch::channel(tls).1, router_for).await
}

/// As [`serve`], each new connection with the TLS configuration `tls`
/// holds when it is accepted (a CA that rotates).
pub async fn serve_changing<F>(
    listener: TcpListener,
    tls: tokio::sync::watch::Receiver<Arc<rustls::ServerConfig>>,
    router_for: F,
) where
    F: Fn(Option<&CertificateDer<'static>>) -> Router + Send + Sync + 'static,
{
    let router_for = Arc::new(router_for);
    listener::serve_http(listener, move |admitted| {
        let acceptor = tokio_rustls::TlsAcceptor::from(tls.borrow().clone());
        let router_for = router_for.clone();
        async move {
            let handshake = tokio::time::timeout(HANDSHAKE_DEADLINE, acceptor.accept(admitted));
            let stream = handshake.await.ok()?.ok()?;
            let client = stream
                .get_ref()
                .1
                .peer_certificates()
                .and_then(<[_]>::first);
            let router = router_for(client);
            Some((stream, router))
        }
    })
    .await
}
