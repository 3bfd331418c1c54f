//! A Go `encoding/json`-compatible writer for the value tree (what `json.Marshal(container)`
//! produces in kubelet 1.16 – 1.30, and `json.Marshal(map[string]string{…})` in 1.31 +), and the
//! input clean-up that makes serde read strings the way Go's decoder does.
//!
//! The upstream rules mirrored here:
//! * struct fields in declaration order; an embedded struct without a JSON name has its fields
//!   promoted in place; `omitempty` drops `false`, `0`, `""` and nil pointers/slices/maps, never a
//!   struct (so `"resources":{}` and a zero `"divisor":"0"` stay);
//! * map keys sorted bytewise;
//! * strings: `"` and `\` escaped, `\n` `\r` `\t` `\b` `\f` short escapes (Go ≥ 1.22 writes `\b`
//!   and `\f`; older toolchains wrote `\u0008`, `\u000c`), other control characters and the
//!   HTML characters `<`, `>`, `&` as `\u00XX`, U+2028 and U+2029 as `\u2028` / `\u2029`,
//!   everything else as UTF-8;
//! * `resource.Quantity` marshals as its cached string or its canonical form;
//!   `intstr.IntOrString` as a number or a string according to its type.
//!
//! Invalid UTF-8 never reaches the writer. Go's decoder turns each invalid input byte into U+FFFD
//! before the kubelet ever marshals the struct ([`crate::source::goread`] does the
//! same before serde parses), so the strings Go marshals are valid UTF-8, and Go writes them as raw UTF-8 just as
//! this writer does. (Go's encoder writes `\ufffd` only for invalid bytes, which it never gets.)
//!
//! ```
//! use kubehash::kubelet::gojson::write_string;
//! let mut out = Vec::new();
//! write_string("a<b>&\u{2028}\n", &mut out);
//! assert_eq!(out, br#""a\u003cb\u003e\u0026\u2028\n""#);
//! ```

use std::ops::Range;

use crate::kubelet::bytescan::find_go_escape;
use crate::kubelet::decode::{zero, Arena, IntOrString, Val};
use crate::kubelet::schema::{Field, Kind, Schema, TypeId};
use crate::kubelet::sink::Sink;
use crate::kubelet::spew::put_int;

/// Writes `json.Marshal(container)`. With `without_resources`, the root's `Resources` field is
/// written as its zero value (the kubelet's `hashWithoutResources`, 1.27 – 1.30).
pub fn write_container<S: Sink>(schema: &Schema, v: &Val, without_resources: bool, out: &mut S) {
    let skip = if without_resources {
        schema.root_field("Resources")
    } else {
        None
    };
    out.put(b"{");
    let mut first = true;
    write_fields(schema, schema.root(), v, skip, None, &mut first, out);
    out.put(b"}");
}

/// [`write_container`] of the whole container (`hash`), also giving where in `out` the root's
/// `resources` value went, for sinks that know positions. The `hashWithoutResources` document
/// is the same bytes with that value replaced by [`write_zero_resources`]: the two marshal the
/// same struct but for that one field, which is never omitted (a struct is never empty).
pub fn write_container_marking<S: Sink>(
    schema: &Schema,
    v: &Val,
    out: &mut S,
) -> Option<Range<usize>> {
    let mut at = None;
    let mark = schema.root_field("Resources").map(|i| (i, &mut at));
    out.put(b"{");
    let mut first = true;
    write_fields(schema, schema.root(), v, None, mark, &mut first, out);
    out.put(b"}");
    at
}

/// The root's `resources` value as `hashWithoutResources` marshals it: the zero value.
pub fn write_zero_resources<S: Sink>(schema: &Schema, out: &mut S) {
    let Some(i) = schema.root_field("Resources") else {
        return;
    };
    let Kind::Struct(fields) = &schema.ty(schema.root()).kind else {
        return;
    };
    if let Some(f) = fields.get(i) {
        write_value(schema, f.ty, &zero(schema, f.ty, &Arena::new()), out);
    }
}

