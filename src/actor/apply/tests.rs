//! The decision's I/O against scripted answers: what a real API server
//! cannot be made to answer on cue (conflicts, failures, a stop that
//! lands between two requests).

use super::deletes::history_wait;
use super::*;
use crate::apiserver::failure::ApiFailure;
use crate::apiserver::lean_cronjob::CronJobWithTemplate;
use crate::apiserver::lean_cronjob::LeanCronJob;
use crate::apiserver::lean_cronjob::RawJson;
use crate::apiserver::lean_cronjob::TemplateSpec;
use crate::apiserver::lean_job::LeanJob;
use crate::apiserver::requests::{DeleteFor, StatusFor};
use crate::reconcile::{CronJobKind, CronJobView, JobSummary, NewJob, Requeue};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::ObjectReference;
use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;
use tokio_util::sync::CancellationToken;

/// The answers the test scripts, and what was asked.
#[derive(Default)]
struct Script {
    creates: VecDeque<Result<Job, ApiFailure>>,
    statuses: VecDeque<Result<CronJob, ApiFailure>>,
    cronjob_gets: VecDeque<Result<CronJob, ApiFailure>>,
    cronjob_patches: VecDeque<Result<CronJob, ApiFailure>>,
    /// Cancelled when the create is answered (a stop landing then).
    stop_on_create: Option<CancellationToken>,
    /// That stop has landed: deletes not yet sent are abandoned, as the
    /// gateway abandons them.
    stopped: bool,
    /// Keep the Jobs sent to be created, in `created`.
    keep_created: bool,
    /// Deletes wait for their turn forever (a herd's backlog).
    stall_deletes: bool,
    /// Deletes answered with a server error.
    fail_deletes: bool,
    /// A Job of the CronJob ends while the status write waits for its
    /// turn: a write that gives way then is never sent.
    job_ends_before_status_turn: bool,
    created: Vec<Job>,
    asked: Vec<String>,
    events: Vec<String>,
}

#[derive(Clone, Default)]
struct Scripted {
    script: Rc<RefCell<Script>>,
    /// This handle abandons nothing (see `unabandoned`).
    unabandoned: bool,
    /// Its requests give way to a newer decision (see `giving_way_to`).
    gives_way: bool,
}

fn failure(code: u16, reason: &str) -> ApiFailure {
    ApiFailure::Status {
        code,
        reason: reason.into(),
        message: format!("{code} {reason}"),
        namespace_terminating: false,
        namespace_missing: false,
    }
}

impl Scripted {
    /// A write answered OK, or abandoned once the stop has landed (as
    /// the gateway abandons what it has not sent).
    fn write(&self, what: &str) -> futures::future::Ready<Result<(), ApiFailure>> {
        if self.script.borrow().stopped && !self.unabandoned {
            return futures::future::ready(Err(ApiFailure::Abandoned));
        }
        self.ask(what);
        futures::future::ready(Ok(()))
    }

    fn ask(&self, what: &str) {
        let mark = if self.unabandoned {
            " (unabandoned)"
        } else {
            ""
        };
        self.script.borrow_mut().asked.push(format!("{what}{mark}"));
    }
}

impl JobRequests for Scripted {
    fn create_job(
        &self,
        _namespace: &str,
        job: NewJob,
    ) -> impl Future<Output = Result<LeanJob, ApiFailure>> {
        self.ask("create");
        let job = job.typed().expect("a test's template came as JSON");
        let mut script = self.script.borrow_mut();
        if let Some(stop) = script.stop_on_create.take() {
            stop.cancel();
            script.stopped = true;
        }
        if script.keep_created {
            script.created.push(job.clone());
        }
        let answer = script
            .creates
            .pop_front()
            .unwrap_or(Ok(job))
            .map(|created| {
                // As the server answers: the Job on the wire, decoded lean.
                serde_json::from_value(serde_json::to_value(&created).expect("a Job encodes"))
                    .expect("a Job decodes as a LeanJob")
            });
        async move { answer }
    }

    fn delete_job(
        &self,
        _: &str,
        name: &str,
        _: &str,
        _: DeleteFor,
    ) -> impl Future<Output = Result<(), ApiFailure>> {
        if self.script.borrow().stall_deletes {
            self.ask(&format!("delete {name} (never answered)"));
            return futures::future::Either::Left(futures::future::pending());
        }
        if self.script.borrow().fail_deletes {
            self.ask(&format!("delete {name} (failed)"));
            let error = failure(500, "InternalError");
            return futures::future::Either::Right(futures::future::ready(Err(error)));
        }
        futures::future::Either::Right(self.write(&format!("delete {name}")))
    }

