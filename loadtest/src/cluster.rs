//! The imperative shell of a run, on the harness every test shares
//! (`shardcron-harness`): a local control plane with an admin client, what
//! only the load test does to kube-controller-manager (restart it with other
//! flags, start a standby), a fleet of shardcron replicas, and the teardown.

use anyhow::{Context, bail};
use serde::{Deserialize, Serialize};
use shardcron::reconcile::CronJobKind;
use shardcron_harness::cluster::UpOptions;
use shardcron_harness::replica::die_with_parent;
use shardcron_harness::{Replica, ReplicaSpec};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;
use tokio::process::{Child, Command};

/// How long a replica may take to be ready (S3 arms 10^5 CronJobs first).
pub const READY_WITHIN: Duration = Duration::from_secs(600);
/// How long a replica may take to exit after SIGTERM: its drain while the
/// peers load its CronJobs (`--shard-drain-timeout`, 60 s), its stop (10 s
/// at most), and a margin.
const STOP_WITHIN: Duration = Duration::from_secs(80);

/// The client settings every controller of a comparison gets.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct ClientLimits {
    pub qps: f64,
    pub burst: u32,
}

/// A control plane started by `deploy/local/up` and an admin client.
pub struct LocalCluster {
    harness: shardcron_harness::LocalCluster,
    pub client: kube::Client,
    /// The CronJobs the replicas serve (`--cronjob-kinds`): batch/v1, or
    /// the CRD as on a managed control plane.
    kind: CronJobKind,
}

impl std::ops::Deref for LocalCluster {
    type Target = shardcron_harness::LocalCluster;
    fn deref(&self) -> &Self::Target {
        &self.harness
    }
}

impl LocalCluster {
    /// Starts a fresh control plane in `dir`. `kcm_args` go to
    /// kube-controller-manager (its client QPS and burst); `sharded_watch`:
    /// kube-apiserver's `ShardedListAndWatch` gate (the figures of
    /// docs/performance.md are the sharded path's unless they say
    /// otherwise; without it, every replica receives every CronJob).
    pub async fn up(
        dir: &Path,
        upstream_cronjob: bool,
        kcm_args: &str,
        sharded_watch: bool,
    ) -> anyhow::Result<Self> {
        let options = UpOptions {
            upstream_cronjob,
            kcm_extra_args: kcm_args.to_owned(),
            sharded_watch,
            ..UpOptions::default()
        };
        Self::up_with(dir, options).await
    }

    /// Starts a control plane in `dir` as `options` say.
    pub async fn up_with(dir: &Path, options: UpOptions) -> anyhow::Result<Self> {
        let dir = dir.to_owned();
        let harness = tokio::task::spawn_blocking(move || {
            shardcron_harness::LocalCluster::up(&dir, &options)
        })
        .await??;
        let client = harness.admin_client().await?;
        Ok(Self {
            harness,
            client,
            kind: CronJobKind::Batch,
        })
    }

    /// The replicas started from now on serve `kind` (by default batch/v1);
    /// [`Self::shardcron_credentials`] installs what that kind needs.
    pub fn serve(&mut self, kind: CronJobKind) {
        self.kind = kind;
    }

    /// Starts a second kube-controller-manager, a child of this process, on
    /// its own port with `flags` set, logging to `log`.
    pub fn start_kcm_standby(&self, flags: &[(&str, &str)], log: &Path) -> anyhow::Result<Child> {
        let port = shardcron_harness::net::free_port().port().to_string();
        let mut flags = flags.to_vec();
        flags.push(("--secure-port", &port));
        let cmd = self.harness.kcm_command(&flags)?;
        let file = std::fs::File::create(log)?;
        let mut command = std::process::Command::new("bash");
        command
            .arg("-c")
            .arg(format!("exec {cmd}"))
            .stdin(Stdio::null())
            .stdout(file.try_clone()?)
            .stderr(file);
        die_with_parent(&mut command);
        Command::from(command)
            .kill_on_drop(true)
            .spawn()
            .context("starting a second kube-controller-manager")
    }

    /// A client for kube-controller-manager's own secure port, for its
    /// `/metrics` (anonymous: the cluster must be up with
    /// `--authorization-always-allow-paths` including `/metrics`).
    pub fn kcm_client(&self) -> anyhow::Result<kube::Client> {
        let port = self
            .env("SHARDCRON_KCM_PORT")
            .context("no SHARDCRON_KCM_PORT in the cluster's env file")?;
        let mut config = kube::Config::new(format!("https://127.0.0.1:{port}").parse()?);
        // Its serving certificate is self-signed; the port is on loopback.
        config.accept_invalid_certs = true;
        Ok(kube::Client::try_from(config)?)
    }

