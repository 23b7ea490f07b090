//! The bulk loads on scripted API answers: pages, streaming lists, cuts,
//! errors and deadlines; and the lists' size.

use super::*;
use crate::apiserver::scripted::{self, Answer};
use crate::bucket::{BUCKETS, Bucket};
use crate::reconcile::CronJobKind;
use serde_json::{Value, json};

fn list(kind: &str, items: Vec<Value>, next: &str) -> Answer {
    Answer::Json(
        200,
        json!({
            "kind": format!("{kind}List"), "apiVersion": "batch/v1",
            "metadata": {"resourceVersion": "7", "continue": next},
            "items": items,
        }),
    )
}

fn cronjob(namespace: &str, name: &str) -> Value {
    json!({
        "metadata": {"namespace": namespace, "name": name, "uid": format!("uid-{name}"),
                     "managedFields": [{"manager": "kubectl"}]},
        "spec": {"schedule": "* * * * *", "jobTemplate": {"spec": {"template": {}}}},
    })
}

fn job(name: &str, owner: Option<(&str, &str)>) -> Value {
    let owners: Vec<Value> = owner
        .map(|(kind, name)| {
            json!({"apiVersion": "batch/v1", "kind": kind, "name": name,
                   "uid": format!("uid-{name}"), "controller": true})
        })
        .into_iter()
        .collect();
    json!({
        "metadata": {"namespace": "a", "name": name, "uid": format!("uid-{name}"),
                     "ownerReferences": owners},
        "spec": {"template": {}},
    })
}

/// The CronJobs' names and the Jobs' UIDs the pages delivered, once
/// checked that no CronJob kept its managedFields (dropped as pages
/// arrive), and that every Job came before the one page that says the
/// Jobs are done, and every CronJob after it.
fn delivered(pages: &[Loaded]) -> (Vec<&str>, Vec<&str>) {
    let done = pages
        .iter()
        .position(|p| p.jobs_done)
        .expect("a page says the Jobs are done");
    assert_eq!(pages.iter().filter(|p| p.jobs_done).count(), 1);
    assert!(pages[done..].iter().all(|p| p.jobs.is_empty()));
    assert!(pages[..=done].iter().all(|p| p.cronjobs.is_empty()));
    let cronjobs = pages.iter().flat_map(|p| &p.cronjobs);
    assert!(
        cronjobs
            .clone()
            .all(|c| c.metadata.managed_fields.is_none())
    );
    (
        cronjobs
            .map(|c| c.metadata.name.as_deref().unwrap_or_default())
            .collect(),
        pages
            .iter()
            .flat_map(|p| &p.jobs)
            .map(|j| &*j.uid)
            .collect(),
    )
}

/// Runs a load of every namespace owning the names that start with
/// `keep`; what was delivered and what was asked.
async fn load_with(
    script: impl Fn(&scripted::Request) -> Answer + Send + Sync + 'static,
) -> (Result<LoadCounts, LoadError>, Vec<Loaded>, Vec<String>) {
    load_streaming_or_not(false, script).await
}

async fn load_streaming_or_not(
    streaming: bool,
    script: impl Fn(&scripted::Request) -> Answer + Send + Sync + 'static,
) -> (Result<LoadCounts, LoadError>, Vec<Loaded>, Vec<String>) {
    let (client, asked) = scripted::client(script);
    let mut pages = Vec::new();
    let result = load(
        client,
        &[None],
        &LoadSelectors {
            cronjobs: vec![CronJobList {
                kind: CronJobKind::Batch,
                buckets: None,
            }],
            jobs: Vec::new(),
            reads: ListReads {
                from_cache: streaming,
                protobuf: false,
            },
        },
        |uid| uid.starts_with("uid-keep"),
        |page| {
            pages.push(page);
            async {}
        },
    )
    .await;
    (result, pages, asked.all())
}

