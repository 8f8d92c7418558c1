fn main() -> std::process::ExitCode {
    flipside_backend::cli::main()
}
