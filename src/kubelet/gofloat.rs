//! A float64 as Go's `encoding/json` writes it (`floatEncoder.encode`), and the reading rule
//! that makes a parsed float's text known again.
//!
//! Go writes the shortest digits that read back as the same float: fixed-point from 1e-6 up to
//! (not including) 1e21, with an exponent outside that range (`1e+21`, `1e-7`: every exponent
//! gets a sign, and a negative one loses the zero Go's `strconv` pads it with).
//!
//! Why it matters: `Quantity.UnmarshalJSON` parses a JSON number's *text* (`0.5` and `0.50`
//! are one value but two quantities to a kubelet ≤ 1.15, which hashes the text it cached), and
//! a `serde_json::Value` keeps only a float's value. So the JSON readers take a float *in a
//! quantity's place* only if it is written as Go writes its value ([`misspelled_quantity`] finds
//! one that is not), and then [`float64_text`] of the value is the text that was read. A
//! container holds quantities in two places ([`QUANTITY_KEYS`]); a float anywhere else is read
//! as before, and a field that takes no float refuses it as Go does. YAML needs no check: the
//! kubelet turns YAML into JSON with Go's `json.Marshal` (`sigs.k8s.io/yaml`), so a YAML float
//! reaches its JSON decoder as exactly this text.
//!
//! ```
//! use kubehash::kubelet::gofloat::float64_text;
//! assert_eq!(float64_text(0.5), "0.5");
//! assert_eq!(float64_text(1e21), "1e+21");
//! assert_eq!(float64_text(1e-7), "1e-7");
//! ```

use serde_json::Value;

use crate::kubelet::bytescan::find_string_stop;

/// `json.Marshal(f)` for a finite float64 (Go refuses NaN and infinities).
pub fn float64_text(f: f64) -> String {
    let abs = f.abs();
    if abs != 0.0 && !(1e-6..1e21).contains(&abs) {
        // Rust's `{:e}` is the same shortest digits; Go signs every exponent (`e+21`), and its
        // clean-up turns `e-07` into `e-7`, which is how Rust writes it already.
        let text = format!("{f:e}");
        return match text.split_once('e') {
            Some((digits, exponent)) if !exponent.starts_with('-') => {
                format!("{digits}e+{exponent}")
            }
            _ => text,
        };
    }
    // Rust's `{}` is the shortest digits, fixed-point: Go's `'f'` with precision -1.
    format!("{f}")
}

