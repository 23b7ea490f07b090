//! Memory and spawn time of idle CronJob actors (issue: at most 2 KiB per
//! CronJob). Not a timed test: it prints its figures.
//!
//! Workload: N realistic CronJobs (distinct names, labels, a template with
//! one container, command, env, resources; `*/5 * * * *`-style schedules in
//! a few zones), created just now so that nothing is due, each becoming an actor on one of two Arbiters, given
//! `Start` and waiting on its armed timer, as in a replica that owns them.
//! The figure is the resident-set growth divided by N, read from
//! /proc/self/statm after every actor reported its first decision.
//!
//! Then one scrape of `/metrics` with every CronJob's per-CronJob series
//! (its size and time), and the live heap the per-CronJob metrics' records
//! hold, measured in a store of their own.
//!
//! `cargo bench --bench actors` (N = 100000; `SHARDCRON_BENCH_ACTORS=N` to change).

use actix::prelude::*;
use kube::runtime::events::Reporter;
use kube::{Client, Config};
use serde_json::json;
use shardcron::actor::cronjob::{CronJobActor, Update};
use shardcron::actor::runtime::CellThread;
use shardcron::actor::services::ActorReport;
use shardcron::actor::services::ActorServices;
use shardcron::actor::wheel::TimerWheel;
use shardcron::apiserver::gateway::{Gateway, Limits};
use shardcron::apiserver::lean_cronjob::LeanCronJob;
use shardcron::reconcile::CronJobKind;
use shardcron::shard::fence::SharedFence;
use shardcron::telemetry::Metrics;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// The replica's allocator, counting the bytes live on the heap, so the figure
/// can be split into what the actors hold and what the allocator keeps around.
struct Counting;

static LIVE_HEAP: AtomicUsize = AtomicUsize::new(0);

