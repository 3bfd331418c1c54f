//! YAML read into the JSON that Go's YAML reader turns it into.
//!
//! kubectl and the kubelet's file source convert YAML with `sigs.k8s.io/yaml` (`YAMLToJSON`):
//! yaml.v2 resolves each plain scalar by YAML 1.1 rules, and `encoding/json` writes the result.
//! `serde_yaml_ng` resolves by YAML 1.2 rules, so the same text can mean something else: plain
//! `yes` is `true` there and a string here, `010` is 8 there (octal) and a string here, `1_000`
//! is 1000 there, `1e3` is written `1000` there. [`GoYaml`] builds the `serde_json::Value` from
//! serde_yaml_ng's events but resolves every plain scalar as yaml.v2's `resolve` does and writes
//! numbers as `encoding/json` does, so a container reads as the kubelet reads it. Where it cannot
//! tell (a scalar whose quoting it cannot see, a tag, a map key Go would turn into another
//! string, a value Go cannot write as JSON), it refuses rather than guesses.

use std::borrow::Cow;
use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, MapAccess, Visitor};

use crate::kubelet::gofloat::float64_text;
use crate::kubelet::once_keys::value_visits;
use crate::kubelet::spelling::zero_negative_zeros;
use serde_json::{Map, Value};

/// Deserializes one YAML document (from serde_yaml_ng, over `text`) into the JSON Go makes of it.
#[derive(Debug, Clone, Copy)]
pub struct GoYaml<'t> {
    /// The text the deserializer reads, to tell plain scalars from quoted ones.
    pub text: &'t [u8],
}

/// What yaml.v2 makes of a plain scalar (`resolve` with no tag).
#[derive(Debug, Clone, Copy, PartialEq)]
enum Resolved {
    Null,
    Bool(bool),
    Int(i64),
    Uint(u64),
    Float(f64),
    Str,
}

/// yaml.v2's `resolve` for an untagged plain scalar, as `interface{}` receives it. Its two other
/// steps come to the same without being taken: a timestamp (`2001-12-14`, four digits and a
/// `-`) stays a string there and parses as no number here, and its `0b`/`-0b` fallback reads
/// what Go's base-0 `ParseInt`/`ParseUint` already read.
fn resolve(s: &str) -> Resolved {
    match s {
        "y" | "Y" | "yes" | "Yes" | "YES" | "true" | "True" | "TRUE" | "on" | "On" | "ON" => {
            return Resolved::Bool(true)
        }
        "n" | "N" | "no" | "No" | "NO" | "false" | "False" | "FALSE" | "off" | "Off" | "OFF" => {
            return Resolved::Bool(false)
        }
        "" | "~" | "null" | "Null" | "NULL" => return Resolved::Null,
        ".nan" | ".NaN" | ".NAN" => return Resolved::Float(f64::NAN),
        ".inf" | ".Inf" | ".INF" | "+.inf" | "+.Inf" | "+.INF" => {
            return Resolved::Float(f64::INFINITY)
        }
        "-.inf" | "-.Inf" | "-.INF" => return Resolved::Float(f64::NEG_INFINITY),
        _ => {}
    }
    match s.as_bytes()[0] {
        b'.' => match go_parse_float(s) {
            Some(f) => Resolved::Float(f),
            None => Resolved::Str,
        },
        b'0'..=b'9' | b'+' | b'-' => {
            // yaml.v2 drops every `_` first.
            let plain = without_underscores(s);
            if let Some(i) = go_parse_int(&plain) {
                Resolved::Int(i)
            } else if let Some(u) = go_parse_uint(&plain) {
                Resolved::Uint(u)
            } else if let Some(f) = go_parse_float(&plain) {
                Resolved::Float(f)
            } else {
                Resolved::Str
            }
        }
        _ => Resolved::Str,
    }
}

fn without_underscores(s: &str) -> Cow<'_, str> {
    if s.contains('_') {
        s.replace('_', "").into()
    } else {
        s.into()
    }
}

