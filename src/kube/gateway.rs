//! The write gateway: every request the actors make to the API server goes
//! through here.
//!
//! A request first waits for its turn: a dispatcher task holds the
//! [`FairQueue`] (strict classes, round-robin across namespaces) and the
//! [`TokenBucket`] (`--kube-api-qps`, `--kube-api-burst`), and grants one
//! request per token. The request then runs on the process's multi-threaded
//! runtime (not on the actor's Arbiter thread), and a transient failure
//! (429, 5xx, no answer) is retried with bounded backoff, taking a new turn
//! each time. A 409 Conflict is returned to the caller, which re-reads and
//! re-decides: the gateway never overwrites blindly.

use super::deadline;
use super::events::{self, Backlog, Pushed, Queued};
use super::failure::ApiFailure;
use super::queue::{FairQueue, Priority};
use super::rate::{AdaptiveRate, TokenBucket};
use super::requests::{DeleteFor, JobRequests, Verb};
use super::retry::{Backoff, Retry};
use crate::reconcile;
use crate::telemetry::Metrics;
use crate::telemetry::metrics::{PriorityLabels, RequestLabels};
use ::kube::Client;
use ::kube::api::{
    Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions, PropagationPolicy,
};
use ::kube::runtime::events::{Event as KubeEvent, EventType as KubeEventType, Recorder, Reporter};
use k8s_openapi::api::batch::v1::{CronJob, CronJobStatus, Job};
use k8s_openapi::api::core::v1::ObjectReference;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};
use tokio::runtime::Handle;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

/// Client-side limits, as kube-controller-manager's `--kube-api-qps` and
/// `--kube-api-burst`.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub qps: f64,
    pub burst: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            qps: 20.0,
            burst: 30,
        }
    }
}

/// A request waiting for its turn.
struct Ticket {
    priority: Priority,
    namespace: String,
    grant: oneshot::Sender<()>,
}

struct Inner {
    client: Client,
    runtime: Handle,
    tickets: mpsc::UnboundedSender<Ticket>,
    backoff: Backoff,
    recorder: Recorder,
    metrics: Arc<Metrics>,
    fence: Arc<dyn WriteFence>,
    events: Arc<EventQueue>,
    /// 429s so far, for the dispatcher's [`AdaptiveRate`].
    throttled: Arc<AtomicU64>,
}

/// Whether this replica may write now. The shard layer's fence answers
/// (`shard::fence::SharedFence`); the gateway asks before every request.
pub trait WriteFence: Send + Sync + 'static {
    fn may_write(&self) -> bool;
}

