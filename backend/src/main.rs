fn main() -> std::process::ExitCode {
    flipside_backend::allocator::keep_freed_memory();
    flipside_backend::cli::main()
}
