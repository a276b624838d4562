//! Generates the Gitaly gRPC client (`storage::gitaly::proto`) from the project's own
//! subset of Gitaly's protos in `proto/`: protox parses them (pure Rust, no `protoc`),
//! tonic-prost-build writes the prost messages and the tonic client into OUT_DIR.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
    let files = protox::compile(["gitaly/repository.proto"], ["proto"])?;
    tonic_prost_build::configure()
        .build_server(false)
        .build_transport(false)
        .compile_fds(files)?;
    Ok(())
}
