//! The Kubernetes Events the controller records on a CronJob: upstream's
//! reasons, types and message texts, word for word, so that
//! `kubectl describe cronjob` reads the same as with kube-controller-manager.

use super::kind::CronJobKind;
use super::schedule_setup::go_quote;
use super::view::CronJobView;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::ObjectReference;
use std::fmt;

/// The CronJob as the regarding object of its events.
pub fn regarding(cronjob: &CronJobView) -> ObjectReference {
    ObjectReference {
        api_version: Some(cronjob.kind.api_version().to_owned()),
        kind: Some(CronJobKind::KIND.to_owned()),
        namespace: Some(cronjob.namespace().to_owned()),
        name: Some(cronjob.name().to_owned()),
        uid: Some(cronjob.uid.to_string()),
        ..ObjectReference::default()
    }
}

/// `Normal` or `Warning`, as in `corev1.EventType*`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum EventType {
    Normal,
    Warning,
}

/// Every reason the upstream controller records (section 1.12 of the
/// behaviour catalogue). The spelling of each is upstream's, including the
/// capital P of `UnParseableCronJobSchedule`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
pub enum Reason {
    SawCompletedJob,
    MissingJob,
    JobAlreadyActive,
    SuccessfulCreate,
    SuccessfulDelete,
    UnexpectedJob,
    UnknownTimeZone,
    UnparseableSchedule,
    InvalidSchedule,
    TooManyMissedTimes,
    MissSchedule,
    FailedGet,
    FailedDelete,
    FailedCreate,
    UnsupportedSchedule,
    UnParseableCronJobSchedule,
    /// shardcron's own (not upstream's): an entry of `status.active` that is
    /// not a Job this CronJob controls in its namespace was dropped.
    ForeignActiveJob,
    /// shardcron's own: an opt-in annotation has a value it does not take
    /// ([`super::options`]).
    InvalidOption,
    /// shardcron's own: the CronJob was suspended after N consecutive failed
    /// Jobs (`shardcron.io/pause-after-failures`, [`super::pause`]).
    PausedAfterFailures,
    /// shardcron's own: a slot's Job was created by another controller
    /// (kube-controller-manager's CronJob controller left on).
    JobCreatedElsewhere,
}

impl Reason {
    pub fn event_type(self) -> EventType {
        use Reason::*;
        match self {
            SawCompletedJob | MissingJob | JobAlreadyActive | SuccessfulCreate
            | SuccessfulDelete => EventType::Normal,
            _ => EventType::Warning,
        }
    }

