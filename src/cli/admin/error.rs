//! What the admin commands report when they fail (exit status 2).

use crate::admin::AdminPod;
use std::time::Duration;

/// Errors the admin commands report.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    #[error("{0:?} is not NAMESPACE/NAME")]
    NotAName(String),
    #[error("{0:#}")]
    Client(anyhow::Error),
    #[error(
        "the kubeconfig's user has no bearer token (token, tokenFile, or an exec plugin that prints one); the admin API takes one"
    )]
    NoToken,
    #[error("reading the ring's Leases: {0}")]
    Leases(kube::Error),
    #[error("no Lease of ring {ring:?} in {namespace} publishes an admin certificate")]
    NoCertificate { ring: String, namespace: String },
    #[error("connecting to {address}: {source}")]
    Connect {
        address: String,
        source: tonic::transport::Error,
    },
    #[error("no Lease of ring {ring:?} publishes {what}: give --address{hint}")]
    NoAddress {
        ring: String,
        what: &'static str,
        hint: &'static str,
    },
    #[error("port-forward to {pod} through the API server: {message}")]
    PortForward { pod: AdminPod, message: String },
    #[error("still not at the owner after {0} replicas (a rebalance under way?): try again")]
    TooManyHops(usize),
    #[error(
        "{address} does not own {cronjob}: {owner} does, and its Lease says no way to reach it"
    )]
    NotOwner {
        address: String,
        cronjob: String,
        owner: String,
    },
    #[error("no replica {0:?} with a way to reach it in the ring's Leases")]
    UnknownReplica(String),
    #[error("{code:?}: {message}")]
    Call { code: tonic::Code, message: String },
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    #[error("{0}")]
    NotServed(String),
    #[error(
        "--watch reads a stream the API server does not carry: use --connect auto, port-forward or direct"
    )]
    NoWatchThroughApiServer,
    #[error("writing output: {0}")]
    Io(#[from] std::io::Error),
}

impl AdminError {
    /// Whether the CronJob's owner may have let it go: then `--watch` asks
    /// where it went (a replica stopping or a rebalance), rather than fail.
    pub(super) fn owner_may_have_moved(&self) -> bool {
        match self {
            AdminError::Call { code, .. } => matches!(
                code,
                tonic::Code::FailedPrecondition
                    | tonic::Code::Unavailable
                    | tonic::Code::Unknown
                    | tonic::Code::Cancelled
                    | tonic::Code::Aborted
            ),
            AdminError::Connect { .. }
            | AdminError::PortForward { .. }
            | AdminError::NotOwner { .. }
            | AdminError::TooManyHops(_)
            | AdminError::Timeout(_) => true,
            _ => false,
        }
    }
}

impl From<tonic::Status> for AdminError {
    fn from(status: tonic::Status) -> Self {
        AdminError::Call {
            code: status.code(),
            message: status.message().to_owned(),
        }
    }
}
