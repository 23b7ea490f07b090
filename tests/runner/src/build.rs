//! What the suite builds before anything runs: the test binaries (read
//! from cargo's JSON messages) and, when the image's lane is to run, the
//! image.

use crate::plan::TestBinary;
use crate::repo_root;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The lane of the image's run test (tests/image.rs), which runs the image
/// `deploy/image/build` makes.
pub const IMAGE_LANE: &str = "image";

/// `deploy/image/build`, before any lane starts: its static release build
/// of the controller is the suite's longest compile after the tests' own,
/// and on two cores beside the lanes it would slow their timers (the test
/// builds the image again, finding everything built).
pub fn build_image() -> anyhow::Result<()> {
    let status = Command::new(repo_root().join("deploy/image/build"))
        .stdout(Stdio::null())
        .status()?;
    if !status.success() {
        anyhow::bail!("deploy/image/build failed (above)");
    }
    Ok(())
}

/// `cargo test --workspace --locked --no-run`, and the test binaries it
/// built (from its JSON messages; its diagnostics go to stderr as usual).
pub fn build() -> anyhow::Result<Vec<TestBinary>> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let output = Command::new(cargo)
        .args(["test", "--workspace", "--locked", "--no-run"])
        .arg("--message-format=json-render-diagnostics")
        .current_dir(repo_root())
        .stderr(Stdio::inherit())
        .output()?;
    if !output.status.success() {
        anyhow::bail!("building the tests failed (above)");
    }
    let mut binaries = Vec::new();
    for line in String::from_utf8_lossy(&output.stdout).lines() {
        let Ok(message) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        if let Some(binary) = test_binary(&message) {
            binaries.push(binary);
        }
    }
    Ok(binaries)
}

/// A test binary from one of cargo's `compiler-artifact` messages.
fn test_binary(message: &serde_json::Value) -> Option<TestBinary> {
    if message["reason"] != "compiler-artifact" || message["profile"]["test"] != true {
        return None;
    }
    let executable = PathBuf::from(message["executable"].as_str()?);
    let manifest = Path::new(message["manifest_path"].as_str()?);
    let directory = manifest.parent()?.to_path_buf();
    // `path+file:///work/main/loadtest#shardcron-loadtest@0.1.0`, or
    // `...#0.1.0` when the name is the directory's.
    let id = message["package_id"].as_str()?;
    let package = match id.rsplit_once('#')?.1.split_once('@') {
        Some((name, _)) => name.to_owned(),
        None => directory.file_name()?.to_string_lossy().into_owned(),
    };
    Some(TestBinary {
        package,
        target: message["target"]["name"].as_str()?.to_owned(),
        kind: message["target"]["kind"][0].as_str()?.to_owned(),
        executable,
        directory,
    })
}