/// A handle on the gateway; cheap to clone, usable from any thread.
#[derive(Clone)]
pub struct Gateway {
    inner: Arc<Inner>,
    /// Once cancelled, requests still waiting for their turn (or for a
    /// retry) are abandoned; one already sent finishes.
    stop: Option<CancellationToken>,
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
        let (tickets, queued) = mpsc::unbounded_channel();
        let runtime = Handle::current();
        let throttled = Arc::new(AtomicU64::new(0));
        runtime.spawn(dispatch(
            queued,
            Pace::new(limits, throttled.clone()),
            metrics.clone(),
        ));
        let events = Arc::new(EventQueue {
            backlog: Mutex::new(Backlog::new(events::BACKLOG)),
            ready: tokio::sync::Notify::new(),
        });
        let inner = Arc::new(Inner {
            recorder: Recorder::new(client.clone(), reporter),
            client,
            runtime,
            tickets,
            backoff: Backoff::default(),
            metrics,
            fence,
            events: events.clone(),
            throttled,
        });
        for _ in 0..events::WORKERS {
            inner
                .runtime
                .spawn(send_events(events.clone(), Arc::downgrade(&inner)));
        }
        Gateway { inner, stop: None }
    }

    /// This gateway for one sender that may stop: once `stop` is cancelled,
    /// its requests still waiting for their turn or for a retry are
    /// abandoned ([`ApiFailure::Abandoned`], never sent); a request already
    /// sent finishes. A CronJob handed to another replica so waits for at
    /// most the request in flight, not for its queue.
    pub fn abandoning_on(&self, stop: CancellationToken) -> Gateway {
        Gateway {
            inner: self.inner.clone(),
            stop: Some(stop),
        }
    }

    /// Resolves when this gateway's sender stops (never without a signal).
    async fn stopped(&self) {
        match &self.stop {
            Some(stop) => stop.cancelled().await,
            None => std::future::pending().await,
        }
    }

    /// Waits for this request's turn; returns how long it waited.
    async fn turn(&self, priority: Priority, namespace: &str) -> Result<Duration, ApiFailure> {
        let queued_at = tokio::time::Instant::now();
        let labels = PriorityLabels {
            priority: priority.label(),
        };
        let span = crate::child_span!(
            "gateway.wait",
            gateway.priority = priority.label(),
            k8s.namespace.name = namespace,
            gateway.queued_ahead = self.inner.metrics.queue_depth.get_or_create(&labels).get(),
        );
        let (grant, granted) = oneshot::channel();
        self.inner
            .tickets
            .send(Ticket {
                priority,
                namespace: namespace.to_owned(),
                grant,
            })
            .map_err(|_| ApiFailure::Closed)?;
        // Dropping `granted` withdraws the ticket: the dispatcher skips it
        // without spending a token.
        tokio::select! {
            biased;
            granted = granted.instrument(span) => granted.map_err(|_| ApiFailure::Closed)?,
            () = self.stopped() => return Err(ApiFailure::Abandoned),
        }
        let waited = queued_at.elapsed();
        self.inner
            .metrics
            .queue_wait
            .get_or_create(&labels)
            .observe(waited.as_secs_f64());
        Ok(waited)
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
        Fut: Future<Output = Result<T, ::kube::Error>> + Send + 'static,
    {
        let terms = verb.terms();
        let mut attempt = 0;
        loop {
            attempt += 1;
            self.turn(terms.priority, namespace).await?;
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
                http.response.status_code = tracing::field::Empty,
            );
            let result = self
                .inner
                .runtime
                .spawn(
                    deadline::within(terms.deadline, send(self.inner.client.clone()))
                        .instrument(span.clone()),
                )
                .await
                .map_err(|e| ApiFailure::Transport(format!("request task failed: {e}")))?
                .map_err(|elapsed| ApiFailure::Transport(elapsed.to_string()))
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
            if failure.code() == Some(429) {
                self.inner.throttled.fetch_add(1, Ordering::Relaxed);
            }
            match self.inner.backoff.after_failure(attempt, failure.code()) {
                Retry::After(delay) => {
                    tracing::debug!(verb = terms.label, namespace, attempt, error = %failure, ?delay, "retrying");
                    tokio::select! {
                        () = tokio::time::sleep(delay) => {}
                        () = self.stopped() => return Err(ApiFailure::Abandoned),
                    }
                }
                Retry::Reread | Retry::GiveUp => return Err(failure),
            }
        }
    }

    /// Sends one event; logs a failure.
    async fn send_event(&self, pending: PendingEvent) {
        let PendingEvent {
            namespace,
            regarding,
            event,
            span,
        } = pending;
        let recorder = self.inner.recorder.clone();
        let (event, regarding) = (Arc::new(event), Arc::new(regarding));
        let result = self
            .request(Verb::Event, &namespace, |_| {
                let recorder = recorder.clone();
                let event = event.clone();
                let regarding = regarding.clone();
                async move { recorder.publish(&event, &regarding).await }
            })
            .instrument(span)
            .await;
        if let Err(error) = result {
            tracing::warn!(%namespace, reason = %event.reason, %error, "could not record event");
        }
    }
}

/// An event waiting in the backlog.
struct PendingEvent {
    namespace: String,
    regarding: ObjectReference,
    event: KubeEvent,
    span: tracing::Span,
}

impl Queued for PendingEvent {
    fn kind(&self) -> &str {
        &self.event.reason
    }

    fn same_as(&self, other: &Self) -> bool {
        self.regarding.uid == other.regarding.uid
            && self.event.reason == other.event.reason
            && self.event.note == other.event.note
    }
}

/// The backlog and the signal its workers wait on.
struct EventQueue {
    backlog: Mutex<Backlog<PendingEvent>>,
    ready: tokio::sync::Notify,
}