/// Whether a JSON value holds a float (a number serde_json keeps as `f64`) anywhere.
pub fn has_float(value: &Value) -> bool {
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

/// The first number in a quantity's place in the JSON `text` ([`QUANTITY_KEYS`], at any depth)
/// that serde_json reads as a float and that is not written as Go writes that float, with its
/// byte offset: `0.50`, `1e3`, `1E-7`, `-0.0`, `18446744073709551616`. A key with an escape is
/// compared as serde_json reads it. `None` when there is none (`text` is JSON that parsed).
pub fn misspelled_quantity(text: &[u8]) -> Option<(&str, usize)> {
    // Per open bracket: whether it is an object, and whether its members are quantities.
    let mut open: Vec<(bool, bool)> = Vec::new();
    // The key whose value comes next, in the innermost object.
    let mut key: Option<&[u8]> = None;
    let mut at_key = false;
    let is = |key: Option<&[u8]>, names: &[&str]| {
        key.is_some_and(|k| match k.contains(&b'\\') {
            false => names.iter().any(|n| n.as_bytes() == k),
            // Read as serde_json reads it; one it does not read may be any key.
            true => serde_json::from_slice::<String>(&[b"\"", k, b"\""].concat())
                .map_or(true, |k| names.contains(&k.as_str())),
        })
    };
    let mut i = 0;
    while i < text.len() {
        match text[i] {
            b'"' => {
                let start = i + 1;
                i = start;
                // To the closing quote a plain run at a time; an escape's next byte never ends it.
                loop {
                    match text.get(i..).and_then(find_string_stop) {
                        Some(n) if text[i + n] == b'"' => break i += n,
                        Some(n) => i += n + if text[i + n] == b'\\' { 2 } else { 1 },
                        None => break i = text.len(),
                    }
                }
                let string = &text[start..i];
                i += 1;
                key = at_key.then_some(string);
                at_key = false;
            }
            b'{' => {
                open.push((true, is(key, QUANTITY_KEYS.lists)));
                (key, at_key) = (None, true);
                i += 1;
            }
            b'[' => {
                open.push((false, false));
                (key, at_key) = (None, false);
                i += 1;
            }
            b'}' | b']' => {
                open.pop();
                (key, at_key) = (None, false);
                i += 1;
            }
            b',' => {
                at_key = open.last().is_some_and(|&(object, _)| object);
                key = None;
                i += 1;
            }
            b'-' | b'0'..=b'9' => {
                let start = i;
                while i < text.len()
                    && matches!(text[i], b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9')
                {
                    i += 1;
                }
                let quantity = is(key, QUANTITY_KEYS.values)
                    || open
                        .last()
                        .is_some_and(|&(object, members)| object && members);
                let token = std::str::from_utf8(&text[start..i]).ok()?;
                if quantity && is_misspelled(token) {
                    return Some((token, start));
                }
                key = None;
            }
            _ => i += 1,
        }
    }
    None
}

/// Whether serde_json reads `token` (a JSON number) as a float that Go writes otherwise.
fn is_misspelled(token: &str) -> bool {
    let integer = !token.contains(['.', 'e', 'E']);
    // serde_json keeps integers from i64::MIN to u64::MAX as integers, `-0` aside.
    if integer && token != "-0" && (token.parse::<u64>().is_ok() || token.parse::<i64>().is_ok()) {
        return false;
    }
    match serde_json::from_str::<f64>(token) {
        Ok(f) => float64_text(f) != token,
        Err(_) => true,
    }
}

/// Why a float [`misspelled_quantity`] found is refused (the reader adds where it is).
pub fn misspelled_message(token: &str) -> String {
    let go = serde_json::from_str::<f64>(token)
        .map(float64_text)
        .unwrap_or_default();
    format!(
        "the quantity {token} is a JSON float, which Go writes as {go}: kubehash keeps a \
         float's value, not its spelling, and a quantity's spelling is part of its hash (write \
         it as a string, \"{token}\")"
    )
}

/// Line and column (from 1, in bytes) of byte `at` of `text`.
pub fn line_and_column(text: &[u8], at: usize) -> (usize, usize) {
    let before = &text[..at.min(text.len())];
    let line = 1 + memchr::memchr_iter(b'\n', before).count();
    let column = 1 + before.len() - memchr::memrchr(b'\n', before).map_or(0, |n| n + 1);
    (line, column)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What Go 1.22 prints for `json.Marshal(f)`.
    #[test]
    fn writes_floats_as_encoding_json_does() {
        for (f, go) in [
            (0.5, "0.5"),
            (0.1, "0.1"),
            (0.1 + 0.2, "0.30000000000000004"),
            (-2.5, "-2.5"),
            (1.0, "1"),
            (100.0, "100"),
            (0.0, "0"),
            (-0.0, "-0"),
            (1e20, "100000000000000000000"),
            (9007199254740993.0, "9007199254740992"),
            (1e21, "1e+21"),
            (1.5e21, "1.5e+21"),
            (1.23456789e23, "1.23456789e+23"),
            (1e-6, "0.000001"),
            (1.5e-6, "0.0000015"),
            (1e-7, "1e-7"),
            (-1.5e-7, "-1.5e-7"),
            (1e-10, "1e-10"),
            (5e-324, "5e-324"),
            (f64::MAX, "1.7976931348623157e+308"),
        ] {
            assert_eq!(float64_text(f), go, "{f:?}");
        }
    }

    #[test]
    fn finds_the_quantities_not_written_as_go_writes_them() {
        let q = |v: &str| format!(r#"{{"resources":{{"limits":{{"cpu":{v}}}}}}}"#);
        for v in [
            "0.5", "2", "1e+21", "1e-7", "-0", "0.000001", "\"0.50\"", "null",
        ] {
            assert_eq!(misspelled_quantity(q(v).as_bytes()), None, "{v}");
        }
        for v in [
            "0.50",
            "1e3",
            "1E-7",
            "1.0",
            "-0.0",
            "1e21",
            "0.0000001",
            "18446744073709551616",
        ] {
            assert_eq!(misspelled_quantity(q(v).as_bytes()), Some((v, 30)), "{v}");
        }
        for (text, found) in [
            // Not a quantity's place: read as before (a field that takes no float refuses it).
            (
                r#"{"ports":[{"containerPort":80.0}],"x":1e3,"limits":[1.50]}"#,
                None,
            ),
            (r#"{"limits":{"cpu":{"x":1.50}},"a":{"b":1.50}}"#, None),
            (
                r#"{"cpu":"0.50","0.50":1,"e":"\"1e3\\","limits":"1.50"}"#,
                None,
            ),
            // A quantity's place, at any depth; after other members, strings and lists.
            (
                r#"{"a":[1.5,{"requests":{"m":"1","x":[1.50],"cpu":1.50}}]}"#,
                Some(("1.50", 48)),
            ),
            (
                r#"{"env":[{"valueFrom":{"resourceFieldRef":{"divisor":1.0}}}]}"#,
                Some(("1.0", 52)),
            ),
            // An escaped key is read as serde_json reads it.
            (r#"{"n\u0061me":{"cpu":1.50},"\"":{"a":1.50}}"#, None),
            (r#"{"lim\u0069ts":{"cpu":1.50}}"#, Some(("1.50", 22))),
            (r#"{"limits":{"c\u0070u":1.50}}"#, Some(("1.50", 22))),
        ] {
            assert_eq!(misspelled_quantity(text.as_bytes()), found, "{text}");
        }
    }

    /// Every place a container's type graph holds a `Quantity`, in every version, is one
    /// [`QUANTITY_KEYS`] names: a field under one of its `values` keys, or the values of a map
    /// under one of its `lists` keys; never a list element, nor a map's map.
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

    /// `Quantity.UnmarshalJSON` strips a string's quotes and parses what is left, so a quantity
    /// written as a number hashes as the same text in a string, in every version: each golden
    /// container's quantities that are numbers as Go writes them, written as numbers.
    #[test]
    fn a_number_quantity_hashes_as_its_text() {
        use crate::kubelet::hash::hash_container;
        use crate::kubelet::version::parse_version_set;
        fn numbers(v: &mut Value, quantities: bool, n: &mut usize) {
            match v {
                Value::String(s) if quantities => {
                    let go = match serde_json::from_str::<serde_json::Number>(s) {
                        Ok(num) if num.is_f64() => float64_text(num.as_f64().unwrap_or(0.0)),
                        Ok(num) => num.to_string(),
                        Err(_) => return,
                    };
                    if go == *s {
                        *v = Value::Number(serde_json::from_str(s).unwrap());
                        *n += 1;
                    }
                }
                Value::Object(m) => {
                    for (k, v) in m.iter_mut() {
                        if QUANTITY_KEYS.values.contains(&k.as_str()) {
                            numbers(v, true, n);
                        } else if QUANTITY_KEYS.lists.contains(&k.as_str()) {
                            if let Value::Object(q) = v {
                                q.values_mut().for_each(|v| numbers(v, true, n));
                            }
                        } else {
                            numbers(v, false, n);
                        }
                    }
                }
                Value::Array(items) => items.iter_mut().for_each(|v| numbers(v, false, n)),
                _ => {}
            }
        }
        let all = parse_version_set("all").unwrap();
        let mut rewritten = 0;
        for c in crate::test_corpus::golden_containers() {
            let mut as_numbers = c.clone();
            let mut n = 0;
            numbers(&mut as_numbers, false, &mut n);
            if n == 0 {
                continue;
            }
            rewritten += n;
            let (a, b) = (
                hash_container(c, &all, "").unwrap(),
                hash_container(&as_numbers, &all, "").unwrap(),
            );
            assert_eq!(
                (a.hash_hex(), a.without_resources_hex()),
                (b.hash_hex(), b.without_resources_hex()),
                "{as_numbers}"
            );
        }
        assert!(rewritten >= 100, "{rewritten} quantities rewritten");
    }

    #[test]
    fn places_are_lines_and_columns() {
        assert_eq!(line_and_column(b"{\n  \"a\": 1.50}", 9), (2, 8));
        assert_eq!(line_and_column(b"[1.50]", 1), (1, 2));
    }
}
