//! CPU time and memory of a controller process, read from /proc.

use anyhow::{Context, bail};
use serde::{Deserialize, Serialize};

/// One reading of a process.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
pub struct ProcSample {
    /// User + system CPU seconds since the process started (all threads).
    pub cpu_seconds: f64,
    /// Resident set now, bytes.
    pub rss_bytes: u64,
    /// Peak resident set (VmHWM), bytes.
    pub peak_rss_bytes: u64,
}

pub fn sample(pid: u32) -> anyhow::Result<ProcSample> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("reading /proc/{pid}/stat (has the process exited?)"))?;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("reading /proc/{pid}/status"))?;
    // SAFETY: sysconf has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if ticks <= 0 {
        bail!("sysconf(_SC_CLK_TCK) failed");
    }
    let (utime, stime) = parse_stat(&stat)?;
    Ok(ProcSample {
        cpu_seconds: (utime + stime) as f64 / ticks as f64,
        rss_bytes: status_kib(&status, "VmRSS:")? * 1024,
        peak_rss_bytes: status_kib(&status, "VmHWM:")? * 1024,
    })
}

/// utime and stime (fields 14 and 15) of /proc/PID/stat, in clock ticks.
/// The command name (field 2) may hold spaces and parentheses, so the
/// fields are counted from the last ')'.
fn parse_stat(stat: &str) -> anyhow::Result<(u64, u64)> {
    let rest = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest)
        .context("malformed /proc stat")?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // `rest` starts at field 3 (state), so field n is fields[n - 3].
    let field = |n: usize| -> anyhow::Result<u64> {
        fields
            .get(n - 3)
            .context("short /proc stat")?
            .parse()
            .context("bad /proc stat field")
    };
    Ok((field(14)?, field(15)?))
}

fn status_kib(status: &str, key: &str) -> anyhow::Result<u64> {
    let line = status
        .lines()
        .find(|l| l.starts_with(key))
        .with_context(|| format!("no {key} in /proc status"))?;
    line[key.len()..]
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .with_context(|| format!("bad {key} line: {line}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_counted_after_the_command_name() {
        let stat = "42 (a (b) c) S 1 42 42 0 -1 4194560 100 0 0 0 1234 567 0 0 20 0 8 0 99 0 0";
        assert_eq!(parse_stat(stat).unwrap(), (1234, 567));
    }

    #[test]
    fn this_process_can_be_sampled() {
        let s = sample(std::process::id()).unwrap();
        assert!(s.rss_bytes > 0 && s.peak_rss_bytes >= s.rss_bytes);
    }
}