    fn release_job(
        &self,
        _: &str,
        name: &str,
        _: &str,
        _: bool,
    ) -> impl Future<Output = Result<(), ApiFailure>> {
        self.write(&format!("release {name}"))
    }

    fn get_job(&self, _: &str, name: &str) -> impl Future<Output = Result<Job, ApiFailure>> {
        self.ask(&format!("get job {name}"));
        async { Err(failure(404, "NotFound")) }
    }

    fn get_cronjob(
        &self,
        _: CronJobKind,
        _: &str,
        _: &str,
    ) -> impl Future<Output = Result<LeanCronJob, ApiFailure>> {
        self.ask("get cronjob");
        let answer = self
            .script
            .borrow_mut()
            .cronjob_gets
            .pop_front()
            .unwrap_or_else(|| Ok(cronjob("9")))
            .map(|got| LeanCronJob::from(&got));
        async move { answer }
    }

    fn get_job_template(
        &self,
        _: CronJobKind,
        _: &str,
        _: &str,
    ) -> impl Future<Output = Result<CronJobWithTemplate, ApiFailure>> {
        self.ask("get template");
        let got = cronjob("9");
        let answer = Ok(CronJobWithTemplate {
            kind: CronJobKind::Batch,
            metadata: got.metadata,
            spec: TemplateSpec {
                job_template: RawJson::from(
                    &serde_json::to_value(&got.spec.job_template).expect("JSON"),
                ),
            },
            status: None,
        });
        async move { answer }
    }

    fn write_status(
        &self,
        _: CronJobKind,
        _: &str,
        _: &str,
        _: Option<&str>,
        _: &k8s_openapi::api::batch::v1::CronJobStatus,
        why: StatusFor,
    ) -> impl Future<Output = Result<LeanCronJob, ApiFailure>> {
        let what = match why {
            StatusFor::Routine => "write status",
            StatusFor::RecordSlot => "record slot",
        };
        if self.gives_way && self.script.borrow().job_ends_before_status_turn {
            self.ask(&format!("{what}, given way"));
            return futures::future::Either::Left(futures::future::ready(Err(ApiFailure::GaveWay)));
        }
        self.ask(what);
        let answer = self
            .script
            .borrow_mut()
            .statuses
            .pop_front()
            .unwrap_or_else(|| Ok(cronjob("8")))
            .map(|written| LeanCronJob::from(&written));
        futures::future::Either::Right(async move { answer })
    }

    fn patch_cronjob(
        &self,
        _: CronJobKind,
        _: &str,
        _: &str,
        version: Option<&str>,
        patch: &reconcile::CronJobPatch,
    ) -> impl Future<Output = Result<LeanCronJob, ApiFailure>> {
        self.ask(&format!(
            "patch cronjob at {} suspend={}",
            version.unwrap_or("-"),
            patch.suspend
        ));
        let answer = self
            .script
            .borrow_mut()
            .cronjob_patches
            .pop_front()
            .unwrap_or_else(|| Ok(cronjob("10")))
            .map(|written| LeanCronJob::from(&written));
        async move { answer }
    }

    fn record(&self, _: ObjectReference, event: &reconcile::Event) {
        let reason = event.reason.as_str().to_owned();
        self.script.borrow_mut().events.push(reason);
    }

    fn unabandoned(&self) -> Self {
        Scripted {
            unabandoned: true,
            ..self.clone()
        }
    }

    fn giving_way_to(&self, _: CancellationToken) -> Self {
        Scripted {
            gives_way: true,
            ..self.clone()
        }
    }
}

/// An every-minute CronJob created just before the 09:30 slot, never run,
/// at resourceVersion `version` (one created earlier would have slots that
/// never ran, which the slot history records).
fn cronjob(version: &str) -> CronJob {
    serde_json::from_value(serde_json::json!({
        "metadata": {
            "name": "report", "namespace": "team-a", "uid": "c-1",
            "resourceVersion": version,
            "creationTimestamp": "2024-03-01T09:29:30Z"
        },
        "spec": {
            "schedule": "* * * * *",
            "jobTemplate": {"spec": {"template": {"spec": {
                "restartPolicy": "OnFailure",
                "containers": [{"name": "c", "image": "busybox"}]
            }}}}
        }
    }))
    .expect("a CronJob")
}

