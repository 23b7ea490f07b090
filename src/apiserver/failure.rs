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
        /// A NotFound of the namespace itself (`details.kind:
        /// namespaces`): the request's namespace does not exist.
        namespace_missing: bool,
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
    /// A newer decision of its sender replaces it (one of the CronJob's
    /// Jobs ended while it waited for its turn): it was never sent.
    #[error("gave way: a newer decision replaces the request before it was sent")]
    GaveWay,
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

    /// The answer says the request's namespace is gone or going: nothing
    /// written there can land again (a terminating namespace never takes
    /// new content; a recreated one is another namespace).
    pub fn is_namespace_gone(&self) -> bool {
        matches!(
            self,
            ApiFailure::Status {
                namespace_terminating: true,
                ..
            } | ApiFailure::Status {
                namespace_missing: true,
                ..
            }
        )
    }

    /// What a request for `namespace` fails with, unsent, while an
    /// earlier answer said the namespace is gone (the gateway's
    /// [`GoneNamespaces`](super::gateway::gone::GoneNamespaces)).
    pub fn namespace_gone(namespace: &str) -> Self {
        ApiFailure::Status {
            code: 404,
            reason: "NotFound".to_owned(),
            message: format!(
                "namespaces \"{namespace}\" not found (an earlier answer; not sent again)"
            ),
            namespace_terminating: false,
            namespace_missing: true,
        }
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
                namespace_missing: status.code == 404
                    && status
                        .details
                        .as_ref()
                        .is_some_and(|d| d.kind == "namespaces"),
                reason: status.reason,
                message: status.message,
            },
            other => ApiFailure::Transport(other.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The answers as kube-apiserver gives them (captured on the local
    /// control plane): a create in a deleted namespace, one in a
    /// terminating namespace, and a Job or Event that is not there.
    fn failure(status: serde_json::Value) -> ApiFailure {
        let status: kube::core::Status = serde_json::from_value(status).expect("a Status");
        ApiFailure::from(kube::Error::Api(Box::new(status)))
    }

    #[test]
    fn a_namespace_that_is_gone_or_going_is_told_from_an_object_that_is_not_there() {
        let missing = failure(serde_json::json!({
            "status": "Failure", "code": 404, "reason": "NotFound",
            "message": "namespaces \"tenant\" not found",
            "details": {"name": "tenant", "kind": "namespaces"}
        }));
        assert!(missing.is_namespace_gone() && missing.is_not_found());
        let terminating = failure(serde_json::json!({
            "status": "Failure", "code": 403, "reason": "Forbidden",
            "message": "events.events.k8s.io \"x\" is forbidden: unable to create new content in namespace tenant because it is being terminated",
            "details": {"name": "x", "group": "events.k8s.io", "kind": "events",
                        "causes": [{"reason": "NamespaceTerminating", "field": "metadata.namespace"}]}
        }));
        assert!(terminating.is_namespace_gone() && terminating.is_namespace_terminating());
        let job = failure(serde_json::json!({
            "status": "Failure", "code": 404, "reason": "NotFound",
            "message": "jobs.batch \"x\" not found",
            "details": {"name": "x", "group": "batch", "kind": "jobs"}
        }));
        assert!(job.is_not_found() && !job.is_namespace_gone());
        assert!(!ApiFailure::Transport("reset".into()).is_namespace_gone());
    }
}
