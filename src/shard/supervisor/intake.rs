//! What the watches tell the supervisor: CronJobs become inputs of the
//! ownership protocol (and updates of their actors), Jobs are routed to the
//! actor of the CronJob that controls them, Leases feed the membership.
//! Each watched scope's re-lists are diffed ([`super::super::relist`]) so
//! that what disappeared while a watch was away counts as deleted.

use super::Supervisor;
use crate::actor::cronjob::Update;
use crate::apiserver::lean_cronjob::LeanCronJob;
use crate::apiserver::requests::JobRequests;
use crate::apiserver::watch::JobFacts;
use crate::reconcile::{CronJobKind, Event as CronJobEvent};
use crate::shard::jobs::{JobRoute, MadeElsewhere};
use crate::shard::membership::LeaseObservation;
use crate::shard::ownership::{Epoch, Input};
use actix::prelude::*;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::watcher::Event;
use std::sync::Arc;
use std::time::Instant;

/// An event of the CronJob watch of `kind` of scope number `scope`, the
/// watch's `generation` (see [`super::watches`]); the watch has set each
/// object's `kind` already.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct CronJobWatch {
    pub scope: usize,
    pub kind: CronJobKind,
    pub generation: u64,
    pub event: Event<LeanCronJob>,
}

/// Which of a scope's two Job watches an event comes from: the one that selects
/// the owned buckets' label, or the one that selects Jobs without it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobStream {
    Labelled,
    Unlabelled,
}

/// An event of the Job watch `stream` of scope number `scope`, the watch's
/// `generation`.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct JobWatch {
    pub scope: usize,
    pub stream: JobStream,
    pub generation: u64,
    pub event: Event<JobFacts>,
}

/// An event of the ring's Lease watch.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct LeaseWatch(pub Event<(String, LeaseObservation)>);

/// Whether the CronJob with UID `owner_uid` has an actor here (`actors`)
/// and lives in `namespace`: a Job counts only for a CronJob of its own
/// namespace.
pub(super) fn has_actor_in(
    actors: &std::collections::HashMap<Arc<str>, super::Running>,
    namespace: &str,
    owner_uid: &str,
) -> bool {
    actors
        .get(owner_uid)
        .is_some_and(|running| CronJobKind::parse_key(&running.key).1 == namespace)
}

/// Where a CronJob the supervisor is handed comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Source {
    /// A watch: may replay versions older than a load's after a ring change.
    Watch,
    /// A bulk load of gained keys asked for in this epoch: consistent,
    /// after the ring changed.
    Load(Epoch),
    /// Read on its own with its Jobs ([`crate::shard::standby`]), asked
    /// for in this epoch: as consistent as a load, and its Jobs are known.
    ReadAlone(Epoch),
}

impl Source {
    fn input(self, key: Arc<str>, uid: Arc<str>) -> Input {
        match self {
            Source::ReadAlone(read_in) => Input::KeyRead { key, uid, read_in },
            Source::Watch => Input::CronJobSeen {
                key,
                uid,
                read_in: None,
            },
            Source::Load(read_in) => Input::CronJobSeen {
                key,
                uid,
                read_in: Some(read_in),
            },
        }
    }
}

impl Supervisor {
    /// A CronJob from the watch, a bulk load or a read of its own.
    pub(super) fn on_cronjob(
        &mut self,
        cronjob: LeanCronJob,
        source: Source,
        now: Instant,
        ctx: &mut Context<Self>,
    ) {
        let key = cronjob.key();
        let uid = cronjob.metadata.uid.as_deref().unwrap_or_default();
        if source == Source::Watch {
            self.keep_on_standby(&key, &cronjob);
        }
        if self.ownership.has(&key, uid) {
            let seen = (source != Source::Watch).then(|| source.input(key.into(), uid.into()));
            if let Some(running) = self.actors.get(uid) {
                running.cell.post(Update::CronJob(Box::new(cronjob)));
            }
            if let Some(seen) = seen {
                // After the update: the actor's mail is taken in order, so
                // a start this lets through finds the loaded version there.
                self.step(seen, now, ctx, None);
            }
            return;
        }
        let input = source.input(key.into(), uid.into());
        self.step(input, now, ctx, Some(cronjob));
    }

