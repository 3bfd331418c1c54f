//! JSON read into a `serde_json::Value`, refusing an object that repeats a key.
//!
//! Go's `encoding/json` (and the decoders kubelet builds on it) does not keep one of two
//! repeated keys: it decodes the second value *into* what the first left behind. Objects merge
//! field by field, list elements merge with the elements before them, and a type error in the
//! first value still fails the decode after the second one is read. A `serde_json::Value` keeps
//! the last value alone, so a hash computed from it is the hash of a container kubelet never
//! sees. Every JSON input whose contents decide a hash, a verdict or a write is read through
//! [`OnceKeys`], and a repeated key is an error naming it and its place. YAML is not: Go's YAML
//! reader (`sigs.k8s.io/yaml`, yaml.v2 outside strict mode) keeps the last value, as
//! `serde_yaml_ng` does.

use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, MapAccess, Visitor};
use serde_json::map::Entry;
use serde_json::{Map, Number, Value};

/// Deserializes any JSON value as `serde_json::Value` does, except that an object with a
/// repeated key is an error.
#[derive(Debug, Clone, Copy, Default)]
pub struct OnceKeys;

/// The JSON value of `bytes` (a whole value and white space around it), read with
/// [`OnceKeys`]; serde_json's error, with its line and column, otherwise. A pod's JSON is read
/// with [`crate::kubelet::spelling::pod_value_from_slice`], which also keeps what Go reads of a
/// quantity's text.
pub fn value_from_slice(bytes: &[u8]) -> serde_json::Result<Value> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let value = OnceKeys.deserialize(&mut de)?;
    de.end()?;
    Ok(value)
}

/// The error for a repeated key (serde_json adds where it is).
pub fn repeated_key<E: serde::de::Error>(key: &str) -> E {
    E::custom(format_args!(
        "the key {key:?} is repeated in one object (Go's decoder reads the second value into \
         what the first left; kubehash does not guess the result)"
    ))
}

/// The visits of a `serde_json::Value`-building visitor that is its own seed (`Copy`) and
/// reads booleans, integers, null and lists as `Value` does: shared by [`OnceKeys`] and the YAML
/// reader's seed, which differ only in strings, floats and maps.
macro_rules! value_visits {
    () => {
        fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
            Ok(Value::Bool(v))
        }

        fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
            Ok(Value::Number(v.into()))
        }

        fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
            Ok(Value::Number(v.into()))
        }

        fn visit_none<E>(self) -> Result<Value, E> {
            Ok(Value::Null)
        }

        fn visit_unit<E>(self) -> Result<Value, E> {
            Ok(Value::Null)
        }

        fn visit_some<D: serde::de::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
            d.deserialize_any(self)
        }

        fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
            let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0));
            while let Some(v) = seq.next_element_seed(self)? {
                items.push(v);
            }
            Ok(Value::Array(items))
        }
    };
}
pub(crate) use value_visits;

impl<'de> DeserializeSeed<'de> for OnceKeys {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for OnceKeys {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }

    value_visits!();

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        // As serde_json's own `Value`: a float it cannot hold is null.
        Ok(Number::from_f64(v).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_string()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            match out.entry(key) {
                Entry::Occupied(e) => return Err(repeated_key(e.key())),
                Entry::Vacant(e) => {
                    e.insert(map.next_value_seed(OnceKeys)?);
                }
            }
        }
        Ok(Value::Object(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_what_serde_json_reads_when_no_key_repeats() {
        for text in [
            r#"{"a":[1,-2,3.5,1e400,null,true,"x\u00e9"],"b":{"c":{}},"d":[]}"#,
            r#"[{"a":1},{"a":2}]"#,
            r#" "s" "#,
            "18446744073709551615",
            "-9223372036854775808",
            "1.5e-7",
        ] {
            let want = serde_json::from_str::<Value>(text).ok();
            assert_eq!(value_from_slice(text.as_bytes()).ok(), want, "{text}");
        }
        for bad in ["{", "[1,]", r#"{"a":1}x"#, "", "\"\\ud800\""] {
            let ours = value_from_slice(bad.as_bytes()).map_err(|e| e.to_string());
            let theirs = serde_json::from_str::<Value>(bad).map_err(|e| e.to_string());
            assert_eq!(ours, theirs, "{bad}");
        }
    }

    #[test]
    fn a_repeated_key_is_refused_at_any_depth_with_its_place() {
        let err = value_from_slice(br#"{"name":"a","image":"b","image":"c"}"#)
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("the key \"image\" is repeated in one object")
                && err.ends_with("at line 1 column 31"),
            "{err}"
        );
        for text in [
            r#"{"a":{"b":[{"c":1,"c":1}]}}"#,
            r#"[{"x":null,"x":null}]"#,
            // Keys are compared once unescaped, as Go compares them.
            r#"{"cpu":"1","c\u0070u":"2"}"#,
        ] {
            let err = value_from_slice(text.as_bytes()).unwrap_err().to_string();
            assert!(err.contains("is repeated in one object"), "{text}: {err}");
        }
        // The same key in two objects is not a repeat.
        assert!(value_from_slice(br#"[{"a":1},{"a":1}]"#).is_ok());
    }
}
