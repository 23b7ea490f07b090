//! Carrying out what the ownership protocol answers: each input goes
//! through [`Supervisor::step`], and each [`Command`] it answers becomes
//! an actor started or stopped, a view published, a load asked for, the
//! watches reshaped, or the replica ready or gone.

use super::{Running, Supervisor};
use crate::actor::cronjob::{CronJobActor, Update};
use crate::apiserver::lean_cronjob::LeanCronJob;
use crate::shard::ownership::{Command, Input};
use crate::shard::ring::Ring;
use crate::telemetry::metrics::{MoveDirection, MovedLabels};
use crate::telemetry::trace_span::TraceSpan;
use actix::prelude::*;
use opentelemetry::KeyValue;
use std::sync::Arc;
use std::time::Instant;

impl Supervisor {
    /// Feeds the protocol one input and carries out what it answers.
    /// `spawning`: the CronJob a [`Command::Spawn`] is about.
    pub(super) fn step(
        &mut self,
        input: Input,
        now: Instant,
        ctx: &mut Context<Self>,
        mut spawning: Option<LeanCronJob>,
    ) {
        let mut queue = std::collections::VecDeque::from(self.ownership.on(input, now));
        while let Some(command) = queue.pop_front() {
            match command {
                Command::Spawn { key, uid } => {
                    if !self.spawn(&key, &uid, spawning.take()) {
                        queue.extend(self.ownership.on(Input::SpawnFailed { key }, now));
                    }
                }
                Command::Start {
                    uid,
                    waited,
                    ran_elsewhere,
                    ..
                } => {
                    if let Some(running) = self.actors.get(&uid) {
                        running.cell.post(Update::Start { ran_elsewhere });
                    }
                    self.actor_services
                        .metrics
                        .handoff_wait
                        .observe(waited.as_secs_f64());
                }
                Command::Stop { uid, .. } => {
                    if let Some(running) = self.actors.remove(&uid) {
                        running.cell.post(Update::Stop);
                    }
                }
                Command::RingChanged { target, lost } => {
                    self.marks.ring_changed(now);
                    if let Some(target) = &target {
                        let namespaces = self.namespaces();
                        let buckets = target.buckets_of(&self.setup.me);
                        let standby = self.follow_ring_on_standby(target);
                        let reshaped =
                            self.watches
                                .reshape(buckets, &standby, &namespaces, &ctx.address());
                        if reshaped.lists_every_watched_bucket {
                            self.standby.listed_by_the_watch();
                        }
                        if reshaped.labelled_jobs_at_first_version
                            || !reshaped.cronjobs_at_first_version.is_empty()
                        {
                            for scope in &mut self.listed.scopes {
                                scope.started_without_list(
                                    reshaped.labelled_jobs_at_first_version,
                                    &reshaped.cronjobs_at_first_version,
                                );
                            }
                            // After this step's commands (its load among them).
                            ctx.run_later(std::time::Duration::ZERO, |supervisor, ctx| {
                                supervisor.maybe_sync(super::now(), ctx)
                            });
                        }
                    }
                    self.ring_changed(target, lost);
                }
                Command::Publish(publication) => {
                    if let Some(unpublished) = self.marks.published(now) {
                        self.actor_services
                            .metrics
                            .handoff_publish
                            .observe(unpublished.as_secs_f64());
                    }
                    self.setup.keeper.publish(publication);
                }
                Command::Load {
                    target,
                    previous,
                    delay,
                    epoch,
                } => {
                    // The gained keys due first are read on their own at
                    // once, a retried load or not.
                    self.read_due(ctx);
                    if delay.is_zero() {
                        self.load(target, previous, epoch, ctx);
                    } else {
                        ctx.run_later(delay, move |supervisor, ctx| {
                            supervisor.load(target, previous, epoch, ctx)
                        });
                    }
                }
                Command::RejoinFence => {
                    self.setup.keeper.withdraw();
                    self.setup.fence.lock().rejoin();
                }
                Command::SetReady => {
                    // Every actor's first decision is done: the burst of
                    // the start (each actor's first mail, decision and
                    // status read) is over, and what it freed goes back.
                    crate::memory::release_free_pages();
                    self.share_armed(ctx);
                }
                Command::PeersIncompatible(peers) => self.peers_incompatible(peers),
                Command::ReleaseAndExit => {
                    tracing::info!("every actor stopped; releasing the Lease");
                    let keeper = self.setup.keeper.clone();
                    let system = System::current();
                    tokio::spawn(async move {
                        keeper.release().await;
                        system.stop();
                    });
                }
            }
        }
    }