/// Writes what encoding/json writes for a (not embedded) struct field holding its zero value,
/// `"key":zero`, or nothing when `omitempty` drops it, as `write_fields` does for each field.
pub fn write_zero_field<S: Sink>(schema: &Schema, f: &Field, out: &mut S) {
    let arena = Arena::new();
    let value = zero(schema, f.ty, &arena);
    if f.omitempty && is_empty(&value) {
        return;
    }
    out.put(b"\"");
    out.put(f.json.as_bytes());
    out.put(b"\":");
    write_value(schema, f.ty, &value, out);
}

/// How `json.Marshal(map[string]string{"name": …, "image": …})` always begins: up to the
/// image's contents.
pub const NAME_IMAGE_OPEN: &[u8] = b"{\"image\":\"";

/// Writes `json.Marshal(map[string]string{"name": name, "image": image})` (keys sorted).
pub fn write_name_image<S: Sink>(name: &str, image: &str, out: &mut S) {
    out.put(NAME_IMAGE_OPEN);
    write_name_image_rest(name, image, out);
}

/// What [`write_name_image`] writes after [`NAME_IMAGE_OPEN`].
pub fn write_name_image_rest<S: Sink>(name: &str, image: &str, out: &mut S) {
    write_string_rest(image, out);
    out.put(b",\"name\":");
    write_string(name, out);
    out.put(b"}");
}

/// The fields of struct `ty`; the one at `zeroed` is written as its zero value, and where the
/// value of the one at `mark` goes is recorded (both count this struct's own fields).
fn write_fields<S: Sink>(
    schema: &Schema,
    ty: TypeId,
    v: &Val,
    zeroed: Option<usize>,
    mut mark: Option<(usize, &mut Option<Range<usize>>)>,
    first: &mut bool,
    out: &mut S,
) {
    let (Kind::Struct(fields), Val::Struct(vals)) = (&schema.ty(ty).kind, v.resolved()) else {
        debug_assert!(false, "write_fields on a non-struct");
        return;
    };
    for (i, (f, item)) in fields.iter().zip(*vals).enumerate() {
        let (arena, zero_value);
        let item = if zeroed == Some(i) {
            arena = Arena::new();
            zero_value = zero(schema, f.ty, &arena);
            &zero_value
        } else {
            item
        };
        if f.inline {
            write_fields(schema, f.ty, item, None, None, first, out);
            continue;
        }
        if f.omitempty && is_empty(item) {
            continue;
        }
        if !*first {
            out.put(b",");
        }
        *first = false;
        out.put(b"\"");
        out.put(f.json.as_bytes()); // JSON names are plain ASCII identifiers
        out.put(b"\":");
        let start = out.position();
        write_value(schema, f.ty, item, out);
        if let Some((_, at)) = mark.as_mut().filter(|(m, _)| *m == i) {
            **at = start.zip(out.position()).map(|(s, e)| s..e);
        }
    }
}

/// Go's `isEmptyValue` for the kinds a container has (structs are never empty).
fn is_empty(v: &Val) -> bool {
    match v {
        Val::Str(s) => s.is_empty(),
        Val::Bool(b) => !b,
        Val::Int(i) => *i == 0,
        Val::Nil => true,
        Val::List(l) => l.is_empty(),
        Val::Map(m) => m.is_empty(),
        Val::Ptr(_) | Val::Struct(_) | Val::Quantity(_) | Val::IntOrString(_) => false,
        Val::Shared(inner) => is_empty(inner),
    }
}

