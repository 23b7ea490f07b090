//! The suite's plan, decided before anything runs (`main.rs` carries it
//! out): which control plane each test binary runs on, and in which order
//! the binaries start.
//!
//! `cargo test` runs the binaries one after another, each starting its own
//! control plane, and most of their time is spent waiting for minute
//! boundaries. So the suite runs them side by side: the longest first, the
//! ones that only read and write in their own namespaces on two control
//! planes started once (one plain, one beside kube-controller-manager's
//! CronJob controller), the ones that restart, install into or load a
//! control plane on their own; and never more at once than the machine's
//! cores can serve without slowing every controller's timers down: each
//! binary has a weight (the share of a core it keeps busy, with its part of
//! the control plane's work), and a binary starts only while the weights
//! running fit the budget (two cores by default).

use crate::server::{self, Server};
use std::collections::BTreeMap;

/// Where a test binary runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Placement {
    /// No control plane (unit tests, the offline command-line tests).
    Offline,
    /// On a control plane shared with other binaries (`SHARDCRON_TEST_CLUSTER`).
    Shared(SharedPlane),
    /// On a control plane of its own, which it starts (an API server
    /// restart, a Helm install of cluster-wide objects, the load test).
    Own,
}

/// The control planes the suite starts once for several binaries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum SharedPlane {
    /// kube-controller-manager without its CronJob controller.
    Plain,
    /// kube-controller-manager with its CronJob controller (the CRD mode
    /// and the parity tests run beside it).
    BesideUpstream,
}

impl SharedPlane {
    pub fn label(self) -> &'static str {
        match self {
            SharedPlane::Plain => "plain",
            SharedPlane::BesideUpstream => "beside-upstream",
        }
    }

    /// The Kubernetes it runs: the two ends of the supported range, so
    /// that every run of the suite covers both (the managed path, CRD mode
    /// beside upstream's controller, on the oldest), both with the gate off.
    pub fn server(self) -> Server {
        match self {
            SharedPlane::Plain => Server::on(server::NEWEST),
            SharedPlane::BesideUpstream => Server::on(server::OLDEST),
        }
    }
}

/// One test binary, as cargo built it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TestBinary {
    /// The package's name (`shardcron`, `shardcron-loadtest`, ...).
    pub package: String,
    /// The target's name (`controller`, or the package's for unit tests).
    pub target: String,
    /// `lib`, `bin` or `test`.
    pub kind: String,
    pub executable: std::path::PathBuf,
    /// The package's directory: cargo runs a test binary there.
    pub directory: std::path::PathBuf,
}

impl TestBinary {
    /// How the suite names it: `controller`, `shardcron (lib)`,
    /// `shardcron-loadtest ci_s1`.
    pub fn lane(&self) -> String {
        match (self.package.as_str(), self.kind.as_str()) {
            ("shardcron", "test") => self.target.clone(),
            (_, "test") => format!("{} {}", self.package, self.target),
            (_, kind) => format!("{} ({kind})", self.package),
        }
    }
}

/// What the suite knows of a binary: where it runs, about how long it
/// takes alone (seconds, for the order), and its weight.
struct Known {
    /// As [`TestBinary::lane`] names it.
    lane: &'static str,
    placement: Placement,
    seconds: u32,
    weight: Weight,
    /// The Kubernetes of its own control plane ([`Placement::Own`]).
    server: Server,
}

/// Tenths of a core a binary keeps busy while it runs, its control plane's
/// work included.
pub type Weight = u32;

const fn known(lane: &'static str, placement: Placement, seconds: u32, weight: Weight) -> Known {
    Known {
        lane,
        placement,
        seconds,
        weight,
        server: Server::on(server::DEFAULT),
    }
}

/// A lane with a control plane of its own that runs `server`.
const fn known_on(lane: &'static str, server: Server, seconds: u32, weight: Weight) -> Known {
    Known {
        server,
        ..known(lane, Placement::Own, seconds, weight)
    }
}

const PLAIN: Placement = Placement::Shared(SharedPlane::Plain);
const BESIDE_UPSTREAM: Placement = Placement::Shared(SharedPlane::BesideUpstream);

