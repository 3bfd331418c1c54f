//! What a `serde_json::Value` loses of a pod's JSON text that Go's decoder still reads, put
//! back from the text.
//!
//! * `Quantity.UnmarshalJSON` parses a quantity's raw bytes (apimachinery's `quantity.go`): a
//!   number's text, which a struct dump shows (`0.50` is not `0.5` to kubelet ≤ 1.15), and a
//!   string's contents with their escapes unread, so `"1\u0030"` fails to parse, as every
//!   backslash does.
//! * `encoding/json` reads an integer field with `strconv.ParseInt` of the number's text, which
//!   takes `-0`; serde_json makes `-0` a float.
//!
//! [`respell`] walks the text beside the value parsed from it. In a quantity's place
//! ([`QUANTITY_KEYS`]) each float and each string with an escape becomes the string of its raw
//! text, which the decoder parses as Go parses it; anywhere else each `-0` becomes the integer
//! 0, which is what every field that takes an integer reads (no pod field is a float). YAML
//! reaches the kubelet's JSON decoder as `json.Marshal` writes it, which spells a float `-0`
//! where it is negative zero: [`zero_negative_zeros`] does the same for a YAML value.

use serde_json::{Number, Value};

use crate::kubelet::bytescan::find_string_stop;
use crate::kubelet::once_keys::value_from_slice;

/// Whether a JSON value holds a float (a number serde_json keeps as `f64`) anywhere.
fn has_float(value: &Value) -> bool {
    match value {
        Value::Number(n) => n.is_f64(),
        Value::Array(items) => items.iter().any(has_float),
        Value::Object(entries) => entries.values().any(has_float),
        _ => false,
    }
}

/// Where a `v1.Container` holds a `resource.Quantity`, in every version 1.8 – 1.37: the values of
/// a `ResourceList` (`resources.limits`, `resources.requests`), and a `resourceFieldRef`'s
/// `divisor` (a schema test holds this list to the type graphs).
pub const QUANTITY_KEYS: QuantityKeys = QuantityKeys {
    lists: &["limits", "requests"],
    values: &["divisor"],
};

/// See [`QUANTITY_KEYS`].
pub struct QuantityKeys {
    /// Keys whose value is an object of quantities.
    pub lists: &'static [&'static str],
    /// Keys whose value is a quantity.
    pub values: &'static [&'static str],
}

/// A value's text could not be followed beside it: never for a value parsed from that text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("kubehash could not follow a value's text (a bug)")]
pub struct NotFollowed;

/// The JSON value of a pod, a container or a list of them in `bytes`, as the kubelet's JSON
/// decoder reads it: [`value_from_slice`] (no key repeated), then [`respell_if_needed`].
pub fn pod_value_from_slice(bytes: &[u8]) -> serde_json::Result<Value> {
    let mut value = value_from_slice(bytes)?;
    respell_if_needed(&mut value, bytes).map_err(serde::de::Error::custom)?;
    Ok(value)
}

/// [`respell`], where it may change the value parsed from `text`: the value holds a float, or
/// the text an escape.
pub fn respell_if_needed(value: &mut Value, text: &[u8]) -> Result<(), NotFollowed> {
    match needs_respelling(value, text) {
        true => respell(value, text),
        false => Ok(()),
    }
}

/// See [`respell_if_needed`].
fn needs_respelling(value: &Value, text: &[u8]) -> bool {
    has_float(value) || memchr::memchr(b'\\', text).is_some()
}

/// Puts back what `value` lost of `text`, the JSON it was parsed from (the value at its first
/// byte; anything after it is ignored): see the module.
pub fn respell(value: &mut Value, text: &[u8]) -> Result<(), NotFollowed> {
    let mut walk = Walk { text, i: 0 };
    walk.space();
    walk.value(value, Place::Plain).ok_or(NotFollowed)
}

/// For a value read from YAML, which the kubelet's JSON decoder reads as `json.Marshal`
/// writes it: a negative zero float, which it writes `-0`, is the integer 0 outside a
/// quantity's place (in one it stays a float, whose Go text is `-0`).
pub fn zero_negative_zeros(value: &mut Value) {
    for_each_placed(value, &mut |v, place| {
        if let Value::Number(n) = v {
            if place != Place::Quantity && is_negative_zero(n) {
                *v = Value::Number(Number::from(0));
            }
        }
    });
}

/// Calls `each` with every value in `value` (itself first, then its members, in order) and its
/// place; a value `each` replaces is walked as replaced.
pub fn for_each_placed(value: &mut Value, each: &mut dyn FnMut(&mut Value, Place)) {
    placed(value, Place::Plain, each);
}

