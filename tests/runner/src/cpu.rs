//! The CPU each lane uses, measured: every process a lane starts (its test
//! binary, the replicas and control planes that binary starts, however
//! they detach) inherits `SHARDCRON_SUITE_LANE`, and a sampler reads
//! `/proc` every [`SAMPLE`] for the CPU time of each marked process. A
//! process's last sample counts, so what one does in its last interval is
//! missed, and one that lives less than an interval may be; the figures
//! are a floor, close for lanes whose work is in long-lived processes.
//! The shared control planes are marked too, as lanes of their own.
//!
//! The plan's weights (`plan.rs`) are these figures, CPU seconds over wall
//! seconds, from the runs docs/testing.md names.

use crate::plan::{self, Weight};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The variable that names a process's lane.
pub const LANE_VARIABLE: &str = "SHARDCRON_SUITE_LANE";

/// How often `/proc` is read.
const SAMPLE: Duration = Duration::from_secs(2);

/// Clock ticks per second of `/proc/PID/stat`'s times (USER_HZ: 100 on
/// every Linux architecture the suite runs on).
const TICKS_PER_SECOND: f64 = 100.0;

/// Each process seen (pid and start time, so a reused pid is another
/// process): its lane and its CPU ticks at its last sample.
type Seen = HashMap<(u32, u64), (Arc<str>, u64)>;

/// The sampler; its thread ends with the process.
#[derive(Clone, Default)]
pub struct CpuSampler {
    seen: Arc<Mutex<Seen>>,
}

impl CpuSampler {
    /// Starts sampling (nothing is measured where `/proc` cannot be read).
    pub fn start() -> CpuSampler {
        let sampler = CpuSampler::default();
        let seen = sampler.seen.clone();
        std::thread::spawn(move || {
            loop {
                sample(&seen);
                std::thread::sleep(SAMPLE);
            }
        });
        sampler
    }

    /// The CPU seconds of `lane`'s processes so far (a final sample first).
    pub fn seconds(&self, lane: &str) -> f64 {
        sample(&self.seen);
        let seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        let ticks: u64 = seen
            .values()
            .filter(|(of, _)| &**of == lane)
            .map(|(_, ticks)| ticks)
            .sum();
        ticks as f64 / TICKS_PER_SECOND
    }
}

/// One line of [`print_table`].
pub struct Row {
    pub lane: String,
    pub wall: Duration,
    pub cpu_seconds: f64,
    /// The plan's weight (none for a shared control plane).
    pub plan: Option<Weight>,
}

/// Each lane's measured weight (tenths of a core over its run) beside the
/// plan's: what `plan.rs`'s weights are taken from.
pub fn print_table(rows: impl Iterator<Item = Row>) {
    println!("\nsuite: CPU by lane (the plan's weights are measured so):");
    println!(
        "{:<40} {:>6} {:>6} {:>9} {:>6}",
        "lane", "wall s", "CPU s", "measured", "plan"
    );
    for row in rows {
        println!(
            "{:<40} {:>6} {:>6.0} {:>9} {:>6}",
            row.lane,
            row.wall.as_secs(),
            row.cpu_seconds,
            plan::weight_of(row.cpu_seconds, row.wall),
            row.plan.map_or("-".to_owned(), |weight| weight.to_string())
        );
    }
}

fn sample(seen: &Mutex<Seen>) {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return;
    };
    let pids = entries
        .filter_map(Result::ok)
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok());
    for pid in pids {
        let Some((start, ticks)) = times(pid) else {
            continue;
        };
        let mut seen = seen.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, last)) = seen.get_mut(&(pid, start)) {
            *last = ticks;
            continue;
        }
        if let Some(lane) = lane_of(pid) {
            seen.insert((pid, start), (lane, ticks));
        }
    }
}

/// A process's start time and its own CPU ticks (user and system; not its
/// children's, which are processes of their own here).
fn times(pid: u32) -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(&stat)
}

/// `/proc/PID/stat`: the fields after the command's closing parenthesis
/// (the command may hold spaces and parentheses) start with the state, the
/// 3rd field; utime and stime are the 14th and 15th, starttime the 22nd.
fn parse_stat(stat: &str) -> Option<(u64, u64)> {
    let after = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    let field = |n: usize| fields.get(n - 3)?.parse::<u64>().ok();
    Some((field(22)?, field(14)? + field(15)?))
}

fn lane_of(pid: u32) -> Option<Arc<str>> {
    let environ = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    let prefix = format!("{LANE_VARIABLE}=");
    environ
        .split(|byte| *byte == 0)
        .find_map(|entry| entry.strip_prefix(prefix.as_bytes()))
        .map(|lane| Arc::from(String::from_utf8_lossy(lane).as_ref()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stat_line_gives_start_time_and_cpu_ticks_whatever_the_command() {
        let stat = "4242 (kube (api) server) S 1 4242 4242 0 -1 4194560 100 0 0 0 \
                    250 50 3 4 20 0 12 0 987654 1000000 2000 18446744073709551615";
        assert_eq!(parse_stat(stat), Some((987654, 300)));
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn this_process_is_measured_once_marked() {
        // The test binary is not marked: nothing is counted for a lane.
        let sampler = CpuSampler::default();
        assert_eq!(sampler.seconds("no such lane"), 0.0);
        assert!(times(std::process::id()).is_some(), "/proc/self/stat reads");
    }
}
