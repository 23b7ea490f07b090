//! The requests a CronJob's decision makes, as one small interface. The
//! write gateway serves them for real (`super::gateway::Gateway`); the
//! tests of `actor::apply` answer them from a script (201, 409, 404, 422,
//! 500, abandoned), which a real API server cannot be made to do on cue.

use super::deadline;
use super::failure::ApiFailure;
use super::gateway::queue::Priority;
use super::lean_cronjob::{CronJobWithTemplate, LeanCronJob};
use super::lean_job::LeanJob;
use crate::reconcile::{self, CronJobKind, NewJob};
use k8s_openapi::api::batch::v1::{CronJobStatus, Job};
use k8s_openapi::api::core::v1::ObjectReference;
use std::future::Future;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Every kind of request the gateway sends. [`Verb::terms`] is the one
/// table of what each waits behind (its class), how long it may take, and
/// how it is counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verb {
    /// The firing itself.
    CreateJob,
    /// A running Job deleted so that Replace can create the slot's.
    DeleteReplaced,
    /// A Job read back: after AlreadyExists, or before Replace deletes it.
    /// It decides a create or a delete that waits for it, so it waits as
    /// they do.
    GetJob,
    /// The CronJob read again after a status conflict, for the status write
    /// that follows.
    GetCronJob,
    WriteStatus,
    /// A status write that records a slot and may not wait behind creates
    /// (see [`Priority::RecordSlot`]).
    RecordSlot,
    /// A finished Job past the history limit.
    DeleteHistory,
    /// The slot finalizer removed from a finished Job that is going: cleanup,
    /// as a history delete is.
    ReleaseFinished,
    /// The same for a Job deleted while running (Replace, a user): its pods
    /// run until it goes, so it waits as Replace's delete does.
    ReleaseRunning,
    /// The CronJob itself patched: the streak of failed Jobs, a pause
    /// (`shardcron.io/pause-after-failures`). Bookkeeping, as a status write.
    PatchCronJob,
    Event,
}

impl Verb {
    /// Whether the request makes a new object (a Job, an Event: an
    /// Event's series patch is counted with its create), which a
    /// terminating namespace refuses.
    pub fn creates(self) -> bool {
        matches!(self, Verb::CreateJob | Verb::Event)
    }
}

/// What [`Verb::terms`] says of a verb.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Terms {
    pub priority: Priority,
    pub deadline: Duration,
    /// The `verb` label of `shardcron_api_requests_total`.
    pub label: &'static str,
    /// The status code of a success, for the same counter (kube's typed
    /// calls return the object, not the code). An event may be a create or
    /// a patch of its series; it counts as 200 (its span has the real code).
    pub success: &'static str,
}

impl Verb {
    pub const fn terms(self) -> Terms {
        use Priority as P;
        let (priority, deadline, label, success) = match self {
            Verb::CreateJob => (P::CreateJob, deadline::WRITE, "create", "201"),
            Verb::DeleteReplaced => (P::ReplaceDelete, deadline::WRITE, "delete", "200"),
            Verb::GetJob => (P::ReplaceDelete, deadline::GET, "get", "200"),
            // Both reads come before a decision's create (the CronJob's
            // before `UnexpectedJob`, a Job's before `MissingJob` and
            // Replace): behind the status writes, they would hold a slot's
            // start back behind a whole herd's writes.
            Verb::GetCronJob => (P::ReplaceDelete, deadline::GET, "get", "200"),
            Verb::WriteStatus => (P::Status, deadline::WRITE, "patch_status", "200"),
            Verb::RecordSlot => (P::RecordSlot, deadline::WRITE, "patch_status", "200"),
            Verb::DeleteHistory => (P::HistoryDelete, deadline::WRITE, "delete", "200"),
            Verb::ReleaseFinished => (P::HistoryDelete, deadline::WRITE, "patch", "200"),
            Verb::ReleaseRunning => (P::ReplaceDelete, deadline::WRITE, "patch", "200"),
            Verb::PatchCronJob => (P::Status, deadline::WRITE, "patch", "200"),
            Verb::Event => (P::Event, deadline::WRITE, "event", "200"),
        };
        Terms {
            priority,
            deadline,
            label,
            success,
        }
    }
}

/// Why a Job is deleted, which sets its verb's class.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeleteFor {
    Replace,
    History,
}

impl DeleteFor {
    pub fn verb(self) -> Verb {
        match self {
            DeleteFor::Replace => Verb::DeleteReplaced,
            DeleteFor::History => Verb::DeleteHistory,
        }
    }
}

/// Why a status is written, which sets its verb's class.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatusFor {
    /// Anything that can wait behind the creates: the Job, still there,
    /// shows the slot meanwhile.
    Routine,
    /// A slot's only lasting record, or one a successor waits for.
    RecordSlot,
}

impl StatusFor {
    pub fn verb(self) -> Verb {
        match self {
            StatusFor::Routine => Verb::WriteStatus,
            StatusFor::RecordSlot => Verb::RecordSlot,
        }
    }
}

pub trait JobRequests {
    /// Creates `job`; the answer is the created Job as the controller
    /// reads it (its UID, resourceVersion, ...), not the whole object.
    fn create_job(
        &self,
        namespace: &str,
        job: NewJob,
    ) -> impl Future<Output = Result<LeanJob, ApiFailure>>;

