//! The controller under test: `shardcron run` as a child process, scoped to
//! one test namespace, authenticated as its ServiceAccount from deploy/ (the
//! manifests are applied with `kubectl apply -k deploy/` first), so a
//! permission missing from deploy/ fails the test.

use super::cluster::Cluster;
use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

pub const CONTROLLER_NAMESPACE: &str = "shardcron-system";
pub const SERVICE_ACCOUNT: &str = "shardcron";

/// Applies deploy/ (once per test binary) with kubectl, as an operator would.
pub fn apply_deploy(cluster: &Cluster) {
    static APPLIED: OnceLock<()> = OnceLock::new();
    APPLIED.get_or_init(|| {
        let kubectl = super::local_binary("kubectl");
        let output = Command::new(kubectl)
            .arg("--kubeconfig")
            .arg(cluster.kubeconfig_path())
            .args(["apply", "-k"])
            .arg(super::repo_root().join("deploy"))
            .output()
            .expect("run kubectl");
        assert!(
            output.status.success(),
            "kubectl apply -k deploy/ failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    });
}

/// A port free on 127.0.0.1 for a controller to listen on. Drawn at random
/// below the kernel's ephemeral range (as deploy/local/lib.sh does), where
/// outgoing connections, plentiful in these tests, never take their local
/// ports; never the same twice in one test binary. A clash that still
/// happens between this check and the controller's bind is retried by
/// [`Controller::wait_ready`].
fn free_port() -> SocketAddr {
    use std::hash::BuildHasher;
    static GIVEN: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());
    let range =
        std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").unwrap_or_default();
    let ephemeral_low: u16 = range
        .split_whitespace()
        .next()
        .and_then(|low| low.parse().ok())
        .unwrap_or(32768);
    let span = u64::from(ephemeral_low.saturating_sub(10_000).max(1));
    let mut given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
    for attempt in 0u64..1_000 {
        // std's RandomState has fresh random keys each time: randomness enough.
        let draw = std::collections::hash_map::RandomState::new().hash_one(attempt);
        let port = 10_000 + (draw % span) as u16;
        if !given.contains(&port) && TcpListener::bind(("127.0.0.1", port)).is_ok() {
            given.insert(port);
            return SocketAddr::from(([127, 0, 0, 1], port));
        }
    }
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    listener.local_addr().expect("local addr")
}

/// A plain HTTP/1.0 GET: (status code, body).
pub fn http_get(addr: SocketAddr, path: &str) -> std::io::Result<(u16, String)> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: test\r\n\r\n")?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    let code = response
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    Ok((code, body))
}

pub struct Controller {
    child: Option<Child>,
    pub namespace: String,
    /// `--replica-id`; `--shard-ring-name` is `ring`.
    pub replica: String,
    pub ring: String,
    kubeconfig: PathBuf,
    pub log: PathBuf,
    pub health: SocketAddr,
    pub metrics: SocketAddr,
    /// `/debug/shards`.
    pub debug: SocketAddr,
    extra_args: Vec<String>,
    starts: u32,
}

impl Controller {
    /// Starts the controller for `namespace` and waits until it is ready.
    pub async fn start(cluster: &Cluster, namespace: &str) -> Controller {
        Self::start_with(cluster, namespace, &[]).await
    }

    /// One replica alone in its ring (the ring is named after the namespace).
    pub async fn start_with(cluster: &Cluster, namespace: &str, extra_args: &[&str]) -> Controller {
        let mut controller = Self::replica(cluster, namespace, namespace, "r0", extra_args).await;
        controller.spawn();
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
        apply_deploy(cluster);
        let kubeconfig = cluster
            .dir()
            .join(format!("controller-{namespace}-{replica}.kubeconfig"));
        let yaml = cluster
            .service_account_kubeconfig(CONTROLLER_NAMESPACE, SERVICE_ACCOUNT)
            .await;
        std::fs::write(&kubeconfig, yaml).expect("write the controller's kubeconfig");
        Controller {
            child: None,
            namespace: namespace.to_owned(),
            replica: replica.to_owned(),
            ring: ring.to_owned(),
            log: cluster
                .dir()
                .join(format!("shardcron-{namespace}-{replica}.log")),
            kubeconfig,
            health: free_port(),
            metrics: free_port(),
            debug: free_port(),
            extra_args: extra_args.iter().map(|s| s.to_string()).collect(),
            starts: 0,
        }
    }

    /// Points the kubeconfig at `server` (say, a proxy) instead of the API server.
    pub fn set_server(&self, server: &str) {
        let yaml = std::fs::read_to_string(&self.kubeconfig).expect("read kubeconfig");
        let rewritten: String = yaml
            .lines()
            .map(|line| match line.split_once("server: ") {
                Some((indent, _)) => format!("{indent}server: {server}\n"),
                None => format!("{line}\n"),
            })
            .collect();
        std::fs::write(&self.kubeconfig, rewritten).expect("write kubeconfig");
    }

    /// The API server's URL in the kubeconfig.
    pub fn server(&self) -> String {
        let yaml = std::fs::read_to_string(&self.kubeconfig).expect("read kubeconfig");
        yaml.lines()
            .find_map(|line| Some(line.split_once("server: ")?.1.trim().to_owned()))
            .expect("a server in the kubeconfig")
    }

    /// Starts the process (see [`Self::replica`]) without waiting.
    pub fn launch(&mut self) {
        assert!(self.child.is_none(), "already running");
        self.spawn();
    }

    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// Sends a signal (`STOP`, `CONT`, ...) to the process.
    pub fn signal(&self, name: &str) {
        if let Some(child) = &self.child {
            signal(child, name);
        }
    }

    /// `/debug/shards?keys=true`, if the process answers.
    pub fn shards(&self) -> Option<shardcron::shard::debug::ShardReport> {
        match http_get(self.debug, "/debug/shards?keys=true") {
            Ok((200, body)) => serde_json::from_str(&body).ok(),
            _ => None,
        }
    }

    fn spawn(&mut self) {
        self.starts += 1;
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("open controller log");
        let child = Command::new(env!("CARGO_BIN_EXE_shardcron"))
            .arg("run")
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(["--namespace", &self.namespace])
            .args(["--replica-id", &self.replica])
            .args(["--shard-ring-name", &self.ring])
            .arg(format!("--metrics-bind-address={}", self.metrics))
            .arg(format!("--health-probe-bind-address={}", self.health))
            .arg(format!("--debug-bind-address={}", self.debug))
            .args(&self.extra_args)
            .env("RUST_LOG", "info,shardcron=debug")
            .env("NO_COLOR", "1")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start shardcron run");
        self.child = Some(child);
    }

    /// Waits for `/readyz` (the first lists synced, every actor armed).
    pub async fn wait_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut port_retries = 0;
        loop {
            if let Ok((200, _)) = http_get(self.health, "/readyz") {
                return;
            }
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                // Another process took a port between our check and its
                // bind: try other ports (a few times).
                if self.log_text().contains("Address already in use") && port_retries < 3 {
                    port_retries += 1;
                    self.health = free_port();
                    self.metrics = free_port();
                    self.debug = free_port();
                    self.spawn();
                    continue;
                }
                panic!("the controller exited with {status}:\n{}", self.log_text());
            }
            assert!(
                Instant::now() < deadline,
                "the controller was not ready within 60 s:\n{}",
                self.log_text()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// SIGTERM, and waits for the process to exit; returns how it exited
    /// (None: it was not running).
    pub fn stop(&mut self) -> Option<std::process::ExitStatus> {
        let mut child = self.child.take()?;
        signal(&child, "TERM");
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                return Some(status);
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("the controller did not stop within 30 s of SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// SIGKILL: no chance to finish anything.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the process again (after `stop` or `kill`) and waits until
    /// ready. A running process is stopped with SIGTERM first and must exit 0.
    pub async fn restart(&mut self) {
        if let Some(status) = self.stop() {
            assert!(
                status.success(),
                "the controller exited with {status} on SIGTERM"
            );
        }
        self.spawn();
        self.wait_ready().await;
    }

    pub fn metrics_text(&self) -> String {
        http_get(self.metrics, "/metrics")
            .map(|(_, b)| b)
            .unwrap_or_default()
    }

    /// The value of one sample line (`name{labels}`), or 0.
    pub fn metric(&self, sample: &str) -> f64 {
        self.metrics_text()
            .lines()
            .find_map(|l| {
                l.strip_prefix(sample)?
                    .strip_prefix(' ')?
                    .trim()
                    .parse()
                    .ok()
            })
            .unwrap_or(0.0)
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

fn signal(child: &Child, name: &str) {
    let _ = Command::new("kill")
        .arg(format!("-{name}"))
        .arg(child.id().to_string())
        .status();
}

impl Drop for Controller {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let text = self.log_text();
            let lines: Vec<&str> = text.lines().collect();
            let _ = writeln!(
                std::io::stderr(),
                "==> controller log {} (last 80 lines) <==\n{}",
                self.log.display(),
                lines[lines.len().saturating_sub(80)..].join("\n")
            );
        }
        if let Some(mut child) = self.child.take() {
            signal(&child, "TERM");
            let deadline = Instant::now() + Duration::from_secs(15);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
