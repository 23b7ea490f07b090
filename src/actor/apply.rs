//! One decision carried out: the pure decision core asks, this answers.
//!
//! [`decide_and_apply`] answers the decision's live GETs (`lookups`),
//! carries its plan out through the gateway, one step a module (Replace's
//! deletes and the history deletes in `deletes`, then `create`, `status`,
//! `annotations`, `release`), each returning what happened, records the
//! events in upstream's order, and returns what the actor must remember
//! and when it must look again ([`Setbacks::requeue`], one pure rule). It
//! holds no state of its own: the actor passes a snapshot in and applies
//! the result. The requests go through the
//! [`JobRequests`](crate::apiserver::requests::JobRequests) seam: the
//! gateway in the process, scripted answers in `tests`.

mod aftermath;
mod annotations;
mod confirm;
mod create;
mod deletes;
mod lookups;
mod release;
mod setbacks;
mod status;

pub use aftermath::DecisionAftermath;
pub use create::{CREATED_BY_ANNOTATION, TRACEPARENT_ANNOTATION};
pub use deletes::HISTORY_DELETES_MAX_WAIT;
pub use setbacks::Setbacks;

use super::feed::{DecisionFeed, DecisionRecord};
use super::services::ActorServices;
use crate::apiserver::requests::{JobRequests, StatusFor};
use crate::clock::Clock;
use crate::reconcile::{
    self, CreateResult, CronJobKind, CronJobView, Deletion, EffectResults, Input, JobSummary,
    LiveAnswers, Step,
};
use crate::telemetry::Metrics;
use crate::telemetry::trace_span::TraceSpan;
use annotations::write_own_annotations;
use create::{Creator, create_job};
use deletes::{Deleted, delete_history};
use jiff::Timestamp;
use jiff::tz::TimeZone;
use k8s_openapi::api::core::v1::ObjectReference;
use lookups::answer;
use release::release_held;
use status::{created_job_lasts, shows_slot, status_class, write_status};
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

/// Upstream needs at most three rounds of GETs; one more guards against a
/// decision that keeps asking.
const MAX_LOOKUP_ROUNDS: usize = 4;

/// The state a decision starts from.
pub struct Snapshot {
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
    /// way ([`DecisionAftermath::unwritten_status`]), not the server's at
    /// `resource_version`: this decision writes it even if its plan changes
    /// nothing, in the Routine class only while a Job shows its slot, and
    /// does not give way again.
    pub status_unwritten: bool,
}

/// The root span of one decision: `cronjob.fire` when the timer fired for
/// slot `due`, else `cronjob.reconcile` (a change to the CronJob or one of
/// its Jobs). The decision and the skew are recorded on its trace later.
pub struct DecisionSpan {
    /// The trace's root span (nothing when tracing is off).
    trace: TraceSpan,
    /// The log lines' span, made only when they are logged with their
    /// spans (`RUST_LOG` at `debug`): it names the CronJob and the trace.
    log: tracing::Span,
}

impl DecisionSpan {
    pub fn new(cronjob: &CronJobView, replica: &str, due: Option<Timestamp>) -> Self {
        use opentelemetry::KeyValue;
        let name = if due.is_some() {
            "cronjob.fire"
        } else {
            "cronjob.reconcile"
        };
        let trace = TraceSpan::root(name, || {
            let mut attributes = vec![
                KeyValue::new("k8s.namespace.name", cronjob.namespace().to_owned()),
                KeyValue::new("k8s.cronjob.name", cronjob.name().to_owned()),
                KeyValue::new("k8s.cronjob.uid", cronjob.uid.to_string()),
                KeyValue::new(
                    "cronjob.concurrency_policy",
                    format!("{:?}", cronjob.spec.concurrency_policy),
                ),
                KeyValue::new("shardcron.replica", replica.to_owned()),
            ];
            if let Some(slot) = due {
                attributes.push(KeyValue::new("cronjob.scheduled_time", slot.to_string()));
            }
            attributes
        });
        let trace_id = trace.trace_id();
        if let Some(trace_id) = &trace_id {
            trace.set("trace_id", trace_id.clone());
        }
        let log = tracing::info_span!(
            "decision",
            k8s.namespace.name = %cronjob.namespace(),
            k8s.cronjob.name = %cronjob.name(),
            cronjob.scheduled_time = due.map(tracing::field::display),
            trace_id = trace_id.map(tracing::field::display),
        );
        Self { trace, log }
    }

