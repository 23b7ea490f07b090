//! Horizontal sharding. So far the ring ([`ring`]), a pure function of the
//! member set; membership Leases, hand-offs and the supervisor come next.

pub mod ring;
