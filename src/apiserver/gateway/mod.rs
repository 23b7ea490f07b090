//! The write gateway: every request the actors make to the API server goes
//! through here.
//!
//! A request first waits for its turn: a dispatcher task (`dispatch`)
//! holds the fair queue (strict classes, round-robin across namespaces) and
//! the token bucket (`--kube-api-qps`, `--kube-api-burst`), and grants one
//! request per token. The request then runs as a task of the process's
//! tokio runtime (with `--threads 1`, the one thread every actor shares;
//! with more, apart from the actors' Arbiters), and a transient failure
//! (429, 5xx, no answer) is retried with bounded backoff, taking a new turn
//! each time. A 409 Conflict is returned to the caller, which re-reads and
//! re-decides: the gateway never overwrites blindly.
//!
//! Here: the request's path (turn, fence, deadline, retry, metrics).
//! `dispatch`: the turns. `verbs`: each request a decision makes, built
//! for [`JobRequests`](super::requests::JobRequests). `event_workers`: the
//! Events, sent from their backlog at the lowest class.

mod dispatch;
pub mod event_recorder;
mod event_workers;
pub mod events;
pub mod gone;
pub mod queue;
pub mod rate;
pub mod retry;
mod verbs;

use super::deadline;
use super::failure::ApiFailure;
use super::requests::Verb;
use super::write_fence::WriteFence;
use crate::telemetry::Metrics;
use crate::telemetry::metrics::{DroppedLabels, Gone, PriorityLabels, RequestLabels};
pub use dispatch::Limits;
use dispatch::{Pace, SharedQueue, Ticket, dispatch};
use event_recorder::EventRecorder;
use event_workers::{EventQueue, send_events};
use futures::FutureExt as _;
use futures::future::{self, Either};
use gone::{Going, GoneNamespaces};
use kube::Client;
use kube::runtime::events::Reporter;
use queue::Priority;
use retry::{Backoff, Retry};
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::runtime::Handle;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

/// A request's turn: how long it waited for its token, and how many
/// requests of its class were queued when it arrived (read when traced).
struct Turn {
    waited: Duration,
    queued_ahead: Option<i64>,
}

struct Inner {
    client: Client,
    runtime: Handle,
    tickets: mpsc::UnboundedSender<Ticket>,
    backoff: Backoff,
    recorder: EventRecorder,
    metrics: Arc<Metrics>,
    fence: Arc<dyn WriteFence>,
    events: Arc<EventQueue>,
    /// 429s so far, for the dispatcher's adaptive rate.
    throttled: Arc<AtomicU64>,
    /// The dispatcher's queue, to say where a CronJob's request stands.
    queue: SharedQueue,
    /// Namespaces lately answered gone: nothing is sent there meanwhile.
    gone: std::sync::Mutex<GoneNamespaces>,
}

impl Inner {
    fn gone(&self) -> std::sync::MutexGuard<'_, GoneNamespaces> {
        self.gone.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether `namespace` was lately answered gone (or terminating, for
    /// a create).
    fn refuses(&self, namespace: &str, create: bool) -> bool {
        self.gone()
            .refuses(namespace, create, std::time::Instant::now())
    }

    /// Counts `count` things for something `gone` dropped unsent.
    fn count_dropped(&self, what: &'static str, gone: Gone, count: usize) {
        if count > 0 {
            self.metrics
                .dropped_for_gone
                .get_or_create(&DroppedLabels { what, gone })
                .inc_by(count as u64);
        }
    }
}

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
        if self.rate > 0.0 {
            Duration::from_secs_f64((self.ahead as f64 + 1.0) / self.rate)
        } else {
            Duration::MAX
        }
    }
}

/// Resolves once `fence` no longer lets this replica write: sleeps until
/// its expiry as known now and looks again, as a renewal meanwhile moves
/// it.
async fn lapsed(fence: &dyn WriteFence) {
    while let Some(left) = fence.valid_for() {
        tokio::time::sleep(left).await;
    }
}

/// A handle on the gateway; cheap to clone, usable from any thread.
#[derive(Clone)]
pub struct Gateway {
    inner: Arc<Inner>,
    /// Cancelled when the sender stops; what then becomes of its requests
    /// still waiting for their turn (or for a retry) is `on_stop`'s.
    stop: Option<CancellationToken>,
    on_stop: OnStop,
    /// The CronJob whose decision sends through this handle, if any.
    key: Option<Arc<str>>,
}

