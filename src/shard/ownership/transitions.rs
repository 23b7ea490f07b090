//! The machine's moves between phases: after every input, [`Ownership::advance`]
//! re-judges the fence and the membership, moves to a new ring when the
//! live set changed, publishes the view, starts what may start and
//! reports ready (the phases themselves: [`super`]).

use super::{Command, Flaw, JOIN_GRACE, Ownership, Phase};
use crate::shard::fence::FenceState;
use crate::shard::handoff;
use crate::shard::lease::Publication;
use crate::shard::protocol::{Negotiated, Protocol};
use crate::shard::ring::Ring;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

impl Ownership {
    /// Re-judges the fence and the membership; moves to a new ring if the
    /// live set changed; publishes, starts and reports ready when it may.
    pub(super) fn advance(&mut self, now: Instant, out: &mut Vec<Command>) {
        match self.phase {
            Phase::Exited => return,
            Phase::ShuttingDown => {
                if self.keys.none_stopping() {
                    self.phase = Phase::Exited;
                    out.push(Command::ReleaseAndExit);
                }
                return;
            }
            Phase::Leaving { since, .. } => {
                let over = self.leave.over(since, now);
                if over || self.fence != FenceState::Valid || self.peers_took_over(now) {
                    if over {
                        tracing::warn!(
                            drain = ?self.leave.drain(),
                            "peers did not take this replica's CronJobs over within the drain time: stopping anyway"
                        );
                    }
                    self.shut_down(now, out);
                }
                return;
            }
            _ => {}
        }
        if let Some(asked) = self.leave.asked_midway() {
            // Neither a new ring nor a rejoin: it is on its way out.
            self.leave_when_stopped(asked, now, out);
            return;
        }
        match self.fence {
            FenceState::Lapsed => {
                if !matches!(self.phase, Phase::Recovering) {
                    tracing::warn!(
                        actors = self.keys.len(),
                        "own Lease not renewed within the renew deadline: stopping every actor"
                    );
                    let lost = self.keys.len();
                    self.phase = Phase::Recovering;
                    self.stop_all(now, out);
                    self.loads.ring_changed(None, None, &self.me);
                    out.push(Command::RingChanged { target: None, lost });
                }
                if self.keys.none_stopping() {
                    tracing::info!("every actor stopped; rejoining the ring");
                    self.phase = Phase::Joining { valid_since: None };
                    // The fence reopens at the next renewal; until it is
                    // judged again, it is not valid. The view is withdrawn
                    // with it (RejoinFence): a warm join again.
                    self.fence = FenceState::Waiting;
                    self.published.withdrawn();
                    out.push(Command::RejoinFence);
                }
                return;
            }
            FenceState::Waiting => return,
            FenceState::Valid => {}
        }
        if !self.started.leases_listed {
            return;
        }
        if let Phase::Joining { valid_since } = &mut self.phase {
            let valid_since = *valid_since.get_or_insert(now);
            if now.duration_since(valid_since) < JOIN_GRACE {
                return;
            }
        }
        self.membership.prune(now);
        let negotiated = self.membership.negotiate(&self.me, now);
        self.report_incompatible(&negotiated, now, out);
        let live = self.ring_members(&negotiated, now);
        let changed = self.phase.target().is_none_or(|ring| {
            ring.protocol() != negotiated.protocol
                || !ring
                    .members()
                    .iter()
                    .map(|m| &**m)
                    .eq(live.iter().map(String::as_str))
        });
        if changed {
            // A member that is leaving still runs the keys this ring gains
            // from it: publish once they are loaded here, or those due
            // first read (it waits for that).
            let leaving = self.leaving_peers(now);
            if self
                .phase
                .target()
                .is_some_and(|ring| ring.members().iter().any(|m| leaving.contains(&**m)))
            {
                self.published.note_gains_from_a_leaver();
            }
            self.move_to(&live, negotiated.protocol, now, out);
        }
        if let Phase::Stopping { target } = &self.phase
            && (self.keys.none_stopping() || self.flawed(Flaw::PublishWhileStopping))
            && self.may_publish(target, now)
        {
            let target = target.clone();
            let publication = self.publish(&target, false, now, out);
            self.published.joined();
            self.phase = Phase::Serving {
                target,
                publication,
            };
        }
        // A peer came or went without changing the ring (one leaving, whose
        // claims hold keys here; a joiner still loading): publish again, so
        // that nothing starts on that change before the watch has shown
        // everything written before it. A silent watch makes a leaving peer
        // that is still running its keys expire on this clock: without the
        // echo, its keys started here beside it (the simulation found it).
        if let Phase::Serving { target, .. } = &self.phase
            && self.published.live_changed(&self.live_peers(now))
        {
            let target = target.clone();
            let publication = self.publish(&target, false, now, out);
            self.phase = Phase::Serving {
                target,
                publication,
            };
        }
        self.start_waiting(None, now, out);
        self.check_ready(out);
    }