fn placed(value: &mut Value, place: Place, each: &mut dyn FnMut(&mut Value, Place)) {
    each(value, place);
    match value {
        Value::Array(items) => items.iter_mut().for_each(|v| placed(v, Place::Plain, each)),
        Value::Object(members) => {
            for (key, v) in members.iter_mut() {
                let inner = place.of_member(key, v.is_object());
                placed(v, inner, each);
            }
        }
        _ => {}
    }
}

fn is_negative_zero(n: &Number) -> bool {
    n.as_f64()
        .is_some_and(|f| n.is_f64() && f == 0.0 && f.is_sign_negative())
}

/// Where a value is, for what its text means to Go.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Place {
    Plain,
    /// A quantity.
    Quantity,
    /// An object whose members are quantities (a `ResourceList`).
    Quantities,
}

impl Place {
    /// The place of the member `key` of an object in this place (`object`: whether the
    /// member's value is an object).
    pub fn of_member(self, key: &str, object: bool) -> Place {
        if self == Place::Quantities || QUANTITY_KEYS.values.contains(&key) {
            Place::Quantity
        } else if object && QUANTITY_KEYS.lists.contains(&key) {
            Place::Quantities
        } else {
            Place::Plain
        }
    }
}

/// The text being walked beside its value.
struct Walk<'t> {
    text: &'t [u8],
    i: usize,
}

