//! One decision carried out: the pure decision core asks, this answers.
//!
//! [`decide_and_apply`] answers the decision's live GETs, performs its
//! writes through the gateway (Replace's deletes, the create, the status,
//! then the history deletes), records the events in upstream's order, and
//! returns what the actor must remember
//! and when it must look again. It holds no state of its own: the actor
//! passes a snapshot in and applies the result.

mod setbacks;

pub use setbacks::Setbacks;

use super::feed::{DecisionFeed, DecisionRecord};
use super::own_annotations::write_own_annotations;
use super::services::ActorServices;
use crate::apiserver::bucket::{self, Bucket};
use crate::apiserver::failure::ApiFailure;
use crate::apiserver::lean_cronjob::{CronJobWithTemplate, LeanCronJob};
use crate::apiserver::requests::{DeleteFor, JobRequests, StatusFor};
use crate::reconcile::{
    self, CreateResult, CronJobKind, CronJobView, DeleteReason, Deletion, EffectResults, Input,
    JobLookup, JobSummary, LiveAnswers, LiveJob, Lookup, Requeue, Step,
};
use crate::telemetry::Metrics;
use crate::telemetry::metrics::{
    CreateLabels, CreateResultLabel, DeleteLabels, DeleteReasonLabel, OkLabel,
};
use crate::telemetry::traces;
use jiff::Timestamp;
use jiff::tz::TimeZone;
use k8s_openapi::api::batch::v1::JobTemplateSpec;
use k8s_openapi::api::core::v1::ObjectReference;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

/// Upstream needs at most three rounds of GETs; one more guards against a
/// decision that keeps asking.
const MAX_LOOKUP_ROUNDS: usize = 4;

/// Names the replica that created a Job: which replica acted on a slot is
/// visible from the API server's own records (a departure from upstream,
/// which has one controller and writes nothing of the kind).
pub const CREATED_BY_ANNOTATION: &str = "shardcron.io/created-by";

/// The W3C trace context of the firing that created a Job, so a user can go
/// from the Job to its trace.
pub const TRACEPARENT_ANNOTATION: &str = "shardcron.io/traceparent";

/// The state a decision starts from.
pub struct Snapshot {
    pub cronjob: CronJobView,
    pub resource_version: Option<Box<str>>,
    pub children: Vec<JobSummary>,
    /// The latest slot a Job of this CronJob is known to have been made for
    /// (see [`reconcile::Input::known_slot`]).
    pub known_slot: Option<Timestamp>,
    /// Cancelled when the actor is told to stop (its CronJob moves to
    /// another replica): requests not yet sent are abandoned, and the
    /// decision ends after the request in flight, except that a status
    /// write recording a Job just created still goes out.
    pub stop: CancellationToken,
}

/// The root span of one decision: `cronjob.fire` when the timer fired for
/// slot `due`, else `cronjob.reconcile` (a change to the CronJob or one of
/// its Jobs). The decision and the skew are recorded on it later.
pub fn decision_span(
    cronjob: &CronJobView,
    replica: &str,
    due: Option<Timestamp>,
) -> tracing::Span {
    let span = match due {
        Some(slot) => tracing::info_span!(
            "cronjob.fire",
            k8s.namespace.name = %cronjob.namespace(),
            k8s.cronjob.name = %cronjob.name(),
            k8s.cronjob.uid = %cronjob.uid,
            cronjob.scheduled_time = %slot,
            cronjob.concurrency_policy = ?cronjob.spec.concurrency_policy,
            cronjob.decision = tracing::field::Empty,
            cronjob.skew_ms = tracing::field::Empty,
            shardcron.replica = %replica,
            trace_id = tracing::field::Empty,
        ),
        None => tracing::info_span!(
            "cronjob.reconcile",
            k8s.namespace.name = %cronjob.namespace(),
            k8s.cronjob.name = %cronjob.name(),
            k8s.cronjob.uid = %cronjob.uid,
            cronjob.concurrency_policy = ?cronjob.spec.concurrency_policy,
            cronjob.decision = tracing::field::Empty,
            cronjob.skew_ms = tracing::field::Empty,
            shardcron.replica = %replica,
            trace_id = tracing::field::Empty,
        ),
    };
    // So that log lines inside the decision name its trace.
    if let Some(trace_id) = traces::trace_id_of(&span) {
        span.record("trace_id", tracing::field::display(trace_id));
    }
    span
}

