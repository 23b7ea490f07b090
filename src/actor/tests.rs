//! A CronJob's actor on the scripted API seam: the real gateway over a
//! scripted API server, the actor started and stopped as the supervisor
//! does it. The decision's own cases are in `apply`'s and `reconcile`'s
//! tables; this checks that the actor carries a decision out and reports.

use super::cronjob::{CronJobActor, Update};
use super::runtime::{CellRef, CellThread};
use super::services::{ActorReport, ActorServices};
use super::wheel::TimerWheel;
use crate::apiserver::gateway::{Gateway, Limits};
use crate::apiserver::lean_cronjob::LeanCronJob;
use crate::apiserver::scripted::{self, Answer};
use crate::apiserver::write_fence::WriteFence;
use crate::clock::Clock;
use crate::telemetry::Metrics;
use actix::prelude::*;
use jiff::{Timestamp, ToSpan};
use kube::runtime::events::Reporter;
use serde_json::{Value, json};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc;

/// The replica's fence, shut by the test when it likes (a lapse).
#[derive(Clone, Default)]
struct Fence(Arc<AtomicBool>);

impl WriteFence for Fence {
    /// Open for a short while at a time, so that a shut is noticed soon.
    fn valid_for(&self) -> Option<Duration> {
        (!self.0.load(Ordering::SeqCst)).then_some(Duration::from_millis(10))
    }
}

