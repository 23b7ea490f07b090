//! The admin API through kube-apiserver's aggregation layer
//! (deploy/admin-api): the local control plane's admin, a client
//! certificate user, reads every CronJob's live state with `kubectl get
//! --raw`, whichever replica owns it (the replica kube-apiserver reaches
//! asks the owner); a ServiceAccount with `view` in one namespace reads
//! that namespace's and is refused another's by RBAC; `kubectl auth can-i`
//! agrees. On a control plane of its own: the APIService is cluster-wide.

mod support;

use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::process::Command;
use std::time::Duration;
use support::cluster::Cluster;
use support::fleet::Fleet;
use support::rbac::{Grant, account_kubeconfig};
use support::scenario::cronjob;
use support::{eventually, repo_root};

const API: &str = "/apis/admin.shardcron.io/v1alpha1";
const CRONJOBS: usize = 16;

fn run(mut command: Command) -> (bool, String, String) {
    let out = command.output().expect("run kubectl");
    (
        out.status.success(),
        support::stdout(&out),
        support::stderr(&out),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn any_credential_reads_the_admin_api_through_the_api_server() {
    let cluster = Cluster::shared();
    let kubectl = || cluster.kubectl().expect("kubectl");
    // The APIService as kube-apiserver has it; None: there is none.
    let apiservice = || {
        let mut get = kubectl();
        get.args([
            "get",
            "apiservice",
            "v1alpha1.admin.shardcron.io",
            "-o",
            "json",
        ]);
        let (ok, out, _) = run(get);
        ok.then(|| serde_json::from_str::<Value>(&out).ok())
            .flatten()
    };
    let apply = |dir: &str| {
        let mut apply = kubectl();
        apply.args(["apply", "-k"]).arg(repo_root().join(dir));
        let (ok, _, err) = run(apply);
        assert!(ok, "kubectl apply -k {dir}: {err}");
    };
    // deploy/ first (the controller's namespace and ServiceAccount); the
    // replicas start before deploy/admin-api, which lets them read the
    // request-header settings (and register the APIService, and ask each
    // other): they keep trying, and serve once it is applied.
    apply("deploy");
    // The replicas keep the APIService registered while they run.
    let mut fleet = Fleet::empty_with(
        "aggregated",
        &[
            "--aggregated-api-service",
            "shardcron-system/shardcron-admin",
        ],
    )
    .await;
    fleet.add().await;
    fleet.add().await;
    fleet
        .create_cronjobs(CRONJOBS, |name| {
            cronjob(name, "0 0 1 1 *", json!({}), json!({}))
        })
        .await;
    let ns = fleet.ns.name.clone();
    apply("deploy/admin-api");

    // kube-apiserver reaches replica r0 (a local process) through an
    // ExternalName Service: the aggregator resolves it to 127.0.0.1 and
    // the APIService's port.
    let mut delete = kubectl();
    delete.args([
        "-n",
        "shardcron-system",
        "delete",
        "service",
        "shardcron-admin",
    ]);
    run(delete);
    let service = json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "shardcron-admin", "namespace": "shardcron-system"},
        "spec": {"type": "ExternalName", "externalName": "127.0.0.1"}
    });
    let port = fleet.replicas[0].aggregated.port();
    let patch = json!({"spec": {"service": {"port": port}}});
    for (args, input) in [
        (vec!["apply", "-f", "-"], service.to_string()),
        (
            vec![
                "patch",
                "apiservice",
                "v1alpha1.admin.shardcron.io",
                "--type=merge",
                "-p",
            ],
            String::new(),
        ),
    ] {
        let mut command = kubectl();
        command.args(&args);
        let (ok, _, err) = if input.is_empty() {
            command.arg(patch.to_string());
            run(command)
        } else {
            run_with_input(command, &input)
        };
        assert!(ok, "{args:?}: {err}");
    }
    eventually(
        "the APIService available",
        Duration::from_secs(60),
        || async {
            let service = apiservice()?;
            service["status"]["conditions"]
                .as_array()?
                .iter()
                .any(|c| c["type"] == "Available" && c["status"] == "True")
                .then_some(())
        },
    )
    .await;

    let raw = |kubeconfig: Option<&std::path::Path>, path: &str| {
        let mut get = match kubeconfig {
            Some(path) => cluster.kubectl_as(path).expect("kubectl"),
            None => kubectl(),
        };
        get.args(["get", "--raw", path]);
        run(get)
    };

    // The admin (a client certificate): every CronJob, from its owner.
    let mut owners = BTreeSet::new();
    for name in &fleet.names {
        let (ok, out, err) = raw(None, &format!("{API}/namespaces/{ns}/cronjobs/{name}"));
        assert!(ok, "{name}: {err}");
        let answer: Value = serde_json::from_str(&out).expect("JSON");
        assert_eq!(answer["kind"], "CronJobState", "{answer}");
        assert_eq!(answer["metadata"]["name"], name.as_str());
        assert_eq!(answer["status"]["phase"], "running", "{answer}");
        owners.insert(
            answer["status"]["owner"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
        );
    }
    let expected: BTreeSet<String> = fleet.owners().into_values().collect();
    assert_eq!(
        owners, expected,
        "both replicas answered for their CronJobs"
    );
    assert_eq!(owners.len(), 2, "{owners:?}");
    let (ok, out, err) = raw(None, &format!("{API}/rings/{ns}"));
    assert!(ok, "{err}");
    let ring: Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(ring["status"]["ring"], ns.as_str(), "{ring}");

    // `kubectl get`: both replicas' CronJobs in one list, printed from the
    // Table the API answers; -A adds the namespace; -o yaml the objects.
    let get = |kubeconfig: Option<&std::path::Path>, args: &[&str]| {
        let mut get = match kubeconfig {
            Some(path) => cluster.kubectl_as(path).expect("kubectl"),
            None => kubectl(),
        };
        get.arg("get").args(args);
        run(get)
    };
    let mut names = fleet.names.clone();
    names.sort();
    let (ok, out, err) = get(None, &["cronjobs.admin.shardcron.io", "-n", &ns]);
    assert!(ok, "{err}");
    eprintln!("kubectl get cronjobs.admin.shardcron.io -n {ns}:\n{out}");
    let mut lines = out.lines();
    let header: Vec<&str> = lines
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(
        header,
        [
            "NAME",
            "OWNER",
            "PHASE",
            "NEXT",
            "WAKE-UP",
            "LAST",
            "SCHEDULE",
            "ACTIVE",
            "SUSPENDED"
        ],
        "{out}"
    );
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split_whitespace().collect()).collect();
    let listed: Vec<&str> = rows.iter().filter_map(|row| row.first().copied()).collect();
    assert_eq!(listed, names, "{out}");
    let row_owners: BTreeSet<&str> = rows.iter().filter_map(|row| row.get(1).copied()).collect();
    assert_eq!(row_owners.len(), 2, "each replica's share: {out}");
    let (ok, out, err) = get(None, &["cronjobs.admin.shardcron.io", "-A"]);
    assert!(ok, "{err}");
    assert!(out.starts_with("NAMESPACE "), "{out}");
    assert_eq!(
        out.lines()
            .filter(|l| l.starts_with(&format!("{ns} ")))
            .count(),
        names.len(),
        "{out}"
    );
    let (ok, out, err) = get(
        None,
        &[
            "cronjobs.admin.shardcron.io",
            &names[0],
            "-n",
            &ns,
            "-o",
            "yaml",
        ],
    );
    assert!(ok, "{err}");
    assert!(
        out.contains("kind: CronJobState") && out.contains("nextWakeup:"),
        "{out}"
    );
    for (args, rows) in [
        (vec!["rings.admin.shardcron.io", ns.as_str()], 1),
        (vec!["rings.admin.shardcron.io"], 1),
        (vec!["queues.admin.shardcron.io"], 2),
    ] {
        let (ok, out, err) = get(None, &args);
        assert!(ok, "{args:?}: {err}");
        assert!(out.starts_with("NAME "), "{out}");
        assert_eq!(out.lines().count(), rows + 1, "{args:?}: {out}");
    }

    // A tenant: `view` in its namespace (which aggregates
    // shardcron-admin-cronjobs), nothing elsewhere.
    let admin = cluster.admin().await;
    let reader =
        account_kubeconfig(&admin, cluster, &ns, "reader", Grant::ClusterRole("view")).await;
    let (ok, out, err) = raw(
        Some(&reader),
        &format!("{API}/namespaces/{ns}/cronjobs/c00"),
    );
    assert!(ok, "{err}");
    assert!(out.contains("\"owner\""), "{out}");
    let other = cluster.namespace("aggregated-other").await;
    let (ok, _, err) = raw(
        Some(&reader),
        &format!("{API}/namespaces/{}/cronjobs/c00", other.name),
    );
    assert!(!ok && err.contains("forbidden"), "{err}");
    let (ok, _, err) = raw(Some(&reader), &format!("{API}/rings/{ns}"));
    assert!(!ok && err.contains("forbidden"), "{err}");
    // `view` lists its namespace's, and no other's.
    let (ok, out, err) = get(Some(&reader), &["cronjobs.admin.shardcron.io", "-n", &ns]);
    assert!(ok && out.lines().count() == names.len() + 1, "{out}{err}");
    let (ok, _, err) = get(
        Some(&reader),
        &["cronjobs.admin.shardcron.io", "-n", &other.name],
    );
    assert!(!ok && err.contains("forbidden"), "{err}");
    for (namespace, expected) in [(ns.as_str(), "yes"), (other.name.as_str(), "no")] {
        let mut can = cluster.kubectl_as(&reader).expect("kubectl");
        can.args([
            "auth",
            "can-i",
            "get",
            "cronjobs.admin.shardcron.io",
            "-n",
            namespace,
        ]);
        let (_, out, _) = run(can);
        assert_eq!(out.trim(), expected, "can-i in {namespace}");
    }

    // The commands, by default through the API server: the admin's client
    // certificate is enough (no token, no Lease read).
    let admin_kubeconfig = cluster.kubeconfig_path();
    let command = |kubeconfig: &std::path::Path, args: &[&str]| {
        let mut all = args.to_vec();
        let kubeconfig = kubeconfig.to_string_lossy().into_owned();
        all.extend(["--kubeconfig", &kubeconfig, "--ring", &ns]);
        support::shardcron(&all)
    };
    let c00 = format!("{ns}/c00");
    let out = command(&admin_kubeconfig, &["status", &c00, "--output", "json"]);
    assert!(out.status.success(), "{}", support::stderr(&out));
    let status: Value = serde_json::from_str(&support::stdout(&out)).expect("JSON");
    assert_eq!(status["owner"], fleet.owners()["c00"].as_str(), "{status}");
    for args in [
        &["ring"][..],
        &["queues"],
        &["explain", "--live", &c00],
        &["status", &c00, "--connect", "api-server"],
    ] {
        let out = command(&admin_kubeconfig, args);
        assert!(out.status.success(), "{args:?}: {}", support::stderr(&out));
    }
    let elsewhere = format!("{}/c00", other.name);
    let out = command(&reader, &["status", &elsewhere]);
    let why = support::stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{why}");
    assert!(
        why.contains("PermissionDenied") && why.contains("forbidden"),
        "{why}"
    );

    // The controller may register no APIService but its own (RBAC lets
    // it create any; the admission policy refuses the others).
    let controller = std::env::temp_dir().join(format!("{ns}-controller.kubeconfig"));
    cluster
        .controller_kubeconfig(&controller)
        .await
        .expect("the controller's kubeconfig");
    let mut create = cluster.kubectl_as(&controller).expect("kubectl");
    create.args(["create", "-f", "-"]);
    let other_group = json!({
        "apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
        "metadata": {"name": "v1.evil.example.com"},
        "spec": {"group": "evil.example.com", "version": "v1", "groupPriorityMinimum": 1000,
                 "versionPriority": 15, "insecureSkipTLSVerify": true,
                 "service": {"namespace": "shardcron-system", "name": "shardcron-admin"}}
    });
    let (ok, _, err) = run_with_input(create, &other_group.to_string());
    assert!(
        !ok && err.contains("may register only v1alpha1.admin.shardcron.io"),
        "{err}"
    );

    // While no replica runs, the group must not hold the cluster's
    // namespace deletions: the last replica out withdraws the APIService.
    fleet.replicas[1].stop().await;
    assert!(apiservice().is_some(), "withdrawn while r0 still runs");
    fleet.replicas[0].stop().await;
    assert!(
        apiservice().is_none(),
        "the last replica out left the APIService"
    );
    let gone = cluster.namespace("aggregated-gone").await;
    let mut delete = kubectl();
    delete.args(["delete", "namespace", &gone.name, "--timeout=60s"]);
    let (ok, _, err) = run(delete);
    assert!(ok, "a namespace deletion with no replica up: {err}");
    // Without it, --connect api-server says what is missing.
    let out = command(&admin_kubeconfig, &["ring", "--connect", "api-server"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        support::stderr(&out).contains("deploy/admin-api"),
        "{}",
        support::stderr(&out)
    );
    // A replica back registers it again; gone, withdraws it again.
    let registered_again = || {
        eventually(
            "the APIService registered again",
            Duration::from_secs(30),
            || async { apiservice().map(drop) },
        )
    };
    fleet.replicas[0].restart().await;
    registered_again().await;
    fleet.replicas[0].stop().await;
    assert!(apiservice().is_none(), "withdrawn again");

    // Why deploy/admin-api stays opt-in: replicas that all crash leave the
    // APIService registered with no one to serve it, and every namespace
    // deletion in the cluster waits (docs/admin-api.md, "Opt-in").
    fleet.replicas[0].restart().await;
    registered_again().await;
    fleet.replicas[0].kill();
    assert!(apiservice().is_some(), "a crash withdrew the APIService");
    let held = cluster.namespace("aggregated-held").await;
    let mut delete = kubectl();
    delete.args(["delete", "namespace", &held.name, "--wait=false"]);
    assert!(run(delete).0, "deleting a namespace");
    let condition = || {
        let mut get = kubectl();
        get.args(["get", "namespace", &held.name, "-o", "json"]);
        let (ok, out, _) = run(get);
        let namespace: Value = serde_json::from_str(&out).unwrap_or_default();
        let conditions = namespace["status"]["conditions"].as_array().cloned();
        (ok, conditions.unwrap_or_default())
    };
    eventually(
        "the deletion held by the group's stale discovery",
        Duration::from_secs(60),
        || async {
            let (_, conditions) = condition();
            conditions
                .iter()
                .any(|c| c["type"] == "NamespaceDeletionDiscoveryFailure" && c["status"] == "True")
                .then_some(())
        },
    )
    .await;
    // What the alert's runbook says to do: delete the APIService.
    let mut withdraw = kubectl();
    withdraw.args(["delete", "apiservice", "v1alpha1.admin.shardcron.io"]);
    assert!(run(withdraw).0, "deleting the APIService");
    eventually(
        "the namespace deleted once the APIService is gone",
        Duration::from_secs(60),
        || async { (!condition().0).then_some(()) },
    )
    .await;
}

fn run_with_input(mut command: Command, input: &str) -> (bool, String, String) {
    use std::io::Write;
    command.stdin(std::process::Stdio::piped());
    command.stdout(std::process::Stdio::piped());
    command.stderr(std::process::Stdio::piped());
    let mut child = command.spawn().expect("kubectl");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(input.as_bytes())
        .expect("write");
    let out = child.wait_with_output().expect("kubectl");
    (
        out.status.success(),
        support::stdout(&out),
        support::stderr(&out),
    )
}
