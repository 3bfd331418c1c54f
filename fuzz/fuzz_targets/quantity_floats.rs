//! Any bytes as the value in a quantity's place (a `limits` value, and a `divisor` in a List's
//! item): the two JSON readers (`pod_value_from_slice` after Go's byte rules, the stream
//! reader) take or refuse the text alike, as the same values; and where the bytes are one float
//! or one string with an escape, the value there is the string of its raw text, which is what
//! `Quantity.UnmarshalJSON` parses (`kubelet::spelling`).
#![no_main]

use kubehash::kubelet::spelling::pod_value_from_slice;
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
        // `pod_value_from_slice` (the stream reader applies them as it reads).
        let mut cleaned = Vec::new();
        clean(text.as_bytes(), true, &mut cleaned);
        let sliced = pod_value_from_slice(&cleaned).ok();
        let mut streamed = Vec::new();
        let read = for_each_object(text.as_bytes(), "fuzz", |v| streamed.push(v));
        // Bytes that close the object early can give it a top-level `items` of their own. The
        // stream reader (and the framer, which never slices such an object whole) take any
        // top-level `items` as a List's: its elements are the objects, null is none, and
        // anything else is refused.
        let whole = match sliced.as_ref().map(|v| (v, v.get("items"))) {
            None => None,
            Some((_, Some(Value::Array(items)))) => Some(items.clone()),
            Some((_, Some(Value::Null))) => Some(Vec::new()),
            Some((_, Some(_))) => None,
            Some((value, None)) => Some(vec![value.clone()]),
        };
        assert_eq!(whole.is_some(), read.is_ok(), "{text}");
        let (Some(value), Some(whole)) = (sliced, whole) else {
            continue;
        };
        assert_eq!(whole, streamed, "{text}");
        // Where the bytes are one JSON float, or one string with an escape (white space around
        // it aside), the value read there is its raw text (after Go's byte rules).
        let mut token = Vec::new();
        clean(token_of(data).as_bytes(), true, &mut token);
        let Ok(token) = String::from_utf8(token) else {
            continue;
        };
        let raw = match serde_json::from_str::<Value>(&token) {
            Ok(Value::Number(n)) if n.is_f64() => Some(token.as_str()),
            Ok(Value::String(_)) if token.contains('\\') => Some(&token[1..token.len() - 1]),
            _ => None,
        };
        if let Some(raw) = raw {
            assert_eq!(value.pointer(at), Some(&Value::from(raw)), "{text}");
        }
    }
});

/// The fuzzed bytes without JSON's white space around them.
fn token_of(data: &[u8]) -> &str {
    std::str::from_utf8(data)
        .unwrap_or_default()
        .trim_matches([' ', '\t', '\n', '\r'])
}
