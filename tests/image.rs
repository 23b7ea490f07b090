//! The image users deploy, built by `deploy/image/build` and run as a
//! kubelet would run it: unpacked, its entrypoint started as the image's
//! user on a read-only root, with the in-cluster ServiceAccount files at
//! their standard path and `KUBERNETES_SERVICE_HOST/PORT` pointing at the
//! local control plane, with deploy/kubernetes/workload.yaml's arguments
//! and environment. It must become ready on `/readyz`, create a CronJob's
//! Job, and stop with status 0 on SIGTERM.
//!
//! Isolation, what this machine allows as root: mount, PID, IPC and UTS
//! namespaces (`unshare`), the image on an overlay (as containerd mounts
//! it) remounted read-only, `/proc`, a `/dev` of the usual devices, `/sys`
//! read-only, the ServiceAccount directory read-only, `chroot` with the
//! image's user and no new privileges (no capability left). Not the pod's
//! network namespace: the control plane listens on the host's loopback, so
//! the workload's bind addresses move to free loopback ports; nor its
//! seccomp profile or cgroup limits. Without root the test says so and
//! passes only outside CI.
//!
//! Also: the image is at most 40 MB uncompressed, a second build gives the
//! same digest, the docker-archive holds the same filesystem as the OCI
//! image, and deploy/Dockerfile's final stage has the same config.

mod support;

use k8s_openapi::api::batch::v1::{CronJob, Job};
use kube::api::{Api, ListParams, PostParams};
use serde::Deserialize;
use shardcron_harness::cluster::CONTROLLER_NAMESPACE;
use shardcron_harness::net::{free_port, http_get};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use support::cluster::Cluster;
use support::repo_root;

/// The image's size goal (issue 59): the filesystem, uncompressed.
const MAX_IMAGE_BYTES: u64 = 40_000_000;

/// Where kubelet mounts a pod's ServiceAccount.
const SERVICE_ACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// The container runtime's part, as root in new namespaces: `$1` the
/// unpacked image, `$2` a scratch directory, `$3` the ServiceAccount files;
/// the rest is the command, run as `$USER_SPEC` (the image's user).
const RUN_AS_A_KUBELET_WOULD: &str = r#"
set -euo pipefail
image=$1 scratch=$2 account=$3; shift 3
root=$scratch/merged
mkdir -p "$scratch/upper" "$scratch/work" "$root"
mount -t overlay overlay -o "lowerdir=$image,upperdir=$scratch/upper,workdir=$scratch/work" "$root"
mkdir -p "$root/proc" "$root/dev" "$root/sys" "$root$SERVICE_ACCOUNT_DIR"
touch "$root/etc/hosts" "$root/etc/hostname" "$root/etc/resolv.conf"
mount -t proc proc "$root/proc"
mount -t tmpfs -o mode=755,nosuid tmpfs "$root/dev"
for device in null zero full random urandom tty; do
  touch "$root/dev/$device"
  mount --bind "/dev/$device" "$root/dev/$device"
done
mount --rbind /sys "$root/sys"
mount -o remount,bind,ro "$root/sys"
for file in hosts hostname resolv.conf; do mount --bind -o ro "/etc/$file" "$root/etc/$file"; done
mount --bind "$account" "$root$SERVICE_ACCOUNT_DIR"
mount -o remount,bind,ro "$root$SERVICE_ACCOUNT_DIR"
mount -o remount,bind,ro "$root"
exec /usr/sbin/chroot --userspec="$USER_SPEC" "$root" "$@"
"#;

/// What `imagebuild unpack` says of the image's config.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ImageConfig {
    user: String,
    entrypoint: Vec<String>,
    env: Vec<String>,
    working_dir: String,
    labels: BTreeMap<String, String>,
}

/// deploy/Dockerfile's final stage says what the image's config says.
fn assert_the_dockerfile_agrees(config: &ImageConfig) {
    let dockerfile =
        std::fs::read_to_string(repo_root().join("deploy/Dockerfile")).expect("deploy/Dockerfile");
    let last_stage = dockerfile
        .rsplit_once("\nFROM scratch\n")
        .expect("a final stage FROM scratch")
        .1;
    let values = |instruction: &str| -> Vec<String> {
        last_stage
            .lines()
            .filter_map(|line| line.strip_prefix(instruction))
            .map(|rest| rest.trim().to_owned())
            .collect()
    };
    assert_eq!(values("ENV "), config.env, "the Dockerfile's ENV");
    assert_eq!(values("USER "), [config.user.as_str()], "its USER");
    assert_eq!(
        values("WORKDIR "),
        [config.working_dir.as_str()],
        "its WORKDIR"
    );
    assert_eq!(
        values("ENTRYPOINT "),
        [serde_json::to_string(&config.entrypoint).expect("JSON")],
        "its ENTRYPOINT"
    );
}

