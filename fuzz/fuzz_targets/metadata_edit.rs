//! The containerd metadata edit: whatever value it is given, `rewrite_hashes` either refuses or
//! writes a value that differs from the old one only in the bytes of the hash annotations'
//! values, holds the new hash, and passes `validate_edit`; it never panics.
#![no_main]

use kubehash::runtime::containerd::{parse_metadata, rewrite_hashes, stored_hashes, validate_edit};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // The record id is the metadata's own where it has one, so that the checks get past it.
    let id = kubehash_id(data);
    let Ok(new) = rewrite_hashes(data, &id, "0123abcd", Some("fedc9876")) else {
        return;
    };
    validate_edit(data, &new, &id).expect("an edit rewrite_hashes made fails validate_edit");
    let meta = parse_metadata(&new, &id).expect("the new value does not parse");
    assert_eq!(stored_hashes(&meta).0.as_deref(), Some("0123abcd"));
    // Every byte outside the hash values is kept, in order.
    let strip = |v: &[u8]| -> Vec<u8> {
        let mut v = v.to_vec();
        for key in [
            "\"io.kubernetes.container.hash\":\"",
            "\"io.kubernetes.container.hashWithoutResources\":\"",
        ] {
            if let Some(at) = find(&v, key.as_bytes()) {
                let start = at + key.len();
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

fn kubehash_id(data: &[u8]) -> String {
    serde_json_id(data).unwrap_or_else(|| "c1".into())
}

fn serde_json_id(data: &[u8]) -> Option<String> {
    let key = b"\"ID\":\"";
    let at = find(data, key)? + key.len();
    let len = data[at..].iter().position(|&b| b == b'"')?;
    String::from_utf8(data[at..at + len].to_vec()).ok()
}
