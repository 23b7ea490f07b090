//! shardcron: a Kubernetes CronJob controller that scales out horizontally.
//!
//! The crate is a functional core inside an imperative shell:
//! - [`schedule`]: cron parsing and activation math with Kubernetes' exact semantics (pure).
//! - [`reconcile`]: the controller's decision for one CronJob, as upstream's v2 controller makes it (pure).
//! - [`actor`]: one actor per CronJob (on a runtime of its own, not actix's): its state, its wake-up, carrying out decisions.
//! - [`apiserver`]: talking to the API server: the client, watchers, the write gateway (rate limit, fair queue, retries), events.
//! - [`shard`]: which replica runs which CronJob: the supervisor, and the ring, membership, fencing and hand-off rules.
//! - [`admin`]: the admin API (gRPC, proto/): what only a CronJob's owner knows, for the command line.
//! - [`telemetry`]: metrics, health endpoints, logs.
//! - [`cli`]: the `shardcron` command line.
//! - [`memory`]: handing the memory of list bursts back to the OS.
//! - [`k8s_proto`]: the few Kubernetes protobuf messages read and written (their wire form, pure).
//! - [`bucket`]: the unit of ownership: the bucket a CronJob's UID hashes to, the label and hash ranges that name a set of them to the API server (pure).
//! - [`clock`]: the wall clock handed to the supervisor, wheel and actors, and the boot clock that counts a paused VM (the fence's).
//!
//! Layers import only downwards: schedule < reconcile < apiserver < actor <
//! shard < admin < cli, with telemetry, memory, clock, bucket and k8s_proto beside them all
//! (`tests/layers.rs` checks it).

pub mod actor;
pub mod admin;
pub mod apiserver;
pub mod bucket;
pub mod cli;
pub mod clock;
pub mod k8s_proto;
pub mod memory;
pub mod reconcile;
pub mod release;
pub mod schedule;
pub mod shard;
pub mod telemetry;