/// What happened, for the actor to apply.
#[derive(Debug)]
pub struct DecisionAftermath {
    /// The status now on the server and its resourceVersion, when this
    /// decision wrote it.
    pub written_status: Option<(reconcile::StatusView, Option<String>)>,
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
}

/// Runs one decision at `now` and carries it out through the gateway.
pub async fn decide_and_apply(
    actor: &ActorServices,
    snapshot: &Snapshot,
    now: Timestamp,
) -> DecisionAftermath {
    let cronjob = &snapshot.cronjob;
    let gateway = actor
        .gateway
        .for_key(&cronjob.key)
        .abandoning_on(snapshot.stop.clone());
    let services = DecisionServices {
        requests: &gateway,
        metrics: &actor.metrics,
        replica: &actor.replica,
        default_zone: &actor.default_zone,
        slot_history: actor.slot_history,
        clock: actor.clock,
        feed: &actor.feed,
    };
    decide_with_lookups(&services, snapshot, now).await
}

/// What a decision uses besides its snapshot: where its requests go, what
/// it counts and names, and the clock that times a Job's creation (its skew
/// from the slot; the decision itself runs at the `now` it is given).
struct DecisionServices<'a, R> {
    requests: &'a R,
    metrics: &'a Metrics,
    replica: &'a str,
    default_zone: &'a TimeZone,
    slot_history: bool,
    clock: fn() -> Timestamp,
    feed: &'a DecisionFeed,
}

async fn decide_with_lookups<R: JobRequests + Clone>(
    services: &DecisionServices<'_, R>,
    snapshot: &Snapshot,
    now: Timestamp,
) -> DecisionAftermath {
    let gateway = services.requests;
    let input = Input {
        cronjob: &snapshot.cronjob,
        children: &snapshot.children,
        known_slot: snapshot.known_slot,
        now,
        default_zone: services.default_zone,
    };
    let mut live = LiveAnswers::new();
    let mut plan = None;
    for _ in 0..MAX_LOOKUP_ROUNDS {
        // No span of its own: the decision is a few microseconds, and what
        // it decided is recorded on the firing's span (`cronjob.decision`).
        let step = reconcile::reconcile(&input, &live);
        match step {
            Step::Plan(p) => {
                plan = Some(p);
                break;
            }
            Step::Lookup(lookups) => {
                for lookup in lookups {
                    answer(gateway, &snapshot.cronjob, &mut live, lookup).await;
                }
                if snapshot.stop.is_cancelled() {
                    return DecisionAftermath::abandoned(Vec::new());
                }
            }
        }
    }
    let Some(plan) = plan else {
        return DecisionAftermath::retry("the decision kept asking for live reads");
    };
    let effects = apply_plan(services, snapshot, &input, &live, &plan);
    // A decision that is not a firing gets its trace only when it writes or
    // records something: the many Job updates that change nothing would
    // otherwise cost a trace each (see the tracing overhead benchmark).
    if tracing::Span::current().is_none() && !plan.is_noop() {
        effects
            .instrument(decision_span(&snapshot.cronjob, services.replica, None))
            .await
    } else {
        effects.await
    }
}

