//! Held Jobs whose CronJob is gone. A Job made with the slot finalizer
//! ([`crate::reconcile::SLOT_FINALIZER`]) is released by its CronJob's
//! actor; once the CronJob is deleted (the garbage collector then deletes
//! its Jobs), there is no actor, and no slot left to protect. The owner of
//! the CronJob's bucket removes the finalizer of each such Job it sees
//! being deleted, once it knows the CronJob is gone: from the watch's
//! deletion (remembered for the last [`super::deletions::REMEMBERED`] deleted CronJobs, so
//! that a namespace's deletion costs a release per Job, not a GET more),
//! or else from the API server (a GET), never from the mere absence of an
//! actor: one that has not started yet (a hand-off, a load in flight) keeps
//! its Jobs held.

use super::Supervisor;
use crate::apiserver::requests::JobRequests;
use crate::apiserver::watch::JobFacts;
use crate::reconcile::CronJobKind;
use actix::prelude::*;

impl Supervisor {
    /// Checks `job` if it is held, being deleted, and its CronJob (owned
    /// here) has no actor. At most one check per Job is in flight; each
    /// request has the gateway's deadline.
    pub(super) fn release_if_orphaned(&mut self, job: &JobFacts, ctx: &mut Context<Self>) {
        let Some(owner_uid) = job.owner_uid.as_deref() else {
            return;
        };
        let meta = &job.job.metadata;
        let held_and_going = crate::reconcile::is_held(meta) && meta.deletion_timestamp.is_some();
        if !held_and_going
            || super::intake::has_actor_in(&self.actors, &job.namespace, owner_uid)
            || self.orphan_checks.contains(&job.uid)
        {
            return;
        }
        // The owner is looked up as the kind its reference names; a Job of
        // any other API's CronJob is not this controller's to release.
        let owner = crate::reconcile::controller_in(meta).and_then(|r| {
            CronJobKind::from_api_version(&r.api_version).map(|kind| (kind, r.name.clone()))
        });
        let (Some(name), Some((kind, owner))) = (meta.name.clone(), owner) else {
            return;
        };
        self.orphan_checks.insert(job.uid.clone());
        let gateway = self.actor_services.gateway.clone();
        let known_gone = self.deletions.cronjob_deleted(owner_uid);
        let (namespace, uid, owner_uid) =
            (job.namespace.clone(), job.uid.clone(), owner_uid.to_owned());
        let check = async move {
            let gone = known_gone
                || match gateway.get_cronjob(kind, &namespace, &owner).await {
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
