//! The admin API (proto/shardcron/admin/v1/admin.proto, docs/admin-api.md):
//! gRPC over TLS on every replica, each call authenticated and authorized
//! by the API server ([`access`]), answered from the supervisor and the
//! actors ([`service`]); and the metrics served to a Prometheus in the
//! cluster over TLS ([`https`]), each scrape authenticated and authorized
//! the same way ([`scrape`], its answers kept briefly: [`review_cache`]).

pub mod access;
pub mod aggregated;
pub mod https;
pub mod json;
pub mod proto;
pub mod review;
pub mod review_cache;
pub mod scrape;
pub mod service;
pub mod streams;
pub mod tls;

use crate::telemetry::listener;
use proto::admin_service_server::AdminServiceServer;
use std::time::Duration;
use tonic::transport::{Identity, Server, ServerTlsConfig};

/// The annotation on a replica's Lease that says where its admin API is
/// reached (HOST:PORT): clients find a replica, and follow a CronJob to its
/// owner, from the ring's Leases.
pub use crate::shard::lease::ADDRESS_ANNOTATION;
/// The annotation that names the replica's pod and admin port, for clients
/// that reach it through the API server's port-forward.
pub use crate::shard::lease::POD_ANNOTATION;

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

/// What a replica in pod `pod` (NAMESPACE/NAME) publishes for clients to
/// port-forward to: `NAMESPACE/NAME:PORT`; nothing when the port is 0
/// (chosen at start, unknown to the pod's spec).
pub fn published_pod(pod: &str, port: u16) -> Result<Option<String>, String> {
    let Some((namespace, name)) = pod.split_once('/') else {
        return Err(format!("{pod:?} is not NAMESPACE/NAME"));
    };
    if !is_object_name(namespace) || !is_object_name(name) {
        return Err(format!("{pod:?} is not NAMESPACE/NAME"));
    }
    Ok((port != 0).then(|| format!("{pod}:{port}")))
}

/// Whether `part` may name a Kubernetes object or namespace (a DNS
/// subdomain: lower-case letters, digits, `-` and `.`, 253 at most).
pub fn is_object_name(part: &str) -> bool {
    !part.is_empty()
        && part.len() <= 253
        && part
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
}

/// A published pod (`NAMESPACE/NAME:PORT`), read back by clients.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdminPod {
    pub namespace: String,
    pub name: String,
    pub port: u16,
}

impl AdminPod {
    pub fn parse(published: &str) -> Option<AdminPod> {
        let (pod, port) = published.rsplit_once(':')?;
        let (namespace, name) = pod.split_once('/')?;
        (!namespace.is_empty() && !name.is_empty()).then_some(())?;
        Some(AdminPod {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            port: port.parse().ok().filter(|port| *port != 0)?,
        })
    }
}

impl std::fmt::Display for AdminPod {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "pod {}/{} port {}", self.namespace, self.name, self.port)
    }
}

/// How long one call may take (two reviews, a read, an actor's answer).
pub const CALL_DEADLINE: Duration = Duration::from_secs(30);

/// At most this many `WatchDecisions` streams open at once per replica.
pub const MAX_WATCHERS: usize = 64;

/// At most this many calls at once per connection.
pub const CONCURRENCY_PER_CONNECTION: usize = 16;

/// An admin connection is sent an HTTP/2 PING this often...
pub const PING_EVERY: Duration = Duration::from_secs(30);
/// ...and dropped when one goes unanswered this long (a peer gone silent).
pub const PING_TIMEOUT: Duration = Duration::from_secs(10);
/// A connection is closed after this long (the CLI connects per command);
/// its calls in flight get [`streams::STREAM_LIFETIME`] more, so a
/// decision stream is never cut before its own end.
pub const CONNECTION_LIFETIME: Duration = Duration::from_secs(3600);

/// Serves `admin` on `listener` with `identity` until the process ends.
/// Any pod can reach the port, so every connection is bounded before its
/// caller is known: at most [`listener::MAX_CONNECTIONS`] at once, its TLS
/// handshake within [`https::HANDSHAKE_DEADLINE`], PINGed, and
/// kept at most [`CONNECTION_LIFETIME`].
pub async fn serve(
    listener: tokio::net::TcpListener,
    identity: &tls::TlsIdentity,
    admin: std::sync::Arc<service::Admin>,
) -> Result<(), tonic::transport::Error> {
    let tls = ServerTlsConfig::new()
        .identity(Identity::from_pem(
            identity.cert_pem.as_bytes(),
            identity.key_pem.as_bytes(),
        ))
        .timeout(https::HANDSHAKE_DEADLINE);
    Server::builder()
        .tls_config(tls)?
        .timeout(CALL_DEADLINE)
        .concurrency_limit_per_connection(CONCURRENCY_PER_CONNECTION)
        .http2_keepalive_interval(Some(PING_EVERY))
        .http2_keepalive_timeout(Some(PING_TIMEOUT))
        .max_connection_age(CONNECTION_LIFETIME)
        .max_connection_age_grace(streams::STREAM_LIFETIME)
        .add_service(AdminServiceServer::from_arc(admin))
        .serve_with_incoming(
            listener::Admission::new(listener, listener::MAX_CONNECTIONS).into_stream(),
        )
        .await
}

/// The admin API's connections are the listener's admitted ones.
impl tonic::transport::server::Connected for listener::Admitted {
    type ConnectInfo = tonic::transport::server::TcpConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        <tokio::net::TcpStream as tonic::transport::server::Connected>::connect_info(&self.stream)
    }
}

#[cfg(test)]
mod tests {
    use super::{AdminPod, advertised_address, published_pod};

    #[test]
    fn a_published_pod_is_read_back_as_it_was_written() {
        let published = published_pod("shardcron-system/shardcron-1", 9443)
            .expect("valid")
            .expect("a port");
        assert_eq!(published, "shardcron-system/shardcron-1:9443");
        assert_eq!(
            AdminPod::parse(&published),
            Some(AdminPod {
                namespace: "shardcron-system".into(),
                name: "shardcron-1".into(),
                port: 9443
            })
        );
        assert_eq!(published_pod("ns/pod", 0), Ok(None));
        for bad in ["pod", "/pod", "ns/", "ns/a/b", "NS/pod", "ns/pod:1"] {
            assert!(published_pod(bad, 9443).is_err(), "{bad}");
        }
        for bad in ["ns/pod", "ns/pod:0", "ns/pod:x", "/pod:1", "pod:1"] {
            assert_eq!(AdminPod::parse(bad), None, "{bad}");
        }
    }

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
