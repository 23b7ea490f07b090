//! When a CronJob's next decision comes, once its effects have run: the
//! plan's own requeue, unless an effect met a setback. Pure: the effects
//! note what they met, and one rule ranks it here, in code rather than by
//! the order the effects happen to run in.

use crate::reconcile::{ApiError, Requeue};

/// What the effects of one decision met that moves its next decision.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Setbacks {
    /// An answer said the CronJob or its namespace is gone (a NotFound of
    /// its status write, a namespace gone or terminating): no retry can
    /// land; its deletion, which the watch brings, ends the actor.
    pub gone: bool,
    /// The first write that failed and must be retried (the status, the
    /// annotations, a slot finalizer's release): the cause the retry's
    /// warning names, where later failures are often its consequences.
    pub failed: Option<ApiError>,
    /// The history deletes ran out of time: the next decision, which
    /// sends those left, comes by then (`history_wait` in apply.rs).
    pub history_left: Option<Requeue>,
}

impl Setbacks {
    /// Notes a failed write (the first one is kept).
    pub fn failed(&mut self, error: ApiError) {
        self.failed.get_or_insert(error);
    }

    /// The next decision after a plan that asked for `planned`. Ranked:
    /// gone (never: no retry can land) over a failure (backoff) over
    /// history deletes left (by their retry time) over the plan's own.
    pub fn requeue(&self, planned: &Requeue) -> Requeue {
        if self.gone {
            Requeue::Never
        } else if let Some(error) = &self.failed {
            Requeue::Backoff(error.clone())
        } else if let Some(left) = &self.history_left {
            left.clone()
        } else {
            planned.clone()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use jiff::Timestamp;

    #[test]
    fn gone_outranks_a_failure_which_outranks_deletes_left_which_outrank_the_plan() {
        let slot = Requeue::At(Timestamp::from_second(60).expect("a time"));
        let sooner = Requeue::At(Timestamp::from_second(30).expect("a time"));
        let status = ApiError::new("status: reset".to_owned());
        let release = ApiError::new("release: reset".to_owned());
        let setbacks = |gone: bool, failed: &[&ApiError], history_left: Option<&Requeue>| {
            let mut setbacks = Setbacks {
                gone,
                history_left: history_left.cloned(),
                ..Setbacks::default()
            };
            for error in failed {
                setbacks.failed((*error).clone());
            }
            setbacks
        };
        let table = [
            (setbacks(false, &[], None), slot.clone()),
            (setbacks(false, &[], Some(&sooner)), sooner.clone()),
            (
                setbacks(false, &[&status], Some(&sooner)),
                Requeue::Backoff(status.clone()),
            ),
            // The first failure is the one named.
            (
                setbacks(false, &[&status, &release], None),
                Requeue::Backoff(status.clone()),
            ),
            (setbacks(true, &[&status], Some(&sooner)), Requeue::Never),
            (setbacks(true, &[], None), Requeue::Never),
        ];
        for (setbacks, expected) in table {
            assert_eq!(setbacks.requeue(&slot), expected, "{setbacks:?}");
            assert_eq!(
                setbacks.requeue(&Requeue::Never),
                match expected {
                    Requeue::At(_) if setbacks.history_left.is_none() => Requeue::Never,
                    other => other,
                },
                "{setbacks:?}, nothing planned"
            );
        }
    }
}
