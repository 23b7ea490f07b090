//! The controller suite (tests/suites/controller_e2e.rs) on batch/v1
//! CronJobs, shardcron in place of kube-controller-manager's CronJob
//! controller; and one ring serving both kinds.

mod support;

#[path = "suites/controller_e2e.rs"]
mod e2e;

use k8s_openapi::api::batch::v1::Job;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::json;
use shardcron::reconcile::CronJobKind;
use std::time::Duration;
use support::cluster::Cluster;
use support::controller::Controller;
use support::cronjobs::CronJobs;
use support::eventually;
use support::scenario::{ONE_SLOT, cronjob};

/// The kind the suite's CronJobs are.
const KIND: CronJobKind = CronJobKind::Batch;

/// The controller of each Job: (apiVersion, name).
async fn owners(jobs: &Api<Job>) -> Vec<(String, String)> {
    jobs.list(&ListParams::default())
        .await
        .expect("list Jobs")
        .items
        .into_iter()
        .filter_map(|job| {
            let owner = job.metadata.owner_references?.into_iter().next()?;
            Some((owner.api_version, owner.name))
        })
        .collect()
}

/// `--cronjob-kinds batch,shardcron`: one ring fires CronJobs of both
/// kinds, and a batch/v1 CronJob and a shardcron.io one of the same name
/// are two CronJobs (two keys, two actors): suspending or deleting one
/// leaves the other running.
#[tokio::test(flavor = "multi_thread")]
async fn one_ring_serves_both_kinds_and_keeps_namesakes_apart() {
    // Not `cluster_for(Shardcron)`: that one runs kube-controller-manager's
    // CronJob controller, which must be off where batch/v1 is served.
    let cluster = Cluster::shared();
    let admin = cluster.admin().await;
    support::crd::install(&admin).await;
    support::crd::grant_the_controller(&admin).await;
    let ns = cluster.namespace("both-kinds").await;
    let controller =
        Controller::start_with(cluster, &ns.name, &["--cronjob-kinds=batch,shardcron"]).await;
    let batch = CronJobs::namespaced(admin.clone(), &ns.name, CronJobKind::Batch);
    let crd = CronJobs::namespaced(admin.clone(), &ns.name, CronJobKind::Shardcron);
    let every_minute = |name: &str, spec| cronjob(name, "*/1 * * * *", spec, json!({}));
    let create = PostParams::default();
    // Namesakes: the batch/v1 one suspended, so that their Jobs' names
    // (the CronJob's name and the minute) never meet.
    batch
        .create(&create, &every_minute("same", json!({"suspend": true})))
        .await
        .expect("create batch/v1 same");
    crd.create(&create, &every_minute("same", json!({})))
        .await
        .expect("create shardcron.io same");
    batch
        .create(&create, &every_minute("other", json!({})))
        .await
        .expect("create batch/v1 other");
    let jobs: Api<Job> = Api::namespaced(admin.clone(), &ns.name);
    let both_fired = |owners: &[(String, String)]| {
        owners.contains(&("shardcron.io/v1".into(), "same".into()))
            && owners.contains(&("batch/v1".into(), "other".into()))
    };
    eventually("a Job of each kind", ONE_SLOT, || async {
        both_fired(&owners(&jobs).await).then_some(())
    })
    .await;
    assert!(
        !owners(&jobs)
            .await
            .contains(&("batch/v1".into(), "same".into())),
        "the suspended batch/v1 namesake fired"
    );
    let keys = controller
        .shards()
        .and_then(|report| report.keys)
        .expect("the replica's keys");
    let mut expected = [
        format!("{}/other", ns.name),
        format!("{}/same", ns.name),
        format!("shardcron.io/{}/same", ns.name),
    ];
    expected.sort();
    assert_eq!(keys, expected);
    // The status write follows the create: under the suite's load it may
    // land a few seconds after the Job shows.
    for (cronjobs, name) in [(&crd, "same"), (&batch, "other")] {
        eventually(
            &format!("{} {name}'s lastScheduleTime", cronjobs.kind),
            Duration::from_secs(15),
            || async {
                let status = cronjobs.get(name).await.expect("get").status;
                status.and_then(|s| s.last_schedule_time).map(|_| ())
            },
        )
        .await;
    }
    // Deleting the batch/v1 namesake stops its actor only.
    batch
        .delete("same", &DeleteParams::background())
        .await
        .expect("delete batch/v1 same");
    eventually("its actor stopped", Duration::from_secs(10), || async {
        (controller.metric("shardcron_actors") == 2.0).then_some(())
    })
    .await;
    let keys = controller
        .shards()
        .and_then(|report| report.keys)
        .unwrap_or_default();
    assert!(
        keys.contains(&format!("shardcron.io/{}/same", ns.name)),
        "the shardcron.io namesake's actor went with it: {keys:?}"
    );
}

