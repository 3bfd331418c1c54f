//! When a second type graph would decode and hash a container as the first did, told from the
//! container's keys alone, so that it is not decoded and written again.
//!
//! Among the versions asked for, a container is decoded once per distinct type graph. Graphs of
//! neighbouring minors mostly differ in a few `v1.Container` fields: one added, one whose type
//! grew. Call their JSON keys the *differing keys*; every other root field is the same in both
//! (Go name, JSON key, `omitempty`, and a type of the same shape, [`Schema::shape`]). For a
//! container object with none of the differing keys:
//! * both graphs decode it alike. The shared fields decode the same JSON under sub-graphs alike:
//!   the same value or the same error. Every other field is missing: its zero value.
//! * their texts are equal when the epoch's writer puts the parts of the root struct in the same
//!   order in both ([`Alike::texts`]). The parts are the shared fields (the same value, so the
//!   same text) and the other fields' zero values (whose text is known without a container).
//!   The hash text and the `hashWithoutResources` text alike: the latter only writes the
//!   `resources` field as its zero value.
//!
//! So the second graph takes the first one's decode and texts. Equal texts give equal hashes;
//! the check is the container's keys against a list made once per pair of graphs.

use std::sync::OnceLock;

use crate::kubelet::gojson;
use crate::kubelet::json::{Json, JsonValue};
use crate::kubelet::schema::{Field, Kind, Schema};
use crate::kubelet::spew;
use crate::kubelet::version::{HashEpoch, KubeletVersion, MAX_MINOR, MIN_MINOR};

/// What two type graphs have in common for containers without some root keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Alike {
    /// The JSON keys of the root fields the two graphs do not have alike. A container with any
    /// of them is decoded under each graph.
    pub keys: Vec<String>,
    /// `keys` as a set of [`root_keys`] bits.
    pub mask: u64,
    /// Per root field of the second graph, the first graph's field it is alike, if any: a
    /// container with some of `keys` still decodes those fields alike under both.
    pub take: Vec<Option<usize>>,
    /// Whether, for a container without `keys`, the two graphs write the same text in their
    /// hash epoch, for either annotation. False when their epochs differ.
    pub texts: bool,
}

/// What graphs `a` and `b` have in common; `None` when their root structs cannot be compared
/// field by field (an embedded field, or two fields with one JSON key). Made once per pair.
pub fn alike(a: &Schema, b: &Schema) -> Option<&'static Alike> {
    const N: usize = (MAX_MINOR - MIN_MINOR + 1) as usize;
    static PAIRS: OnceLock<Vec<OnceLock<Option<Alike>>>> = OnceLock::new();
    let pairs = PAIRS.get_or_init(|| (0..N * N).map(|_| OnceLock::new()).collect());
    let at = |s: &Schema| usize::from(s.version().minor() - MIN_MINOR);
    pairs[at(a) * N + at(b)]
        .get_or_init(|| compare(a, b))
        .as_ref()
}

fn compare(a: &Schema, b: &Schema) -> Option<Alike> {
    let (fa, fb) = (root_fields(a)?, root_fields(b)?);
    // Alike: the same Go name, JSON key, `omitempty`, and a type of the same shape.
    let alike = |f: &Field, g: &Field| {
        f.json == g.json
            && f.name == g.name
            && f.omitempty == g.omitempty
            && a.shape(f.ty) == b.shape(g.ty)
    };
    // Per field of `b`, the field of `a` it is alike; the fields of either that no field of
    // the other is alike differ.
    let take: Vec<Option<usize>> = fb
        .iter()
        .map(|g| fa.iter().position(|f| alike(f, g)))
        .collect();
    let mut keys: Vec<String> = Vec::new();
    let differing = fb
        .iter()
        .zip(&take)
        .filter(|(_, t)| t.is_none())
        .map(|(g, _)| g)
        .chain(
            fa.iter()
                .enumerate()
                .filter(|(i, _)| !take.contains(&Some(*i)))
                .map(|(_, f)| f),
        );
    for f in differing {
        if !keys.contains(&f.json) {
            keys.push(f.json.clone());
        }
    }
    keys.sort();
    let mut mask = 0;
    for k in &keys {
        // Every version's root key has a bit (see `known`); without one, nothing is alike.
        mask |= 1u64 << known().iter().position(|o| o == k)?;
    }
    let (ea, eb) = (a.version().epoch(), b.version().epoch());
    let texts = ea == eb
        && ea != HashEpoch::NameImage
        && a.ty(a.root()).name == b.ty(b.root()).name
        && parts(a, fa, &keys, ea) == parts(b, fb, &keys, eb);
    Some(Alike {
        keys,
        mask,
        take,
        texts,
    })
}

/// The root JSON keys of every version's `v1.Container`, sorted: bit `i` of a [`root_keys`]
/// set is `known()[i]`. Empty (so nothing is alike) if there were more than 64.
fn known() -> &'static [String] {
    static KNOWN: OnceLock<Vec<String>> = OnceLock::new();
    KNOWN.get_or_init(|| {
        let mut keys: Vec<String> = Vec::new();
        for v in KubeletVersion::all() {
            let fields = Schema::for_version(v).ok().and_then(root_fields);
            for f in fields.unwrap_or_default() {
                keys.push(f.json.clone());
            }
        }
        keys.sort();
        keys.dedup();
        if keys.len() > 64 {
            keys.clear();
        }
        keys
    })
}

