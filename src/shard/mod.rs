//! Horizontal sharding, so far its pure parts: the consistent-hash ring
//! ([`ring`]), membership judged on this replica's monotonic clock
//! ([`membership`]), self-fencing on the own Lease ([`fence`]) and the
//! hand-off rule for gained keys ([`handoff`]).
//! The Lease keeper and the supervisor that starts and stops actors come
//! with the running controller.

pub mod fence;
pub mod handoff;
pub mod membership;
pub mod ring;

pub use handoff::view_digest;