/// `^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$`, yaml.v2's `yamlStyleFloat`.
fn yaml_style_float(s: &str) -> bool {
    let b = s.as_bytes();
    let mut i = usize::from(matches!(b.first(), Some(b'+' | b'-')));
    let run = |i: &mut usize| {
        let start = *i;
        while b.get(*i).is_some_and(u8::is_ascii_digit) {
            *i += 1;
        }
        *i - start
    };
    if b.get(i) == Some(&b'.') {
        i += 1;
        if run(&mut i) == 0 {
            return false;
        }
    } else {
        if run(&mut i) == 0 {
            return false;
        }
        if b.get(i) == Some(&b'.') {
            i += 1;
            run(&mut i);
        }
    }
    if matches!(b.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(b.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        if run(&mut i) == 0 {
            return false;
        }
    }
    i == b.len()
}

/// Go's `strconv.ParseFloat(s, 64)` for the decimal forms yaml.v2 hands it (an underscore is
/// allowed between digits): `None` where Go fails, out of range included.
fn go_parse_float(s: &str) -> Option<f64> {
    let b = s.as_bytes();
    let underscores_ok = b.iter().enumerate().all(|(i, &c)| {
        c != b'_'
            || (i > 0 && b[i - 1].is_ascii_digit() && b.get(i + 1).is_some_and(u8::is_ascii_digit))
    });
    let s = without_underscores(s);
    if !underscores_ok || !yaml_style_float(&s) {
        return None;
    }
    s.parse::<f64>().ok().filter(|f| f.is_finite())
}

/// The digits of `s` in `base`, at least one, within `u64`.
fn digits(s: &str, base: u32) -> Option<u64> {
    if s.is_empty() || s.starts_with(['+', '-']) {
        return None;
    }
    u64::from_str_radix(s, base).ok()
}

/// Go's `strconv.ParseUint(s, 0, 64)` (no sign): `0x`, `0o`, `0b` prefixes, a leading `0` for
/// octal.
fn go_parse_uint(s: &str) -> Option<u64> {
    let b = s.as_bytes();
    if b.first() != Some(&b'0') || b.len() == 1 {
        return digits(s, 10);
    }
    match b[1].to_ascii_lowercase() {
        b'x' if b.len() >= 3 => digits(&s[2..], 16),
        b'o' if b.len() >= 3 => digits(&s[2..], 8),
        b'b' if b.len() >= 3 => digits(&s[2..], 2),
        _ => digits(&s[1..], 8),
    }
}

/// Go's `strconv.ParseInt(s, 0, 64)`.
fn go_parse_int(s: &str) -> Option<i64> {
    let (negative, body) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let u = go_parse_uint(body)?;
    if negative {
        0i64.checked_sub_unsigned(u)
    } else {
        i64::try_from(u).ok()
    }
}

/// The JSON value the kubelet's decoder reads of a float64: `encoding/json`'s text of it
/// ([`float64_text`]) as serde_json reads that text. Go prints an integral float under 1e21 as
/// an integer literal, so a whole float up to `u64::MAX` is that integer here, as it is to Go's
/// integer fields; other floats stay floats (a field then refuses them where it needs a whole
/// number, and a quantity reads their Go text). NaN and infinities are errors there.
fn float_value<E: serde::de::Error>(f: f64) -> Result<Value, E> {
    if !f.is_finite() {
        return Err(E::custom(format_args!(
            "the YAML value {f} has no JSON form (Go's YAML-to-JSON conversion fails on it)"
        )));
    }
    serde_json::from_str(&float64_text(f)).map_err(E::custom)
}

fn resolved_value<E: serde::de::Error>(r: Resolved, s: &str) -> Result<Value, E> {
    Ok(match r {
        Resolved::Null => Value::Null,
        Resolved::Bool(b) => Value::Bool(b),
        Resolved::Int(i) => Value::Number(i.into()),
        Resolved::Uint(u) => Value::Number(u.into()),
        Resolved::Float(f) => return float_value(f),
        Resolved::Str => Value::String(s.to_string()),
    })
}

/// How a string scalar was written, as far as the text shows.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Written {
    Plain,
    Quoted,
    /// Not a slice of the text (escapes, a block scalar, folded lines).
    Unknown,
    /// After a tag (`!!str 010`), which decides the type itself.
    Tagged,
}

