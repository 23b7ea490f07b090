//! Held Jobs whose CronJob is gone. A Job made with the slot finalizer
//! ([`crate::reconcile::SLOT_FINALIZER`]) is released by its CronJob's
//! actor; once the CronJob is deleted (the garbage collector then deletes
//! its Jobs), there is no actor, and no slot left to protect. The owner of
//! the CronJob's bucket removes the finalizer of each such Job it sees
//! being deleted, once it knows the CronJob is gone: from the watch's
//! deletion (remembered for the last [`REMEMBERED`] deleted CronJobs, so
//! that a namespace's deletion costs a release per Job, not a GET more),
//! or else from the API server (a GET), never from the mere absence of an
//! actor: one that has not started yet (a hand-off, a load in flight) keeps
//! its Jobs held.

use super::Supervisor;
use crate::apiserver::requests::JobRequests;
use crate::apiserver::watch::JobFacts;
use crate::reconcile::CronJobKind;
use actix::prelude::*;
use std::collections::{HashSet, VecDeque};

/// How many deleted CronJobs' UIDs are remembered (about 40 bytes each).
pub const REMEMBERED: usize = 10_000;

/// The UIDs of the last [`REMEMBERED`] CronJobs the watch saw deleted.
#[derive(Default)]
pub struct RecentlyDeleted {
    order: VecDeque<String>,
    uids: HashSet<String>,
}

impl RecentlyDeleted {
    pub fn insert(&mut self, uid: &str) {
        if !self.uids.insert(uid.to_owned()) {
            return;
        }
        self.order.push_back(uid.to_owned());
        if self.order.len() > REMEMBERED
            && let Some(oldest) = self.order.pop_front()
        {
            self.uids.remove(&oldest);
        }
    }

    pub fn contains(&self, uid: &str) -> bool {
        self.uids.contains(uid)
    }
}

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
        let known_gone = self.deleted_cronjobs.contains(owner_uid);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remembers_the_last_deleted_uids_only() {
        let mut deleted = RecentlyDeleted::default();
        for i in 0..REMEMBERED + 5 {
            deleted.insert(&format!("uid-{i}"));
        }
        deleted.insert("uid-7");
        assert!(!deleted.contains("uid-4"), "the oldest are forgotten");
        assert!(deleted.contains("uid-5"));
        assert!(deleted.contains(&format!("uid-{}", REMEMBERED + 4)));
        assert_eq!(deleted.order.len(), REMEMBERED);
        assert_eq!(deleted.uids.len(), REMEMBERED);
    }
}