/// What a request still waiting when its sender stops does. One already
/// sent finishes either way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OnStop {
    /// It is never sent (a CronJob handed over waits for nothing queued).
    Abandon,
    /// It moves to the most urgent class: it records a slot the key's
    /// next owner must see, and the hand-off waits for it.
    Hurry,
}

impl Gateway {
    /// Starts the dispatcher on the current tokio runtime, which also runs
    /// every request.
    pub fn start(
        client: Client,
        limits: Limits,
        reporter: Reporter,
        metrics: Arc<Metrics>,
        fence: Arc<dyn WriteFence>,
    ) -> Self {
        // The rate before the first request: the ceiling (`shardcron
        // queues` would otherwise say 0 for a replica that sent nothing).
        metrics.rate_limit.set(limits.qps);
        let (tickets, queued) = mpsc::unbounded_channel();
        let runtime = Handle::current();
        let throttled = Arc::new(AtomicU64::new(0));
        let queue = SharedQueue::default();
        runtime.spawn(dispatch(
            queued,
            Pace::new(limits, throttled.clone()),
            metrics.clone(),
            queue.clone(),
        ));
        let events = Arc::new(EventQueue::new());
        let inner = Arc::new(Inner {
            recorder: EventRecorder::new(client.clone(), reporter),
            client,
            runtime,
            tickets,
            backoff: Backoff::default(),
            metrics,
            fence,
            events: events.clone(),
            throttled,
            queue,
            gone: std::sync::Mutex::default(),
        });
        for _ in 0..events::WORKERS {
            inner
                .runtime
                .spawn(send_events(events.clone(), Arc::downgrade(&inner)));
        }
        Gateway::of(inner)
    }