fn write_value<S: Sink>(schema: &Schema, ty: TypeId, v: &Val, out: &mut S) {
    // A shared value has one text under every type of its shape.
    if let Val::Shared(inner) = v {
        let key = std::ptr::from_ref(*inner) as usize;
        return out.shared(key, &mut |out| write_value(schema, ty, inner, out));
    }
    let t = schema.ty(ty);
    match (&t.kind, v) {
        (_, Val::Nil) => out.put(b"null"),
        (_, Val::Str(s)) => write_string(s, out),
        (_, Val::Bool(b)) => out.put(if *b { b"true" } else { b"false" }),
        (_, Val::Int(i)) => put_int(*i, out),
        (Kind::Ptr(elem), Val::Ptr(inner)) => write_value(schema, *elem, inner, out),
        (Kind::Slice(elem), Val::List(items)) => {
            out.put(b"[");
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.put(b",");
                }
                write_value(schema, *elem, item, out);
            }
            out.put(b"]");
        }
        (Kind::Map { value }, Val::Map(entries)) => {
            out.put(b"{");
            for (i, (k, item)) in entries.iter().enumerate() {
                if i > 0 {
                    out.put(b",");
                }
                write_string(k, out);
                out.put(b":");
                write_value(schema, *value, item, out);
            }
            out.put(b"}");
        }
        (Kind::Struct(_), Val::Struct(_)) => {
            out.put(b"{");
            let mut first = true;
            write_fields(schema, ty, v, None, None, &mut first, out);
            out.put(b"}");
        }
        (_, Val::Quantity(q)) => write_string(&q.json_text(), out),
        (_, Val::IntOrString(IntOrString::Int(i))) => put_int(i64::from(*i), out),
        (_, Val::IntOrString(IntOrString::Str(s))) => write_string(s, out),
        (_, other) => debug_assert!(false, "value {other:?} does not fit type {}", t.name),
    }
}

/// What to do with each byte of a string: 0 = copy, b'u' = `\u00XX`, else the short escape letter.
static ESCAPE: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut b = 0;
    while b < 0x20 {
        t[b] = b'u';
        b += 1;
    }
    t[b'\n' as usize] = b'n';
    t[b'\r' as usize] = b'r';
    t[b'\t' as usize] = b't';
    t[0x08] = b'b';
    t[0x0c] = b'f';
    t[b'"' as usize] = b'"';
    t[b'\\' as usize] = b'\\';
    t[b'<' as usize] = b'u';
    t[b'>' as usize] = b'u';
    t[b'&' as usize] = b'u';
    t
};

const HEX: &[u8; 16] = b"0123456789abcdef";

/// Writes `s` as a JSON string the way Go's `encodeState.string` does with HTML escaping on.
pub fn write_string<S: Sink>(s: &str, out: &mut S) {
    out.put(b"\"");
    write_string_rest(s, out);
}

