//! Which release this build is: its version (Cargo.toml's, the chart's)
//! and the commit it was built from. `shardcron version` prints it, the
//! metric `shardcron_build_info` exports it, and the replica's Lease states
//! it (`shardcron.io/build`). Beside the layers: it knows nothing of them
//! (the ring protocol versions a build speaks are the shard layer's). The
//! releases and their upgrade notes: CHANGELOG.md.

/// This build's release.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
/// The commit it was built from, once [`stamp`]ed.
static COMMIT: std::sync::OnceLock<&'static str> = std::sync::OnceLock::new();

/// Names the commit this process was built from: the binary's `main`
/// passes what the builds that ship or compare releases set
/// (`SHARDCRON_COMMIT`: deploy/image/build, deploy/local/build-release).
/// Read in `main`, not here nor from git by a build script: a commit that
/// changes no code (its docs) then rebuilds only the binary's small crate,
/// not this library (the image's release build: seconds, not minutes).
/// The first stamp holds.
pub fn stamp(commit: Option<&'static str>) {
    if let Some(commit) = commit {
        let _ = COMMIT.set(commit);
    }
}

/// The commit this process was built from, `unknown` if it was not
/// stamped (a developer's build; the library's own tests).
pub fn commit() -> &'static str {
    COMMIT.get().copied().unwrap_or("unknown")
}

/// The longest build description read from a peer's Lease.
const MAX_BUILD_BYTES: usize = 64;

/// `<version> <commit>`, as written on the Lease.
pub fn build() -> String {
    format!("{VERSION} {}", commit())
}

/// A peer's build description cut to [`MAX_BUILD_BYTES`] (a Lease is
/// written by replicas, but read as it is).
pub fn bounded(build: &str) -> String {
    let mut end = build.len().min(MAX_BUILD_BYTES);
    while !build.is_char_boundary(end) {
        end -= 1;
    }
    build[..end].to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_build_names_the_version_and_commit_and_peers_builds_are_bounded() {
        assert_eq!(build(), format!("{VERSION} {}", commit()));
        assert_eq!(bounded("0.2.0 abc"), "0.2.0 abc");
        let long = "é".repeat(100);
        assert!(bounded(&long).len() <= MAX_BUILD_BYTES);
    }
}