impl Fence {
    fn shut(&self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// Stands in for the supervisor: passes the actor's reports to the test.
struct Reports(mpsc::UnboundedSender<ActorReport>);

impl Actor for Reports {
    type Context = Context<Self>;
}

impl Handler<ActorReport> for Reports {
    type Result = ();

    fn handle(&mut self, report: ActorReport, _: &mut Self::Context) {
        let _ = self.0.send(report);
    }
}

/// An every-minute CronJob created 90 s ago: a slot is due at once.
fn cronjob(created: Timestamp) -> LeanCronJob {
    serde_json::from_value(json!({
        "metadata": {"namespace": "team-a", "name": "nightly", "uid": "uid-nightly",
                     "resourceVersion": "5", "generation": 1,
                     "creationTimestamp": created.to_string()},
        "spec": {"schedule": "* * * * *",
                 "jobTemplate": {"spec": {"template": {"spec": {"containers": []}}}}},
    }))
    .expect("a CronJob")
}

/// Echoes a write back as the server's answer, with a UID and a version.
fn echo(request: &scripted::Request, code: u16) -> Answer {
    let Ok(mut object) = serde_json::from_slice::<Value>(&request.body) else {
        return scripted::status(400, "BadRequest");
    };
    object["metadata"]["uid"] = json!("uid-job");
    object["metadata"]["resourceVersion"] = json!("6");
    Answer::Json(code, object)
}

/// A started actor, what its server was asked, and its reports.
type Started = (
    CellRef<CronJobActor>,
    scripted::Asked,
    mpsc::UnboundedReceiver<ActorReport>,
);

/// Starts the actor of `cronjob` on a gateway over `script`.
fn start(
    cronjob: &LeanCronJob,
    script: impl Fn(&scripted::Request) -> Answer + Send + Sync + 'static,
) -> Started {
    start_with(cronjob, None, Fence::default(), script)
}

/// [`start`], the actor knowing `known_slot` and writing behind `fence`.
fn start_with(
    cronjob: &LeanCronJob,
    known_slot: Option<Timestamp>,
    fence: Fence,
    script: impl Fn(&scripted::Request) -> Answer + Send + Sync + 'static,
) -> Started {
    start_on(Clock::System, cronjob, known_slot, fence, script)
}

/// [`start_with`], the actor reading `clock`.
fn start_on(
    clock: Clock,
    cronjob: &LeanCronJob,
    known_slot: Option<Timestamp>,
    fence: Fence,
    script: impl Fn(&scripted::Request) -> Answer + Send + Sync + 'static,
) -> Started {
    let wheel = TimerWheel::start(clock);
    start_on_wheel(clock, wheel, cronjob, known_slot, fence, script)
}

/// [`start_on`], arming its wake-ups on `wheel`.
fn start_on_wheel(
    clock: Clock,
    wheel: TimerWheel<CronJobActor>,
    cronjob: &LeanCronJob,
    known_slot: Option<Timestamp>,
    fence: Fence,
    script: impl Fn(&scripted::Request) -> Answer + Send + Sync + 'static,
) -> Started {
    let limits = Limits::default();
    start_paced(clock, wheel, limits, cronjob, known_slot, fence, script)
}

/// [`start_on_wheel`], its gateway paced by `limits`.
fn start_paced(
    clock: Clock,
    wheel: TimerWheel<CronJobActor>,
    limits: Limits,
    cronjob: &LeanCronJob,
    known_slot: Option<Timestamp>,
    fence: Fence,
    script: impl Fn(&scripted::Request) -> Answer + Send + Sync + 'static,
) -> Started {
    let (client, asked) = scripted::client(script);
    let metrics = Arc::new(Metrics::new());
    let reporter = Reporter {
        controller: "shardcron".into(),
        instance: Some("r0".into()),
    };
    let gateway = Gateway::start(client, limits, reporter, metrics.clone(), Arc::new(fence));
    let (sender, reports) = mpsc::unbounded_channel();
    let actor_services = Arc::new(ActorServices {
        feed: Default::default(),
        gateway,
        reports: Reports(sender).start().recipient(),
        metrics,
        default_zone: jiff::tz::TimeZone::UTC,
        slot_history: true,
        replica: "r0".into(),
        clock,
    });
    let actor = CronJobActor::new(cronjob, Vec::new(), known_slot, actor_services, wheel)
        .expect("a usable CronJob");
    let dispatcher = CellThread::start(&Arbiter::current(), Default::default());
    (dispatcher.start_actor(actor), asked, reports)
}

/// Waits up to `within` for the actor's next report, which must be `Armed`.
async fn expect_armed(reports: &mut mpsc::UnboundedReceiver<ActorReport>, within: Duration) {
    let report = tokio::time::timeout(within, reports.recv()).await;
    assert!(
        matches!(report, Ok(Some(ActorReport::Armed { .. }))),
        "{report:?}"
    );
}

#[actix::test]
async fn started_it_creates_the_due_slots_job_records_it_in_status_and_reports_armed() {
    // Created 59 s before the minute just begun: one slot due, none missed
    // (a missed one is written in the slot history).
    let now = Timestamp::now().as_second();
    let created = Timestamp::from_second(now - now % 60 - 59).expect("an instant");
    let bodies = Arc::new(Mutex::new(Vec::<Value>::new()));
    let written = bodies.clone();
    let (actor, asked, mut reports) = start(&cronjob(created), move |request| {
        let keep = || {
            let body = serde_json::from_slice(&request.body).unwrap_or_default();
            written.lock().unwrap_or_else(|e| e.into_inner()).push(body);
        };
        match request.method.as_str() {
            "POST" if request.path().ends_with("/namespaces/team-a/jobs") => {
                keep();
                echo(request, 201)
            }
            "PATCH" if request.path().ends_with("/cronjobs/nightly/status") => {
                keep();
                echo(request, 200)
            }
            // Events.
            "POST" => echo(request, 201),
            _ => scripted::status(404, "NotFound"),
        }
    });
    actor.post(Update::Start {
        ran_elsewhere: false,
    });
    let report = tokio::time::timeout(Duration::from_secs(20), reports.recv()).await;
    assert!(
        matches!(report, Ok(Some(ActorReport::Armed { ref key })) if &**key == "team-a/nightly"),
        "{report:?}"
    );

    let asked = asked.paths();
    let writes: Vec<&String> = asked.iter().filter(|a| !a.contains("/events")).collect();
    assert_eq!(
        writes,
        [
            "POST /apis/batch/v1/namespaces/team-a/jobs",
            "PATCH /apis/batch/v1/namespaces/team-a/cronjobs/nightly/status"
        ],
        "{asked:?}"
    );
    // The Job is named by its slot (minutes since the epoch, as upstream),
    // a minute boundary since the CronJob's creation, and the status write
    // records it as the last schedule and as active.
    let bodies = bodies.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let job_name = bodies[0]["metadata"]["name"].as_str().unwrap_or_default();
    let slot = slot_of(job_name);
    assert!(created < slot && slot <= Timestamp::now(), "{slot}");
    let status = &bodies[1]["status"];
    assert_eq!(
        status["lastScheduleTime"],
        json!(slot.to_string()),
        "{status}"
    );
    assert_eq!(status["active"][0]["name"], json!(job_name), "{status}");
    actor.post(Update::Stop);
    let stopped = tokio::time::timeout(Duration::from_secs(5), reports.recv()).await;
    assert!(
        matches!(stopped, Ok(Some(ActorReport::Stopped { ref uid, .. })) if &**uid == "uid-nightly")
    );
}

/// 2024-03-01T09:29:30Z now, then as tokio's clock (paused, it moves only
/// when the test sleeps or everything waits).
fn paused_clock() -> Clock {
    Clock::following_tokio("2024-03-01T09:29:30Z".parse().expect("a time"))
}

/// The Job creates asked so far.
fn creates(asked: &scripted::Asked) -> usize {
    asked
        .paths()
        .iter()
        .filter(|a| a.ends_with("/jobs"))
        .count()
}

#[actix::test]
async fn on_a_paused_clock_the_next_slot_starts_at_its_time_and_not_before() {
    tokio::time::pause();
    let clock = paused_clock();
    let begins = clock.now();
    // Created at 09:29:00: no slot is due; the first is 09:30:00, 30 s on.
    let created: Timestamp = "2024-03-01T09:29:00Z".parse().expect("a time");
    let (actor, asked, mut reports) = start_on(
        clock,
        &cronjob(created),
        None,
        Fence::default(),
        |request| echo(request, 201),
    );
    actor.post(Update::Start {
        ran_elsewhere: false,
    });
    expect_armed(&mut reports, Duration::from_secs(5)).await;
    assert_eq!(creates(&asked), 0, "{:?}", asked.paths());
    tokio::time::sleep(Duration::from_secs(29)).await;
    assert_eq!(creates(&asked), 0, "before 09:30: {:?}", asked.paths());
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(creates(&asked), 1, "at 09:30: {:?}", asked.paths());
    assert!(clock.now().duration_since(begins) < jiff::SignedDuration::from_secs(32));
    actor.post(Update::Stop);
}

#[actix::test]
async fn an_idle_actor_holds_one_wake_up_on_the_wheel_and_takes_it_away_when_told_to_stop_and_reports_it()
 {
    tokio::time::pause();
    let created: Timestamp = "2024-03-01T09:29:00Z".parse().expect("a time");
    let clock = paused_clock();
    let wheel = TimerWheel::start(clock);
    let (actor, _, mut reports) = start_on_wheel(
        clock,
        wheel.clone(),
        &cronjob(created),
        None,
        Fence::default(),
        |request| echo(request, 201),
    );
    actor.post(Update::Start {
        ran_elsewhere: false,
    });
    expect_armed(&mut reports, Duration::from_secs(5)).await;
    assert_eq!(wheel.len(), 1, "armed for 09:30");
    actor.post(Update::Stop);
    let report = tokio::time::timeout(Duration::from_secs(5), reports.recv()).await;
    // Its next look goes with its stop report: the supervisor keeps it as
    // a standby entry when the key went to a peer.
    let nine_thirty: Timestamp = "2024-03-01T09:30:00Z".parse().expect("a time");
    assert!(
        matches!(report, Ok(Some(ActorReport::Stopped { next_look: Some(at), .. })) if at == nine_thirty),
        "{report:?}"
    );
    assert!(wheel.is_empty(), "a stopped actor leaves no wake-up behind");
}

/// A server that never answers a Job create (and echoes the rest).
fn silent_creates(request: &scripted::Request) -> Answer {
    if request.method == "POST" && request.path().ends_with("/jobs") {
        Answer::Silence
    } else {
        echo(request, 201)
    }
}

/// Returns once the due slot's create has been sent.
async fn create_sent(asked: &scripted::Asked) {
    let sent = async {
        while !asked.paths().iter().any(|a| a.ends_with("/jobs")) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(30), sent)
        .await
        .expect("the due slot's create is sent");
}

#[actix::test]
async fn stopped_while_its_create_gets_no_answer_it_stops_within_the_writes_deadline() {
    tokio::time::pause();
    let (actor, asked, mut reports) =
        start(&cronjob(Timestamp::now() - 90.seconds()), silent_creates);
    actor.post(Update::Start {
        ran_elsewhere: false,
    });
    create_sent(&asked).await;
    let stopping = tokio::time::Instant::now();
    actor.post(Update::Stop);
    loop {
        match tokio::time::timeout(Duration::from_secs(120), reports.recv()).await {
            Ok(Some(ActorReport::Stopped { .. })) => break,
            Ok(Some(ActorReport::Armed { .. })) => continue,
            other => panic!("no Stopped report: {other:?}"),
        }
    }
    // The request already sent finishes (or times out); nothing after it
    // is sent, then or later: no retry of the create, no status write.
    let write = crate::apiserver::deadline::WRITE;
    assert!(stopping.elapsed() <= write, "{:?}", stopping.elapsed());
    tokio::time::sleep(2 * write).await;
    let asked = asked.paths();
    let creates = asked.iter().filter(|a| a.ends_with("/jobs")).count();
    assert_eq!(creates, 1, "{asked:?}");
    assert!(!asked.iter().any(|a| a.contains("/status")), "{asked:?}");
}

/// The churn test's last duplicates: a create handed to the client just
/// before the fence lapsed waited there (for a connection through a
/// silent network) and went out when the network healed, 22 s later,
/// after a peer had taken the CronJob over, run the slot and seen its Job
/// deleted. A request still unanswered when the fence lapses is dropped
/// then, not at its deadline.
#[actix::test]
async fn a_create_unanswered_when_the_fence_lapses_is_dropped_at_the_lapse() {
    tokio::time::pause();
    let fence = Fence::default();
    let lapse = fence.clone();
    let cronjob = cronjob(Timestamp::now() - 90.seconds());
    let (actor, asked, mut reports) = start_with(&cronjob, None, fence, silent_creates);
    actor.post(Update::Start {
        ran_elsewhere: false,
    });
    create_sent(&asked).await;
    let lapsed_at = tokio::time::Instant::now();
    lapse.shut();
    // The decision ends (and the actor arms its retry) at the lapse, not
    // at the create's 30 s deadline.
    expect_armed(&mut reports, Duration::from_secs(60)).await;
    assert!(
        lapsed_at.elapsed() < Duration::from_secs(1),
        "{:?}",
        lapsed_at.elapsed()
    );
    let creates = asked
        .paths()
        .iter()
        .filter(|a| a.ends_with("/jobs"))
        .count();
    assert_eq!(creates, 1, "nothing is sent behind a lapsed fence");
    actor.post(Update::Stop);
}

/// The slot named by a Job's name (`<cronjob>-<Unix minutes>`).
fn slot_of(job_name: &str) -> Timestamp {
    job_name
        .rsplit_once('-')
        .and_then(|(_, minutes)| minutes.parse::<i64>().ok())
        .and_then(|minutes| Timestamp::from_second(minutes * 60).ok())
        .unwrap_or_else(|| panic!("a slot's Job name: {job_name}"))
}

/// The duplicate the churn test found: the fence lapses between a create
/// and the status write that records it; the actor stops; by the time the
/// replica runs the CronJob again, its Job has finished and been deleted
/// (no history kept), so neither the listed status nor a Job shows the
/// slot. The stopped actor reports the slot, and the next one records it
/// instead of creating its Job again.
#[actix::test]
async fn a_slot_whose_status_write_was_fenced_is_recorded_by_the_next_actor_not_started_again() {
    let cronjob = cronjob(Timestamp::now() - 90.seconds());
    let fence = Fence::default();
    let lapse = fence.clone();
    let created_name = Arc::new(Mutex::new(String::new()));
    let name = created_name.clone();
    let (first, asked, mut reports) = start_with(&cronjob, None, fence, move |request| {
        if request.method == "POST" && request.path().ends_with("/jobs") {
            let body: Value = serde_json::from_slice(&request.body).unwrap_or_default();
            let job_name = body["metadata"]["name"].as_str().unwrap_or_default();
            *name.lock().unwrap_or_else(|e| e.into_inner()) = job_name.to_owned();
            lapse.shut();
            echo(request, 201)
        } else {
            echo(request, 200)
        }
    });
    first.post(Update::Start {
        ran_elsewhere: false,
    });
    expect_armed(&mut reports, Duration::from_secs(20)).await;
    first.post(Update::Stop);
    let stopped = match tokio::time::timeout(Duration::from_secs(20), reports.recv()).await {
        Ok(Some(ActorReport::Stopped { unrecorded, .. })) => unrecorded,
        other => panic!("no Stopped report: {other:?}"),
    };
    let created: Vec<String> = asked
        .paths()
        .into_iter()
        .filter(|a| !a.contains("/events"))
        .collect();
    assert_eq!(created, ["POST /apis/batch/v1/namespaces/team-a/jobs"]);
    let slot = stopped.expect("the stopped actor reports the unrecorded slot");
    let job_name = created_name
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    assert_eq!(slot, slot_of(&job_name));

    // The next actor, from the same listed CronJob and no Job at all.
    let written = Arc::new(Mutex::new(Vec::<Value>::new()));
    let keep = written.clone();
    let (next, asked, mut reports) =
        start_with(&cronjob, Some(slot), Fence::default(), move |request| {
            if request.method == "PATCH" {
                let body = serde_json::from_slice(&request.body).unwrap_or_default();
                keep.lock().unwrap_or_else(|e| e.into_inner()).push(body);
            }
            echo(request, 201)
        });
    next.post(Update::Start {
        ran_elsewhere: false,
    });
    expect_armed(&mut reports, Duration::from_secs(20)).await;
    let writes: Vec<String> = asked
        .paths()
        .into_iter()
        .filter(|a| !a.contains("/events"))
        .collect();
    assert_eq!(
        writes,
        ["PATCH /apis/batch/v1/namespaces/team-a/cronjobs/nightly/status"],
        "no second create"
    );
    let written = written.lock().unwrap_or_else(|e| e.into_inner()).clone();
    assert_eq!(
        written[0]["status"]["lastScheduleTime"],
        json!(slot.to_string()),
        "{written:?}"
    );
    next.post(Update::Stop);
}

/// A slot's status write waits for its turn (one write a second here, the
/// create took the first) and its Job ends meanwhile: the write gives way,
/// and one write records both the slot and the end (upstream writes two),
/// with upstream's events for both.
#[actix::test]
async fn a_job_that_ends_before_its_slots_status_write_is_sent_is_written_with_it_once() {
    // Five seconds past a slot on a clock that then runs as the real one:
    // the next slot, 55 s away, never falls inside the test (on the system
    // clock, a start in a minute's last seconds saw it write that slot too).
    let clock = Clock::following_tokio("2024-03-01T09:30:05Z".parse().expect("a time"));
    let cronjob = cronjob(clock.now() - 90.seconds());
    // The bodies of the Job created, the status writes and the events.
    let sent = Arc::new(Mutex::new(Vec::<(String, Value)>::new()));
    let keep = sent.clone();
    let one_a_second = Limits { qps: 1.0, burst: 1 };
    let wheel = TimerWheel::start(clock);
    let (actor, asked, mut reports) = start_paced(
        clock,
        wheel,
        one_a_second,
        &cronjob,
        None,
        Fence::default(),
        move |request| {
            let body = serde_json::from_slice(&request.body).unwrap_or_default();
            let what = request
                .path()
                .rsplit('/')
                .next()
                .unwrap_or_default()
                .to_owned();
            keep.lock()
                .unwrap_or_else(|e| e.into_inner())
                .push((what, body));
            echo(request, 201)
        },
    );
    let sent_as = |what: &str| -> Vec<Value> {
        let sent = sent.lock().unwrap_or_else(|e| e.into_inner());
        sent.iter()
            .filter(|(w, _)| w == what)
            .map(|(_, body)| body.clone())
            .collect()
    };
    actor.post(Update::Start {
        ran_elsewhere: false,
    });
    create_sent(&asked).await;
    let job_name = sent_as("jobs")[0]["metadata"]["name"]
        .as_str()
        .expect("the Job's name")
        .to_owned();
    let slot = slot_of(&job_name);
    let ended = crate::reconcile::JobSummary {
        name: job_name,
        uid: "uid-job".into(),
        start_time: Some(slot),
        completion_time: Some(slot + 1.second()),
        finished: Some(crate::reconcile::Finished::Complete),
        failed_at: None,
        failure_reason: None,
        succeeded: true,
        scheduled: Some(slot),
        deleting: false,
        held: false,
    };
    actor.post(Update::Job {
        job: ended,
        relisted: false,
    });
    expect_armed(&mut reports, Duration::from_secs(20)).await;
    let both_events = async {
        while sent_as("events").len() < 2 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(20), both_events)
        .await
        .expect("both events");
    // Time for a second status write, if there were one.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let statuses = sent_as("status");
    assert_eq!(statuses.len(), 1, "{statuses:?}");
    let status = &statuses[0]["status"];
    assert_eq!(
        status["lastScheduleTime"],
        json!(slot.to_string()),
        "{status}"
    );
    assert_eq!(status["active"], Value::Null, "none running: {status}");
    let completed = (slot + 1.second()).to_string();
    assert_eq!(status["lastSuccessfulTime"], json!(completed), "{status}");
    let reasons: Vec<Value> = sent_as("events")
        .iter()
        .map(|e| e["reason"].clone())
        .collect();
    assert_eq!(
        reasons,
        [json!("SuccessfulCreate"), json!("SawCompletedJob")]
    );
    actor.post(Update::Stop);
}

/// An actor's cell (its state, mailbox and dispatcher handle, with the
/// `Arc`'s counts) is one allocation per CronJob. mimalloc rounds it up to
/// its size class: 320 bytes, the next class is 384. A field that grows the
/// cell past 320 costs 64 bytes a CronJob (64 MB at 10^6): box it, or shrink
/// another (the instants it keeps are `CompactTime`s for this reason).
#[test]
fn a_cronjob_actor_fits_its_allocator_size_class() {
    let cell = super::runtime::cell_size::<CronJobActor>();
    assert!(cell <= 320, "a CronJob actor's cell is {cell} bytes");
}
