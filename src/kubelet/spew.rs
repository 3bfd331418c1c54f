//! A go-spew `%#v` writer, without reflection, for the config the kubelet uses
//! (`spew.ConfigState{Indent: " ", SortKeys: true, DisableMethods: true, SpewKeys: true}`,
//! `printer.Fprintf(hasher, "%#v", obj)` in `pkg/util/hash.DeepHashObject`).
//!
//! The rules of go-spew's `formatState` that matter here:
//! * a value's Go type is printed as `(T)` before it, except for slice elements, map keys and
//!   map values, and the value a pointer points to (`ignoreNextType`);
//! * a non-nil pointer prints `(*T)` and then the value; a nil one `(*T)<nil>`; inside a slice
//!   or map `<*>` / `<nil>`;
//! * structs print `{Field:value Field:value}` with every field, exported or not, nil or not;
//! * slices `[a b]`, maps `map[k:v k:v]` with keys sorted, nil ones `<nil>`;
//! * strings are written raw (no quoting or escaping), integers in decimal, bools as
//!   `true`/`false`; `[]uint8` is a slice like any other: `([]uint8)[123 34 …]`.
//! * `Indent` is unused by `%v` formatting; `DisableMethods` means no `String()` calls.
//!
//! ```
//! use kubehash::kubelet::{decode, schema::Schema, spew};
//! let s = Schema::for_version("1.8".parse().unwrap()).unwrap();
//! let json = serde_json::json!({"name": "a", "image": "b"});
//! let arena = decode::Arena::new();
//! let v = decode::decode_container(s, &json, "", &arena).unwrap();
//! let mut text = Vec::new();
//! spew::write_container(s, &v, &mut text);
//! assert!(text.starts_with(b"(v1.Container){Name:(string)a Image:(string)b Command:([]string)<nil>"));
//! ```

use crate::kubelet::decode::{zero, Arena, IntOrString, Val};
use crate::kubelet::quantity::QuantityRef;
use crate::kubelet::schema::{Field, Kind, Schema, TypeId};
use crate::kubelet::sink::Sink;

/// Writes `%#v` of a `v1.Container` value (the hashed text for kubelet ≤ 1.15).
pub fn write_container<S: Sink>(schema: &Schema, v: &Val, out: &mut S) {
    write(schema, schema.root(), v, Typed::Print, out);
}

/// Writes what `%#v` prints for a struct field holding its zero value (`Name:(type)zero`),
/// as the struct case of `write` does for each field.
pub fn write_zero_field<S: Sink>(schema: &Schema, f: &Field, out: &mut S) {
    out.put(f.name.as_bytes());
    out.put(b":");
    write(
        schema,
        f.ty,
        &zero(schema, f.ty, &Arena::new()),
        Typed::Print,
        out,
    );
}

pub(crate) fn type_prefix<S: Sink>(name: &str, out: &mut S) {
    out.put(b"(");
    out.put(name.as_bytes());
    out.put(b")");
}

/// What is printed of a value's type before the value.
#[derive(Clone, Copy)]
pub(crate) enum Typed {
    /// `(type)`, or for a pointer `(*type)`: a value printed with `%#v`.
    Print,
    /// Nothing, and `<*>` for a non-nil pointer: an element of a slice or map, which go-spew
    /// prints with its type ignored.
    Ignored,
    /// Nothing: a struct field, whose type its head (`Schema::spew_heads`) already printed.
    Printed,
}

