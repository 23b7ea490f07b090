//! The supervisor on the scripted API seam: the whole shell of one replica
//! (supervisor, Lease keeper, gateway, actors) against a scripted API
//! server that keeps one Lease and lists one CronJob, fed watch events by
//! the test. The protocol's own cases are in `shard::ownership`'s tables
//! and simulation; this checks that the shell carries its commands out, in
//! order.

use super::*;
use crate::apiserver::gateway::Limits;
use crate::apiserver::lean_cronjob::LeanCronJob;
use crate::apiserver::scripted::{self, Answer};
use crate::reconcile::CronJobKind;
use crate::shard::debug::{DebugShards, ShardReport};
use crate::shard::lease::VIEW_ANNOTATION;
use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::Lease;
use kube::runtime::events::Reporter;
use kube::runtime::watcher::Event;
use serde_json::{Value, json};
use std::sync::Mutex;

/// The Lease the scripted server keeps: created, replaced, read back; and
/// the one CronJob the bulk load lists.
struct LeaseStore {
    lease: Option<Value>,
    version: u64,
    /// What the bulk load of the gained keys lists, and how late.
    listed: Vec<Value>,
    list_delay: Duration,
    /// CronJob lists answered so far, and from which one on (counting
    /// from 0) each is answered this much later instead.
    lists: usize,
    later_lists: Option<(usize, Duration)>,
}