impl EventQueue {
    fn lock(&self) -> std::sync::MutexGuard<'_, Backlog<PendingEvent>> {
        self.backlog.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl JobRequests for Gateway {
    async fn create_job(&self, namespace: &str, job: Job) -> Result<Job, ApiFailure> {
        let job = Arc::new(job);
        self.request(Verb::CreateJob, namespace, |client| {
            let api = Api::<Job>::namespaced(client, namespace);
            let job = job.clone();
            async move { api.create(&PostParams::default(), &job).await }
        })
        .await
    }

    /// Deletes a Job with background propagation (upstream's policy), only
    /// if it is still the object with `uid` (a precondition: a namesake
    /// created since is left alone, with 409 Conflict).
    async fn delete_job(
        &self,
        namespace: &str,
        name: &str,
        uid: &str,
        why: DeleteFor,
    ) -> Result<(), ApiFailure> {
        self.request(why.verb(), namespace, |client| {
            let api = Api::<Job>::namespaced(client, namespace);
            let name = name.to_owned();
            let preconditions = (!uid.is_empty()).then(|| Preconditions {
                uid: Some(uid.to_owned()),
                resource_version: None,
            });
            async move {
                let params = DeleteParams {
                    propagation_policy: Some(PropagationPolicy::Background),
                    preconditions,
                    ..DeleteParams::default()
                };
                api.delete(&name, &params).await.map(|_| ())
            }
        })
        .await
    }

    async fn get_job(&self, namespace: &str, name: &str) -> Result<Job, ApiFailure> {
        self.request(Verb::GetJob, namespace, |client| {
            let api = Api::<Job>::namespaced(client, namespace);
            let name = name.to_owned();
            async move { api.get(&name).await }
        })
        .await
    }

    async fn get_cronjob(&self, namespace: &str, name: &str) -> Result<CronJob, ApiFailure> {
        self.request(Verb::GetCronJob, namespace, |client| {
            let api = Api::<CronJob>::namespaced(client, namespace);
            let name = name.to_owned();
            async move { api.get(&name).await }
        })
        .await
    }

    /// Writes the whole controller-owned status through the status
    /// subresource, as upstream's `UpdateStatus` does, with the
    /// resourceVersion as precondition: a concurrent change gives 409
    /// Conflict rather than being overwritten.
    async fn write_status(
        &self,
        namespace: &str,
        name: &str,
        resource_version: Option<&str>,
        status: &CronJobStatus,
    ) -> Result<CronJob, ApiFailure> {
        let patch = Arc::new(status_patch(resource_version, status));
        self.request(Verb::WriteStatus, namespace, |client| {
            let api = Api::<CronJob>::namespaced(client, namespace);
            let name = name.to_owned();
            let patch = patch.clone();
            async move {
                api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&*patch))
                    .await
            }
        })
        .await
    }

    /// Records an Event on a CronJob, without making the caller wait: the
    /// event joins the bounded backlog ([`super::events`]), whose workers
    /// send it at the lowest class; a failure is logged, not returned.
    fn record(&self, regarding: ObjectReference, event: &reconcile::Event) {
        let pending = PendingEvent {
            namespace: regarding.namespace.clone().unwrap_or_default(),
            regarding,
            event: KubeEvent {
                type_: match event.event_type {
                    reconcile::EventType::Normal => KubeEventType::Normal,
                    reconcile::EventType::Warning => KubeEventType::Warning,
                },
                reason: event.reason.as_str().to_owned(),
                note: Some(event.message.clone()),
                action: event.reason.as_str().to_owned(),
                secondary: None,
            },
            // In the decision's trace: recording the event is part of what it did.
            span: tracing::Span::current(),
        };
        let pushed = self.inner.events.lock().push(pending);
        match pushed {
            Pushed::Queued => {}
            Pushed::Duplicate | Pushed::QueuedDroppingOldest => {
                self.inner.metrics.events_dropped.inc();
            }
        }
        if pushed != Pushed::Duplicate {
            self.inner.events.ready.notify_one();
        }
    }

    /// Without its stop signal: for the one write that must go out even
    /// when its sender stops.
    fn unabandoned(&self) -> Gateway {
        Gateway {
            inner: self.inner.clone(),
            stop: None,
        }
    }
}

