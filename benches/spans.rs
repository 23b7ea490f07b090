//! What tracing costs a firing on the controller's own thread: ns per
//! firing for the spans a firing makes, with tracing off (the default: no
//! tracer, no span) and exporting every span (`always_on`), each hot
//! (firing after firing) and cold (the caches evicted before each firing,
//! as a replica finds them between two firings; the eviction not timed).
//!
//! Workload: one firing as the actor and the gateway make it: the
//! decision's root span (`cronjob.fire`, six attributes and its trace id),
//! three requests (create, status patch, Event), each in a client span of
//! its own around a future polled twice, with `traceparent` injected and
//! the status code set, the Job's trace annotation and the exemplar's trace
//! id; then the reconcile that records the Job's completion, with two
//! requests. Spans go to the SDK's batch processor with an exporter that
//! drops them: what the export thread does is not counted here.
//! `cargo bench --bench spans`.

use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, Criterion, criterion_group, criterion_main};
use futures::executor::block_on;
use opentelemetry::KeyValue;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData, SpanExporter};
use shardcron::telemetry::trace_span::{self, TraceSpan};
use shardcron::telemetry::traces;
use std::future::Future;
use std::hint::black_box;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

/// Takes every batch and keeps nothing.
#[derive(Debug)]
struct Discard;

impl SpanExporter for Discard {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        black_box(batch);
        Ok(())
    }
}

/// Pending once, then ready: a request's future, polled twice.
struct Answer(bool);

impl Future for Answer {
    type Output = u16;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<u16> {
        if self.0 {
            Poll::Ready(201)
        } else {
            self.0 = true;
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }
}

async fn request(verb: &'static str) {
    let span = TraceSpan::client_child("kube.request", || {
        [
            KeyValue::new("k8s.verb", verb),
            KeyValue::new("k8s.namespace.name", "team-a".to_owned()),
            KeyValue::new("attempt", 1),
            KeyValue::new("gateway.priority", "create_job"),
            KeyValue::new("gateway.queued_ahead", 0),
            KeyValue::new("gateway.wait_ms", 0),
        ]
    });
    span.attach(async {
        black_box(TraceSpan::current().inject(http::Request::new(())));
        let code = Answer(false).await;
        TraceSpan::current().set("http.response.status_code", code.to_string());
    })
    .await;
}

fn decision(name: &'static str, requests: &[&'static str]) {
    let span = TraceSpan::root(name, || {
        [
            KeyValue::new("k8s.namespace.name", "team-a".to_owned()),
            KeyValue::new("k8s.cronjob.name", "report".to_owned()),
            KeyValue::new(
                "k8s.cronjob.uid",
                "5b0f6a53-9d0e-4c3c-a6e4-0c1e8f4a2b7d".to_owned(),
            ),
            KeyValue::new("cronjob.concurrency_policy", "Allow".to_owned()),
            KeyValue::new("shardcron.replica", "replica-0".to_owned()),
            KeyValue::new("cronjob.scheduled_time", "2024-03-01T10:00:00Z".to_owned()),
        ]
    });
    if let Some(trace_id) = span.trace_id() {
        span.set("trace_id", trace_id);
    }
    block_on(span.attach(async {
        let current = TraceSpan::current();
        black_box(current.traceparent());
        for verb in requests {
            request(verb).await;
        }
        current.set("cronjob.skew_ms", 12);
        black_box(current.trace_id());
        current.set("cronjob.decision", "created");
    }));
}

fn firing() {
    decision("cronjob.fire", &["create", "patch", "event"]);
    decision("cronjob.reconcile", &["patch", "event"]);
}

/// Writes every cache line of `lines`: what the rest of the process and
/// the machine's other processes do to the caches between two firings.
fn evict(lines: &mut [u64]) {
    for line in lines.iter_mut().step_by(8) {
        *line = line.wrapping_add(1);
    }
    black_box(lines);
}

/// More than the machine's last-level cache (48 MiB here).
const EVICTED_BYTES: usize = 64 << 20;

fn hot_and_cold(group: &mut BenchmarkGroup<'_, WallTime>, name: &str) {
    let mut memory = vec![0u64; EVICTED_BYTES / 8];
    group.bench_function(format!("{name}, hot"), |b| b.iter(firing));
    group.bench_function(format!("{name}, cold"), |b| {
        b.iter_custom(|iterations| {
            let mut spent = Duration::ZERO;
            for _ in 0..iterations {
                evict(&mut memory);
                let start = Instant::now();
                firing();
                spent += start.elapsed();
            }
            spent
        })
    });
}

fn spans(c: &mut Criterion) {
    let mut group = c.benchmark_group("firing");
    hot_and_cold(&mut group, "tracing off");
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(Discard)
        .build();
    opentelemetry::global::set_text_map_propagator(
        opentelemetry_sdk::propagation::TraceContextPropagator::new(),
    );
    trace_span::install(provider.tracer(traces::SCOPE));
    hot_and_cold(&mut group, "every span exported");
    group.finish();
    let _ = provider.shutdown();
}

criterion_group!(benches, spans);
criterion_main!(benches);
