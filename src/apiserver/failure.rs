//! How a request to the API server failed, as the decision and the
//! gateway's retry policy need to tell it apart.

use crate::reconcile::ApiError;
use thiserror::Error;

/// The cause client-go looks for (`corev1.NamespaceTerminatingCause`).
const NAMESPACE_TERMINATING_CAUSE: &str = "NamespaceTerminating";

/// A request that did not succeed.
#[derive(Debug, Clone, Error)]
pub enum ApiFailure {
    /// The API server answered with an error status.
    #[error("{message}")]
    Status {
        code: u16,
        reason: String,
        message: String,
        /// The status carries client-go's `NamespaceTerminating` cause.
        namespace_terminating: bool,
    },
    /// No answer: connection refused or broken, timeout, undecodable body.
    #[error("{0}")]
    Transport(String),
    /// The process is shutting down.
    #[error("the write gateway has shut down")]
    Closed,
    /// This replica's Lease is not surely valid: it must not write.
    #[error("fenced: this replica's Lease is not valid by its own clock")]
    Fenced,
    /// Its sender stopped (the CronJob moved to another replica) before the
    /// request's turn came: it was never sent.
    #[error("abandoned: the CronJob's actor stopped before the request was sent")]
    Abandoned,
}

impl ApiFailure {
    pub fn code(&self) -> Option<u16> {
        match self {
            ApiFailure::Status { code, .. } => Some(*code),
            _ => None,
        }
    }

    pub fn is_not_found(&self) -> bool {
        self.code() == Some(404)
    }

    pub fn is_already_exists(&self) -> bool {
        matches!(self, ApiFailure::Status { code: 409, reason, .. } if reason == "AlreadyExists")
    }

    pub fn is_conflict(&self) -> bool {
        matches!(self, ApiFailure::Status { code: 409, reason, .. } if reason == "Conflict")
    }

    pub fn is_namespace_terminating(&self) -> bool {
        matches!(
            self,
            ApiFailure::Status {
                namespace_terminating: true,
                ..
            }
        )
    }

    /// The error as the decision core records it (its text goes into events).
    pub fn to_api_error(&self) -> ApiError {
        ApiError::new(self.to_string())
    }

    pub(super) fn code_label(&self) -> String {
        match self {
            ApiFailure::Status { code, .. } => code.to_string(),
            _ => "error".to_owned(),
        }
    }
}

impl From<kube::Error> for ApiFailure {
    fn from(error: kube::Error) -> Self {
        match error {
            kube::Error::Api(status) => ApiFailure::Status {
                code: status.code,
                namespace_terminating: status.details.as_ref().is_some_and(|d| {
                    d.causes
                        .iter()
                        .any(|c| c.reason == NAMESPACE_TERMINATING_CAUSE)
                }),
                reason: status.reason,
                message: status.message,
            },
            other => ApiFailure::Transport(other.to_string()),
        }
    }
}
