//! The Go type graph of `v1.Container` as each kubelet minor version vendored it.
//!
//! The facts live in `schema/1.V.json` (carried from upstream, one file per minor version, embedded
//! in the binary at build time with `include_str!`). Each file lists the structs and named types
//! reachable from `v1.Container` with their fields in declaration order, Go types, json tags and
//! omitempty flags. This module compiles one file into a [`Schema`]: a small arena of [`GoType`]s
//! that the decoder, the spew writer and the Go JSON writer walk together with a value tree.
//!
//! Not here: how values are printed (see [`crate::kubelet::spew`], [`crate::kubelet::gojson`]), or how
//! `resource.Quantity` and `intstr.IntOrString` are laid out inside (see [`crate::kubelet::quantity`]
//! and the writers); those two are opaque leaf kinds in the arena.
//!
//! ```
//! use kubehash::kubelet::{schema::Schema, version::KubeletVersion};
//! let s = Schema::for_version("1.15".parse().unwrap()).unwrap();
//! assert_eq!(s.ty(s.root()).name, "v1.Container");
//! ```

use std::collections::HashMap;
use std::sync::OnceLock;

use serde::Deserialize;

use crate::error::{Error, Result};
use crate::kubelet::version::{KubeletVersion, MAX_MINOR, MIN_MINOR};

/// Index of a type in a [`Schema`]'s arena.
pub type TypeId = usize;

/// One Go type as the kubelet sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GoType {
    /// What Go's `reflect.Type.String()` returns, which is what go-spew prints:
    /// `v1.Container`, `*v1.Probe`, `[]string`, `v1.ResourceList`, `resource.Quantity`.
    pub name: String,
    pub kind: Kind,
}

/// The shape of a Go type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    /// `string` or a named type whose underlying type is `string`.
    String,
    Bool,
    Int32,
    Int64,
    Ptr(TypeId),
    Slice(TypeId),
    /// A map with string keys (the only kind `v1.Container` reaches: `ResourceList`).
    Map {
        value: TypeId,
    },
    Struct(Vec<Field>),
    /// `resource.Quantity` (apimachinery), see [`crate::kubelet::quantity`].
    Quantity,
    /// `intstr.IntOrString` (apimachinery).
    IntOrString,
}

/// A struct field, in declaration order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Field {
    /// The Go field name, which go-spew prints (`Name`, `TTY`, `ProbeHandler`).
    pub name: String,
    /// The JSON key, from the json tag or, without one, the Go name.
    pub json: String,
    /// `omitempty` in the json tag. Case matters: Go ignores `omitEmpty` (1.12's ProcMount).
    pub omitempty: bool,
    /// An embedded struct without a JSON name: Go's encoding/json promotes its fields
    /// into the parent object (`json:",inline"` on `Probe.ProbeHandler`).
    pub inline: bool,
    pub ty: TypeId,
}

/// The compiled type graph of one kubelet minor version.
#[derive(Debug)]
pub struct Schema {
    version: KubeletVersion,
    types: Vec<GoType>,
    root: TypeId,
    /// The oldest version whose type graph is identical to this one; versions that share it
    /// decode and hash a container identically in the struct-based epochs.
    same_as: KubeletVersion,
    /// Per struct type, its JSON keys (inline structs' promoted keys included), sorted, with
    /// each key's position among the struct's fields flattened through inline structs; `None`
    /// for other types and for a struct where two fields would claim one key.
    keys: Vec<Option<StructKeys>>,
    /// Per type, its shape: an id shared, across every version, by exactly the types whose
    /// whole sub-graphs are alike (see [`Schema::shape`]).
    shapes: Vec<u32>,
    /// Per struct type, per field, what go-spew's `%#v` prints before the field's value (see
    /// [`Schema::spew_heads`]); empty for other types.
    spew_heads: Vec<Vec<Box<[u8]>>>,
}

