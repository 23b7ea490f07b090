//! One decision carried out: the pure decision core asks, this answers.
//!
//! [`decide_and_apply`] answers the decision's live GETs (`lookups`), then
//! carries its plan out in one pass, each stage a module that takes what
//! the stages before it returned and returns its own result: the start
//! (`start`: Replace's deletes, then the create), the status (`status`),
//! the CronJob's own annotations (`annotations`), the history deletes
//! (`deletes`), the releases (`release`). The aftermath the actor applies
//! is folded from those results once, at the end
//! ([`DecisionAftermath`], its next decision ranked by one pure rule,
//! [`Setbacks::requeue`]). It holds no state of its own: the actor passes
//! a snapshot in and applies the result. The requests go through the
//! [`JobRequests`](crate::apiserver::requests::JobRequests) seam: the
//! gateway in the process, scripted answers in `tests`.
//!
//! The pure core (`reconcile::sync`) runs once per lookup round to plan,
//! once more for what the start and the status did (the plan's own
//! outcome when it neither creates nor deletes), and a last time only if a
//! history delete went otherwise than the plan assumed (its events).

mod aftermath;
mod annotations;
mod confirm;
mod create;
mod deletes;
mod lookups;
mod release;
mod setbacks;
mod snapshot;
mod span;
mod start;
mod status;

pub use aftermath::DecisionAftermath;
pub use create::{CREATED_BY_ANNOTATION, TRACEPARENT_ANNOTATION};
pub use deletes::HISTORY_DELETES_MAX_WAIT;
pub use setbacks::Setbacks;
pub use snapshot::Snapshot;
pub use span::DecisionSpan;

use super::feed::{DecisionFeed, DecisionRecord};
use super::services::ActorServices;
use super::timer::decision_time;
use crate::apiserver::requests::JobRequests;
use crate::clock::Clock;
use crate::reconcile::{self, CreateResult, Deletion, Input, LiveAnswers, Step};
use crate::telemetry::Metrics;
use crate::telemetry::trace_span::TraceSpan;
use aftermath::Stages;
use annotations::annotate;
use create::Creator;
use deletes::delete_history;
use jiff::Timestamp;
use jiff::tz::TimeZone;
use lookups::answer;
use release::release_held;
use start::replace_and_create;
use status::record_status;

/// Upstream needs at most three rounds of GETs; one more guards against a
/// decision that keeps asking.
const MAX_LOOKUP_ROUNDS: usize = 4;

