//! A real control plane for integration tests (deploy/local), one per test
//! binary, shared by its tests; each test gets its own namespace.
//!
//! `SHARDCRON_TEST_CLUSTER=DIR` reuses a cluster started by hand
//! (`deploy/local/up --dir DIR`), which is then left running. Otherwise the
//! first test to ask starts one under target/test-clusters with
//! `--watch-pid` set to this process, so the cluster goes away when the
//! test binary exits, however it exits.

use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use kube::api::{Api, ObjectMeta, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};

pub struct Cluster {
    dir: PathBuf,
}

static CLUSTER: OnceLock<Cluster> = OnceLock::new();

impl Cluster {
    /// The control plane of this test binary, started on first use.
    pub fn shared() -> &'static Cluster {
        CLUSTER.get_or_init(|| {
            if let Ok(dir) = std::env::var("SHARDCRON_TEST_CLUSTER") {
                return Cluster { dir: dir.into() };
            }
            let exe = std::env::current_exe().unwrap_or_default();
            let name = exe.file_stem().and_then(|s| s.to_str()).unwrap_or("test");
            let dir = super::repo_root()
                .join("target/test-clusters")
                .join(format!("{name}-{}", std::process::id()));
            let status = Command::new(super::repo_root().join("deploy/local/up"))
                .arg("--dir")
                .arg(&dir)
                .arg("--watch-pid")
                .arg(std::process::id().to_string())
                .stdout(std::process::Stdio::null())
                .status()
                .expect("run deploy/local/up");
            assert!(
                status.success(),
                "deploy/local/up failed (its output is above)"
            );
            Cluster { dir }
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn kubeconfig_path(&self) -> PathBuf {
        self.dir.join("kubeconfig")
    }

    /// A variable that deploy/local/up wrote to DIR/env (`export NAME=value`).
    pub fn env(&self, name: &str) -> Option<String> {
        let text = std::fs::read_to_string(self.dir.join("env")).ok()?;
        let prefix = format!("export {name}=");
        text.lines()
            .find_map(|line| line.strip_prefix(&prefix))
            .map(|value| value.trim_matches('\'').to_owned())
    }

    async fn config_from(kubeconfig: Kubeconfig) -> Config {
        Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
            .await
            .expect("kubeconfig is usable")
    }

    /// A client with the admin credential.
    pub async fn admin(&self) -> Client {
        let kubeconfig = Kubeconfig::read_from(self.kubeconfig_path()).expect("read kubeconfig");
        Client::try_from(Self::config_from(kubeconfig).await).expect("client")
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
        TestNamespace {
            name,
            cluster_dir: self.dir.clone(),
        }
    }

    /// A client authenticated as ServiceAccount `namespace/name` (created if
    /// missing), with a token from the TokenRequest API: what a controller
    /// running in the cluster gets, so RBAC applies as in production.
    pub async fn service_account_client(&self, namespace: &str, name: &str) -> Client {
        let kubeconfig =
            Kubeconfig::from_yaml(&self.service_account_kubeconfig(namespace, name).await)
                .expect("kubeconfig");
        Client::try_from(Self::config_from(kubeconfig).await).expect("client")
    }

    /// The admin kubeconfig with its user replaced by a token of
    /// ServiceAccount `namespace/name` (created if missing), as YAML.
    pub async fn service_account_kubeconfig(&self, namespace: &str, name: &str) -> String {
        let admin = self.admin().await;
        let accounts = Api::<ServiceAccount>::namespaced(admin, namespace);
        let sa = ServiceAccount {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            ..Default::default()
        };
        match accounts.create(&PostParams::default(), &sa).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => panic!("create service account {namespace}/{name}: {e}"),
        }
        let request = TokenRequest {
            spec: Some(TokenRequestSpec {
                expiration_seconds: Some(4 * 3600),
                ..Default::default()
            }),
            ..Default::default()
        };
        let token = accounts
            .create_token_request(name, &PostParams::default(), &request)
            .await
            .expect("token request")
            .status
            .expect("token in status")
            .token;
        // The admin kubeconfig with its user replaced by the token.
        let text = std::fs::read_to_string(self.kubeconfig_path()).expect("read kubeconfig");
        let mut doc: serde_yaml_ng::Value =
            serde_yaml_ng::from_str(&text).expect("kubeconfig yaml");
        doc["users"][0]["user"] =
            serde_yaml_ng::to_value(serde_json::json!({ "token": token })).unwrap();
        serde_yaml_ng::to_string(&doc).unwrap()
    }

    /// The last lines of each component's log.
    pub fn log_tails(&self, lines: usize) -> String {
        let mut out = String::new();
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return out;
        };
        let mut logs: Vec<_> = entries
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|e| e == "log"))
            .collect();
        logs.sort();
        for log in logs {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            let all: Vec<&str> = text.lines().collect();
            out.push_str(&format!("==> {} <==\n", log.display()));
            for line in &all[all.len().saturating_sub(lines)..] {
                out.push_str(line);
                out.push('\n');
            }
        }
        out
    }
}

/// A test's namespace. When the test fails (panics), dropping it prints the
/// control plane's log tails, so the failure comes with the server's side.
pub struct TestNamespace {
    pub name: String,
    cluster_dir: PathBuf,
}

impl Drop for TestNamespace {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let cluster = Cluster {
                dir: self.cluster_dir.clone(),
            };
            eprintln!(
                "test in namespace {} failed; control plane logs:\n{}",
                self.name,
                cluster.log_tails(30)
            );
        }
    }
}
