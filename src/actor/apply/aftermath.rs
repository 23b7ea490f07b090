//! What a decision did, for its actor to apply: the status it wrote, the
//! CronJob it read again, the Job it created or deleted, and when to decide
//! next.

use super::annotations::AnnotationsStage;
use super::setbacks::Setbacks;
use super::start::Started;
use super::status::{StatusStage, StatusWrite};
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

/// What each stage of a plan carried out returned, for the aftermath to
/// fold.
pub(super) struct Stages {
    pub started: Started,
    pub status: StatusStage,
    pub annotations: AnnotationsStage,
    /// The setbacks of every stage, gone included.
    pub setbacks: Setbacks,
    /// The plan's requeue as the effects left it (the follow-up's).
    pub planned: Requeue,
    pub confirmed: bool,
}

impl DecisionAftermath {
    /// The aftermath of a plan carried out to its end.
    pub(super) fn fold(stages: Stages, plan: &reconcile::Plan) -> Self {
        let Stages {
            started,
            status,
            annotations,
            setbacks,
            planned,
            confirmed,
        } = stages;
        let (mut written_status, mut unwritten_status, mut reread) = (None, None, None);
        if let StatusStage::Sent { write, view, .. } = status {
            match write {
                StatusWrite::Written(version) => written_status = Some((view, version)),
                StatusWrite::Reread { fresh, .. } => reread = Some(*fresh),
                StatusWrite::GaveWay => unwritten_status = Some(view),
                StatusWrite::Gone | StatusWrite::Failed(_) => {}
            }
        }
        DecisionAftermath {
            written_status,
            unwritten_status,
            reread: annotations.into_cronjob().or(reread),
            created: started.created,
            deleted: started.effects.deleted,
            requeue: setbacks.requeue(&planned),
            skipped: reconcile::skipped_slot(&plan.decisions),
            setbacks,
            confirmed,
        }
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