    /// Tells the shell when the live peers the ring leaves out for their
    /// protocol versions change.
    fn report_incompatible(
        &mut self,
        negotiated: &Negotiated,
        now: Instant,
        out: &mut Vec<Command>,
    ) {
        if !self.membership.note_incompatible(negotiated) {
            return;
        }
        let builds: std::collections::BTreeMap<&str, Option<String>> = self
            .membership
            .live_views(now)
            .map(|(member, lease)| (member, lease.build.clone()))
            .collect();
        let peers = negotiated
            .incompatible
            .iter()
            .map(|(name, protocols)| super::IncompatiblePeer {
                name: name.clone(),
                protocols: *protocols,
                build: builds.get(name.as_str()).cloned().flatten(),
            })
            .collect();
        out.push(Command::PeersIncompatible(peers));
    }

    /// SIGTERM came at `asked` during a ring change: once the lost keys'
    /// actors have stopped, the view is published marked leaving and the
    /// replica leaves as from serving (its drain counted from `asked`); it
    /// starts nothing meanwhile. If the drain is over first, or the fence
    /// is not valid, it shuts down.
    fn leave_when_stopped(&mut self, asked: Instant, now: Instant, out: &mut Vec<Command>) {
        let target = match &self.phase {
            Phase::Stopping { target }
                if !self.leave.over(asked, now) && self.fence == FenceState::Valid =>
            {
                target.clone()
            }
            _ => {
                self.shut_down(now, out);
                return;
            }
        };
        if !self.keys.none_stopping() {
            return;
        }
        self.publish(&target, true, now, out);
        self.phase = Phase::Leaving {
            target,
            since: asked,
        };
        self.advance(now, out);
    }

    /// A new publication of `target`'s view (`leaving`: it says so).
    pub(super) fn publish(
        &mut self,
        target: &Ring,
        leaving: bool,
        now: Instant,
        out: &mut Vec<Command>,
    ) -> Publication {
        let publication = self.published.next(target, leaving, self.live_peers(now));
        tracing::info!(
            view = %publication.view,
            protocol = %publication.protocol,
            digest = %handoff::view_digest(&publication.view),
            leaving,
            "publishing view"
        );
        out.push(Command::Publish(publication.clone()));
        publication
    }

    /// The live set or the protocol version changed: stop lost keys, load
    /// gained ones.
    pub(super) fn move_to(
        &mut self,
        live: &BTreeSet<String>,
        protocol: Protocol,
        now: Instant,
        out: &mut Vec<Command>,
    ) {
        let members: Vec<&str> = live.iter().map(String::as_str).collect();
        // Rings are cached by view: a ring that comes back is not rebuilt.
        // Negotiation chooses only a version this build speaks.
        let Some(target) = self.rings.ring(protocol, &members.join(",")) else {
            tracing::error!(%protocol, "no ring of a version this build speaks; staying");
            return;
        };
        let previous = self.phase.target().cloned();
        self.phase = Phase::Stopping {
            target: target.clone(),
        };
        let lost: Vec<Arc<str>> = self
            .keys
            .owned()
            .filter(|(_, uid)| target.owner(uid) != Some(self.me.as_str()))
            .map(|(key, _)| key.clone())
            .collect();
        tracing::info!(members = ?live, %protocol, lost = lost.len(), "ring changed");
        for key in &lost {
            self.stop(key, now, out);
        }
        self.loads
            .ring_changed(Some(&target), previous.as_deref(), &self.me);
        self.note_gains(previous.as_deref(), now);
        out.push(Command::RingChanged {
            target: Some(target.clone()),
            lost: lost.len(),
        });
        self.load(target, previous, Duration::ZERO, out);
    }

    /// Asks for a bulk load, counted in flight and loading its Jobs.
    pub(super) fn load(
        &mut self,
        target: Arc<Ring>,
        previous: Option<Arc<Ring>>,
        delay: Duration,
        out: &mut Vec<Command>,
    ) {
        self.loads.asked();
        out.push(Command::Load {
            target,
            previous,
            delay,
            epoch: self.loads.epoch(),
        });
    }

    pub(super) fn check_ready(&mut self, out: &mut Vec<Command>) {
        if !self.started.ready
            && self.started.watches_listed
            && self.phase.target().is_some()
            && self.loads.idle()
            && self.keys.all_armed()
        {
            tracing::info!(actors = self.keys.len(), "every owned actor armed; ready");
            self.started.ready = true;
            out.push(Command::SetReady);
        }
    }
}
