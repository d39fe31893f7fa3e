//! Compiles the versioned `.proto` packages with `protox` (a pure-Rust protobuf
//! compiler), so no system `protoc` is needed, then feeds tonic's codegen.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let fds = protox::compile(["flotilla/v1/coordinator.proto"], ["."])?;
    println!("cargo:rerun-if-changed=flotilla");
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        .compile_fds(fds)?;
    Ok(())
}