pub(crate) fn write<S: Sink>(schema: &Schema, ty: TypeId, v: &Val, typed: Typed, out: &mut S) {
    // A shared value has one text under every type of its shape (and the same `typed`).
    if let Val::Shared(inner) = v {
        let key = (std::ptr::from_ref(*inner) as usize) << 2 | typed as usize;
        return out.shared(key, &mut |out| write(schema, ty, inner, typed, out));
    }
    let t = schema.ty(ty);
    if let Kind::Ptr(elem) = t.kind {
        // formatPtr: the type (or `<*>`), then the pointee without its type.
        match (v, typed) {
            (Val::Ptr(inner), _) => {
                match typed {
                    Typed::Print => type_prefix(&t.name, out),
                    Typed::Ignored => out.put(b"<*>"),
                    Typed::Printed => {}
                }
                write(schema, elem, inner, Typed::Ignored, out);
            }
            (_, Typed::Print) => {
                type_prefix(&t.name, out);
                out.put(b"<nil>");
            }
            _ => out.put(b"<nil>"),
        }
        return;
    }
    if let Typed::Print = typed {
        type_prefix(&t.name, out);
    }
    match (&t.kind, v) {
        (_, Val::Nil) => out.put(b"<nil>"),
        (_, Val::Str(s)) => out.put(s.as_bytes()),
        (_, Val::Bool(b)) => out.put(if *b { b"true" } else { b"false" }),
        (_, Val::Int(i)) => put_int(*i, out),
        (Kind::Slice(elem), Val::List(items)) => {
            let _ = sequence(b"[", items.iter(), out, |item, out| {
                write(schema, *elem, item, Typed::Ignored, out);
                Some(())
            });
        }
        (Kind::Map { value }, Val::Map(entries)) => {
            let _ = sequence(b"map[", entries.iter(), out, |(k, item), out| {
                map_key(k, out);
                write(schema, *value, item, Typed::Ignored, out);
                Some(())
            });
        }
        (Kind::Struct(fields), Val::Struct(vals)) => {
            out.put(b"{");
            for ((f, head), item) in fields.iter().zip(schema.spew_heads(ty)).zip(*vals) {
                out.put(head);
                write(schema, f.ty, item, Typed::Printed, out);
            }
            out.put(b"}");
        }
        (_, Val::Quantity(q)) => write_quantity(q, out),
        (_, Val::IntOrString(v)) => write_int_or_string(*v, out),
        // The decoder builds values from the same schema, so shapes always agree.
        (_, other) => debug_assert!(false, "value {other:?} does not fit type {}", t.name),
    }
}

/// A slice's or a map's elements as go-spew prints them: `open` (`[` or `map[`), the elements
/// separated by spaces, `]`. Stops at the first element `item` refuses.
#[inline]
pub(crate) fn sequence<S: Sink, T>(
    open: &[u8],
    items: impl Iterator<Item = T>,
    out: &mut S,
    mut item: impl FnMut(T, &mut S) -> Option<()>,
) -> Option<()> {
    out.put(open);
    for (i, it) in items.enumerate() {
        if i > 0 {
            out.put(b" ");
        }
        item(it, out)?;
    }
    out.put(b"]");
    Some(())
}

/// What go-spew prints of a map entry before its value: the key (raw) and `:`.
#[inline]
pub(crate) fn map_key<S: Sink>(k: &str, out: &mut S) {
    out.put(k.as_bytes());
    out.put(b":");
}

/// The fields of `resource.Quantity` (`i`, `d`, `s`, `Format`; the same in 1.8 – 1.36).
pub(crate) fn write_quantity<S: Sink>(q: &QuantityRef, out: &mut S) {
    out.put(b"{i:(resource.int64Amount){value:(int64)");
    put_int(q.value, out);
    out.put(b" scale:(resource.Scale)");
    put_int(i64::from(q.scale), out);
    out.put(b"} d:(resource.infDecAmount){Dec:(*inf.Dec)");
    match &q.dec {
        None => out.put(b"<nil>"),
        Some(d) => {
            out.put(b"{unscaled:(big.Int){neg:(bool)");
            out.put(if d.negative { b"true" } else { b"false" });
            // big.nat is []big.Word; zero is a nil slice (nat.norm of nothing).
            out.put(b" abs:(big.nat)");
            let words = d.words;
            if words.is_empty() {
                out.put(b"<nil>");
            } else {
                out.put(b"[");
                for (i, w) in words.iter().enumerate() {
                    if i > 0 {
                        out.put(b" ");
                    }
                    out.put(itoa_u64(*w, &mut [0; 20]));
                }
                out.put(b"]");
            }
            out.put(b"} scale:(inf.Scale)");
            put_int(i64::from(d.scale), out);
            out.put(b"}");
        }
    }
    out.put(b"} s:(string)");
    out.put(q.s.as_bytes());
    out.put(b" Format:(resource.Format)");
    out.put(q.format.as_str().as_bytes());
    out.put(b"}");
}

/// `intstr.IntOrString{Type, IntVal, StrVal}`.
pub(crate) fn write_int_or_string<S: Sink>(v: IntOrString, out: &mut S) {
    let (ty, i, s) = match v {
        IntOrString::Int(i) => (b"0", i, ""),
        IntOrString::Str(s) => (b"1", 0, s),
    };
    out.put(b"{Type:(intstr.Type)");
    out.put(ty);
    out.put(b" IntVal:(int32)");
    put_int(i64::from(i), out);
    out.put(b" StrVal:(string)");
    out.put(s.as_bytes());
    out.put(b"}");
}

