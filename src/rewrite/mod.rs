//! Changing a node: rewriting stored hashes that provably match, with a journal first, and
//! verifying or rolling back what was written.

pub mod durable; // files that survive a crash whole
pub mod journal; // the per-upgrade journal: every original before it is replaced
pub mod node; // apply / verify / rollback against the runtime
