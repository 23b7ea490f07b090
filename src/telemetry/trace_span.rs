//! A span of an exported trace, made with OpenTelemetry's API directly.
//!
//! The controller's spans (a decision, its requests, a rebalance, a load)
//! are OpenTelemetry spans, not `tracing` spans bridged by a layer: the
//! bridge (tracing-opentelemetry) cost a firing about twice what the same
//! spans cost made directly (`benches/spans.rs`: every `tracing` span
//! entered and left at each poll of its future, a registry slot, a layer's
//! builder), and tracing every span cost a replica 7.3-14.1 % of its CPU per
//! firing (now 0.8-6.8 % in four runs, mean 3.1 %). `tracing` is left to
//! the log lines.
//!
//! A [`TraceSpan`] is nothing at all (one branch) while no tracer is
//! installed ([`install`], by `traces::start`): tracing off costs nothing.
//! The span of the code running now travels as OpenTelemetry's current
//! context, attached around each poll of a future ([`TraceSpan::attach`]),
//! so the gateway's requests and Events find the decision they belong to
//! without it being passed by hand. One place does not see it: kube's
//! client sends each request from a buffer's task, so a request's
//! `traceparent` is added as the gateway builds it
//! (`apiserver::client::traced`). A span ends when its last handle
//! is dropped.

use futures::future::Either;
use opentelemetry::context::FutureExt as _;
use opentelemetry::trace::{SpanContext, SpanKind, TraceContextExt as _, Tracer as _};
use opentelemetry::{Context, KeyValue, Value};
use opentelemetry_sdk::trace::SdkTracer;
use std::borrow::Cow;
use std::future::Future;
use std::sync::OnceLock;

static TRACER: OnceLock<SdkTracer> = OnceLock::new();

/// Makes spans from now on with `tracer` (once per process: a second call
/// is ignored).
pub fn install(tracer: SdkTracer) {
    let _ = TRACER.set(tracer);
}

#[cfg(test)]
thread_local! {
    /// A test's tracer, on its thread alone (the other tests of the
    /// process go on untraced).
    static TEST_TRACER: std::cell::RefCell<Option<SdkTracer>> = const { std::cell::RefCell::new(None) };
}

/// `f` of the installed tracer; None when tracing is off.
fn with_tracer<R>(f: impl FnOnce(&SdkTracer) -> R) -> Option<R> {
    #[cfg(test)]
    if let Some(tracer) = TEST_TRACER.with(|t| t.borrow().clone()) {
        return Some(f(&tracer));
    }
    TRACER.get().map(f)
}

/// A span of a trace being exported, or nothing (tracing off; outside a
/// trace, for a child).
#[derive(Clone, Debug, Default)]
#[must_use = "a span ends when its last handle is dropped"]
pub struct TraceSpan(Option<Context>);

impl TraceSpan {
    /// No span.
    pub const fn none() -> Self {
        Self(None)
    }

    /// The span of the code running now: the innermost one attached.
    pub fn current() -> Self {
        if with_tracer(|_| ()).is_none() {
            return Self::none();
        }
        let context = Context::current();
        Self(context.has_active_span().then_some(context))
    }

    /// The first span of a new trace (if tracing). `attributes` is called
    /// only then: untraced, a span costs no allocation.
    pub fn root<A: IntoIterator<Item = KeyValue>>(
        name: impl Into<Cow<'static, str>>,
        attributes: impl FnOnce() -> A,
    ) -> Self {
        let span = with_tracer(|tracer| {
            tracer
                .span_builder(name)
                .with_attributes(attributes())
                .start_with_context(tracer, &Context::new())
        });
        Self(span.map(|span| Context::new().with_span(span)))
    }

    /// A client span (a request to kube-apiserver) inside the current
    /// span; nothing outside one: a step of a decision belongs to the
    /// decision's trace and starts no trace of its own.
    pub fn client_child<A: IntoIterator<Item = KeyValue>>(
        name: impl Into<Cow<'static, str>>,
        attributes: impl FnOnce() -> A,
    ) -> Self {
        let Self(Some(parent)) = Self::current() else {
            return Self::none();
        };
        let span = with_tracer(|tracer| {
            tracer
                .span_builder(name)
                .with_kind(SpanKind::Client)
                .with_attributes(attributes())
                .start_with_context(tracer, &parent)
        });
        Self(span.map(|span| parent.with_span(span)))
    }

    pub fn is_none(&self) -> bool {
        self.0.is_none()
    }

    /// Sets an attribute (nothing without a span).
    pub fn set(&self, key: &'static str, value: impl Into<Value>) {
        if let Some(context) = &self.0 {
            context.span().set_attribute(KeyValue::new(key, value));
        }
    }

