//! shardcron: a Kubernetes CronJob controller that scales out horizontally.
//!
//! The crate is a functional core inside an imperative shell:
//! - [`schedule`]: cron parsing and activation math with Kubernetes' exact semantics (pure).
//! - [`reconcile`]: the controller's decision for one CronJob, as upstream's v2 controller makes it (pure).
//! - [`kube`]: talking to the API server (so far the write gateway's rate limit and queue).
//! - [`shard`]: which replica owns which CronJob (so far the consistent-hash ring, pure).
//! - [`cli`]: the `shardcron` command line.

pub mod cli;
pub mod kube;
pub mod reconcile;
pub mod schedule;
pub mod shard;
