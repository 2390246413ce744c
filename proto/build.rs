//! Compiles `xthunk.proto` without `protoc`: protox parses the schema into a descriptor set,
//! prost-build generates the Rust types from it, and the encoded descriptor set is written to
//! `OUT_DIR` for prost-reflect (text format) to load at run time.

use prost::Message;
use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?);
    let out = PathBuf::from(std::env::var("OUT_DIR")?);
    println!("cargo:rerun-if-changed=xthunk.proto");
    println!("cargo:rerun-if-changed=build.rs");

    let fds = protox::compile(["xthunk.proto"], [&dir])?;
    std::fs::write(out.join("xthunk_descriptor.bin"), fds.encode_to_vec())?;
    prost_build::Config::new().compile_fds(fds)?;
    Ok(())
}
