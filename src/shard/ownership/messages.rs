//! The protocol's vocabulary: where a replica stands ([`Phase`]), what
//! happens to it ([`Input`]) and what it asks of the supervisor
//! ([`Command`]).

pub use super::loads::Epoch;
use crate::shard::fence::FenceState;
use crate::shard::lease::Publication;
use crate::shard::membership::LeaseObservation;
use crate::shard::ring::Ring;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Where the replica stands in the protocol.
#[derive(Debug, Clone)]
pub enum Phase {
    /// `valid_since`: when the fence was first judged valid in this join
    /// ([`super::JOIN_GRACE`] runs from there).
    Joining {
        valid_since: Option<Instant>,
    },
    Stopping {
        target: Arc<Ring>,
    },
    Serving {
        target: Arc<Ring>,
        publication: Publication,
    },
    /// SIGTERM while serving, with live peers: it keeps running its keys
    /// under a publication that says it is leaving, while the peers load
    /// them, until every peer's view leaves it out or the drain time
    /// since `since` is over (then it shuts down).
    Leaving {
        target: Arc<Ring>,
        since: Instant,
    },
    Recovering,
    ShuttingDown,
    Exited,
}

impl Phase {
    pub(super) fn target(&self) -> Option<&Arc<Ring>> {
        match self {
            Phase::Stopping { target }
            | Phase::Serving { target, .. }
            | Phase::Leaving { target, .. } => Some(target),
            _ => None,
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            Phase::Joining { .. } => "joining",
            Phase::Stopping { .. } => "stopping",
            Phase::Serving { .. } => "serving",
            Phase::Leaving { .. } => "leaving",
            Phase::Recovering => "recovering",
            Phase::ShuttingDown => "shutting down",
            Phase::Exited => "exited",
        }
    }
}

/// What happened, as the supervisor tells it.
#[derive(Debug, Clone)]
pub enum Input {
    /// The first lists of CronJobs and Jobs (every scope) are complete.
    ListsSynced,
    /// A Lease of the ring, as the watch showed it. The Lease inputs only
    /// record; the [`Input::Tick`] that follows them acts.
    LeaseSeen {
        name: String,
        lease: LeaseObservation,
    },
    LeaseDeleted {
        name: String,
    },
    /// The Lease watch's (re)list is complete (deletions already told).
    LeasesListed,
    /// The fence as judged now; also the periodic re-judging of membership
    /// (Leases expire without an event). `wall`: the wall clock now, to
    /// keep key moves away from whole minutes ([`super::near_a_whole_minute`]);
    /// `None` holds nothing.
    Tick {
        fence: FenceState,
        wall: Option<jiff::Timestamp>,
    },
    /// A CronJob was seen under `key` = `namespace/name`: by a bulk load
    /// (`read_in`: a consistent read, no older than the ring change it was asked for after), or by
    /// the watch (which may replay versions older than that after a ring
    /// change).
    CronJobSeen {
        key: Arc<str>,
        uid: Arc<str>,
        /// The epoch of the read that brought it (a bulk load, asked for
        /// in [`Command::Load`]'s epoch); `None`: the watch.
        read_in: Option<Epoch>,
    },
    /// A gained CronJob was read on its own, with its Jobs (consistent, after
    /// the ring changed: [`crate::shard::standby`]); it may start while bulk
    /// loads still hand over Jobs.
    KeyRead {
        key: Arc<str>,
        uid: Arc<str>,
        /// The epoch it was asked for in ([`super::Ownership::epoch`]).
        read_in: Epoch,
    },
    /// Every gained CronJob that needs its controller within the standby
    /// horizon has been read on its own ([`Input::KeyRead`]), asked for in
    /// `epoch`, and the standby entries covered every bucket gained since
    /// the loads were last idle ([`crate::shard::standby`]): a ring that
    /// gains from a leaving peer may publish before its bulk loads end
    /// ([warm leaves](super#warm-leaves)).
    DueKeysRead {
        epoch: Epoch,
    },
    /// A CronJob is gone (deleted, or missing from a re-list).
    CronJobGone {
        key: Arc<str>,
    },
    /// The actor [`Command::Spawn`] asked for could not be made.
    SpawnFailed {
        key: Arc<str>,
    },
    /// The actor of `key` made its first decision.
    ActorArmed {
        key: Arc<str>,
    },
    /// The actor of `key` (CronJob `uid`) stopped.
    ActorStopped {
        key: Arc<str>,
        uid: Arc<str>,
    },
    /// A bulk load has handed over every Job it loads; its CronJobs
    /// follow, and each can start as it comes.
    LoadJobsDone,
    /// A bulk load ended. `previous`: the ring its gains were counted
    /// from (that of its [`Command::Load`]), for a retry of the same gains.
    /// `jobs_told`: whether its [`Input::LoadJobsDone`] came (a load that
    /// failed before it sends none).
    LoadDone {
        ok: bool,
        previous: Option<Arc<Ring>>,
        jobs_told: bool,
    },
    /// SIGTERM.
    Shutdown,
}

