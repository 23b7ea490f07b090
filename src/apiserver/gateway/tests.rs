//! A request's path through the gateway on the scripted API seam, on a
//! paused clock: what a stop does to requests still waiting for a turn.

use super::*;
use crate::apiserver::failure::ApiFailure;
use crate::apiserver::lean_job::LeanJob;
use crate::apiserver::requests::{JobRequests, StatusFor};
use crate::apiserver::scripted::{self, Answer};
use crate::reconcile::CronJobKind;
use crate::reconcile::NewJob;
use k8s_openapi::api::batch::v1::{CronJobStatus, Job};
use serde_json::json;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// A fence that is always open.
struct Open;

impl WriteFence for Open {
    fn valid_for(&self) -> Option<Duration> {
        Some(Duration::from_secs(3_600))
    }
}

/// Answers a create with its body and a status write with a CronJob.
fn answer(request: &scripted::Request) -> Answer {
    if request.method == "PATCH" {
        return Answer::Json(
            200,
            json!({"metadata": {"name": "report", "namespace": "moved", "resourceVersion": "2"},
                   "spec": {"schedule": "* * * * *", "jobTemplate": {}}}),
        );
    }
    let body = serde_json::from_slice(&request.body).unwrap_or_default();
    Answer::Json(201, body)
}

fn job(name: &str) -> NewJob {
    serde_json::from_value::<Job>(json!({"metadata": {"name": name}}))
        .expect("a Job")
        .into()
}

/// One token a second and no burst to speak of: each request waits for
/// the ones queued ahead of it in its class and the classes above.
fn gateway() -> (Gateway, scripted::Asked) {
    gateway_fenced_by(Arc::new(Open))
}

fn gateway_fenced_by(fence: Arc<dyn WriteFence>) -> (Gateway, scripted::Asked) {
    let (client, asked) = scripted::client(answer);
    let gateway = Gateway::start(
        client,
        Limits { qps: 1.0, burst: 1 },
        Reporter {
            controller: "shardcron".into(),
            instance: Some("r0".into()),
        },
        Arc::new(Metrics::new()),
        fence,
    );
    (gateway, asked)
}

/// A fence that lets the first question through and no other: the
/// replica passes the check before a request, then is frozen (SIGSTOP)
/// before the request is first polled, and wakes with its Lease lapsed.
struct LapsesAfterTheCheck(std::sync::atomic::AtomicUsize);

impl WriteFence for LapsesAfterTheCheck {
    fn valid_for(&self) -> Option<Duration> {
        let asked = self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        (asked == 0).then_some(Duration::from_secs(10))
    }
}

/// A create that passed the fence is not handed to the client once the
/// fence has lapsed (the fence is asked first at every poll). On this seam
/// the request reaches the server only at a later poll, so the old order
/// (the answer first) passes too: this guards the property, it did not
/// reproduce the churn test's two slots run twice (issue 40's note).
#[tokio::test(start_paused = true)]
async fn a_create_that_passed_the_fence_is_not_sent_once_it_lapsed() {
    let (gateway, asked) = gateway_fenced_by(Arc::new(LapsesAfterTheCheck(Default::default())));
    let created = gateway.create_job("team-a", job("nightly-29000000")).await;
    assert!(matches!(created, Err(ApiFailure::Fenced)), "{created:?}");
    assert_eq!(
        asked.all(),
        Vec::<String>::new(),
        "nothing reached the server"
    );
}

/// `shardcron queues` on a replica that has sent nothing yet: the rate is
/// the configured one, not 0.
#[tokio::test(start_paused = true)]
async fn a_gateway_that_sent_nothing_reports_its_configured_rate() {
    let (gateway, _) = gateway();
    let (rate, census) = gateway.queues();
    assert_eq!(rate, 1.0);
    assert!(census.iter().all(|class| class.waiting == 0), "{census:?}");
}

/// A herd in `namespace`: five creates, queued now.
fn herd(
    gateway: &Gateway,
    namespace: &'static str,
) -> Vec<tokio::task::JoinHandle<Result<LeanJob, ApiFailure>>> {
    (0..5)
        .map(|i| {
            let gateway = gateway.clone();
            tokio::spawn(async move { gateway.create_job(namespace, job(&format!("j{i}"))).await })
        })
        .collect()
}

