//! Generates the CRI types and service stubs from our `proto/` subset (needs `protoc`, from
//! Debian's protobuf-compiler; set PROTOC to use another one).
fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/cri.proto");
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_protos(&["proto/cri.proto"], &["proto"])?;
    Ok(())
}
