//! `cronjobs.shardcron.io` on the real API server: the committed definition
//! is what this API server's batch/v1 schema makes; it installs; and it
//! defaults and refuses as batch/v1 does, tested side by side with
//! batch/v1 on the same server (parity is tested, not assumed). The one
//! deliberate difference, the cron syntax (which CEL cannot parse), is
//! asserted too, so the docs' table cannot drift. Then a ring serving the
//! CRD, and the move of a CronJob to it. The control plane runs
//! kube-controller-manager's own CronJob controller, as a managed one does.

mod support;

use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use shardcron::cli::crd;
use std::time::Duration;
use support::cluster::Cluster;
use support::crd::{COMMITTED, COMMITTED_PATH, grant_the_controller, install};
use support::{eventually, first_job_named, repo_root};

/// The minor whose batch/v1 the committed definition is made from.
const PINNED_MINOR: &str = "36";

async fn get_json(client: &Client, path: &str, accept: &str) -> Value {
    let request = http::Request::get(path)
        .header(http::header::ACCEPT, accept)
        .body(Vec::new())
        .expect("a GET request");
    let text = client
        .request_text(request)
        .await
        .unwrap_or_else(|e| panic!("GET {path}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("GET {path} is not JSON: {e}"))
}

/// The committed definition is the one the pinned minor's batch/v1 makes
/// (deploy/local's default, the Kubernetes types this build compiles
/// against); on another minor the one its own batch/v1 makes installs
/// (`support::crd::install` installs that one everywhere) and the
/// committed one installs too (deploy/managed's, for every supported minor).
#[tokio::test]
async fn the_committed_definition_is_made_from_the_api_servers_batch_v1() {
    let client = Cluster::shared_beside_upstream().admin().await;
    let openapi = get_json(&client, crd::OPENAPI_PATH, "application/json").await;
    let made = crd::definition(&openapi).and_then(|d| crd::to_yaml(&d));
    let made = made.unwrap_or_else(|e| panic!("making the definition: {e}"));
    let version = client
        .apiserver_version()
        .await
        .expect("the server's version");
    if version.minor != PINNED_MINOR {
        use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
        let committed: CustomResourceDefinition =
            serde_yaml_ng::from_str(COMMITTED).expect("the committed definition parses");
        let name = committed.metadata.name.clone().unwrap_or_default();
        // A dry run: the lanes beside it keep the one this server makes.
        Api::<CustomResourceDefinition>::all(client.clone())
            .patch(
                &name,
                &PatchParams::apply("shardcron-tests").force().dry_run(),
                &Patch::Apply(&committed),
            )
            .await
            .unwrap_or_else(|e| panic!("{COMMITTED_PATH} on Kubernetes 1.{}: {e}", version.minor));
        support::crd::install(&client).await;
        return;
    }
    if std::env::var_os("SHARDCRON_UPDATE_CRD").is_some() {
        std::fs::write(repo_root().join(COMMITTED_PATH), &made).expect("write the definition");
        return;
    }
    assert!(
        made == COMMITTED,
        "{COMMITTED_PATH} is not what this API server's batch/v1 schema makes; \
         regenerate it: SHARDCRON_UPDATE_CRD=1 cargo test --test crd"
    );
    // The command prints the same definition, from either source.
    let printed = support::shardcron(&["crd"]);
    assert_eq!(support::stdout(&printed), COMMITTED);
}

/// A valid every-minute CronJob's spec with `patch` merged in (JSON merge
/// patch: `null` removes a field).
fn spec(patch: Value) -> Value {
    // Yearly: the batch/v1 twins kube-controller-manager serves start no Job.
    let mut spec = json!({
        "schedule": "0 0 1 1 *",
        "jobTemplate": {"spec": {"template": {"spec": {
            "restartPolicy": "OnFailure",
            "containers": [{"name": "c", "image": "busybox"}]}}}}
    });
    merge(&mut spec, patch);
    spec
}

fn merge(into: &mut Value, patch: Value) {
    match (into, patch) {
        (Value::Object(into), Value::Object(patch)) => {
            for (key, value) in patch {
                if value.is_null() {
                    into.remove(&key);
                } else {
                    merge(into.entry(key).or_insert(Value::Null), value);
                }
            }
        }
        (into, patch) => *into = patch,
    }
}

/// Creates the CronJob `name` with `spec` as batch/v1 and as shardcron.io/v1;
/// the two answers (the created object's spec, or the refusal's message).
async fn create_both(
    client: &Client,
    resource: &ApiResource,
    namespace: &str,
    name: &str,
    spec: &Value,
) -> (Result<Value, String>, Result<Value, String>) {
    let object = |api_version: &str| {
        json!({"apiVersion": api_version, "kind": "CronJob",
               "metadata": {"name": name}, "spec": spec})
    };
    let batch = Api::<DynamicObject>::namespaced_with(
        client.clone(),
        namespace,
        &ApiResource::erase::<k8s_openapi::api::batch::v1::CronJob>(&()),
    );
    let ours = Api::<DynamicObject>::namespaced_with(client.clone(), namespace, resource);
    let answer = |result: kube::Result<DynamicObject>| match result {
        Ok(created) => Ok(created.data["spec"].clone()),
        Err(kube::Error::Api(status)) if status.code == 422 => Err(status.message),
        Err(e) => panic!("creating {namespace}/{name}: {e}"),
    };
    let parse = |v: Value| serde_json::from_value::<DynamicObject>(v).expect("an object");
    (
        answer(
            batch
                .create(&PostParams::default(), &parse(object("batch/v1")))
                .await,
        ),
        answer(
            ours.create(&PostParams::default(), &parse(object("shardcron.io/v1")))
                .await,
        ),
    )
}

#[tokio::test]
async fn defaults_are_batch_v1s() {
    let cluster = Cluster::shared_beside_upstream();
    let client = cluster.admin().await;
    let resource = install(&client).await;
    let ns = cluster.namespace("crd-defaults").await;
    let (batch, ours) = create_both(&client, &resource, &ns.name, "plain", &spec(json!({}))).await;
    let (batch, ours) = (
        batch.expect("batch/v1 accepts"),
        ours.expect("shardcron.io accepts"),
    );
    for field in [
        "concurrencyPolicy",
        "suspend",
        "successfulJobsHistoryLimit",
        "failedJobsHistoryLimit",
        "startingDeadlineSeconds",
        "timeZone",
        "schedule",
    ] {
        assert_eq!(ours.get(field), batch.get(field), "spec.{field}");
    }
    assert_eq!(ours["concurrencyPolicy"], "Allow");
    assert_eq!(ours["successfulJobsHistoryLimit"], 3);
    assert_eq!(ours["failedJobsHistoryLimit"], 1);
    assert_eq!(ours["suspend"], false);
}

#[tokio::test]
async fn what_batch_v1_refuses_is_refused_and_what_it_accepts_is_accepted() {
    let cluster = Cluster::shared_beside_upstream();
    let client = cluster.admin().await;
    let resource = install(&client).await;
    let ns = cluster.namespace("crd-validation").await;
    let pod = |patch: Value| json!({"jobTemplate": {"spec": {"template": {"spec": patch}}}});
    // (case, spec patch, what the CRD's refusal says; None: both accept)
    let cases = [
        (
            "zone-unknown",
            json!({"timeZone": "bad-time-zone"}),
            Some("unknown time zone"),
        ),
        (
            "zone-local",
            json!({"timeZone": "Local"}),
            Some("explicit time zone"),
        ),
        (
            "zone-empty",
            json!({"timeZone": ""}),
            Some("unknown time zone"),
        ),
        (
            "zone-dots",
            json!({"timeZone": "../etc/passwd"}),
            Some("unknown time zone"),
        ),
        (
            "zone-offset",
            json!({"timeZone": "+05:00"}),
            Some("unknown time zone"),
        ),
        (
            "tz-in-schedule",
            json!({"schedule": "TZ=UTC 0 * * * *"}),
            Some("use timeZone field"),
        ),
        (
            "schedule-empty",
            json!({"schedule": ""}),
            Some("spec.schedule"),
        ),
        (
            "policy-unknown",
            json!({"concurrencyPolicy": "Sometimes"}),
            Some("Sometimes"),
        ),
        (
            "successful-negative",
            json!({"successfulJobsHistoryLimit": -1}),
            Some("0"),
        ),
        (
            "failed-negative",
            json!({"failedJobsHistoryLimit": -1}),
            Some("0"),
        ),
        (
            "deadline-negative",
            json!({"startingDeadlineSeconds": -1}),
            Some("0"),
        ),
        (
            "restart-always",
            pod(json!({"restartPolicy": "Always"})),
            Some("OnFailure"),
        ),
        (
            "restart-missing",
            pod(json!({"restartPolicy": null})),
            Some("OnFailure"),
        ),
        (
            "no-containers",
            pod(json!({"containers": []})),
            Some("containers"),
        ),
        (
            "selector-set",
            json!({"jobTemplate": {"spec": {"selector": {"matchLabels": {"a": "b"}}}}}),
            Some("auto-generated"),
        ),
        ("zone-berlin", json!({"timeZone": "Europe/Berlin"}), None),
        ("zone-utc", json!({"timeZone": "UTC"}), None),
        ("deadline-zero", json!({"startingDeadlineSeconds": 0}), None),
        ("every", json!({"schedule": "@every 1h30m"}), None),
        ("forbid", json!({"concurrencyPolicy": "Forbid"}), None),
    ];
    for (case, patch, refusal) in cases {
        let (batch, ours) = create_both(&client, &resource, &ns.name, case, &spec(patch)).await;
        match refusal {
            Some(words) => {
                assert!(batch.is_err(), "{case}: batch/v1 accepted it");
                let message = ours
                    .err()
                    .unwrap_or_else(|| panic!("{case}: shardcron.io accepted it"));
                assert!(
                    message.contains(words),
                    "{case}: {message:?} lacks {words:?}"
                );
            }
            None => {
                assert!(batch.is_ok(), "{case}: batch/v1 refused it: {batch:?}");
                assert!(ours.is_ok(), "{case}: shardcron.io refused it: {ours:?}");
            }
        }
    }

    // The name: at most 52 characters, so the Job's name fits in 63.
    let longest = "n".repeat(52);
    let (batch, ours) = create_both(&client, &resource, &ns.name, &longest, &spec(json!({}))).await;
    assert!(
        batch.is_ok() && ours.is_ok(),
        "52 characters: {batch:?} {ours:?}"
    );
    let too_long = "n".repeat(53);
    let (batch, ours) =
        create_both(&client, &resource, &ns.name, &too_long, &spec(json!({}))).await;
    assert!(batch.is_err(), "53 characters: batch/v1 accepted it");
    let message = ours.expect_err("53 characters: shardcron.io accepted it");
    assert!(message.contains("52 characters"), "{message:?}");

    // The deliberate difference: CEL cannot parse cron, so a bad schedule is
    // stored and the controller reports it (a Warning event naming
    // spec.schedule), as upstream does for a schedule it cannot use.
    let (batch, ours) = create_both(
        &client,
        &resource,
        &ns.name,
        "bad-cron",
        &spec(json!({"schedule": "61 * * * *"})),
    )
    .await;
    assert!(batch.is_err(), "batch/v1 accepted minute 61");
    assert!(ours.is_ok(), "shardcron.io refused minute 61: {ours:?}");
}

#[tokio::test]
async fn status_is_a_subresource_and_kubectl_shows_batch_v1s_columns() {
    let cluster = Cluster::shared_beside_upstream();
    let client = cluster.admin().await;
    let resource = install(&client).await;
    let ns = cluster.namespace("crd-status").await;
    let zone = spec(json!({"timeZone": "Asia/Tokyo"}));
    let (_, ours) = create_both(&client, &resource, &ns.name, "nightly", &zone).await;
    ours.expect("shardcron.io accepts");
    let api = Api::<DynamicObject>::namespaced_with(client.clone(), &ns.name, &resource);
    let status = json!({"status": {
        "active": [{"kind": "Job", "apiVersion": "batch/v1", "namespace": ns.name,
                    "name": "nightly-29000000", "uid": "00000000-0000-4000-8000-000000000001"}],
        "lastScheduleTime": "2026-01-01T00:00:00Z"},
        // Ignored through /status, as for batch/v1.
        "spec": {"suspend": true}});
    let patched = api
        .patch_status("nightly", &PatchParams::default(), &Patch::Merge(&status))
        .await
        .expect("patch the status");
    assert_eq!(
        patched.data["status"]["lastScheduleTime"],
        "2026-01-01T00:00:00Z"
    );
    assert_eq!(
        patched.data["spec"]["suspend"], false,
        "/status changed the spec"
    );

    let path = format!("/apis/shardcron.io/v1/namespaces/{}/cronjobs", ns.name);
    let table = get_json(
        &client,
        &path,
        "application/json;as=Table;v=v1;g=meta.k8s.io",
    )
    .await;
    let columns: Vec<&str> = table["columnDefinitions"]
        .as_array()
        .expect("a Table")
        .iter()
        .filter_map(|c| c["name"].as_str())
        .collect();
    assert_eq!(
        columns,
        [
            "Name",
            "Schedule",
            "Timezone",
            "Suspend",
            "Active",
            "Last Schedule",
            "Age"
        ]
    );
    let cells = &table["rows"][0]["cells"];
    assert_eq!(cells[0], "nightly");
    assert_eq!(cells[1], "0 0 1 1 *");
    assert_eq!(cells[2], "Asia/Tokyo");
    assert_eq!(cells[3], false);
    assert_eq!(cells[4], "nightly-29000000");
}

#[test]
fn bad_openapi_input_is_a_clear_error_with_status_2() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let cases = [
        ("missing.json", None, "reading"),
        ("not-json.json", Some("openapi: 3"), "is not JSON"),
        ("empty.json", Some("{}"), "is not OpenAPI v3"),
        (
            "no-cronjob.json",
            Some(r#"{"components": {"schemas": {}}}"#),
            "no schema \"io.k8s.api.batch.v1.CronJob\"",
        ),
    ];
    for (name, content, words) in cases {
        let path = dir.path().join(name);
        if let Some(content) = content {
            std::fs::write(&path, content).expect("write the input");
        }
        let output = support::shardcron(&["crd", "--from-openapi", &path.to_string_lossy()]);
        assert_eq!(output.status.code(), Some(2), "{name}");
        let stderr = support::stderr(&output);
        assert!(stderr.contains(words), "{name}: {stderr:?} lacks {words:?}");
        assert!(
            support::stdout(&output).is_empty(),
            "{name}: printed a definition"
        );
    }
}

/// `--cronjob-kinds shardcron`: a shardcron.io CronJob fires, its Job owned
/// by it and its slot in its status; an unparseable schedule is reported on
/// it as upstream reports one; a batch/v1 CronJob beside them is left to
/// kube-controller-manager.
#[tokio::test(flavor = "multi_thread")]
async fn a_ring_serving_the_crd_fires_it_and_leaves_batch_v1_alone() {
    use k8s_openapi::api::batch::v1::{CronJob, Job};
    let cluster = Cluster::shared_beside_upstream();
    let client = cluster.admin().await;
    let resource = install(&client).await;
    grant_the_controller(&client).await;
    let ns = cluster.namespace("crd-served").await;
    let every_minute = spec(json!({"schedule": "*/1 * * * *"}));
    let ours_api = Api::<DynamicObject>::namespaced_with(client.clone(), &ns.name, &resource);
    let object = |name: &str, spec: &Value| {
        serde_json::from_value::<DynamicObject>(json!({"apiVersion": "shardcron.io/v1",
            "kind": "CronJob", "metadata": {"name": name}, "spec": spec}))
        .expect("an object")
    };
    ours_api
        .create(
            &PostParams::default(),
            &object("every-minute", &every_minute),
        )
        .await
        .expect("shardcron.io accepts");
    // A batch/v1 neighbour (another name: namesakes' Jobs would collide),
    // kube-controller-manager's where it runs its CronJob controller.
    let neighbour: CronJob = serde_json::from_value(
        json!({"metadata": {"name": "batch-neighbour"}, "spec": every_minute}),
    )
    .expect("a CronJob");
    Api::<CronJob>::namespaced(client.clone(), &ns.name)
        .create(&PostParams::default(), &neighbour)
        .await
        .expect("create the batch/v1 neighbour");
    ours_api
        .create(
            &PostParams::default(),
            &object("bad-cron", &spec(json!({"schedule": "61 * * * *"}))),
        )
        .await
        .expect("the CRD stores a schedule it cannot parse");

    let mut controller = support::controller::Controller::start_with(
        cluster,
        &ns.name,
        &["--cronjob-kinds", "shardcron"],
    )
    .await;
    let jobs = Api::<Job>::namespaced(client.clone(), &ns.name);
    let job = eventually(
        "the shardcron.io CronJob's Job",
        Duration::from_secs(90),
        || first_job_named(&jobs, "every-minute-"),
    )
    .await;
    let owner = job
        .metadata
        .owner_references
        .iter()
        .flatten()
        .find(|r| r.controller == Some(true))
        .expect("a controller reference");
    assert_eq!(
        (
            owner.api_version.as_str(),
            owner.kind.as_str(),
            owner.name.as_str()
        ),
        ("shardcron.io/v1", "CronJob", "every-minute")
    );
    let scheduled = job
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get("batch.kubernetes.io/cronjob-scheduled-timestamp"))
        .cloned()
        .expect("the scheduled-timestamp annotation");
    eventually(
        "the slot in the CronJob's status",
        Duration::from_secs(30),
        || {
            let ours_api = ours_api.clone();
            let scheduled = scheduled.clone();
            async move {
                let cronjob = ours_api.get("every-minute").await.ok()?;
                let recorded = cronjob.data["status"]["lastScheduleTime"]
                    .as_str()?
                    .to_owned();
                let recorded: jiff::Timestamp = recorded.parse().ok()?;
                let scheduled: jiff::Timestamp = scheduled.parse().ok()?;
                (recorded == scheduled).then_some(())
            }
        },
    )
    .await;

    // The unparseable schedule: a Warning naming spec.schedule, on the CRD's object.
    let events = Api::<k8s_openapi::api::events::v1::Event>::namespaced(client.clone(), &ns.name);
    let warning = eventually(
        "the bad schedule's warning",
        Duration::from_secs(30),
        || {
            let events = events.clone();
            async move {
                events
                    .list(&Default::default())
                    .await
                    .ok()?
                    .items
                    .into_iter()
                    .find(|e| {
                        e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("bad-cron")
                    })
            }
        },
    )
    .await;
    let regarding = warning.regarding.as_ref().expect("a regarding object");
    assert_eq!(regarding.api_version.as_deref(), Some("shardcron.io/v1"));
    assert_eq!(warning.type_.as_deref(), Some("Warning"));
    assert_eq!(warning.reason.as_deref(), Some("UnparseableSchedule"));
    let note = warning.note.clone().unwrap_or_default();
    assert!(note.contains("61 * * * *"), "{note}");

    // The batch/v1 neighbour: no Job of it is shardcron's.
    let listed = jobs.list(&Default::default()).await.expect("list Jobs");
    let made_for_batch: Vec<&str> = listed
        .items
        .iter()
        .filter(|job| {
            let batch_owner = job
                .metadata
                .owner_references
                .iter()
                .flatten()
                .any(|r| r.api_version == "batch/v1");
            let by_shardcron = job
                .metadata
                .annotations
                .as_ref()
                .is_some_and(|a| a.contains_key("shardcron.io/created-by"));
            batch_owner && by_shardcron
        })
        .filter_map(|job| job.metadata.name.as_deref())
        .collect();
    assert!(made_for_batch.is_empty(), "{made_for_batch:?}");
    controller.stop().await;

    // As the controller's ServiceAccount: the CRD's CronJobs are read, never
    // created or changed (deploy/crd/rbac.yaml grants their status only).
    let sa = cluster
        .service_account_client("shardcron-system", "shardcron")
        .await;
    let as_controller = Api::<DynamicObject>::namespaced_with(sa, &ns.name, &resource);
    as_controller
        .get("every-minute")
        .await
        .expect("the controller reads the CRD's CronJobs");
    let stray = json!({"apiVersion": "shardcron.io/v1", "kind": "CronJob",
                       "metadata": {"name": "stray"}, "spec": spec(json!({}))});
    match as_controller
        .create(
            &PostParams::default(),
            &serde_json::from_value(stray).expect("an object"),
        )
        .await
    {
        Err(kube::Error::Api(e)) => assert_eq!(e.code, 403),
        other => panic!("the controller must not create CronJobs, got {other:?}"),
    }
    match as_controller
        .delete("every-minute", &Default::default())
        .await
    {
        Err(kube::Error::Api(e)) => assert_eq!(e.code, 403),
        other => panic!("the controller must not delete CronJobs, got {other:?}"),
    }
}

/// The move, as docs/operations.md describes it, from kube-controller-
/// manager's controller (or a batch/v1 ring in its place): suspend the
/// original, `shardcron convert --resume`, apply the copy, delete the
/// original. An every-minute CronJob has one Job per slot across the move,
/// and none missing.
#[tokio::test(flavor = "multi_thread")]
async fn a_cronjob_moved_over_runs_each_slot_once() {
    use k8s_openapi::api::batch::v1::{CronJob, Job};
    use kube::api::{DeleteParams, PropagationPolicy};
    use support::controller::Controller;
    let cluster = Cluster::shared_beside_upstream();
    let client = cluster.admin().await;
    let resource = install(&client).await;
    grant_the_controller(&client).await;
    let ns = cluster.namespace("crd-move").await;
    // The original's controller: kube-controller-manager's where it runs
    // one, else a batch/v1 ring in its place.
    let kinds: &[(&str, &str)] = if cluster.runs_upstream_cronjob() {
        &[("s", "shardcron")]
    } else {
        &[("b", "batch"), ("s", "shardcron")]
    };
    let mut rings = Vec::new();
    for &(ring, kind) in kinds {
        let ring = format!("{}-{ring}", ns.name);
        let mut replica =
            Controller::replica(cluster, &ns.name, &ring, kind, &["--cronjob-kinds", kind]).await;
        replica.launch();
        replica.wait_ready().await;
        rings.push(replica);
    }
    let batch = Api::<CronJob>::namespaced(client.clone(), &ns.name);
    let original: CronJob = serde_json::from_value(json!({
        "metadata": {"name": "mover"},
        "spec": spec(json!({"schedule": "*/1 * * * *", "successfulJobsHistoryLimit": 10}))
    }))
    .expect("a CronJob");
    batch
        .create(&PostParams::default(), &original)
        .await
        .expect("create the original");

    // The original runs a slot; right after it has recorded it, the move.
    let first = eventually("the original's first slot", Duration::from_secs(90), || {
        let batch = batch.clone();
        async move {
            let got = batch.get("mover").await.ok()?;
            got.status?.last_schedule_time.map(|t| t.0)
        }
    })
    .await;
    let suspended = batch
        .patch(
            "mover",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"suspend": true}})),
        )
        .await
        .expect("suspend the original");
    // Read from the cluster, as the user would: their kubeconfig, the
    // namespace (of which the original is the only CronJob).
    assert_eq!(suspended.spec.suspend, Some(true));
    let kubeconfig = cluster.kubeconfig_path();
    let converted = support::shardcron(&[
        "convert",
        "--namespace",
        &ns.name,
        "--kubeconfig",
        &kubeconfig.to_string_lossy(),
        "--resume",
    ]);
    assert!(
        converted.status.success(),
        "{}",
        support::stderr(&converted)
    );
    let copy: serde_yaml_ng::Value =
        serde_yaml_ng::from_str(support::stdout(&converted).trim_start_matches("---\n"))
            .expect("one YAML document");
    let copy: DynamicObject =
        serde_json::from_value(serde_json::to_value(copy).expect("JSON")).expect("an object");
    Api::<DynamicObject>::namespaced_with(client.clone(), &ns.name, &resource)
        .create(&PostParams::default(), &copy)
        .await
        .expect("apply the copy");
    // Orphaned, so the original's Jobs stay to be counted.
    batch
        .delete(
            "mover",
            &DeleteParams {
                propagation_policy: Some(PropagationPolicy::Orphan),
                ..Default::default()
            },
        )
        .await
        .expect("delete the original");

    // Two more slots from the copy; then every slot once.
    let jobs = Api::<Job>::namespaced(client.clone(), &ns.name);
    let slot_of = |job: &Job| -> Option<jiff::Timestamp> {
        job.metadata
            .annotations
            .as_ref()?
            .get("batch.kubernetes.io/cronjob-scheduled-timestamp")?
            .parse()
            .ok()
    };
    let by_copy = |job: &Job| {
        job.metadata
            .owner_references
            .iter()
            .flatten()
            .any(|r| r.api_version == "shardcron.io/v1")
    };
    let all = eventually(
        "two slots run by the copy",
        Duration::from_secs(180),
        || {
            let jobs = jobs.clone();
            async move {
                let all = jobs.list(&Default::default()).await.ok()?.items;
                (all.iter().filter(|j| by_copy(j)).count() >= 2).then_some(all)
            }
        },
    )
    .await;
    let mut slots: Vec<jiff::Timestamp> = all.iter().filter_map(slot_of).collect();
    slots.sort();
    let last = *slots.last().expect("slots");
    let minutes = (last.as_second() - first.as_second()) / 60;
    let expected: Vec<jiff::Timestamp> = (0..=minutes)
        .map(|m| jiff::Timestamp::from_second(first.as_second() + 60 * m).expect("a time"))
        .collect();
    assert_eq!(slots, expected, "one Job per slot from {first} to {last}");
    assert!(all.iter().any(|j| !by_copy(j)), "no Job of the original");
    for mut ring in rings {
        ring.stop().await;
    }
}