    fn on_cronjob_deleted(&mut self, cronjob: &LeanCronJob, now: Instant, ctx: &mut Context<Self>) {
        if let Some(uid) = &cronjob.metadata.uid {
            self.deletions
                .cronjob(uid, self.ownership.loads_in_flight() > 0);
            // Its Events waiting to be sent are about nothing any more.
            self.actor_services.gateway.cronjob_deleted(uid);
        }
        let key = cronjob.key();
        self.standby.index.forget(&key);
        self.step(Input::CronJobGone { key: key.into() }, now, ctx, None);
    }

    pub(super) fn on_job(&mut self, mut job: JobFacts, relisted: bool, ctx: &mut Context<Self>) {
        match job
            .owner_uid
            .as_deref()
            .map(|owner| self.ownership.owns(owner))
        {
            Some(true) => self.release_if_orphaned(&job, ctx),
            // Not ours: forget it (withdrawing it from an actor that had it).
            Some(false) => job.owner_uid = None,
            None => {}
        }
        let actors = &self.actors;
        for route in self
            .for_actors
            .jobs
            .apply(job, |ns, owner| has_actor_in(actors, ns, owner))
        {
            self.send(route, relisted);
        }
    }

    fn on_job_deleted(&mut self, uid: &str) {
        self.deletions
            .job(uid, self.ownership.loads_in_flight() > 0);
        let actors = &self.actors;
        if let Some(route) = self
            .for_actors
            .jobs
            .delete(uid, |ns, owner| has_actor_in(actors, ns, owner))
        {
            self.send(route, false);
        }
    }

    fn send(&self, route: JobRoute, relisted: bool) {
        let (owner_uid, update) = match route {
            JobRoute::Deliver { owner_uid, job } => (owner_uid, Update::Job { job, relisted }),
            JobRoute::Withdraw { owner_uid, job_uid } => {
                (owner_uid, Update::JobGone { uid: job_uid })
            }
            JobRoute::MadeElsewhere(found) => return self.report_made_elsewhere(found),
        };
        if let Some(running) = self.actors.get(owner_uid.as_str()) {
            running.cell.post(update);
        }
    }

    /// Another controller made a slot's Job of a CronJob running here:
    /// counted, logged, and told on the CronJob.
    fn report_made_elsewhere(&self, found: MadeElsewhere) {
        tracing::warn!(
            namespace = %found.namespace, cronjob = %found.cronjob, job = %found.job,
            "a slot's Job made by another controller, not shardcron: is kube-controller-manager's CronJob controller still on?"
        );
        let services = &self.actor_services;
        services.metrics.jobs_created_elsewhere.inc();
        let event = CronJobEvent::made_elsewhere(&found.job);
        let regarding = ObjectReference {
            api_version: Some(found.api_version),
            kind: Some(CronJobKind::KIND.to_owned()),
            namespace: Some(found.namespace),
            name: Some(found.cronjob),
            uid: Some(found.owner_uid),
            ..ObjectReference::default()
        };
        services.gateway.record(regarding, &event);
    }

    /// Once every scope has listed CronJobs and Jobs, the protocol may
    /// start actors.
    pub(super) fn maybe_sync(&mut self, now: Instant, ctx: &mut Context<Self>) {
        // Again after each restarted watch's list (the ring changed):
        // logged the first time only.
        if let Some(first) = self.listed.all_listed() {
            if first {
                tracing::info!(owned = self.actors.len(), "initial lists synced");
            }
            self.step(Input::ListsSynced, now, ctx, None);
        }
    }
}

impl Handler<CronJobWatch> for Supervisor {
    type Result = ();

