//! `cargo suite`: every test of the workspace, side by side (the README's
//! test command). Builds the test binaries, starts the shared control
//! planes, runs the binaries as [`plan`] says, and
//! prints each one's result and duration as it ends, then a summary.
//!
//! `cargo suite LANE...` runs only the binaries whose name contains one of
//! the words (`=LANE`: so named); `cargo suite --list` prints the plan. Each binary's output
//! goes to target/suite/LANE.log; a failed one's failures are printed.
//! `--kubernetes MINOR`, `--sharded-watch` and `--without-watch-list` run
//! every control plane on that server instead of the plan's; `--matrix`
//! runs the lanes on every supported server in turn ([`matrix`]).

mod build;
mod cpu;
mod matrix;
mod plan;
mod report;
mod server;

use cpu::{CpuSampler, LANE_VARIABLE};
use plan::{Placement, SharedPlane, TestBinary};
use report::{failures_of, panics_of};
use server::Server;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The doc tests are not a binary cargo builds with `--no-run`: a lane of
/// their own, run by cargo (it compiles them: light enough to start beside
/// the long lanes, which it would otherwise outlast).
const DOC_TESTS: &str = "doc tests";
const DOC_TESTS_WEIGHT: plan::Weight = 2;

fn main() -> ExitCode {
    match run() {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(error) => {
            eprintln!("suite: {error:#}");
            ExitCode::from(2)
        }
    }
}

fn run() -> anyhow::Result<bool> {
    let started = Instant::now();
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--matrix") {
        return matrix::run(&args);
    }
    let list = args.iter().any(|a| a == "--list");
    let forced = Server::forced_by(&args).map_err(anyhow::Error::msg)?;
    let words: Vec<&String> = args
        .iter()
        .enumerate()
        .filter(|(i, a)| !a.starts_with("--") && (*i == 0 || args[i - 1] != "--kubernetes"))
        .map(|(_, a)| a)
        .collect();
    // A word matches the lanes whose name contains it; `=word`, the lane so named.
    let wanted = |lane: &str| {
        words.is_empty()
            || words.iter().any(|w| match w.strip_prefix('=') {
                Some(exact) => lane == exact,
                None => lane.contains(w.as_str()),
            })
    };

    let binaries: Vec<TestBinary> = plan::order(build::build()?)
        .into_iter()
        .filter(|b| wanted(&b.lane()))
        .collect();
    let doc_tests = wanted(DOC_TESTS);
    if !list && binaries.iter().any(|b| b.lane() == build::IMAGE_LANE) {
        build::build_image()?;
    }
    let built = started.elapsed();
    if list {
        for binary in &binaries {
            let (placement, weight) = plan::placement(binary);
            let server = match placement {
                Placement::Shared(plane) => Some(plane.server()),
                _ => plan::own_server(binary),
            };
            let server = forced
                .or(server)
                .map(|s| format!(", Kubernetes {}", s.label()))
                .unwrap_or_default();
            println!(
                "{:<40} {placement:?}, weight {weight}{server}",
                binary.lane()
            );
        }
        if doc_tests {
            println!("{DOC_TESTS:<40} Offline, weight {DOC_TESTS_WEIGHT}");
        }
        println!("budget {}", budget());
        return Ok(true);
    }

    let logs = repo_root().join("target/suite");
    std::fs::create_dir_all(&logs)?;
    let sampler = CpuSampler::start();
    let shared = plan::shared_planes(&binaries);
    let planes = start_shared_planes(&shared, forced)?;
    let planes_ready = started.elapsed();

    let budget = budget();
    let busy_before = cpu_ticks();
    let (done, finished) = mpsc::channel::<Finished>();
    let mut waiting: Vec<Lane> = binaries
        .iter()
        .map(|binary| Lane::of(binary, &planes, forced, &logs))
        .collect();
    if doc_tests {
        waiting.push(Lane::doc_tests(&logs));
    }
    let mut running: plan::Weight = 0;
    let mut results = Vec::new();
    loop {
        while let Some(next) = plan::next_to_start(
            &waiting.iter().map(|l| l.weight).collect::<Vec<_>>(),
            running,
            budget,
        ) {
            let lane = waiting.remove(next);
            running += lane.weight;
            lane.start(done.clone(), sampler.clone())?;
        }
        if running == 0 {
            break;
        }
        let Ok(finished) = finished.recv() else { break };
        running -= finished.weight;
        println!("{}", finished.line());
        results.push(finished);
    }
    let busy = match (busy_before, cpu_ticks()) {
        (Some((busy0, all0)), Some((busy1, all1))) if all1 > all0 => {
            format!(
                ", the machine {} % busy",
                (busy1 - busy0) * 100 / (all1 - all0)
            )
        }
        _ => String::new(),
    };
    drop(planes);
    print_weights(
        &results,
        &shared,
        &sampler,
        started.elapsed() - planes_ready,
    );

    let failed: Vec<(&Finished, String)> = results
        .iter()
        .filter(|r| !r.passed)
        .map(|r| (r, std::fs::read_to_string(&r.log).unwrap_or_default()))
        .collect();
    for (result, log) in &failed {
        println!(
            "\n==> {} failed ({}):\n{}",
            result.lane,
            result.log.display(),
            failures_of(log)
        );
    }
    let counts = results
        .iter()
        .fold(Counts::default(), |sum, r| sum.plus(&r.counts));
    println!(
        "\nsuite: {} binaries, {} passed, {} failed, {} ignored; {} s in all (build {} s, shared control planes {} s, tests {} s{busy}); logs in {}",
        results.len(),
        counts.passed,
        counts.failed,
        counts.ignored,
        started.elapsed().as_secs(),
        built.as_secs(),
        (planes_ready - built).as_secs(),
        (started.elapsed() - planes_ready).as_secs(),
        logs.display()
    );
    if !failed.is_empty() {
        // Last, so that a tail of the output (all a CI page may show) still
        // says why: the failures above end with long replica logs.
        for (result, log) in &failed {
            for panic in panics_of(log) {
                println!("suite: {}: {panic}", result.lane);
            }
        }
        let names: Vec<&str> = failed.iter().map(|(r, _)| r.lane.as_str()).collect();
        println!("suite: FAILED: {}", names.join(", "));
    }
    Ok(failed.is_empty())
}