/// The binaries measured so far (docs/testing.md has their durations). A
/// binary not listed runs on a control plane of its own, after the listed
/// ones have started: a safe default for a new test.
///
/// Each lane's CPU is measured by the suite itself ([`crate::cpu`]: its
/// processes' CPU seconds over its wall seconds, printed at the end of
/// every run). A weight is that figure where CPU is what a lane needs (the
/// offline lanes: the simulation's 1.8 cores). A lane with a control plane
/// keeps a weight above its CPU (0.1-0.3 of a core): its timing depends on
/// its plane's latency (etcd's fsyncs, the API server's queues), which CPU
/// does not show. Given their CPU alone (1 to 6), the lanes ran more at
/// once, the machine was 79 % busy instead of 62 %, the plain plane
/// stalled for 15 s and two timing tests failed (2026-11-29).
const KNOWN: &[Known] = &[
    // Six minutes of faults: starts first, on its own control plane (it
    // kills replicas and cuts them from the API server at a high Job rate).
    known("churn", Placement::Own, 460, 5),
    // The load test's smoke check: zero missed and zero duplicate slots,
    // no timing check; measured at 1-2 tenths of a core.
    known("shardcron-loadtest ci_s1", Placement::Own, 300, 3),
    // Six replacements one at a time, from the previous release (built
    // before the lanes start by .ci/run) to this build and back, under 24
    // CronJobs; and a peer of an unknown protocol version.
    known("upgrade", PLAIN, 260, 3),
    // kube-controller-manager's CronJob controller to shardcron and back:
    // it restarts kube-controller-manager with other --controllers.
    known("switch", Placement::Own, 430, 3),
    // The one lane with kube-apiserver's ShardedListAndWatch gate on: the
    // server-sharded watches (every other lane runs the users' path, the
    // gate off: each replica filters every CronJob itself).
    known_on(
        "sharding",
        Server::on(server::DEFAULT).with_sharded_watch(),
        180,
        7,
    ),
    known("controller_crd", BESIDE_UPSTREAM, 220, 6),
    known("controller", PLAIN, 240, 6),
    known("apiserver_restart", Placement::Own, 160, 3),
    known("crd", BESIDE_UPSTREAM, 160, 3),
    // Installs the chart's cluster-wide objects, which deploy/ (applied by
    // the others) already holds under the same names.
    known("helm", Placement::Own, 60, 3),
    // Registers the cluster-wide APIService of admin.shardcron.io.
    known("aggregated", Placement::Own, 50, 3),
    // Starts its control plane with a Prometheus (`--with-prometheus`).
    known("prometheus", Placement::Own, 180, 3),
    // Six minutes of a healthy ring under every shipped rule, with its own
    // Prometheus.
    known("alerts_soak", Placement::Own, 410, 3),
    // Reads every trace of its Jaeger: other binaries' traces would crowd
    // the answers.
    known("tracing", Placement::Own, 60, 3),
    // The ownership protocol's 10,000 seeded simulations, on every core:
    // measured at 1.8 cores for two minutes (it was given 1, and the
    // timing-bound lanes ran beside it on an overloaded machine).
    known("shardcron (lib)", Placement::Offline, 130, 18),
    known("deploy_rbac", PLAIN, 1, 1),
    // The image (built before the lanes start) run as a kubelet would:
    // one replica, one Job.
    known("image", PLAIN, 100, 2),
    known("control_plane", PLAIN, 60, 1),
    // Jobs field for field against kube-controller-manager's own, on the
    // newest minor with the gates of two pod fields this build's types do
    // not know (the other minors: `cargo suite --matrix`).
    known_on(
        "job_parity",
        Server::on(server::NEWEST).with_alpha_gates(server::NEWER_FIELDS_GATES),
        120,
        3,
    ),
    // The fallbacks where the server has neither streaming lists nor the
    // shard gate: the oldest minor with WatchList off.
    known_on(
        "server_features",
        Server::on(server::OLDEST).without_watch_list(),
        60,
        3,
    ),
    // promtool's rule tests: measured 0.3 of a core.
    known("monitoring", Placement::Offline, 10, 3),
    known("schedule_properties", Placement::Offline, 3, 10),
    known("release", Placement::Offline, 1, 1),
    known("schedule_differential", Placement::Offline, 8, 10),
];

/// The weight of `cpu_seconds` used over `wall`: tenths of a core, rounded
/// up, at least 1.
pub fn weight_of(cpu_seconds: f64, wall: std::time::Duration) -> Weight {
    let cores = cpu_seconds / wall.as_secs_f64().max(1.0);
    ((cores * 10.0).ceil() as Weight).max(1)
}

