//! The one reader against the framed path: `hash` on this thread (the one reader parses every
//! object into a serde_json `Value`) and on a worker (objects framed, parsed as a `Doc`, and for
//! name+image versions read by the name+image check without parsing) must print the same
//! results, errors included, for any input. The first byte picks the versions.
#![no_main]

use kubehash::analysis::hashing::for_each_hashed;
use kubehash::kubelet::version::parse_version_set;
use kubehash::source::parallel::Input;
use libfuzzer_sys::fuzz_target;

const SETS: [&str; 8] = [
    "1.31",
    "1.37",
    "1.31..1.37",
    "1.15",
    "1.30",
    "1.8",
    "1.20,1.31",
    "1.8..1.37",
];

fuzz_target!(|data: &[u8]| {
    let Some((&pick, bytes)) = data.split_first() else {
        return;
    };
    let Ok(versions) = parse_version_set(SETS[usize::from(pick) % SETS.len()]) else {
        return;
    };
    let input = Input::Bytes {
        name: "fuzz",
        bytes,
    };
    let run = |workers| {
        let mut out = Vec::new();
        let err = for_each_hashed(&input, &versions, workers, |h| out.push(h))
            .err()
            .map(|e| e.to_string());
        (out, err)
    };
    let one_reader = run(0);
    let framed = run(1);
    assert_eq!(one_reader, framed, "{}", String::from_utf8_lossy(bytes));
});
