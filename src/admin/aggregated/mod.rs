//! The admin API as a Kubernetes aggregated API (`admin.shardcron.io`,
//! served by the replicas behind an `APIService`): kube-apiserver
//! authenticates the caller with whatever credential it has (a client
//! certificate, a token, OIDC, an exec plugin) and forwards the request
//! with the caller's identity ([`requestheader`]); the replica answers the
//! path ([`routes`]) from its admin service, which authorizes the caller
//! with a SubjectAccessReview, or from the peer that knows ([`peers`]):
//! [`serve`], as JSON or as the Tables `kubectl get` prints ([`table`]). The APIService itself exists while replicas run
//! ([`registration`]). docs/admin-api.md.

pub mod peers;
pub mod registration;
pub mod requestheader;
pub mod routes;
pub mod serve;
pub mod table;

use rustls::pki_types::CertificateDer;

/// The media type of an answer as the gRPC API's own message
/// (`GetCronJobResponse`, `GetRingResponse`, `GetQueuesResponse`), asked
/// for with `Accept`; anything else gets JSON.
pub const PROTOBUF: &str = "application/vnd.shardcron.admin.v1+protobuf";

/// gRPC status codes and the HTTP statuses the aggregated API answers
/// them with, in one table for both directions: the replica's refusals
/// ([`serve`]) and the command line's reading of them. From HTTP, the first
/// row of a status wins; a code not listed is a 500, a status not listed
/// an `Internal`.
const STATUS_CODES: [(tonic::Code, u16); 8] = [
    (tonic::Code::Unauthenticated, 401),
    (tonic::Code::PermissionDenied, 403),
    (tonic::Code::NotFound, 404),
    (tonic::Code::InvalidArgument, 400),
    (tonic::Code::ResourceExhausted, 429),
    (tonic::Code::Unavailable, 503),
    (tonic::Code::DeadlineExceeded, 503),
    (tonic::Code::Aborted, 503),
];

/// The HTTP status the aggregated API answers `code` with.
pub fn http_status(code: tonic::Code) -> http::StatusCode {
    let status = STATUS_CODES
        .iter()
        .find(|(listed, _)| *listed == code)
        .map_or(500, |(_, status)| *status);
    http::StatusCode::from_u16(status).unwrap_or(http::StatusCode::INTERNAL_SERVER_ERROR)
}

/// The gRPC code an HTTP status of the aggregated API stands for.
pub fn grpc_code(status: http::StatusCode) -> tonic::Code {
    STATUS_CODES
        .iter()
        .find(|(_, listed)| *listed == status.as_u16())
        .map_or(tonic::Code::Internal, |(code, _)| *code)
}

/// The common name of a client certificate (TLS verified it).
pub fn common_name(certificate: &CertificateDer<'_>) -> Option<String> {
    let (_, parsed) = x509_parser::parse_x509_certificate(certificate.as_ref()).ok()?;
    let name = parsed.subject().iter_common_name().next()?;
    name.as_str().ok().map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::{grpc_code, http_status};
    use tonic::Code;

    #[test]
    fn grpc_refusals_become_the_http_ones_kubectl_knows_and_back() {
        for (code, http, back) in [
            (Code::Unauthenticated, 401, Code::Unauthenticated),
            (Code::PermissionDenied, 403, Code::PermissionDenied),
            (Code::NotFound, 404, Code::NotFound),
            (Code::InvalidArgument, 400, Code::InvalidArgument),
            (Code::ResourceExhausted, 429, Code::ResourceExhausted),
            (Code::Unavailable, 503, Code::Unavailable),
            (Code::DeadlineExceeded, 503, Code::Unavailable),
            (Code::Aborted, 503, Code::Unavailable),
            (Code::Internal, 500, Code::Internal),
            (Code::FailedPrecondition, 500, Code::Internal),
        ] {
            let status = http_status(code);
            assert_eq!(status.as_u16(), http, "{code:?}");
            assert_eq!(grpc_code(status), back, "{http}");
        }
    }
}
