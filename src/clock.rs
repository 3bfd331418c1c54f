//! Wall-clock time as the records kubehash writes hold it: whole seconds since the Unix epoch.
//! Shared by every layer (journals, audit snapshots, the shim's state, the agent's metrics), so
//! that none of them reaches into another's module for it.

use std::time::{SystemTime, UNIX_EPOCH};

/// Seconds since the Unix epoch; 0 for a clock set before it.
pub fn now_unix() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}