    pub fn none() -> Self {
        Self {
            trace: TraceSpan::none(),
            log: tracing::Span::none(),
        }
    }

    /// Whether the code running now is inside a decision's span.
    fn entered() -> bool {
        !TraceSpan::current().is_none() || !tracing::Span::current().is_none()
    }

    /// `decision` inside both spans.
    pub fn around<F: Future>(self, decision: F) -> impl Future<Output = F::Output> {
        self.trace.attach(decision).instrument(self.log)
    }
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
    clock: Clock,
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
    let held = (&snapshot.cronjob, snapshot.resource_version.as_deref());
    let confirmed = match confirm::before_create(
        gateway,
        services.metrics,
        held,
        snapshot.confirm_through,
        &plan,
        now,
    )
    .await
    {
        Ok(confirmed) => confirmed,
        Err(ended) => return ended,
    };
    let effects = apply_plan(services, snapshot, &input, &live, &plan);
    // A decision that is not a firing gets its trace only when it writes or
    // records something: the many Job updates that change nothing would
    // otherwise cost a trace each (see the tracing overhead benchmark).
    let mut applied = if !DecisionSpan::entered() && !plan.is_noop() {
        DecisionSpan::new(&snapshot.cronjob, services.replica, None)
            .around(effects)
            .await
    } else {
        effects.await
    };
    applied.confirmed = confirmed;
    applied
}

