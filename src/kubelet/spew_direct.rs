//! The `%#v` text of a container written straight from its JSON, for one type graph: what
//! [`crate::kubelet::decode::decode_container`] then [`crate::kubelet::spew::write_container`]
//! write, without the value tree between them.
//!
//! It keeps the decoder's rules (fields the graph lacks dropped, `null` and missing keys the
//! zero value, an empty list or map nil, integers in range, quantities parsed, a later
//! repeated key winning) and the writer's (`(type)` prefixes, `<*>`, sorted map keys). Where
//! the decoder would refuse the JSON it returns `None` and leaves a partial text: the caller
//! discards it and decodes, which gives the error in the decoder's words and order. A test
//! holds both ways to the same bytes over the golden corpus and random containers.

use std::sync::OnceLock;

use bumpalo::collections::Vec as ArenaVec;

use crate::kubelet::decode::{quantity_text, zero, Arena, Fields, IntOrString};
use crate::kubelet::json::{Json, JsonValue};
use crate::kubelet::quantity;
use crate::kubelet::schema::{Kind, Schema, TypeId};
use crate::kubelet::sink::Sink;
use crate::kubelet::spew::{self, Typed};
use crate::kubelet::version::{MAX_MINOR, MIN_MINOR};

/// Writes the `%#v` text of the container `json` for `schema`'s kubelet, or returns `None`
/// where decoding it would fail. `arena` holds parsed quantities while the text is written.
pub fn write_container<'a, J: Json<'a>, S: Sink>(
    schema: &Schema,
    json: J,
    arena: &Arena,
    out: &mut S,
) -> Option<()> {
    if !json.is_object() {
        return None;
    }
    let w = Writer {
        schema,
        arena,
        zeros: zero_texts(schema),
    };
    w.value(schema.root(), Some(json), Typed::Print, out)
}

/// What a schema's zero values print: per type, as a struct field's value; and per struct type,
/// per field, the field's head and zero value together (all a missing key writes).
struct ZeroTexts {
    of_type: Vec<Box<[u8]>>,
    fields: Vec<Vec<Box<[u8]>>>,
}

fn zero_texts(schema: &Schema) -> &'static ZeroTexts {
    const N: usize = (MAX_MINOR - MIN_MINOR + 1) as usize;
    static ZEROS: [OnceLock<ZeroTexts>; N] = [const { OnceLock::new() }; N];
    let i = usize::from(schema.version().minor() - MIN_MINOR);
    ZEROS[i].get_or_init(|| {
        let arena = Arena::new();
        let of_type: Vec<Box<[u8]>> = (0..schema.type_count())
            .map(|ty| {
                let mut text = Vec::new();
                spew::write(
                    schema,
                    ty,
                    &zero(schema, ty, &arena),
                    Typed::Printed,
                    &mut text,
                );
                text.into_boxed_slice()
            })
            .collect();
        let fields = (0..schema.type_count())
            .map(|ty| match &schema.ty(ty).kind {
                Kind::Struct(fields) => (fields.iter().zip(schema.spew_heads(ty)))
                    .map(|(f, head)| [&head[..], &of_type[f.ty]].concat().into_boxed_slice())
                    .collect(),
                _ => Vec::new(),
            })
            .collect();
        ZeroTexts { of_type, fields }
    })
}

struct Writer<'s> {
    schema: &'s Schema,
    arena: &'s Arena,
    zeros: &'s ZeroTexts,
}

