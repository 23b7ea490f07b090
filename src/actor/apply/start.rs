//! A slot's start, the first stage of a plan carried out: Replace's
//! deletes, then the create. A failed Replace delete cancels the create.

use super::create::{Creator, create_job};
use super::deletes::{self, Deleted, HistoryDeletes};
use crate::apiserver::requests::JobRequests;
use crate::reconcile::{CronJobView, Deletion, EffectResults, JobSummary, Plan, Requeue};

/// What the deletes did, as the follow-up reads them (`results`: the
/// failed and unsent ones; a delete not named there succeeded) and as the
/// actor applies them (`deleted`: the UIDs of the Jobs gone).
#[derive(Debug, Default)]
pub struct Effects {
    pub results: EffectResults,
    pub deleted: Vec<String>,
}

impl Effects {
    /// Records how `deletion` went; whether it was done.
    fn note_delete(&mut self, deletion: &Deletion, outcome: Deleted) -> bool {
        match outcome {
            Deleted::Done => {
                self.deleted.push(deletion.uid.clone());
                true
            }
            Deleted::Failed(error) => {
                self.results.delete_failed(&deletion.name, error);
                false
            }
            Deleted::Abandoned => {
                self.results.delete_not_sent(&deletion.name);
                false
            }
        }
    }

    /// The history deletes were kept back (the slot is not recorded yet:
    /// the Jobs that show it stay).
    pub fn history_kept(&mut self, history: &[&Deletion]) {
        for kept in history {
            self.results.delete_not_sent(&kept.name);
        }
    }

    /// Records the history deletes sent (those after the last were not);
    /// whether every one was done, and when the next decision must come
    /// for those left if they ran out of time.
    pub fn history_sent(
        &mut self,
        history: &[&Deletion],
        deletes: HistoryDeletes,
    ) -> (bool, Option<Requeue>) {
        let sent = deletes.sent.len();
        let mut all_done = sent == history.len();
        for (deletion, outcome) in history.iter().zip(deletes.sent) {
            all_done &= self.note_delete(deletion, outcome);
        }
        self.history_kept(&history[sent..]);
        (all_done, deletes.left)
    }
}

/// What the start did.
#[derive(Debug, Default)]
pub struct Started {
    pub effects: Effects,
    /// The Job created, to count as a child before its watch event comes.
    pub created: Option<JobSummary>,
}

/// Replace's deletes (`replaces`), then `plan`'s create. `Err`: abandoned
/// (the actor is stopping), with the UIDs of the Jobs deleted before.
pub async fn replace_and_create<R: JobRequests>(
    requests: &R,
    creator: &Creator<'_>,
    cronjob: &CronJobView,
    plan: &Plan,
    replaces: &[&Deletion],
) -> Result<Started, Vec<String>> {
    let mut started = Started::default();
    for deletion in replaces {
        match deletes::delete(requests, creator.metrics, deletion).await {
            Deleted::Abandoned => return Err(started.effects.deleted),
            outcome => {
                if !started.effects.note_delete(deletion, outcome) {
                    return Ok(started);
                }
            }
        }
    }
    let Some((create, job)) = plan
        .create
        .as_ref()
        .and_then(|create| Some((create, create.job.clone()?)))
    else {
        return Ok(started);
    };
    match create_job(requests, creator, cronjob.namespace(), create, job).await {
        None => Err(started.effects.deleted),
        Some((result, created)) => {
            started.effects.results.set_create(result);
            started.created = created;
            Ok(started)
        }
    }
}
