//! `shim --status`: how many containers the shim still translates.

use std::io::{self, Write};

/// `shim --status`: how many containers the shim still translates.
pub struct ShimStatus {
    pub live: usize,
    pub translated: usize,
    pub to: String,
}

/// One line for people.
pub fn write_shim_status(s: &ShimStatus, out: &mut dyn Write) -> io::Result<()> {
    writeln!(
        out,
        "{} of {} translated containers are still there (target kubelet {}); the shim can be removed when this is 0 or after `kubehash node apply`.",
        s.live, s.translated, s.to
    )?;
    out.flush()
}
