//! A journal file of any bytes: `journal::read` accepts it or names the line it refuses, and what
//! it accepts gives its writes and pins (with the upgrade, the journaled specs and the dates
//! rollback uses); it never panics.
#![no_main]

use kubehash::rewrite::journal;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(dir) = tempfile::tempdir() else {
        return;
    };
    let path = dir.path().join("journal.jsonl");
    if std::fs::write(&path, data).is_err() {
        return;
    }
    if let Ok(contents) = journal::read(&path) {
        let _ = contents.writes();
        let _ = contents.pins();
    }
});
