//! The state a decision starts from: the actor's copy of its CronJob and
//! Jobs, what it knows beyond them, and the tokens that end the decision
//! early.

use crate::reconcile::{CronJobView, JobSummary};
use jiff::Timestamp;
use tokio_util::sync::CancellationToken;

/// The state a decision starts from.
pub struct Snapshot {
    /// The slot the timer fired for: the decision is a firing
    /// (`cronjob.fire`, traced from its start) and runs at that slot at
    /// the earliest, whatever a clock stepped back reads meanwhile. `None`:
    /// a reconcile (a change to the CronJob or one of its Jobs), traced
    /// only once it turns out to do something.
    pub due: Option<Timestamp>,
    pub cronjob: CronJobView,
    pub resource_version: Option<Box<str>>,
    pub children: Vec<JobSummary>,
    /// The latest slot a Job of this CronJob is known to have been made for
    /// (see [`reconcile::Input::known_slot`]).
    pub known_slot: Option<Timestamp>,
    /// A slot due at or before this instant may have been run by another
    /// replica that this copy does not show yet: its Job is created only
    /// after a fresh read (`confirm`).
    pub confirm_through: Option<Timestamp>,
    /// Cancelled when the actor is told to stop (its CronJob moves to
    /// another replica): requests not yet sent are abandoned, and the
    /// decision ends after the request in flight, except that a status
    /// write recording a Job just created still goes out.
    pub stop: CancellationToken,
    /// Cancelled when one of the CronJob's Jobs ends while this decision
    /// runs. A status write recording a slot in the Routine class (its Job
    /// lasts until the slot is recorded) still waiting for its turn then
    /// gives way: the next decision writes the same status with the Job's
    /// end, one request instead of two (at the default QPS such a write
    /// waits seconds behind a herd's creates, longer than many Jobs run).
    pub job_ended: CancellationToken,
    /// `cronjob.status` is what an earlier decision meant to write and gave
    /// way ([`super::DecisionAftermath::unwritten_status`]), not the server's at
    /// `resource_version`: this decision writes it even if its plan changes
    /// nothing, in the Routine class only while a Job shows its slot, and
    /// does not give way again.
    pub status_unwritten: bool,
}
