//! What the write gateway does after a failed write: retry with bounded
//! exponential backoff, re-read and re-decide, or give up. Pure.

use super::gone::Going;
use crate::apiserver::failure::ApiFailure;
use std::time::Duration;

/// What the gateway's request path does after an attempt failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterFailure {
    /// Send it again after this delay, taking a new turn.
    Retry(Duration),
    /// The answer says the namespace is going: the gateway remembers it
    /// (nothing more is sent there meanwhile) and returns the failure.
    NamespaceGoing(Going),
    /// Return the failure to the caller.
    GiveUp,
}

/// Judges attempt number `attempt` of a request for `namespace` (empty:
/// cluster-scoped), which failed with `failure`: nothing is retried
/// without this replica's Lease, after the process began to stop, or once
/// the namespace is going; a conflict goes back to be re-read; the rest as
/// [`Backoff::after_failure`] says.
pub fn after_failure(
    backoff: &Backoff,
    failure: &ApiFailure,
    namespace: &str,
    attempt: u32,
) -> AfterFailure {
    if matches!(
        failure,
        ApiFailure::Fenced | ApiFailure::Closed | ApiFailure::Abandoned | ApiFailure::GaveWay
    ) {
        return AfterFailure::GiveUp;
    }
    if failure.is_namespace_gone() && !namespace.is_empty() {
        return AfterFailure::NamespaceGoing(if failure.is_namespace_terminating() {
            Going::Terminating
        } else {
            Going::Gone
        });
    }
    match backoff.after_failure(attempt, failure.code()) {
        Retry::After(delay) => AfterFailure::Retry(delay),
        Retry::Reread | Retry::GiveUp => AfterFailure::GiveUp,
    }
}

/// The gateway's answer to a failed write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retry {
    /// Try the same write again after this delay.
    After(Duration),
    /// The object changed under us (409 Conflict): re-read it and run the
    /// decision again; never overwrite blindly.
    Reread,
    /// Retrying cannot help (validation, RBAC, not found) or the attempts are spent.
    GiveUp,
}

/// Bounded exponential backoff: `base * 2^attempt`, at most `cap`, for
/// `max_attempts` attempts in all.
#[derive(Debug, Clone, Copy)]
pub struct Backoff {
    pub base: Duration,
    pub cap: Duration,
    pub max_attempts: u32,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            base: Duration::from_millis(100),
            cap: Duration::from_secs(10),
            max_attempts: 5,
        }
    }
}

impl Backoff {
    /// The decision after attempt number `attempt` (1 = the first try)
    /// failed with HTTP status `code` (`None`: no answer, e.g. a timeout or
    /// a broken connection).
    pub fn after_failure(&self, attempt: u32, code: Option<u16>) -> Retry {
        match code {
            Some(409) => return Retry::Reread,
            // Throttled, server-side trouble, or no answer at all: transient.
            Some(429) | Some(500..=599) | None => {}
            Some(_) => return Retry::GiveUp,
        }
        if attempt >= self.max_attempts {
            return Retry::GiveUp;
        }
        let factor = 1u32
            .checked_shl(attempt.saturating_sub(1))
            .unwrap_or(u32::MAX);
        Retry::After(self.base.saturating_mul(factor).min(self.cap))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(code: u16, reason: &str, namespace_terminating: bool) -> ApiFailure {
        ApiFailure::Status {
            code,
            reason: reason.to_owned(),
            message: String::new(),
            namespace_terminating,
            namespace_missing: false,
        }
    }

    #[test]
    fn a_failed_attempt_is_retried_only_when_a_retry_can_land() {
        let backoff = Backoff::default();
        let first = Retry::After(Duration::from_millis(100));
        let table = [
            // (failure, namespace, what then)
            (
                ApiFailure::Transport("reset".into()),
                "a",
                AfterFailure::Retry(Duration::from_millis(100)),
            ),
            (
                status(503, "ServiceUnavailable", false),
                "a",
                AfterFailure::Retry(Duration::from_millis(100)),
            ),
            (
                status(429, "TooManyRequests", false),
                "a",
                AfterFailure::Retry(Duration::from_millis(100)),
            ),
            // No answer, but the Lease lapsed or the process stops: never again.
            (ApiFailure::Fenced, "a", AfterFailure::GiveUp),
            (ApiFailure::Closed, "a", AfterFailure::GiveUp),
            (ApiFailure::Abandoned, "a", AfterFailure::GiveUp),
            (ApiFailure::GaveWay, "a", AfterFailure::GiveUp),
            (status(409, "Conflict", false), "a", AfterFailure::GiveUp),
            (status(422, "Invalid", false), "a", AfterFailure::GiveUp),
            (
                status(403, "Forbidden", true),
                "a",
                AfterFailure::NamespaceGoing(Going::Terminating),
            ),
            (
                ApiFailure::namespace_gone("a"),
                "a",
                AfterFailure::NamespaceGoing(Going::Gone),
            ),
            // A cluster-scoped request has no namespace to remember.
            (ApiFailure::namespace_gone(""), "", AfterFailure::GiveUp),
        ];
        assert_eq!(backoff.after_failure(1, None), first);
        for (failure, namespace, expected) in table {
            assert_eq!(
                after_failure(&backoff, &failure, namespace, 1),
                expected,
                "{failure:?} in {namespace:?}"
            );
        }
        assert_eq!(
            after_failure(&backoff, &ApiFailure::Transport("reset".into()), "a", 5),
            AfterFailure::GiveUp,
            "the attempts are spent"
        );
    }

    #[test]
    fn transient_failures_back_off_exponentially_up_to_the_cap() {
        let b = Backoff {
            base: Duration::from_millis(100),
            cap: Duration::from_millis(500),
            max_attempts: 5,
        };
        let delays: Vec<_> = (1..5).map(|a| b.after_failure(a, Some(503))).collect();
        assert_eq!(
            delays,
            [100, 200, 400, 500].map(|ms| Retry::After(Duration::from_millis(ms)))
        );
        assert_eq!(b.after_failure(5, Some(503)), Retry::GiveUp);
        assert_eq!(
            b.after_failure(1, None),
            Retry::After(Duration::from_millis(100))
        );
        assert_eq!(
            b.after_failure(2, Some(429)),
            Retry::After(Duration::from_millis(200))
        );
    }

    #[test]
    fn conflicts_reread_and_client_errors_give_up() {
        let b = Backoff::default();
        assert_eq!(b.after_failure(1, Some(409)), Retry::Reread);
        for code in [400, 403, 404, 422] {
            assert_eq!(b.after_failure(1, Some(code)), Retry::GiveUp, "{code}");
        }
    }

    #[test]
    fn huge_attempt_numbers_do_not_overflow() {
        let b = Backoff {
            max_attempts: u32::MAX,
            ..Backoff::default()
        };
        assert_eq!(
            b.after_failure(200, None),
            Retry::After(Duration::from_secs(10))
        );
    }
}
