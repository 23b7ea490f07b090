//! The lists of CronJobs a load reads and how long they are, how they are
//! read (pages, the server's timeout) and why one fails, and what it does
//! with one the server did not complete: a list cut before its end is read
//! again (in halves, when it has several buckets), and one the server's
//! watch cache is too far behind for is read by pages.

use crate::bucket::{BUCKETS, Bucket};
use crate::reconcile::CronJobKind;

/// How a load's lists are read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ListReads {
    /// From the server's watch cache, at least as new as a consistent read
    /// (the server streams lists, as the watches found: its cache serves
    /// consistent reads): streaming lists, and batch/v1 CronJobs in
    /// protobuf one LIST each (`protobuf`); else paginated lists.
    pub from_cache: bool,
    /// batch/v1 CronJobs in protobuf (`--api-protobuf`, `protobuf`);
    /// the shardcron.io CRD's (custom resources have no protobuf) and the
    /// Jobs in JSON.
    pub protobuf: bool,
}

/// CronJobs a load asks for in one streaming list, about: short enough
/// that it ends before the server cuts it (a few seconds even on a busy
/// server; see the module's comment), long enough that the server's cost
/// of starting a list stays small beside its sending. kube-apiserver
/// 1.36 starts every streaming list by copying and sorting its whole watch
/// cache (`newCacheIntervalFromStore`), under the cache's read lock, which
/// holds back every watch's events meanwhile: at 10^6 CronJobs about 1.5 s
/// of its CPU whatever the list's size, then 30-50 us per CronJob sent
/// (`loadtest/tools/list-cost`, an idle control plane, two runs: 1,002
/// CronJobs 1.6-1.7 s, about 24,000 1.9-2.3 s, 97,206 4.6-5.2 s, 250,126
/// 9.1-14.7 s). With lists of 10,000 a quarter's load cost the server
/// about three times what one list would; with 25,000 about twice, and
/// each list still sends in one to three seconds on an idle server.
pub const LIST_TARGET: usize = 25_000;

/// CronJobs a load asks for in one whole LIST (batch/v1 in protobuf from
/// the watch cache), about. Nothing cuts a LIST but the server's request
/// timeout (60 s by default), so it may be longer than a streaming list.
/// What a LIST costs the server besides its CronJobs is a walk of its
/// whole cache, whatever the list's length: kube-apiserver 1.36 gathers
/// every object under the list's prefix into one slice and tests each
/// against the shard selector's ranges (about 1.6 CPU s at 10^6, with a
/// load's 80-130 scattered ranges; its CPU profile over S7's cold start,
/// where such walks were 34 of its 80 CPU s). So lists are long: with
/// 25,000 (ten a replica) S7's cold start was ready after 118 s, with
/// 100,000 after 70-93 s, with 150,000 (two lists of about 130,000) after
/// 75.3 s in one run. But the server answers a LIST's headers only once
/// it has gathered, converted and sized every item: at a cold start four
/// replicas' lists of about 130,000 at once went past the 30 s every
/// answer's headers then had, twice in two runs, and each such load
/// failed and was read again whole (114.2 s). A whole LIST now waits for
/// them as long as the server's own request timeout
/// ([`crate::apiserver::deadline::headers`]); the length stays the one
/// measured since: a quarter of S7 is three even lists
/// ([`even_per_list`]) of about 85,000.
pub const WHOLE_LIST_TARGET: usize = 100_000;

/// About how many CronJobs one list of `kind` read by `reads` asks for:
/// [`WHOLE_LIST_TARGET`] for a whole LIST, else [`LIST_TARGET`].
pub fn list_target(kind: CronJobKind, reads: ListReads) -> usize {
    if reads.from_cache && reads.protobuf && kind == CronJobKind::Batch {
        WHOLE_LIST_TARGET
    } else {
        LIST_TARGET
    }
}

/// How many buckets' CronJobs one list of a load asks for, from the
/// density the replica knows (`cronjobs` over `buckets`: what it owns now,
/// or, owning nothing yet, what the server counted over every bucket):
/// about `target` CronJobs ([`list_target`]). Knowing nothing, every
/// bucket in one list.
pub fn buckets_per_list(cronjobs: usize, buckets: usize, target: usize) -> usize {
    if cronjobs == 0 || buckets == 0 {
        return usize::from(BUCKETS);
    }
    (target * buckets / cronjobs).clamp(1, usize::from(BUCKETS))
}

/// [`buckets_per_list`] by what a replica knows: the density of its
/// `actors` over its `owned_buckets`; owning nothing yet (a start, where
/// one list would hold a quarter of a million CronJobs at 10^6 on four
/// replicas), the `cronjobs_at_start` the server counted over every bucket.
pub fn buckets_per_list_knowing(
    actors: usize,
    owned_buckets: usize,
    cronjobs_at_start: Option<usize>,
    target: usize,
) -> usize {
    if actors == 0 || owned_buckets == 0 {
        return buckets_per_list(cronjobs_at_start.unwrap_or(0), usize::from(BUCKETS), target);
    }
    buckets_per_list(actors, owned_buckets, target)
}