/// The repository: this crate is tests/runner.
fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

/// A control plane this process started (`deploy/local/up --watch-pid`:
/// it goes when this process does, however it ends).
struct Plane {
    kind: SharedPlane,
    dir: PathBuf,
}

/// Starts each shared control plane (side by side; on its own server, or
/// on `forced` if set) and applies deploy/ to it once (and deploy/managed
/// to the one beside upstream's controller), so that the binaries' own
/// applies, which may race, only patch.
fn start_shared_planes(
    kinds: &[SharedPlane],
    forced: Option<Server>,
) -> anyhow::Result<Vec<Plane>> {
    let root = repo_root().join("target/test-clusters");
    let starts: Vec<_> = kinds
        .iter()
        .map(|&kind| {
            let dir = root.join(format!("suite-{}-{}", kind.label(), std::process::id()));
            std::thread::spawn(move || -> anyhow::Result<Plane> {
                let mut up = Command::new(repo_root().join("deploy/local/up"));
                up.envs(forced.unwrap_or(kind.server()).env())
                    .env(LANE_VARIABLE, plane_lane(kind))
                    .arg("--dir")
                    .arg(&dir)
                    .arg("--watch-pid")
                    .arg(std::process::id().to_string());
                if kind == SharedPlane::BesideUpstream {
                    up.arg("--with-upstream-cronjob");
                }
                run_quietly(&mut up)?;
                let env = std::fs::read_to_string(dir.join("env"))?;
                let bin = env
                    .lines()
                    .find_map(|l| l.strip_prefix("export SHARDCRON_BIN_DIR="))
                    .ok_or_else(|| {
                        anyhow::anyhow!("no SHARDCRON_BIN_DIR in {}/env", dir.display())
                    })?;
                let kubectl = || {
                    let mut kubectl =
                        Command::new(Path::new(bin.trim_matches('"')).join("kubectl"));
                    kubectl.arg("--kubeconfig").arg(dir.join("kubeconfig"));
                    kubectl
                };
                run_quietly(
                    kubectl()
                        .args(["apply", "-k"])
                        .arg(repo_root().join("deploy")),
                )?;
                // What a managed control plane installs, as the README
                // says (the definition is over the client-side apply's
                // 256 KiB): so every run installs it on the oldest minor.
                if kind == SharedPlane::BesideUpstream {
                    run_quietly(
                        kubectl()
                            .args(["apply", "--server-side", "--force-conflicts", "-k"])
                            .arg(repo_root().join("deploy/managed")),
                    )?;
                }
                run_quietly(kubectl().args([
                    "scale",
                    "statefulset",
                    "shardcron",
                    "-n",
                    "shardcron-system",
                    "--replicas=0",
                ]))?;
                Ok(Plane { kind, dir })
            })
        })
        .collect();
    starts
        .into_iter()
        .map(|start| {
            start
                .join()
                .map_err(|_| anyhow::anyhow!("starting a shared control plane panicked"))?
        })
        .collect()
}