/// Carries a plan out: Replace's deletes, the create, the status write,
/// history deletes, events.
async fn apply_plan<R: JobRequests + Clone>(
    services: &DecisionServices<'_, R>,
    snapshot: &Snapshot,
    input: &Input<'_>,
    live: &LiveAnswers,
    plan: &reconcile::Plan,
) -> DecisionAftermath {
    tracing::Span::current().record("cronjob.decision", reconcile::slot_outcome(&plan.decisions));
    let gateway = services.requests;
    let namespace = snapshot.cronjob.namespace();
    let mut results = EffectResults::new();
    let mut deleted = Vec::new();
    // Replace's deletes, then the create, then (below) the status and the
    // history deletes. A failed Replace delete cancels the create; a history
    // delete never affects it, and in the lowest write class it would hold
    // the slot's start back behind a herd's backlog of writes. Upstream
    // sends the history deletes first.
    let (replaces, history): (Vec<&Deletion>, Vec<&Deletion>) =
        plan.deletes.iter().partition(|d| d.blocks_create());
    let mut replace_failed = false;
    for deletion in replaces {
        match delete(services, deletion, &mut results, &mut deleted).await {
            Deleted::Abandoned => return DecisionAftermath::abandoned(deleted),
            Deleted::Failed => {
                replace_failed = true;
                break;
            }
            Deleted::Done => {}
        }
    }
    let mut created = None;
    if let Some(create) = plan.create.as_ref().filter(|_| !replace_failed)
        && let Some(job) = create.job.clone()
    {
        let Some((result, job)) = create_job(services, namespace, create, job).await else {
            return DecisionAftermath::abandoned(deleted);
        };
        created = job;
        results.set_create(result);
    }

    // The status before the history deletes: it records the new Job (or a
    // known slot) at once, while those deletes may wait seconds in the
    // lowest write class, and a replica that lapses meanwhile must not
    // leave its slot unrecorded. Their success is assumed here, as in the
    // plan; a failed one leaves a finished Job that the next decision
    // removes from `status.active` (upstream removes it one sync earlier).
    let recorded = reconcile::follow_up(input, live, &results);
    let moves_last_schedule =
        recorded.status.last_schedule_time > input.cronjob.status.last_schedule_time;
    let mut applied = DecisionAftermath {
        written_status: None,
        reread: None,
        created,
        deleted: Vec::new(),
        requeue: recorded.requeue.clone(),
        skipped: reconcile::skipped_slot(&plan.decisions),
        setbacks: Setbacks::default(),
    };
    let mut keep_evidence = false;
    if let Some(status) = recorded.status_update() {
        // A status write that records a slot (a Job this decision created,
        // or one a lost write left unrecorded) goes out even if the actor
        // is stopping: the next owner must see the slot taken, even after
        // the Job itself is gone (history limit 0, ttlSecondsAfterFinished).
        let records_a_slot = applied.created.is_some() || moves_last_schedule;
        let writer = if records_a_slot {
            Some(gateway.unabandoned())
        } else if snapshot.stop.is_cancelled() {
            None
        } else {
            Some(gateway.clone())
        };
        let why = status_class(records_a_slot, snapshot, plan);
        if let Some(writer) = writer {
            write_status(
                &writer,
                snapshot,
                status,
                recorded.status,
                why,
                &mut applied,
            )
            .await;
            // Not recorded: the Jobs that show the slot stay for the next try.
            keep_evidence = records_a_slot && applied.written_status.is_none();
        }
    }

    // The streak and the slot history before the history deletes, which
    // may remove the failed Jobs they count.
    let annotations_pending = match plan.cronjob_patch(services.slot_history) {
        Some(patch) => write_annotations(gateway, snapshot, plan, &patch, &mut applied).await,
        None => false,
    };
    let keep_evidence = keep_evidence || annotations_pending;
    if !keep_evidence {
        delete_history(services, &history, &mut applied, &mut results, &mut deleted).await;
    } else {
        // The slot is not recorded yet: the Jobs that show it stay.
        for kept in &history {
            results.delete_not_sent(&kept.name);
        }
    }
    applied.deleted = deleted;
    release(services, plan, &mut applied).await;
    // Upstream retries a create refused by a terminating namespace with
    // backoff; none can land there again, and the namespace's deletion
    // takes the CronJob with it.
    applied.setbacks.gone |= matches!(results.create, Some(CreateResult::NamespaceTerminating(_)));
    if applied.setbacks.gone {
        tracing::debug!(cronjob = %snapshot.cronjob.key, "the CronJob or its namespace is gone: no retry");
    }
    applied.requeue = applied.setbacks.requeue(&recorded.requeue);

    let outcome = reconcile::follow_up(input, live, &results);
    let regarding = object_reference(&snapshot.cronjob);
    for event in &outcome.events {
        gateway.record(regarding.clone(), event);
    }
    // Decisions that change nothing (most Job updates) are not journalled:
    // they would push out the ones that did something.
    if plan.is_noop() && outcome.events.is_empty() {
        return applied;
    }
    let cronjob = &snapshot.cronjob;
    services.feed.publish(DecisionRecord::of(
        cronjob.key.to_string(),
        input.now,
        plan,
        &outcome.events,
        traces::current_trace_id(),
        applied.created.as_ref().map(|job| job.name.clone()),
    ));
    applied
}