impl Writer<'_> {
    /// The text of `v` as a `ty` (absent: the zero value), with its type printed as `typed` says.
    fn value<'a, J: Json<'a>, S: Sink>(
        &self,
        ty: TypeId,
        v: Option<J>,
        typed: Typed,
        out: &mut S,
    ) -> Option<()> {
        let schema = self.schema;
        let (v, view) = match v.map(|v| (v, v.view())) {
            None | Some((_, JsonValue::Null)) => {
                self.zero(ty, typed, out);
                return Some(());
            }
            Some(both) => both,
        };
        let t = schema.ty(ty);
        if let Kind::Ptr(elem) = t.kind {
            // A non-nil pointer: its type (or `<*>`), then the pointee without its type.
            match typed {
                Typed::Print => spew::type_prefix(&t.name, out),
                Typed::Ignored => out.put(b"<*>"),
                Typed::Printed => {}
            }
            return self.value(elem, Some(v), Typed::Ignored, out);
        }
        if let Typed::Print = typed {
            spew::type_prefix(&t.name, out);
        }
        match (&t.kind, view) {
            (Kind::String, JsonValue::String(s)) => out.put(s.as_bytes()),
            (Kind::Bool, JsonValue::Bool(b)) => out.put(if b { b"true" } else { b"false" }),
            (Kind::Int32, JsonValue::Number(n)) => spew::put_int(i64::from(int32(n)?), out),
            (Kind::Int64, JsonValue::Number(n)) => spew::put_int(n.as_i64()?, out),
            // An empty list or map is nil.
            (Kind::Slice(_), JsonValue::Array(0, _))
            | (Kind::Map { .. }, JsonValue::Object(0, _)) => out.put(b"<nil>"),
            (Kind::Slice(elem), JsonValue::Array(_, items)) => {
                spew::sequence(b"[", items, out, |item, out| {
                    self.value(*elem, Some(item), Typed::Ignored, out)
                })?;
            }
            (Kind::Map { value }, JsonValue::Object(len, entries)) => {
                let mut sorted = ArenaVec::with_capacity_in(len, self.arena);
                sorted.extend(entries);
                sorted.sort_unstable_by(|a: &(&str, J), b| a.0.as_bytes().cmp(b.0.as_bytes()));
                spew::sequence(b"map[", sorted.iter(), out, |&(k, item), out| {
                    spew::map_key(k, out);
                    self.value(*value, Some(item), Typed::Ignored, out)
                })?;
            }
            (Kind::Struct(_), JsonValue::Object(_, entries)) => {
                let fields = Fields::of(schema, ty, v, entries, self.arena);
                self.structure(ty, fields, &mut 0, out)?;
            }
            (Kind::Quantity, view) => {
                let q = quantity::parse_json_string(&quantity_text(&view)?).ok()?;
                spew::write_quantity(&q.to_ref(self.arena), out);
            }
            (Kind::IntOrString, JsonValue::String(s)) => {
                spew::write_int_or_string(IntOrString::Str(s), out)
            }
            (Kind::IntOrString, JsonValue::Number(n)) => {
                spew::write_int_or_string(IntOrString::Int(int32(n)?), out)
            }
            _ => return None,
        }
        Some(())
    }

    /// `{Field:value …}` of struct `ty`; `next` is its first field's index among the fields
    /// flattened through inline structs, which read the same object.
    fn structure<'a, J: Json<'a>, S: Sink>(
        &self,
        ty: TypeId,
        json: Fields<'_, 'a, J>,
        next: &mut usize,
        out: &mut S,
    ) -> Option<()> {
        let Kind::Struct(fields) = &self.schema.ty(ty).kind else {
            return None;
        };
        out.put(b"{");
        let heads = self.schema.spew_heads(ty);
        let zeros = &self.zeros.fields[ty];
        for ((f, head), zero) in fields.iter().zip(heads).zip(zeros) {
            if f.inline {
                out.put(head);
                self.structure(f.ty, json, next, out)?;
                continue;
            }
            let item = json.get(f, *next);
            *next += 1;
            match item {
                None => out.put(zero),
                Some((_, item)) => {
                    out.put(head);
                    self.value(f.ty, Some(item), Typed::Printed, out)?;
                }
            }
        }
        out.put(b"}");
        Some(())
    }

    /// The zero value of `ty`, as the decoder makes it for `null` or a missing key.
    fn zero<S: Sink>(&self, ty: TypeId, typed: Typed, out: &mut S) {
        match typed {
            Typed::Printed => out.put(&self.zeros.of_type[ty]),
            _ => spew::write(
                self.schema,
                ty,
                &zero(self.schema, ty, self.arena),
                typed,
                out,
            ),
        }
    }
}

