//! The `caduceus` program, built inside this test crate so that the
//! integration tests can spawn it (`CARGO_BIN_EXE_caduceus-under-test`).

fn main() -> std::process::ExitCode {
    caduceus::main()
}
