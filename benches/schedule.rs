//! Schedule math: parse and next() on a fixed mix of schedules, side by side
//! with robfig/cron v3.0.1 (deploy/local/cronoracle's Go benchmark) on the
//! same mix and instants, in the same run.
//!
//! `cargo bench --bench schedule` prints criterion's figures, then a table
//! with robfig's ns/op and the ratio.

use criterion::{Criterion, criterion_group};
use jiff::tz::TimeZone;
use jiff::{SignedDuration, Timestamp};
use shardcron::schedule::{self, Schedule};
use std::hint::black_box;
use std::path::Path;
use std::process::Command;

/// (zone the schedule is evaluated in, schedule): what CronJobs commonly use.
const MIX: &[(&str, &str)] = &[
    ("UTC", "*/5 * * * *"),
    ("UTC", "0 * * * *"),
    ("America/New_York", "30 2 * * *"),
    ("Europe/Berlin", "0 9 * * 1-5"),
    ("UTC", "15 10,14 1,15 * *"),
    ("UTC", "@daily"),
    ("Asia/Kolkata", "0 0 1 * *"),
    ("America/Sao_Paulo", "*/10 8-18 * * MON-FRI"),
    ("UTC", "@every 1h30m"),
    ("Australia/Lord_Howe", "0 12 * * 0"),
];

fn mix() -> Vec<(Schedule, TimeZone)> {
    MIX.iter()
        .map(|&(zone, spec)| {
            (
                schedule::parse(spec).unwrap(),
                jiff::tz::db().get(zone).unwrap(),
            )
        })
        .collect()
}

/// The instant for iteration `i`, as the Go side computes it.
fn instant(start: Timestamp, i: usize) -> Timestamp {
    start + SignedDuration::from_mins(17 * (i % 9973) as i64)
}

fn bench(c: &mut Criterion) {
    c.bench_function("parse/mix", |b| {
        let mut i = 0;
        b.iter(|| {
            i += 1;
            black_box(schedule::parse(black_box(MIX[i % MIX.len()].1)).ok())
        })
    });
    let scheds = mix();
    let start: Timestamp = "2024-01-01T00:00:00Z".parse().unwrap();
    c.bench_function("next/mix", |b| {
        let mut i = 0;
        b.iter(|| {
            i += 1;
            let (s, z) = &scheds[i % scheds.len()];
            black_box(s.next(instant(start, i), z))
        })
    });
}

criterion_group!(benches, bench);

fn criterion_mean_ns(name: &str) -> Option<f64> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("target/criterion")
        // criterion stores "parse/mix" under "parse_mix".
        .join(name.replace('/', "_"))
        .join("new/estimates.json");
    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(path).ok()?).ok()?;
    json["mean"]["point_estimate"].as_f64()
}

fn robfig_figures() -> Option<(f64, f64)> {
    let build = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/local/build");
    let out = Command::new(build).arg("cronoracle").output().ok()?;
    let bin = String::from_utf8_lossy(&out.stdout)
        .lines()
        .last()?
        .trim()
        .to_owned();
    let input: String = MIX.iter().map(|(z, s)| format!("{z}\t{s}\n")).collect();
    let mut child = Command::new(Path::new(&bin).join("cronoracle"))
        .arg("bench")
        .env("TZ", "UTC")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .ok()?;
    std::io::Write::write_all(&mut child.stdin.take()?, input.as_bytes()).ok()?;
    let out = child.wait_with_output().ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let figure = |key: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(key)?.trim().parse::<f64>().ok())
    };
    Some((figure("parse_ns_per_op")?, figure("next_ns_per_op")?))
}

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
    // Under `cargo test --benches` criterion only smoke-runs each benchmark.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let Some((go_parse, go_next)) = robfig_figures() else {
        eprintln!("robfig comparison skipped: deploy/local/build cronoracle failed");
        return;
    };
    let size = std::mem::size_of::<Schedule>();
    println!(
        "\nschedule mix of {} (same instants on both sides)",
        MIX.len()
    );
    println!("| operation | shardcron ns/op | robfig v3.0.1 ns/op | robfig / shardcron |");
    println!("|---|---|---|---|");
    for (name, go) in [("parse/mix", go_parse), ("next/mix", go_next)] {
        if let Some(ours) = criterion_mean_ns(name) {
            println!("| {name} | {ours:.1} | {go:.1} | {:.2}x |", go / ours);
        }
    }
    println!("parsed schedule size: {size} bytes");
}
