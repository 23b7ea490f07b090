//! A decision's last step: the held Jobs whose slot is recorded lose their
//! slot finalizer.

use crate::apiserver::failure::ApiFailure;
use crate::apiserver::requests::JobRequests;
use crate::reconcile::{ApiError, Plan};

/// Releases the plan's held Jobs (one recorded only by this decision's
/// status write once `status_landed`); the first failure, which the next
/// decision retries after a backoff: nothing else would look at a Job that
/// only waits. Stops at the first release abandoned (the actor is stopping).
pub async fn release_held<R: JobRequests>(
    requests: &R,
    plan: &Plan,
    status_landed: bool,
) -> Option<ApiError> {
    let mut first_failure = None;
    for release in &plan.releases {
        if release.after_status_write && !status_landed {
            continue;
        }
        match requests
            .release_job(
                &release.namespace,
                &release.name,
                &release.uid,
                release.running,
            )
            .await
        {
            Ok(()) => {}
            Err(ApiFailure::Abandoned) => break,
            // Gone meanwhile, or a namesake with another UID: nothing held.
            Err(error) if error.is_not_found() || error.is_conflict() => {}
            Err(error) => {
                tracing::debug!(job = %release.name, %error, "releasing the slot finalizer failed");
                first_failure.get_or_insert(error.to_api_error());
            }
        }
    }
    first_failure
}