impl GoYaml<'_> {
    fn written(&self, s: &str) -> Written {
        let base = self.text.as_ptr() as usize;
        let at = s.as_ptr() as usize;
        if at < base || at + s.len() > base + self.text.len() {
            return Written::Unknown;
        }
        let (start, end) = (at - base, at - base + s.len());
        let before = start.checked_sub(1).map(|i| self.text[i]);
        let quoted = matches!(before, Some(q @ (b'\'' | b'"')) if self.text.get(end) == Some(&q));
        let node_start = if quoted { start - 1 } else { start };
        if self.tagged(node_start) {
            Written::Tagged
        } else if quoted {
            Written::Quoted
        } else {
            Written::Plain
        }
    }

    /// Whether the node starting at `at` has a tag among its properties: the tokens right
    /// before it, anchors (`&a`) and tags (`!!str`, `!x`), in any order.
    fn tagged(&self, mut at: usize) -> bool {
        loop {
            let head = &self.text[..at];
            let Some(last) = head.iter().rposition(|&c| c != b' ' && c != b'\t') else {
                return false;
            };
            let token_start = head[..=last]
                .iter()
                .rposition(|&c| matches!(c, b' ' | b'\t' | b'\n' | b'\r' | b'[' | b'{' | b','))
                .map_or(0, |i| i + 1);
            match head.get(token_start) {
                Some(b'!') => return true,
                Some(b'&') if token_start <= last => at = token_start,
                _ => return false,
            }
        }
    }

    /// The value of a string scalar: resolved as yaml.v2 resolves it when plain, a string when
    /// quoted, and refused when it cannot tell and the two would differ.
    fn scalar<E: serde::de::Error>(&self, s: &str, written: Written) -> Result<Value, E> {
        match written {
            Written::Quoted => Ok(Value::String(s.to_string())),
            Written::Plain => resolved_value(resolve(s), s),
            Written::Tagged => Err(E::custom(format_args!(
                "the YAML scalar {s:?} has a tag, which kubehash does not read"
            ))),
            Written::Unknown => match resolve(s) {
                Resolved::Str => Ok(Value::String(s.to_string())),
                _ => Err(E::custom(format_args!(
                    "cannot tell whether the YAML scalar {s:?} is plain (which Go's YAML reader \
                     would not read as a string) or quoted"
                ))),
            },
        }
    }
}

impl GoYaml<'_> {
    /// One YAML document read by `d`, as the kubelet's JSON decoder reads it: what
    /// `sigs.k8s.io/yaml` writes of it, a negative zero written `-0` ([`zero_negative_zeros`]).
    pub fn document<'de, D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        let mut value = self.deserialize(d)?;
        zero_negative_zeros(&mut value);
        Ok(value)
    }
}

impl<'de> DeserializeSeed<'de> for GoYaml<'_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for GoYaml<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any YAML value")
    }

    // Booleans, null and numbers as serde_yaml_ng resolves them are what yaml.v2 makes of the
    // same plain scalars (`true`/`True`/`TRUE`, `~`/`null`, decimal and 0x/0o/0b integers,
    // decimal floats); the scalars they differ on reach `visit_borrowed_str` as strings.
    value_visits!();

    fn visit_i128<E: serde::de::Error>(self, v: i128) -> Result<Value, E> {
        Err(E::custom(format_args!(
            "the YAML integer {v} is out of range"
        )))
    }

    fn visit_u128<E: serde::de::Error>(self, v: u128) -> Result<Value, E> {
        Err(E::custom(format_args!(
            "the YAML integer {v} is out of range"
        )))
    }

    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Value, E> {
        float_value(v)
    }

    fn visit_borrowed_str<E: serde::de::Error>(self, v: &'de str) -> Result<Value, E> {
        self.scalar(v, self.written(v))
    }

    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Value, E> {
        self.scalar(v, self.written(v))
    }

    fn visit_string<E: serde::de::Error>(self, v: String) -> Result<Value, E> {
        self.scalar(&v, Written::Unknown)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key_seed(Key(self))? {
            let value = map.next_value_seed(self)?;
            // yaml.v2 outside strict mode keeps a repeated key's last value (at the first
            // key's place here, which no reader of a map looks at).
            out.insert(key, value);
        }
        Ok(Value::Object(out))
    }
}

/// A map key as `YAMLToJSON` writes it: a string as it is, a key yaml.v2 resolves to a bool or
/// an integer as Go prints it; others (null, floats, unsigned) are refused.
#[derive(Clone, Copy)]
struct Key<'t>(GoYaml<'t>);