/// Sends the backlog's events one at a time, until the gateway is gone.
async fn send_events(queue: Arc<EventQueue>, gateway: Weak<Inner>) {
    loop {
        let ready = queue.ready.notified();
        let next = queue.lock().pop();
        match next {
            Some(pending) => {
                let Some(inner) = gateway.upgrade() else {
                    return;
                };
                Gateway { inner, stop: None }.send_event(pending).await;
            }
            None if gateway.strong_count() == 0 => return,
            None => ready.await,
        }
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Wakes the event workers so they see the gateway gone and end.
        self.events.ready.notify_waiters();
    }
}

/// A merge patch that sets all three status fields (absent ones as `null`,
/// so they are cleared) with the resourceVersion as a precondition.
pub fn status_patch(resource_version: Option<&str>, status: &CronJobStatus) -> serde_json::Value {
    serde_json::json!({
        "metadata": { "resourceVersion": resource_version },
        "status": {
            "active": status.active,
            "lastScheduleTime": status.last_schedule_time,
            "lastSuccessfulTime": status.last_successful_time,
        }
    })
}

/// After an idle spell, the dispatcher gathers tickets before it spends the
/// refilled burst, and stops at the first of: no ticket for [`GATHER_IDLE`];
/// no new namespace for [`GATHER_SETTLE`]; [`GATHER_MAX`] after the first.
///
/// Why: a herd's actors all wake at the same second, but they reach the
/// gateway one after another, over half a second for 5,000 of them on 2
/// cores. Granted at once, the burst (30 by default) goes to whichever
/// namespace's actors happened to come first, and a tenant with one CronJob
/// waits behind it; gathered first, the round-robin shares the burst among
/// every namespace due at that instant. Gathering is only worth its delay
/// while new namespaces keep arriving, hence the settle rule: a lone write
/// waits 5 ms, a one-namespace herd 25 ms, a many-tenant herd up to 250 ms.
const GATHER_IDLE: Duration = Duration::from_millis(5);
const GATHER_SETTLE: Duration = Duration::from_millis(25);
const GATHER_MAX: Duration = Duration::from_millis(250);

/// When a gather that started at `first` ends, given the last ticket and the
/// last ticket that opened a namespace's line.
fn gather_deadline(
    first: tokio::time::Instant,
    last_ticket: tokio::time::Instant,
    last_new_namespace: tokio::time::Instant,
) -> tokio::time::Instant {
    (first + GATHER_MAX)
        .min(last_ticket + GATHER_IDLE)
        .min(last_new_namespace + GATHER_SETTLE)
}

/// The dispatcher's pace: the token bucket, refilled at the adaptive rate,
/// which learns of 429s through a counter the requests bump.
struct Pace {
    bucket: TokenBucket,
    rate: AdaptiveRate,
    throttled: Arc<AtomicU64>,
    seen: u64,
}

impl Pace {
    fn new(limits: Limits, throttled: Arc<AtomicU64>) -> Self {
        let now = tokio::time::Instant::now().into_std();
        Pace {
            bucket: TokenBucket::new(limits.qps, limits.burst, now),
            rate: AdaptiveRate::new(limits.qps),
            throttled,
            seen: 0,
        }
    }

    /// A token at `now`, or how long until one.
    fn try_take(&mut self, now: Instant, metrics: &Metrics) -> Result<(), Duration> {
        let throttled = self.throttled.load(Ordering::Relaxed);
        if throttled != self.seen {
            self.seen = throttled;
            self.rate.throttled(now);
        }
        let qps = self.rate.qps(now);
        self.bucket.set_qps(qps, now);
        metrics.rate_limit.set(qps);
        self.bucket.try_take(now)
    }
}

