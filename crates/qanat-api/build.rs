//! Compiles the Open Inference Protocol's gRPC service (`proto/inference.proto`) with
//! protox, a protobuf compiler in Rust, so that building needs no `protoc`.
fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
    let descriptors = protox::compile(["inference.proto"], ["proto"])?;
    tonic_prost_build::configure()
        .build_client(false)
        .build_server(true)
        .compile_fds(descriptors)?;
    Ok(())
}
