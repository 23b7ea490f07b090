//! The workers that send the recorded Events: each takes the next from
//! the bounded backlog ([`crate::apiserver::gateway::events`]) and sends it through the
//! gateway at the lowest class, until the gateway is gone.

use super::event_budget::BudgetKey;
use super::events::Pushed;
use super::gone::Going;
use super::handle::Gateway;
use super::inner::{EventQueue, Inner, PendingEvent};
use crate::apiserver::requests::Verb;
use crate::clock::Clock;
use crate::reconcile;
use crate::telemetry::metrics::{Gone, ReasonLabels};
use crate::telemetry::trace_span::TraceSpan;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event as KubeEvent, EventType as KubeEventType};
use std::sync::{Arc, Weak};

impl Gateway {
    /// Queues an Event on a CronJob for the workers, within its budget;
    /// counts one held back or dropped.
    pub(super) fn queue_event(&self, regarding: ObjectReference, event: &reconcile::Event) {
        let pending = PendingEvent {
            reason: event.reason.as_str(),
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
            span: TraceSpan::current(),
        };
        if self.inner.refuses(&pending.namespace, true) {
            self.inner.count_dropped("event", Gone::namespace, 1);
            return;
        }
        let budget = BudgetKey::new(
            pending.regarding.uid.as_deref(),
            &pending.namespace,
            pending.regarding.name.as_deref().unwrap_or_default(),
            event.event_type == reconcile::EventType::Warning,
        );
        if !self
            .inner
            .event_budgets()
            .allow(&budget, Clock::System.now())
        {
            self.inner.metrics.events_held_back.inc();
            return;
        }
        let pushed = {
            let mut backlog = self.inner.events.lock();
            let pushed = backlog.push(pending);
            self.inner.metrics.events_queued.set(backlog.len() as i64);
            pushed
        };
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

    /// Sends one event; logs a failure.
    async fn send_event(&self, pending: PendingEvent) {
        let PendingEvent {
            reason,
            namespace,
            regarding,
            event,
            span,
        } = pending;
        let recorder = self.inner.recorder.clone();
        let (event, regarding) = (Arc::new(event), Arc::new(regarding));
        let result = span
            .attach(self.request(Verb::Event, &namespace, |_| {
                let recorder = recorder.clone();
                let event = event.clone();
                let regarding = regarding.clone();
                async move { recorder.publish(&event, &regarding).await }
            }))
            .await;
        match result {
            Ok(()) => {
                self.inner
                    .metrics
                    .events_recorded
                    .get_or_create(&ReasonLabels { reason })
                    .inc();
            }
            // Counted as dropped (`namespace_gone`): no warning per Event.
            Err(error) if error.is_namespace_gone() => {
                tracing::debug!(%namespace, reason = %event.reason, %error, "event for a namespace that is gone");
            }
            Err(error) => {
                tracing::warn!(%namespace, reason = %event.reason, %error, "could not record event");
            }
        }
    }

    /// An answer, or the namespaces' watch, said `namespace` is `going`:
    /// remembered for a while, and the Events waiting for it dropped, each
    /// counted once (an Event is a create, which even a terminating
    /// namespace refuses; its series patches go with it).
    pub fn namespace_gone(&self, namespace: &str, going: Going) {
        self.inner
            .gone()
            .mark(namespace, going, std::time::Instant::now());
        let dropped = self.drop_events(|pending| pending.namespace == namespace);
        self.inner.count_dropped("event", Gone::namespace, dropped);
        if dropped > 0 {
            tracing::info!(%namespace, ?going, events_dropped = dropped, "the namespace is going: its waiting Events dropped, its creates not sent for a while");
        } else {
            tracing::debug!(%namespace, ?going, "the namespace is going: its creates not sent for a while");
        }
    }

    /// The CronJob `uid` was deleted (the watch said so): the Events
    /// waiting about it are dropped, each counted once. (Its actor's own
    /// requests are abandoned as the actor stops.)
    pub fn cronjob_deleted(&self, uid: &str) {
        let dropped = self.drop_events(|pending| pending.regarding.uid.as_deref() == Some(uid));
        self.inner.count_dropped("event", Gone::cronjob, dropped);
    }

    /// Drops the waiting Events `gone` says so of; returns how many.
    fn drop_events(&self, gone: impl Fn(&PendingEvent) -> bool) -> usize {
        let mut backlog = self.inner.events.lock();
        let dropped = backlog.drop_where(gone);
        self.inner.metrics.events_queued.set(backlog.len() as i64);
        dropped
    }
}

/// Sends the backlog's events one at a time, until the gateway is gone.
pub(super) async fn send_events(queue: Arc<EventQueue>, gateway: Weak<Inner>) {
    loop {
        let ready = queue.ready.notified();
        let next = queue.lock().pop();
        match next {
            Some(pending) => {
                let Some(inner) = gateway.upgrade() else {
                    return;
                };
                inner.metrics.events_queued.set(queue.lock().len() as i64);
                Gateway::of(inner).send_event(pending).await;
            }
            None if gateway.strong_count() == 0 => return,
            None => ready.await,
        }
    }
}