/// How many buckets each list of `buckets` gets when no list may hold
/// more than `per_list`: as few lists as that allows, as even as can be
/// (263 buckets at 153 a list: two of 132, not 153 and 110). Each LIST
/// costs the server a walk of its whole cache whatever its length, and
/// the last list of uneven ones is the one that waits longest for its walk.
pub fn even_per_list(buckets: usize, per_list: usize) -> usize {
    let per_list = per_list.max(1);
    let lists = buckets.div_ceil(per_list).max(1);
    buckets.div_ceil(lists).max(1)
}

/// Objects per page.
pub(super) const PAGE: u32 = 500;

/// The server's timeout of a streaming list, seconds.
pub(super) const STREAM_TIMEOUT_SECONDS: u32 = 3600;

/// Why a bulk load stopped.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error(transparent)]
    Api(#[from] kube::Error),
    #[error("listing a page: {0}")]
    Deadline(crate::apiserver::deadline::Elapsed),
    #[error(
        "the list ended before its end (a streaming list before its initial-events-end bookmark, a LIST before its last item)"
    )]
    EndedEarly,
    #[error(transparent)]
    Protobuf(#[from] crate::apiserver::protobuf::ProtobufError),
    /// A read's task panicked (a bug): told as a failed read, so that
    /// what counts the reads in flight still hears of it.
    #[error("the read panicked")]
    Panicked,
}

impl LoadError {
    /// Whether the request failed on its connection, before any answer
    /// (a pooled connection the server had closed: hyper's `SendRequest`;
    /// a connection refused or reset): a read may be made again at once.
    /// Not a deadline (a slow or silent server: the client's own timeouts
    /// come back as service errors too, and a second wait would only
    /// double it) nor an answer (a status).
    pub fn connection_failed(&self) -> bool {
        let error: &(dyn std::error::Error + 'static) = match self {
            LoadError::Api(kube::Error::Service(error)) => error.as_ref(),
            LoadError::Api(kube::Error::HyperError(error)) => error,
            _ => return false,
        };
        !std::iter::successors(Some(error), |e| e.source()).any(|e| {
            e.is::<tower::timeout::error::Elapsed>()
                || e.downcast_ref::<std::io::Error>()
                    .is_some_and(|io| io.kind() == std::io::ErrorKind::TimedOut)
        })
    }
}

/// Reads of one list that cannot be split (one bucket's, every CronJob's,
/// the Jobs'), the first included, when the server cuts a streaming list
/// before its end; then the load fails (and the supervisor retries it).
/// A list of one load reads at most `2b - 1 + b (LIST_ATTEMPTS - 1)` times
/// for its `b` buckets.
pub const LIST_ATTEMPTS: u32 = 3;

/// One list of CronJobs of a load: a served kind's, of some buckets (where
/// the server shards that kind's lists) or of every CronJob of the kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CronJobList {
    pub kind: CronJobKind,
    /// Sorted, so that a list's buckets are few hash ranges; `None`: every
    /// CronJob of the kind.
    pub buckets: Option<Vec<Bucket>>,
}

/// Whether the server turned a consistent streaming read away because its
/// watch cache is behind etcd: 504 with the cause `ResourceVersionTooLarge`
/// after waiting 3 s for the cache. kube-apiserver (1.36) serves a
/// consistent paginated LIST from etcd in that case (its consistent reads'
/// fallback), a streaming list never: under the suite's load on a 2-core
/// machine a cache stayed behind for minutes, and every streaming load
/// failed the same way until then.
pub(super) fn cache_behind(error: &kube::Error) -> bool {
    match error {
        kube::Error::Api(status) => {
            status.code == 504
                && status.details.as_ref().is_some_and(|details| {
                    details
                        .causes
                        .iter()
                        .any(|cause| cause.reason == "ResourceVersionTooLarge")
                })
        }
        _ => false,
    }
}

/// What to read instead of `list`, cut by the server at its read number
/// `attempt`: its two halves, each a first read, if it has several
/// buckets; else itself again, if it has reads left ([`LIST_ATTEMPTS`]);
/// else nothing (`None`: the load fails).
pub fn split_on_cut(list: CronJobList, attempt: u32) -> Option<Vec<(CronJobList, u32)>> {
    match list.buckets {
        Some(buckets) if buckets.len() >= 2 => {
            let (first, second) = buckets.split_at(buckets.len() / 2);
            Some(
                [first, second]
                    .into_iter()
                    .map(|half| {
                        let half = CronJobList {
                            kind: list.kind,
                            buckets: Some(half.to_vec()),
                        };
                        (half, 1)
                    })
                    .collect(),
            )
        }
        _ if attempt < LIST_ATTEMPTS => Some(vec![(list, attempt + 1)]),
        _ => None,
    }
}