    pub fn as_str(self) -> &'static str {
        use Reason::*;
        match self {
            SawCompletedJob => "SawCompletedJob",
            MissingJob => "MissingJob",
            JobAlreadyActive => "JobAlreadyActive",
            SuccessfulCreate => "SuccessfulCreate",
            SuccessfulDelete => "SuccessfulDelete",
            UnexpectedJob => "UnexpectedJob",
            UnknownTimeZone => "UnknownTimeZone",
            UnparseableSchedule => "UnparseableSchedule",
            InvalidSchedule => "InvalidSchedule",
            TooManyMissedTimes => "TooManyMissedTimes",
            MissSchedule => "MissSchedule",
            FailedGet => "FailedGet",
            FailedDelete => "FailedDelete",
            FailedCreate => "FailedCreate",
            UnsupportedSchedule => "UnsupportedSchedule",
            UnParseableCronJobSchedule => "UnParseableCronJobSchedule",
            ForeignActiveJob => "ForeignActiveJob",
            InvalidOption => "InvalidOption",
            PausedAfterFailures => "PausedAfterFailures",
            JobCreatedElsewhere => "JobCreatedElsewhere",
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One Event to record on the CronJob.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    pub event_type: EventType,
    pub reason: Reason,
    pub message: String,
}

/// The longest note the API server takes in an Event (events.k8s.io/v1
/// refuses a longer one): a message is cut to it where it is made, so that
/// an Event that quotes a tenant's input is recorded, shortened, not refused.
pub const MAX_NOTE_BYTES: usize = 1024;

/// `text` cut to at most `max` bytes at a character boundary, ending in
/// `...` when something was cut.
pub fn cut_text(mut text: String, max: usize) -> String {
    if text.len() <= max {
        return text;
    }
    const MARK: &str = "...";
    let mut end = max.saturating_sub(MARK.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    text.push_str(MARK);
    text
}

impl Event {
    fn new(reason: Reason, message: String) -> Self {
        Self {
            event_type: reason.event_type(),
            reason,
            message: cut_text(message, MAX_NOTE_BYTES),
        }
    }

    pub fn saw_completed_job(job: &str, condition: &str) -> Self {
        Self::new(
            Reason::SawCompletedJob,
            format!("Saw completed job: {job}, condition: {condition}"),
        )
    }

    pub fn missing_job(job: &str) -> Self {
        Self::new(
            Reason::MissingJob,
            format!("Active job went missing: {job}"),
        )
    }

    pub fn unexpected_job(job: &str) -> Self {
        Self::new(
            Reason::UnexpectedJob,
            format!("Saw a job that the controller did not create or forgot: {job}"),
        )
    }

    pub fn foreign_active_job(namespace: &str, job: &str, why: &str) -> Self {
        Self::new(
            Reason::ForeignActiveJob,
            format!("Dropped {namespace}/{job} from status.active: {why}"),
        )
    }

    pub fn invalid_option(invalid: &super::options::InvalidOption) -> Self {
        Self::new(Reason::InvalidOption, invalid.to_string())
    }

    pub fn job_already_active() -> Self {
        Self::new(
            Reason::JobAlreadyActive,
            "Not starting job because prior execution is running and concurrency policy is Forbid"
                .to_owned(),
        )
    }

    pub fn successful_create(job: &str) -> Self {
        Self::new(Reason::SuccessfulCreate, format!("Created job {job}"))
    }

    pub fn successful_delete(job: &str) -> Self {
        Self::new(Reason::SuccessfulDelete, format!("Deleted job {job}"))
    }

    pub fn unknown_time_zone(time_zone: &str, error: &str) -> Self {
        Self::new(
            Reason::UnknownTimeZone,
            format!("invalid timeZone: {}: {error}", go_quote(time_zone)),
        )
    }

    pub fn unparseable_schedule(schedule: &str, error: &str) -> Self {
        Self::new(
            Reason::UnparseableSchedule,
            format!("unparseable schedule: {} : {error}", go_quote(schedule)),
        )
    }

    pub fn invalid_schedule(schedule: &str, error: &str) -> Self {
        Self::new(
            Reason::InvalidSchedule,
            format!("invalid schedule: {schedule} : {error}"),
        )
    }

    pub fn too_many_missed_times() -> Self {
        Self::new(
            Reason::TooManyMissedTimes,
            "too many missed start times. Set or decrease .spec.startingDeadlineSeconds or check clock skew"
                .to_owned(),
        )
    }

    pub fn miss_schedule(scheduled: Timestamp) -> Self {
        Self::new(
            Reason::MissSchedule,
            format!(
                "Missed scheduled time to start a job: {}",
                rfc1123z_utc(scheduled)
            ),
        )
    }

    pub fn failed_get(error: &str) -> Self {
        Self::new(Reason::FailedGet, format!("Get job: {error}"))
    }

    pub fn failed_delete(error: &str) -> Self {
        Self::new(Reason::FailedDelete, format!("Deleted job: {error}"))
    }

    pub fn made_elsewhere(job: &str) -> Self {
        Self::new(
            Reason::JobCreatedElsewhere,
            format!(
                "Job {job} was created by another controller, not shardcron: run one CronJob controller (is kube-controller-manager's cronjob-controller still on?)"
            ),
        )
    }

    pub fn failed_create(error: &str) -> Self {
        Self::new(Reason::FailedCreate, format!("Error creating job: {error}"))
    }

    pub fn unsupported_schedule(schedule: &str) -> Self {
        Self::new(
            Reason::UnsupportedSchedule,
            format!(
                "CRON_TZ or TZ used in schedule {} is not officially supported, see https://kubernetes.io/docs/concepts/workloads/controllers/cron-jobs/ for more details",
                go_quote(schedule)
            ),
        )
    }

    pub fn unparseable_cronjob_schedule(schedule: &str) -> Self {
        Self::new(
            Reason::UnParseableCronJobSchedule,
            format!("unparseable schedule for cronjob: {schedule}"),
        )
    }
}

/// Go's `t.UTC().Format(time.RFC1123Z)`: `Mon, 02 Jan 2006 15:04:05 +0000`.
pub fn rfc1123z_utc(t: Timestamp) -> String {
    // Go formats the wall clock of the whole second the instant falls in.
    let whole =
        Timestamp::from_second(t.as_second() - i64::from(t.subsec_nanosecond() < 0)).unwrap_or(t);
    jiff::fmt::strtime::format("%a, %d %b %Y %H:%M:%S +0000", whole)
        .unwrap_or_else(|_| whole.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_is_cut_to_what_the_api_server_takes_at_a_character_boundary() {
        let event = Event::unexpected_job(&"é".repeat(2_000));
        assert!(event.message.len() <= MAX_NOTE_BYTES);
        assert!(event.message.len() > MAX_NOTE_BYTES - 8);
        assert!(event.message.ends_with("é..."), "{}", event.message);
        assert_eq!(cut_text("short".into(), 8), "short");
        assert_eq!(cut_text("exactly8".into(), 8), "exactly8");
        assert_eq!(cut_text("nine char".into(), 8), "nine ...");
    }
}