/// `--admin-token-audiences shardcron-admin`: the admin API takes only
/// tokens meant for that audience, so a replica never receives one the API
/// server itself would accept. A namespace viewer's kubeconfig token is
/// refused, saying how to make one; its token made for the audience
/// (`--token-file`) is answered.
#[tokio::test(flavor = "multi_thread")]
async fn the_admin_api_takes_only_tokens_meant_for_its_audience() {
    let (admin, ns, controller, reader) = yearly_for_a_reader(
        "admin-audience",
        &["--admin-token-audiences=shardcron-admin"],
    )
    .await;
    let token = support::rbac::token(&admin, &ns.name, "reader", &["shardcron-admin"]).await;
    let token_file = std::env::temp_dir().join(format!("{}-audience.token", ns.name));
    std::fs::write(&token_file, token).expect("write the token");

    let address = controller.admin.to_string();
    let kubeconfig = reader.to_string_lossy().into_owned();
    let cronjob_name = format!("{}/yearly", ns.name);
    let ask = |extra: &[&str]| {
        let mut args = vec![
            "status",
            cronjob_name.as_str(),
            "--address",
            &address,
            "--kubeconfig",
            &kubeconfig,
            "--ring",
            &controller.ring,
            "--output",
            "json",
        ];
        args.extend(extra);
        support::shardcron(&args)
    };
    let refused = ask(&[]);
    let why = support::stderr(&refused);
    assert_eq!(refused.status.code(), Some(2), "{why}");
    assert!(
        why.contains("Unauthenticated")
            && why.contains("this API takes tokens meant for shardcron-admin")
            && why.contains("--audience shardcron-admin"),
        "{why}"
    );
    let token_path = token_file.to_string_lossy().into_owned();
    let answer: serde_json::Value = eventually(
        "the reader's answer with its audience's token",
        Duration::from_secs(30),
        || async {
            let out = ask(&["--token-file", &token_path]);
            out.status
                .success()
                .then(|| serde_json::from_str(&support::stdout(&out)).expect("JSON"))
        },
    )
    .await;
    assert_eq!(answer["owner"], controller.replica);
    let _ = std::fs::remove_file(&token_file);
}