fn snapshot() -> Snapshot {
    let cronjob = cronjob("7");
    Snapshot {
        due: None,
        cronjob: CronJobView::from_api(&cronjob).expect("a usable CronJob"),
        resource_version: Some("7".into()),
        children: Vec::new(),
        known_slot: None,
        confirm_through: None,
        stop: CancellationToken::new(),
        job_ended: CancellationToken::new(),
        status_unwritten: false,
    }
}

/// Runs one decision at a moment a slot is due, against `script`;
/// returns what it applied, the script as it ended, and the metrics.
fn run(script: Script, snapshot: &Snapshot) -> (DecisionAftermath, Script, String) {
    let requests = Scripted {
        script: Rc::new(RefCell::new(script)),
        unabandoned: false,
        gives_way: false,
    };
    let metrics = Metrics::new();
    let feed = DecisionFeed::default();
    let now: Timestamp = "2024-03-01T09:30:05Z".parse().expect("a time");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a runtime");
    let applied = runtime.block_on(async {
        let services = DecisionServices {
            requests: &requests,
            metrics: &metrics,
            replica: "r0",
            default_zone: &TimeZone::UTC,
            slot_history: true,
            // A second after the decision's `now`, on the paused runtime.
            clock: Clock::following_tokio("2024-03-01T09:30:06Z".parse().expect("a time")),
            feed: &feed,
        };
        decide_with_lookups(&services, snapshot, now).await
    });
    let script = std::mem::take(&mut *requests.script.borrow_mut());
    (applied, script, metrics.encode())
}

#[test]
fn a_due_slot_creates_its_job_then_records_it() {
    let (applied, script, metrics) = run(Script::default(), &snapshot());
    // The write that records a created Job never waits on a stop.
    assert_eq!(script.asked, ["create", "write status (unabandoned)"]);
    // Created at the injected clock's 09:30:06, for the 09:30 slot.
    assert!(
        metrics.contains("shardcron_job_creation_skew_seconds_sum 6.0"),
        "{metrics}"
    );
    assert!(applied.created.is_some());
    assert!(applied.written_status.is_some());
    assert_eq!(script.events, ["SuccessfulCreate"]);
}

/// The snapshot of an actor whose key moved off a live peer at 09:30:02:
/// the 09:30 slot may have run there.
fn handed_over() -> Snapshot {
    Snapshot {
        confirm_through: Some("2024-03-01T09:30:02Z".parse().expect("a time")),
        ..snapshot()
    }
}

#[test]
fn a_slot_due_before_a_hand_off_is_created_once_the_cronjob_read_again_is_unchanged() {
    let script = Script {
        cronjob_gets: [Ok(cronjob("7"))].into(),
        ..Script::default()
    };
    let (applied, script, _) = run(script, &handed_over());
    assert_eq!(
        script.asked,
        ["get cronjob", "create", "write status (unabandoned)"]
    );
    assert!(applied.created.is_some());
    assert!(applied.confirmed, "one read per hand-off");
}

#[test]
fn a_slot_the_previous_owner_recorded_is_decided_again_from_the_newer_cronjob_not_created() {
    // Version 9: the previous owner's status write, not yet on the watch.
    let (applied, script, _) = run(Script::default(), &handed_over());
    assert_eq!(script.asked, ["get cronjob"]);
    assert!(applied.created.is_none());
    assert!(applied.confirmed);
    assert!(
        applied
            .reread
            .is_some_and(|fresh| fresh.metadata.resource_version.as_deref() == Some("9"))
    );
    let now: Timestamp = "2024-03-01T09:30:05Z".parse().expect("a time");
    assert_eq!(applied.requeue, Requeue::At(now), "decided again at once");
}

#[test]
fn a_failed_read_before_a_hand_off_slot_creates_nothing_and_retries() {
    let script = Script {
        cronjob_gets: [Err(failure(500, "InternalError"))].into(),
        ..Script::default()
    };
    let (applied, script, _) = run(script, &handed_over());
    assert_eq!(script.asked, ["get cronjob"]);
    assert!(applied.created.is_none() && !applied.confirmed);
    assert!(matches!(applied.requeue, Requeue::Backoff(_)));
}