/// Which of the root JSON keys of every version's `v1.Container` a container object has, as
/// bits for [`Alike::mask`]: one pass over its entries instead of a lookup per differing key.
pub fn root_keys<'a>(json: impl Json<'a>) -> u64 {
    let JsonValue::Object(_, entries) = json.view() else {
        return 0;
    };
    let known = known();
    entries
        .filter_map(|(k, _)| known.binary_search_by(|o| o.as_str().cmp(k)).ok())
        .fold(0, |set, i| set | 1 << i)
}

/// The root struct's fields, when each is a named field with a JSON key of its own (the schema
/// has no key table for a struct where two fields claim one key).
fn root_fields(s: &Schema) -> Option<&[Field]> {
    let Kind::Struct(fields) = &s.ty(s.root()).kind else {
        return None;
    };
    s.struct_keys(s.root())?;
    fields
        .iter()
        .all(|f| !f.inline)
        .then_some(fields.as_slice())
}

/// One part of a root struct's text for a container without the differing keys.
#[derive(Debug, PartialEq, Eq)]
enum Part<'s> {
    /// A field both graphs have alike: its text is the container's, the same under both.
    Shared(&'s str),
    /// A differing field's zero value, as the epoch writes it (never empty: a field `omitempty`
    /// drops is no part at all).
    Zero(Vec<u8>),
}

/// The parts of the root struct's text, in the order the epoch's writer puts them.
fn parts<'s>(
    s: &Schema,
    fields: &'s [Field],
    differing: &[String],
    epoch: HashEpoch,
) -> Vec<Part<'s>> {
    let mut out = Vec::with_capacity(fields.len());
    for f in fields {
        if !differing.contains(&f.json) {
            out.push(Part::Shared(&f.json));
            continue;
        }
        let mut text = Vec::new();
        match epoch {
            HashEpoch::Spew => spew::write_zero_field(s, f, &mut text),
            HashEpoch::Json | HashEpoch::NameImage => gojson::write_zero_field(s, f, &mut text),
        }
        if !text.is_empty() {
            out.push(Part::Zero(text));
        }
    }
    out
}

/// For the tests: every version's schema.
#[cfg(test)]
fn schemas() -> Vec<&'static Schema> {
    KubeletVersion::all()
        .map(|v| Schema::for_version(v).expect("schema"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kubelet::decode::{decode_container, Arena};

    #[test]
    fn a_graph_is_alike_itself_everywhere() {
        for s in schemas() {
            let same = alike(s, s).expect("comparable");
            assert!(same.keys.is_empty(), "{}", s.version());
            assert_eq!(same.texts, s.version().epoch() != HashEpoch::NameImage);
        }
    }

    #[test]
    fn the_zero_parts_are_what_the_writers_write() {
        // The zero container's text is its parts joined as the writers join fields: pins the
        // per-field zero writers to the struct writers.
        let empty = serde_json::json!({});
        let arena = Arena::new();
        for s in schemas() {
            let fields = root_fields(s).expect("comparable");
            let every: Vec<String> = fields.iter().map(|f| f.json.clone()).collect();
            let zero = decode_container(s, &empty, "", &arena).expect("decode");
            let epoch = match s.version().epoch() {
                HashEpoch::Spew => HashEpoch::Spew,
                _ => HashEpoch::Json,
            };
            let joined: Vec<Vec<u8>> = parts(s, fields, &every, epoch)
                .into_iter()
                .map(|p| match p {
                    Part::Zero(t) => t,
                    Part::Shared(_) => unreachable!("every key differs"),
                })
                .collect();
            let mut want = Vec::new();
            let got = match epoch {
                HashEpoch::Spew => {
                    spew::write_container(s, &zero, &mut want);
                    format!("({}){{{}}}", s.ty(s.root()).name, join(&joined, b" "))
                }
                _ => {
                    gojson::write_container(s, &zero, false, &mut want);
                    format!("{{{}}}", join(&joined, b","))
                }
            };
            assert_eq!(got, String::from_utf8_lossy(&want), "{}", s.version());
        }
    }

    #[test]
    fn root_keys_are_the_known_keys_a_container_has() {
        let c = serde_json::json!({"name": "a", "resources": null, "notAField": 1, "env": []});
        let set = root_keys(&c);
        let bit = |k: &str| 1u64 << known().iter().position(|o| o == k).expect("known");
        assert_eq!(set, bit("name") | bit("resources") | bit("env"));
        assert_eq!(root_keys(&serde_json::json!([1])), 0);
        for s in schemas() {
            let one = alike(s, schemas()[0]).expect("comparable");
            let from_keys = one.keys.iter().fold(0, |m, k| m | bit(k));
            assert_eq!(one.mask, from_keys, "{}", s.version());
        }
    }

    fn join(parts: &[Vec<u8>], sep: &[u8]) -> String {
        String::from_utf8_lossy(&parts.join(sep)).into_owned()
    }

    #[test]
    fn neighbours_differ_in_the_fields_they_changed() {
        let v = |m: &str| Schema::for_version(m.parse().expect("version")).expect("schema");
        // 1.28 adds restartPolicy (a *string, omitempty): absent, nothing is written.
        let a = alike(v("1.27"), v("1.28")).expect("comparable");
        assert!(a.keys.contains(&"restartPolicy".to_string()), "{a:?}");
        assert!(a.texts, "{a:?}");
        // Across epochs, the decode alone is shared.
        let a = alike(v("1.30"), v("1.31")).expect("comparable");
        assert!(!a.texts);
        let a = alike(v("1.15"), v("1.16")).expect("comparable");
        assert!(!a.texts);
    }
}
