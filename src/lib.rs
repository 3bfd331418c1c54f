//! kubehash: exact kubelet container hashes, and in-place kubelet upgrades that do not restart
//! containers whose spec never changed.
//!
//! The pipeline, one module per step (see `docs/design.md` in the shared notes):
//!
//! ```text
//! version ─ which epoch, which schema          quantity ─ resource.Quantity, exactly
//! schema  ─ per-version Go type graph (data)   sink     ─ FNV-1a 32 and byte sinks
//! decode  ─ JSON → typed value tree            hash     ─ one function per epoch
//! spew    ─ go-spew %#v writer                 input    ─ what `hash` reads
//! gojson  ─ Go encoding/json writer            pods     ─ pod specs and node versions (streamed)
//!                                              scan     ─ upgrade impact per container, and why
//!                                              matrix   ─ restarts for every pair of versions
//!                                              report   ─ table / JSON / JSON Lines
//! ```

pub mod agent;
pub mod batched;
pub mod cluster;
pub mod containerd;
pub mod coverage;
pub mod cri;
pub mod decode;
pub mod durable;
pub mod error;
pub mod gojson;
pub mod hash;
pub mod input;
pub mod journal;
pub mod kubelet_health;
pub mod manifests;
pub mod matrix;
pub mod node;
pub mod plan;
pub mod pods;
pub mod protowire;
pub mod quantity;
pub mod report;
pub mod scan;
pub mod schema;
pub mod shim;
pub mod sink;
pub mod spew;
pub mod version;

pub use error::{Error, Result};
