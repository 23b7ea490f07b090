//! Test support shared by the integration tests: the binaries built by
//! deploy/local and, for tests that talk to Kubernetes, a real control plane.
#![allow(dead_code)]

pub use shardcron_harness::repo_root;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Builds (or reuses from the cache) a deploy/local component and returns its path.
pub fn local_binary(name: &str) -> PathBuf {
    let bin_dir = last_line_of("deploy/local/build", &[name]);
    let path = Path::new(&bin_dir).join(name);
    assert!(path.is_file(), "{} was not built", path.display());
    path
}

/// The previous release's binary (deploy/local/build-release: built once
/// per machine from this repository's history, then cached).
pub fn previous_release() -> PathBuf {
    PathBuf::from(last_line_of("deploy/local/build-release", &[]))
}

/// The last line a deploy/local script prints: the path it built, or found
/// in the cache.
fn last_line_of(script: &str, args: &[&str]) -> String {
    let path = repo_root().join(script);
    let output = Command::new(&path)
        .args(args)
        .stderr(std::process::Stdio::inherit())
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", path.display()));
    assert!(output.status.success(), "{script} {args:?} failed");
    stdout(&output)
        .lines()
        .last()
        .unwrap_or_default()
        .trim()
        .to_owned()
}

pub mod cluster;
pub mod controller;
pub mod crd;
pub mod cronjobs;
pub mod fleet;
pub mod jobs_seen;
pub mod prometheus;
pub mod proxy;
pub mod rbac;
pub mod scenario;

/// Runs the built `shardcron` binary with `args`.
pub fn shardcron(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_shardcron"))
        .args(args)
        .output()
        .expect("run shardcron")
}

pub fn stdout(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Polls `check` every 200 ms until it returns Some, or panics after `timeout`.
pub async fn eventually<T, F, Fut>(what: &str, timeout: std::time::Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    eventually_explained(what, timeout, || {
        let checked = check();
        async move { checked.await.ok_or_else(String::new) }
    })
    .await
}

/// [`eventually`] whose check says what it still waits for: the panic
/// after `timeout` tells the last answer, so that a failure in CI, whose
/// logs are gone, still says which object was behind and how.
pub async fn eventually_explained<T, F, Fut>(
    what: &str,
    timeout: std::time::Duration,
    mut check: F,
) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, String>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let waiting_for = match check().await {
            Ok(v) => return v,
            Err(waiting_for) => waiting_for,
        };
        let still = if waiting_for.is_empty() {
            String::new()
        } else {
            format!(": still {waiting_for}")
        };
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}{still}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

/// The first Job (in the API's order) whose name starts with `prefix`, if
/// the list succeeds and holds one: a check for [`eventually`].
pub async fn first_job_named(
    jobs: &kube::Api<k8s_openapi::api::batch::v1::Job>,
    prefix: &str,
) -> Option<k8s_openapi::api::batch::v1::Job> {
    jobs.list(&Default::default())
        .await
        .ok()?
        .items
        .into_iter()
        .find(|job| {
            job.metadata
                .name
                .as_deref()
                .is_some_and(|n| n.starts_with(prefix))
        })
}