    /// `future`, this span current at each of its polls.
    pub fn attach<F: Future>(
        &self,
        future: F,
    ) -> Either<opentelemetry::context::WithContext<F>, F> {
        match &self.0 {
            Some(context) => Either::Left(future.with_context(context.clone())),
            None => Either::Right(future),
        }
    }

    /// The span's context, if it is sampled (a trace that is not kept
    /// would be a dead link).
    fn sampled(&self) -> Option<SpanContext> {
        let context = self.0.as_ref()?.span().span_context().clone();
        (context.is_valid() && context.is_sampled()).then_some(context)
    }

    /// The trace id, if sampled (for exemplars and log lines).
    pub fn trace_id(&self) -> Option<String> {
        self.sampled().map(|c| c.trace_id().to_string())
    }

    /// The W3C `traceparent`, if sampled.
    pub fn traceparent(&self) -> Option<String> {
        self.sampled().map(|c| {
            format!(
                "00-{}-{}-{:02x}",
                c.trace_id(),
                c.span_id(),
                c.trace_flags().to_u8()
            )
        })
    }

    /// Adds this span's W3C trace context to an outgoing request, so that
    /// kube-apiserver's own spans join (or link to) the trace.
    pub fn inject<B>(&self, mut request: http::Request<B>) -> http::Request<B> {
        if let Some(context) = &self.0 {
            opentelemetry::global::get_text_map_propagator(|propagator| {
                propagator.inject_context(
                    context,
                    &mut opentelemetry_http::HeaderInjector(request.headers_mut()),
                )
            });
        }
        request
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry::trace::TracerProvider as _;
    use opentelemetry_sdk::error::OTelSdkResult;
    use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData, SpanExporter};
    use std::sync::{Arc, Mutex};

    /// Keeps the spans it is given, in the order they ended.
    #[derive(Clone, Debug, Default)]
    struct Kept(Arc<Mutex<Vec<SpanData>>>);

    impl Kept {
        fn spans(&self) -> Vec<SpanData> {
            self.0.lock().unwrap().clone()
        }
    }

    impl SpanExporter for Kept {
        async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
            self.0.lock().unwrap().extend(batch);
            Ok(())
        }
    }

    /// With a tracer on this thread: spans
    /// nest through attached futures, a child outside a span is nothing,
    /// attributes set late arrive, a span ends with its last handle.
    #[test]
    fn spans_nest_through_attached_futures_and_end_with_their_last_handle() {
        assert!(
            TraceSpan::root("before", Vec::new).is_none(),
            "no tracer: nothing"
        );
        let exporter = Kept::default();
        let provider = SdkTracerProvider::builder()
            .with_simple_exporter(exporter.clone())
            .build();
        TEST_TRACER.with(|t| *t.borrow_mut() = Some(provider.tracer("test")));
        opentelemetry::global::set_text_map_propagator(
            opentelemetry_sdk::propagation::TraceContextPropagator::new(),
        );

        assert!(TraceSpan::client_child("orphan", Vec::new).is_none());
        let root = TraceSpan::root("decision", || [KeyValue::new("k", "v")]);
        let trace_id = root.trace_id().expect("sampled");
        assert_eq!(
            root.traceparent().unwrap().split('-').nth(1),
            Some(&*trace_id)
        );
        // Not futures' executor: the simple processor exports with it as each
        // span ends.
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        runtime.block_on(root.attach(async {
            let current = TraceSpan::current();
            assert_eq!(current.trace_id().as_deref(), Some(&*trace_id));
            current.set("decision", "created");
            let request = TraceSpan::client_child("request", || [KeyValue::new("verb", "create")]);
            request
                .attach(async {
                    let sent = TraceSpan::current().inject(http::Request::new(()));
                    let sent = sent.headers()["traceparent"].to_str().unwrap().to_owned();
                    assert_eq!(Some(sent), TraceSpan::current().traceparent());
                    TraceSpan::current().set("code", "201");
                })
                .await;
        }));
        assert!(TraceSpan::current().is_none(), "detached after the poll");
        let spans = exporter.spans();
        assert_eq!(
            spans.len(),
            1,
            "the request ended, the decision is still held"
        );
        assert_eq!(spans[0].name, "request");
        assert_eq!(spans[0].span_kind, SpanKind::Client);
        assert!(spans[0].attributes.contains(&KeyValue::new("code", "201")));
        drop(root);
        let spans = exporter.spans();
        assert_eq!(spans.len(), 2);
        let decision = &spans[1];
        assert_eq!(spans[0].parent_span_id, decision.span_context.span_id());
        assert!(
            decision
                .attributes
                .contains(&KeyValue::new("decision", "created"))
        );
        assert!(decision.attributes.contains(&KeyValue::new("k", "v")));
    }
}
