//! How long a request may take before it counts as failed, so that no
//! request can wait forever on a peer that went silent. Which gateway
//! request gets which is in the verbs' table
//! ([`crate::apiserver::requests::Verb::terms`]).
//!
//! A request past its deadline is dropped (its connection with it: an HTTP/1
//! connection with a request in flight is never reused; with `--api-http2`,
//! the gateway's one connection is given up by its PINGs sooner than a
//! write's deadline, [`crate::apiserver::client::PING_TIMEOUT`]) and reported as a
//! transport failure, which the gateway retries with backoff like a reset
//! connection. A write that timed out may still have been applied: its retry
//! then meets 409 AlreadyExists (a create: the Job's name is the slot's lock)
//! or 404 (a delete), which the decision already handles.
//!
//! The values leave kube-apiserver room to answer within its own limits:
//! a request waits at most about 15 s in an APF queue and is cut at 60 s
//! (`--request-timeout`), but a single object's read or write takes
//! milliseconds once served.

pub mod headers;

use std::future::Future;
use std::time::Duration;

/// A GET of one object (a Job for Replace or after AlreadyExists, the
/// CronJob after a conflict).
pub const GET: Duration = Duration::from_secs(15);
/// A create, delete, status patch or event.
pub const WRITE: Duration = Duration::from_secs(30);
/// One page (500 objects) of a rebalance's bulk load.
pub const LIST_PAGE: Duration = Duration::from_secs(60);

/// Every request's response headers, on the client itself: the one bound
/// that also covers the requests no caller times, above all a watch being
/// (re-)established. kube-apiserver answers a watch's headers at once and
/// a LIST page or a request held in an APF queue within about 15 s; a
/// request whose headers have not come by then is talking to a black hole.
/// (A watch's body is bounded by its own idle timeout, see
/// [`crate::apiserver::watch`]; a gateway request's whole exchange by the deadlines
/// above.) A load's whole LIST waits longer, [`LIST_PAGE`]
/// ([`headers`]): the server answers its headers only once
/// every item is gathered, converted and sized.
pub const RESPONSE_HEADERS: Duration = Duration::from_secs(30);

/// The request did not complete within its deadline.
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("no answer within {0:?}")]
pub struct Elapsed(pub Duration);

/// Runs `request`, giving up after `limit` (tokio's clock, so that tests on a
/// paused clock see the deadline pass at once).
pub async fn within<T>(limit: Duration, request: impl Future<Output = T>) -> Result<T, Elapsed> {
    tokio::time::timeout(limit, request)
        .await
        .map_err(|_| Elapsed(limit))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_are_shorter_than_writes_and_pages_longest() {
        assert!(GET < WRITE && WRITE < LIST_PAGE);
        assert!(RESPONSE_HEADERS <= WRITE);
    }

    #[tokio::test(start_paused = true)]
    async fn a_silent_request_fails_at_its_deadline() {
        let silent = std::future::pending::<()>();
        let started = tokio::time::Instant::now();
        let result = within(GET, silent).await;
        assert!(matches!(result, Err(Elapsed(limit)) if limit == GET));
        assert_eq!(started.elapsed(), GET);
    }
}
