//! The admin API as a Kubernetes aggregated API (`admin.shardcron.io`,
//! served by the replicas behind an `APIService`): kube-apiserver
//! authenticates the caller with whatever credential it has (a client
//! certificate, a token, OIDC, an exec plugin) and forwards the request
//! with the caller's identity ([`requestheader`]); the replica answers the
//! path ([`routes`]) from its admin service, which authorizes the caller
//! with a SubjectAccessReview, or from the peer that knows ([`peers`]):
//! [`serve`]. docs/admin-api.md.

pub mod peers;
pub mod requestheader;
pub mod routes;
pub mod serve;

use rustls::pki_types::CertificateDer;

/// The media type of an answer as the gRPC API's own message
/// (`GetCronJobResponse`, `GetRingResponse`, `GetQueuesResponse`), asked
/// for with `Accept`; anything else gets JSON.
pub const PROTOBUF: &str = "application/vnd.shardcron.admin.v1+protobuf";

/// The common name of a client certificate (TLS verified it).
pub fn common_name(certificate: &CertificateDer<'_>) -> Option<String> {
    let (_, parsed) = x509_parser::parse_x509_certificate(certificate.as_ref()).ok()?;
    let name = parsed.subject().iter_common_name().next()?;
    name.as_str().ok().map(str::to_owned)
}
