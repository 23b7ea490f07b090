//! The watches on scripted API answers: the list strategy, the Lease
//! watch's selector and timeout, a watch resumed from a position.

use super::*;
use crate::apiserver::scripted::{self, Answer};
use serde_json::json;

/// A streaming list's answer: its initial events (none) ended by the
/// annotated bookmark, or, where the server ignores the parameter, nothing.
fn watch_of_none(ends_initial_events: bool) -> Answer {
    let mut bookmark = json!({"type": "BOOKMARK", "object": {"apiVersion": "batch/v1",
        "kind": "CronJob", "metadata": {"resourceVersion": "42"}}});
    if ends_initial_events {
        bookmark["object"]["metadata"]["annotations"] = json!({INITIAL_EVENTS_END: "true"});
    }
    Answer::Events(vec![bookmark])
}

#[tokio::test]
async fn auto_lists_by_streaming_where_the_server_answers_a_streaming_list() {
    let (client, asked) = scripted::client(|_| watch_of_none(true));
    assert_eq!(
        ListStrategy::Auto
            .resolve(&client, CronJobKind::Batch, None)
            .await,
        ListStrategy::Streaming
    );
    let probe = &asked.all()[0];
    assert!(
        probe.starts_with("GET /apis/batch/v1/namespaces/kube-system/cronjobs?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds=1&fieldSelector=metadata.name%3Dshardcron_list_probe"),
        "{probe}"
    );
    // The CRD's CronJobs, in a scoped replica's namespace.
    let (client, asked) = scripted::client(|_| watch_of_none(true));
    assert_eq!(
        ListStrategy::Auto
            .resolve(&client, CronJobKind::Shardcron, Some("team-a"))
            .await,
        ListStrategy::Streaming
    );
    assert!(
        asked.all()[0]
            .starts_with("GET /apis/shardcron.io/v1/namespaces/team-a/cronjobs?watch=true&"),
        "{:?}",
        asked.all()
    );
    // Refused (WatchList off: 422), ignored (no annotated bookmark), failed
    // or unanswered: page by page, which every server serves.
    for (answer, what) in [
        (scripted::status(422, "Invalid"), "refused"),
        (watch_of_none(false), "ignored"),
        (Answer::Events(Vec::new()), "nothing streamed"),
        (scripted::status(503, "ServiceUnavailable"), "failed"),
    ] {
        let answer = std::sync::Mutex::new(Some(answer));
        let (client, _) =
            scripted::client(move |_| answer.lock().unwrap().take().unwrap_or(Answer::Silence));
        assert_eq!(
            ListStrategy::Auto
                .resolve(&client, CronJobKind::Batch, None)
                .await,
            ListStrategy::Paginated,
            "{what}"
        );
    }
    let (client, asked) = scripted::client(|_| watch_of_none(true));
    assert_eq!(
        ListStrategy::Paginated
            .resolve(&client, CronJobKind::Batch, None)
            .await,
        ListStrategy::Paginated
    );
    assert!(asked.all().is_empty(), "a chosen strategy asks nothing");
}

#[tokio::test(start_paused = true)]
async fn an_unanswered_list_probe_lists_page_by_page() {
    let (client, _) = scripted::client(|_| Answer::Silence);
    assert_eq!(
        ListStrategy::Auto
            .resolve(&client, CronJobKind::Batch, None)
            .await,
        ListStrategy::Paginated
    );
}

#[tokio::test]
async fn a_watch_started_from_a_position_lists_only_when_the_server_no_longer_has_it() {
    let cronjob = |name: &str, version: &str| {
        json!({"apiVersion": "batch/v1", "kind": "CronJob",
               "metadata": {"namespace": "a", "name": name, "resourceVersion": version,
                            "uid": format!("uid-{name}")},
               "spec": {"schedule": "* * * * *", "jobTemplate": {"spec": {"template": {}}}}})
    };
    let (client, asked) = scripted::client(move |request| {
        let uri = &request.uri;
        if uri.contains("watch=true") && uri.contains("resourceVersion=100") {
            Answer::Events(vec![
                json!({"type": "MODIFIED", "object": cronjob("kept", "105")}),
                json!({"type": "ERROR", "object": {"kind": "Status", "apiVersion": "v1",
                       "status": "Failure", "reason": "Expired", "code": 410}}),
            ])
        } else if uri.contains("watch=true") {
            Answer::Silence
        } else {
            Answer::Json(
                200,
                json!({"kind": "CronJobList", "apiVersion": "batch/v1",
                       "metadata": {"resourceVersion": "200"},
                       "items": [cronjob("listed", "150")]}),
            )
        }
    });
    let (sender, mut events) = tokio::sync::mpsc::channel(8);
    let position = Position::default();
    let watch = cronjobs(
        client,
        CronJobKind::Batch,
        None,
        ListStrategy::Paginated,
        None,
        Start {
            from: Some("100".to_owned()),
            position: position.clone(),
        },
        Arc::new(Metrics::new()),
        move |event| {
            let sender = sender.clone();
            async move {
                let _ = sender.send(event).await;
            }
        },
    );
    let within = std::time::Duration::from_secs(5);
    let mut next = async || {
        tokio::time::timeout(within, events.recv())
            .await
            .ok()
            .flatten()
            .map(|event| match event {
                Event::Apply(c) => format!("apply {}", c.metadata.name.unwrap_or_default()),
                Event::InitApply(c) => {
                    format!("listed {}", c.metadata.name.unwrap_or_default())
                }
                Event::Init => "init".to_owned(),
                Event::InitDone => "done".to_owned(),
                Event::Delete(_) => "delete".to_owned(),
            })
    };
    // The change since the position, then (the version gone) a list.
    assert_eq!(next().await.as_deref(), Some("apply kept"));
    assert_eq!(next().await.as_deref(), Some("init"));
    assert_eq!(next().await.as_deref(), Some("listed listed"));
    assert_eq!(next().await.as_deref(), Some("done"));
    // Listing, the watch has no position until a change after the list.
    assert_eq!(position.get(), None);
    let first = &asked.all()[0];
    assert!(first.contains("watch=true"), "{first}");
    assert!(!first.contains("sendInitialEvents"), "{first}");
    watch.abort();
}