/// The plan's create, its Job marked with the CronJob's bucket, this
/// replica and the firing's trace; counted and timed. `None`: abandoned
/// (the actor is stopping). An AlreadyExists is answered with a live read
/// of the namesake, for the decision to tell its own Job from a foreign one.
async fn create_job<R: JobRequests>(
    services: &DecisionServices<'_, R>,
    namespace: &str,
    create: &reconcile::JobToCreate,
    mut job: k8s_openapi::api::batch::v1::Job,
) -> Option<(CreateResult, Option<JobSummary>)> {
    let gateway = services.requests;
    // The CronJob's bucket, so that only its owner's Job watch selects
    // it (a label the template set under that key is overwritten).
    if let Some(owner) = job
        .metadata
        .owner_references
        .as_ref()
        .and_then(|r| r.first())
    {
        job.metadata.labels.get_or_insert_default().insert(
            bucket::LABEL.to_owned(),
            Bucket::of(&owner.uid).label_value(),
        );
    }
    let annotations = job.metadata.annotations.get_or_insert_default();
    annotations.insert(
        CREATED_BY_ANNOTATION.to_owned(),
        services.replica.to_owned(),
    );
    if let Some(traceparent) = traces::current_traceparent() {
        annotations.insert(TRACEPARENT_ANNOTATION.to_owned(), traceparent);
    }
    let mut created = None;
    let (result, label) = match gateway.create_job(namespace, job).await {
        Err(ApiFailure::Abandoned) => return None,
        Ok(job) => {
            let skew = (services.clock)().duration_since(create.ready.at);
            tracing::Span::current().record("cronjob.skew_ms", skew.as_millis() as i64);
            tracing::debug!(job = ?job.metadata.name, skew_ms = skew.as_millis() as i64, "created Job");
            services.metrics.observe_skew(
                skew.try_into().unwrap_or_default(),
                traces::current_trace_id(),
            );
            if let Some(policy) = create.ready.waited {
                let waited = create.ready.at.duration_since(create.start_at);
                services
                    .metrics
                    .observe_policy_wait(policy.as_str(), waited.try_into().unwrap_or_default());
            }
            created = Some(JobSummary::from(&job));
            (
                CreateResult::Created(LiveJob::from(&job)),
                CreateResultLabel::created,
            )
        }
        Err(error) if error.is_already_exists() => {
            let existing = gateway
                .unabandoned()
                .get_job(namespace, &create.name)
                .await
                .map(|job| LiveJob::from(&job))
                .map_err(|e| e.to_api_error());
            (
                CreateResult::AlreadyExists(existing),
                CreateResultLabel::already_exists,
            )
        }
        // Terminating, or gone altogether (a NotFound of the namespace, or
        // the gateway's memory of one): the same for the decision.
        Err(error) if error.is_namespace_gone() => (
            CreateResult::NamespaceTerminating(error.to_api_error()),
            CreateResultLabel::namespace_terminating,
        ),
        Err(error) => (
            CreateResult::Failed(error.to_api_error()),
            CreateResultLabel::failed,
        ),
    };
    services
        .metrics
        .jobs_created
        .get_or_create(&CreateLabels { result: label })
        .inc();
    Some((result, created))
}

