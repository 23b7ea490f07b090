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

/// How long one call may take (two reviews, a read, an actor's answer).
pub const CALL_DEADLINE: Duration = Duration::from_secs(30);

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