/// Decimal digits of `i`, written without allocating.
pub(crate) fn put_int<S: Sink>(i: i64, out: &mut S) {
    if i < 0 {
        out.put(b"-");
    }
    out.put(itoa_u64(i.unsigned_abs(), &mut [0; 20]));
}

fn itoa_u64(mut n: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    &buf[i..]
}

/// A sink adapter that prints the bytes it receives the way go-spew prints a `[]uint8`:
/// `([]uint8)[123 34 110 …]`. Go JSON output streams through it into the hasher, so the
/// JSON epochs never build the JSON text either.
pub struct ByteSlice<'s, S: Sink> {
    out: &'s mut S,
    first: bool,
}

/// " 0" … " 255": each byte's decimal text with its leading separator.
static DECIMAL: [([u8; 4], u8); 256] = {
    let mut t = [([0u8; 4], 0u8); 256];
    let mut b = 0;
    while b < 256 {
        let mut e = [b' ', 0, 0, 0];
        let len = if b >= 100 {
            e[1] = b'0' + (b / 100) as u8;
            e[2] = b'0' + (b / 10 % 10) as u8;
            e[3] = b'0' + (b % 10) as u8;
            4
        } else if b >= 10 {
            e[1] = b'0' + (b / 10) as u8;
            e[2] = b'0' + (b % 10) as u8;
            3
        } else {
            e[1] = b'0' + b as u8;
            2
        };
        t[b] = (e, len);
        b += 1;
    }
    t
};

impl<'s, S: Sink> ByteSlice<'s, S> {
    /// Starts `([]uint8)[` on `out`; call [`ByteSlice::close`] to write the `]`.
    pub fn open(out: &'s mut S) -> Self {
        out.put(b"([]uint8)[");
        ByteSlice { out, first: true }
    }

    /// Goes on with a `([]uint8)[…` whose first numbers `out` has had already.
    pub fn resume(out: &'s mut S) -> Self {
        ByteSlice { out, first: false }
    }

    pub fn close(self) {
        self.out.put(b"]");
    }
}

/// `([]uint8)[…]` of `bytes` appended to `out`, as [`ByteSlice`] writes it: each number is
/// written as four bytes from a table into a block on the stack (the next number overwrites what
/// is past its length), and each block goes to `out` at once.
pub fn byte_slice_into(bytes: &[u8], out: &mut Vec<u8>) {
    const BLOCK: usize = 256;
    out.extend_from_slice(b"([]uint8)[");
    if let Some((&first, rest)) = bytes.split_first() {
        // The first number has no leading space.
        let (text, len) = &DECIMAL[usize::from(first)];
        out.extend_from_slice(&text[1..usize::from(*len)]);
        out.reserve(4 * rest.len() + 1);
        let mut block = [0u8; 4 * BLOCK];
        for chunk in rest.chunks(BLOCK) {
            let mut w = 0;
            for &b in chunk {
                let (text, len) = &DECIMAL[usize::from(b)];
                // At most BLOCK - 1 numbers of at most 4 bytes came before: w + 4 <= 4 * BLOCK.
                block[w..w + 4].copy_from_slice(text);
                w += usize::from(*len);
            }
            out.extend_from_slice(&block[..w]);
        }
    }
    out.push(b']');
}

