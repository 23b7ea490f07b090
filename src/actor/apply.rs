//! One decision carried out: the pure decision core asks, this answers.
//!
//! [`decide_and_apply`] answers the decision's live GETs, performs its
//! writes through the gateway (Replace's deletes, the create, the status,
//! then the history deletes), records the events in upstream's order, and
//! returns what the actor must remember
//! and when it must look again. It holds no state of its own: the actor
//! passes a snapshot in and applies the result.

use super::feed::{DecisionFeed, DecisionRecord};
use super::streak::write_streak;
use crate::kube::bucket::{self, Bucket};
use crate::kube::failure::ApiFailure;
use crate::kube::gateway::Gateway;
use crate::kube::lean_cronjob::LeanCronJob;
use crate::kube::requests::{DeleteFor, JobRequests, StatusFor};
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
use k8s_openapi::api::core::v1::ObjectReference;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

/// Upstream needs at most three rounds of GETs; one more guards against a
/// decision that keeps asking.
const MAX_LOOKUP_ROUNDS: usize = 4;

/// What an actor tells the supervisor.
#[derive(Debug, actix::Message)]
#[rtype(result = "()")]
pub enum Report {
    /// Its first decision is done and its timer armed (readiness).
    Armed { key: String },
    /// It has stopped. `unrecorded`: the latest slot a Job of its CronJob
    /// is known to have been made for, when the status it last saw does not
    /// record it (a status write lost after a create): the supervisor hands
    /// it to the CronJob's next actor in this process.
    Stopped {
        key: String,
        uid: String,
        unrecorded: Option<Timestamp>,
    },
}

/// What the actor needs besides its own state.
pub struct Shared {
    pub gateway: Gateway,
    /// The supervisor's mailbox for the actors' reports (one for all).
    pub reports: actix::Recipient<Report>,
    pub metrics: Arc<Metrics>,
    pub default_zone: TimeZone,
    /// This replica's id, written on the Jobs it creates ([`CREATED_BY_ANNOTATION`]).
    pub replica: String,
    /// Where decisions are published while someone watches.
    pub feed: DecisionFeed,
}

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
    pub resource_version: Option<String>,
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
    let policy = format!("{:?}", cronjob.spec.concurrency_policy);
    let span = match due {
        Some(slot) => tracing::info_span!(
            "cronjob.fire",
            k8s.namespace.name = %cronjob.namespace,
            k8s.cronjob.name = %cronjob.name,
            k8s.cronjob.uid = %cronjob.uid,
            cronjob.scheduled_time = %slot,
            cronjob.concurrency_policy = %policy,
            cronjob.decision = tracing::field::Empty,
            cronjob.skew_ms = tracing::field::Empty,
            shardcron.replica = %replica,
            trace_id = tracing::field::Empty,
        ),
        None => tracing::info_span!(
            "cronjob.reconcile",
            k8s.namespace.name = %cronjob.namespace,
            k8s.cronjob.name = %cronjob.name,
            k8s.cronjob.uid = %cronjob.uid,
            cronjob.concurrency_policy = %policy,
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
pub struct Applied {
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
    /// When to decide next.
    pub requeue: Requeue,
    /// The slot this decision skipped, and why (the per-CronJob metrics).
    pub skipped: Option<(reconcile::SkipReason, Timestamp)>,
}

/// Runs one decision at `now` and carries it out through the gateway.
pub async fn decide_and_apply(ctx: &Shared, snapshot: &Snapshot, now: Timestamp) -> Applied {
    let cronjob = &snapshot.cronjob;
    let gateway = ctx
        .gateway
        .for_key(&cronjob.kind.key(&cronjob.namespace, &cronjob.name))
        .abandoning_on(snapshot.stop.clone());
    let env = Env {
        requests: &gateway,
        metrics: &ctx.metrics,
        replica: &ctx.replica,
        default_zone: &ctx.default_zone,
        clock: Timestamp::now,
        feed: &ctx.feed,
    };
    decide(&env, snapshot, now).await
}

/// What a decision uses besides its snapshot: where its requests go, what
/// it counts and names, and the clock that times a Job's creation (its skew
/// from the slot; the decision itself runs at the `now` it is given).
struct Env<'a, R> {
    requests: &'a R,
    metrics: &'a Metrics,
    replica: &'a str,
    default_zone: &'a TimeZone,
    clock: fn() -> Timestamp,
    feed: &'a DecisionFeed,
}

async fn decide<R: JobRequests + Clone>(
    env: &Env<'_, R>,
    snapshot: &Snapshot,
    now: Timestamp,
) -> Applied {
    let gateway = env.requests;
    let input = Input {
        cronjob: &snapshot.cronjob,
        children: &snapshot.children,
        known_slot: snapshot.known_slot,
        now,
        default_zone: env.default_zone,
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
                    answer(gateway, snapshot.cronjob.kind, &mut live, lookup).await;
                }
                if snapshot.stop.is_cancelled() {
                    return Applied::abandoned(Vec::new());
                }
            }
        }
    }
    let Some(plan) = plan else {
        return Applied::retry("the decision kept asking for live reads");
    };
    let effects = apply_plan(env, snapshot, &input, &live, &plan);
    // A decision that is not a firing gets its trace only when it writes or
    // records something: the many Job updates that change nothing would
    // otherwise cost a trace each (see the tracing overhead benchmark).
    if tracing::Span::current().is_none() && !plan.is_noop() {
        effects
            .instrument(decision_span(&snapshot.cronjob, env.replica, None))
            .await
    } else {
        effects.await
    }
}