/// How a decoder finds a struct's field from a JSON key: see [`Schema::struct_keys`].
#[derive(Debug)]
pub struct StructKeys {
    /// `(json key, flat field index)`, in [`StructKeys::order`].
    pub sorted: Vec<(String, usize)>,
    /// How many fields the struct has, flattened through inline structs.
    pub flat_len: usize,
    /// Per flat field index, the field's type.
    pub types: Vec<TypeId>,
    /// Per key length, the range of `sorted` holding the keys of that length.
    by_len: Vec<(usize, usize)>,
    /// Per key of `sorted`, its [`key_words`].
    prints: Vec<(u64, u64)>,
}

/// Two words read from a key's first and last bytes (overlapping when it is short) that hold
/// every byte of a key up to 16 bytes long: for keys of one length up to 16, equal words are
/// equal keys; longer keys are compared in full after. Loads straight from the key: a copy to
/// a zeroed buffer first is a store the word's load cannot be forwarded from.
#[inline]
pub fn key_words(key: &[u8]) -> (u64, u64) {
    let n = key.len();
    let word = |at: usize| {
        key.get(at..at + 8)
            .and_then(|b| b.try_into().ok())
            .map_or(0, u64::from_le_bytes)
    };
    let half = |at: usize| {
        key.get(at..at + 4)
            .and_then(|b| b.try_into().ok())
            .map_or(0, u32::from_le_bytes)
    };
    match n {
        8.. => (word(0), word(n - 8)),
        4.. => (u64::from(half(0)) | u64::from(half(n - 4)) << 32, 0),
        1.. => {
            let (a, b, c) = (key[0], key[n / 2], key[n - 1]);
            (u64::from(a) | u64::from(b) << 8 | u64::from(c) << 16, 0)
        }
        0 => (0, 0),
    }
}

impl StructKeys {
    /// The order of the key table: by length, then by bytes, so that most comparisons of a
    /// binary search are one integer comparison.
    pub fn order(a: &str, b: &str) -> std::cmp::Ordering {
        a.len()
            .cmp(&b.len())
            .then_with(|| a.as_bytes().cmp(b.as_bytes()))
    }

    /// The flat index of the field with JSON key `key`: among the few keys of its length, by
    /// their first and last eight bytes (a byte compare is a call; two words are not).
    pub fn find(&self, key: &str) -> Option<usize> {
        self.find_bytes(key.as_bytes())
    }

    /// [`StructKeys::find`] for a key's bytes.
    #[inline]
    pub fn find_bytes(&self, key: &[u8]) -> Option<usize> {
        let &(from, to) = self.by_len.get(key.len())?;
        let p = key_words(key);
        (from..to)
            .find(|&i| {
                self.prints[i] == p && (key.len() <= 16 || self.sorted[i].0.as_bytes() == key)
            })
            .map(|i| self.sorted[i].1)
    }
}

impl Schema {
    /// The schema of a supported kubelet version (compiled once, on first use).
    pub fn for_version(v: KubeletVersion) -> Result<&'static Schema> {
        let all = registry();
        match &all[usize::from(v.minor() - MIN_MINOR)] {
            Ok(s) => Ok(s),
            Err(reason) => Err(Error::Schema {
                version: v.to_string(),
                reason: reason.clone(),
            }),
        }
    }

    pub fn version(&self) -> KubeletVersion {
        self.version
    }

    /// The `v1.Container` type.
    pub fn root(&self) -> TypeId {
        self.root
    }

    pub fn ty(&self, id: TypeId) -> &GoType {
        &self.types[id]
    }

    /// How many types the graph has: type ids are `0..type_count()`.
    pub fn type_count(&self) -> usize {
        self.types.len()
    }

    /// The JSON keys of struct type `ty`, for decoders that walk a JSON object's entries
    /// rather than look up each field.
    pub fn struct_keys(&self, ty: TypeId) -> Option<&StructKeys> {
        self.keys.get(ty).and_then(Option::as_ref)
    }

    /// The shape of type `ty`: equal for two types of any two versions exactly when their
    /// sub-graphs are alike (Go names, kinds, fields with their names, tags and types), so that
    /// a JSON value decodes to the same value under both.
    pub fn shape(&self, ty: TypeId) -> u32 {
        self.shapes[ty]
    }

    /// Per field of struct type `ty`, what `%#v` prints before the field's value: the space
    /// between fields (none before the first), `Name:`, and the field's type in parentheses,
    /// which go-spew's `formatPtr` and `format` both print for a field, pointer or not.
    pub fn spew_heads(&self, ty: TypeId) -> &[Box<[u8]>] {
        self.spew_heads.get(ty).map_or(&[], Vec::as_slice)
    }

    /// The oldest kubelet version with exactly this type graph.
    pub fn same_as(&self) -> KubeletVersion {
        self.same_as
    }

    /// Index of the root struct's field with this Go name.
    pub fn root_field(&self, go_name: &str) -> Option<usize> {
        match &self.ty(self.root).kind {
            Kind::Struct(fields) => fields.iter().position(|f| f.name == go_name),
            _ => None,
        }
    }
}

