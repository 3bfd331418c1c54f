//! Decoding a container's JSON "like a kubelet" of one version (design §3).
//!
//! A kubelet receives the pod from the API server and decodes it into the Go structs *it*
//! vendored. The resulting value, not the JSON, is what gets hashed, so this module turns a
//! parsed JSON value (read through [`Json`]) into a [`Val`] tree shaped by one version's
//! [`Schema`]:
//!
//! * fields that version does not know are dropped (that is why the same pod hashes differently
//!   across versions);
//! * an empty list or map becomes nil (protobuf cannot tell them apart; `([]string)<nil>`);
//!   an empty object for a pointer field stays a non-nil pointer to a zero struct;
//! * `null` is the zero value, as in Go's `encoding/json`;
//! * numbers must be integers in range for their Go type;
//! * `resource.Quantity` is parsed by [`crate::kubelet::quantity`], `intstr.IntOrString` keeps its type;
//! * a value of the wrong JSON type is an error naming the path, e.g.
//!   `containers[0].ports[1].containerPort: expected int32, got string`.
//!
//! The tree lives in an [`Arena`]: strings are borrowed from the JSON value, and structs,
//! lists, maps, pointers and quantities are placed in the arena, so a decode allocates a chunk
//! now and then instead of a vector per struct, and a [`Val`] is plain data that costs nothing
//! to copy or drop.

use std::collections::HashMap;

use bumpalo::collections::Vec as ArenaVec;

use crate::error::{Error, Result};
use crate::kubelet::gofloat::float64_text;
use crate::kubelet::json::{Json, JsonValue};
use crate::kubelet::quantity::{self, QuantityRef};
use crate::kubelet::schema::{Field, Kind, Schema, TypeId};
use crate::multiply_hash::MultiplyHash;

/// Where decoded values live: one per container (or per call), freed at once. It runs no
/// destructors, which is why [`Val`] holds only plain data.
pub type Arena = bumpalo::Bump;

/// A Go value of a type known from the schema (the schema, not the tree, knows the type).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Val<'a> {
    /// `string` or a named string type.
    Str(&'a str),
    Bool(bool),
    /// Any integer type, range-checked at decode time.
    Int(i64),
    /// A nil pointer, slice or map.
    Nil,
    /// A non-nil pointer.
    Ptr(&'a Val<'a>),
    /// A non-nil, non-empty slice.
    List(&'a [Val<'a>]),
    /// A non-nil, non-empty map with string keys, sorted by key bytes (go-spew's SortKeys and
    /// encoding/json both sort string keys that way).
    Map(&'a [(&'a str, Val<'a>)]),
    /// Struct fields in declaration order.
    Struct(&'a [Val<'a>]),
    Quantity(&'a QuantityRef<'a>),
    IntOrString(IntOrString<'a>),
    /// A value decoded once and shared by the type graphs of several versions whose types for
    /// it have the same shape ([`decode_container_sharing`]); it stands for the value it holds.
    Shared(&'a Val<'a>),
}

impl<'a> Val<'a> {
    /// The value itself, through any [`Val::Shared`].
    pub fn resolved(&self) -> &Val<'a> {
        match self {
            Val::Shared(v) => v.resolved(),
            v => v,
        }
    }
}

/// Values decoded for one container, by JSON value and type shape, for the decodes of its other
/// versions' type graphs (see [`decode_container_sharing`]).
pub struct SharedDecodes<'a> {
    /// Keyed by an address and a shape number, both the program's own.
    by_value: HashMap<(usize, u32), &'a Val<'a>, MultiplyHash>,
}

impl Default for SharedDecodes<'_> {
    fn default() -> Self {
        SharedDecodes {
            // A container with all 29 versions shares a few dozen values; growing the table
            // from nothing rehashed it several times a container.
            by_value: HashMap::with_capacity_and_hasher(32, MultiplyHash::default()),
        }
    }
}

/// `intstr.IntOrString`: `Type` 0 (Int) with `IntVal`, or 1 (String) with `StrVal`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IntOrString<'a> {
    Int(i32),
    Str(&'a str),
}

