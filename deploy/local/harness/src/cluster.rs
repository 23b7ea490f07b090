//! A control plane of `deploy/local`: started here with `up` (torn down by
//! `down`, or by up's `--watch-pid` watchdog when this process dies first),
//! or one already running, found by its directory with `attach`.

use crate::repo_root;
use anyhow::{Context, bail};
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::{Api, ObjectMeta, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// The controller's namespace and ServiceAccount in `deploy/`.
pub const CONTROLLER_NAMESPACE: &str = "shardcron-system";
pub const CONTROLLER_SERVICE_ACCOUNT: &str = "shardcron";

/// How a control plane is started (`deploy/local/up --help`).
#[derive(Debug, Clone, Default)]
pub struct UpOptions {
    /// kube-controller-manager runs its own CronJob controller.
    pub upstream_cronjob: bool,
    /// More flags for kube-controller-manager (its client QPS and burst).
    pub kcm_extra_args: String,
    /// A Prometheus too (`--with-prometheus`).
    pub prometheus: bool,
    /// No Jaeger, and kube-apiserver without tracing (`--without-jaeger`).
    pub without_jaeger: bool,
    /// etcd starts on a copy of this data directory (`--etcd-from`).
    pub etcd_from: Option<PathBuf>,
    /// kube-apiserver shards CronJob watches (`--with-sharded-watch`; off:
    /// as `SHARDCRON_SHARDED_WATCH` says, by default off).
    pub sharded_watch: bool,
}

pub struct LocalCluster {
    dir: PathBuf,
    env: HashMap<String, String>,
}

impl LocalCluster {
    /// Starts a fresh control plane in `dir` and waits until it serves.
    /// Blocks (about 10 s; longer the first time, when deploy/local/build
    /// compiles the binaries). up's own messages go to this process's stderr.
    pub fn up(dir: &Path, options: &UpOptions) -> anyhow::Result<Self> {
        let mut up = Command::new(repo_root().join("deploy/local/up"));
        up.arg("--dir")
            .arg(dir)
            .arg("--watch-pid")
            .arg(std::process::id().to_string());
        if options.upstream_cronjob {
            up.arg("--with-upstream-cronjob");
        }
        if options.prometheus {
            up.arg("--with-prometheus");
        }
        if options.without_jaeger {
            up.arg("--without-jaeger");
        }
        if options.sharded_watch {
            up.arg("--with-sharded-watch");
        }
        if let Some(data) = &options.etcd_from {
            up.arg("--etcd-from").arg(data);
        }
        up.env(
            "KUBE_CONTROLLER_MANAGER_EXTRA_ARGS",
            &options.kcm_extra_args,
        );
        run(&mut up).with_context(|| format!("deploy/local/up --dir {}", dir.display()))?;
        Self::attach(dir)
    }

    /// A control plane already running in `dir` (`deploy/local/up --dir DIR`).
    pub fn attach(dir: &Path) -> anyhow::Result<Self> {
        let path = dir.join("env");
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {} (is a cluster up there?)", path.display()))?;
        let env = text
            .lines()
            .filter_map(|l| l.strip_prefix("export ")?.split_once('='))
            .map(|(k, v)| (k.to_owned(), v.trim_matches(['"', '\'']).to_owned()))
            .collect();
        Ok(Self {
            dir: dir.to_owned(),
            env,
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The admin kubeconfig.
    pub fn kubeconfig_path(&self) -> PathBuf {
        self.dir.join("kubeconfig")
    }

    /// A variable that up wrote to `DIR/env` (`export NAME=value`), if set
    /// and not empty.
    pub fn env(&self, name: &str) -> Option<&str> {
        self.env
            .get(name)
            .map(String::as_str)
            .filter(|v| !v.is_empty())
    }

    /// The pid of a component as `DIR/pids` has it now (a restart changes it).
    pub fn pid(&self, component: &str) -> anyhow::Result<u32> {
        let path = self.dir.join("pids");
        std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?
            .lines()
            .filter_map(|l| l.split_once(' '))
            .find(|(name, _)| *name == component)
            .and_then(|(_, pid)| pid.trim().parse().ok())
            .with_context(|| format!("no {component} in {}", path.display()))
    }

    /// A binary of the control plane (`kubectl`, `kube-controller-manager`, ...).
    pub fn bin(&self, name: &str) -> anyhow::Result<PathBuf> {
        let dir = self
            .env("SHARDCRON_BIN_DIR")
            .context("no SHARDCRON_BIN_DIR in the cluster's env file")?;
        Ok(Path::new(dir).join(name))
    }

    /// `kubectl --kubeconfig <kubeconfig>`.
    pub fn kubectl_as(&self, kubeconfig: &Path) -> anyhow::Result<Command> {
        let mut cmd = Command::new(self.bin("kubectl")?);
        cmd.arg("--kubeconfig").arg(kubeconfig);
        Ok(cmd)
    }

    /// `kubectl` with the admin kubeconfig.
    pub fn kubectl(&self) -> anyhow::Result<Command> {
        self.kubectl_as(&self.kubeconfig_path())
    }

    /// A client with the admin credential. Each async runtime needs its own
    /// (a client's connections live on the runtime that made them).
    pub async fn admin_client(&self) -> anyhow::Result<Client> {
        let kubeconfig = Kubeconfig::read_from(self.kubeconfig_path())?;
        client_from(kubeconfig).await
    }

    /// A client authenticated as ServiceAccount `namespace/name` (created if
    /// missing): what a controller in the cluster gets, so RBAC applies as in
    /// production.
    pub async fn service_account_client(
        &self,
        namespace: &str,
        name: &str,
    ) -> anyhow::Result<Client> {
        let yaml = self.service_account_kubeconfig(namespace, name).await?;
        client_from(Kubeconfig::from_yaml(&yaml)?).await
    }

    /// The admin kubeconfig with its user replaced by a 4-hour token of
    /// ServiceAccount `namespace/name` (created if missing, the token from
    /// the TokenRequest API), as YAML.
    pub async fn service_account_kubeconfig(
        &self,
        namespace: &str,
        name: &str,
    ) -> anyhow::Result<String> {
        let accounts = Api::<ServiceAccount>::namespaced(self.admin_client().await?, namespace);
        let account = ServiceAccount {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            ..Default::default()
        };
        match accounts.create(&PostParams::default(), &account).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => return Err(e).context(format!("creating {namespace}/{name}")),
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
            .with_context(|| format!("a token for {namespace}/{name}"))?
            .status
            .context("a TokenRequest without status")?
            .token;
        let path = self.kubeconfig_path();
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        let mut doc: serde_yaml_ng::Value = serde_yaml_ng::from_str(&text)?;
        doc["users"][0]["user"] = serde_yaml_ng::to_value(serde_json::json!({ "token": token }))?;
        Ok(serde_yaml_ng::to_string(&doc)?)
    }

    /// Applies `deploy/` with kubectl, as an operator would (RBAC, the
    /// ServiceAccount; the StatefulSet scaled to 0, since the replicas run
    /// here as processes), writes a kubeconfig of the controller's
    /// ServiceAccount to `out`, and waits until RBAC lets it create Jobs.
    pub async fn controller_kubeconfig(&self, out: &Path) -> anyhow::Result<()> {
        run(self
            .kubectl()?
            .arg("apply")
            .arg("-k")
            .arg(repo_root().join("deploy")))?;
        self.controller_kubeconfig_applied(out).await
    }

    /// [`Self::controller_kubeconfig`] for CRD mode: applies
    /// `deploy/managed` (server-side, as the README does: the definition is
    /// over 256 KiB), whose replicas serve `cronjobs.shardcron.io` only.
    pub async fn managed_controller_kubeconfig(&self, out: &Path) -> anyhow::Result<()> {
        run(self
            .kubectl()?
            .args(["apply", "--server-side", "-k"])
            .arg(repo_root().join("deploy/managed")))?;
        self.controller_kubeconfig_applied(out).await
    }

    /// The kubeconfig of the applied ServiceAccount, once RBAC lets it
    /// create Jobs; the StatefulSet scaled to 0.
    async fn controller_kubeconfig_applied(&self, out: &Path) -> anyhow::Result<()> {
        run(self.kubectl()?.args([
            "scale",
            "statefulset",
            "shardcron",
            "-n",
            CONTROLLER_NAMESPACE,
            "--replicas=0",
        ]))?;
        let yaml = self
            .service_account_kubeconfig(CONTROLLER_NAMESPACE, CONTROLLER_SERVICE_ACCOUNT)
            .await?;
        std::fs::write(out, yaml).with_context(|| format!("writing {}", out.display()))?;
        for _ in 0..60 {
            let mut check = self.kubectl_as(out)?;
            check.args(["auth", "can-i", "create", "jobs.batch", "--all-namespaces"]);
            if check.output().map(|o| o.status.success()).unwrap_or(false) {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        bail!(
            "the ServiceAccount {CONTROLLER_NAMESPACE}/{CONTROLLER_SERVICE_ACCOUNT} cannot create Jobs after 30 s (deploy/kubernetes/rbac.yaml)"
        )
    }

    /// Every `*.log` of the cluster directory (components and replicas).
    fn logs(&self) -> Vec<PathBuf> {
        let mut logs: Vec<PathBuf> = std::fs::read_dir(&self.dir)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|e| e == "log"))
            .collect();
        logs.sort();
        logs
    }

    /// The last `lines` lines of each log.
    pub fn log_tails(&self, lines: usize) -> String {
        let mut out = String::new();
        for log in self.logs() {
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

    /// Copies every log into `to`.
    pub fn save_logs(&self, to: &Path) -> anyhow::Result<()> {
        std::fs::create_dir_all(to)?;
        for log in self.logs() {
            if let Some(name) = log.file_name() {
                std::fs::copy(&log, to.join(name))?;
            }
        }
        Ok(())
    }

    /// kube-controller-manager's recorded command line (up's `printf %q`
    /// of each argument) with `flags` set: each `(--name, value)` replaces
    /// that flag's value or is appended. Values are written as `%q` would
    /// write them (`\*` for `*`, `\,` for `,`).
    pub fn kcm_command(&self, flags: &[(&str, &str)]) -> anyhow::Result<String> {
        let cmd_file = self.dir().join("kube-controller-manager.cmd");
        let cmd = std::fs::read_to_string(&cmd_file)
            .with_context(|| format!("reading {}", cmd_file.display()))?;
        let mut args: Vec<String> = cmd.split_whitespace().map(str::to_owned).collect();
        for (flag, value) in flags {
            let set = format!("{flag}={value}");
            match args.iter_mut().find(|a| a.starts_with(&format!("{flag}="))) {
                Some(arg) => *arg = set,
                None => args.push(set),
            }
        }
        Ok(args.join(" "))
    }

    /// Restarts kube-controller-manager (deploy/local/restart: same ports,
    /// same data) with `flags` set (see `kcm_command`), and returns the new
    /// process's pid.
    pub fn restart_kcm(&self, flags: &[(&str, &str)]) -> anyhow::Result<u32> {
        let cmd = self.kcm_command(flags)?;
        std::fs::write(self.dir().join("kube-controller-manager.cmd"), cmd)?;
        run(Command::new(repo_root().join("deploy/local/restart"))
            .arg("--dir")
            .arg(self.dir())
            .arg("kube-controller-manager"))?;
        self.pid("kube-controller-manager")
    }

    /// Stops every component and removes the directory (`deploy/local/down`).
    pub fn down(&self) -> anyhow::Result<()> {
        run(Command::new(repo_root().join("deploy/local/down"))
            .arg("--dir")
            .arg(&self.dir))
        .map(drop)
    }

    /// Stops every component cleanly and keeps the directory, etcd's data
    /// included (`deploy/local/down --keep`).
    pub fn stop_keeping_data(&self) -> anyhow::Result<()> {
        run(Command::new(repo_root().join("deploy/local/down"))
            .arg("--dir")
            .arg(&self.dir)
            .arg("--keep"))
        .map(drop)
    }
}

async fn client_from(kubeconfig: Kubeconfig) -> anyhow::Result<Client> {
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?;
    Ok(Client::try_from(config)?)
}

/// Runs `cmd` to the end, its stderr passed through; its stdout, or an
/// error naming the command.
pub fn run(cmd: &mut Command) -> anyhow::Result<String> {
    let out = cmd
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .with_context(|| format!("running {cmd:?}"))?;
    if !out.status.success() {
        bail!("{cmd:?} failed ({})", out.status);
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attach_reads_the_env_and_pids_files_up_writes() {
        let dir = std::env::temp_dir().join(format!("harness-attach-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("env"),
            "export SHARDCRON_BIN_DIR=/opt/bin\nexport EMPTY=''\nexport QUOTED='a b'\n",
        )
        .unwrap();
        std::fs::write(dir.join("pids"), "etcd 10\nkube-apiserver 11\n").unwrap();
        let cluster = LocalCluster::attach(&dir).unwrap();
        assert_eq!(
            cluster.bin("kubectl").unwrap(),
            Path::new("/opt/bin/kubectl")
        );
        assert_eq!(cluster.env("EMPTY"), None);
        assert_eq!(cluster.env("QUOTED"), Some("a b"));
        assert_eq!(cluster.pid("kube-apiserver").unwrap(), 11);
        assert!(cluster.pid("kube-scheduler").is_err());
        std::fs::remove_dir_all(&dir).unwrap();
        let missing = LocalCluster::attach(&dir).err().unwrap();
        assert!(format!("{missing:#}").contains("is a cluster up there?"));
    }
}
