//! A decision's create: its Job marked with the CronJob's bucket, this
//! replica and the firing's trace; counted, and its skew from the slot
//! observed.

use crate::apiserver::failure::ApiFailure;
use crate::apiserver::requests::JobRequests;
use crate::bucket::{self, Bucket};
use crate::clock::Clock;
use crate::reconcile::{CreateResult, JobSummary, JobToCreate, LiveJob, NewJob};
use crate::telemetry::Metrics;
use crate::telemetry::metrics::{CreateLabels, CreateResultLabel};
use crate::telemetry::trace_span::TraceSpan;

/// Names the replica that created a Job: which replica acted on a slot is
/// visible from the API server's own records (a departure from upstream,
/// which has one controller and writes nothing of the kind).
pub const CREATED_BY_ANNOTATION: &str = "shardcron.io/created-by";

/// The W3C trace context of the firing that created a Job, so a user can go
/// from the Job to its trace.
pub const TRACEPARENT_ANNOTATION: &str = "shardcron.io/traceparent";

/// Who creates: the replica named on the Job, what counts it, and the
/// clock that times its skew (the decision runs at the `now` it is given;
/// the create returns later).
pub struct Creator<'a> {
    pub replica: &'a str,
    pub metrics: &'a Metrics,
    pub clock: Clock,
}

/// Creates `job`, the plan's `create`, in `namespace`. `None`: abandoned
/// (the actor is stopping). An AlreadyExists is answered with a live read
/// of the namesake, for the decision to tell its own Job from a foreign one.
pub async fn create_job<R: JobRequests>(
    requests: &R,
    creator: &Creator<'_>,
    namespace: &str,
    create: &JobToCreate,
    mut job: NewJob,
) -> Option<(CreateResult, Option<JobSummary>)> {
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
    annotations.insert(CREATED_BY_ANNOTATION.to_owned(), creator.replica.to_owned());
    if let Some(traceparent) = TraceSpan::current().traceparent() {
        annotations.insert(TRACEPARENT_ANNOTATION.to_owned(), traceparent);
    }
    let metrics = creator.metrics;
    let mut created = None;
    let (result, label) = match requests.create_job(namespace, job).await {
        Err(ApiFailure::Abandoned) => return None,
        Ok(job) => {
            let skew = creator.clock.now().duration_since(create.ready.at);
            TraceSpan::current().set("cronjob.skew_ms", skew.as_millis() as i64);
            tracing::debug!(job = ?job.metadata.name, skew_ms = skew.as_millis() as i64, "created Job");
            metrics.observe_skew(
                skew.try_into().unwrap_or_default(),
                TraceSpan::current().trace_id(),
            );
            if let Some(policy) = create.ready.waited {
                let waited = create.ready.at.duration_since(create.start_at);
                metrics.observe_policy_wait(policy.as_str(), waited.try_into().unwrap_or_default());
            }
            created = Some(JobSummary::from(&job));
            (
                CreateResult::Created(LiveJob::from(&job)),
                CreateResultLabel::created,
            )
        }
        Err(error) if error.is_already_exists() => {
            let existing = requests
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
    metrics
        .jobs_created
        .get_or_create(&CreateLabels { result: label })
        .inc();
    Some((result, created))
}
