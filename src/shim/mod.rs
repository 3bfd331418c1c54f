//! The CRI proxy that shows the new kubelet the hashes it would compute, for containers whose
//! spec provably did not change.

pub mod batched; // socket writes batched per task turn
pub mod wire; // protobuf wire editing of CRI messages
pub mod decisions; // what to show per container id, laid out for the answer path
pub mod proxy; // the proxy: connections, calls, translation state