/// The weight of a binary not measured: a control plane of its own is
/// busy starting.
const UNKNOWN_WITH_A_PLANE: Weight = 3;
const UNKNOWN_OFFLINE: Weight = 1;

/// Where `binary` runs, and its weight.
pub fn placement(binary: &TestBinary) -> (Placement, Weight) {
    match find(binary) {
        Some(known) => (known.placement, known.weight),
        None if is_offline(binary) => (Placement::Offline, UNKNOWN_OFFLINE),
        None => (Placement::Own, UNKNOWN_WITH_A_PLANE),
    }
}

/// Which of `waiting` (in the order to start them, with their weights) to
/// start now, with `running` weight already running within `budget`: the
/// first that fits, or the first if nothing runs (a binary heavier than
/// the budget still runs, alone).
pub fn next_to_start(waiting: &[Weight], running: Weight, budget: Weight) -> Option<usize> {
    if running == 0 && !waiting.is_empty() {
        return Some(0);
    }
    waiting.iter().position(|weight| running + weight <= budget)
}

/// The unit tests of every package and the command-line tests that need
/// no control plane.
fn is_offline(binary: &TestBinary) -> bool {
    binary.kind != "test"
        || matches!(
            binary.target.as_str(),
            "cli_next" | "explain_cli" | "layers" | "monitoring" | "release"
        )
}

fn find(binary: &TestBinary) -> Option<&'static Known> {
    let lane = binary.lane();
    KNOWN.iter().find(|k| k.lane == lane)
}

/// The order to start them in: the longest known first (the suite lasts
/// at least as long as its longest binary), then the rest.
pub fn order(mut binaries: Vec<TestBinary>) -> Vec<TestBinary> {
    binaries.sort_by_key(|binary| {
        let seconds = find(binary).map_or(0, |k| k.seconds);
        (std::cmp::Reverse(seconds), binary.lane())
    });
    binaries
}

/// The Kubernetes of `binary`'s own control plane, if it starts one.
pub fn own_server(binary: &TestBinary) -> Option<Server> {
    match placement(binary).0 {
        Placement::Own => Some(find(binary).map_or(Server::on(server::DEFAULT), |k| k.server)),
        _ => None,
    }
}