impl Default for LeaseStore {
    /// The one CronJob has no Job; it fires once a year, so its actor
    /// writes nothing.
    fn default() -> Self {
        LeaseStore {
            lease: None,
            version: 0,
            listed: vec![cronjob_json("team-a", "nightly")],
            list_delay: Duration::ZERO,
            lists: 0,
            later_lists: None,
        }
    }
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
        if request.method == "GET" && request.uri.starts_with("/apis/batch/v1/cronjobs?") {
            let listed = list("CronJobList", self.listed.clone());
            let delay = match self.later_lists {
                Some((from, delay)) if self.lists >= from => delay,
                _ => self.list_delay,
            };
            self.lists += 1;
            return Answer::Late(delay, Box::new(listed));
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

/// `count` CronJobs `{prefix}-{i}` with UUID-like UIDs, spread over the
/// buckets as the server's are (UIDs that differ only at their end fall in
/// one bucket).
fn spread_cronjobs(prefix: &str, count: usize) -> Vec<Value> {
    (0..count)
        .map(|i| {
            let mut cronjob = cronjob_json("team-a", &format!("{prefix}-{i}"));
            cronjob["metadata"]["uid"] = json!(format!("{i:x}7c2e9a1-5e6f-4a1b-9c2d-{i:012x}"));
            cronjob
        })
        .collect()
}

fn cronjob(namespace: &str, name: &str) -> LeanCronJob {
    serde_json::from_value(cronjob_json(namespace, name)).expect("a CronJob")
}

/// The supervisor's wall clock: second 20 of the current minute, moving
/// with tokio's clock. Each test here takes well under 30 s, so none runs
/// into the hold around whole minutes, which holds a join's or a leave's
/// view ([`crate::shard::ownership::HOLD_BEFORE_MINUTE`]) and, on the
/// system's clock, failed about one run in four of those that assert a
/// publication.
fn clear_of_whole_minutes() -> crate::clock::Clock {
    let now = Timestamp::now().as_second();
    let start = Timestamp::from_second(now - now.rem_euclid(60) + 20).expect("in range");
    crate::clock::Clock::following_tokio(start)
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

/// One replica's shell on the scripted server keeping `store`.
struct Shell {
    supervisor: Addr<Supervisor>,
    store: Arc<Mutex<LeaseStore>>,
    asked: scripted::Asked,
    readiness: Arc<Readiness>,
}

impl Shell {
    /// Starts the shell and feeds it the first lists: no Lease of the ring
    /// yet, the CronJobs `listed`, no Job.
    fn start(store: LeaseStore, listed: Vec<LeanCronJob>) -> Shell {
        Self::start_among(store, listed, vec![])
    }

    /// As [`Self::start`], with the peers' Leases `peers` listed first.
    fn start_among(store: LeaseStore, listed: Vec<LeanCronJob>, peers: Vec<Lease>) -> Shell {
        let store = Arc::new(Mutex::new(store));
        let server = store.clone();
        let (client, asked) = scripted::client(move |request| {
            server
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .answer(request)
        });
        let settings = LeaseSettings {
            admin_certificate: None,
            admin_address: None,
            admin_pod: None,
            namespace: "shardcron-system".into(),
            ring: "ring".into(),
            replica_id: "r0".into(),
            duration: Duration::from_secs(15),
            renew_period: Duration::from_secs(2),
            renew_deadline: Duration::from_secs(10),
            drain: Duration::from_secs(15),
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
        let supervisor = Supervisor::start_with(SupervisorParts {
            client,
            lease: settings,
            fence,
            actors: ActorParts {
                gateway,
                metrics,
                default_zone: jiff::tz::TimeZone::UTC,
                slot_history: true,
                feed: Default::default(),
                clock: clear_of_whole_minutes(),
            },
            arbiters: vec![Arbiter::current()],
            scopes: vec![None],
            readiness: readiness.clone(),
            watches: None,
            standby: true,
        });
        supervisor.do_send(LeaseWatch(Event::Init));
        for peer in peers {
            supervisor.do_send(LeaseWatch(Event::InitApply(lease::observe(&peer))));
        }
        supervisor.do_send(LeaseWatch(Event::InitDone));
        let cronjobs = listed.into_iter().map(Event::InitApply);
        for event in std::iter::once(Event::Init)
            .chain(cronjobs)
            .chain([Event::InitDone])
        {
            supervisor.do_send(CronJobWatch {
                scope: 0,
                kind: CronJobKind::Batch,
                generation: 0,
                event,
            });
        }
        for stream in [JobStream::Labelled, JobStream::Unlabelled] {
            for event in [Event::Init, Event::InitDone] {
                supervisor.do_send(JobWatch {
                    scope: 0,
                    stream,
                    generation: 0,
                    event,
                });
            }
        }
        Shell {
            supervisor,
            store,
            asked,
            readiness,
        }
    }

    /// As [`Self::start_among`], the server listing the CronJobs `listed`
    /// (list number `later.0` on answered `later.1` late) and the watch
    /// showing them too.
    fn start_listing(
        listed: Vec<Value>,
        later: Option<(usize, Duration)>,
        peers: Vec<Lease>,
    ) -> Shell {
        let watched = (listed.iter().cloned())
            .map(|json| serde_json::from_value(json).expect("a CronJob"))
            .collect();
        let store = LeaseStore {
            listed,
            later_lists: later,
            ..LeaseStore::default()
        };
        Self::start_among(store, watched, peers)
    }

    /// The Lease once the view is published on it.
    async fn published(&self) -> Lease {
        eventually("the view on the Lease", || {
            let store = self.store.lock().unwrap_or_else(|e| e.into_inner());
            let lease = store.lease.as_ref()?;
            lease["metadata"]["annotations"][VIEW_ANNOTATION].as_str()?;
            serde_json::from_value(lease.clone()).ok()
        })
        .await
    }

    /// The view once published on the Lease, shown back by the Lease
    /// watch (its echo: waiting keys may start).
    async fn echo_published(&self) {
        let written = self.published().await;
        self.supervisor
            .do_send(LeaseWatch(Event::Apply(lease::observe(&written))));
    }

    /// The report once `done` accepts it.
    async fn report_once(&self, what: &str, done: impl Fn(&ShardReport) -> bool) -> ShardReport {
        let mut report = self.report().await;
        for _ in 0..1_000 {
            if done(&report) {
                return report;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
            report = self.report().await;
        }
        panic!("timed out waiting for {what}: {report:?}");
    }

    async fn report(&self) -> ShardReport {
        self.supervisor
            .send(DebugShards { keys: true })
            .await
            .expect("the supervisor answers")
    }
}

#[actix::test]
async fn alone_in_its_ring_it_publishes_starts_on_the_echo_and_is_ready() {
    let shell = Shell::start(LeaseStore::default(), vec![cronjob("team-a", "nightly")]);
    // It publishes the view of itself alone on its Lease...
    let written = shell.published().await;
    assert_eq!(
        written
            .spec
            .as_ref()
            .and_then(|s| s.holder_identity.as_deref()),
        Some("r0")
    );
    // ...but, its load done, runs nothing and is not ready until the
    // watch echoes it.
    let report = shell
        .report_once("the load", |r| r.loads_in_flight == 0 && r.owned == 1)
        .await;
    assert_eq!((report.running, report.waiting), (0, 1), "{report:?}");
    assert!(shell.readiness.readiness().is_err());

    shell
        .supervisor
        .do_send(LeaseWatch(Event::Apply(lease::observe(&written))));
    eventually("readiness after the echo", || {
        shell.readiness.readiness().ok()
    })
    .await;
    let report = shell.report().await;
    assert_eq!(report.view, ["r0"]);
    assert_eq!((report.owned, report.running), (1, 1), "{report:?}");
    assert_eq!(report.keys, Some(vec!["team-a/nightly".to_owned()]));
}

/// Churn's duplicates: a watch that comes back after a silence replays the
/// CronJob's old versions after the ring has changed, and the first one
/// spawns the gained key's actor before the bulk load's page arrives. The
/// page, a consistent list, has the previous owner's `lastScheduleTime`;
/// the replayed version does not, and an actor that kept it would start
/// the slot again (its Job already gone, with a history limit of 0).
#[actix::test]
async fn a_gained_key_decides_on_the_load_when_the_watch_replays_an_older_version() {
    // Yearly, on 1 January: this year's slot was due long ago.
    let year = Timestamp::now().to_zoned(jiff::tz::TimeZone::UTC).year();
    let slot = format!("{year}-01-01T00:00:00Z");
    let created = format!("{}-06-01T00:00:00Z", year - 1);
    let version = |resource_version: &str, status: Value| -> Value {
        json!({
            "metadata": {"namespace": "team-a", "name": "yearly", "uid": "uid-yearly",
                         "resourceVersion": resource_version, "generation": 1,
                         "creationTimestamp": created},
            "spec": {"schedule": "0 0 1 1 *", "timeZone": "Etc/UTC",
                     "successfulJobsHistoryLimit": 0, "failedJobsHistoryLimit": 0,
                     "jobTemplate": {"spec": {"template": {"spec": {"containers": []}}}}},
            "status": status,
        })
    };
    let recorded = version("5", json!({"lastScheduleTime": slot}));
    let replayed: LeanCronJob = serde_json::from_value(version("3", json!({}))).expect("a CronJob");
    let store = LeaseStore {
        listed: vec![recorded],
        list_delay: Duration::from_millis(500),
        ..LeaseStore::default()
    };
    let shell = Shell::start(store, vec![]);
    eventually("the bulk load's list", || {
        let asked = shell.asked.paths();
        asked
            .iter()
            .any(|a| a == "GET /apis/batch/v1/cronjobs")
            .then_some(())
    })
    .await;
    // The watch, catching up, delivers the old version while the list is
    // still on its way.
    shell.supervisor.do_send(CronJobWatch {
        scope: 0,
        kind: CronJobKind::Batch,
        generation: 0,
        event: Event::Apply(replayed),
    });
    let written = shell.published().await;
    shell
        .report_once("the load", |r| r.loads_in_flight == 0 && r.owned == 1)
        .await;
    shell
        .supervisor
        .do_send(LeaseWatch(Event::Apply(lease::observe(&written))));
    shell.report_once("the start", |r| r.running == 1).await;
    // Time for the first decision to reach the gateway, had it one to make.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let writes: Vec<String> = shell
        .asked
        .all()
        .into_iter()
        .filter(|a| !a.starts_with("GET") && !a.contains("/leases"))
        .collect();
    assert_eq!(writes, Vec::<String>::new(), "the slot started again");
}

/// A peer's Lease, renewed now, with `view` published on it.
fn peer_lease(name: &str, view: &str) -> Lease {
    serde_json::from_value(json!({
        "metadata": {"name": format!("ring.{name}"), "namespace": "shardcron-system", "resourceVersion": "1",
                     "annotations": {VIEW_ANNOTATION: view}},
        "spec": {"holderIdentity": name, "leaseDurationSeconds": 15},
    }))
    .expect("a Lease")
}

/// A replica that joins peers already serving (a restart in a rollout, a
/// scale-out) is ready only once its standby entries are loaded: a rollout
/// stops the next replica as soon as this one is ready, and the leaver's
/// keys that fall on it are read first from them. Its own keys run before.
#[actix::test]
async fn joining_serving_peers_it_is_ready_once_its_standby_entries_are_loaded() {
    // The first CronJob list is its own share's load; the next, the
    // standby load, is answered 2 s late.
    let store = LeaseStore {
        later_lists: Some((1, Duration::from_secs(2))),
        ..LeaseStore::default()
    };
    let shell = Shell::start_among(
        store,
        vec![cronjob("team-a", "nightly")],
        // r1 serves alone: r0's first view joins a running ring.
        vec![peer_lease("r1", "r1")],
    );
    shell.echo_published().await;
    // r1 gives its keys back.
    shell
        .supervisor
        .do_send(LeaseWatch(Event::Apply(lease::observe(&peer_lease(
            "r1", "r0,r1",
        )))));
    let report = shell
        .report_once("the standby load", |r| r.standby.loading)
        .await;
    assert_eq!(report.view, ["r0", "r1"]);
    assert_eq!(report.waiting, 0, "its own share runs: {report:?}");
    assert!(
        shell.readiness.readiness().is_err(),
        "ready before its standby entries are loaded"
    );
    eventually("readiness once the standby load is done", || {
        shell.readiness.readiness().ok()
    })
    .await;
    let report = shell.report().await;
    assert!(
        !report.standby.loading && report.standby.buckets_to_read == 0,
        "{report:?}"
    );
}

/// At a start of the whole ring a replica is ready once its share is
/// armed, and its standby load waits: every peer's first load is still
/// asking the server for its own share.
#[actix::test]
async fn starting_with_the_whole_ring_its_standby_load_waits_for_the_peers_first_loads() {
    let shell = Shell::start_among(
        LeaseStore::default(),
        vec![cronjob("team-a", "nightly")],
        // r1 starts too: its first view is the same ring.
        vec![peer_lease("r1", "r0,r1")],
    );
    shell.echo_published().await;
    eventually("readiness once the share is armed", || {
        shell.readiness.readiness().ok()
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let report = shell.report().await;
    assert_eq!(report.view, ["r0", "r1"]);
    assert!(
        !report.standby.loading && report.standby.buckets_to_read > 0,
        "no standby load yet: {report:?}"
    );
}

/// The keys a joining peer takes stay on standby here, from their actors'
/// last wake-ups: no standby load reads them again (in a rolling restart
/// every peer gives a returning replica back the share it held meanwhile).
#[actix::test]
async fn keys_given_to_a_peer_stay_on_standby_from_their_actors_without_a_read() {
    let shell = Shell::start_listing(spread_cronjobs("yearly", 16), None, vec![]);
    shell.echo_published().await;
    eventually("readiness alone", || shell.readiness.readiness().ok()).await;
    shell.report_once("its 16 keys", |r| r.running == 16).await;
    let lists = shell.store.lock().unwrap_or_else(|e| e.into_inner()).lists;

    shell
        .supervisor
        .do_send(LeaseWatch(Event::Apply(lease::observe(&peer_lease(
            "r1", "r0,r1",
        )))));
    let report = shell
        .report_once("the keys r1 took stopped", |r| {
            r.view == ["r0", "r1"] && r.stopping == 0 && r.owned < 16
        })
        .await;
    assert!(report.owned > 0, "the hash gave r1 every key: {report:?}");
    assert_eq!(report.standby.entries, 16 - report.owned, "{report:?}");
    assert_eq!(report.standby.buckets_to_read, 0, "{report:?}");
    // Time for a standby load to start, had it one to make.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let store = shell.store.lock().unwrap_or_else(|e| e.into_inner());
    assert_eq!(
        store.lists,
        lists,
        "a standby list: {:?}",
        shell.asked.paths()
    );
}

/// A peer leaves: the keys gained from it are suspended (standby says
/// they never fall due), so none is read alone and the view that leaves
/// it out is published at once, its bulk load still in flight: the
/// leaver lets go without waiting for the load.
#[actix::test]
async fn leaving_out_a_leaver_it_publishes_before_its_load_when_nothing_is_due_soon() {
    let mut listed = spread_cronjobs("suspended", 16);
    for cronjob in &mut listed {
        cronjob["spec"]["suspend"] = json!(true);
    }
    // Lists: its own share's load, the standby load, then the load of the
    // leaver's keys, answered 10 s late.
    let shell = Shell::start_listing(
        listed,
        Some((2, Duration::from_secs(10))),
        // r1 serves alone: r0 joins a running ring, and its readiness
        // waits for its standby load.
        vec![peer_lease("r1", "r1")],
    );
    shell.echo_published().await;
    shell
        .supervisor
        .do_send(LeaseWatch(Event::Apply(lease::observe(&peer_lease(
            "r1", "r0,r1",
        )))));
    eventually("readiness with standby", || {
        shell.readiness.readiness().ok()
    })
    .await;
    let report = shell.report().await;
    assert!(
        report.standby.entries > 0 && report.owned < 16,
        "the hash gave r1 no key: {report:?}"
    );

    let leaving = leaving_lease("r1", "r0,r1");
    shell
        .supervisor
        .do_send(LeaseWatch(Event::Apply(lease::observe(&leaving))));
    let report = shell
        .report_once("the view without the leaver", |r| {
            r.view == ["r0"] && r.published
        })
        .await;
    assert_eq!(report.loads_in_flight, 1, "{report:?}");
    let on_the_lease = shell.published().await;
    assert_eq!(
        on_the_lease
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(VIEW_ANNOTATION)),
        Some(&"r0".to_owned())
    );
}

/// A replica's Lease that says it is leaving.
fn leaving_lease(name: &str, view: &str) -> Lease {
    let mut lease = peer_lease(name, view);
    lease
        .metadata
        .annotations
        .get_or_insert_default()
        .insert(lease::LEAVING_ANNOTATION.into(), "true".into());
    lease
}

/// A peer leaves and comes back (a rolling restart): the buckets it
/// took off this replica's standby while away are back on its own, and a
/// standby load of them still in flight stops instead of reading, for
/// nothing, CronJobs beside the returning replica's own loads.
#[actix::test]
async fn a_standby_load_stops_when_its_buckets_leave_standby() {
    // Lists: its own share's load, the standby load, the load of the
    // leaver's keys, then the standby load of the buckets the leave put on
    // standby, answered a minute late.
    let view = "r0,r1,r2";
    let shell = Shell::start_listing(
        spread_cronjobs("yearly", 64),
        Some((3, Duration::from_secs(60))),
        // r1 and r2 serve without r0: it joins a running ring, and its
        // readiness waits for its standby load.
        vec![peer_lease("r1", "r1,r2"), peer_lease("r2", "r1,r2")],
    );
    shell.echo_published().await;
    for peer in ["r1", "r2"] {
        shell
            .supervisor
            .do_send(LeaseWatch(Event::Apply(lease::observe(&peer_lease(
                peer, view,
            )))));
    }
    eventually("readiness with standby", || {
        shell.readiness.readiness().ok()
    })
    .await;

    let observe = |lease: &Lease| LeaseWatch(Event::Apply(lease::observe(lease)));
    shell
        .supervisor
        .do_send(observe(&leaving_lease("r2", view)));
    shell
        .supervisor
        .do_send(observe(&peer_lease("r1", "r0,r1")));
    let report = shell
        .report_once("the standby load the leave asked for", |r| {
            r.view == ["r0", "r1"] && r.standby.loading
        })
        .await;
    assert!(report.standby.buckets_to_read > 0, "{report:?}");

    shell.supervisor.do_send(observe(&peer_lease("r2", view)));
    shell.supervisor.do_send(observe(&peer_lease("r1", view)));
    let report = shell
        .report_once("the standby load stopped", |r| {
            r.view == ["r0", "r1", "r2"] && !r.standby.loading
        })
        .await;
    assert_eq!(report.standby.buckets_to_read, 0, "{report:?}");
}
