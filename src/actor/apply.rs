//! One decision carried out: the pure decision core asks, this answers.
//!
//! [`decide_and_apply`] answers the decision's live GETs, performs its
//! deletes and its create through the gateway in upstream's order, records
//! the events, writes the status, and returns what the actor must remember
//! and when it must look again. It holds no state of its own: the actor
//! passes a snapshot in and applies the result.

use crate::kube::gateway::Gateway;
use crate::kube::queue::Priority;
use crate::reconcile::{
    self, CreateResult, CronJobView, DeleteReason, EffectResults, Input, JobLookup, JobSummary,
    LiveAnswers, LiveJob, Lookup, Requeue, Step,
};
use crate::telemetry::Metrics;
use crate::telemetry::metrics::{
    CreateLabels, CreateResultLabel, DeleteLabels, DeleteReasonLabel, OkLabel,
};
use crate::telemetry::traces;
use jiff::Timestamp;
use jiff::tz::TimeZone;
use k8s_openapi::api::batch::v1::CronJob;
use k8s_openapi::api::core::v1::ObjectReference;
use std::sync::Arc;
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
    /// It has stopped.
    Stopped { key: String, uid: String },
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
    pub reread: Option<CronJob>,
    /// The Job just created, to count as a child before its watch event comes.
    pub created: Option<JobSummary>,
    /// Children deleted by this decision.
    pub deleted: Vec<String>,
    /// When to decide next.
    pub requeue: Requeue,
}

/// Runs one decision at `now` and carries it out.
pub async fn decide_and_apply(ctx: &Shared, snapshot: &Snapshot, now: Timestamp) -> Applied {
    let input = Input {
        cronjob: &snapshot.cronjob,
        children: &snapshot.children,
        now,
        default_zone: &ctx.default_zone,
    };
    let mut live = LiveAnswers::new();
    let mut plan = None;
    for _ in 0..MAX_LOOKUP_ROUNDS {
        let step = crate::child_span!("decide").in_scope(|| reconcile::reconcile(&input, &live));
        match step {
            Step::Plan(p) => {
                plan = Some(p);
                break;
            }
            Step::Lookup(lookups) => {
                for lookup in lookups {
                    answer(ctx, &mut live, lookup).await;
                }
            }
        }
    }
    let Some(plan) = plan else {
        return Applied::retry("the decision kept asking for live reads");
    };
    let effects = apply_plan(ctx, snapshot, &input, &live, &plan);
    // A decision that is not a firing gets its trace only when it writes or
    // records something: the many Job updates that change nothing would
    // otherwise cost a trace each (see the tracing overhead benchmark).
    if tracing::Span::current().is_none() && !plan.is_noop() {
        effects
            .instrument(decision_span(&snapshot.cronjob, &ctx.replica, None))
            .await
    } else {
        effects.await
    }
}

/// Carries a plan out: deletes, the create, events, the status write.
async fn apply_plan(
    ctx: &Shared,
    snapshot: &Snapshot,
    input: &Input<'_>,
    live: &LiveAnswers,
    plan: &reconcile::Plan,
) -> Applied {
    tracing::Span::current().record("cronjob.decision", reconcile::slot_outcome(&plan.decisions));

    let namespace = &snapshot.cronjob.namespace;
    let mut results = EffectResults::new();
    let mut deleted = Vec::new();
    let mut replace_failed = false;
    for deletion in &plan.deletes {
        let (priority, reason) = match deletion.why {
            DeleteReason::Replace if replace_failed => continue,
            DeleteReason::Replace => (Priority::ReplaceDelete, DeleteReasonLabel::replace),
            DeleteReason::HistoryLimit { .. } => {
                (Priority::HistoryDelete, DeleteReasonLabel::history)
            }
        };
        let result = ctx
            .gateway
            .delete_job(&deletion.namespace, &deletion.name, &deletion.uid, priority)
            .await;
        let ok = result.is_ok();
        ctx.metrics
            .jobs_deleted
            .get_or_create(&DeleteLabels {
                reason,
                result: if ok { OkLabel::ok } else { OkLabel::failed },
            })
            .inc();
        match result {
            Ok(()) => deleted.push(deletion.uid.clone()),
            Err(error) => {
                replace_failed |= deletion.blocks_create();
                results.delete_failed(&deletion.name, error.to_api_error());
            }
        }
    }

    let mut created = None;
    if let Some(create) = plan.create.as_ref().filter(|_| !replace_failed)
        && let Some(mut job) = create.job.clone()
    {
        let annotations = job.metadata.annotations.get_or_insert_default();
        annotations.insert(CREATED_BY_ANNOTATION.to_owned(), ctx.replica.clone());
        if let Some(traceparent) = traces::current_traceparent() {
            annotations.insert(TRACEPARENT_ANNOTATION.to_owned(), traceparent);
        }
        let (result, label) = match ctx.gateway.create_job(namespace, job).await {
            Ok(job) => {
                let skew = Timestamp::now().duration_since(create.scheduled_time);
                tracing::Span::current().record("cronjob.skew_ms", skew.as_millis() as i64);
                tracing::debug!(job = ?job.metadata.name, skew_ms = skew.as_millis() as i64, "created Job");
                ctx.metrics.observe_skew(
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
                let existing = ctx
                    .gateway
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
        ctx.metrics
            .jobs_created
            .get_or_create(&CreateLabels { result: label })
            .inc();
        results.set_create(result);
    }

    let outcome = reconcile::follow_up(input, live, &results);
    let regarding = object_reference(&snapshot.cronjob);
    for event in &outcome.events {
        ctx.gateway.record(regarding.clone(), event);
    }

    let mut applied = Applied {
        written_status: None,
        reread: None,
        created,
        deleted,
        requeue: outcome.requeue.clone(),
    };
    let Some(status) = outcome.status_update() else {
        return applied;
    };
    match ctx
        .gateway
        .write_status(
            namespace,
            &snapshot.cronjob.name,
            snapshot.resource_version.as_deref(),
            &status,
        )
        .await
    {
        Ok(written) => {
            applied.written_status = Some((outcome.status, written.metadata.resource_version));
        }
        Err(error) if error.is_conflict() => {
            // Someone else changed the CronJob: re-read and decide again
            // from what is there, never overwrite it.
            match ctx
                .gateway
                .get_cronjob(namespace, &snapshot.cronjob.name)
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
    applied
}

impl Applied {
    fn retry(why: &str) -> Self {
        Applied {
            written_status: None,
            reread: None,
            created: None,
            deleted: Vec::new(),
            requeue: Requeue::Backoff(reconcile::ApiError::new(why)),
        }
    }
}

async fn answer(ctx: &Shared, live: &mut LiveAnswers, lookup: Lookup) {
    match lookup {
        Lookup::CronJob { namespace, name } => {
            let answer = ctx
                .gateway
                .get_cronjob(&namespace, &name)
                .await
                .map_err(|e| e.to_api_error())
                .and_then(|cronjob| {
                    CronJobView::from_api(&cronjob)
                        .map_err(|e| reconcile::ApiError::new(e.to_string()))
                });
            live.set_cronjob(answer);
        }
        Lookup::Job { namespace, name } => {
            let answer = match ctx.gateway.get_job(&namespace, &name).await {
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
        api_version: Some("batch/v1".to_owned()),
        kind: Some("CronJob".to_owned()),
        namespace: Some(cronjob.namespace.clone()),
        name: Some(cronjob.name.clone()),
        uid: Some(cronjob.uid.clone()),
        ..ObjectReference::default()
    }
}
