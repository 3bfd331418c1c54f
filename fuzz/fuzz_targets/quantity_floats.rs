//! Any bytes as the number in a quantity's place (a `limits` value, and a `divisor` in a List's
//! item): the two JSON readers (`value_from_slice` after Go's byte rules, the stream reader)
//! take or refuse the text alike, as the same values, and a float either takes is written exactly as Go writes its value,
//! which is what the decoder reads back (`kubelet::gofloat`).
#![no_main]

use kubehash::kubelet::gofloat::float64_text;
use kubehash::kubelet::once_keys::value_from_slice;
use kubehash::source::goread::clean;
use kubehash::source::reader::for_each_object;
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

fuzz_target!(|data: &[u8]| {
    let Ok(token) = std::str::from_utf8(data) else {
        return;
    };
    let texts = [
        (
            format!(r#"{{"name":"a","resources":{{"limits":{{"cpu":{token}}}}}}}"#),
            "/resources/limits/cpu",
        ),
        (
            format!(
                r#"{{"kind":"List","items":[{{"a":1}},{{"env":[{{"valueFrom":{{"resourceFieldRef":{{"divisor":{token}}}}}}}]}}]}}"#
            ),
            "/items/1/env/0/valueFrom/resourceFieldRef/divisor",
        ),
    ];
    for (text, at) in texts {
        // Go's byte rules first, as the framer and the manifest reader apply them before
        // `value_from_slice` (the stream reader applies them as it reads).
        let mut cleaned = Vec::new();
        clean(text.as_bytes(), true, &mut cleaned);
        let sliced = value_from_slice(&cleaned).ok();
        let mut streamed = Vec::new();
        let read = for_each_object(text.as_bytes(), "fuzz", |v| streamed.push(v));
        assert_eq!(sliced.is_some(), read.is_ok(), "{text}");
        let Some(value) = sliced else {
            continue;
        };
        // The stream hands on a List's items, the slice reader the whole value.
        let whole = match value.get("items") {
            Some(Value::Array(items)) => items.clone(),
            _ => vec![value.clone()],
        };
        assert_eq!(whole, streamed, "{text}");
        // Where the bytes are one JSON number (white space around it aside), the value read
        // there is that number: a float's Go text must be the number as written.
        let number = token.trim_matches([' ', '\t', '\n', '\r']);
        if serde_json::from_str::<serde_json::Number>(number).is_err() {
            continue;
        }
        if let Some(Value::Number(n)) = value.pointer(at) {
            if let Some(f) = n.as_f64().filter(|_| n.is_f64()) {
                assert_eq!(float64_text(f), number, "{text}");
            }
        }
    }
});
