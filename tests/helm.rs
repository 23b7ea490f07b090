//! deploy/helm/shardcron: the chart lints; with its defaults it renders what
//! `kubectl apply -k deploy/` applies, and with `cronjobKinds: [shardcron]`
//! what `deploy/managed` applies, object for object (so the two cannot
//! drift); bad values are refused with a message. Then `helm install` on a
//! control plane running kube-controller-manager's own CronJob controller
//! (a managed one): the chart's container, run as the chart's
//! ServiceAccount with the chart's arguments and environment, fires a
//! shardcron.io CronJob, serving the certificate the chart made (verified
//! against its CA for the Service's name, the CA published on the Lease);
//! that ServiceAccount may do what the mode needs and no more; `helm
//! uninstall` keeps the definition and the CronJobs.

mod support;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use serde_json::{Value, json};
use shardcron::admin::tls::CERT_ANNOTATION;
use shardcron::reconcile::CronJobKind;
use shardcron_harness::{Replica, ReplicaSpec};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;
use support::cluster::Cluster;
use support::crd::api_resource;
use support::cronjobs::CronJobs;
use support::rbac::allowed;
use support::scenario::{ONE_SLOT, cronjob};
use support::{eventually, local_binary, repo_root};

const CHART: &str = "deploy/helm/shardcron";

/// The labels Helm's conventions add to deploy/'s (the chart's selectors
/// carry the release too, so two releases never select each other's pods).
const HELM_LABELS: [&str; 4] = [
    "app.kubernetes.io/instance",
    "app.kubernetes.io/managed-by",
    "app.kubernetes.io/version",
    "helm.sh/chart",
];

/// Runs `program args` in the repository; its stdout, or a panic with its stderr.
fn output_of(program: &Path, args: &[&str]) -> String {
    let output = Command::new(program)
        .args(args)
        .current_dir(repo_root())
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", program.display()));
    assert!(
        output.status.success(),
        "{} {args:?} failed: {}",
        program.display(),
        support::stderr(&output)
    );
    support::stdout(&output)
}

fn helm(args: &[&str]) -> String {
    output_of(&local_binary("helm"), args)
}

/// `helm template` with `args`, or its error message.
fn render(args: &[&str]) -> Result<String, String> {
    let output = Command::new(local_binary("helm"))
        .args([
            "template",
            "shardcron",
            CHART,
            "--namespace",
            "shardcron-system",
        ])
        .args(args)
        .current_dir(repo_root())
        .output()
        .expect("run helm");
    if output.status.success() {
        Ok(support::stdout(&output))
    } else {
        Err(support::stderr(&output))
    }
}

fn kustomize(dir: &str) -> String {
    output_of(&local_binary("kubectl"), &["kustomize", dir])
}

/// The objects of a multi-document YAML stream by (kind, name).
fn objects(yaml: &str) -> BTreeMap<(String, String), Value> {
    serde_yaml_ng::Deserializer::from_str(yaml)
        .filter_map(|document| {
            let value: Value = serde::Deserialize::deserialize(document).expect("YAML");
            let kind = value["kind"].as_str()?.to_owned();
            let name = value["metadata"]["name"].as_str()?.to_owned();
            Some(((kind, name), value))
        })
        .collect()
}

/// Helm's labels and the CRD's keep annotation out, so what is left is
/// what deploy/ says.
fn without_helms_additions(value: &mut Value) {
    let Value::Object(map) = value else {
        if let Value::Array(items) = value {
            items.iter_mut().for_each(without_helms_additions);
        }
        return;
    };
    for key in ["labels", "matchLabels", "selector", "annotations"] {
        let Some(Value::Object(inner)) = map.get_mut(key) else {
            continue;
        };
        let before = inner.len();
        for label in HELM_LABELS.iter().chain(&["helm.sh/resource-policy"]) {
            inner.remove(*label);
        }
        if inner.is_empty() && before > 0 {
            map.remove(key);
        }
    }
    map.values_mut().for_each(without_helms_additions);
}

