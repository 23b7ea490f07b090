//! What a decision did, for its actor to apply: the status it wrote, the
//! CronJob it read again, the Job it created or deleted, and when to decide
//! next.

use super::annotations::AnnotationsWrite;
use super::setbacks::Setbacks;
use super::status::StatusWrite;
use crate::apiserver::lean_cronjob::LeanCronJob;
use crate::reconcile::{self, JobSummary, Requeue};
use jiff::Timestamp;

/// What happened, for the actor to apply.
#[derive(Debug)]
pub struct DecisionAftermath {
    /// The status now on the server and its resourceVersion, when this
    /// decision wrote it.
    pub written_status: Option<(reconcile::StatusView, Option<String>)>,
    /// The status this decision meant to write when its write gave way to
    /// the next decision ([`StatusWrite::GaveWay`]): nothing on the server
    /// yet, the next decision writes it with what ended meanwhile.
    pub unwritten_status: Option<reconcile::StatusView>,
    /// The CronJob as re-read after a conflict: replace the view with it and
    /// decide again.
    pub reread: Option<LeanCronJob>,
    /// The Job just created, to count as a child before its watch event comes.
    pub created: Option<JobSummary>,
    /// Children deleted by this decision.
    pub deleted: Vec<String>,
    /// When to decide next: the plan's, unless [`Self::setbacks`] say
    /// otherwise ([`Setbacks::requeue`] ranks them).
    pub requeue: Requeue,
    /// The slot this decision skipped, and why (the per-CronJob metrics).
    pub skipped: Option<(reconcile::SkipReason, Timestamp)>,
    /// What the effects met that moves the next decision.
    pub setbacks: Setbacks,
    /// The CronJob was read again before a slot that may have run
    /// elsewhere (`confirm`): the copy is no older than the hand-off now.
    pub confirmed: bool,
}

impl DecisionAftermath {
    /// Records how the status write went (`view`: what it wrote).
    pub(super) fn note_status(&mut self, written: StatusWrite, view: reconcile::StatusView) {
        match written {
            StatusWrite::Written(version) => self.written_status = Some((view, version)),
            StatusWrite::Reread { fresh, conflict } => {
                self.reread = Some(*fresh);
                self.setbacks.failed(conflict);
            }
            StatusWrite::Gone => self.setbacks.gone = true,
            StatusWrite::GaveWay => self.unwritten_status = Some(view),
            StatusWrite::Failed(error) => self.setbacks.failed(error),
        }
    }

    /// Records how the annotations' write went; whether it is still to be
    /// written (the failed Jobs it counts must then stay). The slot history
    /// alone is best effort: a write refused (an admission policy from
    /// before it) or failed never holds a slot, nor the history deletes,
    /// back; what it would have told of the failed Jobs still there is
    /// told by the next write.
    pub(super) fn note_annotations(
        &mut self,
        written: AnnotationsWrite,
        plan: &reconcile::Plan,
    ) -> bool {
        let best_effort = plan.streak.is_none() && written.cronjob.is_none();
        if written.cronjob.is_some() {
            self.reread = written.cronjob;
        }
        match written.backoff {
            Some(_) if best_effort => return false,
            Some(error) => self.setbacks.failed(error),
            None => {}
        }
        !written.done
    }

    /// The actor stopped before the decision wrote anything but `deleted`:
    /// the CronJob's next owner decides again.
    pub(super) fn abandoned(deleted: Vec<String>) -> Self {
        DecisionAftermath {
            deleted,
            ..Self::nothing_done(Requeue::Never)
        }
    }

    pub(super) fn retry(why: &str) -> Self {
        Self::failed(reconcile::ApiError::new(why))
    }

    pub(super) fn failed(error: reconcile::ApiError) -> Self {
        Self::nothing_done(Requeue::Backoff(error))
    }

    /// The CronJob or its namespace is gone: no retry can land.
    pub(super) fn gone() -> Self {
        let mut gone = Self::nothing_done(Requeue::Never);
        gone.setbacks.gone = true;
        gone
    }

    /// A fresh read showed a newer CronJob before a slot that may have run
    /// elsewhere: decide again, at once, from it.
    pub(super) fn decide_again(fresh: LeanCronJob, now: Timestamp) -> Self {
        DecisionAftermath {
            reread: Some(fresh),
            confirmed: true,
            ..Self::nothing_done(Requeue::At(now))
        }
    }

    pub(super) fn nothing_done(requeue: Requeue) -> Self {
        DecisionAftermath {
            written_status: None,
            unwritten_status: None,
            reread: None,
            created: None,
            deleted: Vec::new(),
            requeue,
            skipped: None,
            setbacks: Setbacks::default(),
            confirmed: false,
        }
    }
}