#[test]
fn a_slot_due_after_the_hand_off_needs_no_read() {
    let after_the_slot = Snapshot {
        confirm_through: Some("2024-03-01T09:29:59Z".parse().expect("a time")),
        ..snapshot()
    };
    let (applied, script, _) = run(Script::default(), &after_the_slot);
    assert_eq!(script.asked, ["create", "write status (unabandoned)"]);
    assert!(applied.created.is_some() && !applied.confirmed);
}

#[test]
fn a_status_conflict_rereads_and_never_overwrites() {
    let script = Script {
        statuses: [Err(failure(409, "Conflict"))].into(),
        ..Script::default()
    };
    let (applied, script, _) = run(script, &snapshot());
    assert_eq!(
        script.asked,
        [
            "create",
            "write status (unabandoned)",
            "get cronjob (unabandoned)"
        ]
    );
    assert!(applied.written_status.is_none());
    assert!(applied.reread.is_some());
    assert!(matches!(applied.requeue, Requeue::Backoff(_)));
}

#[test]
fn a_failed_status_write_is_retried_with_backoff() {
    let script = Script {
        statuses: [Err(ApiFailure::Transport("reset".into()))].into(),
        ..Script::default()
    };
    let (applied, ..) = run(script, &snapshot());
    assert!(applied.created.is_some());
    assert!(matches!(applied.requeue, Requeue::Backoff(_)));
}

/// The answers that say the CronJob or its namespace is gone.
fn gone(code: u16, terminating: bool, namespace_missing: bool) -> ApiFailure {
    ApiFailure::Status {
        code,
        reason: "gone".into(),
        message: "gone".into(),
        namespace_terminating: terminating,
        namespace_missing,
    }
}

#[test]
fn a_cronjob_or_namespace_gone_is_not_retried() {
    // The status write finds the CronJob deleted.
    let script = Script {
        statuses: [Err(failure(404, "NotFound"))].into(),
        ..Script::default()
    };
    let (applied, ..) = run(script, &snapshot());
    assert!(applied.setbacks.gone);
    assert_eq!(applied.requeue, Requeue::Never);
    // The create finds the namespace terminating (upstream retries it with
    // backoff), or gone altogether.
    for answer in [gone(403, true, false), gone(404, false, true)] {
        let script = Script {
            creates: [Err(answer)].into(),
            ..Script::default()
        };
        let (applied, script, _) = run(script, &snapshot());
        assert!(applied.setbacks.gone);
        assert_eq!(applied.requeue, Requeue::Never);
        assert!(script.events.is_empty(), "{:?}", script.events);
    }
    // A failure that says nothing of the kind is retried as before.
    let script = Script {
        statuses: [Err(failure(500, "InternalError"))].into(),
        ..Script::default()
    };
    let (applied, ..) = run(script, &snapshot());
    assert!(!applied.setbacks.gone);
    assert!(matches!(applied.requeue, Requeue::Backoff(_)));
}

#[test]
fn a_rejected_create_is_a_warning_and_writes_no_active_job() {
    let script = Script {
        creates: [Err(failure(422, "Invalid"))].into(),
        ..Script::default()
    };
    let (applied, script, _) = run(script, &snapshot());
    assert!(applied.created.is_none());
    assert_eq!(script.events, ["FailedCreate"]);
}

#[test]
fn a_stop_before_the_create_abandons_the_decision_without_a_trace() {
    let script = Script {
        creates: [Err(ApiFailure::Abandoned)].into(),
        ..Script::default()
    };
    let (applied, script, _) = run(script, &snapshot());
    assert_eq!(
        script.asked,
        ["create"],
        "nothing after the abandoned create"
    );
    assert!(
        script.events.is_empty(),
        "no FailedCreate for a create never sent"
    );
    assert!(applied.created.is_none() && applied.written_status.is_none());
    assert!(matches!(applied.requeue, Requeue::Never));
}

#[test]
fn a_stop_after_the_create_still_records_the_slot() {
    // The stop lands while the create is answered: the status write that
    // records the new Job goes out anyway, on the unabandoned handle.
    let snapshot = snapshot();
    let script = Script {
        stop_on_create: Some(snapshot.stop.clone()),
        ..Script::default()
    };
    let (applied, script, _) = run(script, &snapshot);
    assert!(snapshot.stop.is_cancelled());
    assert_eq!(script.asked, ["create", "record slot (unabandoned)"]);
    assert!(applied.written_status.is_some());
    assert_eq!(script.events, ["SuccessfulCreate"]);
}

