//! The ownership protocol's tests: one replica at a time against tables
//! ([`tables`]), and many under a seeded simulation of the API server,
//! the clocks and the faults ([`simulation`]).

mod simulation;
mod tables;