use crate::kubelet::version::SCHEMA_FILES;

type Compiled = std::result::Result<Schema, String>;

fn registry() -> &'static [Compiled] {
    static REGISTRY: OnceLock<Vec<Compiled>> = OnceLock::new();
    REGISTRY.get_or_init(|| {
        let mut out: Vec<Compiled> = Vec::with_capacity(SCHEMA_FILES.len());
        let mut shapes = HashMap::new();
        for &(minor, text) in SCHEMA_FILES {
            let compiled = KubeletVersion::from_minor(minor)
                .map_err(|e| e.to_string())
                .and_then(|v| compile(v, text));
            let compiled = compiled.map(|mut s| {
                s.shapes = shapes_of(&s.types, &mut shapes);
                if let Some(prev) = out
                    .iter()
                    .flatten()
                    .find(|p| p.types == s.types && p.root == s.root)
                {
                    s.same_as = prev.same_as;
                }
                s
            });
            out.push(compiled);
        }
        debug_assert_eq!(out.len(), usize::from(MAX_MINOR - MIN_MINOR + 1));
        out
    })
}

/// Each type's shape, interned in `interner` (shared by every version): a type's description
/// with its element and field types replaced by their shapes, so equal shapes mean equal
/// sub-graphs. Types refer to no type that refers back to them (the builder refuses cycles).
fn shapes_of(types: &[GoType], interner: &mut HashMap<String, u32>) -> Vec<u32> {
    fn shape(
        types: &[GoType],
        ty: TypeId,
        memo: &mut Vec<Option<u32>>,
        interner: &mut HashMap<String, u32>,
    ) -> u32 {
        if let Some(s) = memo[ty] {
            return s;
        }
        let t = &types[ty];
        let mut key = format!("{:?}", t.name);
        match &t.kind {
            Kind::Ptr(e) => key += &format!(" ptr {}", shape(types, *e, memo, interner)),
            Kind::Slice(e) => key += &format!(" slice {}", shape(types, *e, memo, interner)),
            Kind::Map { value } => key += &format!(" map {}", shape(types, *value, memo, interner)),
            Kind::Struct(fields) => {
                key += " struct";
                for f in fields {
                    let s = shape(types, f.ty, memo, interner);
                    key += &format!(
                        " {:?} {:?} {} {} {s}",
                        f.name, f.json, f.omitempty, f.inline
                    );
                }
            }
            leaf => key += &format!(" {leaf:?}"),
        }
        let next = u32::try_from(interner.len()).unwrap_or(u32::MAX);
        let s = *interner.entry(key).or_insert(next);
        memo[ty] = Some(s);
        s
    }
    let mut memo = vec![None; types.len()];
    (0..types.len())
        .map(|ty| shape(types, ty, &mut memo, interner))
        .collect()
}

// ---- the file format -------------------------------------------------------------------------

#[derive(Deserialize)]
struct FileDoc {
    kubelet_version: String,
    hash_epoch: String,
    hash_without_resources: bool,
    types: Vec<TypeDoc>,
}