    /// Applies deploy/ (deploy/managed for the CRD) and returns a
    /// kubeconfig that authenticates as the controller's ServiceAccount.
    pub async fn shardcron_credentials(&self) -> anyhow::Result<PathBuf> {
        let path = self.dir().join("shardcron.kubeconfig");
        match self.kind {
            CronJobKind::Batch => self.controller_kubeconfig(&path).await?,
            CronJobKind::Shardcron => self.managed_controller_kubeconfig(&path).await?,
        }
        Ok(path)
    }

    /// Starts `n` shardcron replicas (`shardcron-<i>`, one ring) at once,
    /// authenticated by `credentials`, and returns when every one is ready
    /// (every actor of its share armed). Logs go to
    /// `<dir>/shardcron-<i><log_suffix>.log`.
    pub async fn start_shardcron(
        &self,
        bin: &Path,
        n: usize,
        credentials: &Path,
        limits: ClientLimits,
        log_suffix: &str,
    ) -> anyhow::Result<Vec<Replica>> {
        self.start_shardcron_ids(bin, 0..n, credentials, limits, log_suffix)
            .await
    }

    /// [`Self::start_shardcron`] for the replicas `shardcron-<i>`, `i` in
    /// `ids` (a later one joins a running ring).
    pub async fn start_shardcron_ids(
        &self,
        bin: &Path,
        ids: std::ops::Range<usize>,
        credentials: &Path,
        limits: ClientLimits,
        log_suffix: &str,
    ) -> anyhow::Result<Vec<Replica>> {
        let args: Vec<String> = vec![
            "--shard-ring-name".into(),
            "loadtest".into(),
            "--kube-api-qps".into(),
            limits.qps.to_string(),
            "--kube-api-burst".into(),
            limits.burst.to_string(),
            "--cronjob-kinds".into(),
            self.kind.name().into(),
        ];
        let starts = ids.map(|i| {
            let id = format!("shardcron-{i}");
            let spec = ReplicaSpec {
                bin: bin.to_owned(),
                log: self.dir().join(format!("{id}{log_suffix}.log")),
                id,
                kubeconfig: credentials.to_owned(),
                args: args.clone(),
                env: Vec::new(),
            };
            Replica::start(spec, READY_WITHIN)
        });
        let mut replicas = Vec::new();
        let mut failed = None;
        for result in futures::future::join_all(starts).await {
            match result {
                Ok(replica) => replicas.push(replica),
                Err(error) => failed = Some(error),
            }
        }
        if let Some(error) = failed {
            for mut replica in replicas {
                // The failed start's error is the one worth reporting.
                let _ = replica.stop(STOP_WITHIN).await;
            }
            return Err(error);
        }
        Ok(replicas)
    }

    /// Ends a run on this cluster: stops the replicas, copies the logs to
    /// `logs` if the run failed or `keep_logs` is set (`down` removes the
    /// cluster directory, as up's watchdog would when this process exits),
    /// tears the cluster down, and returns the run's result, then any
    /// failed stop.
    pub async fn finish<T>(
        &self,
        replicas: Vec<Replica>,
        result: anyhow::Result<T>,
        logs: &Path,
        keep_logs: bool,
    ) -> anyhow::Result<T> {
        let mut stopped = Ok(());
        for replica in replicas {
            stopped = stopped.and(stop(replica).await);
        }
        let outcome = if result.is_err() { "failed" } else { "ended" };
        if result.is_err() || keep_logs {
            match self.save_logs(logs) {
                Ok(()) => eprintln!("the run {outcome}; its logs are in {}", logs.display()),
                Err(error) => {
                    eprintln!("the run {outcome}, and its logs could not be saved: {error:#}")
                }
            }
        }
        self.down()?;
        let value = result?;
        stopped?;
        Ok(value)
    }
}

/// SIGTERM; the replica must exit 0 within [`STOP_WITHIN`].
pub async fn stop(mut replica: Replica) -> anyhow::Result<()> {
    stop_gracefully(&mut replica).await
}

/// [`stop`], the replica kept (to be launched again).
pub async fn stop_gracefully(replica: &mut Replica) -> anyhow::Result<()> {
    match replica.stop(STOP_WITHIN).await? {
        Some(status) if !status.success() => {
            bail!("{} exited with {status} after SIGTERM", replica.id())
        }
        _ => Ok(()),
    }
}

/// A replica's pid, while it runs.
pub fn pid(replica: &Replica) -> anyhow::Result<u32> {
    replica
        .pid()
        .with_context(|| format!("{} has exited", replica.id()))
}
