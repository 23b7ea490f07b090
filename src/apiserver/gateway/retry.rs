//! What the write gateway does after a failed write: retry with bounded
//! exponential backoff, re-read and re-decide, or give up. Pure.

use std::time::Duration;

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