/// Decodes one container object for `schema`'s kubelet into `arena`. `path` prefixes error
/// messages (e.g. `default/web/containers[0]`); pass `""` for none.
pub fn decode_container<'a: 'b, 'b>(
    schema: &Schema,
    json: impl Json<'a>,
    path: &str,
    arena: &'b Arena,
) -> Result<Val<'b>> {
    decode_root(schema, json, path, None, arena)
}

/// [`decode_container`] for one of several type graphs of the same container: a field whose
/// JSON value (an object or a list) was decoded before under a type of the same shape
/// ([`Schema::shape`]) takes that value, shared, instead of being decoded again.
pub fn decode_container_sharing<'a: 'b, 'b>(
    schema: &Schema,
    json: impl Json<'a>,
    path: &str,
    shared: &mut SharedDecodes<'b>,
    arena: &'b Arena,
) -> Result<Val<'b>> {
    decode_root(schema, json, path, Some(shared), arena)
}

/// [`decode_container_sharing`] for a graph whose root fields are mostly alike those of a graph
/// the container was decoded under (same key, name, `omitempty` and shape; see
/// [`crate::kubelet::alike`]): `base` is that decode's root fields, and root field `i` takes
/// `base[j]` when `take[i]` is `Some(j)`. The other fields are decoded, in field order, so an
/// error is the one a decode of the whole container would give: the taken ones decoded without
/// one.
pub fn decode_container_taking<'a: 'b, 'b, J: Json<'a>>(
    schema: &Schema,
    json: J,
    path: &str,
    shared: &mut SharedDecodes<'b>,
    base: &[Val<'b>],
    take: &[Option<usize>],
    arena: &'b Arena,
) -> Result<Val<'b>> {
    let mut d = Decoder {
        schema,
        path: Vec::new(),
        prefix: path,
        shared: Some(shared),
        arena,
    };
    let (Kind::Struct(fields), true) = (&schema.ty(schema.root()).kind, json.is_object()) else {
        return decode_root(schema, json, path, d.shared, arena);
    };
    let out = arena.alloc_slice_fill_copy(fields.len(), Val::Nil);
    for ((i, f), slot) in fields.iter().enumerate().zip(out.iter_mut()) {
        match take.get(i).copied().flatten().and_then(|j| base.get(j)) {
            Some(v) => *slot = *v,
            None => d.struct_field(f, json.entry(&f.json), slot)?,
        }
    }
    Ok(Val::Struct(out))
}

fn decode_root<'a: 'b, 'b, J: Json<'a>>(
    schema: &Schema,
    json: J,
    path: &str,
    shared: Option<&mut SharedDecodes<'b>>,
    arena: &'b Arena,
) -> Result<Val<'b>> {
    let mut d = Decoder {
        schema,
        path: Vec::new(),
        prefix: path,
        shared,
        arena,
    };
    if !json.is_object() {
        return Err(d.type_error("a container object", json));
    }
    let mut root = Val::Nil;
    d.decode(schema.root(), Some(json), &mut root)?;
    Ok(root)
}

/// The zero value of a type (what a missing field decodes to), its structs in `arena`.
// Inlined: most fields of a container are missing, and a zero scalar built in place is not
// written to memory only to be read back.
#[inline]
pub fn zero<'b>(schema: &Schema, ty: TypeId, arena: &'b Arena) -> Val<'b> {
    match &schema.ty(ty).kind {
        Kind::String => Val::Str(""),
        Kind::Bool => Val::Bool(false),
        Kind::Int32 | Kind::Int64 => Val::Int(0),
        Kind::Ptr(_) | Kind::Slice(_) | Kind::Map { .. } => Val::Nil,
        Kind::Struct(fields) => zero_struct(schema, fields, arena),
        Kind::Quantity => Val::Quantity(&QuantityRef::ZERO),
        Kind::IntOrString => Val::IntOrString(IntOrString::Int(0)),
    }
}

fn zero_struct<'b>(schema: &Schema, fields: &[Field], arena: &'b Arena) -> Val<'b> {
    let mut out = ArenaVec::with_capacity_in(fields.len(), arena);
    out.extend(fields.iter().map(|f| zero(schema, f.ty, arena)));
    Val::Struct(out.into_bump_slice())
}