/// Carries a plan out: Replace's deletes, the create, the status write,
/// history deletes, events.
async fn apply_plan<R: JobRequests + Clone>(
    env: &Env<'_, R>,
    snapshot: &Snapshot,
    input: &Input<'_>,
    live: &LiveAnswers,
    plan: &reconcile::Plan,
) -> Applied {
    tracing::Span::current().record("cronjob.decision", reconcile::slot_outcome(&plan.decisions));
    let gateway = env.requests;
    let metrics = env.metrics;

    let namespace = &snapshot.cronjob.namespace;
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
        match delete(env, deletion, &mut results, &mut deleted).await {
            Deleted::Abandoned => return Applied::abandoned(deleted),
            Deleted::Failed => {
                replace_failed = true;
                break;
            }
            Deleted::Done => {}
        }
    }
    let mut created = None;
    if let Some(create) = plan.create.as_ref().filter(|_| !replace_failed)
        && let Some(mut job) = create.job.clone()
    {
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
        annotations.insert(CREATED_BY_ANNOTATION.to_owned(), env.replica.to_owned());
        if let Some(traceparent) = traces::current_traceparent() {
            annotations.insert(TRACEPARENT_ANNOTATION.to_owned(), traceparent);
        }
        let (result, label) = match gateway.create_job(namespace, job).await {
            Err(ApiFailure::Abandoned) => return Applied::abandoned(deleted),
            Ok(job) => {
                let skew = (env.clock)().duration_since(create.start_at);
                tracing::Span::current().record("cronjob.skew_ms", skew.as_millis() as i64);
                tracing::debug!(job = ?job.metadata.name, skew_ms = skew.as_millis() as i64, "created Job");
                metrics.observe_skew(
                    skew.try_into().unwrap_or_default(),
                    traces::current_trace_id(),
                );
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
            Err(error) if error.is_namespace_terminating() => (
                CreateResult::NamespaceTerminating(error.to_api_error()),
                CreateResultLabel::namespace_terminating,
            ),
            Err(error) => (
                CreateResult::Failed(error.to_api_error()),
                CreateResultLabel::failed,
            ),
        };
        metrics
            .jobs_created
            .get_or_create(&CreateLabels { result: label })
            .inc();
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
    let mut applied = Applied {
        written_status: None,
        reread: None,
        created,
        deleted: Vec::new(),
        requeue: recorded.requeue.clone(),
        skipped: reconcile::skipped_slot(&plan.decisions),
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

    // The streak before the history deletes, which may remove the failed
    // Jobs it counts.
    let mut streak_pending = false;
    // After a status conflict the decision is retried from the re-read
    // CronJob; the streak is recomputed then.
    if let Some(update) = plan.streak.as_ref() {
        if applied.reread.is_some() {
            streak_pending = true;
        } else {
            let version = match &applied.written_status {
                Some((_, version)) => version.clone(),
                None => snapshot.resource_version.clone(),
            };
            let written = write_streak(
                gateway,
                &snapshot.cronjob,
                version.as_deref(),
                update,
                object_reference(&snapshot.cronjob),
            )
            .await;
            streak_pending = !written.done;
            if written.cronjob.is_some() {
                applied.reread = written.cronjob;
            }
            if let Some(error) = written.backoff {
                applied.requeue = Requeue::Backoff(error);
            }
        }
    }
    let keep_evidence = keep_evidence || streak_pending;
    let mut sent = 0;
    let (wait, retry_at) = history_wait(&applied.requeue, (env.clock)());
    let deletes = async {
        for deletion in &history {
            // Stopping, or the slot is not recorded yet: the deletes not
            // sent are left to the next decision (or the next owner).
            if keep_evidence
                || delete(env, deletion, &mut results, &mut deleted).await == Deleted::Abandoned
            {
                break;
            }
            sent += 1;
        }
    };
    if tokio::time::timeout(wait, deletes).await.is_err() {
        // Out of time (a herd's backlog in the namespace): the next slot
        // is not held back for them; the next decision sends them again.
        applied.requeue = retry_at;
    }
    for unsent in &history[sent..] {
        results.delete_not_sent(&unsent.name);
    }
    applied.deleted = deleted;
    release(env, plan, &mut applied).await;

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
    env.feed.publish(DecisionRecord::of(
        cronjob.kind.key(&cronjob.namespace, &cronjob.name),
        input.now,
        plan,
        &outcome.events,
        traces::current_trace_id(),
        applied.created.as_ref().map(|job| job.name.clone()),
    ));
    applied
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
async fn release<R: JobRequests>(env: &Env<'_, R>, plan: &reconcile::Plan, applied: &mut Applied) {
    let status_landed = applied.written_status.is_some();
    for release in &plan.releases {
        if release.after_status_write && !status_landed {
            continue;
        }
        match env
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
                applied.requeue = Requeue::Backoff(error.to_api_error());
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
    applied: &mut Applied,
) {
    let namespace = &snapshot.cronjob.namespace;
    match gateway
        .write_status(
            snapshot.cronjob.kind,
            namespace,
            &snapshot.cronjob.name,
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
                .get_cronjob(kind, namespace, &snapshot.cronjob.name)
                .await
            {
                Ok(fresh) => {
                    applied.reread = Some(fresh);
                    applied.requeue = Requeue::Backoff(error.to_api_error());
                }
                Err(get_error) => applied.requeue = Requeue::Backoff(get_error.to_api_error()),
            }
        }
        // Upstream: a failed status write is retried with backoff and the
        // requeue is dropped.
        Err(error) => applied.requeue = Requeue::Backoff(error.to_api_error()),
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
    env: &Env<'_, R>,
    deletion: &Deletion,
    results: &mut EffectResults,
    deleted: &mut Vec<String>,
) -> Deleted {
    let (why, reason) = match deletion.why {
        DeleteReason::Replace => (DeleteFor::Replace, DeleteReasonLabel::replace),
        DeleteReason::HistoryLimit { .. } => (DeleteFor::History, DeleteReasonLabel::history),
    };
    let result = env
        .requests
        .delete_job(&deletion.namespace, &deletion.name, &deletion.uid, why)
        .await;
    if matches!(result, Err(ApiFailure::Abandoned)) {
        return Deleted::Abandoned;
    }
    env.metrics
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

impl Applied {
    /// The actor stopped before the decision wrote anything but `deleted`:
    /// the CronJob's next owner decides again.
    fn abandoned(deleted: Vec<String>) -> Self {
        Applied {
            written_status: None,
            reread: None,
            created: None,
            deleted,
            requeue: Requeue::Never,
            skipped: None,
        }
    }

    fn retry(why: &str) -> Self {
        Applied {
            written_status: None,
            reread: None,
            created: None,
            deleted: Vec::new(),
            requeue: Requeue::Backoff(reconcile::ApiError::new(why)),
            skipped: None,
        }
    }
}

/// Answers one of the decision's lookups; a CronJob is looked up as `kind`,
/// the decision's own.
async fn answer(
    gateway: &impl JobRequests,
    kind: CronJobKind,
    live: &mut LiveAnswers,
    lookup: Lookup,
) {
    match lookup {
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

/// The CronJob as the regarding object of its events.
pub fn object_reference(cronjob: &CronJobView) -> ObjectReference {
    ObjectReference {
        api_version: Some(cronjob.kind.api_version().to_owned()),
        kind: Some(CronJobKind::KIND.to_owned()),
        namespace: Some(cronjob.namespace.clone()),
        name: Some(cronjob.name.clone()),
        uid: Some(cronjob.uid.clone()),
        ..ObjectReference::default()
    }
}

#[cfg(test)]
mod tests {
    //! The decision's I/O against scripted answers: what a real API server
    //! cannot be made to answer on cue (conflicts, failures, a stop that
    //! lands between two requests).

    use super::*;
    use k8s_openapi::api::batch::v1::{CronJob, Job};
    use std::cell::RefCell;
    use std::collections::VecDeque;
    use std::rc::Rc;

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
        created: Vec<Job>,
        asked: Vec<String>,
        events: Vec<String>,
    }

    #[derive(Clone, Default)]
    struct Scripted {
        script: Rc<RefCell<Script>>,
        /// This handle abandons nothing (see `unabandoned`).
        unabandoned: bool,
    }

    fn failure(code: u16, reason: &str) -> ApiFailure {
        ApiFailure::Status {
            code,
            reason: reason.into(),
            message: format!("{code} {reason}"),
            namespace_terminating: false,
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
            job: Job,
        ) -> impl Future<Output = Result<Job, ApiFailure>> {
            self.ask("create");
            let mut script = self.script.borrow_mut();
            if let Some(stop) = script.stop_on_create.take() {
                stop.cancel();
                script.stopped = true;
            }
            if script.keep_created {
                script.created.push(job.clone());
            }
            let answer = script.creates.pop_front().unwrap_or(Ok(job));
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

        fn write_status(
            &self,
            _: CronJobKind,
            _: &str,
            _: &str,
            _: Option<&str>,
            _: &k8s_openapi::api::batch::v1::CronJobStatus,
            why: StatusFor,
        ) -> impl Future<Output = Result<LeanCronJob, ApiFailure>> {
            self.ask(match why {
                StatusFor::Routine => "write status",
                StatusFor::RecordSlot => "record slot",
            });
            let answer = self
                .script
                .borrow_mut()
                .statuses
                .pop_front()
                .unwrap_or_else(|| Ok(cronjob("8")))
                .map(|written| LeanCronJob::from(&written));
            async move { answer }
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
                script: self.script.clone(),
                unabandoned: true,
            }
        }
    }

    /// An every-minute CronJob created an hour ago, never run, at
    /// resourceVersion `version`.
    fn cronjob(version: &str) -> CronJob {
        serde_json::from_value(serde_json::json!({
            "metadata": {
                "name": "report", "namespace": "team-a", "uid": "c-1",
                "resourceVersion": version,
                "creationTimestamp": "2024-03-01T08:30:00Z"
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
            cronjob: CronJobView::from_api(&cronjob).expect("a usable CronJob"),
            resource_version: Some("7".into()),
            children: Vec::new(),
            known_slot: None,
            stop: CancellationToken::new(),
        }
    }

    /// Runs one decision at a moment a slot is due, against `script`;
    /// returns what it applied, the script as it ended, and the metrics.
    fn run(script: Script, snapshot: &Snapshot) -> (Applied, Script, String) {
        let requests = Scripted {
            script: Rc::new(RefCell::new(script)),
            unabandoned: false,
        };
        let metrics = Metrics::new();
        let env = Env {
            requests: &requests,
            metrics: &metrics,
            replica: "r0",
            default_zone: &TimeZone::UTC,
            clock: || "2024-03-01T09:30:06Z".parse().expect("a time"),
            feed: &DecisionFeed::default(),
        };
        let now: Timestamp = "2024-03-01T09:30:05Z".parse().expect("a time");
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .expect("a runtime");
        let applied = runtime.block_on(decide(&env, snapshot, now));
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
}