#[derive(Deserialize)]
struct TypeDoc {
    name: String,
    kind: String,
    #[serde(default)]
    fields: Vec<FieldDoc>,
    #[serde(default)]
    underlying: Option<String>,
}

#[derive(Deserialize)]
struct FieldDoc {
    name: String,
    go_type: String,
    json: Option<String>,
    omitempty: bool,
    embedded: bool,
}

fn compile(version: KubeletVersion, text: &str) -> Compiled {
    let doc: FileDoc = serde_json::from_str(text).map_err(|e| format!("unreadable: {e}"))?;
    if doc.kubelet_version != version.to_string() {
        return Err(format!(
            "file says it is for kubelet {}",
            doc.kubelet_version
        ));
    }
    if doc.hash_epoch != version.epoch().as_str()
        || doc.hash_without_resources != version.has_hash_without_resources()
    {
        return Err(format!(
            "file says hash epoch {} (hashWithoutResources {}), kubehash expects {} ({})",
            doc.hash_epoch,
            doc.hash_without_resources,
            version.epoch().as_str(),
            version.has_hash_without_resources()
        ));
    }
    let mut b = Builder {
        docs: doc.types.iter().map(|t| (t.name.as_str(), t)).collect(),
        types: Vec::new(),
        ids: HashMap::new(),
        in_progress: Vec::new(),
    };
    let root = b.resolve("Container")?;
    let keys = (0..b.types.len())
        .map(|t| struct_keys(&b.types, t))
        .collect();
    let spew_heads = (0..b.types.len())
        .map(|t| spew_heads(&b.types, t))
        .collect();
    Ok(Schema {
        version,
        types: b.types,
        root,
        same_as: version,
        keys,
        shapes: Vec::new(),
        spew_heads,
    })
}

fn spew_heads(types: &[GoType], ty: TypeId) -> Vec<Box<[u8]>> {
    let Kind::Struct(fields) = &types[ty].kind else {
        return Vec::new();
    };
    fields
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let sep = if i > 0 { " " } else { "" };
            format!("{sep}{}:({})", f.name, types[f.ty].name)
                .into_bytes()
                .into_boxed_slice()
        })
        .collect()
}

fn struct_keys(types: &[GoType], ty: TypeId) -> Option<StructKeys> {
    fn flatten<'t>(types: &'t [GoType], ty: TypeId, out: &mut Vec<(&'t str, TypeId)>) {
        if let Kind::Struct(fields) = &types[ty].kind {
            for f in fields {
                if f.inline {
                    flatten(types, f.ty, out);
                } else {
                    out.push((&f.json, f.ty));
                }
            }
        }
    }
    if !matches!(types[ty].kind, Kind::Struct(_)) {
        return None;
    }
    let mut flat = Vec::new();
    flatten(types, ty, &mut flat);
    let mut sorted: Vec<(String, usize)> = flat
        .iter()
        .enumerate()
        .map(|(i, (k, _))| (k.to_string(), i))
        .collect();
    sorted.sort_by(|a, b| StructKeys::order(&a.0, &b.0));
    if sorted.windows(2).any(|w| w[0].0 == w[1].0) {
        return None;
    }
    let longest = sorted.last().map_or(0, |(k, _)| k.len());
    let by_len = (0..=longest)
        .map(|len| {
            let from = sorted.partition_point(|(k, _)| k.len() < len);
            let to = sorted.partition_point(|(k, _)| k.len() <= len);
            (from, to)
        })
        .collect();
    Some(StructKeys {
        prints: sorted
            .iter()
            .map(|(k, _)| key_words(k.as_bytes()))
            .collect(),
        sorted,
        flat_len: flat.len(),
        types: flat.iter().map(|&(_, ty)| ty).collect(),
        by_len,
    })
}

struct Builder<'d> {
    docs: HashMap<&'d str, &'d TypeDoc>,
    types: Vec<GoType>,
    ids: HashMap<String, TypeId>,
    in_progress: Vec<String>,
}

