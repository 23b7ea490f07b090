//! Drives `deploy/local` from Rust: one harness for the integration tests
//! (`tests/`) and the load test (`loadtest/`).
//!
//! - [`cluster`]: a control plane started by `deploy/local/up` (or one
//!   already running), its credentials, logs and teardown;
//! - [`replica`]: one `shardcron run` as a child process, from launch to
//!   readiness, signals, metrics and exit;
//! - [`net`]: loopback ports and a plain HTTP GET for the replicas' probes.
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
