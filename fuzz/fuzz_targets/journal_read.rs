//! A journal file of any bytes: `journal::read` accepts it or names the line it refuses, and what
//! it accepts gives its writes and pins (with the upgrade, the journaled specs and the dates
//! rollback uses), the last attempt's among them; it never panics. Continued for appending, what
//! it accepted reads again with the same records and no torn tail.
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
        let (writes, pins) = (contents.writes(), contents.pins());
        // This attempt's are some of them, each as a whole.
        let (now, pinned) = (contents.attempt_writes(), contents.attempt_pins());
        assert!(now.iter().all(|w| writes.contains(w)));
        assert!(pinned.iter().all(|p| pins.contains(p)));
        let _ = contents.rolled_back();
        assert_eq!(contents.len, data.len() as u64);
        // Continued (as rollback does) it is this process's, and sets any torn tail aside.
        if let Ok((journal, _)) = journal::Journal::continue_from(&path, &contents) {
            drop(journal);
            let again = journal::read(&path).expect("a continued journal reads again");
            assert!(again.torn.is_none());
            assert_eq!(again.records.len(), contents.records.len());
        }
    }
});
