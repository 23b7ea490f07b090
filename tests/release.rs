//! A release is one version in every place that names it: Cargo.toml, the
//! chart's `version` and `appVersion`, CHANGELOG.md's newest heading, and
//! what `shardcron version` prints (docs/upgrading.md).

mod support;

use std::process::Command;
use support::repo_root;

fn read(path: &str) -> String {
    std::fs::read_to_string(repo_root().join(path))
        .unwrap_or_else(|e| panic!("reading {path}: {e}"))
}

/// The value of the first line of `text` that starts with `key`, unquoted.
fn field<'a>(text: &'a str, key: &str) -> &'a str {
    text.lines()
        .find_map(|line| line.strip_prefix(key))
        .unwrap_or_else(|| panic!("no line starting with {key:?}"))
        .trim()
        .trim_matches('"')
}

#[test]
fn one_version_names_the_release_everywhere() {
    let version = env!("CARGO_PKG_VERSION");
    let chart = read("deploy/helm/shardcron/Chart.yaml");
    assert_eq!(field(&chart, "version:"), version, "the chart's version");
    assert_eq!(
        field(&chart, "appVersion:"),
        version,
        "the chart's appVersion"
    );
    let changelog = read("CHANGELOG.md");
    assert_eq!(
        field(&changelog, "## ").split_whitespace().next(),
        Some(version),
        "CHANGELOG.md's newest release"
    );
    let output = support::shardcron(&["version"]);
    assert!(output.status.success(), "{}", support::stderr(&output));
    let printed = support::stdout(&output);
    assert!(
        printed.starts_with(&format!("shardcron {version}\ncommit: ")),
        "shardcron version printed {printed:?}"
    );
}

#[test]
fn the_previous_release_is_a_commit_of_this_history_with_a_changelog_entry() {
    let previous = read("deploy/local/previous-release");
    let commit = field(&previous, "commit=");
    let version = field(&previous, "version=");
    assert!(
        read("CHANGELOG.md").contains(&format!("## {version} (commit {commit})")),
        "CHANGELOG.md names {version} at {commit}"
    );
    // A shallow clone may lack it; a clone of the repository has it.
    let known = Command::new("git")
        .args(["cat-file", "-e", &format!("{commit}^{{commit}}")])
        .current_dir(repo_root())
        .status()
        .expect("running git");
    assert!(known.success(), "commit {commit} is not in this repository");
}
