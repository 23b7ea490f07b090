//! The controller under test: `shardcron run` as a child process (the
//! harness's [`Replica`]), scoped to one test namespace, authenticated as
//! its ServiceAccount from deploy/ (applied with `kubectl apply -k deploy/`
//! first), so a permission missing from deploy/ fails the test.

use super::cluster::Cluster;
use shardcron_harness::{Replica, ReplicaSpec};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How long a start or a graceful stop may take.
const WITHIN: Duration = Duration::from_secs(80);

/// The controller's kubeconfig from deploy/ (applied once per test binary),
/// written to DIR/controller.kubeconfig; a copy for each replica, which a
/// test may point elsewhere.
async fn controller_kubeconfig(cluster: &Cluster) -> &'static Path {
    static WRITTEN: tokio::sync::OnceCell<PathBuf> = tokio::sync::OnceCell::const_new();
    WRITTEN
        .get_or_init(|| async {
            // One per process: binaries sharing a control plane
            // (`cargo suite`) would otherwise rewrite each other's.
            let path = cluster
                .dir()
                .join(format!("controller-{}.kubeconfig", std::process::id()));
            cluster
                .controller_kubeconfig(&path)
                .await
                .expect("deploy/ applied and the controller's kubeconfig written");
            path
        })
        .await
}

pub struct Controller {
    process: Replica,
    pub namespace: String,
    /// `--replica-id`.
    pub replica: String,
    /// `--shard-ring-name`.
    pub ring: String,
}

/// The process's ports (`health`, `metrics`, `debug`), metrics and log.
impl std::ops::Deref for Controller {
    type Target = Replica;
    fn deref(&self) -> &Replica {
        &self.process
    }
}

impl std::ops::DerefMut for Controller {
    fn deref_mut(&mut self) -> &mut Replica {
        &mut self.process
    }
}

impl Controller {
    /// The admin certificate (PEM) this replica publishes on its Lease.
    pub async fn lease_certificate(&self, admin: &kube::Client) -> String {
        let lease: k8s_openapi::api::coordination::v1::Lease = kube::Api::namespaced(
            admin.clone(),
            shardcron_harness::cluster::CONTROLLER_NAMESPACE,
        )
        .get(&format!("{}.{}", self.ring, self.replica))
        .await
        .expect("the replica's Lease");
        lease
            .metadata
            .annotations
            .and_then(|a| a.get(shardcron::admin::tls::CERT_ANNOTATION).cloned())
            .expect("its admin certificate")
    }

    /// Starts the controller for `namespace` and waits until it is ready.
    pub async fn start(cluster: &Cluster, namespace: &str) -> Controller {
        Self::start_with(cluster, namespace, &[]).await
    }

    /// One replica alone in its ring (the ring is named after the namespace).
    pub async fn start_with(cluster: &Cluster, namespace: &str, extra_args: &[&str]) -> Controller {
        let mut controller = Self::replica(cluster, namespace, namespace, "r0", extra_args).await;
        controller.launch();
        controller.wait_ready().await;
        controller
    }

    /// Replica `replica` of ring `ring`, not started yet. Its kubeconfig
    /// (the ServiceAccount's) can be pointed elsewhere with [`Self::set_server`].
    pub async fn replica(
        cluster: &Cluster,
        namespace: &str,
        ring: &str,
        replica: &str,
        extra_args: &[&str],
    ) -> Controller {
        let kubeconfig = cluster
            .dir()
            .join(format!("controller-{namespace}-{replica}.kubeconfig"));
        std::fs::copy(controller_kubeconfig(cluster).await, &kubeconfig)
            .expect("copy the controller's kubeconfig");
        let mut args: Vec<String> = ["--namespace", namespace, "--shard-ring-name", ring]
            .map(str::to_owned)
            .to_vec();
        args.extend(extra_args.iter().map(|s| s.to_string()));
        let spec = ReplicaSpec {
            bin: PathBuf::from(env!("CARGO_BIN_EXE_shardcron")),
            id: replica.to_owned(),
            kubeconfig,
            args,
            env: vec![
                ("RUST_LOG".into(), "info,shardcron=debug".into()),
                ("NO_COLOR".into(), "1".into()),
            ],
            log: cluster
                .dir()
                .join(format!("shardcron-{namespace}-{replica}.log")),
        };
        Controller {
            process: Replica::new(spec),
            namespace: namespace.to_owned(),
            replica: replica.to_owned(),
            ring: ring.to_owned(),
        }
    }

    /// Points the kubeconfig at `server` (say, a proxy) instead of the API server.
    pub fn set_server(&self, server: &str) {
        let path = &self.spec().kubeconfig;
        let yaml = std::fs::read_to_string(path).expect("read kubeconfig");
        let rewritten: String = yaml
            .lines()
            .map(|line| match line.split_once("server: ") {
                Some((indent, _)) => format!("{indent}server: {server}\n"),
                None => format!("{line}\n"),
            })
            .collect();
        std::fs::write(path, rewritten).expect("write kubeconfig");
    }

    /// The API server's URL in the kubeconfig.
    pub fn server(&self) -> String {
        let yaml = std::fs::read_to_string(&self.spec().kubeconfig).expect("read kubeconfig");
        yaml.lines()
            .find_map(|line| Some(line.split_once("server: ")?.1.trim().to_owned()))
            .expect("a server in the kubeconfig")
    }

    /// Starts the process (see [`Self::replica`]) without waiting.
    pub fn launch(&mut self) {
        self.process.launch().expect("start shardcron run");
    }

    /// Waits for `/readyz` (the first lists synced, every actor armed).
    pub async fn wait_ready(&mut self) {
        if let Err(e) = self.process.wait_ready(WITHIN).await {
            panic!("{e:#}");
        }
    }

    /// The value of one sample line of `/metrics` (`name{labels}`), or 0.
    pub fn metric(&self, name: &str) -> f64 {
        self.process.metric(name)
    }

    /// The process's resident set in bytes (`VmRSS`), if it runs.
    pub fn rss_bytes(&self) -> Option<u64> {
        let status =
            std::fs::read_to_string(format!("/proc/{}/status", self.process.pid()?)).ok()?;
        let kib: u64 = status
            .lines()
            .find_map(|line| line.strip_prefix("VmRSS:"))?
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse()
            .ok()?;
        Some(kib * 1024)
    }

    /// `/debug/shards?keys=true`, if the process answers.
    pub fn shards(&self) -> Option<shardcron::shard::debug::ShardReport> {
        self.debug_json("/debug/shards?keys=true")
    }

    /// SIGTERM, and waits for the process to exit; returns how it exited
    /// (None: it was not running).
    pub async fn stop(&mut self) -> Option<std::process::ExitStatus> {
        self.process.stop(WITHIN).await.expect("a graceful stop")
    }

    /// Starts the process again (after `stop` or `kill`) and waits until
    /// ready. A running process is stopped with SIGTERM first and must exit 0.
    pub async fn restart(&mut self) {
        if let Err(e) = self.process.restart(WITHIN).await {
            panic!("{e:#}");
        }
    }
}
