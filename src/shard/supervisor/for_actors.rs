//! What the supervisor keeps for CronJobs' actors that are not running
//! here (yet, or any more): the Jobs each CronJob controls, indexed as the
//! Job watch and the loads deliver them ([`crate::shard::jobs`]), and the
//! slot an earlier actor of a CronJob started without recording it
//! ([`crate::shard::unrecorded`]). Both are handed to the CronJob's next
//! actor when it starts, together ([`ForActors::claim`]).

use crate::reconcile::JobSummary;
use crate::shard::jobs::JobIndex;
use crate::shard::unrecorded::UnrecordedSlots;
use jiff::Timestamp;

pub(super) struct ForActors {
    /// Jobs by their CronJob: routed to its actor when it runs, parked
    /// until it starts otherwise.
    pub(super) jobs: JobIndex,
    unrecorded: UnrecordedSlots,
}

impl ForActors {
    pub(super) fn new(jobs: JobIndex) -> Self {
        Self {
            jobs,
            unrecorded: UnrecordedSlots::default(),
        }
    }

    /// What the actor of the CronJob `uid` of `namespace` starts with: the
    /// Jobs parked for it, and a slot started but not recorded.
    pub(super) fn claim(
        &mut self,
        namespace: &str,
        uid: &str,
    ) -> (Vec<JobSummary>, Option<Timestamp>) {
        (self.jobs.claim(namespace, uid), self.unrecorded.take(uid))
    }

    /// The stopped actor of the CronJob `uid` started `slot` without
    /// recording it in the CronJob's status.
    pub(super) fn remember_unrecorded(&mut self, uid: &str, slot: Timestamp) {
        self.unrecorded.remember(uid, slot);
    }
}