/// The snapshot of a CronJob whose Jobs have `ttlSecondsAfterFinished: 0`.
fn with_ttl_zero() -> Snapshot {
    let mut cronjob = cronjob("7");
    if let Some(spec) = cronjob.spec.job_template.spec.as_mut() {
        spec.ttl_seconds_after_finished = Some(0);
    }
    Snapshot {
        cronjob: CronJobView::from_api(&cronjob).expect("a usable CronJob"),
        ..snapshot()
    }
}

#[test]
fn a_job_the_ttl_controller_may_remove_is_held_so_its_record_waits_as_usual() {
    // The TTL controller may delete the Job a second after it ends; the
    // slot finalizer keeps it until the status records the slot, so the
    // write need not go ahead of a herd's creates.
    let script = Script {
        keep_created: true,
        ..Script::default()
    };
    let (applied, script, _) = run(script, &with_ttl_zero());
    assert_eq!(script.asked, ["create", "write status (unabandoned)"]);
    assert!(applied.written_status.is_some());
    let created = script.created.first().expect("a created Job");
    assert_eq!(
        created.metadata.finalizers.as_deref(),
        Some([reconcile::SLOT_FINALIZER.to_owned()].as_slice())
    );
    // Without a TTL, no finalizer (only this controller deletes it).
    let script = Script {
        keep_created: true,
        ..Script::default()
    };
    let (_, script, _) = run(script, &snapshot());
    assert_eq!(script.created[0].metadata.finalizers, None);
}

/// A held Job of the 09:29 slot, finished and being deleted.
fn held_and_deleting(scheduled: &str) -> JobSummary {
    JobSummary {
        name: "report-held".into(),
        uid: "j-held".into(),
        start_time: None,
        completion_time: Some("2024-03-01T09:29:30Z".parse().expect("a time")),
        finished: Some(reconcile::Finished::Complete),
        failed_at: None,
        failure_reason: None,
        succeeded: true,
        scheduled: Some(scheduled.parse().expect("a time")),
        deleting: true,
        held: true,
    }
}

#[test]
fn a_held_job_is_released_only_once_a_status_write_records_its_slot() {
    // lastScheduleTime is unset: the slot is recorded by this
    // decision's write, then the finalizer goes.
    let snapshot = Snapshot {
        children: vec![held_and_deleting("2024-03-01T09:30:00Z")],
        ..with_ttl_zero()
    };
    let (_, script, _) = run(Script::default(), &snapshot);
    assert_eq!(
        script.asked,
        ["record slot (unabandoned)", "release report-held"]
    );

    // The write fails: the Job stays held, and the next decision retries.
    let script = Script {
        statuses: [Err(failure(500, "InternalError"))].into(),
        ..Script::default()
    };
    let (applied, script, _) = run(script, &snapshot);
    assert_eq!(script.asked, ["record slot (unabandoned)"]);
    assert!(matches!(applied.requeue, Requeue::Backoff(_)));
}

/// The snapshot with no successful Job kept and one finished child.
fn with_a_finished_child() -> Snapshot {
    let mut cronjob = cronjob("7");
    cronjob.spec.successful_jobs_history_limit = Some(0);
    Snapshot {
        cronjob: CronJobView::from_api(&cronjob).expect("a usable CronJob"),
        children: vec![JobSummary {
            name: "report-old".into(),
            uid: "j-old".into(),
            start_time: None,
            completion_time: Some("2024-03-01T09:29:30Z".parse().expect("a time")),
            finished: Some(reconcile::Finished::Complete),
            failed_at: None,
            failure_reason: None,
            succeeded: true,
            scheduled: Some("2024-03-01T09:29:00Z".parse().expect("a time")),
            deleting: false,
            held: false,
        }],
        ..snapshot()
    }
}

#[test]
fn history_deletes_go_after_the_create_so_they_never_hold_a_slot_back() {
    let (applied, script, _) = run(Script::default(), &with_a_finished_child());
    // The status first: it records the new Job at once, while a history
    // delete may wait behind a herd's backlog.
    assert_eq!(
        script.asked,
        ["create", "write status (unabandoned)", "delete report-old"]
    );
    assert_eq!(applied.deleted, ["j-old"]);
    // Events in upstream's order, whatever the order of the requests.
    assert_eq!(script.events, ["SuccessfulDelete", "SuccessfulCreate"]);
}

