//! The imperative shell of a run: a local control plane (deploy/local/up),
//! shardcron replicas as child processes, and their teardown.

use anyhow::{Context, bail};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, Command};

/// The client settings every controller of a comparison gets.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct ClientLimits {
    pub qps: f64,
    pub burst: u32,
}

/// A control plane started by `deploy/local/up`, torn down on `down` (and,
/// should this process die first, by up's `--watch-pid` watchdog).
pub struct LocalCluster {
    pub dir: PathBuf,
    pub repo: PathBuf,
    pub client: kube::Client,
    env: HashMap<String, String>,
    pids: HashMap<String, u32>,
}

impl LocalCluster {
    /// Starts a fresh control plane in `dir`. `kcm_args` go to
    /// kube-controller-manager (its client QPS and burst).
    pub async fn up(
        repo: &Path,
        dir: &Path,
        upstream_cronjob: bool,
        kcm_args: &str,
    ) -> anyhow::Result<Self> {
        let mut up = std::process::Command::new(repo.join("deploy/local/up"));
        up.arg("--dir")
            .arg(dir)
            .arg("--watch-pid")
            .arg(std::process::id().to_string());
        if upstream_cronjob {
            up.arg("--with-upstream-cronjob");
        }
        up.env("KUBE_CONTROLLER_MANAGER_EXTRA_ARGS", kcm_args)
            .stderr(Stdio::inherit());
        let out = tokio::task::spawn_blocking(move || up.output()).await??;
        if !out.status.success() {
            bail!(
                "deploy/local/up --dir {} failed ({})",
                dir.display(),
                out.status
            );
        }
        let env = read_env(&dir.join("env"))?;
        let pids = read_pids(dir)?;
        let kubeconfig = kube::config::Kubeconfig::read_from(dir.join("kubeconfig"))?;
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?;
        Ok(Self {
            dir: dir.to_owned(),
            repo: repo.to_owned(),
            client: kube::Client::try_from(config)?,
            env,
            pids,
        })
    }

    pub fn pid(&self, component: &str) -> anyhow::Result<u32> {
        self.pids
            .get(component)
            .copied()
            .with_context(|| format!("no {component} in {}/pids", self.dir.display()))
    }

