//! Compiles the admin API (proto/shardcron/admin/v1/admin.proto) with the
//! `protoc` of the protoc-bin-vendored crate, so a fresh machine needs no
//! protoc of its own.

fn main() -> Result<(), Box<dyn std::error::Error>> {
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
