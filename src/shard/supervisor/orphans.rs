//! Held Jobs whose CronJob is gone. A Job made with the slot finalizer
//! ([`crate::reconcile::SLOT_FINALIZER`]) is released by its CronJob's
//! actor; once the CronJob is deleted (the garbage collector then deletes
//! its Jobs), there is no actor, and no slot left to protect. The owner of
//! the CronJob's bucket removes the finalizer of each such Job it sees
//! being deleted, after asking the API server (not the watch) whether the
//! CronJob is gone: one whose actor has not started yet (a hand-off, a
//! load in flight) keeps its Jobs held.

use super::Supervisor;
use crate::kube::requests::JobRequests;
use crate::kube::watch::JobFacts;
use actix::prelude::*;

impl Supervisor {
    /// Checks `job` if it is held, being deleted, and its CronJob (UID
    /// `owner_uid`, owned here) has no actor. At most one check per Job
    /// is in flight; each request has the gateway's deadline.
    pub(super) fn release_if_orphaned(
        &mut self,
        job: &JobFacts,
        owner_uid: &str,
        ctx: &mut Context<Self>,
    ) {
        let meta = &job.job.metadata;
        let held_and_going = crate::reconcile::is_held(meta) && meta.deletion_timestamp.is_some();
        if !held_and_going
            || self.keys_by_uid.contains_key(owner_uid)
            || self.orphan_checks.contains(&job.uid)
        {
            return;
        }
        let (Some(name), Some(owner)) = (
            meta.name.clone(),
            crate::reconcile::controller_in(meta).map(|r| r.name.clone()),
        ) else {
            return;
        };
        self.orphan_checks.insert(job.uid.clone());
        let gateway = self.shared.gateway.clone();
        let (namespace, uid, owner_uid) =
            (job.namespace.clone(), job.uid.clone(), owner_uid.to_owned());
        let check = async move {
            let gone = match gateway.get_cronjob(&namespace, &owner).await {
                Ok(cronjob) => cronjob.metadata.uid.as_deref() != Some(owner_uid.as_str()),
                Err(error) => error.is_not_found(),
            };
            if gone {
                match gateway.release_job(&namespace, &name, &uid, false).await {
                    Ok(()) => {
                        tracing::debug!(%namespace, job = %name, "released the Job of a deleted CronJob")
                    }
                    Err(error) => {
                        tracing::debug!(%namespace, job = %name, %error, "releasing the Job of a deleted CronJob failed")
                    }
                }
            }
            uid
        };
        ctx.spawn(check.into_actor(self).map(|uid, supervisor, _| {
            supervisor.orphan_checks.remove(&uid);
        }));
    }
}
