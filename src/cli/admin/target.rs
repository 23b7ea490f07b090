//! Which replica the admin commands ask, how they reach it, and who asks.

use std::path::PathBuf;

/// How the client reaches a replica's admin API.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Connect {
    /// Through the API server's aggregated API where it is served
    /// (deploy/admin-api); else through its port-forward when the
    /// replica's Lease names its pod, else to the address it publishes.
    #[default]
    Auto,
    /// Only through the API server's aggregated API (`admin.shardcron.io`):
    /// any credential the API server accepts; `--watch` is not served.
    ApiServer,
    /// Through the API server's port-forward to the replica's pod (needs
    /// `create pods/portforward` in the controller's namespace).
    PortForward,
    /// To the address the replica's Lease publishes (the pod network, or a
    /// replica run outside the cluster).
    Direct,
}

/// Where the replica is, and who asks.
#[derive(Debug, clap::Args)]
pub struct Target {
    /// A replica's admin API, HOST:PORT, asked first (say, after
    /// `kubectl port-forward pod/shardcron-0 9443`, 127.0.0.1:9443).
    /// Default: the first replica of the ring's Leases.
    #[arg(long, value_name = "HOST:PORT")]
    pub(super) address: Option<String>,
    /// How replicas are reached: auto (the API server's aggregated API when
    /// served, else port-forward when the Lease names the pod, else the
    /// published address), api-server, port-forward, or direct.
    #[arg(long, value_enum, default_value_t)]
    pub(super) connect: Connect,
    /// The kubeconfig: its user's bearer token authenticates the call, and
    /// the ring's Leases are read with it.
    #[arg(long, value_name = "FILE")]
    pub(super) kubeconfig: Option<PathBuf>,
    /// A bearer token for the admin API, read from this file instead of
    /// the kubeconfig's (say, one made for the replicas' audience with
    /// `kubectl create token SA --audience shardcron-admin`, see the
    /// replicas' `--admin-token-audiences`). The kubeconfig still reads
    /// the Leases and opens the port-forwards.
    #[arg(long, value_name = "FILE")]
    pub(super) token_file: Option<PathBuf>,
    /// Trust only this CA (PEM) for the replicas' certificates, not the
    /// certificates their Leases publish (replicas started with
    /// `--admin-tls-cert-file`): then writing a Lease is not enough to
    /// receive callers' tokens.
    #[arg(long, value_name = "FILE")]
    pub(super) ca_file: Option<PathBuf>,
    /// The namespace of the ring's Leases (the controller's).
    #[arg(long, default_value = "shardcron-system")]
    pub(super) lease_namespace: String,
    /// The ring's name (--shard-ring-name).
    #[arg(long, default_value = "shardcron")]
    pub(super) ring: String,
}
