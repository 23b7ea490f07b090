// `--features system-allocator` (profiling only) leaves the system's malloc;
// `--features heap-profiling` (profiling only) runs on jemalloc, for its
// sampling heap profiler (src/memory.rs).
#[cfg(not(any(feature = "system-allocator", feature = "heap-profiling")))]
#[global_allocator]
static ALLOCATOR: shardcron::memory::Allocator = shardcron::memory::ALLOCATOR;

#[cfg(all(feature = "heap-profiling", not(feature = "system-allocator")))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> std::process::ExitCode {
    shardcron::release::stamp(option_env!("SHARDCRON_COMMIT"));
    shardcron::memory::no_transparent_huge_pages();
    #[cfg(feature = "heap-profiling")]
    shardcron::memory::start_heap_dumps();
    shardcron::cli::main()
}