#[test]
fn a_failed_history_delete_is_told_in_upstreams_order_and_holds_nothing_back() {
    let script = Script {
        fail_deletes: true,
        ..Script::default()
    };
    let (applied, script, _) = run(script, &with_a_finished_child());
    assert_eq!(
        script.asked,
        [
            "create",
            "write status (unabandoned)",
            "delete report-old (failed)"
        ]
    );
    assert!(applied.deleted.is_empty());
    assert!(applied.written_status.is_some());
    // The events of the delete as it went (the decision's core run again
    // with its failure), not as the plan assumed it would.
    assert_eq!(script.events, ["FailedDelete", "SuccessfulCreate"]);
    // The next slot as planned: the next decision deletes the Job again.
    assert_eq!(
        applied.requeue,
        Requeue::At("2024-03-01T09:31:00Z".parse().expect("a time"))
    );
}

#[test]
fn history_deletes_that_wait_too_long_are_left_to_a_decision_before_the_next_slot() {
    let script = Script {
        stall_deletes: true,
        ..Script::default()
    };
    let (applied, script, _) = run(script, &with_a_finished_child());
    assert_eq!(
        script.asked,
        [
            "create",
            "write status (unabandoned)",
            "delete report-old (never answered)"
        ]
    );
    assert!(applied.deleted.is_empty());
    assert!(applied.written_status.is_some());
    // The clock reads 09:30:06: 30 s at most, then a decision sends
    // them again, before the 09:31 slot.
    assert_eq!(
        applied.requeue,
        Requeue::At("2024-03-01T09:30:36Z".parse().expect("a time"))
    );
    assert_eq!(script.events, ["SuccessfulCreate"]);
}

#[test]
fn history_deletes_wait_until_the_next_slot_and_thirty_seconds_at_most() {
    let now: Timestamp = "2024-03-01T09:30:50Z".parse().expect("a time");
    let at = |t: &str| Requeue::At(t.parse().expect("a time"));
    let seconds = std::time::Duration::from_secs;
    let backoff = Requeue::Backoff(reconcile::ApiError::new("409"));
    let table = [
        // The slot in 10 s: 10 s, then the slot's decision.
        (
            at("2024-03-01T09:31:00Z"),
            seconds(10),
            at("2024-03-01T09:31:00Z"),
        ),
        // The slot in an hour: 30 s, then a decision for them alone.
        (
            at("2024-03-01T10:31:00Z"),
            seconds(30),
            at("2024-03-01T09:31:20Z"),
        ),
        (Requeue::Never, seconds(30), at("2024-03-01T09:31:20Z")),
        // Already due: the deletes are tried only if they answer at once.
        (
            at("2024-03-01T09:30:00Z"),
            seconds(0),
            at("2024-03-01T09:30:00Z"),
        ),
        (backoff.clone(), seconds(30), backoff),
    ];
    for (requeue, wait, retry) in table {
        assert_eq!(history_wait(&requeue, now), (wait, retry), "{requeue:?}");
    }
}

#[test]
fn a_stop_after_the_create_leaves_the_history_deletes_to_the_next_owner() {
    let snapshot = with_a_finished_child();
    let script = Script {
        stop_on_create: Some(snapshot.stop.clone()),
        ..Script::default()
    };
    let (applied, script, _) = run(script, &snapshot);
    assert_eq!(script.asked, ["create", "record slot (unabandoned)"]);
    assert!(applied.deleted.is_empty());
    assert!(applied.written_status.is_some());
    // No event for a delete never sent.
    assert_eq!(script.events, ["SuccessfulCreate"]);
}

#[test]
fn a_slot_recorded_from_its_job_is_written_even_when_stopping_and_its_job_kept_if_not() {
    // Nothing due (the 09:30 Job exists, finished, and lastScheduleTime
    // is unset: its status write was lost); the actor is stopping.
    let mut snapshot = with_a_finished_child();
    snapshot.children[0].scheduled = Some("2024-03-01T09:30:00Z".parse().expect("a time"));
    snapshot.stop.cancel();
    let stopped = Script {
        stopped: true,
        ..Script::default()
    };
    let (applied, script, _) = run(stopped, &snapshot);
    assert_eq!(script.asked, ["record slot (unabandoned)"]);
    assert!(applied.written_status.is_some());
    assert!(script.events.is_empty(), "{:?}", script.events);

    // The write fails: the Job that shows the slot is not deleted.
    let snapshot = Snapshot {
        stop: CancellationToken::new(),
        ..snapshot
    };
    let script = Script {
        statuses: [Err(failure(500, "InternalError"))].into(),
        ..Script::default()
    };
    let (applied, script, _) = run(script, &snapshot);
    assert_eq!(script.asked, ["record slot (unabandoned)"]);
    assert!(applied.deleted.is_empty());
    assert!(matches!(applied.requeue, Requeue::Backoff(_)));
}

