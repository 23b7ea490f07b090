//! CI's load check: S1 in its CI mode (600 CronJobs of the steady mix, four
//! minutes of slots) against three shardcron replicas on a fresh local
//! control plane. No timing assertions: every slot must get exactly one
//! Job (`--assert-complete`), and the report must say so.

use std::path::Path;
use std::process::Command;

#[test]
fn s1_ci_mode_has_no_missed_and_no_duplicate_slot() {
    let loadtest = Path::new(env!("CARGO_BIN_EXE_shardcron-loadtest"));
    // `cargo test --workspace` builds the controller beside this binary.
    let shardcron = loadtest.with_file_name("shardcron");
    assert!(
        shardcron.is_file(),
        "{} is missing: run the workspace's tests (cargo test --workspace), which build it",
        shardcron.display()
    );
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("s1-ci");
    let _ = std::fs::remove_dir_all(&out);
    let status = Command::new(loadtest)
        .args([
            "compare",
            "--scenario",
            "s1",
            "--mode",
            "ci",
            "--controllers",
            "shardcron-3",
            "--assert-complete",
        ])
        .arg("--out")
        .arg(&out)
        .arg("--shardcron-bin")
        .arg(&shardcron)
        .status()
        .expect("running shardcron-loadtest");
    assert!(
        status.success(),
        "shardcron-loadtest compare failed ({status}); see {}",
        out.display()
    );

    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("report.json")).expect("report.json"))
            .expect("JSON");
    let run = &report["runs"][0];
    let slots = &run["observation"]["slots"];
    eprintln!(
        "{}",
        std::fs::read_to_string(out.join("report.md")).unwrap_or_default()
    );
    assert_eq!(run["variant"], "shardcron-3");
    assert!(
        slots["expected"].as_u64().unwrap_or(0) >= 30,
        "too few slots to mean anything: {slots}"
    );
    assert_eq!(slots["missed"], 0);
    assert_eq!(slots["duplicates"], 0);
    assert_eq!(slots["off_schedule"], 0);
    // All three replicas created Jobs: the ring spread the CronJobs.
    let created_by = run["observation"]["created_by"]
        .as_object()
        .expect("created_by");
    assert_eq!(created_by.len(), 3, "Jobs by replica: {created_by:?}");
}