impl Builder<'_> {
    fn push(&mut self, key: &str, ty: GoType) -> TypeId {
        let id = self.types.len();
        self.types.push(ty);
        self.ids.insert(key.to_string(), id);
        id
    }

    /// Resolves a Go type expression written in package `v1`'s scope.
    fn resolve(&mut self, expr: &str) -> std::result::Result<TypeId, String> {
        if let Some(&id) = self.ids.get(expr) {
            return Ok(id);
        }
        if self.in_progress.iter().any(|t| t == expr) {
            return Err(format!("type {expr} refers to itself"));
        }
        self.in_progress.push(expr.to_string());
        let ty = self.build(expr)?;
        self.in_progress.pop();
        Ok(self.push(expr, ty))
    }

    fn build(&mut self, expr: &str) -> std::result::Result<GoType, String> {
        if let Some(elem) = expr.strip_prefix('*') {
            let e = self.resolve(elem)?;
            return Ok(GoType {
                name: format!("*{}", self.types[e].name),
                kind: Kind::Ptr(e),
            });
        }
        if let Some(elem) = expr.strip_prefix("[]") {
            let e = self.resolve(elem)?;
            return Ok(GoType {
                name: format!("[]{}", self.types[e].name),
                kind: Kind::Slice(e),
            });
        }
        if let Some(rest) = expr.strip_prefix("map[") {
            let (key, value) = rest
                .split_once(']')
                .ok_or_else(|| format!("bad map type {expr}"))?;
            let k = self.resolve(key)?;
            if self.types[k].kind != Kind::String {
                return Err(format!("map key {key} is not a string type"));
            }
            let v = self.resolve(value)?;
            return Ok(GoType {
                name: format!("map[{}]{}", self.types[k].name, self.types[v].name),
                kind: Kind::Map { value: v },
            });
        }
        let builtin = |kind| {
            Ok(GoType {
                name: expr.to_string(),
                kind,
            })
        };
        match expr {
            "string" => return builtin(Kind::String),
            "bool" => return builtin(Kind::Bool),
            "int32" => return builtin(Kind::Int32),
            "int64" => return builtin(Kind::Int64),
            "resource.Quantity" => return builtin(Kind::Quantity),
            "intstr.IntOrString" => return builtin(Kind::IntOrString),
            _ => {}
        }
        let doc = *self
            .docs
            .get(expr)
            .ok_or_else(|| format!("unknown type {expr}"))?;
        let name = format!("v1.{}", doc.name);
        match doc.kind.as_str() {
            "named" => {
                let under = doc
                    .underlying
                    .as_deref()
                    .ok_or_else(|| format!("named type {expr} has no underlying type"))?;
                let u = self.resolve(under)?;
                let kind = self.types[u].kind.clone();
                match kind {
                    Kind::String | Kind::Map { .. } | Kind::Int32 | Kind::Int64 | Kind::Bool => {
                        Ok(GoType { name, kind })
                    }
                    _ => Err(format!("named type {expr} over {under} is not supported")),
                }
            }
            "struct" => {
                let mut fields = Vec::with_capacity(doc.fields.len());
                for f in &doc.fields {
                    let ty = self.resolve(&f.go_type)?;
                    let json = match f.json.as_deref() {
                        Some("-") => {
                            return Err(format!(
                                "{expr}.{}: json:\"-\" fields are not supported",
                                f.name
                            ))
                        }
                        Some(j) if !j.is_empty() => j.to_string(),
                        _ => f.name.clone(),
                    };
                    let inline = f.embedded && f.json.as_deref().is_none_or(str::is_empty);
                    if inline && !matches!(self.types[ty].kind, Kind::Struct(_)) {
                        return Err(format!("{expr}.{}: embedded non-struct", f.name));
                    }
                    // The extracted flag already follows Go: tag options are case-sensitive, so
                    // 1.12's `omitEmpty` is listed in json_options but is not omitempty.
                    let omitempty = f.omitempty;
                    fields.push(Field {
                        name: f.name.clone(),
                        json,
                        omitempty,
                        inline,
                        ty,
                    });
                }
                Ok(GoType {
                    name,
                    kind: Kind::Struct(fields),
                })
            }
            other => Err(format!("type {expr} has unknown kind {other}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_embedded_schema_compiles() {
        for v in KubeletVersion::all() {
            let s = Schema::for_version(v).unwrap();
            assert_eq!(s.ty(s.root()).name, "v1.Container", "{v}");
            assert!(s.root_field("Resources").is_some());
        }
    }

    #[test]
    fn spew_heads_print_each_field_as_go_spew_does() {
        let s = Schema::for_version("1.15".parse().unwrap()).unwrap();
        let heads = s.spew_heads(s.root());
        let text = |i: usize| std::str::from_utf8(&heads[i]).unwrap();
        assert_eq!(text(0), "Name:(string)");
        assert_eq!(text(1), " Image:(string)");
        let probe = s.root_field("LivenessProbe").unwrap();
        assert_eq!(text(probe), " LivenessProbe:(*v1.Probe)");
        for v in KubeletVersion::all() {
            let s = Schema::for_version(v).unwrap();
            for ty in 0..s.types.len() {
                let want = match &s.ty(ty).kind {
                    Kind::Struct(fields) => fields.len(),
                    _ => 0,
                };
                assert_eq!(s.spew_heads(ty).len(), want, "{v} {}", s.ty(ty).name);
            }
        }
    }

    #[test]
    fn identical_graphs_are_shared() {
        let same = |v: &str| {
            Schema::for_version(v.parse().unwrap())
                .unwrap()
                .same_as()
                .to_string()
        };
        // 1.10 and 1.11 vendored the same core/v1 Container graph.
        assert_eq!(same("1.11"), "1.10");
        assert_eq!(same("1.8"), "1.8");
        assert_eq!(same("1.36"), same("1.34"));
    }

    /// Two types share a shape exactly when their whole sub-graphs are alike: checked for every
    /// pair of types of every two versions against a plain recursive comparison, since a
    /// decode is shared on it.
    #[test]
    fn equal_shapes_are_equal_sub_graphs() {
        fn alike(a: &Schema, ta: TypeId, b: &Schema, tb: TypeId) -> bool {
            let (x, y) = (a.ty(ta), b.ty(tb));
            if x.name != y.name {
                return false;
            }
            match (&x.kind, &y.kind) {
                (Kind::Ptr(e), Kind::Ptr(f)) | (Kind::Slice(e), Kind::Slice(f)) => {
                    alike(a, *e, b, *f)
                }
                (Kind::Map { value: e }, Kind::Map { value: f }) => alike(a, *e, b, *f),
                (Kind::Struct(fa), Kind::Struct(fb)) => {
                    fa.len() == fb.len()
                        && fa.iter().zip(fb).all(|(p, q)| {
                            (&p.name, &p.json, p.omitempty, p.inline)
                                == (&q.name, &q.json, q.omitempty, q.inline)
                                && alike(a, p.ty, b, q.ty)
                        })
                }
                (k, l) => k == l,
            }
        }
        let all: Vec<&Schema> = KubeletVersion::all()
            .map(|v| Schema::for_version(v).unwrap())
            .collect();
        let (mut equal, mut different) = (0, 0);
        for a in &all {
            for b in &all {
                for ta in 0..a.types.len() {
                    for tb in 0..b.types.len() {
                        let same = a.shape(ta) == b.shape(tb);
                        assert_eq!(
                            same,
                            alike(a, ta, b, tb),
                            "{} {} / {} {}",
                            a.version(),
                            a.ty(ta).name,
                            b.version(),
                            b.ty(tb).name
                        );
                        if same {
                            equal += 1
                        } else {
                            different += 1
                        }
                    }
                }
            }
        }
        assert!(equal > 0 && different > 0);
        // The container itself changes between these versions; its probes' handler too.
        let probe = |v: &str| {
            let s = Schema::for_version(v.parse().unwrap()).unwrap();
            let f = match &s.ty(s.root()).kind {
                Kind::Struct(fields) => {
                    fields
                        .iter()
                        .find(|f| f.name == "LivenessProbe")
                        .unwrap()
                        .ty
                }
                _ => unreachable!(),
            };
            s.shape(f)
        };
        assert_eq!(probe("1.8"), probe("1.9"));
        assert_ne!(probe("1.15"), probe("1.30"));
    }

    proptest::proptest! {
        /// Up to 16 bytes, a key's two words hold all of it: keys of one length are equal
        /// exactly when their words are (the key table relies on it).
        #[test]
        fn key_words_tell_keys_of_one_length_apart(
            a in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..=16),
            flips in proptest::collection::vec((proptest::prelude::any::<usize>(), 1..=255u8), 0..3),
        ) {
            let mut b = a.clone();
            for (at, bits) in flips {
                if !b.is_empty() {
                    let at = at % b.len();
                    b[at] ^= bits;
                }
            }
            proptest::prop_assert_eq!(key_words(&a) == key_words(&b), a == b, "{:?} {:?}", a, b);
        }
    }

    #[test]
    fn every_key_is_found_and_nothing_else() {
        for v in KubeletVersion::all() {
            let s = Schema::for_version(v).unwrap();
            for ty in 0..s.types.len() {
                let Some(keys) = s.struct_keys(ty) else {
                    continue;
                };
                for (k, i) in &keys.sorted {
                    assert_eq!(keys.find(k), Some(*i), "{v} {k}");
                    // Near misses: longer, shorter, another case, and one byte changed at
                    // each place (the first and last words and, past 16 bytes, the middle).
                    let flipped = (0..k.len()).map(|at| {
                        let mut b = k.clone().into_bytes();
                        b[at] ^= 0x01;
                        String::from_utf8(b).unwrap()
                    });
                    let near = [format!("{k}x"), k[1..].to_string(), k.to_uppercase()];
                    for near in near.into_iter().chain(flipped) {
                        let hit = keys
                            .sorted
                            .iter()
                            .find(|(o, _)| *o == near)
                            .map(|(_, i)| *i);
                        assert_eq!(keys.find(&near), hit, "{v} {near}");
                    }
                }
                assert_eq!(keys.find(""), None);
                assert_eq!(keys.find(&"k".repeat(300)), None);
            }
        }
    }

    #[test]
    fn go_json_tag_options_are_case_sensitive() {
        // 1.12's SecurityContext.ProcMount was tagged `json:"procMount,omitEmpty"` upstream.
        let s = Schema::for_version("1.12".parse().unwrap()).unwrap();
        let sc = s
            .types
            .iter()
            .find(|t| t.name == "v1.SecurityContext")
            .unwrap();
        let Kind::Struct(fields) = &sc.kind else {
            panic!()
        };
        let pm = fields.iter().find(|f| f.name == "ProcMount").unwrap();
        assert!(!pm.omitempty);
    }

    #[test]
    fn promoted_json_names_never_collide() {
        // Go's encoding/json resolves collisions between promoted fields by depth; none of the
        // vendored graphs has one, so the writers may flatten embedded structs in place.
        fn keys(s: &Schema, ty: TypeId, out: &mut Vec<String>) {
            if let Kind::Struct(fields) = &s.ty(ty).kind {
                for f in fields {
                    if f.inline {
                        keys(s, f.ty, out)
                    } else {
                        out.push(f.json.clone())
                    }
                }
            }
        }
        for v in KubeletVersion::all() {
            let s = Schema::for_version(v).unwrap();
            for id in 0..s.types.len() {
                let mut k = Vec::new();
                keys(s, id, &mut k);
                let n = k.len();
                k.sort();
                k.dedup();
                assert_eq!(n, k.len(), "{v} {}", s.ty(id).name);
            }
        }
    }
}
