//! The sharding protocol as a pure state machine: which CronJobs this
//! replica may run, and when. The supervisor feeds it what happened
//! ([`Input`]) with the time, once per message, and carries out what it
//! answers ([`Command`]); the machine does no I/O and reads no clock.
//!
//! # Phases
//!
//! ```text
//!     fence valid, Leases listed, grace
//! Joining ──────────────────────────────▶ Stopping ──(lost keys stopped)──▶ Serving
//!    ▲                                      ▲  (publish the view)              │
//!    │ every actor stopped                  └────────── the live set changed ──┘
//! Recovering ◀──────── the fence lapsed (from any phase but ShuttingDown)
//!
//! Serving ──(SIGTERM, live peers)──▶ Leaving ──(peers took over, or the drain is over)──┐
//! ShuttingDown ◀──(SIGTERM, from any other phase)────────────────────────────────────────┘
//! ShuttingDown ──(every actor stopped)──▶ Exited
//! ```
//!
//! - **Joining**: acts on no ring. Waits for its fence to open (its own
//!   Lease renewed), for the first list of the ring's Leases, and then
//!   [`JOIN_GRACE`] for peers starting with it.
//! - **Stopping**: has chosen a ring (the live members plus itself). The
//!   actors of keys the ring takes away are stopping; gained keys load
//!   meanwhile. Its view is not published until every stopping actor has
//!   reported back, so **its published view gives it every key it runs**;
//!   the first view of a join into a running ring not before its first
//!   lists and loads are done either (a *warm join*, below).
//! - **Serving**: the view is published (a new publication id each time).
//!   A waiting key starts once the first lists are done and every load
//!   has handed over its Jobs (its CronJobs come after them, so a gained
//!   key starts as its own CronJob arrives), the own Lease watch has shown
//!   this very publication back, and no live peer's published view gives
//!   the key to that peer ([`super::handoff::decide`]).
//! - **Leaving**: SIGTERM with live peers: runs its keys on under a view
//!   marked leaving and starts nothing, until its peers have loaded them
//!   or read those due first ([warm leaves](self#warm-leaves)).
//! - **Recovering**: the fence lapsed (the Lease was not renewed within the
//!   renew deadline): every actor stops; then the fence is reopened and the
//!   replica joins from scratch.
//! - **ShuttingDown** and **Exited**: a graceful stop; the Lease is released
//!   once every actor has stopped.
//!
//! Loads are counted, not a phase: a load of gained keys runs while lost
//! keys stop and while the view is published, and a ring change in the
//! middle starts another.
//!
//! # Warm joins
//!
//! A live peer that has published no view is still loading its first share
//! (a new process, or one rejoining after a lapse: its view is withdrawn
//! when it rejoins). It runs nothing, so it claims nothing; and it enters
//! this replica's ring only once it publishes, unless it was already in the
//! ring (peers starting together) or this replica is choosing its own first
//! ring. So the keys a joiner will take keep running on their old owners
//! while it lists and loads, and move only when it can start them at once:
//! a rolling restart delays no slot by the joiner's load (at 10^6 CronJobs
//! a quarter's load takes tens of seconds). A first view that no live
//! peer's published view contradicts (the whole ring starting together, a
//! lone replica) is published at once instead: nobody runs its keys, so
//! each starts as the load brings it.
//!
//! A first view that joins a running ring waits, besides, while a whole
//! minute is near (from [`HOLD_BEFORE_MINUTE`] before it to
//! [`HOLD_AFTER_MINUTE`] after, by the wall clock [`Input::Tick`] tells):
//! cron's slots fall on whole minutes, and a move takes seconds at 10^6
//! CronJobs; so does a view that leaves out a leaver still live (below).
//!
//! # Warm leaves
//!
//! On SIGTERM a replica with live peers publishes its view again, marked
//! leaving, and runs its keys on. Its peers leave it out of their rings at
//! once, load what they gain from it, and publish the view that leaves it
//! out only once that is loaded, or once the gained keys due soon have
//! been read on their own (standby; the rest start as the loads bring
//! them), and not while a whole minute is near (as a join's first view);
//! its view still claims the keys, so they wait. When every live
//! peer's view leaves it out (or the drain time is over), it stops its
//! actors and releases its Lease, and the peers start
//! the keys when they see the release. A change of the live peers that
//! leaves the ring as it is publishes the view again: nothing starts on
//! such a change (a leaving peer gone) before the watch has shown
//! everything written before it.
//!
//! The rules of both are in [`warm`].

