//! Whether kubelet F's hash of a spec covers everything kubelet T's hash covers (design §5): the
//! half of the proof rule that the stored hash alone cannot give.
//!
//! `hash_F(S) == H` proves that the running container agrees with S on everything kubelet F
//! *decoded*. A field that F did not know was dropped when F decoded the pod, so F never applied
//! it to the container and the stored hash says nothing about it. If kubelet T hashes that field,
//! T would restart the container to apply it, and it should: a rewrite would keep the container
//! running without it (an `appArmorProfile` not enforced). So a rewrite F → T is provable only if:
//! * T hashes only name and image (every whole-spec hash covers both), or
//! * F and T both hash the whole spec and S sets no field that T decodes and F dropped.
//!
//! A downgrade from the name+image epoch to a whole-spec one is never provable: F's hash says
//! nothing of the rest of the spec.
//!
//! "Sets" means what Go would hold as a non-zero value: a non-empty string, `true`, a non-zero
//! number, a non-nil pointer, list or map (an empty object for a pointer field counts: T sees a
//! non-nil pointer). Fields are named by their JSON path, so a Go rename that keeps the JSON name
//! (`Handler` → `ProbeHandler`, inlined) is not a difference.
//!
//! ```
//! use kubehash::analysis::coverage::{coverage, Coverage};
//! let c = serde_json::json!({"name":"a","image":"b",
//!     "securityContext":{"appArmorProfile":{"type":"RuntimeDefault"}}});
//! let v = |s: &str| s.parse().unwrap();
//! assert_eq!(coverage(&c, v("1.29"), v("1.30"), "").unwrap(),
//!     Coverage::Dropped(vec!["securityContext.appArmorProfile".into()]));
//! assert_eq!(coverage(&c, v("1.30"), v("1.31"), "").unwrap(), Coverage::Covered);
//! ```

use std::collections::BTreeSet;

use serde_json::Value;

use crate::error::Result;
use crate::kubelet::decode::{decode_container, Arena, IntOrString, Val};
use crate::kubelet::schema::{Kind, Schema, TypeId};
use crate::kubelet::version::{HashEpoch, KubeletVersion};

/// Whether F's hash of a spec covers T's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Coverage {
    /// Everything T hashes in this spec, F hashed too.
    Covered,
    /// F hashes only name and image, T the whole spec: nothing else is proven.
    NameImageOnly,
    /// The spec sets these fields (JSON paths, `[]` for list items), which T hashes and F dropped.
    Dropped(Vec<String>),
}

/// Does kubelet `from`'s hash of `container` cover what kubelet `to`'s hash covers?
/// `path` prefixes decode errors.
pub fn coverage(
    container: &Value,
    from: KubeletVersion,
    to: KubeletVersion,
    path: &str,
) -> Result<Coverage> {
    match (from.epoch(), to.epoch()) {
        (_, HashEpoch::NameImage) => return Ok(Coverage::Covered),
        (HashEpoch::NameImage, _) => return Ok(Coverage::NameImageOnly),
        _ => {}
    }
    let (sf, st) = (Schema::for_version(from)?, Schema::for_version(to)?);
    if sf.same_as() == st.same_as() {
        return Ok(Coverage::Covered);
    }
    let set_by = |schema: &Schema| -> Result<BTreeSet<String>> {
        let arena = Arena::new();
        let val = decode_container(schema, container, path, &arena)?;
        let mut out = BTreeSet::new();
        set_paths(schema, schema.root(), &val, String::new(), &mut out);
        Ok(out)
    };
    let (seen_f, seen_t) = (set_by(sf)?, set_by(st)?);
    let dropped: BTreeSet<String> = seen_t
        .difference(&seen_f)
        .map(|p| without_indices(p))
        .collect();
    let shallowest: Vec<String> = dropped
        .iter()
        .filter(|p| {
            !dropped.iter().any(|q| {
                q != *p && (p.starts_with(&format!("{q}.")) || p.starts_with(&format!("{q}[")))
            })
        })
        .cloned()
        .collect();
    Ok(if shallowest.is_empty() {
        Coverage::Covered
    } else {
        Coverage::Dropped(shallowest)
    })
}

/// `ports[2].hostIP` → `ports[].hostIP`; map keys (`limits[cpu]`) are kept.
fn without_indices(p: &str) -> String {
    let mut out = String::with_capacity(p.len());
    let mut rest = p;
    while let Some(i) = rest.find("[#") {
        out.push_str(&rest[..=i]);
        let after = &rest[i + 2..];
        let end = after.find(']').unwrap_or(after.len());
        rest = &after[end..];
    }
    out.push_str(rest);
    out
}

