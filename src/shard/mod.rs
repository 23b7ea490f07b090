//! Horizontal sharding, so far its pure parts: the consistent-hash ring
//! ([`ring`]), membership judged on this replica's monotonic clock
//! ([`membership`]), self-fencing on the own Lease ([`fence`]) and the
//! hand-off rule for gained keys ([`handoff`]).
//! The [`supervisor`] starts and stops the actors and routes watch events
//! to them; with one replica it runs every CronJob.

pub mod fence;
pub mod handoff;
pub mod jobs;
pub mod membership;
pub mod ring;
pub mod supervisor;

pub use handoff::view_digest;
