#[global_allocator]
static ALLOCATOR: shardcron::memory::Allocator = shardcron::memory::ALLOCATOR;

fn main() -> std::process::ExitCode {
    shardcron::cli::main()
}
