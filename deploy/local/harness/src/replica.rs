//! One `shardcron run` as a child process: its ports, its log, readiness,
//! signals, metrics, debug pages and exit.

use crate::net::{free_port, http_get};
use anyhow::{Context, bail};
use serde::de::DeserializeOwned;
use std::io::Write;
use std::net::SocketAddr;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// How many times a replica that lost a port to another process between
/// [`free_port`] and its own bind is started again on fresh ports.
const PORT_RETRIES: u32 = 3;
/// How long dropping a running replica waits for its graceful exit.
const DROP_GRACE: Duration = Duration::from_secs(15);

/// What to run: `bin run --replica-id ID --kubeconfig K <ports> <args>`.
#[derive(Debug, Clone)]
pub struct ReplicaSpec {
    /// The `shardcron` binary.
    pub bin: PathBuf,
    /// `--replica-id`.
    pub id: String,
    /// `--kubeconfig`.
    pub kubeconfig: PathBuf,
    /// Every other flag of `shardcron run`.
    pub args: Vec<String>,
    /// Environment on top of this process's, without its
    /// `OTEL_EXPORTER_OTLP_ENDPOINT` (traces go where `args` say).
    pub env: Vec<(String, String)>,
    /// Its stdout and stderr, appended to across restarts.
    pub log: PathBuf,
}

/// A signal for [`Replica::signal`].
#[derive(Debug, Clone, Copy)]
pub enum Signal {
    /// Freeze the process (a paused VM, a stuck node).
    Stop,
    /// Thaw it.
    Cont,
    /// The graceful stop.
    Term,
}

pub struct Replica {
    spec: ReplicaSpec,
    child: Option<Child>,
    /// `/healthz`, `/readyz`.
    pub health: SocketAddr,
    pub metrics: SocketAddr,
    /// `/debug/shards`.
    pub debug: SocketAddr,
    /// The admin API (gRPC over TLS).
    pub admin: SocketAddr,
    /// `/metrics` and `/metrics/cronjobs` over HTTPS, for authorized scrapers.
    pub secure_metrics: SocketAddr,
    /// The aggregated admin API, for kube-apiserver's aggregation layer.
    pub aggregated: SocketAddr,
}

impl Replica {
    /// A replica on fresh loopback ports, not started yet.
    pub fn new(spec: ReplicaSpec) -> Self {
        Self {
            spec,
            child: None,
            health: free_port(),
            metrics: free_port(),
            debug: free_port(),
            admin: free_port(),
            secure_metrics: free_port(),
            aggregated: free_port(),
        }
    }

    /// Starts it and waits until it is ready (see [`Self::wait_ready`]).
    pub async fn start(spec: ReplicaSpec, within: Duration) -> anyhow::Result<Self> {
        let mut replica = Self::new(spec);
        replica.launch()?;
        replica.wait_ready(within).await?;
        Ok(replica)
    }

    pub fn id(&self) -> &str {
        &self.spec.id
    }

    pub fn spec(&self) -> &ReplicaSpec {
        &self.spec
    }

    /// The spec, to change for the next [`Self::launch`].
    pub fn spec_mut(&mut self) -> &mut ReplicaSpec {
        &mut self.spec
    }

    /// Starts the process without waiting (see [`die_with_parent`]).
    pub fn launch(&mut self) -> anyhow::Result<()> {
        if self.child.is_some() {
            bail!("{} is running already", self.spec.id);
        }
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.spec.log)
            .with_context(|| format!("opening {}", self.spec.log.display()))?;
        let mut cmd = Command::new(&self.spec.bin);
        cmd.arg("run")
            .args(["--replica-id", &self.spec.id])
            .arg("--kubeconfig")
            .arg(&self.spec.kubeconfig)
            .arg(format!("--metrics-bind-address={}", self.metrics))
            .arg(format!("--health-probe-bind-address={}", self.health))
            .arg(format!("--debug-bind-address={}", self.debug))
            .arg(format!("--admin-bind-address={}", self.admin))
            .arg(format!(
                "--secure-metrics-bind-address={}",
                self.secure_metrics
            ))
            .arg(format!("--aggregated-api-bind-address={}", self.aggregated))
            .args(&self.spec.args)
            .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
            .envs(self.spec.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        die_with_parent(&mut cmd);
        let child = cmd
            .spawn()
            .with_context(|| format!("starting {}", self.spec.bin.display()))?;
        self.child = Some(child);
        Ok(())
    }

