//! The decision's live reads: what `reconcile` asks before it plans.

use crate::apiserver::lean_cronjob::CronJobWithTemplate;
use crate::apiserver::requests::JobRequests;
use crate::reconcile::{self, CronJobView, JobLookup, JobTemplate, LiveAnswers, LiveJob, Lookup};
use std::sync::Arc;

/// Answers one of the decision's lookups; a CronJob is looked up as the
/// decision's own kind.
pub async fn answer(
    requests: &impl JobRequests,
    cronjob: &CronJobView,
    live: &mut LiveAnswers,
    lookup: Lookup,
) {
    let kind = cronjob.kind;
    match lookup {
        Lookup::JobTemplate { namespace, name } => {
            let answer = requests
                .get_job_template(kind, &namespace, &name)
                .await
                .map_err(|e| e.to_api_error())
                .and_then(|fresh| template_of(cronjob, fresh));
            live.set_template(answer);
        }
        Lookup::CronJob { namespace, name } => {
            let answer = requests
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
            let answer = match requests.get_job(&namespace, &name).await {
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
) -> Result<JobTemplate, reconcile::ApiError> {
    if fresh.metadata.uid.as_deref() != Some(&*held.uid) {
        return Err(reconcile::ApiError::new(format!(
            "cronjob {}/{} was replaced by another of its name",
            held.namespace(),
            held.name()
        )));
    }
    Ok(JobTemplate::from_json(fresh.spec.job_template.as_bytes()))
}