/// Runs `command`; its output is shown only if it fails.
fn run_quietly(command: &mut Command) -> anyhow::Result<()> {
    let output = command.stdin(Stdio::null()).output()?;
    if !output.status.success() {
        anyhow::bail!(
            "{command:?} failed ({}):\n{}{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(())
}

/// One binary (or the doc tests) to run.
struct Lane {
    name: String,
    command: Command,
    weight: plan::Weight,
    log: PathBuf,
}

impl Lane {
    fn of(binary: &TestBinary, planes: &[Plane], forced: Option<Server>, logs: &Path) -> Lane {
        let (placement, weight) = plan::placement(binary);
        let mut command = Command::new(&binary.executable);
        command
            .current_dir(&binary.directory)
            .env("CARGO_MANIFEST_DIR", &binary.directory)
            .env("CARGO_PKG_NAME", &binary.package);
        if let Placement::Shared(plane) = placement
            && let Some(shared) = planes.iter().find(|p| p.kind == plane)
        {
            command.env("SHARDCRON_TEST_CLUSTER", &shared.dir);
        }
        // The server of the control plane it starts, if it starts one.
        if let Some(server) = forced.or(plan::own_server(binary)) {
            command.envs(server.env());
        }
        let name = binary.lane();
        Lane {
            log: logs.join(format!("{}.log", name.replace([' ', '(', ')'], "_"))),
            name,
            command,
            weight,
        }
    }

    fn doc_tests(logs: &Path) -> Lane {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut command = Command::new(cargo);
        command
            .args(["test", "--workspace", "--locked", "--doc"])
            .current_dir(repo_root());
        Lane {
            name: DOC_TESTS.to_owned(),
            command,
            weight: DOC_TESTS_WEIGHT,
            log: logs.join("doc_tests.log"),
        }
    }

    /// Starts it; `done` hears when it ends.
    fn start(mut self, done: mpsc::Sender<Finished>, sampler: CpuSampler) -> anyhow::Result<()> {
        let log = std::fs::File::create(&self.log)?;
        self.command
            .env(LANE_VARIABLE, &self.name)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        let started = Instant::now();
        let mut child = self
            .command
            .spawn()
            .map_err(|e| anyhow::anyhow!("starting {}: {e}", self.name))?;
        std::thread::spawn(move || {
            let passed = child.wait().map(|s| s.success()).unwrap_or(false);
            let counts = Counts::of(&std::fs::read_to_string(&self.log).unwrap_or_default());
            let took = started.elapsed();
            // What its processes still running (a control plane going down)
            // do from here is missed.
            let cpu_seconds = sampler.seconds(&self.name);
            let _ = done.send(Finished {
                lane: self.name,
                passed,
                took,
                cpu_seconds,
                counts,
                weight: self.weight,
                log: self.log,
            });
        });
        Ok(())
    }
}

struct Finished {
    lane: String,
    passed: bool,
    took: Duration,
    /// Its processes' CPU time ([`cpu`]).
    cpu_seconds: f64,
    counts: Counts,
    weight: plan::Weight,
    log: PathBuf,
}

impl Finished {
    fn line(&self) -> String {
        format!(
            "{:<6} {:<40} {:>5} s  CPU {:>5.0} s  {} passed, {} failed, {} ignored",
            if self.passed { "ok" } else { "FAILED" },
            self.lane,
            self.took.as_secs(),
            self.cpu_seconds,
            self.counts.passed,
            self.counts.failed,
            self.counts.ignored
        )
    }
}

/// How the shared control plane `kind` is named as a lane of [`cpu`].
fn plane_lane(kind: SharedPlane) -> String {
    format!("shared plane {}", kind.label())
}

/// Each lane's CPU beside the plan's weight, and the shared planes' over
/// the tests.
fn print_weights(
    results: &[Finished],
    shared: &[SharedPlane],
    sampler: &CpuSampler,
    tests: Duration,
) {
    let lanes = results.iter().map(|result| cpu::Row {
        lane: result.lane.clone(),
        wall: result.took,
        cpu_seconds: result.cpu_seconds,
        plan: Some(result.weight),
    });
    let planes = shared.iter().map(|&kind| {
        let lane = plane_lane(kind);
        cpu::Row {
            cpu_seconds: sampler.seconds(&lane),
            lane,
            wall: tests,
            plan: None,
        }
    });
    cpu::print_table(lanes.chain(planes));
}

/// The sums of libtest's `test result:` lines.
#[derive(Default)]
struct Counts {
    passed: u64,
    failed: u64,
    ignored: u64,
}

impl Counts {
    fn of(log: &str) -> Counts {
        let mut counts = Counts::default();
        for line in log.lines().filter(|l| l.starts_with("test result:")) {
            let number = |what: &str| {
                line.split(';')
                    .find(|part| part.trim_end().ends_with(what))
                    .and_then(|part| part.split_whitespace().rev().nth(1))
                    .and_then(|n| n.parse::<u64>().ok())
                    .unwrap_or(0)
            };
            counts.passed += number("passed");
            counts.failed += number("failed");
            counts.ignored += number("ignored");
        }
        counts
    }

    fn plus(self, other: &Counts) -> Counts {
        Counts {
            passed: self.passed + other.passed,
            failed: self.failed + other.failed,
            ignored: self.ignored + other.ignored,
        }
    }
}

/// How much may run at once, in tenths of a core: the machine's cores,
/// or `SHARDCRON_SUITE_CORES`.
fn budget() -> plan::Weight {
    let cores = std::env::var("SHARDCRON_SUITE_CORES")
        .ok()
        .and_then(|c| c.parse::<f64>().ok())
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(2.0, |n| n.get() as f64));
    (cores * 10.0).round().max(1.0) as plan::Weight
}

/// The machine's busy and total CPU ticks (/proc/stat), if readable.
fn cpu_ticks() -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let ticks: Vec<u64> = stat
        .lines()
        .next()?
        .split_whitespace()
        .skip(1)
        .filter_map(|t| t.parse().ok())
        .collect();
    let all: u64 = ticks.iter().take(8).sum();
    // idle and iowait
    let idle = ticks.get(3)? + ticks.get(4).unwrap_or(&0);
    Some((all - idle, all))
}