/// The text `Quantity.UnmarshalJSON` parses of a JSON value: a string's contents (it trims
/// them itself), or a number's text. serde keeps an integer's text and a float's value: a JSON
/// reader hands a float in a quantity's place over as the string of its text
/// ([`crate::kubelet::spelling`]), and a float left here came from YAML, which reaches a
/// kubelet's JSON decoder as its [`float64_text`].
pub(crate) fn quantity_text<'a, J: Json<'a>>(
    view: &JsonValue<'a, J>,
) -> Option<std::borrow::Cow<'a, str>> {
    match view {
        JsonValue::String(s) => Some((*s).into()),
        JsonValue::Number(n) => match n.as_f64() {
            Some(f) if n.is_f64() => Some(float64_text(f).into()),
            _ => Some(n.to_string().into()),
        },
        _ => None,
    }
}

/// The most fields (flattened through inline structs) a struct decodes through its key table;
/// `v1.Container`, the largest, has 25.
const MAX_FIELDS: usize = 48;

/// Where a struct's fields find their JSON values.
#[derive(Clone, Copy)]
pub(crate) enum Fields<'s, 'a, J> {
    /// Matched through the schema's key table, by flattened field index.
    Slots(&'s [Option<(&'a str, J)>]),
    /// Looked up in the object by each field's key.
    Lookup(J),
}

impl<'s, 'a, J: Json<'a>> Fields<'s, 'a, J> {
    /// Where the fields of struct `ty` read from object `obj` (its `entries`) are found: through
    /// the schema's key table into slots in `arena`, one per flattened field (a key no field
    /// has is dropped, a repeated key's later value wins), or, for a struct without a table that
    /// fits (two fields claim one key, or too many fields), by looking each field up. (Slots
    /// sized to the struct: a stack array of the most fields was zeroed whole for every struct,
    /// 1.5 KB, 3 % of a 1.15 container written straight from the JSON.)
    pub(crate) fn of(
        schema: &Schema,
        ty: TypeId,
        obj: J,
        entries: J::Entries,
        arena: &'s Arena,
    ) -> Self {
        let Some(keys) = schema.struct_keys(ty).filter(|k| k.flat_len <= MAX_FIELDS) else {
            return Fields::Lookup(obj);
        };
        let slots = arena.alloc_slice_fill_copy(keys.flat_len, None);
        for (k, v) in entries {
            if let Some(i) = keys.find(k) {
                slots[i] = Some((k, v));
            }
        }
        Fields::Slots(slots)
    }

    /// The key and value of field `f`, the `next`-th field flattened through inline structs.
    /// (The key is borrowed from the JSON so that a path made of it lives as long as the value.)
    #[inline]
    pub(crate) fn get(self, f: &Field, next: usize) -> Option<(&'a str, J)> {
        match self {
            Fields::Slots(slots) => slots[next],
            Fields::Lookup(obj) => obj.entry(&f.json),
        }
    }
}

enum Seg<'a> {
    Key(&'a str),
    Index(usize),
}

/// Decodes into `arena` (`'b`) from JSON that outlives it.
struct Decoder<'s, 'b> {
    schema: &'s Schema,
    path: Vec<Seg<'b>>,
    prefix: &'s str,
    shared: Option<&'s mut SharedDecodes<'b>>,
    arena: &'b Arena,
}

