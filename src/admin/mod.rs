//! The admin API (proto/shardcron/admin/v1/admin.proto, docs/admin-api.md):
//! gRPC over TLS on every replica, each call authenticated and authorized
//! by the API server ([`access`]), answered from the supervisor and the
//! actors ([`service`]).

pub mod access;
pub mod service;
pub mod tls;

/// The code generated from the proto by build.rs.
#[allow(clippy::all, missing_docs)]
pub mod proto {
    tonic::include_proto!("shardcron.admin.v1");
}

use proto::admin_service_server::AdminServiceServer;
use std::time::Duration;
use tonic::transport::{Identity, Server, ServerTlsConfig};

/// The annotation on a replica's Lease that says where its admin API is
/// reached (HOST:PORT): clients find a replica, and follow a CronJob to its
/// owner, from the ring's Leases.
pub use crate::shard::lease::ADDRESS_ANNOTATION;

/// The address a replica publishes for its admin API: the one it is told
/// (`--admin-advertise-address`); else the bound one, unless that is a
/// wildcard (then the pod's IP, `POD_IP`, with the bound port) or port 0;
/// else none.
pub fn advertised_address(
    bound: std::net::SocketAddr,
    told: Option<&str>,
    pod_ip: Option<&str>,
) -> Option<String> {
    if let Some(told) = told {
        return Some(told.to_owned());
    }
    if bound.port() == 0 {
        return None;
    }
    if !bound.ip().is_unspecified() {
        return Some(bound.to_string());
    }
    let ip: std::net::IpAddr = pod_ip?.trim().parse().ok()?;
    Some(std::net::SocketAddr::new(ip, bound.port()).to_string())
}

/// How long one call may take (two reviews, a read, an actor's answer).
pub const CALL_DEADLINE: Duration = Duration::from_secs(30);

/// At most this many `WatchDecisions` streams open at once per replica.
pub const MAX_WATCHERS: usize = 64;

/// At most this many calls at once per connection.
pub const CONCURRENCY_PER_CONNECTION: usize = 16;

/// Serves `admin` on `listener` with `identity` until the process ends.
pub async fn serve(
    listener: tokio::net::TcpListener,
    identity: &tls::TlsIdentity,
    admin: service::Admin,
) -> Result<(), tonic::transport::Error> {
    let tls = ServerTlsConfig::new().identity(Identity::from_pem(
        identity.cert_pem.as_bytes(),
        identity.key_pem.as_bytes(),
    ));
    Server::builder()
        .tls_config(tls)?
        .timeout(CALL_DEADLINE)
        .concurrency_limit_per_connection(CONCURRENCY_PER_CONNECTION)
        .add_service(AdminServiceServer::new(admin))
        .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener))
        .await
}

#[cfg(test)]
mod tests {
    use super::advertised_address;

    #[test]
    fn the_advertised_address_is_the_told_one_else_a_reachable_bound_one() {
        let bound = |text: &str| text.parse().expect("an address");
        for (at, told, pod_ip, expected) in [
            (
                "0.0.0.0:9443",
                Some("admin.example:443"),
                Some("10.0.0.7"),
                Some("admin.example:443"),
            ),
            ("127.0.0.1:9443", None, None, Some("127.0.0.1:9443")),
            (
                "0.0.0.0:9443",
                None,
                Some("10.0.0.7"),
                Some("10.0.0.7:9443"),
            ),
            ("[::]:9443", None, Some("fd00::7"), Some("[fd00::7]:9443")),
            ("0.0.0.0:9443", None, None, None),
            ("0.0.0.0:9443", None, Some("not-an-ip"), None),
            ("127.0.0.1:0", None, None, None),
        ] {
            assert_eq!(
                advertised_address(bound(at), told, pod_ip).as_deref(),
                expected,
                "{at} {told:?} {pod_ip:?}"
            );
        }
    }
}