/// The streak of failed Jobs (and a pause) and the slot history on the
/// CronJob, at the resourceVersion this decision's status write left;
/// whether it is still to be written (the failed Jobs it counts must then
/// stay). After a status conflict the decision is retried from the re-read
/// CronJob, and both are recomputed then.
async fn write_annotations<R: JobRequests>(
    gateway: &R,
    snapshot: &Snapshot,
    plan: &reconcile::Plan,
    patch: &reconcile::CronJobPatch,
    applied: &mut DecisionAftermath,
) -> bool {
    if applied.reread.is_some() {
        return true;
    }
    if applied.setbacks.gone {
        return false;
    }
    let version = match &applied.written_status {
        Some((_, version)) => version.clone(),
        None => snapshot.resource_version.as_deref().map(str::to_owned),
    };
    let written = write_own_annotations(
        gateway,
        &snapshot.cronjob,
        version.as_deref(),
        patch,
        plan.streak.as_ref().and_then(|s| s.pause.as_ref()),
        object_reference(&snapshot.cronjob),
    )
    .await;
    if written.cronjob.is_some() {
        applied.reread = written.cronjob;
    }
    match written.backoff {
        // The slot history alone is best effort: a write refused (an
        // admission policy from before it) or failed must never hold a
        // slot, nor the history deletes, back. What it would have told of
        // the failed Jobs still there is told by the next write.
        Some(_) if plan.streak.is_none() && applied.reread.is_none() => return false,
        Some(error) => applied.setbacks.failed(error),
        None => {}
    }
    !written.done
}

/// The history deletes, after the slot is recorded, within
/// [`history_wait`]: those not sent by then (or when the actor stops) are
/// left to the next decision, which `applied.setbacks` bring before the
/// next slot.
async fn delete_history<R: JobRequests>(
    services: &DecisionServices<'_, R>,
    history: &[&Deletion],
    applied: &mut DecisionAftermath,
    results: &mut EffectResults,
    deleted: &mut Vec<String>,
) {
    let mut sent = 0;
    let (wait, retry_at) = history_wait(
        &applied.setbacks.requeue(&applied.requeue),
        (services.clock)(),
    );
    let deletes = async {
        for deletion in history {
            if delete(services, deletion, results, deleted).await == Deleted::Abandoned {
                break;
            }
            sent += 1;
        }
    };
    if tokio::time::timeout(wait, deletes).await.is_err() {
        // Out of time (a herd's backlog in the namespace): the next slot
        // is not held back for them.
        applied.setbacks.history_left = Some(retry_at);
    }
    for unsent in &history[sent..] {
        results.delete_not_sent(&unsent.name);
    }
}

/// The longest a decision waits for its history deletes, however far its
/// next slot: they are the lowest write class, and a decision that waits
/// holds its CronJob's next one back.
pub const HISTORY_DELETES_MAX_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// How long the history deletes may take, given the decision's `requeue`
/// at `now`: until the next slot is due (so it starts at its time) and at
/// most [`HISTORY_DELETES_MAX_WAIT`]; and the requeue to use when they run
/// out of time (the slot, or the end of that wait if sooner).
fn history_wait(requeue: &Requeue, now: Timestamp) -> (std::time::Duration, Requeue) {
    let cap = jiff::SignedDuration::try_from(HISTORY_DELETES_MAX_WAIT).unwrap_or_default();
    let latest = now.saturating_add(cap).unwrap_or(now);
    match requeue {
        Requeue::At(slot) if *slot <= latest => {
            let until = slot.duration_since(now);
            (
                std::time::Duration::try_from(until).unwrap_or_default(),
                requeue.clone(),
            )
        }
        Requeue::Backoff(_) => (HISTORY_DELETES_MAX_WAIT, requeue.clone()),
        Requeue::At(_) | Requeue::Never => (HISTORY_DELETES_MAX_WAIT, Requeue::At(latest)),
    }
}

