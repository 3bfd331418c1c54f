//! The containerd metadata edit: whatever value it is given, `rewrite_hashes` either refuses or
//! writes a value that differs from the old one only in the bytes of the hash annotations'
//! values, holds the new hash, and passes `validate_edit`; it never panics.
#![no_main]

use kubehash::runtime::containerd::{parse_metadata, rewrite_hashes, stored_hashes, validate_edit};
use kubehash::runtime::cri::keys::{HASH, HASH_WITHOUT_RESOURCES};
use libfuzzer_sys::fuzz_target;

const NEW_HASH: &str = "0123abcd";

fuzz_target!(|data: &[u8]| {
    let id = record_id(data);
    let Ok(new) = rewrite_hashes(data, &id, NEW_HASH, Some("fedc9876")) else {
        return;
    };
    validate_edit(data, &new, &id).expect("an edit rewrite_hashes made fails validate_edit");
    let meta = parse_metadata(&new, &id).expect("the new value does not parse");
    assert_eq!(stored_hashes(&meta).0.as_deref(), Some(NEW_HASH));
    // Every byte outside the hash values is kept, in order.
    let strip = |v: &[u8]| -> Vec<u8> {
        let mut v = v.to_vec();
        for key in [HASH, HASH_WITHOUT_RESOURCES] {
            let pattern = format!("\"{key}\":\"");
            if let Some(at) = find(&v, pattern.as_bytes()) {
                let start = at + pattern.len();
                if let Some(len) = v[start..].iter().position(|&b| b == b'"') {
                    v.drain(start..start + len);
                }
            }
        }
        v
    };
    assert_eq!(strip(data), strip(&new));
});

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// The metadata's own `"ID":"…"`, so that the checks get past it; `c1` without one.
fn record_id(data: &[u8]) -> String {
    let key = b"\"ID\":\"";
    let id = find(data, key).and_then(|at| {
        let at = at + key.len();
        let len = data[at..].iter().position(|&b| b == b'"')?;
        String::from_utf8(data[at..at + len].to_vec()).ok()
    });
    id.unwrap_or_else(|| "c1".into())
}
