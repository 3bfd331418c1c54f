//! Generates the CRI types and service stubs from our `proto/` subset (needs `protoc`, from
//! Debian's protobuf-compiler; set PROTOC to use another one), and the list of kubelet versions
//! from the `schema/1.N.json` files, so that adding a kubelet minor is adding its schema file.
use std::fmt::Write as _;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/cri.proto");
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_protos(&["proto/cri.proto"], &["proto"])?;
    schemas()
}

/// `$OUT_DIR/schemas.rs`: `MIN_MINOR`, `MAX_MINOR` and `SCHEMA_FILES`, one entry per
/// `schema/1.N.json`; the minors must be contiguous.
fn schemas() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=schema");
    let dir = std::path::Path::new(&std::env::var("CARGO_MANIFEST_DIR")?).join("schema");
    let mut minors: Vec<u8> = Vec::new();
    for entry in std::fs::read_dir(&dir)? {
        let name = entry?.file_name().to_string_lossy().into_owned();
        if let Some(m) = name
            .strip_prefix("1.")
            .and_then(|r| r.strip_suffix(".json"))
        {
            minors.push(m.parse().map_err(|e| format!("schema/{name}: {e}"))?);
        }
    }
    minors.sort_unstable();
    let (Some(&min), Some(&max)) = (minors.first(), minors.last()) else {
        return Err("no schema/1.N.json files".into());
    };
    if minors.len() != usize::from(max - min + 1) {
        return Err(format!("schema/: minors {minors:?} are not contiguous").into());
    }
    let mut out = String::new();
    writeln!(
        out,
        "/// Oldest kubelet minor version kubehash knows (inclusive)."
    )?;
    writeln!(out, "pub const MIN_MINOR: u8 = {min};")?;
    writeln!(
        out,
        "/// Newest kubelet minor version kubehash knows (inclusive)."
    )?;
    writeln!(out, "pub const MAX_MINOR: u8 = {max};")?;
    writeln!(
        out,
        "/// The schema files, indexed by minor version - MIN_MINOR."
    )?;
    writeln!(out, "pub(crate) const SCHEMA_FILES: &[(u8, &str)] = &[")?;
    for m in &minors {
        let path = dir.join(format!("1.{m}.json"));
        writeln!(
            out,
            "    ({m}, include_str!({:?})),",
            path.display().to_string()
        )?;
    }
    writeln!(out, "];")?;
    std::fs::write(
        std::path::Path::new(&std::env::var("OUT_DIR")?).join("schemas.rs"),
        out,
    )?;
    Ok(())
}
