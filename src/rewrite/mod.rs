//! Changing a node: rewriting stored hashes that provably match, with a journal first, and
//! verifying or rolling back what was written. Runtimes are reached through
//! [`crate::runtime::record::RecordStore`].

pub mod durable; // files that survive a crash whole
pub mod journal; // the per-upgrade journal: every original before it is replaced
pub mod gate; // what must hold before each write
pub mod pin; // a static pod's UID written into its manifest, proven
pub mod outcome; // typed per-container results
pub mod audit_record; // what an upgrade leaves for its audit
pub mod apply; // rewrite what the plan proved
pub mod verify; // check the records and what CRI reports
pub mod rollback; // restore what the journal proves
pub mod restart; // making the runtime load what was written