    fn handle(&mut self, message: CronJobWatch, ctx: &mut Self::Context) {
        let now = super::now();
        let CronJobWatch {
            scope,
            kind,
            generation,
            event,
        } = message;
        if !self
            .watches
            .is_current_cronjob_watch(scope, kind, generation)
        {
            return;
        }
        let Some(state) = self.listed.scopes.get_mut(scope) else {
            return;
        };
        let Some((relist, _)) = state.cronjobs(kind) else {
            return;
        };
        match event {
            Event::Apply(cronjob) => self.on_cronjob(cronjob, Source::Watch, now, ctx),
            Event::Delete(cronjob) => self.on_cronjob_deleted(&cronjob, now, ctx),
            Event::Init => relist.begin(),
            Event::InitApply(cronjob) => {
                relist.saw(&cronjob.key().into());
                self.on_cronjob(cronjob, Source::Watch, now, ctx);
            }
            Event::InitDone => {
                let in_scope = &self.listed.scopes[scope];
                let known: Vec<&Arc<str>> = self
                    .actors
                    .values()
                    .map(|running| &running.key)
                    .filter(|key| {
                        let (of_kind, namespace, _) = CronJobKind::parse_key(key);
                        of_kind == kind && in_scope.covers(namespace)
                    })
                    .collect();
                let Some((relist, listed)) = self.listed.scopes[scope].cronjobs(kind) else {
                    return;
                };
                let gone = relist.finish(known);
                *listed = true;
                for key in gone {
                    self.step(Input::CronJobGone { key }, now, ctx, None);
                }
                self.maybe_sync(now, ctx);
                crate::memory::release_free_pages();
            }
        }
    }
}

impl Handler<JobWatch> for Supervisor {
    type Result = ();

    fn handle(&mut self, message: JobWatch, ctx: &mut Self::Context) {
        let JobWatch {
            scope,
            stream,
            generation,
            event,
        } = message;
        if !self.watches.is_current_job_watch(scope, stream, generation) {
            return;
        }
        match event {
            Event::Apply(job) => self.on_job(job, false, ctx),
            // A Job whose label was added or removed leaves one watch (a
            // deletion there) and enters the other, in either order: only
            // the watch it was last seen in may delete it.
            Event::Delete(job) => {
                let in_the_other_watch = self
                    .for_actors
                    .jobs
                    .is_labelled(&job.uid)
                    .is_some_and(|labelled| labelled != (stream == JobStream::Labelled));
                if !in_the_other_watch {
                    self.on_job_deleted(&job.uid);
                }
            }
            Event::Init => self.listed.scopes[scope].jobs(stream).0.begin(),
            Event::InitApply(job) => {
                self.listed.scopes[scope].jobs(stream).0.saw(&job.uid);
                self.on_job(job, true, ctx);
            }
            Event::InitDone => {
                let state = &mut self.listed.scopes[scope];
                let namespace = state.namespace.clone();
                let known = self.for_actors.jobs.uids_in(
                    |ns| namespace.as_deref().is_none_or(|n| n == ns),
                    stream == JobStream::Labelled,
                );
                let (relist, listed) = state.jobs(stream);
                let gone = relist.finish(known);
                *listed = true;
                for uid in gone {
                    self.on_job_deleted(&uid);
                }
                self.maybe_sync(super::now(), ctx);
                crate::memory::release_free_pages();
            }
        }
    }
}

impl Handler<LeaseWatch> for Supervisor {
    type Result = ();

    fn handle(&mut self, LeaseWatch(event): LeaseWatch, ctx: &mut Self::Context) {
        let now = super::now();
        let inputs = match event {
            Event::Apply((name, lease)) => vec![Input::LeaseSeen { name, lease }],
            Event::Delete((name, _)) => vec![Input::LeaseDeleted { name }],
            Event::Init => {
                self.listed.leases.begin();
                vec![]
            }
            Event::InitApply((name, lease)) => {
                self.listed.leases.saw(&name);
                vec![Input::LeaseSeen { name, lease }]
            }
            Event::InitDone => {
                let known = self.ownership.lease_names();
                let gone = self.listed.leases.finish(&known);
                gone.into_iter()
                    .map(|name| Input::LeaseDeleted { name })
                    .chain([Input::LeasesListed])
                    .collect()
            }
        };
        for input in inputs {
            self.step(input, now, ctx, None);
        }
        self.tick(ctx);
    }
}