/// A CronJob that pauses after one failure and keeps no failed Job,
/// with one failed child (not yet counted).
fn with_one_failure() -> Snapshot {
    let mut cronjob = cronjob("7");
    cronjob.metadata.annotations = Some(
        [(
            reconcile::PAUSE_AFTER_FAILURES_ANNOTATION.to_owned(),
            "1".to_owned(),
        )]
        .into(),
    );
    cronjob.spec.failed_jobs_history_limit = Some(0);
    let failed_at: Timestamp = "2024-03-01T09:29:40Z".parse().expect("a time");
    Snapshot {
        cronjob: CronJobView::from_api(&cronjob).expect("a usable CronJob"),
        children: vec![JobSummary {
            name: "report-failed".into(),
            uid: "j-failed".into(),
            start_time: None,
            completion_time: None,
            finished: Some(reconcile::Finished::Failed),
            failed_at: Some(failed_at),
            failure_reason: None,
            succeeded: false,
            scheduled: None,
            deleting: false,
            held: false,
        }],
        ..snapshot()
    }
}

#[test]
fn a_pause_is_written_before_the_failed_job_is_deleted_and_then_announced() {
    let (applied, script, _) = run(Script::default(), &with_one_failure());
    // No create: the 09:30 slot is due, but the CronJob pauses. The
    // patch is conditional on the version the status write produced.
    assert_eq!(
        script.asked,
        [
            "write status",
            "patch cronjob at 8 suspend=true",
            "delete report-failed"
        ]
    );
    assert_eq!(script.events, ["PausedAfterFailures", "SuccessfulDelete"]);
    // The CronJob written replaces the actor's view.
    assert!(applied.reread.is_some());
    assert_eq!(applied.requeue, Requeue::Never);
}

#[test]
fn a_pause_refused_by_a_newer_cronjob_rereads_and_keeps_the_failed_job() {
    let script = Script {
        cronjob_patches: [Err(failure(409, "Conflict"))].into(),
        ..Script::default()
    };
    let (applied, script, _) = run(script, &with_one_failure());
    // The failure it counts stays until a decision from the fresh
    // CronJob has written it; no event for a pause not made.
    assert_eq!(
        script.asked,
        [
            "write status",
            "patch cronjob at 8 suspend=true",
            "get cronjob"
        ]
    );
    assert!(script.events.is_empty(), "{:?}", script.events);
    assert!(applied.deleted.is_empty());
    assert!(applied.reread.is_some());
    assert!(matches!(applied.requeue, Requeue::Backoff(_)));

    // Any other failure: retried with backoff, the Job kept too.
    let script = Script {
        cronjob_patches: [Err(failure(403, "Forbidden"))].into(),
        ..Script::default()
    };
    let (applied, script, _) = run(script, &with_one_failure());
    assert_eq!(
        script.asked,
        ["write status", "patch cronjob at 8 suspend=true"]
    );
    assert!(applied.deleted.is_empty());
    assert!(matches!(applied.requeue, Requeue::Backoff(_)));
}

#[test]
fn a_refused_slot_history_write_holds_nothing_back() {
    // Without the pause opt-in the failure goes to the slot history alone,
    // and an admission policy from before it refuses the write.
    let mut cronjob = cronjob("7");
    cronjob.spec.failed_jobs_history_limit = Some(0);
    let snapshot = Snapshot {
        cronjob: CronJobView::from_api(&cronjob).expect("a usable CronJob"),
        ..with_one_failure()
    };
    let script = Script {
        cronjob_patches: [Err(failure(403, "Forbidden"))].into(),
        ..Script::default()
    };
    let (applied, script, _) = run(script, &snapshot);
    // The slot starts and is recorded, the history is tried, the failed
    // Job goes, and the next decision is the next slot's, not a backoff.
    assert_eq!(
        script.asked,
        [
            "create",
            "write status (unabandoned)",
            "patch cronjob at 8 suspend=false",
            "delete report-failed"
        ]
    );
    assert_eq!(applied.deleted, ["j-failed"]);
    assert!(
        !matches!(applied.requeue, Requeue::Backoff(_)),
        "{:?}",
        applied.requeue
    );
}

