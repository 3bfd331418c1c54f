//! The container runtime on the node: its CRI API and the records it keeps.

pub mod containerd;
pub mod cri; // CRI v1 client types and helpers // containerd's container records and their CRI metadata extension