/// What [`write_string`] writes after the opening quote.
fn write_string_rest<S: Sink>(s: &str, out: &mut S) {
    let b = s.as_bytes();
    let mut start = 0;
    let mut i = 0;
    // Runs of bytes copied as they are, up to the next one that may not be.
    while let Some(k) = find_go_escape(&b[i..]) {
        i += k;
        let c = b[i];
        let esc = ESCAPE[usize::from(c)];
        if esc != 0 {
            out.put(&b[start..i]);
            match esc {
                b'u' => out.put(&[
                    b'\\',
                    b'u',
                    b'0',
                    b'0',
                    HEX[usize::from(c >> 4)],
                    HEX[usize::from(c & 15)],
                ]),
                letter => out.put(&[b'\\', letter]),
            }
            i += 1;
            start = i;
        } else if b.get(i + 1) == Some(&0x80) && matches!(b.get(i + 2), Some(0xA8 | 0xA9)) {
            // U+2028 LINE SEPARATOR, U+2029 PARAGRAPH SEPARATOR
            out.put(&b[start..i]);
            out.put(if b[i + 2] == 0xA8 {
                b"\\u2028"
            } else {
                b"\\u2029"
            });
            i += 3;
            start = i;
        } else {
            // 0xE2 starting another character.
            i += 1;
        }
    }
    out.put(&b[start..]);
    out.put(b"\"");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kubelet::schema::Schema;

    fn s(v: &str) -> String {
        let mut out = Vec::new();
        write_string(v, &mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn go_string_escaping() {
        assert_eq!(s("plain"), r#""plain""#);
        assert_eq!(s("a\"b\\c"), r#""a\"b\\c""#);
        assert_eq!(s("\u{0}\u{1f}\u{7f}"), "\"\\u0000\\u001f\u{7f}\"");
        assert_eq!(s("\n\r\t\u{8}\u{c}"), r#""\n\r\t\b\f""#);
        assert_eq!(
            s("<a href='x'>&amp;</a>"),
            r#""\u003ca href='x'\u003e\u0026amp;\u003c/a\u003e""#
        );
        assert_eq!(s("line\u{2028}para\u{2029}"), r#""line\u2028para\u2029""#);
        assert_eq!(s("é 日本 🚀 \u{200b}"), "\"é 日本 🚀 \u{200b}\"");
        assert_eq!(s("/"), r#""/""#);
    }

    /// The writer before it copied runs: a byte at a time through the same table.
    fn bytewise(v: &str) -> String {
        let b = v.as_bytes();
        let mut out = vec![b'"'];
        let mut i = 0;
        while i < b.len() {
            let c = b[i];
            match ESCAPE[usize::from(c)] {
                0 if c == 0xE2
                    && b.get(i + 1) == Some(&0x80)
                    && matches!(b.get(i + 2), Some(0xA8 | 0xA9)) =>
                {
                    out.extend_from_slice(if b[i + 2] == 0xA8 {
                        b"\\u2028"
                    } else {
                        b"\\u2029"
                    });
                    i += 3;
                    continue;
                }
                0 => out.push(c),
                b'u' => out.extend_from_slice(format!("\\u00{c:02x}").as_bytes()),
                letter => out.extend_from_slice(&[b'\\', letter]),
            }
            i += 1;
        }
        out.push(b'"');
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn the_run_finder_stops_at_every_byte_the_table_escapes() {
        for c in 0..=255u8 {
            let stops = find_go_escape(&[c]).is_some();
            assert_eq!(stops, ESCAPE[usize::from(c)] != 0 || c == 0xE2, "{c:#x}");
        }
    }

    proptest::proptest! {
        #[test]
        fn runs_are_written_as_a_byte_at_a_time(
            chars in proptest::collection::vec(
                proptest::prop_oneof![
                    8 => proptest::char::range('a', 'z'),
                    4 => proptest::sample::select(vec![
                        '"', '\\', '<', '>', '&', '\n', '\u{0}', '\u{1f}', '\u{7f}', '/',
                        '\u{2028}', '\u{2029}', '\u{2027}', '\u{202a}', '\u{20ac}', '\u{2000}',
                        'é', '日', '🚀',
                    ]),
                    1 => proptest::arbitrary::any::<char>(),
                ],
                0..70,
            ),
        ) {
            let v: String = chars.into_iter().collect();
            proptest::prop_assert_eq!(s(&v), bytewise(&v));
        }
    }

    fn marshal(version: &str, json: serde_json::Value, without_resources: bool) -> String {
        let schema = Schema::for_version(version.parse().unwrap()).unwrap();
        let arena = Arena::new();
        let v = crate::kubelet::decode::decode_container(schema, &json, "", &arena).unwrap();
        let mut out = Vec::new();
        write_container(schema, &v, without_resources, &mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn embedded_fields_are_promoted_and_omitempty_follows_go() {
        let j = marshal(
            "1.30",
            serde_json::json!({"name": "a", "readinessProbe": {"exec": {"command": ["x"]}, "periodSeconds": 0},
                "env": [{"name": "D", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu"}}}],
                "securityContext": {}}),
            false,
        );
        assert_eq!(
            j,
            r#"{"name":"a","env":[{"name":"D","valueFrom":{"resourceFieldRef":{"resource":"limits.cpu","divisor":"0"}}}],"resources":{},"readinessProbe":{"exec":{"command":["x"]}},"securityContext":{}}"#
        );
    }

    #[test]
    fn resources_are_zeroed_for_hash_without_resources() {
        let c = serde_json::json!({"name": "a", "resources": {"requests": {"memory": "64Mi", "cpu": "2"}}});
        assert_eq!(
            marshal("1.30", c.clone(), false),
            r#"{"name":"a","resources":{"requests":{"cpu":"2","memory":"64Mi"}}}"#
        );
        assert_eq!(marshal("1.30", c, true), r#"{"name":"a","resources":{}}"#);
    }

    #[test]
    fn name_image_map_has_sorted_keys() {
        let mut out = Vec::new();
        write_name_image("test_container", "foo/image:v1", &mut out);
        assert_eq!(out, br#"{"image":"foo/image:v1","name":"test_container"}"#);
    }
}