impl Walk<'_> {
    fn peek(&self) -> Option<u8> {
        self.text.get(self.i).copied()
    }

    fn space(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.peek() {
            self.i += 1;
        }
    }

    fn eat(&mut self, byte: u8) -> Option<()> {
        (self.peek()? == byte).then(|| self.i += 1)
    }

    /// The value at the cursor, `value` parsed from it, in `place`.
    fn value(&mut self, value: &mut Value, place: Place) -> Option<()> {
        match (self.peek()?, &mut *value) {
            (b'{', Value::Object(members)) => {
                self.i += 1;
                for (n, (key, v)) in members.iter_mut().enumerate() {
                    self.space();
                    if n > 0 {
                        self.eat(b',')?;
                        self.space();
                    }
                    // The members in the text's order (serde_json keeps it); a key without an
                    // escape is seen to be the member's.
                    let (raw, escaped) = self.string()?;
                    if !escaped && raw != key.as_bytes() {
                        return None;
                    }
                    self.space();
                    self.eat(b':')?;
                    self.space();
                    let inner = place.of_member(key, v.is_object());
                    self.value(v, inner)?;
                }
                self.space();
                self.eat(b'}')
            }
            (b'[', Value::Array(items)) => {
                self.i += 1;
                for (n, v) in items.iter_mut().enumerate() {
                    self.space();
                    if n > 0 {
                        self.eat(b',')?;
                        self.space();
                    }
                    self.value(v, Place::Plain)?;
                }
                self.space();
                self.eat(b']')
            }
            (b'"', Value::String(_)) => {
                let (contents, escaped) = self.string()?;
                if escaped && place == Place::Quantity {
                    *value = Value::String(std::str::from_utf8(contents).ok()?.to_owned());
                }
                Some(())
            }
            (b'-' | b'0'..=b'9', Value::Number(n)) => {
                let start = self.i;
                while let Some(b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9') = self.peek() {
                    self.i += 1;
                }
                let token = std::str::from_utf8(&self.text[start..self.i]).ok()?;
                if place == Place::Quantity && n.is_f64() {
                    *value = Value::String(token.to_owned());
                } else if place != Place::Quantity && token == "-0" {
                    *value = Value::Number(Number::from(0));
                }
                Some(())
            }
            (b't', Value::Bool(true)) => self.word(b"true"),
            (b'f', Value::Bool(false)) => self.word(b"false"),
            (b'n', Value::Null) => self.word(b"null"),
            _ => None,
        }
    }

    fn word(&mut self, word: &[u8]) -> Option<()> {
        let end = self.i + word.len();
        (self.text.get(self.i..end)? == word).then(|| self.i = end)
    }

    /// The string at the cursor: its raw contents, and whether they hold an escape.
    fn string(&mut self) -> Option<(&[u8], bool)> {
        self.eat(b'"')?;
        let start = self.i;
        let mut escaped = false;
        loop {
            let n = find_string_stop(self.text.get(self.i..)?)?;
            self.i += n;
            match self.text[self.i] {
                b'"' => break,
                // An escape's next byte never ends the string.
                b'\\' => {
                    escaped = true;
                    self.i += 2;
                }
                // A control byte: JSON that did not parse.
                _ => return None,
            }
        }
        self.i += 1;
        Some((&self.text[start..self.i - 1], escaped))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// `text` parsed and respelled.
    fn respelled(text: &str) -> Value {
        let mut v = value_from_slice(text.as_bytes()).unwrap();
        respell(&mut v, text.as_bytes()).unwrap();
        v
    }

    fn cpu(v: &str) -> String {
        format!(r#"{{"resources":{{"limits":{{"cpu":{v}}}}}}}"#)
    }

    #[test]
    fn a_quantity_keeps_its_raw_text() {
        for (written, read) in [
            ("0.50", json!("0.50")),
            ("0.5", json!("0.5")),
            ("1e3", json!("1e3")),
            ("1E-7", json!("1E-7")),
            ("-0", json!("-0")),
            ("-0.0", json!("-0.0")),
            ("18446744073709551616", json!("18446744073709551616")),
            (r#""1\u0030""#, json!(r"1\u0030")),
            (r#""\"1\"""#, json!(r#"\"1\""#)),
            // What serde_json keeps exactly stays as it is.
            ("2", json!(2)),
            ("-3", json!(-3)),
            ("18446744073709551615", json!(18446744073709551615u64)),
            (r#""500m""#, json!("500m")),
            (r#"" 1 ""#, json!(" 1 ")),
            ("null", Value::Null),
        ] {
            let got = respelled(&cpu(written));
            assert_eq!(
                got["resources"]["limits"]["cpu"], read,
                "{written} read as {got}"
            );
        }
    }

    #[test]
    fn quantities_are_found_where_a_container_holds_them() {
        let text = r#" {"a":[1.50,{"requests":{"m":"1","x":[1.50],"cpu":1.50}}],
            "env":[{"valueFrom":{"resourceFieldRef":{"divisor":1.0}}}],
            "n\u0061me":{"cpu":1.50},"b":{"lim\u0069ts":{"memory":"1\u0030"}},
            "c":{"limits":[1.50],"requests":"1.\u0030"},"cpu":"\u0030",
            "ports":[{"containerPort":80.0,"hostPort":-0}]} trailing"#;
        let mut v = value_from_slice(text.replace(" trailing", "").as_bytes()).unwrap();
        respell(&mut v, text.as_bytes()).unwrap();
        assert_eq!(
            v,
            json!({"a":[1.5,{"requests":{"m":"1","x":[1.5],"cpu":"1.50"}}],
                "env":[{"valueFrom":{"resourceFieldRef":{"divisor":"1.0"}}}],
                // A key with an escape is the key serde_json (and Go) read.
                "name":{"cpu":1.5},"b":{"limits":{"memory":r"1\u0030"}},
                // Not an object of quantities, nor a quantity: read as before.
                "c":{"limits":[1.5],"requests":"1.0"},"cpu":"0",
                "ports":[{"containerPort":80.0,"hostPort":0}]})
        );
    }

    #[test]
    fn minus_zero_is_an_integer_outside_quantities() {
        let text = r#"[-0,-0.0,-0e0,0,{"x":-0,"limits":{"cpu":-0}},[-0]]"#;
        assert_eq!(
            respelled(text),
            json!([0, -0.0, -0.0, 0, {"x":0,"limits":{"cpu":"-0"}},[0]])
        );
        assert_eq!(respelled("-0"), json!(0));
    }

    #[test]
    fn a_yaml_negative_zero_is_an_integer_outside_quantities() {
        let mut v = json!([-0.0, 0.5, {"x": -0.0, "limits": {"cpu": -0.0}, "divisor": -0.0}]);
        zero_negative_zeros(&mut v);
        let cpu = &v[2]["limits"]["cpu"];
        assert!(cpu
            .as_f64()
            .is_some_and(|f| f == 0.0 && f.is_sign_negative()));
        assert!(v[2]["divisor"].is_f64());
        assert_eq!(v[0], json!(0));
        assert_eq!(v[2]["x"], json!(0));
        assert_eq!(v[1], json!(0.5));
    }

    #[test]
    fn only_a_float_or_an_escape_needs_it() {
        let plain = r#"{"limits":{"cpu":"1","memory":2}}"#;
        assert!(!needs_respelling(
            &value_from_slice(plain.as_bytes()).unwrap(),
            plain.as_bytes()
        ));
        for text in [r#"{"a":-0}"#, r#"{"a":1.5}"#, r#"{"a":"\n"}"#] {
            assert!(needs_respelling(
                &value_from_slice(text.as_bytes()).unwrap(),
                text.as_bytes()
            ));
        }
    }

    #[test]
    fn the_quantity_keys_are_every_place_a_quantity_is() {
        use crate::kubelet::schema::{Kind, Schema, TypeId};
        use crate::kubelet::version::KubeletVersion;
        #[derive(Debug, PartialEq)]
        enum Holds {
            Quantity,
            Quantities,
            Other,
        }
        fn holds(s: &Schema, ty: TypeId) -> Holds {
            match &s.ty(ty).kind {
                Kind::Ptr(elem) => holds(s, *elem),
                Kind::Quantity => Holds::Quantity,
                Kind::Map { value } if holds(s, *value) == Holds::Quantity => Holds::Quantities,
                _ => Holds::Other,
            }
        }
        let mut seen = (0, 0);
        for v in KubeletVersion::all() {
            let s = Schema::for_version(v).unwrap();
            for ty in 0..s.type_count() {
                match &s.ty(ty).kind {
                    Kind::Struct(fields) => {
                        for f in fields {
                            let (keys, count) = match holds(s, f.ty) {
                                Holds::Quantity => (QUANTITY_KEYS.values, &mut seen.0),
                                Holds::Quantities => (QUANTITY_KEYS.lists, &mut seen.1),
                                Holds::Other => continue,
                            };
                            assert!(keys.contains(&f.json.as_str()), "{v}: {}", f.json);
                            *count += 1;
                        }
                    }
                    Kind::Slice(elem) => assert_eq!(holds(s, *elem), Holds::Other, "{v}: a list"),
                    Kind::Map { value } => {
                        assert_ne!(holds(s, *value), Holds::Quantities, "{v}: a map's map")
                    }
                    _ => {}
                }
            }
        }
        // `divisor` from 1.8 on, `limits` and `requests` in every version.
        assert!(seen.0 >= 30 && seen.1 >= 60, "{seen:?}");
    }

    /// Every golden container's quantity strings that are JSON numbers (`"0.5"`, `"100"`,
    /// `"1e3"`), written in its text as those numbers, hash as the strings do for all 30
    /// versions; written with an escape (`"\u0031"` for `"1"`), the container does not decode
    /// under any version, as `Quantity.UnmarshalJSON` fails on a backslash.
    #[test]
    fn a_quantity_hashes_from_its_text() {
        use crate::kubelet::hash::hash_container;
        use crate::kubelet::version::parse_version_set;
        let all = parse_version_set("all").unwrap();
        let (mut numbers, mut escaped) = (0, 0);
        for c in crate::test_corpus::golden_containers() {
            let want = hash_container(c, &all, "").unwrap();
            // Each quantity string as a marker first, then the marker's text replaced.
            let (mut marked, mut spelled) = (c.clone(), Vec::new());
            for_each_placed(&mut marked, &mut |q, place| {
                let Some(text) = q.as_str().filter(|_| place == Place::Quantity) else {
                    return;
                };
                let text = text.to_owned();
                let marker = format!("\u{1}{}", spelled.len());
                spelled.push((Value::from(marker.as_str()).to_string(), text));
                *q = Value::from(marker);
            });
            let marked = marked.to_string();
            // The text with every quantity but the `k`th as it was.
            let but = |k: usize| {
                let mut text = marked.clone();
                for (marker, was) in spelled.iter().take(k).chain(spelled.iter().skip(k + 1)) {
                    text = text.replace(marker, &Value::from(was.as_str()).to_string());
                }
                text
            };
            for (k, (marker, text)) in spelled.iter().enumerate() {
                let marked = but(k);
                if serde_json::from_str::<Number>(text).is_ok() {
                    numbers += 1;
                    let written = marked.replace(marker, text);
                    let read = pod_value_from_slice(written.as_bytes()).unwrap();
                    let got = hash_container(&read, &all, "").unwrap();
                    assert_eq!(
                        (got.hash_hex(), got.without_resources_hex()),
                        (want.hash_hex(), want.without_resources_hex()),
                        "{written}"
                    );
                }
                if let Some(first) = text.chars().next().filter(char::is_ascii) {
                    escaped += 1;
                    let quoted = format!("\"\\u{:04x}{}\"", first as u32, &text[1..]);
                    let written = marked.replace(marker, &quoted);
                    let read = pod_value_from_slice(written.as_bytes()).unwrap();
                    for v in &all {
                        assert!(hash_container(&read, &[*v], "").is_err(), "{v}: {written}");
                    }
                }
            }
        }
        assert!(
            numbers >= 100 && escaped >= 100,
            "{numbers} numbers, {escaped} escaped"
        );
    }

    #[test]
    fn a_text_that_is_not_the_value_is_refused() {
        let mut v = json!({"a": 1});
        assert_eq!(respell(&mut v, br#"{"a":"1"}"#), Err(NotFollowed));
        assert_eq!(respell(&mut v, br#"{"a":1,"b":2}"#), Err(NotFollowed));
        assert_eq!(respell(&mut v, br#"[1]"#), Err(NotFollowed));
        assert_eq!(respell(&mut v, br#"{"a":1"#), Err(NotFollowed));
        let mut v = json!({"a": 1, "b": 2});
        assert_eq!(respell(&mut v, br#"{"b":2,"a":1}"#), Err(NotFollowed));
    }
}
