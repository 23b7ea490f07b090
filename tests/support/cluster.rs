//! A real control plane for integration tests (deploy/local, driven by
//! `shardcron-harness`), one per test binary, shared by its tests; each
//! test gets its own namespace.
//!
//! `SHARDCRON_TEST_CLUSTER=DIR` reuses a cluster started by hand
//! (`deploy/local/up --dir DIR`), which is then left running. Otherwise the
//! first test to ask starts one under target/test-clusters with
//! `--watch-pid` set to this process, so the cluster goes away when the
//! test binary exits, however it exits.

use k8s_openapi::api::core::v1::Namespace;
use kube::Client;
use kube::api::{Api, ObjectMeta, PostParams};
use shardcron_harness::LocalCluster;
use shardcron_harness::cluster::UpOptions;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};

/// The harness's cluster, with the tests' way of failing: a panic that says
/// what could not be done.
pub struct Cluster(LocalCluster);

static CLUSTER: OnceLock<Cluster> = OnceLock::new();

impl std::ops::Deref for Cluster {
    type Target = LocalCluster;
    fn deref(&self) -> &LocalCluster {
        &self.0
    }
}

impl Cluster {
    /// The control plane of this test binary, started on first use.
    pub fn shared() -> &'static Cluster {
        Self::shared_with(UpOptions::default())
    }

    /// The same, with kube-controller-manager's own CronJob controller on
    /// (as on a managed control plane), for the tests of shardcron beside
    /// it. `SHARDCRON_TEST_CLUSTER` may name either kind of cluster: see
    /// [`Self::runs_upstream_cronjob`].
    pub fn shared_beside_upstream() -> &'static Cluster {
        Self::shared_with(UpOptions {
            upstream_cronjob: true,
            ..UpOptions::default()
        })
    }

    /// The same, with a Prometheus (`deploy/local/up --with-prometheus`).
    pub fn with_prometheus() -> &'static Cluster {
        Self::shared_with(UpOptions {
            prometheus: true,
            ..UpOptions::default()
        })
    }

    /// Whether kube-controller-manager runs its own CronJob controller here.
    pub fn runs_upstream_cronjob(&self) -> bool {
        self.env("SHARDCRON_UPSTREAM_CRONJOB") == Some("1")
    }

    fn shared_with(options: UpOptions) -> &'static Cluster {
        CLUSTER.get_or_init(|| {
            if let Ok(dir) = std::env::var("SHARDCRON_TEST_CLUSTER") {
                let cluster = LocalCluster::attach(dir.as_ref());
                return Cluster(cluster.expect("the cluster of SHARDCRON_TEST_CLUSTER"));
            }
            let exe = std::env::current_exe().unwrap_or_default();
            let name = exe.file_stem().and_then(|s| s.to_str()).unwrap_or("test");
            let dir = super::repo_root()
                .join("target/test-clusters")
                .join(format!("{name}-{}", std::process::id()));
            let cluster = LocalCluster::up(&dir, &options);
            Cluster(cluster.expect("deploy/local/up (its output is above)"))
        })
    }

    /// A client with the admin credential.
    pub async fn admin(&self) -> Client {
        self.admin_client().await.expect("an admin client")
    }

    /// A fresh namespace for one test, named after it.
    pub async fn namespace(&self, test: &str) -> TestNamespace {
        static SEQ: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "t-{}-{}-{}",
            test.replace('_', "-").chars().take(40).collect::<String>(),
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        );
        let ns = Namespace {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                ..Default::default()
            },
            ..Default::default()
        };
        Api::<Namespace>::all(self.admin().await)
            .create(&PostParams::default(), &ns)
            .await
            .expect("create test namespace");
        TestNamespace { name }
    }

    /// A client authenticated as ServiceAccount `namespace/name` (created if
    /// missing), so RBAC applies as in production.
    pub async fn service_account_client(&self, namespace: &str, name: &str) -> Client {
        self.0
            .service_account_client(namespace, name)
            .await
            .unwrap_or_else(|e| panic!("a client of {namespace}/{name}: {e:#}"))
    }
}

/// A test's namespace. When the test fails (panics), dropping it prints the
/// control plane's log tails, so the failure comes with the server's side,
/// and marks the cluster's directory to be kept when the watchdog stops it
/// (`DIR/keep`): the replicas' logs are there, whole.
pub struct TestNamespace {
    pub name: String,
}

impl Drop for TestNamespace {
    fn drop(&mut self) {
        if std::thread::panicking()
            && let Some(cluster) = CLUSTER.get()
        {
            let kept = std::fs::write(cluster.dir().join("keep"), b"a test failed\n").is_ok();
            eprintln!(
                "test in namespace {} failed; control plane logs:\n{}\n{}",
                self.name,
                cluster.log_tails(30),
                if kept {
                    format!("every log is kept in {}", cluster.dir().display())
                } else {
                    String::new()
                }
            );
        }
    }
}