/// Carries a plan out, step by step (Replace's deletes, the create, the
/// status write, the CronJob's own annotations, the history deletes, the
/// releases, the events); each step says what happened and this records
/// it, the next decision's time chosen once at the end by
/// [`Setbacks::requeue`].
async fn apply_plan<R: JobRequests + Clone>(
    services: &DecisionServices<'_, R>,
    snapshot: &Snapshot,
    input: &Input<'_>,
    live: &LiveAnswers,
    plan: &reconcile::Plan,
) -> DecisionAftermath {
    TraceSpan::current().set("cronjob.decision", reconcile::slot_outcome(&plan.decisions));
    let gateway = services.requests;
    let cronjob = &snapshot.cronjob;
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
        match deletes::delete(gateway, services.metrics, deletion).await {
            Deleted::Abandoned => return DecisionAftermath::abandoned(deleted),
            outcome => replace_failed = !note_delete(deletion, outcome, &mut results, &mut deleted),
        }
        if replace_failed {
            break;
        }
    }
    let mut created = None;
    if let Some(create) = plan.create.as_ref().filter(|_| !replace_failed)
        && let Some(job) = create.job.clone()
    {
        let creator = Creator {
            replica: services.replica,
            metrics: services.metrics,
            clock: services.clock,
        };
        let namespace = cronjob.namespace();
        let Some((result, job)) = create_job(gateway, &creator, namespace, create, job).await
        else {
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
    let recorded = plan.outcome(input, live, &results);
    // The history deletes below are the only writes left: without them
    // the final outcome is this one.
    let recorded_events = history.is_empty().then(|| recorded.events.clone());
    let moves_last_schedule =
        recorded.status.last_schedule_time > input.cronjob.status.last_schedule_time;
    let mut applied = DecisionAftermath {
        written_status: None,
        unwritten_status: None,
        reread: None,
        created,
        deleted: Vec::new(),
        requeue: recorded.requeue.clone(),
        skipped: reconcile::skipped_slot(&plan.decisions),
        setbacks: Setbacks::default(),
        confirmed: false,
    };
    let mut keep_evidence = false;
    let unwritten = snapshot.status_unwritten;
    let status = recorded
        .status_update()
        .or_else(|| unwritten.then(|| recorded.status.to_api()));
    if let Some(status) = status {
        // A status write that records a slot (a Job this decision created,
        // one a lost write left unrecorded, or one a write that gave way
        // did) goes out even if the actor is stopping: the next owner must
        // see the slot taken, even after the Job itself is gone (history
        // limit 0, ttlSecondsAfterFinished).
        let records_a_slot = applied.created.is_some() || moves_last_schedule || unwritten;
        let stopping = snapshot.stop.is_cancelled();
        let writer = if records_a_slot {
            Some(gateway.unabandoned())
        } else if stopping {
            None
        } else {
            Some(gateway.clone())
        };
        if let Some(writer) = writer {
            // A Job this decision created shows its slot only if it lasts;
            // an unwritten status's slot, if its Job is still listed.
            let slot_shown_by_lasting_job = created_job_lasts(plan)
                || (unwritten && shows_slot(&snapshot.children, &recorded.status));
            let why = status_class(records_a_slot, stopping, slot_shown_by_lasting_job);
            let gives_way = why == StatusFor::Routine && records_a_slot && !unwritten;
            let writer = if gives_way {
                writer.giving_way_to(snapshot.job_ended.clone())
            } else {
                writer
            };
            let version = snapshot.resource_version.as_deref();
            let written = write_status(&writer, cronjob, version, &status, why).await;
            if matches!(written, status::StatusWrite::GaveWay) {
                services.metrics.status_writes_given_way.inc();
            }
            applied.note_status(written, recorded.status);
            // Not recorded: the Jobs that show the slot stay for the next try.
            keep_evidence = records_a_slot && applied.written_status.is_none();
        }
    }

    // The streak and the slot history before the history deletes, which
    // may remove the failed Jobs they count.
    let annotations_pending = match plan.cronjob_patch(services.slot_history) {
        None => false,
        // Decided again from the re-read CronJob (or after the status
        // write gave way), which recomputes both.
        Some(_) if applied.reread.is_some() || applied.unwritten_status.is_some() => true,
        Some(_) if applied.setbacks.gone => false,
        Some(patch) => {
            let version = match &applied.written_status {
                Some((_, version)) => version.clone(),
                None => snapshot.resource_version.as_deref().map(str::to_owned),
            };
            let pause = plan
                .streak
                .as_ref()
                .and_then(|streak| streak.pause.as_ref());
            let regarding = object_reference(cronjob);
            let written = write_own_annotations(
                gateway,
                cronjob,
                version.as_deref(),
                &patch,
                pause,
                regarding,
            )
            .await;
            applied.note_annotations(written, plan)
        }
    };
    if keep_evidence || annotations_pending {
        // The slot is not recorded yet: the Jobs that show it stay.
        for kept in &history {
            results.delete_not_sent(&kept.name);
        }
    } else {
        let requeue = applied.setbacks.requeue(&applied.requeue);
        let now = services.clock.now();
        let outcome = delete_history(gateway, services.metrics, &history, &requeue, now).await;
        let sent = outcome.sent.len();
        for (deletion, deleted_as) in history.iter().zip(outcome.sent) {
            note_delete(deletion, deleted_as, &mut results, &mut deleted);
        }
        for unsent in &history[sent..] {
            results.delete_not_sent(&unsent.name);
        }
        applied.setbacks.history_left = outcome.left;
    }
    applied.deleted = deleted;
    let status_landed = applied.written_status.is_some();
    if let Some(error) = release_held(gateway, plan, status_landed).await {
        applied.setbacks.failed(error);
    }
    // Upstream retries a create refused by a terminating namespace with
    // backoff; none can land there again, and the namespace's deletion
    // takes the CronJob with it.
    applied.setbacks.gone |= matches!(results.create, Some(CreateResult::NamespaceTerminating(_)));
    if applied.setbacks.gone {
        tracing::debug!(cronjob = %cronjob.key, "the CronJob or its namespace is gone: no retry");
    }
    applied.requeue = applied.setbacks.requeue(&recorded.requeue);

    let events = recorded_events.unwrap_or_else(|| plan.outcome(input, live, &results).events);
    let regarding = object_reference(cronjob);
    for event in &events {
        gateway.record(regarding.clone(), event);
    }
    // Decisions that change nothing (most Job updates) are not journalled:
    // they would push out the ones that did something.
    if plan.is_noop() && events.is_empty() {
        return applied;
    }
    services.feed.publish(DecisionRecord::of(
        cronjob.key.to_string(),
        input.now,
        plan,
        &events,
        TraceSpan::current().trace_id(),
        applied.created.as_ref().map(|job| job.name.clone()),
    ));
    applied
}

/// Records how a delete went: a deleted Job's UID, or its failure for the
/// events. Whether it was done.
fn note_delete(
    deletion: &Deletion,
    outcome: Deleted,
    results: &mut EffectResults,
    deleted: &mut Vec<String>,
) -> bool {
    match outcome {
        Deleted::Done => {
            deleted.push(deletion.uid.clone());
            true
        }
        Deleted::Failed(error) => {
            results.delete_failed(&deletion.name, error);
            false
        }
        Deleted::Abandoned => {
            results.delete_not_sent(&deletion.name);
            false
        }
    }
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
