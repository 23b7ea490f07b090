//! Drives `deploy/local` from Rust: one harness for the integration tests
//! (`tests/`) and the load test (`loadtest/`).
//!
//! - [`cluster`]: a control plane started by `deploy/local/up` (or one
//!   already running), its credentials, logs and teardown;
//! - [`replica`]: one `shardcron run` as a child process, from launch to
//!   readiness, signals, metrics and exit;
//! - [`net`]: loopback ports and a plain HTTP GET for the replicas' probes;
//! - [`incompressible_text`]: what a hostile tenant fills a template with.
//!
//! Errors are `anyhow` with context: a harness reports to a person
//! reading a failed run, never to code that branches on the cause.

pub mod cluster;
pub mod net;
pub mod replica;

pub use cluster::LocalCluster;
pub use replica::{Replica, ReplicaSpec, histogram, sample};

use std::path::{Path, PathBuf};

/// The repository root: this crate lives in `deploy/local/harness`.
pub fn repo_root() -> PathBuf {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    here.ancestors()
        .nth(3)
        .map(Path::to_path_buf)
        .unwrap_or_else(|| here.to_path_buf())
}

/// `bytes` of printable text that does not compress (xorshift over 90
/// characters, from `seed`), as a hostile tenant fills a Job template with
/// (the e2e tests' and S8's attack on a replica's memory).
pub fn incompressible_text(bytes: usize, seed: u64) -> String {
    let mut state = seed | 1;
    (0..bytes)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            char::from(b'!' + (state % 90) as u8)
        })
        .collect()
}
