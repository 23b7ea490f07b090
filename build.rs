//! Compiles the admin API (proto/shardcron/admin/v1/admin.proto) with the
//! `protoc` of the protoc-bin-vendored crate, so a fresh machine needs no
//! protoc of its own.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    commit();
    let protoc = protoc_bin_vendored::protoc_bin_path()?;
    // SAFETY: build scripts are single-threaded; prost-build reads PROTOC.
    unsafe { std::env::set_var("PROTOC", protoc) };
    println!("cargo:rerun-if-changed=proto");
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_protos(&["proto/shardcron/admin/v1/admin.proto"], &["proto"])?;
    Ok(())
}

/// `SHARDCRON_COMMIT` for src/release.rs: the variable of that name if set
/// (a build from an archive), else the checkout's HEAD (uncommitted changes
/// are not told: this reruns only when HEAD moves), else `unknown`.
fn commit() {
    println!("cargo:rerun-if-env-changed=SHARDCRON_COMMIT");
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .args(args)
            .output()
            .ok()
            .filter(|out| out.status.success())
            .map(|out| String::from_utf8_lossy(&out.stdout).trim().to_owned())
    };
    for path in ["HEAD", "packed-refs"]
        .into_iter()
        .filter_map(|name| git(&["rev-parse", "--git-path", name]))
        .chain(
            git(&["symbolic-ref", "-q", "HEAD"])
                .and_then(|r| git(&["rev-parse", "--git-path", &r])),
        )
        // A path that does not exist would rerun this on every build.
        .filter(|path| std::path::Path::new(path).exists())
    {
        println!("cargo:rerun-if-changed={path}");
    }
    let commit = std::env::var("SHARDCRON_COMMIT")
        .ok()
        .or_else(|| git(&["rev-parse", "--short=12", "HEAD"]));
    println!(
        "cargo:rustc-env=SHARDCRON_COMMIT={}",
        commit.unwrap_or_else(|| "unknown".to_owned())
    );
}