impl<'de> DeserializeSeed<'de> for Key<'_> {
    type Value = String;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<String, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for Key<'_> {
    type Value = String;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a YAML map key")
    }

    fn visit_borrowed_str<E: serde::de::Error>(self, v: &'de str) -> Result<String, E> {
        self.key(v, self.0.written(v))
    }

    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<String, E> {
        self.key(v, self.0.written(v))
    }
}

impl Key<'_> {
    fn key<E: serde::de::Error>(self, v: &str, written: Written) -> Result<String, E> {
        let not_string = || {
            E::custom(format_args!(
                "the YAML map key {v:?} is not a string to Go's YAML reader, and kubehash does \
                 not guess the text it would give it"
            ))
        };
        match written {
            Written::Quoted => Ok(v.to_string()),
            Written::Tagged => Err(E::custom(format_args!(
                "the YAML map key {v:?} has a tag, which kubehash does not read"
            ))),
            _ if v == "<<" => Err(E::custom(
                "a YAML merge key (<<): Go's YAML reader merges the mapping in, which kubehash \
                 does not",
            )),
            Written::Plain => match resolve(v) {
                Resolved::Str => Ok(v.to_string()),
                Resolved::Bool(b) => Ok(b.to_string()),
                Resolved::Int(i) => Ok(i.to_string()),
                _ => Err(not_string()),
            },
            Written::Unknown => match resolve(v) {
                Resolved::Str => Ok(v.to_string()),
                _ => Err(not_string()),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn read(text: &str) -> Result<Value, String> {
        let de = serde_yaml_ng::Deserializer::from_str(text);
        GoYaml {
            text: text.as_bytes(),
        }
        .document(de)
        .map_err(|e| e.to_string())
    }

    /// Each plain scalar, and what `sigs.k8s.io/yaml` 1.3.0 (yaml.v2 2.4.0, Go 1.19) gives for
    /// `v: <scalar>`, recorded from the Go program.
    #[test]
    fn plain_scalars_read_as_go_reads_them() {
        for (scalar, go) in [
            ("010", json!(8)),
            ("yes", json!(true)),
            ("1_000", json!(1000)),
            ("0b101", json!(5)),
            ("~", json!(null)),
            ("Null", json!(null)),
            ("1e3", json!(1000)),
            (".5", json!(0.5)),
            ("+1", json!(1)),
            ("0x1F", json!(31)),
            ("on", json!(true)),
            ("1.0", json!(1)),
            ("\"010\"", json!("010")),
            ("2001-12-14", json!("2001-12-14")),
            ("0o10", json!(8)),
            ("-0", json!(0)),
            ("1:20", json!("1:20")),
            ("08", json!(8)),
            ("'yes'", json!("yes")),
            ("N", json!(false)),
            ("Off", json!(false)),
            ("0X1f", json!(31)),
            ("-010", json!(-8)),
            ("1e-400", json!(0)),
            ("1e400", json!("1e400")),
            ("0x", json!("0x")),
            ("00", json!(0)),
            ("+0x10", json!(16)),
            ("1_0.5", json!(10.5)),
            ("9223372036854775807", json!(9_223_372_036_854_775_807_i64)),
            ("9223372036854775808", json!(9_223_372_036_854_775_808_u64)),
            ("-0b11", json!(-3)),
            ("image:1", json!("image:1")),
            ("yes please", json!("yes please")),
            (".5_0", json!(0.5)),
            ("1__0", json!(10)),
            (".5__0", json!(".5__0")),
            ("-.5", json!(-0.5)),
            ("1.", json!(1)),
            ("+.5e3", json!(500)),
            ("0b", json!("0b")),
            ("0b2", json!("0b2")),
            ("-0b", json!("-0b")),
            ("0o8", json!("0o8")),
            ("1e+5", json!(100_000)),
            ("12e", json!("12e")),
            ("0.0", json!(0)),
            ("_1", json!("_1")),
            ("1_", json!(1)),
            ("0x_1F", json!(31)),
            ("+", json!("+")),
            (".", json!(".")),
            ("..5", json!("..5")),
            (
                "2001-12-14T21:59:43.10-05:00",
                json!("2001-12-14T21:59:43.10-05:00"),
            ),
            ("2001-1", json!("2001-1")),
            ("1.5.5", json!("1.5.5")),
            ("tRue", json!("tRue")),
            ("o", json!("o")),
            ("y", json!(true)),
            ("0xFFFFFFFFFFFFFFFF", json!(u64::MAX)),
            ("-0x8000000000000000", json!(i64::MIN)),
        ] {
            let got = read(&format!("v: {scalar}\n")).map(|v| v["v"].clone());
            assert_eq!(got, Ok(go), "{scalar}");
        }
    }

    /// A float reaches the kubelet's JSON decoder as Go writes it: an integer literal from its
    /// shortest digits when it is whole and under 1e21 (`100000000000000000000`,
    /// `9007199254740992000`), read as an integer where serde_json keeps one; `-0`, which
    /// every integer field reads as 0, and a quantity as the text `-0`.
    #[test]
    fn a_float_is_what_its_go_text_reads_as() {
        for (scalar, go) in [
            ("1e20", json!(1e20)),
            ("9.007199254740992e18", json!(9_007_199_254_740_992_000_u64)),
            ("1.8446744073709552e19", json!(18_446_744_073_709_551_616.0)),
            // `-9223372036854776000`: past `i64::MIN`, a float.
            ("-9.2233720368547758e18", json!(-9.223_372_036_854_776e18)),
            ("-0.0", json!(0)),
            ("0.5", json!(0.5)),
            ("1e21", json!(1e21)),
        ] {
            assert_eq!(
                read(&format!("v: {scalar}\n")).unwrap()["v"],
                go,
                "{scalar}"
            );
        }
        let cpu = read("limits: {cpu: -0.0}\ndivisor: -0.0\n").unwrap();
        for q in [&cpu["limits"]["cpu"], &cpu["divisor"]] {
            assert!(
                q.as_f64().is_some_and(|f| f == 0.0 && f.is_sign_negative()),
                "{cpu}"
            );
        }
        assert_eq!(
            read("v: 9007199254740991.0\n").unwrap()["v"],
            json!(9_007_199_254_740_991_i64)
        );
        // yaml.v2 reads an integer literal as an integer, whatever its size within 64 bits.
        assert_eq!(
            read("v: 9007199254740993\n").unwrap()["v"],
            json!(9_007_199_254_740_993_u64)
        );
    }

    #[test]
    fn what_go_cannot_write_or_kubehash_cannot_tell_is_refused() {
        for text in [
            "v: .inf\n",
            "v: -.Inf\n",
            "v: .nan\n",
            "v: !!str 010\n",
            "v: \"0\\x31\"\n",
            "v: |-\n  010\n",
            "~: a\n",
            "<<: {a: 1}\n",
            "v: [!!str 010]\n",
            "1.5: a\n",
            "v: 99999999999999999999999\n",
            "v: 18446744073709551616\n",
            "v: -9223372036854775809\n",
        ] {
            assert!(read(text).is_err(), "{text}: {:?}", read(text));
        }
        // What those forms hold when Go would read it as a string anyway is read.
        assert_eq!(read("v: \"a\\tb\"\n").unwrap()["v"], "a\tb");
        assert_eq!(read("v: |\n  010\n").unwrap()["v"], "010\n");
        for tagged in [
            "v: !!str abc\n",
            "v: !!str &x 08\n",
            "v: &x !!str 08\n",
            "v: [!!str &x , 0]\n",
            "v: !!str \"5\"\n",
            "!!int inf: x\n",
        ] {
            assert!(read(tagged).is_err(), "{tagged}");
        }
        // An anchor alone does not change how a scalar resolves.
        assert_eq!(read("v: &x 08\n").unwrap()["v"], 8);
    }

    #[test]
    fn keys_lists_anchors_and_repeats() {
        let v = read(
            "yes: 1\n80: http\n'on': q\n010: o\nlist: [010, 'x', y]\nbase: &b {cpu: 010}\ncopy: *b\nk: 1\nk: 2\n",
        )
        .unwrap();
        assert_eq!(
            v,
            json!({"true": 1, "80": "http", "on": "q", "8": "o", "list": [8, "x", true],
                   "base": {"cpu": 8}, "copy": {"cpu": 8}, "k": 2})
        );
    }
}