/// Runs `command`, panicking with its stderr if it fails; its stdout.
fn output_of(command: &mut Command) -> String {
    let output = command
        .stderr(Stdio::inherit())
        .output()
        .unwrap_or_else(|e| panic!("running {command:?}: {e}"));
    assert!(output.status.success(), "{command:?} failed");
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Builds the image into `out` (`deploy/image/build`; the suite builds it
/// before its lanes start, so this finds the binary built); its digest.
fn build_image(out: &Path) -> String {
    let stdout = output_of(
        Command::new(repo_root().join("deploy/image/build"))
            .arg("--out")
            .arg(out),
    );
    stdout.lines().last().unwrap_or_default().trim().to_owned()
}

/// `key value` lines (deploy/image/build's image.txt).
fn facts(path: &Path) -> BTreeMap<String, String> {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
        .lines()
        .filter_map(|line| line.split_once(' '))
        .map(|(key, value)| (key.to_owned(), value.to_owned()))
        .collect()
}

/// The container's args and environment from
/// deploy/kubernetes/workload.yaml, as kubelet makes them for a pod whose
/// fields (`metadata.name`, ...) are `pod`: values from the pod's fields,
/// `$(NAME)` replaced by a variable defined before it.
fn workload_container(pod: &BTreeMap<&str, &str>) -> (Vec<String>, Vec<(String, String)>) {
    let text = std::fs::read_to_string(repo_root().join("deploy/kubernetes/workload.yaml"))
        .expect("deploy/kubernetes/workload.yaml");
    for document in serde_yaml_ng::Deserializer::from_str(&text) {
        let document = serde_yaml_ng::Value::deserialize(document).expect("YAML");
        if document["kind"].as_str() != Some("StatefulSet") {
            continue;
        }
        let container = &document["spec"]["template"]["spec"]["containers"][0];
        let args = container["args"]
            .as_sequence()
            .expect("the container's args")
            .iter()
            .map(|arg| arg.as_str().expect("a string").to_owned())
            .collect();
        let mut env: Vec<(String, String)> = Vec::new();
        for var in container["env"].as_sequence().into_iter().flatten() {
            let name = var["name"].as_str().expect("a variable's name").to_owned();
            let value = match (
                var["value"].as_str(),
                var["valueFrom"]["fieldRef"]["fieldPath"].as_str(),
            ) {
                (Some(value), _) => env.iter().fold(value.to_owned(), |value, (defined, with)| {
                    value.replace(&format!("$({defined})"), with)
                }),
                (None, Some(field)) => pod
                    .get(field)
                    .unwrap_or_else(|| panic!("no value for the pod's field {field}"))
                    .to_string(),
                (None, None) => panic!("{name}: neither a value nor a field of the pod"),
            };
            env.push((name, value));
        }
        return (args, env);
    }
    panic!("no StatefulSet in deploy/kubernetes/workload.yaml");
}

/// The `/proc/PID/status` field `name`.
fn status_field(pid: u32, name: &str) -> String {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix(&format!("{name}:")))
        .unwrap_or_default()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

#[tokio::test]
async fn the_image_runs_as_a_kubelet_would_run_it_and_creates_a_job() {
    if !runs_as_root() {
        assert!(
            std::env::var_os("CI").is_none(),
            "the image's run test needs root (mounts and namespaces); CI runs as root"
        );
        eprintln!("skipped: the image's run test needs root (mounts and namespaces)");
        return;
    }
    let cluster = Cluster::shared();
    let namespace = cluster.namespace("image").await;
    let ns = namespace.name.as_str();
    let scratch = cluster.dir().join(format!("image-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    std::fs::create_dir_all(&scratch).expect("a scratch directory");

    // Built, small, reproducible, the same filesystem in both archives.
    let out = repo_root().join("target/image");
    let digest = build_image(&out);
    assert!(digest.starts_with("sha256:"), "{digest}");
    let built = facts(&out.join("image.txt"));
    let size: u64 = built["filesystem_bytes"].parse().expect("a size");
    assert!(
        size <= MAX_IMAGE_BYTES,
        "the image's filesystem is {size} bytes"
    );
    assert_eq!(
        build_image(&scratch.join("again")),
        digest,
        "a second build of the same sources gives another digest"
    );
    let imagebuild = support::local_binary("imagebuild");
    let list = |image: &Path| {
        output_of(
            Command::new(&imagebuild)
                .args(["list", "-image"])
                .arg(image),
        )
    };
    let files = list(&out.join("oci"));
    assert_eq!(list(&out.join("shardcron-docker.tar")), files);
    for wanted in [
        "0 0755 0:0",
        " /shardcron\n",
        "0 0644 0:0",
        " /etc/ssl/certs/ca-certificates.crt\n",
        "5 0700 65532:65532",
        " /home/nonroot\n",
    ] {
        assert!(files.contains(wanted), "{wanted:?} in\n{files}");
    }

    // Unpacked as a runtime would.
    let root = scratch.join("rootfs");
    let config: ImageConfig = serde_json::from_str(&output_of(
        Command::new(&imagebuild)
            .args(["unpack", "-image"])
            .arg(out.join("oci"))
            .arg("-to")
            .arg(&root),
    ))
    .expect("the image's config");
    assert_eq!(config.user, "65532:65532");
    assert_eq!(config.entrypoint, ["/shardcron"]);
    assert!(
        config
            .labels
            .contains_key("org.opencontainers.image.revision")
    );
    assert_the_dockerfile_agrees(&config);

    // The ServiceAccount's files, as kubelet projects them.
    let kubeconfig = scratch.join("controller.kubeconfig");
    cluster
        .controller_kubeconfig(&kubeconfig)
        .await
        .expect("deploy/ applied");
    let kubeconfig: serde_yaml_ng::Value =
        serde_yaml_ng::from_str(&std::fs::read_to_string(&kubeconfig).expect("kubeconfig"))
            .expect("kubeconfig YAML");
    let token = kubeconfig["users"][0]["user"]["token"]
        .as_str()
        .expect("the ServiceAccount's token");
    let server = kubeconfig["clusters"][0]["cluster"]["server"]
        .as_str()
        .expect("the server");
    let server: SocketAddr = server
        .trim_start_matches("https://")
        .parse()
        .expect("the server's address");
    let account = scratch.join("serviceaccount");
    std::fs::create_dir_all(&account).expect("the ServiceAccount directory");
    std::fs::write(account.join("token"), token).expect("token");
    std::fs::copy(cluster.dir().join("pki/ca.crt"), account.join("ca.crt")).expect("ca.crt");
    std::fs::write(account.join("namespace"), CONTROLLER_NAMESPACE).expect("namespace");

    // The workload's arguments, its bind addresses on free loopback ports,
    // scoped to this test's namespace (the control plane is shared).
    let health = free_port();
    let pod = BTreeMap::from([
        ("metadata.name", "image-0"),
        ("metadata.namespace", CONTROLLER_NAMESPACE),
        ("status.podIP", "127.0.0.1"),
    ]);
    let (args, workload_env) = workload_container(&pod);
    let mut command: Vec<String> = config.entrypoint.clone();
    command.extend(
        args.into_iter()
            .map(|arg| match arg.split_once("-bind-address=") {
                Some((flag, _)) if flag.starts_with("--health-probe") => {
                    format!("{flag}-bind-address={health}")
                }
                Some((flag, _)) => format!("{flag}-bind-address={}", free_port()),
                None => arg,
            }),
    );
    for flag in ["--debug", "--admin", "--aggregated-api"] {
        command.push(format!("{flag}-bind-address={}", free_port()));
    }
    command.extend(["--namespace", ns, "--shard-ring-name", ns].map(str::to_owned));

    let log_path = cluster.dir().join("shardcron-image.log");
    let log = std::fs::File::create(&log_path).expect("the log");
    let mut runtime = Command::new("setpriv");
    runtime
        .args([
            "--no-new-privs",
            "unshare",
            "--mount",
            "--pid",
            "--fork",
            "--ipc",
            "--uts",
        ])
        .args([
            "--propagation",
            "private",
            "bash",
            "-c",
            RUN_AS_A_KUBELET_WOULD,
            "runtime",
        ])
        .arg(&root)
        .arg(scratch.join("overlay"))
        .arg(&account)
        .args(&command)
        .env_clear()
        .envs(config.env.iter().filter_map(|var| var.split_once('=')))
        .envs(workload_env)
        .envs([
            ("USER_SPEC", config.user.as_str()),
            ("SERVICE_ACCOUNT_DIR", SERVICE_ACCOUNT_DIR),
            ("KUBERNETES_SERVICE_HOST", &server.ip().to_string()),
            ("KUBERNETES_SERVICE_PORT", &server.port().to_string()),
        ])
        .stdout(log.try_clone().expect("the log"))
        .stderr(log);
    shardcron_harness::replica::die_with_parent(&mut runtime);
    let mut runtime = runtime.spawn().expect("start the runtime");
    let log_tail = || std::fs::read_to_string(&log_path).unwrap_or_default();

    // Ready on /readyz.
    let started = Instant::now();
    while !http_get(health, "/readyz").is_ok_and(|(code, _)| code == 200) {
        assert!(
            runtime.try_wait().expect("the runtime").is_none(),
            "the image's controller exited:\n{}",
            log_tail()
        );
        assert!(
            started.elapsed() < Duration::from_secs(80),
            "not ready within 80 s:\n{}",
            log_tail()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }

    // As the image's user, with no capability, on a read-only root.
    let children = std::fs::read_to_string(format!(
        "/proc/{pid}/task/{pid}/children",
        pid = runtime.id()
    ))
    .expect("the runtime's children");
    let controller: u32 = children
        .split_whitespace()
        .next()
        .and_then(|pid| pid.parse().ok())
        .expect("the controller's pid");
    assert_eq!(status_field(controller, "Uid"), "65532 65532 65532 65532");
    assert_eq!(status_field(controller, "Gid"), "65532 65532 65532 65532");
    assert_eq!(status_field(controller, "CapEff"), "0000000000000000");
    assert_eq!(status_field(controller, "NoNewPrivs"), "1");
    let mounts = std::fs::read_to_string(format!("/proc/{controller}/mountinfo")).expect("mounts");
    let root_mount = mounts
        .lines()
        .find(|line| line.split_whitespace().nth(4) == Some("/"))
        .expect("the root mount");
    assert!(
        root_mount
            .split_whitespace()
            .nth(5)
            .is_some_and(|options| options.starts_with("ro")),
        "{root_mount}"
    );

    // A CronJob's Job.
    let admin = cluster.admin().await;
    let cronjob: CronJob = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "from-the-image"},
        "spec": {"schedule": "* * * * *", "jobTemplate": {"spec": {"template": {"spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "c", "image": "busybox"}],
        }}}}},
    }))
    .expect("a CronJob");
    Api::<CronJob>::namespaced(admin.clone(), ns)
        .create(&PostParams::default(), &cronjob)
        .await
        .expect("create the CronJob");
    let jobs = Api::<Job>::namespaced(admin, ns);
    let started = Instant::now();
    loop {
        let listed = jobs.list(&ListParams::default()).await.expect("list Jobs");
        if listed.items.iter().any(|job| {
            job.metadata
                .owner_references
                .iter()
                .flatten()
                .any(|owner| owner.name == "from-the-image")
        }) {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(75),
            "no Job within 75 s:\n{}",
            log_tail()
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }

    // A graceful stop: SIGTERM, as kubelet sends it, exits 0.
    let _ = Command::new("kill")
        .args(["-TERM", &controller.to_string()])
        .status();
    let started = Instant::now();
    let status = loop {
        if let Some(status) = runtime.try_wait().expect("the runtime") {
            break status;
        }
        assert!(
            started.elapsed() < Duration::from_secs(80),
            "no exit within 80 s of SIGTERM:\n{}",
            log_tail()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    assert!(status.success(), "{status}:\n{}", log_tail());
    let _ = std::fs::remove_dir_all(&scratch);
}

/// Whether this process runs as root.
fn runs_as_root() -> bool {
    status_field(std::process::id(), "Uid")
        .split_whitespace()
        .nth(1)
        == Some("0")
}
