//! shardcron: a Kubernetes CronJob controller that scales out horizontally.
//!
//! The crate is a functional core inside an imperative shell:
//! - [`schedule`]: cron parsing and activation math with Kubernetes' exact semantics (pure).
//! - [`reconcile`]: the controller's decision for one CronJob, as upstream's v2 controller makes it (pure).
//! - [`actor`]: one actor per CronJob (so far its timer math, pure).
//! - [`kube`]: talking to the API server (so far the write gateway's pure parts: rate limit, fair queue, retries).
//! - [`shard`]: which replica owns which CronJob (so far the pure parts: ring, membership, fencing, hand-off).
//! - [`cli`]: the `shardcron` command line.

pub mod actor;
pub mod cli;
pub mod kube;
pub mod reconcile;
pub mod schedule;
pub mod shard;