    /// Waits until `/readyz` answers 200 (the first lists synced, every
    /// actor of its share armed) and returns how long that took. A process
    /// that exits because another took one of its ports between our check
    /// and its bind is started again on fresh ports, a few times.
    pub async fn wait_ready(&mut self, within: Duration) -> anyhow::Result<Duration> {
        let started = Instant::now();
        let mut port_retries = 0;
        loop {
            if let Ok((200, _)) = http_get(self.health, "/readyz") {
                return Ok(started.elapsed());
            }
            if let Some(status) = self.exited() {
                if self.log_text().contains("Address already in use") && port_retries < PORT_RETRIES
                {
                    port_retries += 1;
                    self.health = free_port();
                    self.metrics = free_port();
                    self.debug = free_port();
                    self.admin = free_port();
                    self.secure_metrics = free_port();
                    self.aggregated = free_port();
                    self.launch()?;
                    continue;
                }
                bail!(
                    "{} exited ({status}) before it was ready:\n{}",
                    self.spec.id,
                    self.log_tail(80)
                );
            }
            if started.elapsed() > within {
                bail!(
                    "{} was not ready within {within:?}:\n{}",
                    self.spec.id,
                    self.log_tail(80)
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The exit status, once the process has exited (and is reaped).
    fn exited(&mut self) -> Option<ExitStatus> {
        let status = self.child.as_mut()?.try_wait().ok().flatten()?;
        self.child = None;
        Some(status)
    }

    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    pub fn signal(&self, signal: Signal) {
        let number = match signal {
            Signal::Stop => libc::SIGSTOP,
            Signal::Cont => libc::SIGCONT,
            Signal::Term => libc::SIGTERM,
        };
        if let Some(pid) = self.pid() {
            // SAFETY: kill has no memory-safety preconditions.
            unsafe { libc::kill(pid as libc::pid_t, number) };
        }
    }

    /// SIGTERM, then up to `within` for the graceful exit; how it exited
    /// (None: it was not running). Past `within` it is killed, an error.
    pub async fn stop(&mut self, within: Duration) -> anyhow::Result<Option<ExitStatus>> {
        if self.child.is_none() {
            return Ok(None);
        }
        self.signal(Signal::Term);
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.exited() {
                return Ok(Some(status));
            }
            if Instant::now() > deadline {
                self.kill();
                bail!("{} ignored SIGTERM for {within:?}", self.spec.id);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// SIGKILL: a crash, no chance to finish anything.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Stops it gracefully (it must exit 0), starts it again and waits
    /// until it is ready.
    pub async fn restart(&mut self, within: Duration) -> anyhow::Result<()> {
        if let Some(status) = self.stop(within).await?
            && !status.success()
        {
            bail!("{} exited with {status} on SIGTERM", self.spec.id);
        }
        self.launch()?;
        self.wait_ready(within).await.map(drop)
    }

    /// `/metrics`, or empty if it does not answer.
    pub fn metrics_text(&self) -> String {
        http_get(self.metrics, "/metrics")
            .map(|(_, body)| body)
            .unwrap_or_default()
    }

    /// The value of one sample line (`name{labels}`), or 0.
    pub fn metric(&self, name: &str) -> f64 {
        sample(&self.metrics_text(), name).unwrap_or(0.0)
    }

    /// A JSON page of the debug port (`/debug/shards?keys=true`), if it
    /// answers 200 with JSON of that shape.
    pub fn debug_json<T: DeserializeOwned>(&self, path: &str) -> Option<T> {
        match http_get(self.debug, path) {
            Ok((200, body)) => serde_json::from_str(&body).ok(),
            _ => None,
        }
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.spec.log).unwrap_or_default()
    }

    /// The last `lines` lines of the log.
    pub fn log_tail(&self, lines: usize) -> String {
        let text = self.log_text();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }
}

/// The child started by `cmd` gets SIGKILL when this process dies, so an
/// aborted run leaves no process behind.
pub fn die_with_parent(cmd: &mut Command) {
    // SAFETY: prctl is async-signal-safe and touches no memory of ours.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
}

impl Drop for Replica {
    /// A failing test shows the replica's side; a running process gets a
    /// graceful stop, then SIGKILL.
    fn drop(&mut self) {
        if std::thread::panicking() {
            let _ = writeln!(
                std::io::stderr(),
                "==> {} log {} (last 80 lines) <==\n{}",
                self.spec.id,
                self.spec.log.display(),
                self.log_tail(80)
            );
        }
        if self.child.is_none() {
            return;
        }
        self.signal(Signal::Term);
        let deadline = Instant::now() + DROP_GRACE;
        while Instant::now() < deadline {
            if self.exited().is_some() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        self.kill();
    }
}

/// The value of one sample line (`name{labels}`, exactly) in a Prometheus
/// text page, or none if the page has no such line.
pub fn sample(page: &str, name: &str) -> Option<f64> {
    page.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

/// The sum and count of one histogram (`name_sum`, `name_count`) in a
/// Prometheus text page, or none if either line is missing.
pub fn histogram(page: &str, name: &str) -> Option<(f64, f64)> {
    let sum = sample(page, &format!("{name}_sum"))?;
    let count = sample(page, &format!("{name}_count"))?;
    Some((sum, count))
}

#[cfg(test)]
mod tests {
    use super::{histogram, sample};

    #[test]
    fn a_sample_is_read_from_its_own_line_and_a_missing_one_is_none() {
        let page = "# HELP shardcron_lease_lapses Times ...\n\
                    shardcron_lease_lapses_total_other 7\n\
                    shardcron_lease_lapses_total 2\n";
        assert_eq!(sample(page, "shardcron_lease_lapses_total"), Some(2.0));
        assert_eq!(sample("", "shardcron_lease_lapses_total"), None);
    }

    #[test]
    fn a_histogram_is_its_sum_and_count_and_none_without_either() {
        let page = "shardcron_handoff_wait_seconds_sum 1.5\n\
                    shardcron_handoff_wait_seconds_count 3\n";
        assert_eq!(
            histogram(page, "shardcron_handoff_wait_seconds"),
            Some((1.5, 3.0))
        );
        let no_count = "shardcron_handoff_wait_seconds_sum 1.5\n";
        assert_eq!(histogram(no_count, "shardcron_handoff_wait_seconds"), None);
    }
}