    /// A handle with no stop signal.
    fn of(inner: Arc<Inner>) -> Gateway {
        Gateway {
            inner,
            stop: None,
            on_stop: OnStop::Abandon,
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
    fn hurrying_on_stop(&self) -> Gateway {
        Gateway {
            on_stop: OnStop::Hurry,
            ..self.clone()
        }
    }

    /// Resolves when this gateway's sender stops (never without a signal).
    async fn stopped(&self) {
        match &self.stop {
            Some(stop) => stop.cancelled().await,
            None => std::future::pending().await,
        }
    }

    /// Queues a ticket for a turn; the receiver fires on its grant, and
    /// dropping it withdraws the ticket (the dispatcher skips it without
    /// spending a token).
    fn ticket(
        &self,
        priority: Priority,
        namespace: &str,
    ) -> Result<oneshot::Receiver<()>, ApiFailure> {
        let (grant, granted) = oneshot::channel();
        self.inner
            .tickets
            .send(Ticket {
                priority,
                namespace: namespace.to_owned(),
                grant,
                key: self.key.clone(),
            })
            .map_err(|_| ApiFailure::Closed)?;
        Ok(granted)
    }

    /// Waits for this request's turn. The wait is no span of its own but
    /// attributes of the request's span (half the spans per firing, for
    /// tracing's cost).
    async fn turn(&self, priority: Priority, namespace: &str) -> Result<Turn, ApiFailure> {
        let queued_at = tokio::time::Instant::now();
        let labels = PriorityLabels {
            priority: priority.label(),
        };
        // Read only where it is recorded: on a traced decision's request.
        let queued_ahead = (!tracing::Span::current().is_none())
            .then(|| self.inner.metrics.queue_depth.get_or_create(&labels).get());
        let granted = self.ticket(priority, namespace)?;
        let granted = tokio::select! {
            biased;
            granted = granted => granted,
            () = self.stopped() => match self.on_stop {
                OnStop::Abandon => return Err(ApiFailure::Abandoned),
                // The first ticket is withdrawn as its receiver is dropped.
                OnStop::Hurry => self.ticket(Priority::RecordSlot, namespace)?.await,
            },
        };
        granted.map_err(|_| ApiFailure::Closed)?;
        let waited = queued_at.elapsed();
        self.inner
            .metrics
            .queue_wait
            .get_or_create(&labels)
            .observe(waited.as_secs_f64());
        Ok(Turn {
            waited,
            queued_ahead,
        })
    }

    /// One request, with its turns and retries. `send` builds the request
    /// afresh for every attempt.
    async fn request<T, F, Fut>(
        &self,
        verb: Verb,
        namespace: &str,
        send: F,
    ) -> Result<T, ApiFailure>
    where
        T: Send + 'static,
        F: Fn(Client) -> Fut,
        Fut: Future<Output = Result<T, kube::Error>> + Send + 'static,
    {
        let terms = verb.terms();
        let mut attempt = 0;
        loop {
            attempt += 1;
            if self.inner.refuses(namespace, verb.creates()) {
                self.inner.count_dropped("request", Gone::namespace, 1);
                return Err(ApiFailure::namespace_gone(namespace));
            }
            let turn = self.turn(terms.priority, namespace).await?;
            // Checked after the wait, right before sending: the wait may
            // have outlasted the Lease (a freeze, a cut from the API server).
            if !self.inner.fence.may_write() {
                return Err(ApiFailure::Fenced);
            }
            // The request's own span: the client layer injects its context
            // (`traceparent`) into the HTTP request.
            let span = crate::child_span!(
                "kube.request",
                otel.kind = "client",
                k8s.verb = terms.label,
                k8s.namespace.name = namespace,
                attempt,
                gateway.priority = terms.priority.label(),
                gateway.queued_ahead = turn.queued_ahead,
                gateway.wait_ms = turn.waited.as_millis() as u64,
                http.response.status_code = tracing::field::Empty,
            );
            // The request may still be waiting in the client (for a
            // connection, say, through a silent network) when the fence
            // lapses, and be sent when the network heals, after a peer
            // took the CronJob over: a create then makes a second Job for
            // a slot whose first Job is already gone. So it is dropped,
            // unsent or unanswered, the moment the fence lapses. The
            // fence is asked first at every poll: a process frozen
            // (SIGSTOP, a paused VM) between the check above and the
            // request's first poll wakes with the fence lapsed, and must
            // not hand the request to the client then (the churn test
            // found two slots run twice by a replica frozen at the slot).
            let fence = self.inner.fence.clone();
            let lapse = Box::pin(async move { lapsed(&*fence).await });
            // Boxed, and raced by a combinator rather than in an `async`
            // block that would hold it twice: the request's future is about
            // 7 KB, and the task's cell was 14 KB, allocated and copied for
            // every request (loadtest/report/HISTORY.md, "Smaller futures").
            let answer = Box::pin(deadline::within(
                terms.deadline,
                send(self.inner.client.clone()),
            ));
            let raced = future::select(lapse, answer).map(|first| match first {
                Either::Left(((), _)) => None,
                Either::Right((answer, _)) => Some(answer),
            });
            let result = self
                .inner
                .runtime
                .spawn(raced.instrument(span.clone()))
                .await
                .map_err(|e| ApiFailure::Transport(format!("request task failed: {e}")))?
                .ok_or(ApiFailure::Fenced)
                .and_then(|answer| {
                    answer.map_err(|elapsed| ApiFailure::Transport(elapsed.to_string()))
                })
                .and_then(|answer| answer.map_err(ApiFailure::from));
            // The client records the answer's code on the span; a request
            // with no answer has none.
            let code = match &result {
                Ok(_) => terms.success.to_owned(),
                Err(failure) => failure.code_label(),
            };
            if result
                .as_ref()
                .is_err_and(|failure| failure.code().is_none())
            {
                span.record("http.response.status_code", code.as_str());
            }
            self.inner
                .metrics
                .api_requests
                .get_or_create(&RequestLabels {
                    verb: terms.label,
                    code,
                })
                .inc();
            let failure = match result {
                Ok(value) => return Ok(value),
                Err(failure) => failure,
            };
            if matches!(failure, ApiFailure::Fenced) {
                return Err(failure);
            }
            if failure.is_namespace_gone() && !namespace.is_empty() {
                let going = if failure.is_namespace_terminating() {
                    Going::Terminating
                } else {
                    Going::Gone
                };
                self.namespace_gone(namespace, going);
                return Err(failure);
            }
            if failure.code() == Some(429) {
                self.inner.throttled.fetch_add(1, Ordering::Relaxed);
            }
            match self.inner.backoff.after_failure(attempt, failure.code()) {
                Retry::After(delay) => {
                    tracing::debug!(verb = terms.label, namespace, attempt, error = %failure, ?delay, "retrying");
                    tokio::select! {
                        () = tokio::time::sleep(delay) => {}
                        () = self.stopped(), if self.on_stop == OnStop::Abandon => {
                            return Err(ApiFailure::Abandoned);
                        }
                    }
                }
                Retry::Reread | Retry::GiveUp => return Err(failure),
            }
        }
    }
}

#[cfg(test)]
mod tests;