/// Runs one decision and carries it out through the gateway: at the
/// snapshot's `due` slot when the timer fired for it (not before it, on a
/// clock stepped back since), else now.
pub async fn decide_and_apply(actor: &ActorServices, snapshot: &Snapshot) -> DecisionAftermath {
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
    let now = decision_time(actor.clock.now(), snapshot.due);
    match snapshot.due {
        Some(slot) => {
            DecisionSpan::new(cronjob, &actor.replica, Some(slot))
                .around(decide_with_lookups(&services, snapshot, now))
                .await
        }
        None => decide_with_lookups(&services, snapshot, now).await,
    }
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
        match reconcile::reconcile(&input, &live) {
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
    let effects = apply_plan(services, snapshot, &input, &live, &plan, confirmed);
    // A decision that is not a firing gets its trace only when it writes or
    // records something: the many Job updates that change nothing would
    // otherwise cost a trace each (see the tracing overhead benchmark).
    if snapshot.due.is_none() && !plan.is_noop() {
        DecisionSpan::new(&snapshot.cronjob, services.replica, None)
            .around(effects)
            .await
    } else {
        effects.await
    }
}

/// Carries a plan out in one pass: the start (Replace's deletes, the
/// create), the status, the CronJob's own annotations, the history deletes,
/// the releases, then the events; each stage takes what those before it
/// returned, and the aftermath is folded from all of them at the end.
async fn apply_plan<R: JobRequests + Clone>(
    services: &DecisionServices<'_, R>,
    snapshot: &Snapshot,
    input: &Input<'_>,
    live: &LiveAnswers,
    plan: &reconcile::Plan,
    confirmed: bool,
) -> DecisionAftermath {
    let trace = TraceSpan::current();
    trace.set("cronjob.decision", reconcile::slot_outcome(&plan.decisions));
    // The slot of the Job created, where it is not the instant the timer
    // fired for (a spread start, a later slot caught up).
    if let Some(create) = plan
        .create
        .as_ref()
        .filter(|c| Some(c.scheduled_time) != snapshot.due)
    {
        trace.set("cronjob.scheduled_time", create.scheduled_time.to_string());
    }
    let gateway = services.requests;
    let cronjob = &snapshot.cronjob;
    // Replace's deletes, then the create, then (below) the status and the
    // history deletes. A history delete never affects the create, and in
    // the lowest write class it would hold the slot's start back behind a
    // herd's backlog of writes. Upstream sends the history deletes first.
    let (replaces, history): (Vec<&Deletion>, Vec<&Deletion>) =
        plan.deletes.iter().partition(|d| d.blocks_create());
    let creator = Creator {
        replica: services.replica,
        metrics: services.metrics,
        clock: services.clock,
    };
    let mut started = match replace_and_create(gateway, &creator, cronjob, plan, &replaces).await {
        Ok(started) => started,
        Err(deleted) => return DecisionAftermath::abandoned(deleted),
    };

    // The status before the history deletes: it records the new Job (or a
    // known slot) at once, while those deletes may wait seconds in the
    // lowest write class, and a replica that lapses meanwhile must not
    // leave its slot unrecorded. Their success is assumed here, as in the
    // plan; a failed one leaves a finished Job that the next decision
    // removes from `status.active` (upstream removes it one sync earlier).
    let recorded = plan.outcome(input, live, &started.effects.results);
    let created = started.created.is_some();
    let status = record_status(
        gateway,
        services.metrics,
        snapshot,
        plan,
        &recorded,
        created,
    )
    .await;
    // The streak and the slot history before the history deletes, which
    // may remove the failed Jobs they count.
    let annotations = annotate(gateway, snapshot, plan, services.slot_history, &status).await;
    let mut setbacks = Setbacks {
        gone: status.gone(),
        ..Setbacks::default()
    };
    for failure in [status.failure(), annotations.failure()]
        .into_iter()
        .flatten()
    {
        setbacks.failed(failure.clone());
    }

    let history_as_planned = if status.keeps_evidence() || annotations.pending() {
        // The slot is not recorded yet: the Jobs that show it stay.
        started.effects.history_kept(&history);
        history.is_empty()
    } else {
        let requeue = setbacks.requeue(&recorded.requeue);
        let now = services.clock.now();
        let deletes = delete_history(gateway, services.metrics, &history, &requeue, now).await;
        let (all_done, left) = started.effects.history_sent(&history, deletes);
        setbacks.history_left = left;
        all_done
    };
    if let Some(error) = release_held(gateway, plan, status.landed()).await {
        setbacks.failed(error);
    }
    // Upstream retries a create refused by a terminating namespace with
    // backoff; none can land there again, and the namespace's deletion
    // takes the CronJob with it.
    setbacks.gone |= matches!(
        started.effects.results.create,
        Some(CreateResult::NamespaceTerminating(_))
    );
    if setbacks.gone {
        tracing::debug!(cronjob = %cronjob.key, "the CronJob or its namespace is gone: no retry");
    }

    let events = if history_as_planned {
        recorded.events
    } else {
        plan.outcome(input, live, &started.effects.results).events
    };
    let regarding = reconcile::regarding(cronjob);
    for event in &events {
        gateway.record(regarding.clone(), event);
    }
    let aftermath = DecisionAftermath::fold(
        Stages {
            started,
            status,
            annotations,
            setbacks,
            planned: recorded.requeue,
            confirmed,
        },
        plan,
    );
    // Decisions that change nothing (most Job updates) are not journalled:
    // they would push out the ones that did something.
    if !(plan.is_noop() && events.is_empty()) {
        services.feed.publish(DecisionRecord::of(
            cronjob.key.to_string(),
            input.now,
            plan,
            &events,
            TraceSpan::current().trace_id(),
            aftermath.created.as_ref().map(|job| job.name.clone()),
        ));
    }
    aftermath
}

#[cfg(test)]
mod tests;