/// The shared control planes `binaries` need.
pub fn shared_planes(binaries: &[TestBinary]) -> Vec<SharedPlane> {
    let mut needed = BTreeMap::new();
    for binary in binaries {
        if let (Placement::Shared(plane), _) = placement(binary) {
            needed.insert(plane, ());
        }
    }
    needed.into_keys().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn binary(package: &str, target: &str, kind: &str) -> TestBinary {
        TestBinary {
            package: package.into(),
            target: target.into(),
            kind: kind.into(),
            executable: format!("/t/{target}").into(),
            directory: "/repo".into(),
        }
    }

    #[test]
    fn a_measured_weight_is_tenths_of_a_core_rounded_up() {
        let minute = std::time::Duration::from_secs(60);
        assert_eq!(weight_of(60.0, minute), 10, "one core");
        assert_eq!(weight_of(31.0, minute), 6, "0.52 cores");
        assert_eq!(weight_of(0.0, minute), 1, "at least 1");
        assert_eq!(
            weight_of(5.0, std::time::Duration::ZERO),
            50,
            "a wall of at least a second"
        );
    }

    #[test]
    fn each_binary_runs_where_its_tests_can_share() {
        let table = [
            (binary("shardcron", "controller", "test"), PLAIN, 6),
            (
                binary("shardcron", "controller_crd", "test"),
                BESIDE_UPSTREAM,
                6,
            ),
            (
                binary("shardcron", "apiserver_restart", "test"),
                Placement::Own,
                3,
            ),
            (
                binary("shardcron", "shardcron", "lib"),
                Placement::Offline,
                18,
            ),
            (
                binary("shardcron", "shardcron", "bin"),
                Placement::Offline,
                1,
            ),
            (
                binary("shardcron-harness", "shardcron_harness", "lib"),
                Placement::Offline,
                1,
            ),
            (
                binary("shardcron", "explain_cli", "test"),
                Placement::Offline,
                1,
            ),
            // A new integration test: a control plane of its own.
            (binary("shardcron", "a_new_one", "test"), Placement::Own, 3),
        ];
        for (binary, place, weight) in table {
            assert_eq!(placement(&binary), (place, weight), "{}", binary.lane());
        }
    }

    #[test]
    fn the_longest_start_first_and_the_unknown_last() {
        let binaries = vec![
            binary("shardcron", "a_new_one", "test"),
            binary("shardcron", "controller", "test"),
            binary("shardcron", "churn", "test"),
            binary("shardcron", "cli_next", "test"),
            binary("shardcron-loadtest", "ci_s1", "test"),
        ];
        let lanes: Vec<_> = order(binaries).iter().map(TestBinary::lane).collect();
        assert_eq!(
            lanes,
            [
                "churn",
                "shardcron-loadtest ci_s1",
                "controller",
                "a_new_one",
                "cli_next"
            ]
        );
    }

    #[test]
    fn a_binary_starts_when_its_weight_fits_the_budget() {
        // (waiting, running, budget) -> which starts
        let table: [(&[Weight], Weight, Weight, Option<usize>); 6] = [
            (&[5, 6, 7], 0, 20, Some(0)),
            (&[6, 7], 5, 20, Some(0)),
            // The next does not fit: a lighter one behind it starts.
            (&[7, 6, 3], 15, 20, Some(2)),
            (&[7, 6], 18, 20, None),
            // Heavier than the budget: alone.
            (&[30], 0, 20, Some(0)),
            (&[30], 1, 20, None),
        ];
        for (waiting, running, budget, starts) in table {
            assert_eq!(
                next_to_start(waiting, running, budget),
                starts,
                "{waiting:?} with {running} running"
            );
        }
    }

    #[test]
    fn only_the_shared_planes_asked_for_are_started() {
        let offline = vec![binary("shardcron", "shardcron", "lib")];
        assert!(shared_planes(&offline).is_empty());
        let both = vec![
            binary("shardcron", "crd", "test"),
            binary("shardcron", "controller", "test"),
            binary("shardcron", "sharding", "test"),
        ];
        assert_eq!(
            shared_planes(&both),
            [SharedPlane::Plain, SharedPlane::BesideUpstream]
        );
    }

    /// docs/testing.md's table of lanes says what the plan does: every
    /// binary the plan knows to run a minute or more has a row, with the
    /// plan's weight, control plane and its Kubernetes.
    #[test]
    fn the_docs_lane_table_matches_the_plan() {
        let docs = include_str!("../../../docs/testing.md");
        let rows: BTreeMap<&str, Vec<&str>> = docs
            .lines()
            .filter(|line| line.starts_with("| `"))
            .filter_map(|line| {
                let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
                let lane = cells.first()?.strip_prefix('`')?.split('`').next()?;
                Some((lane, cells))
            })
            .collect();
        for known in KNOWN.iter().filter(|known| known.seconds >= 60) {
            let cells = rows
                .get(known.lane)
                .unwrap_or_else(|| panic!("docs/testing.md has no row for {}", known.lane));
            assert_eq!(
                cells.get(3).copied(),
                Some(known.weight.to_string().as_str()),
                "{}'s weight",
                known.lane
            );
            let server = match known.placement {
                Placement::Own => Some(known.server),
                Placement::Shared(plane) => Some(plane.server()),
                Placement::Offline => None,
            };
            if let Some(server) = server {
                let kubernetes = cells.get(2).copied().unwrap_or_default();
                assert!(
                    kubernetes.starts_with(server.kubernetes)
                        && kubernetes.contains("ShardedListAndWatch") == server.sharded_watch
                        && kubernetes.contains("WatchList` off") != server.watch_list,
                    "{}'s Kubernetes: the docs say {kubernetes:?}, the plan {}",
                    known.lane,
                    server.label()
                );
            }
            let plane = match known.placement {
                Placement::Own => "its own",
                Placement::Shared(SharedPlane::Plain) => "plain",
                Placement::Shared(SharedPlane::BesideUpstream) => "beside upstream",
                Placement::Offline => "none",
            };
            assert!(
                cells.get(1).is_some_and(|cell| cell.starts_with(plane)),
                "{}'s control plane: the docs say {:?}, the plan {plane}",
                known.lane,
                cells.get(1)
            );
        }
    }
}
