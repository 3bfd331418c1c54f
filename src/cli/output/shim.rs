//! `shim --status`: how many containers the shim still translates.

use std::io::{self, Write};

/// `shim --status`: how many containers the shim still translates.
pub struct ShimStatus {
    pub live: usize,
    pub translated: usize,
    pub to: String,
    /// The state file, when the shim recorded the running containers for the audit beside it.
    pub audited_by: Option<String>,
}

/// One line for people, and how to audit the upgrade.
pub fn write_shim_status(s: &ShimStatus, out: &mut dyn Write) -> io::Result<()> {
    writeln!(
        out,
        "{} of {} translated containers are still there (target kubelet {}); the shim can be removed when this is 0 or after `kubehash node apply`.",
        s.live, s.translated, s.to
    )?;
    match &s.audited_by {
        Some(state) => writeln!(
            out,
            "After the upgrade: kubehash audit compare --shim-state {state} says which containers it restarted."
        )?,
        None => writeln!(
            out,
            "The shim recorded nothing for the audit (it served before its plan, or a kubelet that may be {} ran when it planned).",
            s.to
        )?,
    }
    out.flush()
}
