// `--features system-allocator` (profiling only) leaves the system's malloc.
#[cfg(not(feature = "system-allocator"))]
#[global_allocator]
static ALLOCATOR: shardcron::memory::Allocator = shardcron::memory::ALLOCATOR;

fn main() -> std::process::ExitCode {
    shardcron::cli::main()
}
