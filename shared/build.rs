//! Generates the Gitaly gRPC client (`storage::gitaly::proto`) from the project's own
//! subset of Gitaly's protos in `proto/`: protox parses them (pure Rust, no `protoc`),
//! tonic-prost-build writes the prost messages and the tonic client into OUT_DIR. And
//! the modules each function can run code of (`build/uses.rs`), for the cold-start
//! schema check.

#[path = "build/uses.rs"]
mod uses;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
    println!("cargo:rerun-if-changed=src");
    println!("cargo:rerun-if-changed=build/uses.rs");
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR")?);
    uses::generate(std::path::Path::new("src"), &out);
    let files = protox::compile(["gitaly/repository.proto"], ["proto"])?;
    tonic_prost_build::configure()
        .build_server(false)
        .build_transport(false)
        .compile_fds(files)?;
    Ok(())
}