/// What the supervisor is to do, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    /// Make an actor for `key` (its CronJob, of `uid`, is the one just
    /// seen); it waits for [`Command::Start`]. The key and UID are the ones
    /// the protocol keeps: the shell's maps share them (one allocation per
    /// CronJob, however many maps index it).
    Spawn { key: Arc<str>, uid: Arc<str> },
    /// Let the actor of `key` (of CronJob `uid`) decide; it waited `waited`
    /// for the hand-off. `ran_elsewhere`: another replica may have run the
    /// key's slots after this replica's copy of it was read (a join or a
    /// leave moves a key off a live peer after the load; the watches that
    /// bring its last writes are not ordered with the Lease watch that
    /// lets it start), so a slot that fell due before the start is run
    /// only once the CronJob has been read again
    /// ([`crate::actor::Update::Start`]).
    Start {
        key: Arc<str>,
        uid: Arc<str>,
        waited: Duration,
        ran_elsewhere: bool,
    },
    /// Stop the actor of `key` (of CronJob `uid`; it reports
    /// [`Input::ActorStopped`]).
    Stop { key: Arc<str>, uid: Arc<str> },
    /// The ring acted on changed (`None`: none, after a lapse); `lost` keys
    /// were stopped. Forget the Jobs of CronJobs no longer owned.
    RingChanged {
        target: Option<Arc<Ring>>,
        lost: usize,
    },
    /// Write this view on the own Lease (and keep writing it).
    Publish(Publication),
    /// Load in bulk the CronJobs (and their Jobs) owned under `target` but
    /// not under `previous` (all owned if `None`), after `delay`: the Jobs
    /// first, then [`Input::LoadJobsDone`], then the CronJobs. Answer
    /// with [`Input::LoadDone`].
    Load {
        target: Arc<Ring>,
        previous: Option<Arc<Ring>>,
        delay: Duration,
        /// The epoch its reads are of (each CronJob it shows is an
        /// [`Input::CronJobSeen`] with this `read_in`).
        epoch: Epoch,
    },
    /// Every actor stopped after a lapse: the fence may open again, and the
    /// view is withdrawn (it runs nothing now; its next view comes when it
    /// has loaded again, a warm join).
    RejoinFence,
    /// Every owned actor has made its first decision.
    SetReady,
    /// Every actor stopped after SIGTERM: release the Lease and exit.
    ReleaseAndExit,
    /// The live peers that speak no protocol version the ring can run
    /// changed: these now (empty: none). They are out of the ring and
    /// their views claim every key ([`crate::shard::protocol`]).
    PeersIncompatible(Vec<IncompatiblePeer>),
}

/// A live peer this replica cannot share a ring with, as its Lease says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IncompatiblePeer {
    pub name: String,
    /// The versions it speaks (`None`: they do not read).
    pub protocols: Option<crate::shard::protocol::Protocols>,
    pub build: Option<String>,
}

/// A rule of the protocol broken on purpose, to show that the simulation
/// finds the violation it causes. Only tests can plant one
/// ([`super::Ownership::with_flaw`]); elsewhere every rule holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flaw {
    /// Start a key without asking whether a live peer's view still claims it.
    IgnorePeers,
    /// Publish the new view without waiting for lost keys to stop.
    PublishWhileStopping,
    /// Send a write the gateway let through even when the fence has lapsed
    /// by the time its bytes reach the socket (the write gateway's client
    /// before `apiserver::fenced_socket`; only the simulation models it).
    NoFenceAtTheSocket,
    /// Start a gained key from what the replica held before any consistent
    /// read of it (as if a standby copy, or a watch's replay, were its
    /// state): a key the watch shows starts without waiting for a load's
    /// copy, or for the Jobs of the loads in flight.
    StartFromStandby,
    /// Read every peer's view as protocol version 1, whatever version its
    /// Lease states (what a build that predates versions does).
    ReadViewsAsVersion1,
    /// Tell every started key that it ran nowhere else, as if the watches
    /// had brought a live previous owner's last writes by the time its
    /// release is seen on the Lease watch.
    TrustTheWatchesAtHandOff,
}
