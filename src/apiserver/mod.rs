//! Everything that talks to the Kubernetes API server about CronJobs and
//! Jobs: the shared [`client`], the watches ([`watch`], the ring's Leases too), the bulk loads of
//! a rebalance ([`bulk`]) and the write gateway ([`gateway`]), which serves
//! the decision's requests ([`requests`], the seam its tests script), with its pure
//! parts: the rate limit ([`rate`]), the queue discipline ([`queue`]) and
//! the retry policy ([`retry`]), every request's deadline ([`deadline`]),
//! which of two resourceVersions is older ([`resource_version`]), and
//! the buckets a replica's share is named by to the server ([`bucket`]),
//! and the `shardcron.io` CronJob's definition, made from batch/v1's
//! published schema ([`crd`]); who a caller of the replica's own surfaces
//! is and what it may do ([`review`]: TokenReview, SubjectAccessReview). The
//! own Lease is written by the shard layer. The shell's unit tests run
//! against a scripted server (`scripted`, test builds only).

pub mod bucket;
pub mod bulk;
pub mod client;
pub mod counted;
pub mod crd;
pub mod deadline;
pub mod event_recorder;
pub mod events;
pub mod failure;
pub mod fenced_socket;
pub mod gateway;
pub mod lean_cronjob;
pub mod lean_job;
pub mod queue;
pub mod rate;
pub mod requests;
pub mod resource_version;
pub mod resume;
pub mod retry;
pub mod review;
#[cfg(test)]
pub mod scripted;
pub mod sharded;
pub mod watch;