/// `status --watch` against an owner that goes silent (a black hole on the
/// way: the connection stays open, nothing comes back): the CLI's pings
/// find it, it says so on stderr, and once the way is open again it finds
/// the owner and watches there, within its deadlines rather than never.
#[tokio::test(flavor = "multi_thread")]
async fn a_watch_whose_owner_goes_silent_looks_for_it_again() {
    use std::io::BufRead as _;
    let (_, ns, controller, reader) = yearly_for_a_reader("admin-silence", &[]).await;
    let proxy = support::proxy::Proxy::start(controller.admin).await;
    let address = proxy.addr.to_string();
    // The reader's RBAC and the replica's copy of the CronJob (created
    // after it started) may take a moment, and `--watch`, like a one-shot
    // status, ends on a first refusal: a one-shot status answers first.
    let cronjob_name = format!("{}/yearly", ns.name);
    let kubeconfig = reader.to_string_lossy().into_owned();
    eventually(
        "the reader's first answer",
        Duration::from_secs(30),
        || async {
            support::shardcron(&[
                "status",
                &cronjob_name,
                "--address",
                &address,
                "--ring",
                &controller.ring,
                "--kubeconfig",
                &kubeconfig,
            ])
            .status
            .success()
            .then_some(())
        },
    )
    .await;
    let mut watch = std::process::Command::new(env!("CARGO_BIN_EXE_shardcron"))
        .args(["status", &format!("{}/yearly", ns.name), "--watch"])
        .args(["--address", &address, "--ring", &controller.ring])
        .args(["--kubeconfig", &reader.to_string_lossy()])
        .args(["--output", "json"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run shardcron status --watch");
    let lines = |from: Box<dyn std::io::Read + Send>| {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(from).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        rx
    };
    let stdout = lines(Box::new(watch.stdout.take().expect("stdout")));
    let stderr = lines(Box::new(watch.stderr.take().expect("stderr")));
    let first = stdout
        .recv_timeout(Duration::from_secs(30))
        .expect("the status before the watch");
    assert!(first.contains(&controller.replica), "{first}");

    // The watch's own connection is dialled after that answer: let it open.
    tokio::time::sleep(Duration::from_secs(3)).await;
    proxy.stall();
    let stalled = std::time::Instant::now();
    let said = stderr
        .recv_timeout(Duration::from_secs(40))
        .expect("the CLI noticed the silence within two pings");
    let noticed = stalled.elapsed();
    assert!(
        said.contains("ended") && said.contains("looking for its owner"),
        "{said}"
    );
    proxy.restore();
    let followed = stdout
        .recv_timeout(Duration::from_secs(60))
        .expect("the owner found again once the way is open");
    let followed: serde_json::Value = serde_json::from_str(&followed).expect("JSON");
    let replica = controller.replica.as_str();
    assert_eq!(
        followed,
        json!({"followed": {"from": replica, "to": replica}}),
        "noticed after {noticed:?}"
    );
    let _ = watch.kill();
    let _ = watch.wait();
}

/// A controller started with `args` in a new namespace for `test`, the
/// CronJob `yearly` there, and the kubeconfig of its ServiceAccount
/// `reader`, which may view the namespace (and so the CronJob).
async fn yearly_for_a_reader(
    test: &str,
    args: &[&str],
) -> (
    kube::Client,
    support::cluster::TestNamespace,
    Controller,
    std::path::PathBuf,
) {
    use support::rbac::{Grant, account_kubeconfig};
    let cluster = Cluster::shared();
    let admin = cluster.admin().await;
    let ns = cluster.namespace(test).await;
    let controller = Controller::start_with(cluster, &ns.name, args).await;
    create_yearly(&admin, &ns.name).await;
    let reader = account_kubeconfig(
        &admin,
        cluster,
        &ns.name,
        "reader",
        Grant::ClusterRole("view"),
    )
    .await;
    (admin, ns, controller, reader)
}

/// A CronJob `yearly` in `namespace`, armed for next New Year.
async fn create_yearly(admin: &kube::Client, namespace: &str) {
    CronJobs::namespaced(admin.clone(), namespace, CronJobKind::Batch)
        .create(
            &PostParams::default(),
            &cronjob("yearly", "0 0 1 1 *", json!({}), json!({})),
        )
        .await
        .expect("create the CronJob");
}

/// The metrics port for a Prometheus in the cluster: over TLS with the
/// certificate on the replica's Lease; no token, a tenant's token and a
/// token RBAC does not let `get` the path are refused; the shipped
/// `shardcron-metrics-reader` ClusterRole (deploy/monitoring) lets a
/// scraper read the per-CronJob series.
#[tokio::test]
async fn the_metrics_port_serves_only_scrapers_rbac_lets_get_the_path() {
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
    use support::rbac::{Grant, account_kubeconfig, token};
    let cluster = Cluster::shared();
    let admin = cluster.admin().await;
    let ns = cluster.namespace("secure-metrics").await;
    let controller = Controller::start(cluster, &ns.name).await;
    create_yearly(&admin, &ns.name).await;

    // The shipped ClusterRole, bound to this test's scraper.
    let shipped = std::fs::read_to_string(
        support::repo_root().join("deploy/monitoring/prometheus-rbac.yaml"),
    )
    .expect("deploy/monitoring/prometheus-rbac.yaml");
    let role: ClusterRole = serde_yaml_ng::Deserializer::from_str(&shipped)
        .filter_map(|doc| {
            let value = <serde_yaml_ng::Value as serde::Deserialize>::deserialize(doc).ok()?;
            (value["kind"] == "ClusterRole").then(|| serde_yaml_ng::from_value(value).ok())?
        })
        .next()
        .expect("a ClusterRole in it");
    let role_name = role.metadata.name.clone().expect("its name");
    match Api::<ClusterRole>::all(admin.clone())
        .create(&PostParams::default(), &role)
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => panic!("create the ClusterRole: {e}"),
    }
    let binding: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": format!("{}-scraper", ns.name)},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role_name},
        "subjects": [{"kind": "ServiceAccount", "name": "scraper", "namespace": ns.name}]
    }))
    .expect("a ClusterRoleBinding");
    Api::<ClusterRoleBinding>::all(admin.clone())
        .create(&PostParams::default(), &binding)
        .await
        .expect("bind the scraper");
    let scraper = token(&admin, &ns.name, "scraper", &[]).await;
    // A tenant: `view` in its own namespace, nothing on the metrics paths.
    account_kubeconfig(
        &admin,
        cluster,
        &ns.name,
        "tenant",
        Grant::ClusterRole("view"),
    )
    .await;
    let tenant = token(&admin, &ns.name, "tenant", &[]).await;

    let pem = controller.lease_certificate(&admin).await;
    let ca = std::env::temp_dir().join(format!("{}-ca.pem", ns.name));
    std::fs::write(&ca, pem).expect("write the certificate");
    let scrape = |path: &str, token: Option<&str>| {
        let url = format!(
            "https://127.0.0.1:{}{path}",
            controller.secure_metrics.port()
        );
        let mut curl = std::process::Command::new("curl");
        curl.args(["-sS", "--max-time", "20", "--cacert"])
            .arg(&ca)
            .args(["-w", "\n%{http_code}", &url]);
        if let Some(token) = token {
            curl.args(["-H", &format!("Authorization: Bearer {token}")]);
        }
        let out = curl.output().expect("run curl");
        let text = support::stdout(&out);
        let (body, code) = text.rsplit_once('\n').unwrap_or(("", &text));
        (code.trim().to_owned(), body.to_owned())
    };

    for path in ["/metrics", "/metrics/cronjobs"] {
        let (code, body) = scrape(path, None);
        assert_eq!(code, "401", "{path} without a token: {body}");
        let (code, body) = scrape(path, Some("not-a-token"));
        assert_eq!(code, "401", "{path} with a made-up token: {body}");
        let (code, body) = scrape(path, Some(&tenant));
        assert_eq!(code, "403", "{path} with the tenant's token: {body}");
        assert!(body.contains(&format!("may not get {path}")), "{body}");
    }
    let (code, body) = scrape("/metrics", Some(&scraper));
    assert_eq!(code, "200", "{body}");
    assert!(body.contains("shardcron_"), "{body}");
    let series = eventually(
        "the CronJob's series on the metrics port",
        Duration::from_secs(30),
        || async {
            let (code, body) = scrape("/metrics/cronjobs", Some(&scraper));
            (code == "200" && body.contains(&format!("namespace=\"{}\"", ns.name))).then_some(body)
        },
    )
    .await;
    assert!(series.contains("cronjob=\"yearly\""), "{series}");
    let _ = std::fs::remove_file(&ca);
    let _ = Api::<ClusterRoleBinding>::all(admin.clone())
        .delete(
            &binding.metadata.name.unwrap_or_default(),
            &DeleteParams::default(),
        )
        .await;
}