/// Finding 5 under a herd: a CronJob moving to another replica had created
/// its Job, and the status write that records it waits in the status class
/// behind its namespace's herd of creates. The hand-off waits for that
/// write, so the stop moves it ahead of them instead of leaving it minutes
/// behind.
#[tokio::test(start_paused = true)]
async fn a_stopping_senders_slot_record_goes_ahead_of_the_queued_creates() {
    let (gateway, asked) = gateway();
    let herd = herd(&gateway, "moved");
    tokio::time::sleep(Duration::from_millis(100)).await;
    let stop = CancellationToken::new();
    let moving = gateway.abandoning_on(stop.clone()).unabandoned();
    let record = tokio::spawn(async move { routine_status_write(&moving).await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let stopped_at = tokio::time::Instant::now();
    stop.cancel();
    record
        .await
        .expect("the task")
        .expect("the record is written, not abandoned");
    assert!(
        stopped_at.elapsed() <= Duration::from_secs(1),
        "it waited {:?}: behind the herd",
        stopped_at.elapsed()
    );
    // The burst's token went to the first create; the next one to it.
    let order = asked.paths();
    let patched = order.iter().position(|a| a.starts_with("PATCH"));
    assert_eq!(patched, Some(1), "{order:?}");
    for create in herd {
        create.await.expect("the task").expect("a herd's create");
    }
}

/// The control: a sender that does not stop leaves its status write in
/// its class, behind every create of its namespace.
#[tokio::test(start_paused = true)]
async fn a_routine_status_write_waits_behind_its_namespaces_creates() {
    let (gateway, asked) = gateway();
    let herd = herd(&gateway, "moved");
    tokio::time::sleep(Duration::from_millis(100)).await;
    let staying = gateway
        .abandoning_on(CancellationToken::new())
        .unabandoned();
    routine_status_write(&staying).await.expect("written");
    let order = asked.paths();
    assert_eq!(
        order.iter().position(|a| a.starts_with("PATCH")),
        Some(5),
        "{order:?}"
    );
    for create in herd {
        create.await.expect("the task").expect("a herd's create");
    }
}

/// A slot's status write waiting behind a herd gives way when the Job
/// ends: it is never sent.
#[tokio::test(start_paused = true)]
async fn a_status_write_waiting_for_its_turn_gives_way_unsent_to_a_newer_decision() {
    let (gateway, asked) = gateway();
    let herd = herd(&gateway, "moved");
    tokio::time::sleep(Duration::from_millis(100)).await;
    let job_ended = CancellationToken::new();
    let writer = gateway
        .abandoning_on(CancellationToken::new())
        .unabandoned()
        .giving_way_to(job_ended.clone());
    let write = tokio::spawn(async move { routine_status_write(&writer).await });
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    job_ended.cancel();
    let written = write.await.expect("the task");
    assert!(matches!(written, Err(ApiFailure::GaveWay)), "{written:?}");
    for create in herd {
        create.await.expect("the task").expect("a herd's create");
    }
    let order = asked.paths();
    assert!(order.iter().all(|a| !a.starts_with("PATCH")), "{order:?}");
}

/// A stop wins: the sender's next owner waits for the slot's record, so a
/// write hurried by the stop goes out even if the Job ends meanwhile.
#[tokio::test(start_paused = true)]
async fn a_status_write_hurried_by_a_stop_no_longer_gives_way() {
    let (gateway, asked) = gateway();
    let herd = herd(&gateway, "moved");
    tokio::time::sleep(Duration::from_millis(100)).await;
    let (stop, job_ended) = (CancellationToken::new(), CancellationToken::new());
    let writer = gateway
        .abandoning_on(stop.clone())
        .unabandoned()
        .giving_way_to(job_ended.clone());
    let write = tokio::spawn(async move { routine_status_write(&writer).await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    stop.cancel();
    tokio::time::sleep(Duration::from_millis(100)).await;
    job_ended.cancel();
    write.await.expect("the task").expect("written");
    assert!(asked.paths().iter().any(|a| a.starts_with("PATCH")));
    for create in herd {
        create.await.expect("the task").expect("a herd's create");
    }
}

/// A routine status write of CronJob moved/report at resourceVersion 1.
async fn routine_status_write(
    requests: &impl JobRequests,
) -> Result<crate::apiserver::lean_cronjob::LeanCronJob, crate::apiserver::failure::ApiFailure> {
    requests
        .write_status(
            CronJobKind::Batch,
            "moved",
            "report",
            Some("1"),
            &CronJobStatus::default(),
            StatusFor::Routine,
        )
        .await
}

/// The admin API's question: where does CronJob moved/report's request
/// wait? Behind its namespace's creates still queued, in the status class;
/// its turn comes at the gateway's rate.
#[tokio::test(start_paused = true)]
async fn a_cronjobs_queued_request_is_found_with_what_is_ahead_of_it() {
    let (gateway, _) = gateway();
    let herd = herd(&gateway, "moved");
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(gateway.queued("moved/report"), None, "nothing sent yet");
    let keyed = gateway.for_key("moved/report");
    let write = tokio::spawn(async move { routine_status_write(&keyed).await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let queued = gateway.queued("moved/report").expect("queued");
    // The burst's one token went to the first create: four are left ahead.
    assert_eq!((queued.class, queued.ahead), ("status", 4));
    assert_eq!(queued.rate, 1.0);
    assert_eq!(queued.expected_wait(), Duration::from_secs(5));
    assert_eq!(gateway.queued("other/cronjob"), None);
    write.await.expect("the task").expect("written");
    assert_eq!(gateway.queued("moved/report"), None, "granted and gone");
    for create in herd {
        create.await.expect("the task").expect("a herd's create");
    }
}

/// Another namespace's herd takes turns with a status write: one of its
/// creates goes before it, not all of them.
#[tokio::test(start_paused = true)]
async fn another_namespaces_herd_takes_turns_with_a_status_write() {
    let (gateway, asked) = gateway();
    let herd = herd(&gateway, "herd");
    tokio::time::sleep(Duration::from_millis(100)).await;
    let keyed = gateway.for_key("moved/report");
    let write = tokio::spawn(async move { routine_status_write(&keyed).await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let queued = gateway.queued("moved/report").expect("queued");
    assert_eq!((queued.class, queued.ahead), ("status", 1));
    write.await.expect("the task").expect("written");
    let order = asked.paths();
    assert_eq!(
        order.iter().position(|a| a.starts_with("PATCH")),
        Some(2),
        "{order:?}"
    );
    for create in herd {
        create.await.expect("the task").expect("a herd's create");
    }
}

/// Upstream's spam filter: of one CronJob's 30 Events told at once, 25
/// are sent and 5 held back (counted); another CronJob's are its own.
#[tokio::test(start_paused = true)]
async fn a_cronjobs_events_past_its_budget_are_held_back() {
    use crate::reconcile::Event;
    use k8s_openapi::api::core::v1::ObjectReference;
    let (client, asked) = scripted::client(answer);
    let metrics = Arc::new(Metrics::new());
    let gateway = Gateway::start(
        client,
        Limits {
            qps: 1_000.0,
            burst: 100,
        },
        Reporter {
            controller: "shardcron".into(),
            instance: Some("r0".into()),
        },
        metrics.clone(),
        Arc::new(Open),
    );
    let cronjob = |name: &str| ObjectReference {
        namespace: Some("team-a".into()),
        name: Some(name.into()),
        uid: Some(format!("uid-{name}")),
        ..ObjectReference::default()
    };
    for slot in 0..30 {
        let event = Event::saw_completed_job(&format!("report-{slot}"), "Complete");
        gateway.record(cronjob("report"), &event);
    }
    gateway.record(
        cronjob("backup"),
        &Event::saw_completed_job("backup-1", "Complete"),
    );
    tokio::time::sleep(Duration::from_secs(10)).await;
    let events = asked
        .paths()
        .into_iter()
        .filter(|path| path.starts_with("POST") && path.contains("/events"))
        .count();
    assert_eq!(events, 26);
    assert_eq!(metrics.events_held_back.get(), 5);
    let recorded = metrics
        .events_recorded
        .get_or_create(&crate::telemetry::metrics::ReasonLabels {
            reason: "SawCompletedJob",
        })
        .get();
    assert_eq!(recorded, 26, "each Event the server took, by its reason");
}
