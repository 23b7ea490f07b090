//! Everything that talks to the Kubernetes API server about CronJobs and
//! Jobs: the shared [`client`], the watches ([`watch`], the ring's Leases
//! and the namespaces' deletions too), the bulk loads of a rebalance
//! ([`bulk`]) and the write gateway ([`gateway`]: its queue discipline, rate
//! limit, retry policy and Event backlog are its own modules), which serves
//! the decision's requests ([`requests`], the seam its tests script); the
//! question every write asks first ([`write_fence`]) and the connections
//! that ask it ([`fenced_socket`]); every request's deadline
//! ([`deadline`], the answer's headers too), which of
//! two resourceVersions is older ([`resource_version`]); the buckets a replica's share is named by to the
//! server are [`crate::bucket`]'s. The own Lease is written by the shard layer. The shell's unit tests run
//! against a scripted server (`scripted`, test builds only).

pub mod bulk;
pub mod client;
pub mod counted;
pub mod deadline;
pub mod failure;
pub mod fenced_socket;
pub mod gateway;
pub mod lean_cronjob;
pub mod lean_job;
pub mod protobuf;
pub mod requests;
pub mod resource_version;
pub mod resume;
#[cfg(test)]
pub mod scripted;
pub mod sharded;
pub mod watch;
pub mod write_fence;

/// Where a question that needs no object asks with a list, for a replica
/// reading `scope` (`None`: every namespace): the latest resourceVersion
/// where nothing is counted (all but the first versions' CronJob read,
/// whose count sizes a first load), and whether the server shards lists
/// ([`sharded`]). A scoped replica asks in its scope; a cluster-wide one in
/// [`VERSION_READ_NAMESPACE`]. A consistent LIST's resourceVersion is the
/// server's latest whatever it lists, but kube-apiserver 1.36 answers even
/// one of `limit=1` from its watch cache by walking every object under the
/// list's prefix (it counts `remainingItemCount`): a cluster-wide one cost
/// it about 1.6 CPU s at 10^6 CronJobs (its CPU profile over S7's cold
/// start, where 8 of 24 walks were such questions), one of a namespace
/// only that namespace's objects.
pub(crate) fn question_namespace(scope: Option<&str>) -> &str {
    scope.unwrap_or(VERSION_READ_NAMESPACE)
}

/// A namespace that holds few CronJobs and Jobs, if any, and that no
/// tenant writes ([`question_namespace`]). One that does not exist lists
/// empty, with the version.
const VERSION_READ_NAMESPACE: &str = "kube-system";