/// Grants turns: the most urgent class first, namespaces in turn, one per
/// token. A ticket whose requester went away is skipped without a token.
async fn dispatch(
    mut incoming: mpsc::UnboundedReceiver<Ticket>,
    mut pace: Pace,
    metrics: Arc<Metrics>,
) {
    let mut queue: FairQueue<oneshot::Sender<()>> = FairQueue::default();
    let mut open = true;
    // Whether the ticket opened its namespace's line in its class.
    let enqueue = |queue: &mut FairQueue<_>, ticket: Ticket| {
        queue
            .push(ticket.priority, &ticket.namespace, ticket.grant)
            .in_namespace
            == 1
    };
    loop {
        if queue.is_empty() {
            if !open {
                return;
            }
            match incoming.recv().await {
                Some(ticket) => enqueue(&mut queue, ticket),
                None => return,
            };
            let first = tokio::time::Instant::now();
            let (mut last_ticket, mut last_new_namespace) = (first, first);
            loop {
                let until = gather_deadline(first, last_ticket, last_new_namespace);
                match tokio::time::timeout_at(until, incoming.recv()).await {
                    Ok(Some(ticket)) => {
                        last_ticket = tokio::time::Instant::now();
                        if enqueue(&mut queue, ticket) {
                            last_new_namespace = last_ticket;
                        }
                    }
                    Ok(None) => {
                        open = false;
                        break;
                    }
                    Err(_elapsed) => break,
                }
            }
        }
        while let Ok(ticket) = incoming.try_recv() {
            enqueue(&mut queue, ticket);
        }
        for priority in Priority::ALL {
            metrics
                .queue_depth
                .get_or_create(&PriorityLabels {
                    priority: priority.label(),
                })
                .set(queue.depth(priority) as i64);
        }
        // tokio's clock, so that tests can pause it.
        match pace.try_take(tokio::time::Instant::now().into_std(), &metrics) {
            Ok(()) => {
                while let Some((_, _, grant)) = queue.pop() {
                    if grant.send(()).is_ok() {
                        break;
                    }
                }
            }
            Err(wait) => {
                tokio::select! {
                    _ = tokio::time::sleep(wait) => {}
                    ticket = incoming.recv(), if open => match ticket {
                        Some(ticket) => {
                            enqueue(&mut queue, ticket);
                        }
                        None => open = false,
                    },
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Queues one ticket as an actor would; the receiver fires on its grant.
    fn ticket(tickets: &mpsc::UnboundedSender<Ticket>, namespace: &str) -> oneshot::Receiver<()> {
        let (grant, granted) = oneshot::channel();
        tickets
            .send(Ticket {
                priority: Priority::CreateJob,
                namespace: namespace.to_owned(),
                grant,
            })
            .expect("the dispatcher is running");
        granted
    }

    /// A burst of 4 and almost no refill: whoever is granted within the
    /// test got one of the burst's tokens.
    fn start_dispatcher() -> mpsc::UnboundedSender<Ticket> {
        let (tickets, queued) = mpsc::unbounded_channel();
        let limits = Limits {
            qps: 0.001,
            burst: 4,
        };
        let pace = Pace::new(limits, Arc::new(AtomicU64::new(0)));
        tokio::spawn(dispatch(queued, pace, Arc::new(Metrics::new())));
        tickets
    }

    #[tokio::test(start_paused = true)]
    async fn a_429_halves_the_pace_of_grants_until_the_rate_climbs_back() {
        let (tickets, queued) = mpsc::unbounded_channel();
        let throttled = Arc::new(AtomicU64::new(0));
        let limits = Limits {
            qps: 10.0,
            burst: 1,
        };
        let metrics = Arc::new(Metrics::new());
        let pace = Pace::new(limits, throttled.clone());
        tokio::spawn(dispatch(queued, pace, metrics.clone()));
        // Ten grants in a row, one every 100 ms at 10 qps.
        let granted_in = |count: usize| {
            let tickets = tickets.clone();
            async move {
                let started = tokio::time::Instant::now();
                let grants: Vec<_> = (0..count).map(|_| ticket(&tickets, "ns")).collect();
                for grant in grants {
                    grant.await.expect("granted");
                }
                started.elapsed()
            }
        };
        granted_in(1).await; // the burst's token
        let full = granted_in(10).await;
        throttled.fetch_add(1, Ordering::Relaxed);
        let halved = granted_in(10).await;
        assert!(
            halved.as_secs_f64() > 1.6 * full.as_secs_f64(),
            "{halved:?} against {full:?}"
        );
        assert!(metrics.rate_limit.get() < 10.0);
        tokio::time::sleep(AdaptiveRate::RECOVERY).await;
        let recovered = granted_in(10).await;
        assert!(recovered.as_secs_f64() < 1.1 * full.as_secs_f64());
        assert_eq!(metrics.rate_limit.get(), 10.0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_tenant_that_wakes_a_moment_later_shares_the_burst() {
        let tickets = start_dispatcher();
        let mut big: Vec<_> = (0..10).map(|_| ticket(&tickets, "big")).collect();
        // The small tenant's actor reaches the gateway 2 ms after the herd.
        tokio::time::sleep(Duration::from_millis(2)).await;
        let mut small = ticket(&tickets, "small");
        tokio::time::sleep(Duration::from_millis(100)).await;

        assert_eq!(
            small.try_recv(),
            Ok(()),
            "the small tenant waits behind the burst"
        );
        let big_granted = big.iter_mut().filter_map(|g| g.try_recv().ok()).count();
        assert_eq!(big_granted, 3, "the rest of the burst goes to the herd");
    }

    #[tokio::test(start_paused = true)]
    async fn an_abandoned_ticket_costs_no_token() {
        let tickets = start_dispatcher();
        // Ten tickets of a stopping actor, abandoned while queued, then
        // four of another: the burst of 4 goes to the four.
        let abandoned: Vec<_> = (0..10).map(|_| ticket(&tickets, "moved")).collect();
        drop(abandoned);
        let mut kept: Vec<_> = (0..4).map(|_| ticket(&tickets, "staying")).collect();
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(kept.iter_mut().all(|g| g.try_recv() == Ok(())));
    }

    #[tokio::test(start_paused = true)]
    async fn a_lone_write_waits_only_for_the_idle_gap() {
        let tickets = start_dispatcher();
        let started = tokio::time::Instant::now();
        ticket(&tickets, "a").await.expect("granted");
        assert_eq!(started.elapsed(), GATHER_IDLE);
    }

    /// Queues a ticket for `namespace(i)` every 4 ms (inside the idle gap)
    /// for 400 ms, as a herd's actors reaching the gateway one by one.
    fn trickle(
        tickets: &mpsc::UnboundedSender<Ticket>,
        namespace: impl Fn(usize) -> String + Send + 'static,
    ) -> tokio::task::JoinHandle<Vec<oneshot::Receiver<()>>> {
        let tickets = tickets.clone();
        tokio::spawn(async move {
            let mut later = Vec::new();
            for i in 0..100 {
                tokio::time::sleep(Duration::from_millis(4)).await;
                later.push(ticket(&tickets, &namespace(i)));
            }
            later
        })
    }

    #[tokio::test(start_paused = true)]
    async fn a_one_namespace_herd_is_gathered_until_no_new_namespace_comes() {
        let tickets = start_dispatcher();
        let started = tokio::time::Instant::now();
        let first = ticket(&tickets, "big");
        let feeder = trickle(&tickets, |_| "big".to_owned());
        first.await.expect("granted");
        assert_eq!(started.elapsed(), GATHER_SETTLE);
        feeder.abort();
    }

    #[tokio::test(start_paused = true)]
    async fn new_namespaces_arriving_steadily_are_gathered_for_at_most_the_limit() {
        let tickets = start_dispatcher();
        let started = tokio::time::Instant::now();
        let first = ticket(&tickets, "a");
        let feeder = trickle(&tickets, |i| format!("tenant-{i}"));
        first.await.expect("granted");
        assert_eq!(started.elapsed(), GATHER_MAX);
        feeder.abort();
    }

    /// S5's shape: the big tenant's actors keep arriving, and one-CronJob
    /// tenants turn up among them, 20 ms apart, for longer than a fixed
    /// 50 ms gather would have waited.
    #[tokio::test(start_paused = true)]
    async fn tenants_arriving_among_a_herd_share_the_burst() {
        let tickets = start_dispatcher();
        let first = ticket(&tickets, "big");
        let feeder = trickle(&tickets, |_| "big".to_owned());
        let mut small = Vec::new();
        for tenant in 0..3 {
            tokio::time::sleep(Duration::from_millis(20)).await;
            small.push(ticket(&tickets, &format!("small-{tenant}")));
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        for (tenant, granted) in small.iter_mut().enumerate() {
            assert_eq!(
                granted.try_recv(),
                Ok(()),
                "small-{tenant} waits behind the herd"
            );
        }
        drop(first);
        feeder.abort();
    }
}
