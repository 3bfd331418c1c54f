//! Why kubelet T's hash of a container differs from kubelet F's, in words a person can act on:
//! the epochs differ (struct dump, JSON, name+image), or within one epoch, the fields each
//! kubelet prints (`VolumeMount.SubPathExpr` appears in 1.14, `startupProbe` is unknown to 1.15,
//! …), found by decoding the container with both schemas and comparing what each renders.

use std::collections::BTreeSet;

use serde_json::Value;

use crate::kubelet::decode::{decode_container, Arena, Val};
use crate::kubelet::gojson;
use crate::kubelet::schema::{Kind, Schema, TypeId};
use crate::kubelet::version::{HashEpoch, KubeletVersion};

/// How many field-level reasons to list before summarising the rest.
const MAX_REASONS: usize = 4;

/// Why `hash_F(S) != hash_T(S)`, in words a person can act on.
pub fn why_changed(container: &Value, from: KubeletVersion, to: KubeletVersion) -> Vec<String> {
    use HashEpoch::*;
    match (from.epoch(), to.epoch()) {
        (NameImage, NameImage) => vec![format!(
            "kubelets {from} and {to} hash name and image alike; this should not differ"
        )],
        (_, NameImage) => vec![format!(
            "kubelet {to} hashes only name and image; {from} hashes the whole spec"
        )],
        (NameImage, _) => vec![format!(
            "kubelet {to} hashes the whole spec; {from} hashes only name and image"
        )],
        (Spew, Json) => vec![format!(
            "kubelet {to} hashes the spec's JSON; {from} hashes a dump of its Go struct"
        )],
        (Json, Spew) => vec![format!(
            "kubelet {to} hashes a dump of the Go struct; {from} hashes the spec's JSON"
        )],
        (epoch, _) => {
            let (Ok(sf), Ok(st)) = (Schema::for_version(from), Schema::for_version(to)) else {
                return vec![];
            };
            let arena = Arena::new();
            let (Ok(vf), Ok(vt)) = (
                decode_container(sf, container, "", &arena),
                decode_container(st, container, "", &arena),
            ) else {
                return vec![];
            };
            let (mut a, mut b) = (BTreeSet::new(), BTreeSet::new());
            if epoch == Spew {
                spew_fields(sf, sf.root(), &vf, "", &mut a);
                spew_fields(st, st.root(), &vt, "", &mut b);
            } else {
                json_fields(&marshal(sf, &vf), "", &mut a);
                json_fields(&marshal(st, &vt), "", &mut b);
            }
            let mut out: Vec<String> = Vec::new();
            let gone = shallowest_difference(&a, &b);
            let new = shallowest_difference(&b, &a);
            let mut listed = 0;
            for p in &new {
                if listed < MAX_REASONS {
                    out.push(format!("{p}: hashed by {to}, not by {from}"));
                }
                listed += 1;
            }
            for p in &gone {
                if listed < MAX_REASONS {
                    out.push(format!("{p}: hashed by {from}, not by {to}"));
                }
                listed += 1;
            }
            if listed > MAX_REASONS {
                out.push(format!(
                    "… and {} more field differences",
                    listed - MAX_REASONS
                ));
            }
            if out.is_empty() {
                out.push(format!(
                    "the same fields are hashed but written differently by {from} and {to}"
                ));
            }
            out
        }
    }
}

/// The entries of `x` missing from `y`, leaving out those below another listed entry
/// (a new struct implies its fields).
fn shallowest_difference(x: &BTreeSet<String>, y: &BTreeSet<String>) -> Vec<String> {
    let path = |s: &str| s.split(" (").next().unwrap_or(s).to_string();
    let diff: Vec<String> = x.difference(y).map(|s| path(s)).collect();
    x.difference(y)
        .filter(|entry| {
            let p = path(entry);
            !diff.iter().any(|q| {
                *q != p && (p.starts_with(&format!("{q}.")) || p.starts_with(&format!("{q}[")))
            })
        })
        .cloned()
        .collect()
}

fn marshal(schema: &Schema, v: &Val) -> Value {
    let mut text = Vec::new();
    gojson::write_container(schema, v, false, &mut text);
    serde_json::from_slice(&text).unwrap_or(Value::Null)
}

/// Every field go-spew prints, as `Path.Field (type)`.
fn spew_fields(schema: &Schema, ty: TypeId, v: &Val, prefix: &str, out: &mut BTreeSet<String>) {
    match (&schema.ty(ty).kind, v.resolved()) {
        (Kind::Ptr(elem), Val::Ptr(inner)) => spew_fields(schema, *elem, inner, prefix, out),
        (Kind::Slice(elem), Val::List(items)) => {
            for item in *items {
                spew_fields(schema, *elem, item, &format!("{prefix}[]"), out);
            }
        }
        (Kind::Map { value }, Val::Map(entries)) => {
            for (k, item) in *entries {
                spew_fields(schema, *value, item, &format!("{prefix}[{k}]"), out);
            }
        }
        (Kind::Struct(fields), Val::Struct(vals)) => {
            for (f, item) in fields.iter().zip(*vals) {
                let path = if prefix.is_empty() {
                    f.name.clone()
                } else {
                    format!("{prefix}.{}", f.name)
                };
                out.insert(format!("{path} ({})", schema.ty(f.ty).name));
                spew_fields(schema, f.ty, item, &path, out);
            }
        }
        _ => {}
    }
}

/// Every key path of marshalled JSON.
fn json_fields(v: &Value, prefix: &str, out: &mut BTreeSet<String>) {
    match v {
        Value::Object(m) => {
            for (k, item) in m {
                let path = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                out.insert(path.clone());
                json_fields(item, &path, out);
            }
        }
        Value::Array(items) => {
            for item in items {
                json_fields(item, &format!("{prefix}[]"), out);
            }
        }
        _ => {}
    }
}