    /// kube-controller-manager's recorded command line (up's `printf %q`
    /// of each argument) with `flags` set: each `(--name, value)` replaces
    /// that flag's value or is appended. Values are written as `%q` would
    /// write them (`\*` for `*`, `\,` for `,`).
    fn kcm_command(&self, flags: &[(&str, &str)]) -> anyhow::Result<String> {
        let cmd_file = self.dir.join("kube-controller-manager.cmd");
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
    pub fn restart_kcm(&mut self, flags: &[(&str, &str)]) -> anyhow::Result<u32> {
        let cmd = self.kcm_command(flags)?;
        std::fs::write(self.dir.join("kube-controller-manager.cmd"), cmd)?;
        run(
            std::process::Command::new(self.repo.join("deploy/local/restart"))
                .arg("--dir")
                .arg(&self.dir)
                .arg("kube-controller-manager"),
        )?;
        self.pids = read_pids(&self.dir)?;
        self.pid("kube-controller-manager")
    }

    /// Starts a second kube-controller-manager, a child of this process, on
    /// its own port with `flags` set, logging to `log`.
    pub fn start_kcm_standby(&self, flags: &[(&str, &str)], log: &Path) -> anyhow::Result<Child> {
        let port = free_port()?.to_string();
        let mut flags = flags.to_vec();
        flags.push(("--secure-port", &port));
        let cmd = self.kcm_command(&flags)?;
        let file = std::fs::File::create(log)?;
        let mut command = Command::new("bash");
        command
            .arg("-c")
            .arg(format!("exec {cmd}"))
            .stdout(file.try_clone()?)
            .stderr(file)
            .kill_on_drop(true);
        die_with_parent(&mut command);
        command
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

    pub fn env(&self, name: &str) -> Option<&str> {
        self.env
            .get(name)
            .map(String::as_str)
            .filter(|v| !v.is_empty())
    }

    fn kubectl(&self) -> anyhow::Result<std::process::Command> {
        self.kubectl_as(&self.dir.join("kubeconfig"))
    }

    fn kubectl_as(&self, kubeconfig: &Path) -> anyhow::Result<std::process::Command> {
        let bin = self
            .env("SHARDCRON_BIN_DIR")
            .context("no SHARDCRON_BIN_DIR in the cluster's env file")?;
        let mut cmd = std::process::Command::new(Path::new(bin).join("kubectl"));
        cmd.arg("--kubeconfig").arg(kubeconfig);
        Ok(cmd)
    }

    /// Applies deploy/ (RBAC, ServiceAccount; the StatefulSet scaled to 0:
    /// kwok runs no containers) and returns a kubeconfig that authenticates
    /// as the controller's ServiceAccount.
    pub async fn shardcron_credentials(&self) -> anyhow::Result<PathBuf> {
        let deploy = self.repo.join("deploy");
        run(self.kubectl()?.arg("apply").arg("-k").arg(&deploy))?;
        run(self.kubectl()?.args([
            "scale",
            "statefulset",
            "shardcron",
            "-n",
            "shardcron-system",
            "--replicas=0",
        ]))?;
        let out = run(
            std::process::Command::new(self.repo.join("deploy/local/sa-kubeconfig"))
                .arg("--dir")
                .arg(&self.dir),
        )?;
        let path = PathBuf::from(
            out.lines()
                .last()
                .context("sa-kubeconfig printed nothing")?
                .trim(),
        );
        for _ in 0..60 {
            let mut check = self.kubectl_as(&path)?;
            check.args(["auth", "can-i", "create", "jobs.batch", "--all-namespaces"]);
            if check.output().map(|o| o.status.success()).unwrap_or(false) {
                return Ok(path);
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        bail!(
            "the ServiceAccount shardcron-system/shardcron cannot create Jobs after 30 s (deploy/kubernetes/rbac.yaml)"
        )
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
        let args = vec![
            "--kubeconfig".to_owned(),
            credentials.display().to_string(),
            "--shard-ring-name".into(),
            "loadtest".into(),
            "--kube-api-qps".into(),
            limits.qps.to_string(),
            "--kube-api-burst".into(),
            limits.burst.to_string(),
        ];
        let names: Vec<(String, PathBuf)> = (0..n)
            .map(|i| {
                let name = format!("shardcron-{i}");
                let log = self.dir.join(format!("{name}{log_suffix}.log"));
                (name, log)
            })
            .collect();
        let starts = names
            .iter()
            .map(|(name, log)| Replica::start(bin, name, &args, &[], log));
        let mut replicas = Vec::new();
        let mut failed = None;
        for result in futures::future::join_all(starts).await {
            match result {
                Ok((replica, _)) => replicas.push(replica),
                Err(error) => failed = Some(error),
            }
        }
        if let Some(error) = failed {
            for replica in replicas {
                // The failed start's error is the one worth reporting.
                let _ = replica.stop().await;
            }
            return Err(error);
        }
        Ok(replicas)
    }

    /// Copies every `*.log` of the cluster directory (components and
    /// replicas) into `to`.
    pub fn save_logs(&self, to: &Path) -> anyhow::Result<()> {
        std::fs::create_dir_all(to)?;
        for entry in std::fs::read_dir(&self.dir)? {
            let path = entry?.path();
            if path.extension().is_some_and(|e| e == "log")
                && let Some(name) = path.file_name()
            {
                std::fs::copy(&path, to.join(name))?;
            }
        }
        Ok(())
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
            stopped = stopped.and(replica.stop().await);
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

    pub fn down(&self) -> anyhow::Result<()> {
        run(
            std::process::Command::new(self.repo.join("deploy/local/down"))
                .arg("--dir")
                .arg(&self.dir),
        )
        .map(drop)
    }
}

/// `DIR/pids`: a component name and its pid per line.
fn read_pids(dir: &Path) -> anyhow::Result<HashMap<String, u32>> {
    let path = dir.join("pids");
    Ok(std::fs::read_to_string(&path)
        .with_context(|| format!("reading {}", path.display()))?
        .lines()
        .filter_map(|l| l.split_once(' '))
        .filter_map(|(name, pid)| Some((name.to_owned(), pid.trim().parse().ok()?)))
        .collect())
}

fn read_env(path: &Path) -> anyhow::Result<HashMap<String, String>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    Ok(text
        .lines()
        .filter_map(|l| l.strip_prefix("export ")?.split_once('='))
        .map(|(k, v)| {
            (
                k.to_owned(),
                v.trim_matches(|c| c == '"' || c == '\'').to_owned(),
            )
        })
        .collect())
}

fn run(cmd: &mut std::process::Command) -> anyhow::Result<String> {
    let out = cmd
        .stderr(Stdio::inherit())
        .output()
        .with_context(|| format!("running {cmd:?}"))?;
    if !out.status.success() {
        bail!("{cmd:?} failed ({})", out.status);
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// One shardcron process started by the loadtest.
pub struct Replica {
    pub name: String,
    child: Child,
}

impl Replica {
    /// Starts `bin run <args>` with the replica id `name`, logging to
    /// `log`, and waits until its `/readyz` answers 200 (every actor armed).
    pub async fn start(
        bin: &Path,
        name: &str,
        args: &[String],
        env: &[(String, String)],
        log: &Path,
    ) -> anyhow::Result<(Self, Duration)> {
        let started = std::time::Instant::now();
        let health = free_port()?;
        let file = std::fs::File::create(log)?;
        let mut cmd = Command::new(bin);
        cmd.arg("run")
            .args([
                "--replica-id",
                name,
                "--metrics-bind-address",
                "127.0.0.1:0",
                "--debug-bind-address",
                "127.0.0.1:0",
            ])
            .arg("--health-probe-bind-address")
            .arg(format!("127.0.0.1:{health}"))
            .args(args)
            .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdout(file.try_clone()?)
            .stderr(file)
            .kill_on_drop(true);
        die_with_parent(&mut cmd);
        let mut child = cmd
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        loop {
            if let Some(status) = child.try_wait()? {
                bail!(
                    "{name} exited ({status}) before it was ready; see {}",
                    log.display()
                );
            }
            if ready(health).await {
                return Ok((
                    Self {
                        name: name.to_owned(),
                        child,
                    },
                    started.elapsed(),
                ));
            }
            if started.elapsed() > Duration::from_secs(600) {
                bail!("{name} was not ready within 600 s; see {}", log.display());
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    pub fn pid(&self) -> anyhow::Result<u32> {
        self.child.id().context("replica has exited")
    }

    /// SIGKILL: a crash, no graceful hand-off.
    pub async fn kill(mut self) -> anyhow::Result<()> {
        self.child.kill().await?;
        Ok(())
    }

    /// SIGTERM, then up to 15 s for the graceful exit.
    pub async fn stop(mut self) -> anyhow::Result<()> {
        let pid = self.pid()?;
        // SAFETY: kill has no memory-safety preconditions.
        unsafe { libc::kill(pid as i32, libc::SIGTERM) };
        match tokio::time::timeout(Duration::from_secs(15), self.child.wait()).await {
            Ok(status) => {
                let status = status?;
                if !status.success() {
                    bail!("{} exited with {status} after SIGTERM", self.name);
                }
                Ok(())
            }
            Err(_) => {
                self.child.kill().await?;
                bail!("{} ignored SIGTERM for 15 s", self.name)
            }
        }
    }
}

/// The child gets SIGKILL when this process dies, so an aborted run leaves
/// no controller behind.
fn die_with_parent(cmd: &mut Command) {
    // SAFETY: prctl is async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
}

/// A port free on loopback for a server started next. Picked below the
/// kernel's ephemeral range, as `deploy/local/up` does: a port the kernel
/// hands out (`bind(0)`) can be taken again, between this check and the
/// server's own bind, by any outgoing connection, and an S1 run lost a
/// replica to exactly that.
fn free_port() -> anyhow::Result<u16> {
    let range =
        std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").unwrap_or_default();
    let ephemeral_low = range
        .split_whitespace()
        .next()
        .and_then(|low| low.parse::<u16>().ok())
        .unwrap_or(32768);
    let below = 10_000..ephemeral_low.max(10_001);
    for _ in 0..200 {
        let port = rand_port(below.clone());
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return Ok(port);
        }
    }
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// A port drawn at random from `range`: std's `RandomState` gets fresh
/// random keys for every instance, which is randomness enough here.
fn rand_port(range: std::ops::Range<u16>) -> u16 {
    use std::hash::BuildHasher;
    let draw = std::collections::hash_map::RandomState::new().hash_one(std::process::id());
    let span = u64::from(range.end - range.start);
    range.start + (draw % span) as u16
}

async fn ready(port: u16) -> bool {
    let attempt = async {
        let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
        stream
            .write_all(b"GET /readyz HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
            .await?;
        let mut response = Vec::new();
        stream.read_to_end(&mut response).await?;
        Ok::<_, std::io::Error>(
            response.starts_with(b"HTTP/1.0 200") || response.starts_with(b"HTTP/1.1 200"),
        )
    };
    matches!(
        tokio::time::timeout(Duration::from_secs(2), attempt).await,
        Ok(Ok(true))
    )
}
