//! A handle on the gateway: what its holder may do (send for one CronJob,
//! abandon or hurry its requests when it stops) and what it may ask (where
//! a request waits). Cheap to clone; the state is shared ([`Inner`]).

use super::inner::Inner;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Where a CronJob's request waits in the gateway (the admin API).
#[derive(Debug, Clone, PartialEq)]
pub struct QueuedRequest {
    /// Its class (`create_job`, `status`, ...: the metrics' `priority`).
    pub class: &'static str,
    /// Requests granted before it if nothing more urgent arrived.
    pub ahead: usize,
    /// The gateway's rate now (requests per second).
    pub rate: f64,
}

impl QueuedRequest {
    /// How long until its turn at the current rate.
    pub fn expected_wait(&self) -> Duration {
        // A rate so small that the wait overflows a Duration (a QPS of
        // 1e-300 is positive and finite) is told as the longest one.
        Duration::try_from_secs_f64((self.ahead as f64 + 1.0) / self.rate).unwrap_or(Duration::MAX)
    }
}

/// A handle on the gateway; cheap to clone, usable from any thread.
#[derive(Clone)]
pub struct Gateway {
    pub(super) inner: Arc<Inner>,
    /// Cancelled when the sender stops; what then becomes of its requests
    /// still waiting for their turn (or for a retry) is `on_stop`'s.
    pub(super) stop: Option<CancellationToken>,
    pub(super) on_stop: OnStop,
    /// Cancelled when a newer decision of its sender replaces its requests
    /// still waiting for their turn (`JobRequests::giving_way_to`).
    pub(super) give_way: Option<CancellationToken>,
    /// The CronJob whose decision sends through this handle, if any.
    pub(super) key: Option<Arc<str>>,
}

/// What a request still waiting when its sender stops does. One already
/// sent finishes either way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum OnStop {
    /// It is never sent (a CronJob handed over waits for nothing queued).
    Abandon,
    /// It moves to the most urgent class: it records a slot the key's
    /// next owner must see, and the hand-off waits for it.
    Hurry,
}

impl Gateway {
    /// A handle with no stop signal.
    pub(super) fn of(inner: Arc<Inner>) -> Gateway {
        Gateway {
            inner,
            stop: None,
            on_stop: OnStop::Abandon,
            give_way: None,
            key: None,
        }
    }

    /// This gateway for the decisions of the CronJob `key`: its requests
    /// can be found in the queue ([`Gateway::queued`]).
    pub fn for_key(&self, key: &str) -> Gateway {
        Gateway {
            key: Some(Arc::from(key)),
            ..self.clone()
        }
    }

    /// Where the request of CronJob `key` waits now, if one does (an
    /// actor sends one request at a time).
    pub fn queued(&self, key: &str) -> Option<QueuedRequest> {
        let place = self
            .inner
            .queue
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .place_of(|waiting| waiting.key.as_deref() == Some(key))?;
        Some(QueuedRequest {
            class: place.priority.label(),
            ahead: place.ahead,
            rate: self.inner.metrics.rate_limit.get(),
        })
    }

    /// What waits now, class by class ([`FairQueue::census`]), and the
    /// gateway's rate (requests per second).
    ///
    /// [`FairQueue::census`]: crate::apiserver::gateway::queue::FairQueue::census
    pub fn queues(&self) -> (f64, Vec<crate::apiserver::gateway::queue::ClassCensus>) {
        let census = self
            .inner
            .queue
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .census();
        (self.inner.metrics.rate_limit.get(), census)
    }

    /// This gateway for one sender that may stop: once `stop` is cancelled,
    /// its requests still waiting for their turn or for a retry are
    /// abandoned ([`ApiFailure::Abandoned`], never sent); a request already
    /// sent finishes. A CronJob handed to another replica so waits for at
    /// most the request in flight, not for its queue.
    pub fn abandoning_on(&self, stop: CancellationToken) -> Gateway {
        Gateway {
            stop: Some(stop),
            on_stop: OnStop::Abandon,
            ..self.clone()
        }
    }

    /// This gateway, its requests never abandoned: once its sender stops,
    /// those still waiting for their turn move to the most urgent class
    /// instead (see [`OnStop::Hurry`]).
    pub(super) fn hurrying_on_stop(&self) -> Gateway {
        Gateway {
            on_stop: OnStop::Hurry,
            ..self.clone()
        }
    }

    /// Resolves when a newer decision replaces this gateway's requests
    /// (never without a signal).
    pub(super) async fn replaced(&self) {
        match &self.give_way {
            Some(newer) => newer.cancelled().await,
            None => std::future::pending().await,
        }
    }

    /// Resolves when this gateway's sender stops (never without a signal).
    pub(super) async fn stopped(&self) {
        match &self.stop {
            Some(stop) => stop.cancelled().await,
            None => std::future::pending().await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::QueuedRequest;
    use std::time::Duration;

    #[test]
    fn the_expected_wait_is_the_requests_ahead_at_the_rate_and_never_panics() {
        let queued = |ahead, rate| QueuedRequest {
            class: "status",
            ahead,
            rate,
        };
        assert_eq!(queued(9, 20.0).expected_wait(), Duration::from_millis(500));
        for rate in [0.0, -1.0, 1e-300, f64::NAN] {
            assert_eq!(queued(usize::MAX, rate).expected_wait(), Duration::MAX);
        }
    }
}
