//! `shardcron next`, end to end through the built binary.

mod support;

use std::process::Output;
use support::{stderr, stdout};

fn next(args: &[&str]) -> Output {
    support::shardcron(&[&["next"], args].concat())
}

#[test]
fn prints_five_times_in_utc_by_default() {
    let o = next(&["*/15 * * * *", "--after", "2024-01-01T10:07:00Z"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        stdout(&o),
        "2024-01-01T10:15:00Z\n2024-01-01T10:30:00Z\n2024-01-01T10:45:00Z\n2024-01-01T11:00:00Z\n2024-01-01T11:15:00Z\n"
    );
}

#[test]
fn fall_back_once_prints_the_repeated_wall_time_once() {
    let args = [
        "30 1 * * *",
        "--time-zone",
        "America/New_York",
        "--after",
        "2024-11-02T12:00:00Z",
        "--count",
        "2",
    ];
    let once = next(&[&args[..], &["--fall-back", "once"]].concat());
    assert!(once.status.success(), "{}", stderr(&once));
    assert_eq!(
        stdout(&once),
        "2024-11-03T01:30:00-04:00\n2024-11-04T01:30:00-05:00\n"
    );
    let bad = next(&[&args[..], &["--fall-back", "never"]].concat());
    assert_eq!(bad.status.code(), Some(2));
    assert!(
        stderr(&bad).contains("possible values: twice, once"),
        "{}",
        stderr(&bad)
    );
}

#[test]
fn spread_prints_the_delayed_starts_of_one_cronjob() {
    // snazzycats/mycronjob's offset in 10 minutes: 517 s (docs/options.md).
    let args = [
        "0 * * * *",
        "--after",
        "2024-01-01T10:00:00Z",
        "--count",
        "2",
    ];
    let spread = ["--spread", "10m", "--cronjob", "snazzycats/mycronjob"];
    let o = next(&[&args[..], &spread[..]].concat());
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o), "2024-01-01T10:08:37Z\n2024-01-01T11:08:37Z\n");
    let without_identity = next(&[&args[..], &["--spread", "10m"]].concat());
    assert_eq!(without_identity.status.code(), Some(2));
    let bad = next(&[&args[..], &["--spread", "2d", "--cronjob", "a/b"]].concat());
    assert_eq!(bad.status.code(), Some(2));
    assert!(stderr(&bad).contains("--spread \"2d\""), "{}", stderr(&bad));
    // At the ends of time: a clear error or a shorter list, never a panic.
    let earliest = ["0 * * * *", "--after=-009999-01-02T01:59:59Z"];
    let early = next(&[&earliest[..], &spread[..]].concat());
    assert_eq!(early.status.code(), Some(2), "{}", stderr(&early));
    assert!(stderr(&early).contains("--after"), "{}", stderr(&early));
    let latest = ["0 * * * *", "--after", "9999-12-30T20:30:00Z"];
    let late = next(&[&latest[..], &spread[..]].concat());
    assert!(late.status.success(), "{}", stderr(&late));
}

#[test]
fn time_zone_offsets_and_dst_overlap() {
    let o = next(&[
        "30 1 * * *",
        "--time-zone",
        "America/New_York",
        "--after",
        "2024-11-02T12:00:00Z",
        "--count",
        "3",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        stdout(&o),
        "2024-11-03T01:30:00-04:00\n2024-11-03T01:30:00-05:00\n2024-11-04T01:30:00-05:00\n"
    );
}

#[test]
fn tz_prefix_wins_over_the_flag() {
    let o = next(&[
        "TZ=Asia/Kolkata 0 9 * * *",
        "--time-zone",
        "Europe/Berlin",
        "--after",
        "2024-01-01T00:00:00Z",
        "--count",
        "1",
    ]);
    assert_eq!(stdout(&o), "2024-01-01T09:00:00+05:30\n");
}

#[test]
fn json_output() {
    let o = next(&[
        "@every 90m",
        "--after",
        "2024-01-01T00:00:30.5Z",
        "--count",
        "2",
        "--output",
        "json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(
        v,
        serde_json::json!(["2024-01-01T01:30:30Z", "2024-01-01T03:00:30Z"])
    );
}

#[test]
fn never_firing_prints_nothing_and_succeeds() {
    let o = next(&["0 0 30 2 *"]);
    assert!(o.status.success());
    assert_eq!(stdout(&o), "");
    let o = next(&["0 0 30 2 *", "--output", "json"]);
    assert_eq!(stdout(&o).trim(), "[]");
}

#[test]
fn bad_input_exits_2_with_one_line() {
    for (args, needle) in [
        (&["0 0 * * 7"][..], "day-of-week: 7 is above the maximum 6"),
        (&["TZ=UTC"][..], "TZ must be followed by a space"),
        (
            &["* * * * *", "--time-zone", "Mars/Olympus"][..],
            "unknown time zone \"Mars/Olympus\"",
        ),
        (
            &["* * * * *", "--time-zone", "america/new_york"][..],
            "unknown time zone",
        ),
    ] {
        let o = next(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        assert!(stdout(&o).is_empty());
        let err = stderr(&o);
        assert!(err.contains(needle), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{err}");
    }
}

/// Installed as `kubectl-shardcron` on the PATH, the binary is a kubectl
/// plugin (krew's naming): `kubectl shardcron next ...`, `kubectl
/// shardcron status ...` run the same commands.
#[test]
fn installed_as_kubectl_shardcron_it_is_a_kubectl_plugin() {
    let kubectl = support::local_binary("kubectl");
    let dir = tempfile::tempdir().expect("a temporary directory");
    std::os::unix::fs::symlink(
        env!("CARGO_BIN_EXE_shardcron"),
        dir.path().join("kubectl-shardcron"),
    )
    .expect("link the plugin");
    let o = std::process::Command::new(kubectl)
        .args([
            "shardcron",
            "next",
            "*/15 * * * *",
            "--after",
            "2024-01-01T10:07:00Z",
            "--count",
            "1",
        ])
        .env("PATH", dir.path())
        .output()
        .expect("run kubectl");
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o), "2024-01-01T10:15:00Z\n");
}
