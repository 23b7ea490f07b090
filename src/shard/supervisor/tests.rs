//! The supervisor on the scripted API seam: the whole shell of one replica
//! (supervisor, Lease keeper, gateway, actors) against a scripted API
//! server that keeps one Lease and lists one CronJob, fed watch events by
//! the test. The protocol's own cases are in `shard::ownership`'s tables
//! and simulation; this checks that the shell carries its commands out, in
//! order.

use super::*;
use crate::kube::gateway::Limits;
use crate::kube::scripted::{self, Answer};
use crate::shard::lease::VIEW_ANNOTATION;
use ::kube::runtime::events::Reporter;
use ::kube::runtime::watcher::Event;
use k8s_openapi::api::coordination::v1::Lease;
use serde_json::{Value, json};
use std::sync::Mutex;

/// The Lease the scripted server keeps: created, replaced, read back.
#[derive(Default)]
struct LeaseStore {
    lease: Option<Value>,
    version: u64,
}

impl LeaseStore {
    fn answer(&mut self, request: &scripted::Request) -> Answer {
        let list = |kind: &str, items: Vec<Value>| {
            Answer::Json(
                200,
                json!({"kind": kind, "apiVersion": "batch/v1",
                       "metadata": {"resourceVersion": "5"}, "items": items}),
            )
        };
        // The bulk load of the gained keys reads the one CronJob, which
        // has no Job; it fires once a year, so its actor writes nothing.
        if request.method == "GET" && request.uri.starts_with("/apis/batch/v1/cronjobs?") {
            return list("CronJobList", vec![cronjob_json("team-a", "nightly")]);
        }
        if request.method == "GET" && request.uri.starts_with("/apis/batch/v1/jobs?") {
            return list("JobList", vec![]);
        }
        if !request.uri.contains("/leases") {
            return scripted::status(404, "NotFound");
        }
        match request.method.as_str() {
            "GET" => match &self.lease {
                Some(lease) => Answer::Json(200, lease.clone()),
                None => scripted::status(404, "NotFound"),
            },
            "POST" | "PUT" => {
                let Ok(mut lease) = serde_json::from_slice::<Value>(&request.body) else {
                    return scripted::status(400, "BadRequest");
                };
                self.version += 1;
                lease["metadata"]["resourceVersion"] = json!(self.version.to_string());
                self.lease = Some(lease.clone());
                Answer::Json(if request.method == "POST" { 201 } else { 200 }, lease)
            }
            _ => scripted::status(405, "MethodNotAllowed"),
        }
    }
}

fn cronjob_json(namespace: &str, name: &str) -> Value {
    json!({
        "metadata": {"namespace": namespace, "name": name, "uid": format!("uid-{name}"),
                     "resourceVersion": "5", "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"schedule": "0 0 1 1 *",
                 "jobTemplate": {"spec": {"template": {"spec": {"containers": []}}}}},
    })
}

fn cronjob(namespace: &str, name: &str) -> CronJob {
    serde_json::from_value(cronjob_json(namespace, name)).expect("a CronJob")
}

/// Polls `check` every 20 ms for up to 20 s.
async fn eventually<T>(what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    for _ in 0..1_000 {
        if let Some(value) = check() {
            return value;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("timed out waiting for {what}");
}

#[actix::test]
async fn alone_in_its_ring_it_publishes_starts_on_the_echo_and_is_ready() {
    let store = Arc::new(Mutex::new(LeaseStore::default()));
    let server = store.clone();
    let (client, _) = scripted::client(move |request| {
        server
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .answer(request)
    });
    let settings = LeaseSettings {
        namespace: "shardcron-system".into(),
        ring: "ring".into(),
        replica_id: "r0".into(),
        duration: Duration::from_secs(15),
        renew_period: Duration::from_secs(2),
        renew_deadline: Duration::from_secs(10),
    };
    let metrics = Arc::new(Metrics::new());
    let fence = crate::shard::fence::SharedFence::new(settings.renew_deadline);
    let readiness = Arc::new(Readiness::default());
    let gateway = Gateway::start(
        client.clone(),
        Limits::default(),
        Reporter {
            controller: "shardcron".into(),
            instance: Some("r0".into()),
        },
        metrics.clone(),
        Arc::new(fence.clone()),
    );
    let supervisor = Supervisor::start_with(Parts {
        client,
        lease: settings,
        fence,
        gateway,
        metrics,
        default_zone: jiff::tz::TimeZone::UTC,
        arbiters: vec![Arbiter::current()],
        scopes: vec![None],
        readiness: readiness.clone(),
    });
    // The first lists: no Lease of the ring yet, one CronJob, no Job.
    supervisor.do_send(LeaseWatch(Event::Init));
    supervisor.do_send(LeaseWatch(Event::InitDone));
    for event in [
        Event::Init,
        Event::InitApply(cronjob("team-a", "nightly")),
        Event::InitDone,
    ] {
        supervisor.do_send(CronJobWatch { scope: 0, event });
    }
    supervisor.do_send(JobWatch {
        scope: 0,
        event: Event::Init,
    });
    supervisor.do_send(JobWatch {
        scope: 0,
        event: Event::InitDone,
    });

    // It publishes the view of itself alone on its Lease...
    let written: Lease = eventually("the view on the Lease", || {
        let store = store.lock().unwrap_or_else(|e| e.into_inner());
        let lease = store.lease.as_ref()?;
        lease["metadata"]["annotations"][VIEW_ANNOTATION].as_str()?;
        serde_json::from_value(lease.clone()).ok()
    })
    .await;
    assert_eq!(
        written
            .spec
            .as_ref()
            .and_then(|s| s.holder_identity.as_deref()),
        Some("r0")
    );
    // ...but, its load done, runs nothing and is not ready until the
    // watch echoes it.
    let mut report = supervisor.send(DebugShards { keys: true }).await.unwrap();
    for _ in 0..1_000 {
        if report.loads_in_flight == 0 && report.owned == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        report = supervisor.send(DebugShards { keys: true }).await.unwrap();
    }
    assert_eq!((report.loads_in_flight, report.owned), (0, 1), "{report:?}");
    assert_eq!((report.running, report.waiting), (0, 1), "{report:?}");
    assert!(readiness.readiness().is_err());

    supervisor.do_send(LeaseWatch(Event::Apply(lease::observe(&written))));
    eventually("readiness after the echo", || readiness.readiness().ok()).await;
    let report = supervisor.send(DebugShards { keys: true }).await.unwrap();
    assert_eq!(report.view, ["r0"]);
    assert_eq!((report.owned, report.running), (1, 1), "{report:?}");
    assert_eq!(report.keys, Some(vec!["team-a/nightly".to_owned()]));
}
