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
//! The parts: [`handle`] (the `Gateway` a holder clones: for one CronJob,
//! abandoning or hurrying its requests when it stops), `request` (a
//! request's path as named stages: admitted, its turn, sent through the
//! fence within its deadline, counted, a failure judged by [`retry`]),
//! `dispatch` (the turns: [`queue`] and [`rate`]), `verbs` (each request a
//! decision makes, for [`JobRequests`](super::requests::JobRequests)),
//! `event_workers` (the Events, within each object's budget,
//! [`event_budget`], sent from their backlog, [`events`], at the lowest
//! class, by [`event_recorder`]), [`gone`] (namespaces lately gone),
//! and `inner` (the state every handle shares).

mod dispatch;
pub mod event_budget;
pub mod event_recorder;
mod event_workers;
pub mod events;
pub mod gone;
mod handle;
mod inner;
pub mod queue;
pub mod rate;
mod recent;
mod request;
pub mod retry;
mod verbs;

use super::write_fence::WriteFence;
use crate::telemetry::Metrics;
pub use dispatch::Limits;
use dispatch::{Pace, SharedQueue, dispatch};
use event_budget::EventBudgets;
use event_recorder::EventRecorder;
use event_workers::send_events;
pub use handle::{Gateway, QueuedRequest};
use inner::{EventQueue, Inner};
use kube::Client;
use kube::runtime::events::Reporter;
use retry::Backoff;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use tokio::runtime::Handle;
use tokio::sync::mpsc;

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
            event_budgets: std::sync::Mutex::new(EventBudgets::new(event_budget::CAPACITY)),
        });
        for _ in 0..events::WORKERS {
            inner
                .runtime
                .spawn(send_events(events.clone(), Arc::downgrade(&inner)));
        }
        Gateway::of(inner)
    }
}

#[cfg(test)]
mod tests;