#[tokio::test]
async fn the_lease_watch_selects_the_ring_and_asks_the_server_to_end_it_soon() {
    let (client, asked) = scripted::client(|request| {
        if request.uri.contains("watch=true") {
            return Answer::Silence;
        }
        Answer::Json(
            200,
            json!({
                "kind": "LeaseList", "apiVersion": "coordination.k8s.io/v1",
                "metadata": {"resourceVersion": "9"},
                "items": [{"metadata": {"name": "r0", "namespace": "system",
                                        "managedFields": [{"manager": "r0"}]}}],
            }),
        )
    });
    let (sender, mut events) = tokio::sync::mpsc::channel(8);
    let watch = leases(
        client,
        "system",
        "shardcron.io/ring=ring",
        Arc::new(Metrics::new()),
        |lease| lease.metadata,
        move |event| {
            let sender = sender.clone();
            async move {
                let _ = sender.send(event).await;
            }
        },
    );
    // Bounded: a list the watcher cannot use would be retried forever.
    let within = std::time::Duration::from_secs(5);
    let next = tokio::time::timeout(within, events.recv()).await;
    assert!(matches!(next, Ok(Some(Event::Init))));
    match tokio::time::timeout(within, events.recv()).await {
        Ok(Some(Event::InitApply(meta))) => {
            assert_eq!(meta.name.as_deref(), Some("r0"));
            assert!(meta.managed_fields.is_none());
        }
        _ => panic!("expected the listed Lease"),
    }
    let next = tokio::time::timeout(within, events.recv()).await;
    assert!(matches!(next, Ok(Some(Event::InitDone))));
    // The watch that follows the list is made, and is silent.
    let started = tokio::time::Instant::now();
    let watching = loop {
        if let Some(request) = asked.all().into_iter().find(|r| r.contains("watch=true")) {
            break request;
        }
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    };
    let listed = &asked.all()[0];
    for request in [listed, &watching] {
        assert!(request.starts_with("GET /apis/coordination.k8s.io/v1/namespaces/system/leases?"));
        assert!(
            request.contains("labelSelector=shardcron.io%2Fring%3Dring"),
            "{request}"
        );
    }
    assert!(watching.contains(&format!("timeoutSeconds={LEASE_WATCH_TIMEOUT_SECONDS}")));
    watch.abort();
}

#[tokio::test]
async fn the_first_versions_are_consistent_reads_of_one_object_and_a_failure_leaves_a_kind_out() {
    let (client, asked) = scripted::client(|request| {
        let version = if request.uri.contains("/cronjobs") {
            "500"
        } else if request.uri.contains("/jobs") {
            return scripted::status(503, "ServiceUnavailable");
        } else {
            "0"
        };
        Answer::Json(
            200,
            json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadataList",
                   "metadata": {"resourceVersion": version}, "items": []}),
        )
    });
    let versions = latest_versions(&client, &[CronJobKind::Batch], Some("team-a")).await;
    assert_eq!(
        versions.cronjobs(CronJobKind::Batch).as_deref(),
        Some("500")
    );
    assert_eq!(versions.cronjobs(CronJobKind::Shardcron), None);
    assert_eq!(versions.jobs, None, "the Jobs' watch lists");
    for uri in asked.all() {
        assert!(uri.contains("limit=1"), "{}", uri);
        assert!(
            !uri.contains("resourceVersion"),
            "a consistent read names no version: {}",
            uri
        );
        assert!(uri.contains("/namespaces/team-a/"), "{}", uri);
    }
}

#[tokio::test]
async fn cluster_wide_the_cronjobs_are_counted_and_the_jobs_version_is_read_in_one_namespace() {
    let (client, asked) = scripted::client(|request| {
        let list = if request.uri.contains("/cronjobs") {
            json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadataList",
                   "metadata": {"resourceVersion": "500", "remainingItemCount": 41,
                                "continue": "more"},
                   "items": [{"metadata": {"name": "a", "namespace": "t"}}]})
        } else {
            json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadataList",
                   "metadata": {"resourceVersion": "501"}, "items": []})
        };
        Answer::Json(200, list)
    });
    let versions = latest_versions(&client, &[CronJobKind::Batch], None).await;
    assert_eq!(versions.cronjob_count, Some(42));
    assert_eq!(versions.jobs.as_deref(), Some("501"));
    let asked = asked.all();
    assert!(
        asked
            .iter()
            .any(|uri| uri.ends_with("/apis/batch/v1/cronjobs?&limit=1")),
        "the CronJobs cluster-wide, counted: {asked:?}"
    );
    assert!(
        (asked.iter())
            .any(|uri| uri.ends_with("/apis/batch/v1/namespaces/kube-system/jobs?&limit=1")),
        "the Jobs' version where the server walks few: {asked:?}"
    );
}