#[tokio::test]
async fn a_load_reads_every_page_and_hands_over_only_what_this_replica_owns() {
    let (result, pages, asked) = load_with(|request| {
        let uri = &request.uri;
        if uri.starts_with("/apis/batch/v1/cronjobs") && !uri.contains("continue=") {
            list(
                "CronJob",
                vec![cronjob("a", "keep-1"), cronjob("a", "drop-1")],
                "next-page",
            )
        } else if uri.starts_with("/apis/batch/v1/cronjobs") {
            list("CronJob", vec![cronjob("b", "keep-2")], "")
        } else {
            list(
                "Job",
                vec![
                    job("keep-1-100", Some(("CronJob", "keep-1"))),
                    job("drop-1-100", Some(("CronJob", "drop-1"))),
                    job("keep-by-hand", None),
                    job("keep-1-by-a-set", Some(("ReplicaSet", "keep-1"))),
                ],
                "",
            )
        }
    })
    .await;
    let counts = result.expect("the load succeeds");
    assert_eq!((counts.cronjobs, counts.jobs), (2, 1));
    assert_eq!(
        delivered(&pages),
        (vec!["keep-1", "keep-2"], vec!["uid-keep-1-100"])
    );
    // Every page is consistent: the first names no version (never the
    // watch cache's possibly older `0`), a continued one is read at the
    // first page's snapshot.
    assert_eq!(asked.len(), 3, "{asked:?}");
    assert!(asked[0].starts_with("GET /apis/batch/v1/jobs?"));
    assert!(
        asked[1].starts_with("GET /apis/batch/v1/cronjobs?") && asked[1].contains("limit=500"),
        "{asked:?}"
    );
    assert!(asked[2].contains("continue=next-page"), "{asked:?}");
    assert!(
        asked.iter().all(|a| !a.contains("resourceVersion")),
        "{asked:?}"
    );
}

fn added(object: Value) -> Value {
    json!({"type": "ADDED", "object": object})
}

fn bookmark(end: bool) -> Value {
    let annotations = if end {
        json!({"k8s.io/initial-events-end": "true"})
    } else {
        json!({})
    };
    json!({"type": "BOOKMARK", "object": {"kind": "CronJob", "apiVersion": "batch/v1",
           "metadata": {"resourceVersion": "9", "annotations": annotations}}})
}