/// The chart rendered with `values` is the kustomize overlay `dir`, but for
/// the Namespace (a release's namespace is `helm install
/// --create-namespace`'s) and Helm's labels.
fn assert_renders_as(values: &[&str], dir: &str) {
    let mut chart = objects(&render(values).expect("helm template"));
    let mut base = objects(&kustomize(dir));
    base.retain(|(kind, _), _| kind != "Namespace");
    chart.values_mut().for_each(without_helms_additions);
    assert_eq!(
        chart.keys().collect::<Vec<_>>(),
        base.keys().collect::<Vec<_>>(),
        "the chart ({values:?}) and {dir} make different objects"
    );
    for (key, object) in &chart {
        assert!(
            object == &base[key],
            "{key:?} differs between the chart ({values:?}) and {dir}:\nchart: {}\n{dir}: {}",
            serde_json::to_string_pretty(object).unwrap_or_default(),
            serde_json::to_string_pretty(&base[key]).unwrap_or_default()
        );
    }
}

#[test]
fn the_chart_lints() {
    let out = helm(&["lint", "--strict", CHART]);
    assert!(out.contains("0 chart(s) failed"), "{out}");
}

#[test]
fn with_its_defaults_the_chart_is_deploy() {
    assert_renders_as(&[], "deploy");
}

#[test]
fn serving_the_crd_the_chart_is_deploy_managed() {
    assert_renders_as(&["--set", "cronjobKinds={shardcron}"], "deploy/managed");
}

/// Both kinds: the rights on both kinds' CronJobs (deploy/batch's and
/// deploy/crd's), the definition, and the flag naming both.
#[test]
fn serving_both_kinds_the_chart_grants_both_and_installs_the_definition() {
    let chart = objects(&render(&["--set", "cronjobKinds={shardcron,batch}"]).expect("render"));
    let base = objects(&format!(
        "{}\n---\n{}",
        kustomize("deploy"),
        kustomize("deploy/crd")
    ));
    for key in [
        ("ClusterRole", "shardcron-batch"),
        ("ClusterRole", "shardcron-crd"),
        ("ClusterRoleBinding", "shardcron-batch"),
        ("ClusterRoleBinding", "shardcron-crd"),
        ("CustomResourceDefinition", "cronjobs.shardcron.io"),
    ] {
        let key = (key.0.to_owned(), key.1.to_owned());
        let mut object = chart
            .get(&key)
            .cloned()
            .unwrap_or_else(|| panic!("no {key:?}"));
        without_helms_additions(&mut object);
        assert!(object == base[&key], "{key:?} differs from kustomize's");
    }
    let statefulset = &chart[&("StatefulSet".to_owned(), "shardcron".to_owned())];
    let args = &statefulset["spec"]["template"]["spec"]["containers"][0]["args"];
    assert!(
        args.as_array()
            .is_some_and(|a| a.contains(&json!("--cronjob-kinds=batch,shardcron"))),
        "{args}"
    );
}

/// `aggregatedApi.enabled`: deploy/admin-api, object for object.
#[test]
fn with_the_aggregated_api_the_chart_adds_deploy_admin_api() {
    // deploy/admin-api keeps the replicas' self-signed certificates (a
    // kustomization makes no CA): the chart's certificate is below.
    let chart = objects(
        &render(&[
            "--set",
            "aggregatedApi.enabled=true",
            "--set",
            "tls.source=selfSigned",
        ])
        .expect("render"),
    );
    let added = objects(&kustomize("deploy/admin-api"));
    assert_eq!(added.len(), 10, "{:?}", added.keys());
    for (key, object) in &added {
        let mut rendered = chart
            .get(key)
            .cloned()
            .unwrap_or_else(|| panic!("no {key:?} in the chart"));
        without_helms_additions(&mut rendered);
        assert!(
            &rendered == object,
            "{key:?} differs:\nchart: {rendered}\ndeploy/admin-api: {object}"
        );
    }
}

