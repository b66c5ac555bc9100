//! Compiles the vendored Modal protos with protox (pure Rust), so a fresh
//! machine needs no `protoc`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=modal_proto");
    let descriptors = protox::compile(
        [
            "modal_proto/api.proto",
            "modal_proto/task_command_router.proto",
        ],
        ["."],
    )?;
    tonic_prost_build::configure().compile_fds(descriptors)?;
    Ok(())
}
