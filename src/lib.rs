//! kubehash: exact kubelet container hashes, and in-place kubelet upgrades that do not restart
//! containers whose spec never changed.
//!
//! The folders are the layers, lowest first; a layer uses only the ones listed before it
//! (`error`, `clock` and `multiply_hash` are shared by all; `tests/code_rules.rs` holds the code
//! to this order). `docs/architecture.md` walks through them.

// Library code answers bad input with a typed error, never a panic: no `unwrap`/`expect`
// outside unit tests (`cargo clippy` enforces it).
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]
// Each `unsafe` block says why it is sound, and only the files docs/architecture.md lists have
// any (`tests/code_rules.rs`).
#![deny(clippy::undocumented_unsafe_blocks, clippy::missing_safety_doc)]

pub mod clock; // seconds since the Unix epoch, as records hold time
pub mod error;
pub mod multiply_hash; // a fast hasher for map keys nobody outside can choose
pub mod kubelet; // the exact kubelet emulation: versions, schemas, decoding, spew, Go JSON, hashes
pub mod source; // reading pods, nodes and manifests: files, streams, the API server
pub mod runtime; // the container runtime: CRI, containerd records behind `RecordStore`
pub mod analysis; // what a kubelet upgrade does to each container: proofs, plans, scans, matrices
pub mod rewrite; // changing a node: apply / verify / rollback, journals, durable files
pub mod shim; // the CRI proxy that shows the new kubelet translated hashes
pub mod agent; // the DaemonSet agent: reconcile step, phases, kubelet health, metrics
pub mod cli; // arguments, output formats, exit status, one file per subcommand
#[cfg(test)]
mod test_corpus; // the golden containers, for unit tests

pub use error::{Error, Result};