/// Last, the held Jobs whose slot is recorded lose their finalizer (one
/// recorded only by this decision's status write, once that write has
/// landed). A failed release is retried by the next decision, after a
/// backoff: nothing else would look at a Job that only waits.
async fn release<R: JobRequests>(
    services: &DecisionServices<'_, R>,
    plan: &reconcile::Plan,
    applied: &mut DecisionAftermath,
) {
    let status_landed = applied.written_status.is_some();
    for release in &plan.releases {
        if release.after_status_write && !status_landed {
            continue;
        }
        match services
            .requests
            .release_job(
                &release.namespace,
                &release.name,
                &release.uid,
                release.running,
            )
            .await
        {
            Ok(()) => {}
            Err(ApiFailure::Abandoned) => return,
            // Gone meanwhile, or a namesake with another UID: nothing held.
            Err(error) if error.is_not_found() || error.is_conflict() => {}
            Err(error) => {
                tracing::debug!(job = %release.name, %error, "releasing the slot finalizer failed");
                applied.setbacks.failed(error.to_api_error());
            }
        }
    }
}

/// How urgently a status write goes out. One that records a slot waits
/// behind a herd's creates only while the slot's new Job shows it
/// meanwhile and cannot vanish before the slot is recorded (no
/// `ttlSecondsAfterFinished`, or held by the slot finalizer), and no
/// successor waits for it (not stopping). Otherwise the write is the
/// slot's only lasting record: a lapse while it waited (minutes, behind a
/// herd at the default QPS) would let the next owner start the slot again
/// once the Job was gone, and a hand-off would wait for the queue.
fn status_class(records_a_slot: bool, snapshot: &Snapshot, plan: &reconcile::Plan) -> StatusFor {
    let created_job_lasts = plan
        .create
        .as_ref()
        .and_then(|create| create.job.as_ref())
        .is_some_and(|job| {
            reconcile::is_held(&job.metadata)
                || job
                    .spec
                    .as_ref()
                    .is_some_and(|spec| spec.ttl_seconds_after_finished.is_none())
        });
    if records_a_slot && (snapshot.stop.is_cancelled() || !created_job_lasts) {
        StatusFor::RecordSlot
    } else {
        StatusFor::Routine
    }
}

/// Writes the status `status` (the API form of `view`) with the snapshot's
/// resourceVersion as precondition, and notes the result in `applied`.
async fn write_status<R: JobRequests>(
    gateway: &R,
    snapshot: &Snapshot,
    status: k8s_openapi::api::batch::v1::CronJobStatus,
    view: reconcile::StatusView,
    why: StatusFor,
    applied: &mut DecisionAftermath,
) {
    let namespace = snapshot.cronjob.namespace();
    match gateway
        .write_status(
            snapshot.cronjob.kind,
            namespace,
            snapshot.cronjob.name(),
            snapshot.resource_version.as_deref(),
            &status,
            why,
        )
        .await
    {
        Ok(written) => {
            applied.written_status = Some((view, written.metadata.resource_version));
        }
        Err(error) if error.is_conflict() => {
            // Someone else changed the CronJob: re-read and decide again
            // from what is there, never overwrite it.
            let kind = snapshot.cronjob.kind;
            match gateway
                .get_cronjob(kind, namespace, snapshot.cronjob.name())
                .await
            {
                Ok(fresh) => {
                    applied.reread = Some(fresh);
                    applied.setbacks.failed(error.to_api_error());
                }
                Err(get_error) => applied.setbacks.failed(get_error.to_api_error()),
            }
        }
        // Gone: nothing to retry (see `Setbacks::gone`).
        Err(error) if error.is_not_found() || error.is_namespace_gone() => {
            applied.setbacks.gone = true;
        }
        // Upstream: a failed status write is retried with backoff and the
        // requeue is dropped.
        Err(error) => applied.setbacks.failed(error.to_api_error()),
    }
}

/// How one delete went.
#[derive(Debug, PartialEq, Eq)]
enum Deleted {
    Done,
    Failed,
    /// Not sent: the actor is stopping.
    Abandoned,
}