/// The answers when the CronJob's Job ends while the status write waits.
fn job_ends_first() -> Script {
    Script {
        job_ends_before_status_turn: true,
        ..Script::default()
    }
}

/// The decision after a slot's status write gave way: the status it meant
/// to write, its Job (`created`) now as `finished`.
fn after_giving_way(
    given_way: DecisionAftermath,
    finished: Option<reconcile::Finished>,
) -> Snapshot {
    let mut job = given_way.created.expect("the slot's Job");
    job.finished = finished;
    job.succeeded = finished == Some(reconcile::Finished::Complete);
    job.completion_time = job
        .succeeded
        .then(|| "2024-03-01T09:30:07Z".parse().expect("a time"));
    let mut snapshot = snapshot();
    snapshot.cronjob.status = given_way.unwritten_status.expect("the status meant");
    snapshot.children = vec![job];
    snapshot.known_slot = Some("2024-03-01T09:30:00Z".parse().expect("a time"));
    snapshot.status_unwritten = true;
    snapshot
}

#[test]
fn a_slots_status_write_gives_way_when_its_job_ends_first_and_the_next_writes_both() {
    let (given_way, script, metrics) = run(job_ends_first(), &snapshot());
    assert_eq!(
        script.asked,
        ["create", "write status, given way (unabandoned)"]
    );
    assert!(
        metrics.contains("shardcron_status_writes_given_way_total 1"),
        "{metrics}"
    );
    // Not a failure: nothing written, the Job known, the slot's event told.
    assert!(given_way.written_status.is_none());
    assert!(matches!(given_way.requeue, Requeue::At(_)));
    assert_eq!(script.events, ["SuccessfulCreate"]);
    let meant = given_way
        .unwritten_status
        .as_ref()
        .expect("the status meant");
    assert_eq!(meant.active.len(), 1);
    let slot: Timestamp = "2024-03-01T09:30:00Z".parse().expect("a time");
    assert_eq!(meant.last_schedule_time.get(), Some(slot));

    // The next decision: one write, the Job out of `active` with its
    // completion and the slot recorded, and upstream's event for it. It
    // does not give way again.
    let next = after_giving_way(given_way, Some(reconcile::Finished::Complete));
    let (applied, script, _) = run(job_ends_first(), &next);
    assert_eq!(script.asked, ["write status (unabandoned)"]);
    let (written, _) = applied.written_status.expect("written");
    assert!(written.active.is_empty());
    assert_eq!(written.last_schedule_time.get(), Some(slot));
    assert!(written.last_successful_time.get().is_some());
    assert_eq!(script.events, ["SawCompletedJob"]);
}

#[test]
fn an_unwritten_status_is_written_even_when_the_plan_changes_nothing() {
    let (given_way, _, _) = run(job_ends_first(), &snapshot());
    // Another Job ended, not this one: the plan itself writes nothing.
    let next = after_giving_way(given_way, None);
    let (applied, script, _) = run(Script::default(), &next);
    assert_eq!(script.asked, ["write status (unabandoned)"]);
    assert!(applied.written_status.is_some());
}

#[test]
fn an_unwritten_status_whose_job_is_gone_is_the_slots_only_record() {
    let (given_way, _, _) = run(job_ends_first(), &snapshot());
    let mut next = after_giving_way(given_way, Some(reconcile::Finished::Complete));
    next.children[0].deleting = true;
    let (_, script, _) = run(Script::default(), &next);
    assert_eq!(script.asked, ["record slot (unabandoned)"]);
}

#[test]
fn a_slots_only_record_never_gives_way() {
    // The actor stops as the Job is created: the write is what the next
    // owner waits for, in the most urgent class, whatever ends meanwhile.
    let snapshot = snapshot();
    let script = Script {
        stop_on_create: Some(snapshot.stop.clone()),
        job_ends_before_status_turn: true,
        ..Script::default()
    };
    let (applied, script, _) = run(script, &snapshot);
    assert_eq!(script.asked, ["create", "record slot (unabandoned)"]);
    assert!(applied.written_status.is_some());
}
