//! The shim's editor of CRI response bodies, fed any bytes in any pieces: with nothing to show
//! instead it passes every byte on as it came, and editing in place never changes the body's
//! length, whatever the body holds; it never panics.
#![no_main]

use kubehash::shim::wire::{Carrier, Hashes, StreamEditor};
use libfuzzer_sys::fuzz_target;

const CARRIERS: [Carrier; 4] = [
    Carrier::Containers,
    Carrier::Statuses(1),
    Carrier::Statuses(3),
    Carrier::Statuses(5),
];

fuzz_target!(|data: &[u8]| {
    let [pick, c1, c2, c3, body @ ..] = data else {
        return;
    };
    let carrier = CARRIERS[usize::from(pick & 3)];
    let mut cuts: Vec<usize> = [c1, c2, c3]
        .iter()
        .map(|&&c| usize::from(c) * body.len() / 256)
        .collect();
    cuts.sort_unstable();
    let run = |mut ed: StreamEditor, show: Option<&'static [u8]>| {
        let mut decide = |_: &[u8], _: Hashes<'_>| Hashes {
            hash: show,
            hash_without_resources: show,
        };
        let mut out = Vec::new();
        let mut from = 0;
        for &cut in &cuts {
            out.extend(ed.push(&body[from..cut], &mut decide));
            from = cut;
        }
        out.extend(ed.push(&body[from..], &mut decide));
        out.extend(ed.finish());
        out
    };
    // Nothing to show instead: every byte as it came, in place or held.
    assert_eq!(run(StreamEditor::new(carrier), None), body);
    assert_eq!(run(StreamEditor::holding(carrier), None), body);
    // In place, whatever is shown instead: no length changes.
    let edited = run(StreamEditor::new(carrier), Some(b"0123abcd"));
    assert_eq!(edited.len(), body.len());
    let _ = run(StreamEditor::holding(carrier), Some(b"0123abcd"));
});