/// One delete of a plan, counted, its failure recorded in `results`.
async fn delete<R: JobRequests>(
    services: &DecisionServices<'_, R>,
    deletion: &Deletion,
    results: &mut EffectResults,
    deleted: &mut Vec<String>,
) -> Deleted {
    let (why, reason) = match deletion.why {
        DeleteReason::Replace => (DeleteFor::Replace, DeleteReasonLabel::replace),
        DeleteReason::HistoryLimit { .. } => (DeleteFor::History, DeleteReasonLabel::history),
    };
    let result = services
        .requests
        .delete_job(&deletion.namespace, &deletion.name, &deletion.uid, why)
        .await;
    if matches!(result, Err(ApiFailure::Abandoned)) {
        return Deleted::Abandoned;
    }
    services
        .metrics
        .jobs_deleted
        .get_or_create(&DeleteLabels {
            reason,
            result: if result.is_ok() {
                OkLabel::ok
            } else {
                OkLabel::failed
            },
        })
        .inc();
    match result {
        Ok(()) => {
            deleted.push(deletion.uid.clone());
            Deleted::Done
        }
        Err(error) => {
            results.delete_failed(&deletion.name, error.to_api_error());
            Deleted::Failed
        }
    }
}

impl DecisionAftermath {
    /// The actor stopped before the decision wrote anything but `deleted`:
    /// the CronJob's next owner decides again.
    fn abandoned(deleted: Vec<String>) -> Self {
        DecisionAftermath {
            written_status: None,
            reread: None,
            created: None,
            deleted,
            requeue: Requeue::Never,
            skipped: None,
            setbacks: Setbacks::default(),
        }
    }

    fn retry(why: &str) -> Self {
        DecisionAftermath {
            written_status: None,
            reread: None,
            created: None,
            deleted: Vec::new(),
            requeue: Requeue::Backoff(reconcile::ApiError::new(why)),
            skipped: None,
            setbacks: Setbacks::default(),
        }
    }
}

/// Answers one of the decision's lookups; a CronJob is looked up as the
/// decision's own kind.
async fn answer(
    gateway: &impl JobRequests,
    cronjob: &CronJobView,
    live: &mut LiveAnswers,
    lookup: Lookup,
) {
    let kind = cronjob.kind;
    match lookup {
        Lookup::JobTemplate { namespace, name } => {
            let answer = gateway
                .get_job_template(kind, &namespace, &name)
                .await
                .map_err(|e| e.to_api_error())
                .and_then(|fresh| template_of(cronjob, fresh));
            live.set_template(answer);
        }
        Lookup::CronJob { namespace, name } => {
            let answer = gateway
                .get_cronjob(kind, &namespace, &name)
                .await
                .map_err(|e| e.to_api_error())
                .and_then(|cronjob| {
                    cronjob
                        .view(Arc::new(cronjob.spec_view()))
                        .map_err(|e| reconcile::ApiError::new(e.to_string()))
                });
            live.set_cronjob(answer);
        }
        Lookup::Job { namespace, name } => {
            let answer = match gateway.get_job(&namespace, &name).await {
                Ok(job) => JobLookup::Found(LiveJob::from(&job)),
                Err(error) if error.is_not_found() => JobLookup::NotFound,
                Err(error) => JobLookup::Failed(error.to_api_error()),
            };
            live.set_job(&namespace, &name, answer);
        }
    }
}

/// The Job template of `fresh`, the CronJob `held` read again, if it is
/// still the same object (a namesake made since is another CronJob: its
/// template is not this one's to run). A newer version's template is
/// taken as it is: upstream too makes the Job from the newest template it
/// has seen.
fn template_of(
    held: &CronJobView,
    fresh: CronJobWithTemplate,
) -> Result<JobTemplateSpec, reconcile::ApiError> {
    if fresh.metadata.uid.as_deref() != Some(&*held.uid) {
        return Err(reconcile::ApiError::new(format!(
            "cronjob {}/{} was replaced by another of its name",
            held.namespace(),
            held.name()
        )));
    }
    Ok(fresh.spec.job_template)
}

/// The CronJob as the regarding object of its events.
pub fn object_reference(cronjob: &CronJobView) -> ObjectReference {
    ObjectReference {
        api_version: Some(cronjob.kind.api_version().to_owned()),
        kind: Some(CronJobKind::KIND.to_owned()),
        namespace: Some(cronjob.namespace().to_owned()),
        name: Some(cronjob.name().to_owned()),
        uid: Some(cronjob.uid.to_string()),
        ..ObjectReference::default()
    }
}

#[cfg(test)]
mod tests;