impl<S: Sink> Sink for ByteSlice<'_, S> {
    #[inline]
    fn put(&mut self, bytes: &[u8]) {
        let mut rest = bytes;
        if self.first {
            let Some((&b, tail)) = rest.split_first() else {
                return;
            };
            let (text, len) = &DECIMAL[usize::from(b)];
            self.out.put(&text[1..usize::from(*len)]);
            self.first = false;
            rest = tail;
        }
        for &b in rest {
            let (text, len) = &DECIMAL[usize::from(b)];
            self.out.put(&text[..usize::from(*len)]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_slice_into_writes_what_byte_slice_writes() {
        let long: Vec<u8> = (0..700u32).map(|i| (i * 37 % 256) as u8).collect();
        for bytes in [
            &b""[..],
            b"a",
            b"{\"a\":1}",
            &[0, 9, 10, 99, 100, 255],
            &long,
        ] {
            let mut want = Vec::new();
            let mut w = ByteSlice::open(&mut want);
            w.put(bytes);
            w.close();
            let mut got = b"x".to_vec();
            byte_slice_into(bytes, &mut got);
            assert_eq!(&got[1..], &want[..], "{bytes:?}");
        }
    }

    proptest::proptest! {
        #[test]
        fn byte_slice_into_writes_what_byte_slice_writes_for_any_bytes(
            bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..1100),
        ) {
            let mut want = Vec::new();
            let mut w = ByteSlice::open(&mut want);
            w.put(&bytes);
            w.close();
            let mut got = Vec::new();
            byte_slice_into(&bytes, &mut got);
            proptest::prop_assert_eq!(got, want);
        }
    }

    #[test]
    fn byte_slices_print_like_go_spew() {
        let mut out = Vec::new();
        let mut w = ByteSlice::open(&mut out);
        w.put(b"{\"");
        w.put(b"");
        w.put(&[0, 9, 255]);
        w.close();
        assert_eq!(out, b"([]uint8)[123 34 0 9 255]");
    }

    use crate::kubelet::decode::decode_container;
    use crate::kubelet::schema::Schema;

    fn spew(version: &str, json: serde_json::Value) -> String {
        let s = Schema::for_version(version.parse().unwrap()).unwrap();
        let arena = Arena::new();
        let v = decode_container(s, &json, "", &arena).unwrap();
        let mut out = Vec::new();
        write_container(s, &v, &mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn pointers_print_their_type_once_and_nil_ones_too() {
        let t = spew(
            "1.15",
            serde_json::json!({"name": "a", "securityContext": {"privileged": true, "runAsUser": 0}}),
        );
        assert!(t.contains("SecurityContext:(*v1.SecurityContext){Capabilities:(*v1.Capabilities)<nil> Privileged:(*bool)true "), "{t}");
        assert!(
            t.contains(" RunAsUser:(*int64)0 RunAsGroup:(*int64)<nil> "),
            "{t}"
        );
        assert!(t.contains("LivenessProbe:(*v1.Probe)<nil>"), "{t}");
    }

    #[test]
    fn map_keys_are_sorted_bytewise_and_values_print_without_type() {
        let t = spew(
            "1.15",
            serde_json::json!({"name": "a", "resources": {"limits": {"memory": "1Gi", "cpu": "1", "Zeta": "1"}}}),
        );
        let i = t.find("Limits:(v1.ResourceList)map[").unwrap();
        let tail = &t[i..];
        let (z, c, m) = (
            tail.find("Zeta:{i:").unwrap(),
            tail.find(" cpu:{i:").unwrap(),
            tail.find(" memory:{i:").unwrap(),
        );
        assert!(z < c && c < m, "{tail}");
    }

    #[test]
    fn embedded_structs_print_as_a_named_field() {
        // JSON flattens Probe.Handler (json:",inline"); go-spew prints it as a field.
        let t = spew(
            "1.15",
            serde_json::json!({"name": "a", "livenessProbe": {"tcpSocket": {"port": "http"}, "periodSeconds": 3}}),
        );
        assert!(t.contains("LivenessProbe:(*v1.Probe){Handler:(v1.Handler){Exec:(*v1.ExecAction)<nil> HTTPGet:(*v1.HTTPGetAction)<nil> TCPSocket:(*v1.TCPSocketAction){Port:(intstr.IntOrString){Type:(intstr.Type)1 IntVal:(int32)0 StrVal:(string)http} Host:(string)}} InitialDelaySeconds:(int32)0 TimeoutSeconds:(int32)0 PeriodSeconds:(int32)3 "), "{t}");
    }

    #[test]
    fn nil_and_empty_collections_print_nil() {
        let t = spew(
            "1.8",
            serde_json::json!({"name": "a", "args": [], "command": null}),
        );
        assert!(
            t.contains("Command:([]string)<nil> Args:([]string)<nil>"),
            "{t}"
        );
    }

    #[test]
    fn integers() {
        for i in [0, 7, -1, i64::MIN, i64::MAX, 2147483647] {
            let mut out = Vec::new();
            put_int(i, &mut out);
            assert_eq!(String::from_utf8(out).unwrap(), i.to_string());
        }
    }
}