use super::fence::FenceState;
use super::handoff::ViewRings;
use super::membership::Membership;
use keys::Keys;
use leave::Leave;
use loads::Loads;
use published::Published;
use std::sync::Arc;
use std::time::{Duration, Instant};

mod claims;
mod keys;
mod leave;
mod loads;
mod messages;
mod published;
mod queries;
mod start;
#[cfg(test)]
mod tests;
mod transitions;
mod warm;

pub use messages::{Command, Epoch, Flaw, IncompatiblePeer, Input, Phase};
pub use warm::{HOLD_AFTER_MINUTE, HOLD_BEFORE_MINUTE, near_a_whole_minute};

/// Before retrying a failed bulk load.
pub const LOAD_RETRY: Duration = Duration::from_secs(2);

/// How long a joining replica waits, once its own Lease is valid, before
/// it chooses its first ring: peers started with it (a fleet's first
/// start, a StatefulSet with parallel pod management) create their Leases
/// meanwhile. Choosing at once, the first to list the Leases saw none,
/// took every key for itself, and its bulk load of the whole cluster ran
/// to the end although its peers appeared milliseconds later: S3 measured
/// three replicas at 1.71x one replica's memory for it. One renew period of
/// the default settings.
pub const JOIN_GRACE: Duration = Duration::from_secs(2);

/// How long a leaving replica keeps running its keys at most, waiting for
/// its peers to load them ([warm leaves](self#warm-leaves)), by default.
/// It ends as soon as they have (well under a second at 10^4 CronJobs);
/// at 10^6 a peer's load of a quarter took 45-75 s in a rolling restart
/// (S7), and with 15 s the leaver let go before its peers could start its
/// keys. With the stop after it (10 s at most), within the
/// `terminationGracePeriodSeconds` of the manifests (80 s; Kubernetes'
/// default is 30 s).
pub const DRAIN: Duration = Duration::from_secs(60);

/// How far a replica's start has come: each only ever turns true.
#[derive(Debug, Default)]
struct Startup {
    /// The CronJob and Job watches' first lists are done ([`Input::ListsSynced`]).
    watches_listed: bool,
    /// The ring's Leases were listed once ([`Input::LeasesListed`]).
    leases_listed: bool,
    /// Reported ready ([`Command::SetReady`]).
    ready: bool,
}

/// The protocol's state for one replica.
pub struct Ownership {
    me: String,
    phase: Phase,
    /// How far the start has come.
    started: Startup,
    /// The fence as last judged.
    fence: FenceState,
    membership: Membership,
    rings: ViewRings,
    /// What was published of the view, and when it may be again.
    published: Published,
    /// The keys owned here, and the actors told to stop.
    keys: Keys,
    loads: Loads,
    /// By bucket, whether its keys may have run elsewhere since they were
    /// read here ([`claims`]).
    ran_elsewhere: claims::RanElsewhere,
    /// A graceful stop's terms ([`DRAIN`]).
    leave: Leave,
    /// The wall clock as the last [`Input::Tick`] told it, and the instant
    /// it was told at: the wall clock of any later instant, for the hold
    /// around whole minutes ([`near_a_whole_minute`]).
    wall: Option<(Instant, jiff::Timestamp)>,
    #[cfg(test)]
    flaw: Option<Flaw>,
}

