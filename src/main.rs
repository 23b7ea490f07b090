fn main() -> std::process::ExitCode {
    shardcron::cli::main()
}
