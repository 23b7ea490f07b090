//! `shardcron explain`, end to end through the built binary, on the YAML and
//! JSON files under tests/data/explain/.

use serde_json::{Value, json};
use std::path::PathBuf;
mod support;

use std::process::Output;
use support::{stderr, stdout};

fn data(name: &str) -> String {
    let path: PathBuf = [env!("CARGO_MANIFEST_DIR"), "tests", "data", "explain", name]
        .iter()
        .collect();
    path.display().to_string()
}

fn explain(args: &[&str]) -> Output {
    support::shardcron(&[&["explain"], args].concat())
}

fn json_of(args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.extend(["--output", "json"]);
    let o = explain(&all);
    assert!(o.status.success(), "{}", stderr(&o));
    serde_json::from_str(&stdout(&o)).expect("JSON output")
}

const AT_0930: &str = "2024-03-01T09:30:10Z";

#[test]
fn the_opt_ins_are_shown_and_the_catch_up_starts_the_oldest_missed_slot() {
    let args = [
        "--cronjob",
        &data("cronjob-catch-up.yaml"),
        "--now",
        AT_0930,
    ];
    let out = json_of(&args);
    assert_eq!(
        out["options"],
        json!({"fallBack": "once", "catchUpWindowSeconds": 3600, "spreadSeconds": 0, "spreadOffsetSeconds": 0, "runNow": null, "pauseAfterFailures": null, "failedJobs": null, "pausedAt": null})
    );
    // 09:10, 09:20 and 09:30 were missed: the oldest first, and at once the next.
    assert_eq!(out["create"][0]["scheduledTime"], "2024-03-01T09:10:00Z");
    assert_eq!(out["nextWakeup"], "2024-03-01T09:20:00Z");
    let text = explain(&args);
    assert!(text.status.success(), "{}", stderr(&text));
    let text = stdout(&text);
    assert!(
        text.contains("shardcron.io/catch-up-window: 3600s")
            && text.contains("shardcron.io/fall-back: once"),
        "{text}"
    );
}

#[test]
fn the_second_failure_in_a_row_pauses_and_nothing_starts() {
    let args = [
        "--cronjob",
        &data("cronjob-pause.yaml"),
        "--jobs",
        &data("jobs-failed.yaml"),
        "--now",
        AT_0930,
    ];
    let out = json_of(&args);
    assert_eq!(out["options"]["pauseAfterFailures"], 2);
    assert_eq!(
        out["options"]["failedJobs"],
        json!([{"name": "report-28488070", "failedAt": "2024-03-01T09:11:40Z"}])
    );
    assert_eq!(out["create"], json!([]));
    let text = explain(&args);
    assert!(text.status.success(), "{}", stderr(&text));
    let text = stdout(&text);
    assert!(
        text.contains("shardcron.io/pause-after-failures: 2 (failed Jobs in a row so far: 1")
            && text.contains(
                "not started: 2 consecutive failed Jobs (report-28488070, report-28488080)"
            ),
        "{text}"
    );
}