impl<'b> Decoder<'_, 'b> {
    fn path_string(&self) -> String {
        let mut s = self.prefix.to_string();
        for seg in &self.path {
            match seg {
                Seg::Key(k) => {
                    if !s.is_empty() {
                        s.push('.');
                    }
                    s.push_str(k);
                }
                Seg::Index(i) => {
                    s.push('[');
                    s.push_str(&i.to_string());
                    s.push(']');
                }
            }
        }
        if s.is_empty() {
            s.push_str("container");
        }
        s
    }

    fn type_error<'a, J: Json<'a>>(&self, expected: &str, got: J) -> Error {
        Error::Type {
            path: self.path_string(),
            expected: expected.to_string(),
            got: got.view().describe(),
        }
    }

    /// Decodes `v` as a `ty` into `slot`, where the value stays: a value returned went through
    /// memory, and copying it into its parent stalled on the stores just made (perf annotate).
    fn decode<'a: 'b, J: Json<'a>>(
        &mut self,
        ty: TypeId,
        v: Option<J>,
        slot: &mut Val<'b>,
    ) -> Result<()> {
        let schema = self.schema;
        let arena = self.arena;
        // The view is taken once: a value is looked at once per type it is decoded under.
        let (v, view) = match v.map(|v| (v, v.view())) {
            Some((_, JsonValue::Null)) | None => {
                *slot = zero(schema, ty, arena);
                return Ok(());
            }
            Some(both) => both,
        };
        let t = schema.ty(ty);
        *slot = match &t.kind {
            Kind::String => match view {
                JsonValue::String(s) => Val::Str(s),
                _ => return Err(self.type_error("string", v)),
            },
            Kind::Bool => match view {
                JsonValue::Bool(b) => Val::Bool(b),
                _ => return Err(self.type_error("bool", v)),
            },
            Kind::Int32 => self.int(v, &view, i64::from(i32::MIN), i64::from(i32::MAX), "int32")?,
            Kind::Int64 => self.int(v, &view, i64::MIN, i64::MAX, "int64")?,
            Kind::Ptr(elem) => {
                let pointee = arena.alloc(Val::Nil);
                self.decode(*elem, Some(v), pointee)?;
                Val::Ptr(pointee)
            }
            Kind::Slice(elem) => {
                let JsonValue::Array(len, items) = view else {
                    return Err(self.type_error(&format!("a list ({})", t.name), v));
                };
                if len == 0 {
                    *slot = Val::Nil;
                    return Ok(());
                }
                let mut out = ArenaVec::with_capacity_in(len, arena);
                for (i, item) in items.enumerate() {
                    self.path.push(Seg::Index(i));
                    // A JSON null inside a list is the element type's zero value, as in Go.
                    out.push(Val::Nil);
                    self.decode(*elem, Some(item), &mut out[i])?;
                    self.path.pop();
                }
                Val::List(out.into_bump_slice())
            }
            Kind::Map { value } => {
                let JsonValue::Object(len, entries) = view else {
                    return Err(self.type_error(&format!("an object ({})", t.name), v));
                };
                if len == 0 {
                    *slot = Val::Nil;
                    return Ok(());
                }
                let mut out = ArenaVec::with_capacity_in(len, arena);
                for (i, (k, item)) in entries.enumerate() {
                    self.path.push(Seg::Key(k));
                    out.push((k, Val::Nil));
                    self.decode(*value, Some(item), &mut out[i].1)?;
                    self.path.pop();
                }
                let out: &'b mut [(&'b str, Val<'b>)] = out.into_bump_slice_mut();
                out.sort_unstable_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
                Val::Map(out)
            }
            Kind::Struct(_) => match view {
                JsonValue::Object(_, entries) => Val::Struct(self.decode_struct(ty, v, entries)?),
                _ => return Err(self.type_error(&format!("an object ({})", t.name), v)),
            },
            Kind::Quantity => self.quantity(v, view)?,
            Kind::IntOrString => match view {
                JsonValue::String(s) => Val::IntOrString(IntOrString::Str(s)),
                JsonValue::Number(_) => match self.int(
                    v,
                    &view,
                    i64::from(i32::MIN),
                    i64::from(i32::MAX),
                    "an int32 or a string",
                )? {
                    Val::Int(i) => Val::IntOrString(IntOrString::Int(i as i32)),
                    _ => unreachable!("int() returns Val::Int"),
                },
                _ => return Err(self.type_error("an int32 or a string", v)),
            },
        };
        Ok(())
    }

    /// A struct's fields from one JSON object; inline (embedded) structs read the same object.
    ///
    /// The object's entries are matched to fields through the schema's sorted key table (a
    /// container object has a handful of the ~25 keys its struct knows), then the fields are
    /// decoded in declaration order, so an error is the first in field order, as before.
    fn decode_struct<'a: 'b, J: Json<'a>>(
        &mut self,
        ty: TypeId,
        obj: J,
        entries: J::Entries,
    ) -> Result<&'b [Val<'b>]> {
        let fields = Fields::of(self.schema, ty, obj, entries, self.arena);
        self.build_struct(ty, fields, &mut 0)
    }

    /// The fields of struct `ty` from their JSON values; `next` is the index of its first field
    /// among the fields flattened through inline structs.
    fn build_struct<'a: 'b, J: Json<'a>>(
        &mut self,
        ty: TypeId,
        json: Fields<'_, 'a, J>,
        next: &mut usize,
    ) -> Result<&'b [Val<'b>]> {
        let Kind::Struct(fields) = &self.schema.ty(ty).kind else {
            unreachable!("build_struct on a non-struct")
        };
        let out = self.arena.alloc_slice_fill_copy(fields.len(), Val::Nil);
        for (f, slot) in fields.iter().zip(out.iter_mut()) {
            if f.inline {
                *slot = Val::Struct(self.build_struct(f.ty, json, next)?);
                continue;
            }
            let item = json.get(f, *next);
            *next += 1;
            self.struct_field(f, item, slot)?;
        }
        Ok(out)
    }

    /// One (not inline) field of a struct into `slot`, from its JSON key and value: the zero
    /// value when the key is absent.
    #[inline]
    fn struct_field<'a: 'b, J: Json<'a>>(
        &mut self,
        f: &Field,
        item: Option<(&'a str, J)>,
        slot: &mut Val<'b>,
    ) -> Result<()> {
        let Some((key, item)) = item else {
            *slot = zero(self.schema, f.ty, self.arena);
            return Ok(());
        };
        self.path.push(Seg::Key(key));
        self.field(f.ty, item, slot)?;
        self.path.pop();
        Ok(())
    }

    /// A field's value into `slot`: decoded, or with sharing on, taken from an earlier decode of
    /// the same JSON object or list under a type of the same shape.
    fn field<'a: 'b, J: Json<'a>>(
        &mut self,
        ty: TypeId,
        item: J,
        slot: &mut Val<'b>,
    ) -> Result<()> {
        if self.shared.is_none() || !item.is_list_or_object() {
            return self.decode(ty, Some(item), slot);
        }
        // The address of the JSON value names it while the container is borrowed.
        let key = (item.address(), self.schema.shape(ty));
        if let Some(v) = self.shared.as_ref().and_then(|s| s.by_value.get(&key)) {
            *slot = Val::Shared(v);
            return Ok(());
        }
        let v = self.arena.alloc(Val::Nil);
        self.decode(ty, Some(item), v)?;
        let v: &'b Val<'b> = v;
        if let Some(s) = self.shared.as_mut() {
            s.by_value.insert(key, v);
        }
        *slot = Val::Shared(v);
        Ok(())
    }

    fn int<'a: 'b, J: Json<'a>>(
        &self,
        v: J,
        view: &JsonValue<'a, J>,
        min: i64,
        max: i64,
        what: &str,
    ) -> Result<Val<'b>> {
        let out_of_range = || Error::Type {
            path: self.path_string(),
            expected: format!("{what} (a whole number from {min} to {max})"),
            got: view.describe(),
        };
        match view {
            JsonValue::Number(n) => match n.as_i64() {
                Some(i) if (min..=max).contains(&i) => Ok(Val::Int(i)),
                _ => Err(out_of_range()),
            },
            _ => Err(self.type_error(what, v)),
        }
    }

    fn quantity<'a: 'b, J: Json<'a>>(&self, v: J, view: JsonValue<'a, J>) -> Result<Val<'b>> {
        let Some(text) = quantity_text(&view) else {
            return Err(self.type_error("a quantity string", v));
        };
        quantity::parse_json_string(&text)
            .map(|q| Val::Quantity(self.arena.alloc(q.to_ref(self.arena))))
            .map_err(|e| Error::Quantity {
                path: self.path_string(),
                value: text.into_owned(),
                reason: e.to_string(),
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema(v: &str) -> &'static Schema {
        Schema::for_version(v.parse().unwrap()).unwrap()
    }

    #[test]
    fn wrong_types_name_the_field_path() {
        let arena = Arena::new();
        let c = json!({"name": "a", "ports": [{"containerPort": 80}, {"containerPort": "80"}]});
        let err = decode_container(schema("1.30"), &c, "containers[0]", &arena).unwrap_err();
        assert_eq!(
            err.to_string(),
            "containers[0].ports[1].containerPort: expected int32, got string"
        );
        let c = json!({"name": "a", "ports": [{"containerPort": 4294967296i64}]});
        let err = decode_container(schema("1.30"), &c, "", &arena)
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("ports[0].containerPort: expected int32 (a whole number"),
            "{err}"
        );
        let c = json!({"name": "a", "ports": [{"containerPort": 80.5}]});
        assert!(decode_container(schema("1.30"), &c, "", &arena).is_err());
        let c = json!({"name": "a", "resources": {"limits": {"cpu": "lots"}}});
        let err = decode_container(schema("1.30"), &c, "", &arena)
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("resources.limits.cpu: invalid quantity \"lots\""),
            "{err}"
        );
    }

    #[test]
    fn unknown_fields_are_dropped_and_empty_collections_become_nil() {
        let arena = Arena::new();
        let c = json!({"name": "a", "startupProbe": {"periodSeconds": 3}, "args": [], "env": []});
        let s = schema("1.15"); // no startupProbe yet
        let v = decode_container(s, &c, "", &arena).unwrap();
        let bare = json!({"name": "a"});
        assert_eq!(v, decode_container(s, &bare, "", &arena).unwrap());
    }

    #[test]
    fn keys_match_exactly_as_apimachinery_matches_them() {
        // `sigs.k8s.io/json` (apimachinery's decoder) is case-sensitive: a key that differs from
        // a field's only in case is a field the version does not know, dropped. (Go's plain
        // `encoding/json` would fold it onto the field, and refuse `90.0` for an int32.)
        let arena = Arena::new();
        for v in ["1.8", "1.15", "1.30", "1.31", "1.37"] {
            let s = schema(v);
            let c = json!({"name": "a", "Image": "x", "IMAGE": "y", "portS": [{"containerPort": 90.0}], "enV": 1});
            let bare = json!({"name": "a"});
            assert_eq!(
                decode_container(s, &c, "", &arena).unwrap(),
                decode_container(s, &bare, "", &arena).unwrap(),
                "{v}"
            );
        }
    }

    #[test]
    fn empty_object_for_a_pointer_is_a_non_nil_zero_struct() {
        let arena = Arena::new();
        let s = schema("1.30");
        let c = json!({"name": "a", "securityContext": {}});
        let v = decode_container(s, &c, "", &arena).unwrap();
        let i = s.root_field("SecurityContext").unwrap();
        let Val::Struct(fields) = v else { panic!() };
        assert!(matches!(&fields[i], Val::Ptr(inner) if matches!(**inner, Val::Struct(_))));
    }

    #[test]
    fn key_table_and_lookup_decode_alike() {
        let arena = Arena::new();
        // Every schema has key tables, so the lookup path runs only for a struct that would
        // lack one; here both run on the same objects, values and first errors alike.
        let cases = [
            json!({"name": "a", "image": "b", "livenessProbe": {"httpGet": {"port": "http"}, "periodSeconds": 3}}),
            json!({"name": "a", "tty": "yes", "image": 7}),
            json!({"name": "a", "readinessProbe": {"exec": {"command": ["x"]}, "timeoutSeconds": "1"}}),
        ];
        for v in ["1.8", "1.15", "1.23", "1.30", "1.37"] {
            let s = schema(v);
            for c in &cases {
                let mut d = Decoder {
                    schema: s,
                    path: Vec::new(),
                    prefix: "",
                    shared: None,
                    arena: &arena,
                };
                let by_lookup = d
                    .build_struct(s.root(), Fields::Lookup(c), &mut 0)
                    .map(Val::Struct);
                let by_table = decode_container(s, c, "", &arena);
                assert_eq!(format!("{by_lookup:?}"), format!("{by_table:?}"), "{v} {c}");
            }
        }
    }

    #[test]
    fn null_is_the_zero_value() {
        let arena = Arena::new();
        let s = schema("1.30");
        let nulls = json!({"name": "a", "image": null, "args": null, "tty": null});
        let bare = json!({"name": "a"});
        assert_eq!(
            decode_container(s, &nulls, "", &arena).unwrap(),
            decode_container(s, &bare, "", &arena).unwrap()
        );
    }
}
