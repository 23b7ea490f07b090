//! OpenTelemetry traces, exported over OTLP/gRPC.
//!
//! Off unless an endpoint is set (`--otlp-endpoint` or the standard
//! `OTEL_EXPORTER_OTLP_ENDPOINT` / `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`).
//! Everything else comes from the standard environment, which the SDK reads
//! itself: `OTEL_SERVICE_NAME` (default here: `shardcron`),
//! `OTEL_RESOURCE_ATTRIBUTES`, `OTEL_TRACES_SAMPLER` and `_ARG` (default:
//! parent-based always-on), `OTEL_BSP_*` for the batch processor.
//!
//! `tracing` spans become OpenTelemetry spans through tracing-opentelemetry,
//! so log lines and spans share their ids. Export never blocks the
//! controller: spans go to the SDK's batch processor (its own thread and a
//! bounded queue), the gRPC exporter runs on a small runtime of its own (an
//! exporter on actix's current-thread runtime could deadlock on flush), and
//! a batch that cannot be delivered is counted in
//! `shardcron_trace_spans_dropped_total`, never retried forever.

use super::Metrics;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData, SpanExporter};
use prometheus_client::metrics::counter::Counter;
use std::sync::Arc;
use std::time::Duration;
use thiserror::Error;
use tracing_subscriber::Layer;
use tracing_subscriber::Registry;

/// The instrumentation scope (and default service name).
pub const SCOPE: &str = "shardcron";

#[derive(Debug, Error)]
pub enum TracesError {
    #[error("cannot start the trace exporter's runtime: {0}")]
    Runtime(#[from] std::io::Error),
    #[error("cannot build the OTLP exporter: {0}")]
    Exporter(#[from] opentelemetry_otlp::ExporterBuildError),
}

/// The running trace pipeline; flushes and stops on [`Traces::shutdown`].
pub struct Traces {
    provider: SdkTracerProvider,
    runtime: Option<tokio::runtime::Runtime>,
}

/// A boxed layer for the process-wide subscriber.
pub type TraceLayer = Box<dyn Layer<Registry> + Send + Sync + 'static>;

/// Counts the spans of batches the collector did not take.
#[derive(Debug)]
struct CountingExporter<E> {
    inner: E,
    dropped: Counter,
}

impl<E: SpanExporter> SpanExporter for CountingExporter<E> {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let spans = batch.len() as u64;
        let result = self.inner.export(batch).await;
        if result.is_err() {
            self.dropped.inc_by(spans);
        }
        result
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource)
    }
}

/// `tracing::info_span!` inside a span, nothing outside one: the steps of
/// a decision (its requests) belong to the decision's trace and must not start traces of their own when the
/// decision has none (a reconcile that changed nothing).
#[macro_export]
macro_rules! child_span {
    ($($span:tt)*) => {
        if ::tracing::Span::current().is_none() {
            ::tracing::Span::none()
        } else {
            ::tracing::info_span!($($span)*)
        }
    };
}

/// Whether an endpoint is configured (flag or environment).
pub fn endpoint_configured(flag: Option<&str>) -> bool {
    flag.is_some()
        || [
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        ]
        .iter()
        .any(|v| std::env::var_os(v).is_some_and(|s| !s.is_empty()))
}

/// Starts the pipeline if an endpoint is configured; returns it with the
/// layer to install, or `None` (tracing off).
pub fn start(
    endpoint: Option<&str>,
    metrics: &Arc<Metrics>,
) -> Result<Option<(Traces, TraceLayer)>, TracesError> {
    if !endpoint_configured(endpoint) {
        return Ok(None);
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("otlp-export")
        .enable_all()
        .build()?;
    let exporter = runtime.block_on(async {
        let mut builder = opentelemetry_otlp::SpanExporter::builder().with_tonic();
        if let Some(endpoint) = endpoint {
            use opentelemetry_otlp::WithExportConfig as _;
            builder = builder.with_endpoint(endpoint);
        }
        builder.build()
    })?;
    let exporter = CountingExporter {
        inner: exporter,
        dropped: metrics.spans_dropped.clone(),
    };
    let mut resource = Resource::builder();
    if std::env::var_os("OTEL_SERVICE_NAME").is_none() {
        resource = resource.with_service_name(SCOPE);
    }
    let provider = SdkTracerProvider::builder()
        .with_resource(resource.build())
        .with_batch_exporter(exporter)
        .build();
    opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new());
    opentelemetry::global::set_tracer_provider(provider.clone());
    // No source locations, thread ids or busy/idle timing: attributes on
    // every span that nobody reads in a firing's trace. No context
    // activation either: it attaches an OpenTelemetry context on every poll
    // of an instrumented future, and our propagation reads the `tracing`
    // span's context itself (`inject`). The overhead benchmark
    // (loadtest/README.md) measured each of these.
    let layer = tracing_opentelemetry::layer()
        .with_tracer(provider.tracer(SCOPE))
        .with_location(false)
        .with_threads(false)
        .with_tracked_inactivity(false)
        .with_context_activation(false)
        // Only the controller's own spans: not the exporter's gRPC calls
        // (which would trace themselves), not the HTTP stack's.
        .with_filter(
            tracing_subscriber::filter::Targets::new()
                .with_target("shardcron", tracing::Level::INFO),
        );
    Ok(Some((
        Traces {
            provider,
            runtime: Some(runtime),
        },
        Box::new(layer),
    )))
}

impl Traces {
    /// Exports what is queued (bounded by the exporter's timeout) and stops.
    pub fn shutdown(mut self) {
        let provider = self.provider.clone();
        // From a plain thread: never on a runtime the export needs.
        let _ = std::thread::spawn(move || provider.shutdown()).join();
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_timeout(Duration::from_secs(1));
        }
    }
}

fn span_context(span: &tracing::Span) -> Option<opentelemetry::trace::SpanContext> {
    use opentelemetry::trace::TraceContextExt as _;
    use tracing_opentelemetry::OpenTelemetrySpanExt as _;
    let context = span.context();
    let span_context = context.span().span_context().clone();
    span_context.is_valid().then_some(span_context)
}

fn current_span_context() -> Option<opentelemetry::trace::SpanContext> {
    span_context(&tracing::Span::current())
}

/// The trace id of `span` (None when not tracing).
pub fn trace_id_of(span: &tracing::Span) -> Option<String> {
    span_context(span).map(|c| c.trace_id().to_string())
}

/// The W3C `traceparent` of the current span, if it is sampled (a trace
/// that is not kept would be a dead link).
pub fn current_traceparent() -> Option<String> {
    current_span_context().filter(|c| c.is_sampled()).map(|c| {
        format!(
            "00-{}-{}-{:02x}",
            c.trace_id(),
            c.span_id(),
            c.trace_flags().to_u8()
        )
    })
}

/// The trace id of the current span, if it is sampled (for exemplars).
pub fn current_trace_id() -> Option<String> {
    current_span_context()
        .filter(|c| c.is_sampled())
        .map(|c| c.trace_id().to_string())
}

/// Adds the current span's W3C trace context to an outgoing request, so
/// that kube-apiserver's own spans join (or link to) the trace.
pub fn inject<B>(mut request: http::Request<B>) -> http::Request<B> {
    use tracing_opentelemetry::OpenTelemetrySpanExt as _;
    let context = tracing::Span::current().context();
    opentelemetry::global::get_text_map_propagator(|propagator| {
        propagator.inject_context(
            &context,
            &mut opentelemetry_http::HeaderInjector(request.headers_mut()),
        )
    });
    request
}
