//! Which held Jobs may go: a Job that carries [`SLOT_FINALIZER`](super::SLOT_FINALIZER) loses
//! the finalizer once the CronJob's status records the slot it was made
//! for, whether it is being deleted or not. Until then it shows the slot
//! taken, to this replica and to the next owner alike; after that the
//! finalizer protects nothing, and kept it would hold the Job's deletion
//! (a namespace's too) whenever no replica serves the CronJob's kind
//! (scaled to 0, `--cronjob-kinds` changed). One patch per such Job, the
//! price of Jobs that may vanish (`ttlSecondsAfterFinished`) alone.

use super::view::{CronJobView, JobSummary, StatusView};

/// A Job whose [`SLOT_FINALIZER`](super::SLOT_FINALIZER) is to be removed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Release {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    /// It is being deleted and had not finished: its pods run until it
    /// goes, so the release is urgent.
    pub running: bool,
    /// The slot is recorded only by this decision's status write: the
    /// finalizer goes once that write has landed, not before.
    pub after_status_write: bool,
}

/// The held children of `cronjob` that may lose the finalizer: those
/// whose slot the status read records, or that this decision's status
/// write (`planned`, written when `writes_status`) records. Every one of
/// them when the CronJob itself is being deleted: it has no slot left to
/// protect. A held Job without a scheduled-timestamp annotation (edited by
/// hand) has no slot to record and goes at once.
pub fn releases(
    cronjob: &CronJobView,
    planned: &StatusView,
    writes_status: bool,
    children: &[JobSummary],
) -> Vec<Release> {
    children
        .iter()
        .filter(|job| job.held)
        .filter_map(|job| {
            let recorded_before = |status: &StatusView| {
                job.scheduled
                    .is_none_or(|slot| !status.does_not_record(slot))
            };
            let after_status_write = if cronjob.deleting || recorded_before(&cronjob.status) {
                false
            } else if writes_status && recorded_before(planned) {
                true
            } else {
                return None;
            };
            Some(Release {
                namespace: cronjob.namespace().to_owned(),
                name: job.name.clone(),
                uid: job.uid.clone(),
                running: job.deleting && job.finished.is_none(),
                after_status_write,
            })
        })
        .collect()
}
