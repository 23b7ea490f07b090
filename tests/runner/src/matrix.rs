//! `cargo suite --matrix [LANE...]`: the lanes that tell one Kubernetes
//! from another, run on every supported server in turn (each run the
//! suite itself with `--kubernetes MINOR` and the gates), and a table of
//! what ran and passed: target/suite/matrix.md, which docs/compatibility.md
//! quotes with the run's date and commit.

use crate::server::{self, Server};
use std::process::{Command, Stdio};

/// The lanes whose outcome depends on the server and that take a few
/// minutes: Jobs against upstream's in both modes (batch/v1 and the CRD),
/// the CRD's parity with batch/v1, the probes' fallbacks with a CronJob of
/// each kind firing, the RBAC and the chart's install. (`controller` and
/// `controller_crd`, four minutes each, run when named.)
const LANES: &[&str] = &[
    "=crd",
    "job_parity",
    "server_features",
    "deploy_rbac",
    "helm",
];

/// Every supported minor with the gate off (the users' path), where the
/// gate exists (1.36 on) with it on too, and the oldest without streaming
/// lists.
fn servers() -> Vec<Server> {
    let mut servers = Vec::new();
    for minor in server::MINORS {
        servers.push(Server::on(minor));
        if minor == server::OLDEST {
            servers.push(Server::on(minor).without_watch_list());
        }
        if minor >= "1.36" {
            servers.push(Server::on(minor).with_sharded_watch());
        }
    }
    servers
}

/// One lane's line of the suite's output: `ok     controller   241 s ...`.
fn lane_results(output: &str) -> Vec<(String, String)> {
    output
        .lines()
        .filter_map(|line| {
            let (status, rest) = line.split_once(' ')?;
            if status != "ok" && status != "FAILED" {
                return None;
            }
            let rest = rest.trim_start();
            let lane = rest.split("  ").next()?.trim().to_owned();
            let counts = rest.split_once("CPU")?.1;
            let counts = counts.split_once(" s  ")?.1.trim().to_owned();
            Some((lane, format!("{status}: {counts}")))
        })
        .collect()
}

pub fn run(args: &[String]) -> anyhow::Result<bool> {
    let words: Vec<&str> = args
        .iter()
        .filter(|a| !a.starts_with("--"))
        .map(String::as_str)
        .collect();
    let lanes: Vec<&str> = if words.is_empty() {
        LANES.to_vec()
    } else {
        words
    };
    let exe = std::env::current_exe()?;
    let mut rows = Vec::new();
    let mut all_passed = true;
    for server in servers() {
        println!("matrix: Kubernetes {} ...", server.label());
        let mut suite = Command::new(&exe);
        suite.arg("--kubernetes").arg(server.kubernetes);
        if server.sharded_watch {
            suite.arg("--sharded-watch");
        }
        if !server.watch_list {
            suite.arg("--without-watch-list");
        }
        let started = std::time::Instant::now();
        let output = suite.args(&lanes).stdin(Stdio::null()).output()?;
        let stdout = String::from_utf8_lossy(&output.stdout);
        print!("{stdout}");
        all_passed &= output.status.success();
        let results = lane_results(&stdout);
        let ran = results
            .iter()
            .map(|(lane, result)| format!("`{lane}` {result}"))
            .collect::<Vec<_>>()
            .join("; ");
        rows.push(format!(
            "| {} | {} | {} | {} s | {} |",
            server.kubernetes,
            if server.sharded_watch { "on" } else { "off" },
            if server.watch_list { "on" } else { "off" },
            started.elapsed().as_secs(),
            if ran.is_empty() {
                format!("did not run: {}", stdout.lines().last().unwrap_or_default())
            } else {
                ran
            }
        ));
    }
    let table = format!(
        "| minor | ShardedListAndWatch | WatchList | took | lanes: result, tests passed, failed, ignored |\n|---|---|---|---|---|\n{}\n",
        rows.join("\n")
    );
    let path = crate::repo_root().join("target/suite/matrix.md");
    std::fs::create_dir_all(path.parent().unwrap_or(&path))?;
    std::fs::write(&path, &table)?;
    println!("\n{table}\nmatrix: written to {}", path.display());
    Ok(all_passed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_minor_runs_gate_off_and_the_gate_where_it_exists() {
        let labels: Vec<String> = servers().iter().map(Server::label).collect();
        assert_eq!(
            labels,
            [
                "1.34",
                "1.34 without WatchList",
                "1.35",
                "1.36",
                "1.36 gate on",
                "1.37",
                "1.37 gate on"
            ]
        );
    }

    #[test]
    fn a_lanes_line_gives_its_result_and_counts() {
        let output = "ok     controller                                 241 s  CPU    50 s  40 passed, 0 failed, 1 ignored\n\
                      FAILED crd                                         12 s  CPU     3 s  9 passed, 1 failed, 0 ignored\n\
                      suite: 2 binaries";
        assert_eq!(
            lane_results(output),
            [
                (
                    "controller".to_owned(),
                    "ok: 40 passed, 0 failed, 1 ignored".to_owned()
                ),
                (
                    "crd".to_owned(),
                    "FAILED: 9 passed, 1 failed, 0 ignored".to_owned()
                )
            ]
        );
    }
}