    /// Starts an actor for `key`, waiting for its start; false if the
    /// CronJob cannot be run.
    pub(super) fn spawn(
        &mut self,
        key: &Arc<str>,
        uid: &Arc<str>,
        cronjob: Option<LeanCronJob>,
    ) -> bool {
        let Some(cronjob) = cronjob else {
            return false;
        };
        let (_, namespace, _) = crate::reconcile::CronJobKind::parse_key(key);
        let (children, known_slot) = self.for_actors.claim(namespace, uid);
        let actor = match CronJobActor::new(
            &cronjob,
            children,
            known_slot,
            self.actor_services.clone(),
            self.threads.wheel(),
        ) {
            Ok(actor) => actor.sharing(key, uid),
            Err(error) => {
                tracing::warn!(cronjob = %key, %error, "not running an unusable CronJob");
                return false;
            }
        };
        let cell = self.threads.start_actor(actor);
        self.actors.insert(
            uid.clone(),
            Running {
                key: key.clone(),
                cell,
            },
        );
        true
    }

    /// The live peers left out of the ring for their protocol versions
    /// changed: the gauge, a warning and an Event for each.
    fn peers_incompatible(&mut self, peers: Vec<crate::shard::ownership::IncompatiblePeer>) {
        self.actor_services
            .metrics
            .ring_incompatible_peers
            .set(peers.len() as i64);
        if peers.is_empty() {
            tracing::info!("every live peer speaks the ring's protocol version");
        }
        for peer in peers {
            tracing::warn!(peer = %peer.name, "{}", crate::shard::incompatible::describe(&peer));
            let lease = crate::shard::lease::lease_name_of(&self.setup.ring_name, &peer.name);
            tokio::spawn(crate::shard::incompatible::record_event(
                self.setup.client.clone(),
                self.setup.namespace.clone(),
                lease,
                self.setup.me.clone(),
                peer,
            ));
        }
    }

    pub(super) fn ring_changed(&mut self, target: Option<Arc<Ring>>, lost: usize) {
        let metrics = &self.actor_services.metrics;
        metrics
            .keys_moved
            .get_or_create(&MovedLabels {
                direction: MoveDirection::Lost,
            })
            .inc_by(lost as u64);
        metrics
            .ring_members
            .set(target.as_ref().map_or(0, |t| t.members().len()) as i64);
        metrics
            .ring_protocol
            .set(target.as_ref().map_or(0, |t| t.protocol().number().into()));
        metrics.ring_assignment.set(
            target
                .as_ref()
                .map_or(0.0, |t| crate::shard::handoff::assignment_digest(t) as f64),
        );
        if let Some(target) = &target {
            metrics.rebalances.inc();
            // A span per transition (in traces when exporting): who is in
            // the ring, what this replica lost; the bulk load of what it
            // gained is its own span, `shard.load`.
            let _transition = TraceSpan::root("shard.rebalance", || {
                let view = crate::shard::handoff::encode_view(target);
                [
                    KeyValue::new("shard.ring", self.setup.ring_name.to_string()),
                    KeyValue::new(
                        "shard.view_digest",
                        crate::shard::handoff::view_digest(&view).to_string(),
                    ),
                    KeyValue::new("shard.members", view),
                    KeyValue::new("shard.protocol", i64::from(target.protocol().number())),
                    KeyValue::new("shard.keys_lost", lost as i64),
                ]
            });
        }
        let ownership = &self.ownership;
        self.for_actors
            .jobs
            .retain_owners(|owner_uid| ownership.owns(owner_uid));
    }
}
