//! A request's path through the gateway, one named stage each: admitted
//! ([`Gateway::admit`]), its turn ([`Gateway::turn`]: the dispatcher's fair
//! queue and token bucket), sent through the fence within its deadline
//! ([`Gateway::send_fenced`]), counted ([`Gateway::count`]), and a failure
//! judged ([`after_failure`], pure) before a retry
//! ([`Gateway::wait_to_retry`]).

use super::dispatch::Ticket;
use super::handle::{Gateway, OnStop};
use super::queue::Priority;
use super::retry::{AfterFailure, after_failure};
use crate::apiserver::deadline;
use crate::apiserver::failure::ApiFailure;
use crate::apiserver::requests::{Terms, Verb};
use crate::apiserver::write_fence::WriteFence;
use crate::telemetry::metrics::{Gone, PriorityLabels, RequestLabels};
use crate::telemetry::trace_span::TraceSpan;
use futures::FutureExt as _;
use futures::future::{self, Either};
use kube::Client;
use opentelemetry::KeyValue;
use std::future::Future;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::sync::oneshot;

/// One attempt of a request, for the stages after its turn.
#[derive(Clone, Copy)]
struct Attempt<'a> {
    terms: &'a Terms,
    namespace: &'a str,
    /// 1 for the first.
    number: u32,
    turn: &'a Turn,
}

/// A request's turn: how long it waited for its token, and how many
/// requests of its class were queued when it arrived (read when traced).
struct Turn {
    waited: Duration,
    queued_ahead: Option<i64>,
}

/// Resolves once `fence` no longer lets this replica write: sleeps until
/// its expiry as known now and looks again, as a renewal meanwhile moves
/// it.
async fn lapsed(fence: &dyn WriteFence) {
    while let Some(left) = fence.valid_for() {
        tokio::time::sleep(left).await;
    }
}

impl Gateway {
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
        let queued_ahead = (!TraceSpan::current().is_none())
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
            // Withdrawn likewise; a stop meanwhile is the branch above.
            () = self.replaced() => return Err(ApiFailure::GaveWay),
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

    /// One request, attempt after attempt, each through the same stages:
    /// admitted (not for a namespace lately gone), its turn waited for,
    /// sent through the fence within its deadline and counted; a failure is
    /// then judged by [`after_failure`] (retry after a backoff, remember a
    /// namespace going, or give up). `send` builds the request afresh for
    /// every attempt.
    pub(super) async fn request<T, F, Fut>(
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
            self.admit(namespace, verb.creates())?;
            let turn = self.turn(terms.priority, namespace).await?;
            let this = Attempt {
                terms: &terms,
                namespace,
                number: attempt,
                turn: &turn,
            };
            let failure = match self.send_fenced(this, &send).await {
                Ok(value) => return Ok(value),
                Err(failure) => failure,
            };
            match after_failure(&self.inner.backoff, &failure, namespace, attempt) {
                AfterFailure::Retry(delay) => {
                    tracing::debug!(verb = terms.label, namespace, attempt, error = %failure, ?delay, "retrying");
                    self.wait_to_retry(delay).await?;
                }
                AfterFailure::NamespaceGoing(going) => {
                    self.namespace_gone(namespace, going);
                    return Err(failure);
                }
                AfterFailure::GiveUp => return Err(failure),
            }
        }
    }

    /// The first stage: a request for a namespace lately answered gone (or
    /// terminating, for a create) fails unsent, counted.
    fn admit(&self, namespace: &str, creates: bool) -> Result<(), ApiFailure> {
        if self.inner.refuses(namespace, creates) {
            self.inner.count_dropped("request", Gone::namespace, 1);
            return Err(ApiFailure::namespace_gone(namespace));
        }
        Ok(())
    }

    /// The attempt, its turn granted: checked against the fence right
    /// before it is sent (the wait may have outlasted the Lease: a freeze, a
    /// cut from the API server), dropped the moment the fence lapses,
    /// bounded by its deadline, in a span of its own, and counted.
    async fn send_fenced<T, F, Fut>(&self, attempt: Attempt<'_>, send: &F) -> Result<T, ApiFailure>
    where
        T: Send + 'static,
        F: Fn(Client) -> Fut,
        Fut: Future<Output = Result<T, kube::Error>> + Send + 'static,
    {
        if !self.inner.fence.may_write() {
            return Err(ApiFailure::Fenced);
        }
        let terms = attempt.terms;
        // The request's own span: the client layer injects its context
        // (`traceparent`) into the HTTP request.
        let span = TraceSpan::client_child("kube.request", || {
            [
                KeyValue::new("k8s.verb", terms.label),
                KeyValue::new("k8s.namespace.name", attempt.namespace.to_owned()),
                KeyValue::new("attempt", i64::from(attempt.number)),
                KeyValue::new("gateway.priority", terms.priority.label()),
                KeyValue::new(
                    "gateway.queued_ahead",
                    attempt.turn.queued_ahead.unwrap_or_default(),
                ),
                KeyValue::new("gateway.wait_ms", attempt.turn.waited.as_millis() as i64),
            ]
        });
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
        // A task that did not finish: the runtime is shutting down.
        let Ok(raced) = self.inner.runtime.spawn(span.attach(raced)).await else {
            return Err(ApiFailure::Closed);
        };
        let result = raced
            .ok_or(ApiFailure::Fenced)
            .and_then(|answer| answer.map_err(|elapsed| ApiFailure::Transport(elapsed.to_string())))
            .and_then(|answer| answer.map_err(ApiFailure::from));
        self.count(terms, &result, &span);
        result
    }

    /// Counts an attempt by verb and code, and a 429 for the dispatcher's
    /// adaptive rate. The client records an answer's code on the span; an
    /// attempt with no answer gets its label here.
    fn count<T>(&self, terms: &Terms, result: &Result<T, ApiFailure>, span: &TraceSpan) {
        let code = match result {
            Ok(_) => terms.success.to_owned(),
            Err(failure) => failure.code_label(),
        };
        if let Err(failure) = result {
            if failure.code().is_none() {
                span.set("http.response.status_code", code.clone());
            }
            if failure.code() == Some(429) {
                self.inner.throttled.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.inner
            .metrics
            .api_requests
            .get_or_create(&RequestLabels {
                verb: terms.label,
                code,
            })
            .inc();
    }

    /// Sleeps `delay` before the next attempt; a sender that stops
    /// meanwhile abandons the request (one that hurries on stop waits on).
    async fn wait_to_retry(&self, delay: Duration) -> Result<(), ApiFailure> {
        tokio::select! {
            () = tokio::time::sleep(delay) => Ok(()),
            () = self.stopped(), if self.on_stop == OnStop::Abandon => Err(ApiFailure::Abandoned),
        }
    }
}
