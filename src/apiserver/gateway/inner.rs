//! What every handle on the gateway shares: the client and runtime its
//! requests run on, the dispatcher's tickets and queue, the Events'
//! backlog, the namespaces lately answered gone, and the fence.

use super::dispatch::{SharedQueue, Ticket};
use super::event_budget::EventBudgets;
use super::event_recorder::EventRecorder;
use super::events::{Backlog, Queued};
use super::gone::GoneNamespaces;
use super::retry::Backoff;
use crate::apiserver::write_fence::WriteFence;
use crate::telemetry::Metrics;
use crate::telemetry::metrics::{DroppedLabels, Gone};
use crate::telemetry::trace_span::TraceSpan;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::Client;
use kube::runtime::events::Event as KubeEvent;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use tokio::runtime::Handle;
use tokio::sync::mpsc;

pub(super) struct Inner {
    pub(super) client: Client,
    pub(super) runtime: Handle,
    pub(super) tickets: mpsc::UnboundedSender<Ticket>,
    pub(super) backoff: Backoff,
    pub(super) recorder: EventRecorder,
    pub(super) metrics: Arc<Metrics>,
    pub(super) fence: Arc<dyn WriteFence>,
    pub(super) events: Arc<EventQueue>,
    /// 429s so far, for the dispatcher's adaptive rate.
    pub(super) throttled: Arc<AtomicU64>,
    /// The dispatcher's queue, to say where a CronJob's request stands.
    pub(super) queue: SharedQueue,
    /// Namespaces lately answered gone: nothing is sent there meanwhile.
    pub(super) gone: Mutex<GoneNamespaces>,
    /// Each CronJob's budget of Events (upstream's spam filter).
    pub(super) event_budgets: Mutex<EventBudgets>,
}

impl Inner {
    pub(super) fn gone(&self) -> std::sync::MutexGuard<'_, GoneNamespaces> {
        self.gone.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn event_budgets(&self) -> std::sync::MutexGuard<'_, EventBudgets> {
        self.event_budgets.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether `namespace` was lately answered gone (or terminating, for
    /// a create).
    pub(super) fn refuses(&self, namespace: &str, create: bool) -> bool {
        self.gone()
            .refuses(namespace, create, std::time::Instant::now())
    }

    /// Counts `count` things for something `gone` dropped unsent.
    pub(super) fn count_dropped(&self, what: &'static str, gone: Gone, count: usize) {
        if count > 0 {
            self.metrics
                .dropped_for_gone
                .get_or_create(&DroppedLabels { what, gone })
                .inc_by(count as u64);
        }
    }
}

/// An event waiting in the backlog.
pub(super) struct PendingEvent {
    /// The reason, as the metric of Events recorded labels it.
    pub(super) reason: &'static str,
    pub(super) namespace: String,
    pub(super) regarding: ObjectReference,
    pub(super) event: KubeEvent,
    pub(super) span: TraceSpan,
}

impl Queued for PendingEvent {
    fn kind(&self) -> &str {
        &self.event.reason
    }

    type Identity<'a> = (Option<&'a str>, &'a str, Option<&'a str>);
    fn identity(&self) -> Self::Identity<'_> {
        (
            self.regarding.uid.as_deref(),
            &self.event.reason,
            self.event.note.as_deref(),
        )
    }
}

/// The Events' backlog and the signal its workers wait on.
pub(super) struct EventQueue {
    backlog: Mutex<Backlog<PendingEvent>>,
    pub(super) ready: tokio::sync::Notify,
}

impl EventQueue {
    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, Backlog<PendingEvent>> {
        self.backlog.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn new() -> Self {
        EventQueue {
            backlog: Mutex::new(Backlog::new(super::events::BACKLOG)),
            ready: tokio::sync::Notify::new(),
        }
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Wakes the event workers so they see the gateway gone and end.
        self.events.ready.notify_waiters();
    }
}