    /// Deletes Job `name` if its UID is still `uid` (background propagation).
    fn delete_job(
        &self,
        namespace: &str,
        name: &str,
        uid: &str,
        why: DeleteFor,
    ) -> impl Future<Output = Result<(), ApiFailure>>;

    fn get_job(&self, namespace: &str, name: &str)
    -> impl Future<Output = Result<Job, ApiFailure>>;

    /// The CronJob of `kind` named `name` with its Job template typed
    /// (one too big for the watch's decode to keep).
    fn get_job_template(
        &self,
        kind: CronJobKind,
        namespace: &str,
        name: &str,
    ) -> impl Future<Output = Result<CronJobWithTemplate, ApiFailure>>;

    /// The CronJob of `kind` named `name`, as the watch decodes it.
    fn get_cronjob(
        &self,
        kind: CronJobKind,
        namespace: &str,
        name: &str,
    ) -> impl Future<Output = Result<LeanCronJob, ApiFailure>>;

    /// Removes [`reconcile::SLOT_FINALIZER`] from Job `name` if its UID is
    /// still `uid`. `running`: the Job had not finished (see
    /// [`Verb::ReleaseRunning`]).
    fn release_job(
        &self,
        namespace: &str,
        name: &str,
        uid: &str,
        running: bool,
    ) -> impl Future<Output = Result<(), ApiFailure>>;

    /// Writes the CronJob's status, if it is still at `resource_version`;
    /// answers the CronJob written.
    fn write_status(
        &self,
        kind: CronJobKind,
        namespace: &str,
        name: &str,
        resource_version: Option<&str>,
        status: &CronJobStatus,
        why: StatusFor,
    ) -> impl Future<Output = Result<LeanCronJob, ApiFailure>>;

    /// Patches the CronJob itself (annotations, `spec.suspend`), if it is
    /// still at `resource_version`; answers the CronJob written.
    fn patch_cronjob(
        &self,
        kind: CronJobKind,
        namespace: &str,
        name: &str,
        resource_version: Option<&str>,
        patch: &reconcile::CronJobPatch,
    ) -> impl Future<Output = Result<LeanCronJob, ApiFailure>>;

    /// Records an event (queued, never waited for).
    fn record(&self, regarding: ObjectReference, event: &reconcile::Event);

    /// The same requests, never abandoned when their sender stops (see
    /// `Gateway::abandoning_on`): one still waiting for its turn then
    /// moves to the most urgent class, as the hand-off waits for it.
    fn unabandoned(&self) -> Self
    where
        Self: Sized;

    /// The same requests, those still waiting for their turn given up
    /// unsent ([`ApiFailure::GaveWay`]) once `newer` is cancelled: a newer
    /// decision will write what they would have, and more.
    fn giving_way_to(&self, newer: CancellationToken) -> Self
    where
        Self: Sized;
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: [Verb; 11] = [
        Verb::RecordSlot,
        Verb::CreateJob,
        Verb::DeleteReplaced,
        Verb::GetJob,
        Verb::GetCronJob,
        Verb::WriteStatus,
        Verb::DeleteHistory,
        Verb::ReleaseFinished,
        Verb::ReleaseRunning,
        Verb::PatchCronJob,
        Verb::Event,
    ];

    #[test]
    fn the_firing_goes_first_events_last_and_reads_before_a_create_next() {
        for verb in ALL.into_iter().filter(|v| *v != Verb::RecordSlot) {
            let terms = verb.terms();
            assert!(
                Verb::CreateJob.terms().priority <= terms.priority,
                "{verb:?}"
            );
            assert!(terms.priority <= Verb::Event.terms().priority, "{verb:?}");
        }
        assert_eq!(
            Verb::GetJob.terms().priority,
            Verb::DeleteReplaced.terms().priority
        );
        assert_eq!(
            Verb::GetCronJob.terms().priority,
            Verb::DeleteReplaced.terms().priority
        );
        assert!(Verb::GetCronJob.terms().priority < Verb::WriteStatus.terms().priority);
        // Only a slot's record goes before the creates.
        assert!(Verb::RecordSlot.terms().priority < Verb::CreateJob.terms().priority);
        assert_eq!(
            Verb::PatchCronJob.terms().priority,
            Verb::WriteStatus.terms().priority
        );
        assert_eq!(StatusFor::Routine.verb(), Verb::WriteStatus);
        assert_eq!(StatusFor::RecordSlot.verb(), Verb::RecordSlot);
        assert_eq!(DeleteFor::Replace.verb(), Verb::DeleteReplaced);
        assert_eq!(DeleteFor::History.verb(), Verb::DeleteHistory);
        // A release waits as the delete that made its Job go would.
        assert_eq!(
            Verb::ReleaseRunning.terms().priority,
            Verb::DeleteReplaced.terms().priority
        );
        assert_eq!(
            Verb::ReleaseFinished.terms().priority,
            Verb::DeleteHistory.terms().priority
        );
    }

    #[test]
    fn reads_have_the_shorter_deadline_and_only_a_create_answers_201() {
        for verb in ALL {
            let terms = verb.terms();
            let read = terms.label == "get";
            let expected = if read { deadline::GET } else { deadline::WRITE };
            assert_eq!(terms.deadline, expected, "{verb:?}");
            assert_eq!(terms.success == "201", verb == Verb::CreateJob, "{verb:?}");
        }
    }
}