impl Ownership {
    /// `me`: the replica id; `incarnation`: unique to this process.
    pub fn new(me: impl Into<String>, incarnation: impl Into<String>) -> Self {
        Self {
            me: me.into(),
            phase: Phase::Joining { valid_since: None },
            started: Startup::default(),
            fence: FenceState::Waiting,
            membership: Membership::default(),
            rings: ViewRings::default(),
            published: Published::new(incarnation.into()),
            keys: Keys::default(),
            loads: Loads::default(),
            ran_elsewhere: claims::RanElsewhere::default(),
            leave: Leave::new(DRAIN),
            wall: None,
            #[cfg(test)]
            flaw: None,
        }
    }

    /// For a replica that speaks `protocols` (tests of mixed builds).
    #[cfg(test)]
    pub fn speaking(mut self, protocols: crate::shard::protocol::Protocols) -> Self {
        self.membership = Membership::speaking(protocols);
        self
    }

    /// How long a graceful stop may keep running keys while peers load them.
    pub fn with_drain(mut self, drain: Duration) -> Self {
        self.leave = Leave::new(drain);
        self
    }

    #[cfg(test)]
    pub fn with_flaw(mut self, flaw: Flaw) -> Self {
        self.flaw = Some(flaw);
        self
    }

    /// Whether `flaw` was planted (never outside tests).
    fn flawed(&self, flaw: Flaw) -> bool {
        #[cfg(test)]
        return self.flaw == Some(flaw);
        #[cfg(not(test))]
        {
            let _ = flaw;
            false
        }
    }

    /// One step: `input` happened at `now`.
    pub fn on(&mut self, input: Input, now: Instant) -> Vec<Command> {
        let mut commands = Vec::new();
        match input {
            Input::ListsSynced => {
                self.started.watches_listed = true;
                self.advance(now, &mut commands);
            }
            Input::LeaseSeen { name, lease } => {
                self.membership.observe(&name, lease, now);
                self.note_claims_elsewhere(now);
            }
            Input::LeaseDeleted { name } => self.membership.deleted(&name),
            Input::LeasesListed => self.started.leases_listed = true,
            Input::Tick { fence, wall } => {
                self.fence = fence;
                if let Some(wall) = wall {
                    self.wall = Some((now, wall));
                }
                self.advance(now, &mut commands);
            }
            Input::CronJobSeen { key, uid, read_in } => {
                let fresh = self.loads.fresh(&uid, read_in);
                self.cronjob_seen(key, uid, fresh, now, &mut commands)
            }
            Input::KeyRead { key, uid, read_in } => {
                // A read asked for before the key was lost and gained again
                // counts as the watch's copy.
                let fresh = self.loads.fresh(&uid, Some(read_in));
                if fresh && self.owns(&uid) && !self.loads.idle() {
                    self.loads.read_alone(key.clone());
                }
                self.cronjob_seen(key.clone(), uid, fresh, now, &mut commands);
                self.start_waiting(Some(&key), now, &mut commands);
            }
            // An older epoch's report (messages may pass each other) says
            // nothing of this one's gains, nor undoes this one's.
            Input::DueKeysRead { epoch } if epoch == self.loads.epoch() => {
                self.published.due_read(epoch);
                self.advance(now, &mut commands);
            }
            Input::DueKeysRead { .. } => {}
            Input::CronJobGone { key } => self.stop(&key, now, &mut commands),
            Input::SpawnFailed { key } => {
                self.forget(&key);
                self.check_ready(&mut commands);
            }
            Input::ActorArmed { key } => {
                self.keys.armed(&key);
                self.check_ready(&mut commands);
            }
            Input::ActorStopped { key, uid } => {
                if self.keys.stopped(&key, &uid) {
                    self.advance(now, &mut commands);
                }
            }
            Input::LoadJobsDone => {
                self.loads.jobs_handed_over();
                self.advance(now, &mut commands);
            }
            Input::LoadDone {
                ok,
                previous,
                jobs_told,
            } => {
                self.loads.ended(jobs_told);
                if !ok && let Some(target) = self.phase.target() {
                    // Loads again what the failed load was to gain and is
                    // still owned (with what a later ring change gained,
                    // which its own load brings too): owned now, not under
                    // the failed load's previous ring. At a hand-off of
                    // 250,000 keys, reloading everything owned instead made
                    // a survivor's retry three times as long (S7).
                    let target = target.clone();
                    self.load(target, previous, LOAD_RETRY, &mut commands);
                }
                // After the retry's decision: a key the watch showed still
                // waits for a retried load's copy.
                if self.loads.idle() {
                    self.loads.stop_awaiting();
                    self.advance(now, &mut commands);
                }
            }
            Input::Shutdown => match &self.phase {
                Phase::ShuttingDown | Phase::Exited | Phase::Leaving { .. } => {}
                // Nobody to hand the keys to (no live peer, or every one
                // leaving too): stop at once.
                Phase::Serving { target, .. }
                    if self.leave.drains() && !self.peers_took_over(now) =>
                {
                    let target = target.clone();
                    self.publish(&target, true, now, &mut commands);
                    self.phase = Phase::Leaving { target, since: now };
                    self.advance(now, &mut commands);
                }
                // In the middle of a ring change, with keys running under a
                // published view: its view cannot be marked leaving before
                // its lost keys have stopped (a view gives it every key it
                // runs), so it leaves then ([`Self::advance`]); dropping
                // them at once left a quarter of 10^6 CronJobs to wait for
                // its peers' loads in a rolling restart (S7).
                Phase::Stopping { .. }
                    if self.leave.drains()
                        && self.published.in_join()
                        && !self.peers_took_over(now) =>
                {
                    self.leave.ask_midway(now);
                    self.advance(now, &mut commands);
                }
                _ => self.shut_down(now, &mut commands),
            },
        }
        commands
    }