#[test]
fn forbid_with_a_running_job_explains_why_nothing_starts() {
    let o = explain(&[
        "--cronjob",
        &data("cronjob-forbid.yaml"),
        "--jobs",
        &data("jobs-running.yaml"),
        "--now",
        AT_0930,
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    assert!(
        text.contains(
            "not started (slot 2024-03-01T09:30:00Z): concurrencyPolicy Forbid and job report-28488060 is still running"
        ),
        "{text}"
    );
    assert!(
        text.contains("ignored, not controlled by this CronJob: unrelated"),
        "{text}"
    );
    assert!(
        text.contains("next wake-up: 2024-03-01T10:00:00Z"),
        "{text}"
    );

    let out = json_of(&[
        "--cronjob",
        &data("cronjob-forbid.yaml"),
        "--jobs",
        &data("jobs-running.yaml"),
        "--now",
        AT_0930,
    ]);
    assert_eq!(
        out,
        json!({
            "create": [],
            "delete": [],
            "events": [{
                "type": "Normal",
                "reason": "JobAlreadyActive",
                "message": "Not starting job because prior execution is running and concurrency policy is Forbid",
            }],
            "status": {
                "active": ["report-28488060"],
                "lastScheduleTime": "2024-03-01T09:00:00Z",
                "lastSuccessfulTime": null,
            },
            "statusChanged": false,
            "nextWakeup": "2024-03-01T10:00:00Z",
            "options": {"fallBack": "twice", "catchUpWindowSeconds": null, "spreadSeconds": 0, "spreadOffsetSeconds": 0, "runNow": null, "pauseAfterFailures": null, "failedJobs": null, "pausedAt": null},
        })
    );
}

#[test]
fn finished_jobs_history_and_a_new_job_from_yaml_documents() {
    let out = json_of(&[
        "--cronjob",
        &data("cronjob-forbid.yaml"),
        "--jobs",
        &data("jobs-history.yaml"),
        "--now",
        AT_0930,
    ]);
    assert_eq!(
        out,
        json!({
            "create": [{
                "name": "report-28488090",
                "scheduledTime": "2024-03-01T09:30:00Z",
                "labels": {"app": "report"},
                // Rendered in spec.timeZone (Europe/Rome).
                "annotations": {
                    "team": "a",
                    "batch.kubernetes.io/cronjob-scheduled-timestamp": "2024-03-01T10:30:00+01:00",
                },
            }],
            "delete": [{"name": "report-28487970", "why": "failedJobsHistoryLimit 1 exceeded"}],
            "events": [
                {"type": "Normal", "reason": "SuccessfulDelete", "message": "Deleted job report-28487970"},
                {"type": "Normal", "reason": "SawCompletedJob", "message": "Saw completed job: report-28488060, condition: Complete"},
                {"type": "Normal", "reason": "SuccessfulCreate", "message": "Created job report-28488090"},
            ],
            "status": {
                "active": ["report-28488090"],
                "lastScheduleTime": "2024-03-01T09:30:00Z",
                "lastSuccessfulTime": "2024-03-01T09:05:00Z",
            },
            "statusChanged": true,
            "nextWakeup": "2024-03-01T10:00:00Z",
            "options": {"fallBack": "twice", "catchUpWindowSeconds": null, "spreadSeconds": 0, "spreadOffsetSeconds": 0, "runNow": null, "pauseAfterFailures": null, "failedJobs": null, "pausedAt": null},
        })
    );
}

#[test]
fn replace_from_json_files() {
    let out = json_of(&[
        "--cronjob",
        &data("cronjob-replace.json"),
        "--jobs",
        &data("jobs-running.json"),
        "--now",
        AT_0930,
    ]);
    assert_eq!(
        out["delete"],
        json!([{"name": "report-28488060", "why": "concurrencyPolicy Replace"}])
    );
    assert_eq!(out["create"][0]["name"], "report-28488090");
    assert_eq!(
        out["create"][0]["annotations"]["batch.kubernetes.io/cronjob-scheduled-timestamp"],
        "2024-03-01T09:30:00Z"
    );
    let reasons: Vec<&str> = out["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["reason"].as_str().unwrap())
        .collect();
    assert_eq!(reasons, ["SuccessfulDelete", "SuccessfulCreate"]);
    assert_eq!(out["status"]["active"], json!(["report-28488090"]));
}

#[test]
fn an_active_job_missing_from_jobs_is_treated_as_gone() {
    let args = [
        "--cronjob",
        &data("cronjob-forbid.yaml"),
        "--now",
        "2024-03-01T09:10:00Z",
    ];
    let o = explain(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    assert!(
        text.contains("report-28488060 is not in --jobs: treated as gone"),
        "{text}"
    );
    assert!(
        text.contains("Normal MissingJob: Active job went missing: report-28488060"),
        "{text}"
    );
    let out = json_of(&args);
    assert_eq!(out["events"][0]["reason"], "MissingJob");
    assert_eq!(out["status"]["active"], json!([]));
    assert_eq!(out["statusChanged"], true);
    assert_eq!(out["create"], json!([]));
    assert_eq!(out["nextWakeup"], "2024-03-01T09:30:00Z");
}

#[test]
fn suspended_and_unparseable_cronjobs() {
    let dir = tempfile::tempdir().unwrap();
    let original = std::fs::read_to_string(data("cronjob-forbid.yaml")).unwrap();

    let suspended = dir.path().join("suspended.yaml");
    std::fs::write(
        &suspended,
        original.replace("suspend: false", "suspend: true"),
    )
    .unwrap();
    let suspended = suspended.display().to_string();
    let out = json_of(&[
        "--cronjob",
        &suspended,
        "--jobs",
        &data("jobs-history.yaml"),
        "--now",
        AT_0930,
    ]);
    assert_eq!(out["create"], json!([]));
    // History is still cleaned while suspended.
    assert_eq!(out["delete"][0]["name"], "report-28487970");
    assert_eq!(out["nextWakeup"], Value::Null);
    let o = explain(&["--cronjob", &suspended, "--now", AT_0930]);
    assert!(
        stdout(&o).contains("not started: spec.suspend is true"),
        "{}",
        stdout(&o)
    );

    let bad = dir.path().join("bad.yaml");
    std::fs::write(&bad, original.replace("\"*/30 * * * *\"", "\"*/30 * * *\"")).unwrap();
    let out = json_of(&[
        "--cronjob",
        &bad.display().to_string(),
        "--jobs",
        &data("jobs-running.yaml"),
        "--now",
        AT_0930,
    ]);
    assert_eq!(
        out["events"],
        json!([{
            "type": "Warning",
            "reason": "UnparseableSchedule",
            "message": "unparseable schedule: \"*/30 * * *\" : expected exactly 5 fields, found 4: [*/30 * * *]",
        }])
    );
}

#[test]
fn without_now_it_uses_the_clock() {
    let out = json_of(&[
        "--cronjob",
        &data("cronjob-forbid.yaml"),
        "--jobs",
        &data("jobs-running.yaml"),
    ]);
    let keys: Vec<&String> = out.as_object().unwrap().keys().collect();
    assert_eq!(
        keys,
        [
            "create",
            "delete",
            "events",
            "nextWakeup",
            "options",
            "status",
            "statusChanged"
        ]
    );
    let status: Vec<&String> = out["status"].as_object().unwrap().keys().collect();
    assert_eq!(status, ["active", "lastScheduleTime", "lastSuccessfulTime"]);
}

/// Bad input: exit status 2 and one line on stderr naming the file and the field.
fn fails_with(args: &[&str], want: &[&str]) {
    let o = explain(args);
    assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
    let err = stderr(&o);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("shardcron: "), "{err}");
    for part in want {
        assert!(err.contains(part), "{err:?} lacks {part:?}");
    }
    assert!(stdout(&o).is_empty());
}

#[test]
fn bad_files_name_the_file_and_the_field() {
    let forbid = data("cronjob-forbid.yaml");
    fails_with(
        &["--cronjob", &data("cronjob-bad-schedule-type.yaml")],
        &["cronjob-bad-schedule-type.yaml: spec.schedule: invalid type: sequence"],
    );
    fails_with(
        &["--cronjob", &data("cronjob-no-creation.yaml")],
        &["cronjob-no-creation.yaml: metadata.creationTimestamp is missing"],
    );
    fails_with(
        &["--cronjob", &data("cronjob-wrong-kind.yaml")],
        &["cronjob-wrong-kind.yaml: kind: expected \"CronJob\", found \"Job\""],
    );
    fails_with(
        &["--cronjob", &data("cronjob-not-yaml.yaml")],
        &["cronjob-not-yaml.yaml: ", "line 4"],
    );
    fails_with(
        &["--cronjob", &data("does-not-exist.yaml")],
        &["does-not-exist.yaml: No such file"],
    );
    fails_with(
        &[
            "--cronjob",
            &forbid,
            "--jobs",
            &data("jobs-bad-start-time.yaml"),
        ],
        &["jobs-bad-start-time.yaml: items[0].status.startTime: "],
    );
    fails_with(
        &["--cronjob", &forbid, "--jobs", &data("cronjob-forbid.yaml")],
        &["cronjob-forbid.yaml: kind: expected \"Job\", found \"CronJob\""],
    );
    // A bad argument is clap's usage error (exit status 2 as well).
    let o = explain(&["--cronjob", &forbid, "--now", "yesterday"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("--now"), "{}", stderr(&o));
}

#[test]
fn a_list_of_one_cronjob_is_accepted() {
    let dir = tempfile::tempdir().unwrap();
    let original = std::fs::read_to_string(data("cronjob-forbid.yaml")).unwrap();
    let indented: String = original
        .lines()
        .filter(|l| !l.starts_with('#'))
        .enumerate()
        .map(|(i, l)| {
            if i == 0 {
                format!("- {l}\n")
            } else {
                format!("  {l}\n")
            }
        })
        .collect();
    let list = dir.path().join("list.yaml");
    std::fs::write(
        &list,
        format!("apiVersion: v1\nkind: List\nitems:\n{indented}"),
    )
    .unwrap();
    let out = json_of(&[
        "--cronjob",
        &list.display().to_string(),
        "--jobs",
        &data("jobs-running.yaml"),
        "--now",
        AT_0930,
    ]);
    assert_eq!(out["events"][0]["reason"], "JobAlreadyActive");

    let two = dir.path().join("two.yaml");
    std::fs::write(
        &two,
        format!("apiVersion: v1\nkind: List\nitems:\n{indented}{indented}"),
    )
    .unwrap();
    fails_with(
        &["--cronjob", &two.display().to_string()],
        &["expected one CronJob, found a list of 2"],
    );
}

/// A `shardcron.io/v1` CronJob (the CRD with batch/v1's spec and status) is
/// explained as its batch/v1 twin is, single or in a List.
#[test]
fn a_shardcron_io_cronjob_is_explained_as_its_batch_v1_twin() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let batch = std::fs::read_to_string(data("cronjob-forbid.yaml")).expect("the fixture");
    assert!(batch.contains("apiVersion: batch/v1"), "{batch}");
    let ours = batch.replace("apiVersion: batch/v1", "apiVersion: shardcron.io/v1");
    let single = dir.path().join("shardcron.yaml");
    std::fs::write(&single, &ours).expect("write the CronJob");
    let indented: String = ours.lines().map(|l| format!("  {l}\n")).collect();
    let listed = dir.path().join("shardcron-list.yaml");
    let list = format!(
        "apiVersion: v1\nkind: List\nitems:\n- {}",
        indented.trim_start()
    );
    std::fs::write(&listed, list).expect("write the List");
    let args = |cronjob: &str| {
        json_of(&[
            "--cronjob",
            cronjob,
            "--jobs",
            &data("jobs-running.yaml"),
            "--now",
            AT_0930,
        ])
    };
    let expected = args(&data("cronjob-forbid.yaml"));
    assert_eq!(args(&single.to_string_lossy()), expected);
    assert_eq!(args(&listed.to_string_lossy()), expected);

    let other = batch.replace("apiVersion: batch/v1", "apiVersion: example.com/v1");
    let wrong = dir.path().join("other.yaml");
    std::fs::write(&wrong, other).expect("write the CronJob");
    fails_with(
        &["--cronjob", &wrong.to_string_lossy()],
        &["apiVersion: expected \"batch/v1\" or \"shardcron.io/v1\", found \"example.com/v1\""],
    );
}
