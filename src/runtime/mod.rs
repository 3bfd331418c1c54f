//! The container runtime on the node: its CRI API and the records it keeps.

pub mod cri; // CRI v1 client types and helpers
pub mod record; // the RecordStore / RecordFormat seam the write path uses
pub mod containerd; // containerd's records and their CRI metadata extension