    /// `fresh`: its copy comes from a read made since the key's latest gain
    /// ([`Loads::fresh`]); else (the watch's, or an older read) a gained
    /// key waits for a load's copy while one is in flight.
    fn cronjob_seen(
        &mut self,
        key: Arc<str>,
        uid: Arc<str>,
        fresh: bool,
        now: Instant,
        out: &mut Vec<Command>,
    ) {
        if self.has(&key, &uid) {
            if fresh && self.loads.shown_by_a_load(&key) {
                self.start_waiting(Some(&key), now, out);
            }
            return;
        }
        // Deleted and re-created while the watch was away: the old actor
        // stops whoever owns the new CronJob (the ring keys on the UID).
        self.stop(&key, now, out);
        if !self.owns(&uid) {
            return;
        }
        self.keys.gain(key.clone(), uid.clone(), now);
        if !fresh {
            self.loads.shown_by_the_watch(key.clone());
        }
        out.push(Command::Spawn {
            key: key.clone(),
            uid,
        });
        self.start_waiting(Some(&key), now, out);
    }

    /// Drops `key` from the owned keys; returns it with its CronJob's UID.
    fn forget(&mut self, key: &str) -> Option<(Arc<str>, Arc<str>)> {
        let (key, uid) = self.keys.forget(key)?;
        self.loads.forget(&key);
        Some((key, uid))
    }

    fn stop(&mut self, key: &str, now: Instant, out: &mut Vec<Command>) {
        if let Some((key, uid)) = self.keys.stop(key, now) {
            self.loads.forget(&key);
            out.push(Command::Stop { key, uid });
        }
    }

    /// Stops every actor; the Lease is released once they have stopped.
    fn shut_down(&mut self, now: Instant, out: &mut Vec<Command>) {
        self.phase = Phase::ShuttingDown;
        self.stop_all(now, out);
        self.advance(now, out);
    }

    fn stop_all(&mut self, now: Instant, out: &mut Vec<Command>) {
        let keys: Vec<Arc<str>> = self.keys.owned().map(|(key, _)| key.clone()).collect();
        for key in keys {
            self.stop(&key, now, out);
        }
    }
}