#[tokio::test]
async fn a_streaming_load_is_a_consistent_watch_read_to_its_end_bookmark() {
    let (result, pages, asked) = load_streaming_or_not(true, |request| {
        if request.uri.starts_with("/apis/batch/v1/cronjobs") {
            Answer::Events(vec![
                added(cronjob("a", "keep-1")),
                bookmark(false),
                added(cronjob("a", "drop-1")),
                added(cronjob("b", "keep-2")),
                bookmark(true),
                // After the end: not part of the load.
                added(cronjob("c", "keep-3")),
            ])
        } else {
            Answer::Events(vec![
                added(job("keep-1-100", Some(("CronJob", "keep-1")))),
                bookmark(true),
            ])
        }
    })
    .await;
    let counts = result.expect("the load succeeds");
    assert_eq!((counts.cronjobs, counts.jobs), (2, 1));
    assert_eq!(
        delivered(&pages),
        (vec!["keep-1", "keep-2"], vec!["uid-keep-1-100"])
    );
    // A consistent read: initial events, NotOlderThan, and an empty
    // resourceVersion (never the watch cache's possibly older `0`).
    assert_eq!(asked.len(), 2, "{asked:?}");
    for query in &asked {
        for wanted in [
            "watch=true",
            "sendInitialEvents=true",
            "resourceVersionMatch=NotOlderThan",
            "allowWatchBookmarks=true",
        ] {
            assert!(query.contains(wanted), "{wanted} in {query}");
        }
        assert!(query.ends_with("&resourceVersion="), "{query}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_streaming_list_cut_before_its_bookmark_is_read_again_then_fails() {
    let (result, _, asked) = load_streaming_or_not(true, |_| {
        Answer::Events(vec![added(cronjob("a", "keep-1"))])
    })
    .await;
    assert!(matches!(result, Err(LoadError::EndedEarly)), "{result:?}");
    assert_eq!(asked.len(), LIST_ATTEMPTS as usize, "{asked:?}");
}

#[tokio::test(start_paused = true)]
async fn a_streaming_list_cut_once_counts_only_the_read_that_reached_its_end() {
    let cronjob_lists = std::sync::atomic::AtomicUsize::new(0);
    let (result, pages, asked) = load_streaming_or_not(true, move |request| {
        if !request.uri.starts_with("/apis/batch/v1/cronjobs") {
            return Answer::Events(vec![bookmark(true)]);
        }
        let mut events = vec![added(cronjob("a", "keep-1")), added(cronjob("a", "keep-2"))];
        // The first read is cut after its first object.
        if cronjob_lists.fetch_add(1, std::sync::atomic::Ordering::Relaxed) == 0 {
            events.truncate(1);
        } else {
            events.push(bookmark(true));
        }
        Answer::Events(events)
    })
    .await;
    let counts = result.expect("the second read reaches the end");
    assert_eq!((counts.cronjobs, counts.jobs), (2, 0));
    // The cut read's partial page is not handed over (had it been, keep-1
    // would come twice: the supervisor keeps the newer copy).
    assert_eq!(delivered(&pages).0, vec!["keep-1", "keep-2"]);
    assert_eq!(asked.len(), 3, "{asked:?}");
}

#[test]
fn a_cut_list_of_several_buckets_is_read_again_in_halves_and_one_bucket_three_times() {
    let buckets: Vec<Bucket> = Bucket::all().take(5).collect();
    let list = |buckets: &[Bucket]| CronJobList {
        kind: CronJobKind::Batch,
        buckets: Some(buckets.to_vec()),
    };
    let every = CronJobList {
        kind: CronJobKind::Batch,
        buckets: None,
    };
    for (cut, attempt, again) in [
        // Halves, each a first read, whatever the attempt.
        (
            list(&buckets),
            1,
            Some(vec![(list(&buckets[..2]), 1), (list(&buckets[2..]), 1)]),
        ),
        (
            list(&buckets[..2]),
            1,
            Some(vec![(list(&buckets[..1]), 1), (list(&buckets[1..2]), 1)]),
        ),
        // One bucket, or every CronJob: itself, until its reads are spent.
        (list(&buckets[..1]), 1, Some(vec![(list(&buckets[..1]), 2)])),
        (list(&buckets[..1]), 2, Some(vec![(list(&buckets[..1]), 3)])),
        (list(&buckets[..1]), LIST_ATTEMPTS, None),
        (every.clone(), 1, Some(vec![(every.clone(), 2)])),
        (every, LIST_ATTEMPTS, None),
    ] {
        assert_eq!(
            split_on_cut(cut.clone(), attempt),
            again,
            "{cut:?} at {attempt}"
        );
    }
}

/// Loads one list of the CronJobs of `buckets` from the watch cache
/// (`protobuf`: whole LISTs, else streaming lists), keeping the names that
/// start with `keep`: how many were kept, and the pages.
async fn load_one_list_from_cache(
    client: kube::Client,
    buckets: &[Bucket],
    protobuf: bool,
) -> (usize, Vec<Vec<LeanCronJob>>) {
    let mut pages = Vec::new();
    let kept = load_cronjobs(
        client,
        &[None],
        &[CronJobList {
            kind: CronJobKind::Batch,
            buckets: Some(buckets.to_vec()),
        }],
        ListReads {
            from_cache: true,
            protobuf,
        },
        |uid| uid.starts_with("uid-keep"),
        |page| {
            pages.push(page);
            async {}
        },
    )
    .await
    .expect("the halves reach their ends");
    (kept, pages)
}

#[tokio::test(start_paused = true)]
async fn a_cut_list_is_read_again_as_two_shorter_lists_after_a_pause() {
    let buckets: Vec<Bucket> = Bucket::all().take(4).collect();
    let reads = std::sync::atomic::AtomicUsize::new(0);
    let (client, asked) = scripted::client(move |_| {
        // The first read is cut after one CronJob; the halves end.
        let mut events = vec![added(cronjob("a", "keep-1"))];
        if reads.fetch_add(1, std::sync::atomic::Ordering::Relaxed) > 0 {
            events.push(bookmark(true));
        }
        Answer::Events(events)
    });
    let started = tokio::time::Instant::now();
    let (kept, _) = load_one_list_from_cache(client, &buckets, false).await;
    // Counted once for each half that reached its end.
    assert_eq!(kept, 2);
    assert_eq!(started.elapsed(), CUT_PAUSE);
    let asked = asked.all();
    let selector = |buckets: &[Bucket]| {
        form_urlencoded::Serializer::new(String::new())
            .append_pair("shardSelector", &bucket::shard_selector(buckets).unwrap())
            .finish()
    };
    assert_eq!(asked.len(), 3, "{asked:?}");
    for (query, buckets) in asked
        .iter()
        .zip([&buckets[..], &buckets[..2], &buckets[2..]])
    {
        assert!(query.contains(&selector(buckets)), "{query}");
    }
}

/// A CronJobList in protobuf of CronJobs named `names`, cut after `cut`
/// bytes if given.
fn protobuf_list(names: &[&str], cut: Option<usize>) -> Answer {
    use crate::k8s_proto;
    use prost::Message as _;
    let items = names.iter().map(|name| k8s_proto::CronJob {
        metadata: Some(k8s_proto::ObjectMeta {
            namespace: Some("a".into()),
            name: Some((*name).into()),
            uid: Some(format!("uid-{name}")),
            ..k8s_proto::ObjectMeta::default()
        }),
        ..k8s_proto::CronJob::default()
    });
    let list = k8s_proto::CronJobList {
        metadata: None,
        items: items.collect(),
    };
    let mut body = k8s_proto::envelope("batch/v1", "CronJobList", list.encode_to_vec());
    body.truncate(cut.unwrap_or(body.len()));
    Answer::Bytes(body)
}

#[tokio::test(start_paused = true)]
async fn protobuf_lists_are_whole_lists_no_older_than_the_loads_start_and_a_cut_one_is_split() {
    let buckets: Vec<Bucket> = Bucket::all().take(4).collect();
    let reads = std::sync::atomic::AtomicUsize::new(0);
    let (client, asked) = scripted::client(move |request| {
        if request.uri.contains("limit=1") {
            return list("CronJob", Vec::new(), "");
        }
        match reads.fetch_add(1, std::sync::atomic::Ordering::Relaxed) {
            // The first list breaks off in its second item.
            0 => protobuf_list(&["keep-1", "keep-2"], Some(40)),
            1 => protobuf_list(&["keep-1", "drop-1"], None),
            _ => protobuf_list(&["keep-2"], None),
        }
    });
    let (kept, pages) = load_one_list_from_cache(client, &buckets, true).await;
    assert_eq!(kept, 2);
    let names: Vec<&str> = (pages.iter().flatten())
        .filter_map(|c| c.metadata.name.as_deref())
        .collect();
    assert!(names.ends_with(&["keep-1", "keep-2"]), "{names:?}");
    let asked = asked.all();
    // One consistent read of the version, at the load's start, in one
    // namespace (the server walks what a read lists); then each list at
    // least as new, whole: no limit.
    assert_eq!(asked.len(), 4, "{asked:?}");
    assert!(
        asked[0].ends_with("/apis/batch/v1/namespaces/kube-system/cronjobs?&limit=1"),
        "{}",
        asked[0]
    );
    for query in &asked[1..] {
        assert!(
            query.contains("resourceVersion=7&resourceVersionMatch=NotOlderThan")
                && query.contains("shardSelector=")
                && !query.contains("limit="),
            "{query}"
        );
    }
}

#[test]
fn a_replica_owning_nothing_sizes_its_lists_by_the_cronjobs_counted_at_its_start() {
    let all = usize::from(BUCKETS);
    for (actors, owned, at_start, per_list) in [
        // A cold start at 10^6: 25 buckets (about 24,400 CronJobs) a list,
        // not one list of a quarter of a million.
        (0, 0, Some(1_000_000), 25),
        (0, 256, Some(1_000_000), 25),
        // Small, or not counted: one list.
        (0, 0, Some(10_000), all),
        (0, 0, None, all),
        // Owning some: its own density, whatever was counted.
        (250_000, 256, Some(10), 25),
        (1_000, 256, Some(1_000_000), all),
    ] {
        assert_eq!(
            buckets_per_list_knowing(actors, owned, at_start, LIST_TARGET),
            per_list,
            "{actors} actors in {owned} buckets, {at_start:?} at the start"
        );
    }
}

#[test]
fn a_whole_list_asks_for_four_times_what_a_streaming_list_does() {
    let reads = |from_cache, protobuf| ListReads {
        from_cache,
        protobuf,
    };
    for (kind, reads, target) in [
        (CronJobKind::Batch, reads(true, true), WHOLE_LIST_TARGET),
        // Streaming lists (JSON, the custom resource) and pages.
        (CronJobKind::Batch, reads(true, false), LIST_TARGET),
        (CronJobKind::Shardcron, reads(true, true), LIST_TARGET),
        (CronJobKind::Batch, reads(false, true), LIST_TARGET),
    ] {
        assert_eq!(list_target(kind, reads), target, "{kind:?} {reads:?}");
    }
    // A cold start at 10^6 on four replicas: at most 102 buckets (about
    // 99,600 CronJobs) a whole list, three even lists a replica.
    let per_list = buckets_per_list_knowing(0, 0, Some(1_000_000), WHOLE_LIST_TARGET);
    assert_eq!(per_list, 102);
    assert_eq!(even_per_list(263, per_list), 88);
}

#[test]
fn a_list_asks_for_about_twenty_five_thousand_cronjobs_or_everything_when_nothing_is_known() {
    let all = usize::from(BUCKETS);
    for (cronjobs, buckets, per_list) in [
        // Nothing owned yet: one list.
        (0, 0, all),
        (0, 256, all),
        // A small cluster: one list.
        (1_000, 1_024, all),
        (9_000, 256, 711),
        // 10^6 over four replicas: ~977 a bucket, 25 buckets a list.
        (250_000, 256, 25),
        // Denser than the target per bucket: one bucket a list.
        (200_000, 4, 1),
    ] {
        assert_eq!(
            buckets_per_list(cronjobs, buckets, LIST_TARGET),
            per_list,
            "{cronjobs} over {buckets}"
        );
    }
}

/// kube-apiserver's answer to a consistent streaming read while its watch
/// cache lags behind etcd.
fn cache_behind_answer() -> Answer {
    Answer::Json(
        504,
        json!({
            "kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 504,
            "reason": "Timeout", "message": "Timeout: Too large resource version: 1959, current: 1562",
            "details": {"causes": [{"reason": "ResourceVersionTooLarge",
                                    "message": "Too large resource version"}],
                        "retryAfterSeconds": 1},
        }),
    )
}

#[tokio::test]
async fn a_streaming_list_the_watch_cache_is_too_far_behind_for_is_read_by_pages() {
    let (result, pages, asked) = load_streaming_or_not(true, |request| {
        let uri = &request.uri;
        let cronjobs = uri.starts_with("/apis/batch/v1/cronjobs");
        if uri.contains("watch=true") {
            cache_behind_answer()
        } else if cronjobs {
            list("CronJob", vec![cronjob("a", "keep-1")], "")
        } else {
            list(
                "Job",
                vec![job("keep-1-100", Some(("CronJob", "keep-1")))],
                "",
            )
        }
    })
    .await;
    let counts = result.expect("the load reads by pages");
    assert_eq!((counts.cronjobs, counts.jobs), (1, 1));
    assert_eq!(delivered(&pages), (vec!["keep-1"], vec!["uid-keep-1-100"]));
    // The Jobs' stream refused, their page; the CronJobs' the same.
    assert_eq!(asked.len(), 4, "{asked:?}");
    for (i, query) in asked.iter().enumerate() {
        assert_eq!(query.contains("watch=true"), i % 2 == 0, "{asked:?}");
    }
}

#[tokio::test]
async fn a_failed_page_ends_the_load_with_the_servers_error() {
    let (result, _, asked) = load_with(|request| {
        let uri = &request.uri;
        if uri.starts_with("/apis/batch/v1/cronjobs") {
            list("CronJob", vec![cronjob("a", "keep-1")], "")
        } else {
            scripted::status(500, "InternalError")
        }
    })
    .await;
    match result {
        Err(LoadError::Api(kube::Error::Api(status))) => assert_eq!(status.code, 500),
        other => panic!("expected the server's 500, got {other:?}"),
    }
    // The Jobs are read first: their failure ends the load before the
    // CronJobs are asked for.
    assert_eq!(asked.len(), 1, "{asked:?}");
}

#[tokio::test(start_paused = true)]
async fn a_silent_page_ends_the_load_at_its_deadline() {
    let started = tokio::time::Instant::now();
    let (result, pages, _) = load_with(|_| Answer::Silence).await;
    assert!(matches!(result, Err(LoadError::Deadline(_))), "{result:?}");
    assert!(pages.is_empty());
    assert_eq!(started.elapsed(), crate::apiserver::deadline::LIST_PAGE);
}

/// A gained key read on its own whose first request fails on its
/// connection (a pooled connection the server had closed) is read again
/// at once; an answer (a status) is not.
#[tokio::test]
async fn a_key_read_alone_whose_connection_failed_is_read_again_at_once() {
    for (first, read_again) in [
        (Answer::ConnectionFailed, true),
        (scripted::status(500, "InternalError"), false),
    ] {
        let first = std::sync::Mutex::new(Some(first));
        let (client, asked) = scripted::client(move |request| {
            if let Some(answer) = first.lock().unwrap_or_else(|e| e.into_inner()).take() {
                answer
            } else if request.uri.contains("/jobs") {
                list("Job", vec![], "")
            } else {
                Answer::Json(200, cronjob("a", "keep-1"))
            }
        });
        let bucket = Bucket::of("uid-keep-1");
        let read = narrow::load_key(
            client,
            "a/keep-1",
            bucket,
            crate::reconcile::CronJobKinds::default(),
            false,
        )
        .await;
        assert_eq!(read.is_ok(), read_again, "{read:?} after {:?}", asked.all());
        if read_again {
            let loaded = read.ok().flatten().expect("the CronJob");
            assert_eq!(loaded.cronjobs.len(), 1);
            assert_eq!(asked.all().len(), 3, "{:?}", asked.all());
        }
    }
}

#[test]
fn lists_share_a_loads_buckets_evenly_and_no_more_lists_than_the_bound_needs() {
    for (buckets, per_list, even) in [
        // S7's shares at about 100,000 a list: three even lists, not two
        // of 102 and one of 65.
        (269, 102, 90),
        (250, 102, 84),
        (263, 153, 132),
        // One list when the bound allows it; exact multiples stay.
        (80, 102, 80),
        (204, 102, 102),
        (1, 1, 1),
        // Nothing to read, or a bound of nothing: still a list of one.
        (0, 25, 1),
        (10, 0, 1),
    ] {
        let got = even_per_list(buckets, per_list);
        assert_eq!(got, even, "{buckets} buckets, at most {per_list} a list");
        assert!(got <= per_list.max(1));
        assert_eq!(
            buckets.div_ceil(got),
            buckets.div_ceil(per_list.max(1)),
            "as many lists as the bound needs"
        );
    }
}
