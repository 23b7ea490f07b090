//! OpenTelemetry traces, exported over OTLP/gRPC.
//!
//! Off unless an endpoint is set (`--otlp-endpoint` or the standard
//! `OTEL_EXPORTER_OTLP_ENDPOINT` / `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`).
//! Everything else comes from the standard environment, which the SDK reads
//! itself: `OTEL_SERVICE_NAME` (default here: `shardcron`),
//! `OTEL_RESOURCE_ATTRIBUTES`, `OTEL_TRACES_SAMPLER` and `_ARG` (default:
//! parent-based always-on), `OTEL_BSP_*` for the batch processor.
//!
//! The spans themselves are [`super::trace_span::TraceSpan`]s. Export
//! never blocks the controller: spans go to the SDK's batch processor (its
//! own thread and a bounded queue), the gRPC exporter runs on a small
//! runtime of its own (an exporter on actix's current-thread runtime could
//! deadlock on flush), and a batch that cannot be delivered is counted in
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

/// Starts the pipeline if an endpoint is configured, spans made from then
/// on going to it; `None`: tracing off.
pub fn start(
    endpoint: Option<&str>,
    metrics: &Arc<Metrics>,
) -> Result<Option<Traces>, TracesError> {
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
    super::trace_span::install(provider.tracer(SCOPE));
    Ok(Some(Traces {
        provider,
        runtime: Some(runtime),
    }))
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