/// Inserts the JSON path of every non-zero value under `v` (list items as `[#i]`, map entries as
/// `[key]`), including non-nil pointers, lists and maps themselves.
fn set_paths(schema: &Schema, ty: TypeId, v: &Val, at: String, out: &mut BTreeSet<String>) {
    match (&schema.ty(ty).kind, v.resolved()) {
        (_, Val::Nil) => {}
        (Kind::Ptr(elem), Val::Ptr(inner)) => {
            out.insert(at.clone());
            set_paths(schema, *elem, inner, at, out);
        }
        (Kind::Slice(elem), Val::List(items)) => {
            out.insert(at.clone());
            for (i, item) in items.iter().enumerate() {
                set_paths(schema, *elem, item, format!("{at}[#{i}]"), out);
            }
        }
        (Kind::Map { value }, Val::Map(entries)) => {
            out.insert(at.clone());
            for (k, item) in *entries {
                let key = format!("{at}[{k}]");
                out.insert(key.clone());
                set_paths(schema, *value, item, key, out);
            }
        }
        (Kind::Struct(fields), Val::Struct(vals)) => {
            for (f, item) in fields.iter().zip(*vals) {
                let child = if f.inline {
                    at.clone()
                } else if at.is_empty() {
                    f.json.clone()
                } else {
                    format!("{at}.{}", f.json)
                };
                set_paths(schema, f.ty, item, child, out);
            }
        }
        (_, Val::Str(s)) if !s.is_empty() => {
            out.insert(at);
        }
        (_, Val::Bool(true)) => {
            out.insert(at);
        }
        (_, Val::Int(n)) if *n != 0 => {
            out.insert(at);
        }
        (_, Val::Quantity(_)) => {
            out.insert(at);
        }
        (_, Val::IntOrString(x)) if *x != IntOrString::Int(0) => {
            out.insert(at);
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn v(s: &str) -> KubeletVersion {
        s.parse().unwrap()
    }

    #[test]
    fn name_image_targets_are_always_covered_and_never_prove_a_whole_spec() {
        let c = json!({"name":"a","image":"b","args":["x"]});
        for f in ["1.8", "1.15", "1.16", "1.30", "1.31", "1.36"] {
            assert_eq!(
                coverage(&c, v(f), v("1.31"), "").unwrap(),
                Coverage::Covered
            );
        }
        for t in ["1.8", "1.15", "1.16", "1.30"] {
            assert_eq!(
                coverage(&c, v("1.31"), v(t), "").unwrap(),
                Coverage::NameImageOnly,
                "1.31 → {t}"
            );
        }
    }

    #[test]
    fn a_field_the_old_kubelet_dropped_is_named() {
        // VolumeMount.recursiveReadOnly arrived in 1.30's types (KEP 3857).
        let c = json!({"name":"a","image":"b","volumeMounts":[
            {"name":"v","mountPath":"/v"},
            {"name":"w","mountPath":"/w","readOnly":true,"recursiveReadOnly":"Enabled"}]});
        assert_eq!(
            coverage(&c, v("1.29"), v("1.30"), "").unwrap(),
            Coverage::Dropped(vec!["volumeMounts[].recursiveReadOnly".into()])
        );
        // Unset, it does not matter; known to both, it does not either.
        let plain = json!({"name":"a","image":"b","volumeMounts":[{"name":"v","mountPath":"/v"}]});
        assert_eq!(
            coverage(&plain, v("1.29"), v("1.30"), "").unwrap(),
            Coverage::Covered
        );
        assert_eq!(
            coverage(&c, v("1.30"), v("1.30"), "").unwrap(),
            Coverage::Covered
        );
    }

    #[test]
    fn a_whole_new_struct_is_named_once() {
        // Container.resizePolicy arrived in 1.27.
        let c = json!({"name":"a","image":"b","resizePolicy":[{"resourceName":"cpu","restartPolicy":"NotRequired"}]});
        assert_eq!(
            coverage(&c, v("1.26"), v("1.27"), "").unwrap(),
            Coverage::Dropped(vec!["resizePolicy".into()])
        );
        // The spew epoch too: startupProbe is 1.16+, so a 1.18 → 1.15 downgrade cannot prove it.
        let p = json!({"name":"a","image":"b","startupProbe":{"exec":{"command":["true"]}}});
        assert_eq!(
            coverage(&p, v("1.18"), v("1.15"), "").unwrap(),
            Coverage::Covered,
            "1.15 does not hash startupProbe: nothing to cover"
        );
        assert_eq!(
            coverage(&p, v("1.15"), v("1.18"), "").unwrap(),
            Coverage::Dropped(vec!["startupProbe".into()])
        );
    }

    #[test]
    fn renamed_go_fields_with_the_same_json_are_the_same_field() {
        // Probe.Handler became Probe.ProbeHandler in 1.23; both inline into the same JSON keys.
        let c =
            json!({"name":"a","image":"b","livenessProbe":{"httpGet":{"port":8080,"path":"/"}}});
        assert_eq!(
            coverage(&c, v("1.22"), v("1.23"), "").unwrap(),
            Coverage::Covered
        );
    }

    #[test]
    fn an_empty_object_for_a_new_pointer_counts() {
        let c = json!({"name":"a","image":"b","securityContext":{"appArmorProfile":{}}});
        assert_eq!(
            coverage(&c, v("1.29"), v("1.30"), "").unwrap(),
            Coverage::Dropped(vec!["securityContext.appArmorProfile".into()])
        );
    }

    #[test]
    fn indices_are_folded_but_map_keys_kept() {
        assert_eq!(without_indices("a[#0].b[#12].c[cpu]"), "a[].b[].c[cpu]");
    }
}
