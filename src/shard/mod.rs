//! Horizontal sharding. Pure parts: the ring that assigns the buckets
//! CronJobs and Jobs fall in ([`crate::bucket`]) to replicas ([`ring`]),
//! membership judged on this replica's monotonic clock ([`membership`]),
//! self-fencing on the own Lease ([`fence`]) judged on the boot clock
//! ([`crate::clock::BootInstant`], which counts a paused VM), the hand-off rule for owned
//! keys ([`handoff`]), the protocol that combines them as a state machine
//! ([`ownership`], proven by a deterministic simulation in its tests), the
//! Job index ([`jobs`]), re-list diffs ([`relist`]) and the slots started
//! but not recorded, kept from one actor to the next ([`unrecorded`]).
//! Imperative shell:
//! the own Lease's keeper ([`lease`]), the [`supervisor`] that feeds the
//! protocol and starts, stops and routes to the CronJob actors this replica
//! owns, and `/debug/shards` ([`debug`]).

pub mod debug;
pub mod fence;
pub mod handoff;
pub mod incompatible;
pub mod jobs;
pub mod lease;
pub mod membership;
pub mod ownership;
pub mod protocol;
pub mod relist;
pub mod ring;
pub mod standby;
pub mod supervisor;
pub mod unrecorded;
