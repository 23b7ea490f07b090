//! What a CronJob's actor is given besides its own state (the gateway,
//! the metrics, the clock, ...), and what it tells the supervisor.

use super::feed::DecisionFeed;
use crate::apiserver::gateway::Gateway;
use crate::clock::Clock;
use crate::telemetry::Metrics;
use jiff::Timestamp;
use jiff::tz::TimeZone;
use std::sync::Arc;

/// What an actor tells the supervisor.
#[derive(Debug, actix::Message)]
#[rtype(result = "()")]
pub enum ActorReport {
    /// Its first decision is done and its timer armed (readiness).
    Armed { key: Arc<str> },
    /// It has stopped. `unrecorded`: the latest slot a Job of its CronJob
    /// is known to have been made for, when the status it last saw does not
    /// record it (a status write lost after a create): the supervisor hands
    /// it to the CronJob's next actor in this process. `next_look`: when
    /// it would next have needed its controller (`None`: not until its
    /// CronJob changes), which the supervisor keeps as a standby entry
    /// when the key went to a peer ([`crate::shard::standby`]).
    Stopped {
        key: Arc<str>,
        uid: Arc<str>,
        unrecorded: Option<Timestamp>,
        next_look: Option<Timestamp>,
    },
}

/// What the actor needs besides its own state.
pub struct ActorServices {
    pub gateway: Gateway,
    /// The supervisor's mailbox for the actors' reports (one for all).
    pub reports: actix::Recipient<ActorReport>,
    pub metrics: Arc<Metrics>,
    pub default_zone: TimeZone,
    /// Whether decisions write the slot history (`--slot-history`).
    pub slot_history: bool,
    /// This replica's id, written on the Jobs it creates ([`super::apply::CREATED_BY_ANNOTATION`]).
    pub replica: String,
    /// Where decisions are published while someone watches.
    pub feed: DecisionFeed,
    /// The wall clock every time the actor and its decisions read (the
    /// supervisor's, [`crate::clock`]).
    pub clock: Clock,
}