unsafe impl std::alloc::GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        LIVE_HEAP.fetch_add(layout.size(), Ordering::Relaxed);
        unsafe { shardcron::memory::ALLOCATOR.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: std::alloc::Layout) {
        LIVE_HEAP.fetch_sub(layout.size(), Ordering::Relaxed);
        unsafe { shardcron::memory::ALLOCATOR.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: std::alloc::Layout, new_size: usize) -> *mut u8 {
        LIVE_HEAP.fetch_add(new_size, Ordering::Relaxed);
        LIVE_HEAP.fetch_sub(layout.size(), Ordering::Relaxed);
        unsafe { shardcron::memory::ALLOCATOR.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("read /proc/self/statm");
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .expect("resident pages");
    pages * 4096
}

/// Decoded as the watch decodes it.
fn realistic_cronjob(i: usize, created: &str) -> LeanCronJob {
    let zones = [
        None,
        Some("Europe/Berlin"),
        Some("America/New_York"),
        Some("Asia/Tokyo"),
    ];
    let policies = ["Allow", "Forbid", "Replace"];
    let tenant = format!("tenant-{:04}", i % 1000);
    serde_json::from_value(json!({
        "metadata": {
            "name": format!("report-{i:06}"),
            "namespace": tenant,
            "uid": format!("00000000-0000-4000-8000-{i:012}"),
            "resourceVersion": format!("{}", 1000 + i),
            "generation": 1,
            "creationTimestamp": created,
            "labels": {"app.kubernetes.io/name": "nightly-report", "team": tenant}
        },
        "spec": {
            "schedule": format!("{} */{} * * *", i % 60, 1 + i % 6),
            "timeZone": zones[i % zones.len()],
            "concurrencyPolicy": policies[i % 3],
            "startingDeadlineSeconds": 300,
            "successfulJobsHistoryLimit": 3,
            "failedJobsHistoryLimit": 1,
            "jobTemplate": {
                "metadata": {"labels": {"app.kubernetes.io/name": "nightly-report"}},
                "spec": {
                    "backoffLimit": 2,
                    "template": {
                        "metadata": {"labels": {"app.kubernetes.io/name": "nightly-report"}},
                        "spec": {
                            "restartPolicy": "OnFailure",
                            "containers": [{
                                "name": "report",
                                "image": "registry.example.com/reports/nightly:1.4.2",
                                "command": ["/bin/report", "--since=24h", format!("--shard={i}")],
                                "env": [
                                    {"name": "TENANT", "value": tenant},
                                    {"name": "LOG_LEVEL", "value": "info"}
                                ],
                                "resources": {
                                    "requests": {"cpu": "100m", "memory": "128Mi"},
                                    "limits": {"memory": "256Mi"}
                                }
                            }]
                        }
                    }
                }
            }
        },
        "status": {}
    }))
    .expect("a valid CronJob")
}

/// The floor: an actor with no state and one armed timer, as actix makes it.
struct Bare;

impl Actor for Bare {
    type Context = Context<Self>;
    fn started(&mut self, ctx: &mut Self::Context) {
        ctx.run_later(Duration::from_secs(3600), |_, _| {});
    }
}

/// Counts the actors' reports.
struct Counter(Arc<AtomicUsize>);

impl Actor for Counter {
    type Context = Context<Self>;
}

impl Handler<ActorReport> for Counter {
    type Result = ();
    fn handle(&mut self, report: ActorReport, _: &mut Self::Context) {
        if matches!(report, ActorReport::Armed { .. }) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }
}

fn main() {
    let count: usize = std::env::var("SHARDCRON_BENCH_ACTORS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(100_000);
    let system = System::with_tokio_rt(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("tokio runtime")
    });
    system.block_on(async move {
        // Nothing is sent: an idle actor makes no request.
        let client = Client::try_from(Config::new("http://127.0.0.1:9".parse().unwrap()))
            .expect("client");
        let metrics = Arc::new(Metrics::new());
        let gateway = Gateway::start(
            client,
            Limits::default(),
            Reporter { controller: "bench".into(), instance: None },
            metrics.clone(),
            Arc::new(SharedFence::new(Duration::from_secs(10))),
        );
        let armed = Arc::new(AtomicUsize::new(0));
        let shared = Arc::new(ActorServices {
            feed: Default::default(),
            gateway,
            reports: Counter(armed.clone()).start().recipient(),
            metrics,
            default_zone: jiff::tz::TimeZone::UTC,
            slot_history: true,
            replica: "bench".into(),
            clock: shardcron::clock::Clock::System,
        });
        let wheel = TimerWheel::start(shardcron::clock::Clock::System);
        let arbiters: Vec<Arbiter> = (0..2).map(|_| Arbiter::new()).collect();
        let threads: Vec<CellThread<CronJobActor>> =
            arbiters.iter().map(|a| CellThread::start(&a.handle(), Default::default())).collect();
        tokio::time::sleep(Duration::from_millis(200)).await;
        let heap_before = LIVE_HEAP.load(Ordering::Relaxed);
        let bare: Vec<Addr<Bare>> = (0..count)
            .map(|i| Bare::start_in_arbiter(&arbiters[i % 2].handle(), |_| Bare))
            .collect();
        tokio::time::sleep(Duration::from_millis(500)).await;
        let bare_heap = LIVE_HEAP.load(Ordering::Relaxed).saturating_sub(heap_before);
        drop(bare);
        tokio::time::sleep(Duration::from_millis(500)).await;
        let before = rss_bytes();
        let heap_before = LIVE_HEAP.load(Ordering::Relaxed);
        let started = Instant::now();
        // Created now: nothing is due, so no actor needs the API server.
        let created = jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
        let mut cells = Vec::with_capacity(count);
        let mut building = Duration::ZERO;
        for i in 0..count {
            let build_started = Instant::now();
            let cronjob = realistic_cronjob(i, &created);
            building += build_started.elapsed();
            let actor =
                CronJobActor::new(&cronjob, Vec::new(), None, shared.clone(), wheel.clone())
                .expect("actor");
            let cell = threads[i % 2].start_actor(actor);
            cell.post(Update::Start { ran_elsewhere: false });
            cells.push(cell);
        }
        let spawned = started.elapsed().saturating_sub(building);
        while armed.load(Ordering::Relaxed) < count {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let all_armed = started.elapsed();
        tokio::time::sleep(Duration::from_millis(500)).await;
        let after = rss_bytes();
        let heap_after = LIVE_HEAP.load(Ordering::Relaxed);
        let per_actor = (after.saturating_sub(before)) as f64 / count as f64;
        println!("idle CronJob actors: {count}");
        println!(
            "spawn (compile the view, start the actor; the bench's own CronJob building excluded): {:.2} us per actor ({:.2} s in all)",
            spawned.as_secs_f64() * 1e6 / count as f64,
            spawned.as_secs_f64()
        );
        println!("all armed (first decision done) after {:.2} s", all_armed.as_secs_f64());
        println!(
            "resident memory: {:.1} MiB -> {:.1} MiB, {:.0} bytes ({:.2} KiB) per CronJob",
            before as f64 / 1048576.0,
            after as f64 / 1048576.0,
            per_actor,
            per_actor / 1024.0
        );
        println!(
            "live heap: {:.0} bytes per CronJob (an actix actor with no state and one timer: {:.0}; the actor's own struct: {} bytes; the compressed template: {} bytes)",
            heap_after.saturating_sub(heap_before) as f64 / count as f64,
            bare_heap as f64 / count as f64,
            std::mem::size_of::<CronJobActor>(),
            realistic_cronjob(0, &created)
                .spec_view()
                .job_template
                .encoded_len()
        );
        // The per-CronJob metrics: one scrape of this replica's /metrics,
        // then what their records alone hold, in a store of their own.
        let scrape_started = Instant::now();
        let page = shared.metrics.encode_cronjobs();
        println!(
            "per-CronJob metrics: {} records; a scrape of /metrics/cronjobs renders {:.1} MiB ({} lines) in {:.0} ms",
            shared.metrics.cronjobs.len(),
            page.len() as f64 / 1048576.0,
            page.lines().count(),
            scrape_started.elapsed().as_secs_f64() * 1e3
        );
        drop(page);
        // The keys exist anyway (the actors hold them): not counted here.
        let keys: Vec<Arc<str>> = (0..count)
            .map(|i| {
                let meta = realistic_cronjob(i, &created).metadata;
                let namespace = meta.namespace.unwrap_or_default();
                let name = meta.name.unwrap_or_default();
                CronJobKind::Batch.key(&namespace, &name).into()
            })
            .collect();
        let heap_before = LIVE_HEAP.load(Ordering::Relaxed);
        let series = shardcron::telemetry::cronjob_series::CronJobSeries::new(true);
        for key in &keys {
            series.update(key, |r| {
                r.next_schedule = 1;
                r.active = 1;
            });
        }
        println!(
            "per-CronJob metrics' records: {:.0} bytes of live heap per CronJob",
            LIVE_HEAP.load(Ordering::Relaxed).saturating_sub(heap_before) as f64 / count as f64
        );
        drop(series);
        drop(cells);
        System::current().stop();
    });
    system.run().expect("actor system");
}