/// An int32 from a JSON number, if it is a whole number in range.
fn int32(n: &serde_json::Number) -> Option<i32> {
    n.as_i64().and_then(|i| i32::try_from(i).ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kubelet::decode::decode_container;
    use crate::kubelet::version::KubeletVersion;
    use crate::source::doc::Doc;
    use crate::test_corpus::golden_containers;
    use proptest::prelude::*;
    use serde_json::{json, Value};

    /// Both ways for one view: `None` exactly where the decoder refuses, else the same text.
    fn both_ways<'a, J: Json<'a>>(s: &Schema, json: J) -> (Option<Vec<u8>>, Option<Vec<u8>>) {
        let arena = Arena::new();
        let decoded = decode_container(s, json, "", &arena).ok().map(|v| {
            let mut text = Vec::new();
            spew::write_container(s, &v, &mut text);
            text
        });
        let mut text = Vec::new();
        let direct = write_container(s, json, &arena, &mut text).map(|()| text);
        (decoded, direct)
    }

    fn assert_alike(s: &Schema, c: &Value) -> std::result::Result<(), TestCaseError> {
        let (want, got) = both_ways(s, c);
        prop_assert_eq!(&want, &got, "{} over a Value: {}", s.version(), c);
        // (The Doc refuses what it leaves to serde_json, fractions among them.)
        let Ok(doc) = Doc::parse(c.to_string().into_bytes()) else {
            return Ok(());
        };
        let (want_doc, got_doc) = both_ways(s, doc.root());
        prop_assert_eq!(
            &want,
            &want_doc,
            "{}: the Doc decodes as the Value",
            s.version()
        );
        prop_assert_eq!(&want, &got_doc, "{} over a Doc: {}", s.version(), c);
        Ok(())
    }

    #[test]
    fn every_golden_container_is_written_as_decoded_then_written() {
        let containers = golden_containers();
        assert!(containers.len() >= 600);
        // Every graph, not only the struct-dump ones it is used for: the rules are the same.
        for v in KubeletVersion::all() {
            let s = Schema::for_version(v).unwrap();
            for c in containers {
                assert_alike(s, c).unwrap();
            }
        }
    }

    #[test]
    fn what_the_decoder_refuses_is_refused() {
        let s = Schema::for_version("1.15".parse().unwrap()).unwrap();
        for c in [
            json!("a container"),
            json!({"name": 1}),
            json!({"name": "a", "ports": [{"containerPort": 4294967296i64}]}),
            json!({"name": "a", "ports": {"containerPort": 80}}),
            json!({"name": "a", "args": {}}),
            json!({"name": "a", "resources": {"limits": []}}),
            json!({"name": "a", "resources": {"limits": {"cpu": "lots"}}}),
            json!({"name": "a", "livenessProbe": {"httpGet": {"port": true}}}),
            json!({"name": "a", "livenessProbe": {"httpGet": {"port": 2147483648i64}}}),
            json!({"name": "a", "securityContext": {"runAsUser": 1.5}}),
            json!({"name": "a", "tty": "yes"}),
        ] {
            assert_eq!(both_ways(s, &c), (None, None), "{c}");
        }
    }

    /// `Quantity.UnmarshalJSON` parses a number's text as it parses a string's contents.
    #[test]
    fn a_number_quantity_is_its_text() {
        let s = Schema::for_version("1.15".parse().unwrap()).unwrap();
        let with = |q: Value| json!({"name": "a", "resources": {"limits": {"cpu": q}}});
        for (number, text) in [
            (json!(0.5), "0.5"),
            (json!(1e21), "1e+21"),
            (json!(1e-7), "1e-7"),
            (json!(-0.0), "-0"),
            (json!(2), "2"),
        ] {
            let (direct, decoded) = both_ways(s, &with(number.clone()));
            assert!(direct.is_some(), "{number}");
            assert_eq!(
                (direct, decoded),
                both_ways(s, &with(json!(text))),
                "{number}"
            );
        }
    }

    #[test]
    fn nulls_empties_and_the_last_of_a_repeated_key() {
        let s = Schema::for_version("1.15".parse().unwrap()).unwrap();
        for c in [
            json!({"name": "a", "args": [], "env": null, "resources": {"limits": {}}}),
            json!({"name": "a", "args": [null, "x"], "ports": [null]}),
            json!({"name": "a", "resources": {"limits": {"memory": null, "cpu": 2}}}),
            json!({"name": "a", "securityContext": {}, "livenessProbe": {"exec": {}}}),
        ] {
            assert_alike(s, &c).unwrap();
        }
    }

    /// A golden container with a value somewhere in it replaced, or a key removed.
    fn mutated() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            prop::sample::select(vec![
                json!(0),
                json!(-1),
                json!(2147483647),
                json!(2147483648i64),
                json!(-9223372036854775808i64),
                json!(18446744073709551615u64),
                json!(1.5),
                json!(""),
                json!("1.5Gi"),
                json!("100m"),
                json!("lots"),
                json!("http"),
                json!([]),
                json!({}),
                json!([null]),
                json!(["a", "b"]),
                json!({"cpu": "1", "Memory": "2", "a-b": null}),
                json!({"exec": {"command": ["x"]}, "periodSeconds": 3}),
            ]),
        ];
        let picks = prop::collection::vec((any::<prop::sample::Index>(), 0..4usize, leaf), 1..4);
        // Now and then every integer in the container becomes one at an integer type's edge,
        // so that each int32 and int64 field meets one.
        let edge = prop::option::weighted(
            0.5,
            prop::sample::select(vec![
                json!(2147483647),
                json!(2147483648i64),
                json!(-2147483648i64),
                json!(-2147483649i64),
                json!(9223372036854775807i64),
                json!(9223372036854775808u64),
                json!(18446744073709551615u64),
            ]),
        );
        (any::<prop::sample::Index>(), picks, edge).prop_map(|(which, picks, edge)| {
            let containers = golden_containers();
            let mut c = which.get(containers).clone();
            for (at, depth, leaf) in picks {
                mutate(&mut c, depth, at, leaf);
            }
            if let Some(edge) = edge {
                every_integer(&mut c, &edge);
            }
            c
        })
    }

    /// Goes `depth` lists or objects down (at `at`'s member of each), then replaces a member
    /// there with `leaf`, or removes a key.
    fn mutate(node: &mut Value, depth: usize, at: prop::sample::Index, leaf: Value) {
        if depth > 0 {
            let child = match node {
                Value::Object(m) if !m.is_empty() => {
                    let k = at.index(m.len());
                    m.values_mut().nth(k)
                }
                Value::Array(a) if !a.is_empty() => {
                    let k = at.index(a.len());
                    a.get_mut(k)
                }
                _ => None,
            };
            if let Some(child) = child.filter(|c| c.is_object() || c.is_array()) {
                return mutate(child, depth - 1, at, leaf);
            }
        }
        match node {
            Value::Object(m) if !m.is_empty() => {
                let k = at.index(m.len());
                if at.index(3) == 0 {
                    let key = m.keys().nth(k).cloned().unwrap_or_default();
                    m.remove(&key);
                } else if let Some(v) = m.values_mut().nth(k) {
                    *v = leaf;
                }
            }
            Value::Array(a) if !a.is_empty() => {
                let k = at.index(a.len());
                a[k] = leaf;
            }
            _ => {}
        }
    }

    /// Sets every integer in `v` to `to`.
    fn every_integer(v: &mut Value, to: &Value) {
        match v {
            Value::Number(n) if n.is_i64() || n.is_u64() => *v = to.clone(),
            Value::Array(items) => items.iter_mut().for_each(|i| every_integer(i, to)),
            Value::Object(m) => m.values_mut().for_each(|i| every_integer(i, to)),
            _ => {}
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1000))]

        #[test]
        fn a_mutated_container_is_written_as_decoded_then_written(
            c in mutated(),
            minor in 8u8..=15,
        ) {
            let s = Schema::for_version(KubeletVersion::from_minor(minor).unwrap()).unwrap();
            assert_alike(s, &c)?;
        }
    }
}