/// Any pod can reach a replica's ports, before any authentication. More
/// connections than a listener admits, opened on every port and left
/// silent (the aggregated API's port is the secure metrics' listener, and
/// is served only where tests/aggregated.rs grants its reads), are each closed at their deadline (the request's headers or the
/// TLS handshake, 10 s; those waiting in the backlog 10 s after they are
/// admitted), and the replica answers its probes and scrapes again.
#[tokio::test]
async fn silent_connections_to_every_port_are_closed_at_their_deadline() {
    use std::io::Read as _;
    use std::net::TcpStream;
    let cluster = Cluster::shared();
    let ns = cluster.namespace("silent-connections").await;
    let mut controller = Controller::start(cluster, &ns.name).await;
    let ports = [
        controller.health,
        controller.metrics,
        controller.debug,
        controller.admin,
        controller.secure_metrics,
    ];
    let per_port = shardcron::telemetry::listener::MAX_CONNECTIONS + 20;
    let mut silent = Vec::new();
    for port in ports {
        for _ in 0..per_port {
            let stream = TcpStream::connect_timeout(&port, Duration::from_secs(5))
                .unwrap_or_else(|e| panic!("connect to {port} ({ports:?}): {e}"));
            silent.push((port, stream));
        }
    }
    let started = std::time::Instant::now();
    let deadline = started + Duration::from_secs(45);
    let still_open = tokio::task::spawn_blocking(move || {
        let mut still_open = Vec::new();
        for (port, mut stream) in silent {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            stream
                .set_read_timeout(Some(left.max(Duration::from_millis(10))))
                .expect("a read timeout");
            let mut buffer = [0u8; 512];
            loop {
                match stream.read(&mut buffer) {
                    // Whatever a server says before it closes is fine.
                    Ok(0) => break,
                    Ok(_) => {}
                    Err(e)
                        if matches!(
                            e.kind(),
                            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                        ) =>
                    {
                        still_open.push(port);
                        break;
                    }
                    Err(_) => break,
                }
            }
        }
        still_open
    })
    .await
    .expect("the reads");
    assert!(
        still_open.is_empty(),
        "left open after {:?}: {} on {:?}",
        started.elapsed(),
        still_open.len(),
        still_open.iter().collect::<std::collections::BTreeSet<_>>()
    );
    controller.wait_ready().await;
    assert_eq!(controller.metric("shardcron_ring_members"), 1.0);
}
