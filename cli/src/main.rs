fn main() -> std::process::ExitCode {
    caduceus::main()
}