/// `monitoring.*`: the Prometheus RBAC is deploy/monitoring's, the
/// PrometheusRule's spec its alert rules and the dashboard's ConfigMap its
/// dashboard, as they are; the ServiceMonitor scrapes both paths of the
/// port the workload opens, through the Service the chart makes.
#[test]
fn the_monitoring_values_render_deploy_monitoring() {
    let chart = objects(
        &render(&[
            "--set",
            "monitoring.prometheusServiceAccount.name=prometheus-k8s",
            "--set",
            "monitoring.serviceMonitor.enabled=true",
            "--set",
            "monitoring.podMonitor.enabled=true",
            "--set",
            "monitoring.prometheusRule.enabled=true",
            "--set",
            "monitoring.dashboard.enabled=true",
        ])
        .expect("render"),
    );
    let read = |path: &str| {
        std::fs::read_to_string(repo_root().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
    };
    let key = |kind: &str, name: &str| (kind.to_owned(), name.to_owned());
    for (shipped_key, shipped) in objects(&read("deploy/monitoring/prometheus-rbac.yaml")) {
        let mut object = chart
            .get(&shipped_key)
            .cloned()
            .unwrap_or_else(|| panic!("no {shipped_key:?}"));
        without_helms_additions(&mut object);
        assert_eq!(object, shipped, "{shipped_key:?}");
    }
    let rules: Value =
        serde_yaml_ng::from_str(&read("deploy/monitoring/alerts.yaml")).expect("the rules");
    assert_eq!(chart[&key("PrometheusRule", "shardcron")]["spec"], rules);
    let dashboard: Value =
        serde_json::from_str(&read("deploy/monitoring/dashboard.json")).expect("the dashboard");
    let carried = chart[&key("ConfigMap", "shardcron-dashboard")]["data"]["shardcron.json"]
        .as_str()
        .expect("the dashboard in the ConfigMap");
    assert_eq!(
        serde_json::from_str::<Value>(carried).expect("JSON"),
        dashboard
    );

    let monitor = &chart[&key("ServiceMonitor", "shardcron")]["spec"];
    let service = &chart[&key("Service", "shardcron")];
    let selected = monitor["selector"]["matchLabels"]
        .as_object()
        .expect("a selector");
    for (label, value) in selected {
        assert_eq!(&service["metadata"]["labels"][label], value, "{label}");
    }
    let port = |ports: &Value, name: &str| {
        ports
            .as_array()
            .into_iter()
            .flatten()
            .any(|port| port["name"] == name)
    };
    let container =
        &chart[&key("StatefulSet", "shardcron")]["spec"]["template"]["spec"]["containers"][0];
    assert!(
        port(&service["spec"]["ports"], "https-metrics"),
        "{service}"
    );
    assert!(port(&container["ports"], "https-metrics"), "{container}");
    let endpoints = monitor["endpoints"].as_array().expect("endpoints");
    let paths: Vec<_> = endpoints.iter().map(|e| e["path"].as_str()).collect();
    assert_eq!(paths, [Some("/metrics"), Some("/metrics/cronjobs")]);
    // Each scrape with the scraper's token (`authorization`, not the
    // deprecated bearerTokenFile): a token Secret of a ServiceAccount the
    // metrics-reader ClusterRole is bound to.
    let secret = &chart[&key("Secret", "shardcron-scraper-token")];
    assert_eq!(secret["type"], "kubernetes.io/service-account-token");
    let scraper = &secret["metadata"]["annotations"]["kubernetes.io/service-account.name"];
    assert!(chart.contains_key(&key("ServiceAccount", scraper.as_str().expect("a name"))));
    let binding = &chart[&key("ClusterRoleBinding", "shardcron-scraper")];
    assert_eq!(binding["roleRef"]["name"], "shardcron-metrics-reader");
    assert_eq!(binding["subjects"][0]["name"], *scraper);
    let pods = &chart[&key("PodMonitor", "shardcron")]["spec"];
    let pod_labels = &container_spec_labels(&chart);
    for (label, value) in pods["selector"]["matchLabels"]
        .as_object()
        .expect("a selector")
    {
        assert_eq!(&pod_labels[label], value, "{label}");
    }
    let pod_endpoints = pods["podMetricsEndpoints"].as_array().expect("endpoints");
    for endpoint in endpoints.iter().chain(pod_endpoints) {
        assert_eq!(
            (&endpoint["port"], &endpoint["scheme"]),
            (&json!("https-metrics"), &json!("https"))
        );
        assert!(endpoint.get("bearerTokenFile").is_none(), "{endpoint}");
        assert_eq!(
            endpoint["tlsConfig"],
            json!({"ca": {"secret": {"name": "shardcron-tls", "key": "ca.crt"}},
                   "serverName": "shardcron.shardcron-system.svc"}),
            "verified against the chart's CA"
        );
        assert_eq!(
            endpoint["authorization"],
            json!({"type": "Bearer", "credentials": {"name": "shardcron-scraper-token", "key": "token"}})
        );
    }
    let pod_paths: Vec<_> = pod_endpoints.iter().map(|e| e["path"].as_str()).collect();
    assert_eq!(pod_paths, paths);
}

/// `tls`: with a monitor or the aggregated API (and `tls.source` left
/// empty), the chart makes a CA and a certificate for the names its clients
/// check, mounts it into the replicas (who publish the CA on their Leases),
/// and its monitors and APIService verify it; `selfSigned` keeps deploy/'s
/// unverified certificates; `secret` mounts the one named.
#[test]
fn the_chart_makes_a_certificate_its_monitors_and_aggregator_verify() {
    let key = |kind: &str, name: &str| (kind.to_owned(), name.to_owned());
    let verified = [
        "--set",
        "monitoring.serviceMonitor.enabled=true",
        "--set",
        "aggregatedApi.enabled=true",
    ];
    let chart = objects(&render(&verified).expect("render"));
    let secret: Secret =
        serde_json::from_value(chart[&key("Secret", "shardcron-tls")].clone()).expect("a Secret");
    assert_eq!(secret.type_.as_deref(), Some("kubernetes.io/tls"));
    let dir = tempfile::tempdir().expect("a directory");
    let data = secret.data.unwrap_or_default();
    for file in ["ca.crt", "tls.crt", "tls.key"] {
        std::fs::write(dir.path().join(file), &data[file].0).expect("write it");
    }
    for check in [
        "-verify_hostname=shardcron.shardcron-system.svc",
        "-verify_hostname=shardcron-admin.shardcron-system.svc",
        "-verify_hostname=localhost",
        "-verify_ip=127.0.0.1",
    ] {
        let (flag, value) = check.split_once('=').expect("flag=value");
        let out = Command::new("openssl")
            .args(["verify", "-CAfile", "ca.crt", flag, value, "tls.crt"])
            .current_dir(dir.path())
            .output()
            .expect("run openssl");
        assert!(out.status.success(), "{check}: {}", support::stderr(&out));
    }
    let api = &chart[&key("APIService", "v1alpha1.admin.shardcron.io")]["spec"];
    assert_eq!(
        api["caBundle"],
        json!(chart[&key("Secret", "shardcron-tls")]["data"]["ca.crt"]),
        "the aggregator verifies the replicas against the chart's CA"
    );
    assert!(api.get("insecureSkipTLSVerify").is_none(), "{api}");
    let pod = &chart[&key("StatefulSet", "shardcron")]["spec"]["template"];
    let args = &pod["spec"]["containers"][0]["args"];
    for flag in [
        "--admin-tls-cert-file=/etc/shardcron/tls/tls.crt",
        "--admin-tls-key-file=/etc/shardcron/tls/tls.key",
        "--admin-tls-ca-file=/etc/shardcron/tls/ca.crt",
    ] {
        assert!(
            args.as_array().expect("args").contains(&json!(flag)),
            "{flag}"
        );
    }
    assert_eq!(
        pod["spec"]["volumes"][0]["secret"]["secretName"],
        "shardcron-tls"
    );
    assert!(
        pod["metadata"]["annotations"]["checksum/tls"].is_string(),
        "{pod}"
    );

    // Self-signed: deploy/'s, and a scrape that cannot verify.
    let self_signed = objects(
        &render(&[&verified[..], &["--set", "tls.source=selfSigned"]].concat()).expect("render"),
    );
    assert!(!self_signed.contains_key(&key("Secret", "shardcron-tls")));
    let endpoint = &self_signed[&key("ServiceMonitor", "shardcron")]["spec"]["endpoints"][0];
    assert_eq!(endpoint["tlsConfig"], json!({"insecureSkipVerify": true}));
    let pod = &self_signed[&key("StatefulSet", "shardcron")]["spec"]["template"]["spec"];
    assert!(pod.get("volumes").is_none(), "{pod}");

    // A Secret of the user's (cert-manager's, say), and a tlsConfig given.
    let mine = objects(
        &render(&[
            "--set",
            "monitoring.serviceMonitor.enabled=true",
            "--set",
            "tls.source=secret",
            "--set",
            "tls.secretName=mine",
            "--set",
            "monitoring.serviceMonitor.tlsConfig.serverName=scraped.example",
        ])
        .expect("render"),
    );
    assert!(!mine.contains_key(&key("Secret", "shardcron-tls")));
    let pod = &mine[&key("StatefulSet", "shardcron")]["spec"]["template"]["spec"];
    assert_eq!(pod["volumes"][0]["secret"]["secretName"], "mine");
    let endpoint = &mine[&key("ServiceMonitor", "shardcron")]["spec"]["endpoints"][0];
    assert_eq!(
        endpoint["tlsConfig"],
        json!({"serverName": "scraped.example"})
    );
}

/// The labels of the chart's pods.
fn container_spec_labels(chart: &BTreeMap<(String, String), Value>) -> Value {
    chart[&("StatefulSet".to_owned(), "shardcron".to_owned())]["spec"]["template"]["metadata"]
        ["labels"]
        .clone()
}

#[test]
fn the_network_policy_admits_what_the_replicas_serve_and_reach() {
    assert!(
        !objects(&render(&[]).expect("render"))
            .keys()
            .any(|(kind, _)| kind == "NetworkPolicy"),
        "off by default"
    );
    let chart = objects(
        &render(&[
            "--set",
            "networkPolicy.enabled=true",
            "--set",
            "aggregatedApi.enabled=true",
            "--set-json",
            r#"networkPolicy.metricsFrom=[{"namespaceSelector":{"matchLabels":{"kubernetes.io/metadata.name":"monitoring"}}}]"#,
            "--set-json",
            r#"networkPolicy.extraEgress=[{"ports":[{"port":4317,"protocol":"TCP"}]}]"#,
        ])
        .expect("render"),
    );
    let policy = &chart[&("NetworkPolicy".to_owned(), "shardcron".to_owned())]["spec"];
    let pod_labels = container_spec_labels(&chart);
    for (label, value) in policy["podSelector"]["matchLabels"]
        .as_object()
        .expect("a selector")
    {
        assert_eq!(&pod_labels[label], value, "{label}");
    }
    assert_eq!(policy["policyTypes"], json!(["Ingress", "Egress"]));
    let container = &chart[&("StatefulSet".to_owned(), "shardcron".to_owned())]["spec"]["template"]
        ["spec"]["containers"][0];
    let declared: Vec<&str> = container["ports"]
        .as_array()
        .expect("ports")
        .iter()
        .filter_map(|p| p["name"].as_str())
        .collect();
    let ports_of = |rule: &Value| -> Vec<Value> {
        rule["ports"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|p| p["port"].clone())
            .collect()
    };
    let ingress = policy["ingress"].as_array().expect("ingress rules");
    // Every named port admitted is one the container declares.
    for port in ingress.iter().flat_map(ports_of) {
        let name = port.as_str().expect("a named port");
        assert!(declared.contains(&name), "{name} is not a container port");
    }
    assert_eq!(
        ports_of(&ingress[0]),
        [json!("health"), json!("aggregated-api")]
    );
    assert!(
        ingress[0].get("from").is_none(),
        "probes and the aggregator from anywhere"
    );
    assert_eq!(
        ports_of(&ingress[1]),
        [json!("https-metrics"), json!("metrics")]
    );
    assert_eq!(
        ingress[1]["from"][0]["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"],
        "monitoring"
    );
    let egress = policy["egress"].as_array().expect("egress rules");
    assert_eq!(ports_of(&egress[0]), [json!(443), json!(6443)]);
    assert_eq!(ports_of(&egress[1]), [json!(53), json!(53)]);
    assert_eq!(ports_of(&egress[2]), [json!(4317)]);
    let refused = render(&[
        "--set",
        "networkPolicy.enabled=true",
        "--set-json",
        "networkPolicy.apiServerPorts=[]",
    ]);
    assert!(refused.is_err(), "no port to reach kube-apiserver on");
}

#[test]
fn bad_values_are_refused_with_a_message() {
    for (values, message) in [
        (
            "cronjobKinds={batch,batch}",
            "'/cronjobKinds': items at 0 and 1 are equal",
        ),
        ("cronjobKinds=null", "missing property 'cronjobKinds'"),
        (
            "cronjobKinds={cron}",
            "value must be one of 'batch', 'shardcron'",
        ),
        ("replicas=2", "additional properties 'replicas' not allowed"),
        ("kubeApi.qps=0", "kubeApi/qps"),
        (
            "topologySpread.whenUnsatisfiable=Never",
            "value must be one of 'ScheduleAnyway', 'DoNotSchedule'",
        ),
        ("priorityClassName=Not_A_Name", "/priorityClassName"),
        ("tls.source=none", "value must be one of"),
        ("tls.source=secret", "name the kubernetes.io/tls Secret"),
    ] {
        match render(&["--set", values]) {
            Ok(_) => panic!("{values} was rendered"),
            Err(error) => assert!(error.contains(message), "{values}: {error}"),
        }
    }
}

/// The pod's placement values: a priority class when named, the spread
/// over zones and nodes (on by default, as deploy/ has it) with the
/// release's own pods only, or none.
#[test]
fn the_placement_values_render_into_the_pod() {
    let pod_of = |values: &[&str]| {
        let chart = objects(&render(values).expect("render"));
        chart
            .into_iter()
            .find_map(|((kind, _), object)| (kind == "StatefulSet").then_some(object))
            .expect("a StatefulSet")["spec"]["template"]["spec"]
            .clone()
    };
    let pod = pod_of(&[
        "--set",
        "priorityClassName=shardcron-critical",
        "--set",
        "topologySpread.whenUnsatisfiable=DoNotSchedule",
    ]);
    assert_eq!(pod["priorityClassName"], "shardcron-critical");
    let spread = pod["topologySpreadConstraints"].as_array().expect("spread");
    let keys: Vec<&str> = spread
        .iter()
        .filter_map(|c| c["topologyKey"].as_str())
        .collect();
    assert_eq!(
        keys,
        ["topology.kubernetes.io/zone", "kubernetes.io/hostname"]
    );
    for constraint in spread {
        assert_eq!(constraint["whenUnsatisfiable"], "DoNotSchedule");
        assert_eq!(
            constraint["labelSelector"]["matchLabels"]["app.kubernetes.io/instance"], "shardcron",
            "only this release's pods: {constraint}"
        );
    }
    let pod = pod_of(&["--set", "topologySpread.enabled=false"]);
    assert!(pod.get("topologySpreadConstraints").is_none(), "{pod}");
    assert!(pod.get("priorityClassName").is_none(), "{pod}");
}

/// What the chart's StatefulSet runs: its container's arguments (those
/// after `run`) and plain environment, from the installed release.
fn container_of(
    release: &str,
    namespace: &str,
    kubeconfig: &Path,
) -> (Vec<String>, Vec<(String, String)>) {
    let manifest = helm(&[
        "get",
        "manifest",
        release,
        "--namespace",
        namespace,
        "--kubeconfig",
        &kubeconfig.to_string_lossy(),
    ]);
    let statefulset = objects(&manifest)
        .into_iter()
        .find_map(|((kind, _), object)| (kind == "StatefulSet").then_some(object))
        .expect("a StatefulSet in the release");
    let container = &statefulset["spec"]["template"]["spec"]["containers"][0];
    let args: Vec<String> = container["args"]
        .as_array()
        .expect("args")
        .iter()
        .filter_map(|a| a.as_str().map(str::to_owned))
        .collect();
    assert_eq!(args.first().map(String::as_str), Some("run"));
    let env = container["env"]
        .as_array()
        .expect("env")
        .iter()
        .filter_map(|e| {
            Some((
                e["name"].as_str()?.to_owned(),
                e["value"].as_str()?.to_owned(),
            ))
        })
        .collect();
    (args[1..].to_vec(), env)
}

#[tokio::test(flavor = "multi_thread")]
async fn helm_install_brings_up_a_controller_serving_the_crd() {
    // Not `cluster_for`, which installs the definition: here the chart does
    // (Helm adopts no object it did not make).
    let cluster = Cluster::shared_beside_upstream();
    let kubeconfig = cluster.kubeconfig_path();
    let kubeconfig_arg = kubeconfig.to_string_lossy().into_owned();
    let (release, namespace) = ("shardcron-chart", "shardcron-chart-system");
    helm(&[
        "install",
        release,
        CHART,
        "--namespace",
        namespace,
        "--create-namespace",
        "--set",
        "cronjobKinds={shardcron}",
        "--set",
        "replicaCount=1",
        "--set",
        "networkPolicy.enabled=true",
        "--set",
        "tls.source=generated",
        "--kubeconfig",
        &kubeconfig_arg,
    ]);
    // The API server took the NetworkPolicy (no plugin here enforces it).
    let policies = Api::<k8s_openapi::api::networking::v1::NetworkPolicy>::namespaced(
        cluster.admin().await,
        namespace,
    )
    .list(&ListParams::default())
    .await
    .expect("list NetworkPolicies");
    assert_eq!(policies.items.len(), 1, "the chart's NetworkPolicy");

    // The chart's container, as the chart's ServiceAccount. The ports are
    // replaced (the harness gives each process free ones), and the
    // certificate's mount by a directory holding its Secret's files.
    let (args, env) = container_of(release, namespace, &kubeconfig);
    let tls = Api::<Secret>::namespaced(cluster.admin().await, namespace)
        .get(&format!("{release}-tls"))
        .await
        .expect("the chart's certificate");
    let mounted = cluster.dir().join("chart-tls");
    std::fs::create_dir_all(&mounted).expect("a directory for it");
    for (file, bytes) in tls.data.iter().flatten() {
        std::fs::write(mounted.join(file), &bytes.0).expect("write it");
    }
    let args: Vec<String> = args
        .into_iter()
        .filter(|a| !a.contains("-bind-address="))
        .map(|a| a.replace("/etc/shardcron/tls", &mounted.to_string_lossy()))
        .collect();
    let sa_kubeconfig: PathBuf = cluster.dir().join("chart-controller.kubeconfig");
    let yaml = cluster
        .service_account_kubeconfig(namespace, release)
        .await
        .expect("the chart's ServiceAccount's kubeconfig");
    std::fs::write(&sa_kubeconfig, yaml).expect("write it");
    // What the kubelet would give the pod: the downward API's values, and
    // `$(NAME)` in a value expanded from the variables before it.
    let downward = [
        ("SHARDCRON_NAMESPACE".to_owned(), namespace.to_owned()),
        ("SHARDCRON_REPLICA_ID".to_owned(), format!("{release}-0")),
    ];
    let mut env: Vec<(String, String)> = env
        .into_iter()
        .map(|(name, value)| {
            let expanded = downward.iter().fold(value, |value, (known, with)| {
                value.replace(&format!("$({known})"), with)
            });
            (name, expanded)
        })
        .collect();
    env.push(("SHARDCRON_NAMESPACE".into(), namespace.into()));
    env.push(("RUST_LOG".into(), "info,shardcron=debug".into()));
    let mut controller = Replica::new(ReplicaSpec {
        bin: PathBuf::from(env!("CARGO_BIN_EXE_shardcron")),
        id: format!("{release}-0"),
        kubeconfig: sa_kubeconfig,
        args,
        env,
        log: cluster.dir().join("shardcron-chart.log"),
    });
    // The definition served, and the binding in effect (RBAC takes a
    // moment to see a new one).
    let sa = cluster.service_account_client(namespace, release).await;
    let shardcron = CronJobKind::Shardcron.group();
    let served = Api::<DynamicObject>::all_with(sa.clone(), &api_resource(CronJobKind::Shardcron));
    eventually(
        "the definition served and the chart's RBAC in effect",
        Duration::from_secs(30),
        || async { served.list(&ListParams::default()).await.ok().map(drop) },
    )
    .await;
    controller.launch().expect("start the chart's controller");
    controller
        .wait_ready(Duration::from_secs(60))
        .await
        .unwrap_or_else(|e| panic!("{e:#}"));

    // Its certificate is the chart's: verified against the CA for the
    // name a monitor's tlsConfig gives (and no other), the CA on its Lease.
    let scrape_as = |name: &str| {
        let port = controller.secure_metrics.port();
        let out = Command::new("curl")
            .args([
                "-sS",
                "--max-time",
                "20",
                "-o",
                "/dev/null",
                "-w",
                "%{http_code}",
            ])
            .arg("--cacert")
            .arg(mounted.join("ca.crt"))
            .args(["--resolve", &format!("{name}:{port}:127.0.0.1")])
            .arg(format!("https://{name}:{port}/metrics"))
            .output()
            .expect("run curl");
        (out.status.code(), support::stdout(&out))
    };
    let service = format!("{release}.{namespace}.svc");
    assert_eq!(
        scrape_as(&service),
        (Some(0), "401".to_owned()),
        "verified for {service}, then asked for a token"
    );
    assert_eq!(
        scrape_as("elsewhere.svc").0,
        Some(60),
        "a name the certificate does not carry"
    );
    let lease = Api::<Lease>::namespaced(cluster.admin().await, namespace)
        .get(&format!("shardcron.{release}-0"))
        .await
        .expect("the replica's Lease");
    assert_eq!(
        lease.metadata.annotations.unwrap_or_default()[CERT_ANNOTATION].as_bytes(),
        std::fs::read(mounted.join("ca.crt")).expect("the CA"),
        "the Lease publishes the CA for the CLI"
    );

    // It fires a shardcron.io CronJob.
    let tenant = cluster.namespace("chart-tenant").await;
    let admin = cluster.admin().await;
    let cronjobs = CronJobs::namespaced(admin.clone(), &tenant.name, CronJobKind::Shardcron);
    cronjobs
        .create(
            &PostParams::default(),
            &cronjob("charted", "*/1 * * * *", json!({}), json!({})),
        )
        .await
        .expect("create a shardcron.io CronJob");
    let jobs: Api<Job> = Api::namespaced(admin.clone(), &tenant.name);
    let job = eventually("its Job", ONE_SLOT, || async {
        jobs.list(&ListParams::default())
            .await
            .ok()?
            .items
            .into_iter()
            .next()
    })
    .await;
    let owner = &job.metadata.owner_references.expect("an owner")[0];
    assert_eq!(
        (owner.api_version.as_str(), owner.name.as_str()),
        ("shardcron.io/v1", "charted")
    );

    // Least privilege for this mode: the CRD's CronJobs read and their
    // status written; batch/v1 CronJobs not even read; nothing else.
    let own = Some(namespace);
    let tenant_ns = Some(tenant.name.as_str());
    for (verb, group, resource, namespace) in [
        ("watch", shardcron, "cronjobs", None),
        ("patch", shardcron, "cronjobs", tenant_ns),
        ("patch", shardcron, "cronjobs/status", tenant_ns),
        ("update", shardcron, "cronjobs/finalizers", tenant_ns),
        ("create", "batch", "jobs", tenant_ns),
        ("update", "coordination.k8s.io", "leases", own),
    ] {
        assert!(
            allowed(&sa, verb, group, resource, namespace).await,
            "{verb} {group}/{resource} in {namespace:?} must be allowed"
        );
    }
    for (verb, group, resource, namespace) in [
        ("list", "batch", "cronjobs", None),
        ("patch", "batch", "cronjobs", tenant_ns),
        ("patch", "batch", "cronjobs/status", tenant_ns),
        ("update", shardcron, "cronjobs", tenant_ns),
        ("create", shardcron, "cronjobs", tenant_ns),
        ("delete", shardcron, "cronjobs", tenant_ns),
        ("update", "batch", "jobs", tenant_ns),
        ("create", "coordination.k8s.io", "leases", tenant_ns),
        ("get", "", "secrets", own),
        ("list", "", "pods", tenant_ns),
    ] {
        assert!(
            !allowed(&sa, verb, group, resource, namespace).await,
            "{verb} {group}/{resource} in {namespace:?} must be refused"
        );
    }
    controller
        .stop(Duration::from_secs(60))
        .await
        .expect("a graceful stop");

    // Uninstalled: the definition stays, and with it the tenants' CronJobs.
    helm(&[
        "uninstall",
        release,
        "--namespace",
        namespace,
        "--kubeconfig",
        &kubeconfig_arg,
    ]);
    assert!(
        cronjobs.get_opt("charted").await.expect("get").is_some(),
        "helm uninstall took the CronJobs with it"
    );
}
