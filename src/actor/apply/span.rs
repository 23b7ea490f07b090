//! A decision's spans: its trace's root and its log lines'.

use crate::reconcile::CronJobView;
use crate::telemetry::trace_span::TraceSpan;
use jiff::Timestamp;
use tracing::Instrument as _;

/// The root span of one decision: `cronjob.fire` when the timer fired for
/// slot `due`, else `cronjob.reconcile` (a change to the CronJob or one of
/// its Jobs). The decision and the skew are recorded on its trace later.
pub struct DecisionSpan {
    /// The trace's root span (nothing when tracing is off).
    trace: TraceSpan,
    /// The log lines' span, made only when they are logged with their
    /// spans (`RUST_LOG` at `debug`): it names the CronJob and the trace.
    log: tracing::Span,
}

impl DecisionSpan {
    pub fn new(cronjob: &CronJobView, replica: &str, due: Option<Timestamp>) -> Self {
        use opentelemetry::KeyValue;
        let name = if due.is_some() {
            "cronjob.fire"
        } else {
            "cronjob.reconcile"
        };
        let trace = TraceSpan::root(name, || {
            let mut attributes = vec![
                KeyValue::new("k8s.namespace.name", cronjob.namespace().to_owned()),
                KeyValue::new("k8s.cronjob.name", cronjob.name().to_owned()),
                KeyValue::new("k8s.cronjob.uid", cronjob.uid.to_string()),
                KeyValue::new(
                    "cronjob.concurrency_policy",
                    format!("{:?}", cronjob.spec.concurrency_policy),
                ),
                KeyValue::new("shardcron.replica", replica.to_owned()),
            ];
            if let Some(slot) = due {
                attributes.push(KeyValue::new("cronjob.scheduled_time", slot.to_string()));
            }
            attributes
        });
        let trace_id = trace.trace_id();
        if let Some(trace_id) = &trace_id {
            trace.set("trace_id", trace_id.clone());
        }
        let log = tracing::info_span!(
            "decision",
            k8s.namespace.name = %cronjob.namespace(),
            k8s.cronjob.name = %cronjob.name(),
            cronjob.scheduled_time = due.map(tracing::field::display),
            trace_id = trace_id.map(tracing::field::display),
        );
        Self { trace, log }
    }

    pub fn none() -> Self {
        Self {
            trace: TraceSpan::none(),
            log: tracing::Span::none(),
        }
    }

    /// `decision` inside both spans.
    pub fn around<F: Future>(self, decision: F) -> impl Future<Output = F::Output> {
        self.trace.attach(decision).instrument(self.log)
    }
}
