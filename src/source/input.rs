//! What `kubehash hash` reads: the containers to hash and a name for each.
//!
//! Accepted, in one file or on stdin, one or several JSON values one after another (so JSON Lines
//! work too):
//! * a Pod (`kubectl get pod -o json`): its init, regular and ephemeral containers, named
//!   `namespace/pod/container`;
//! * a PodList or List (`kubectl get pods -A -o json`): every pod in it;
//! * a golden-vector record `{"id": …, "container": {…}}`, named by its `id`;
//! * a container object alone (`{"name": …, "image": …}`), named by its `name`;
//! * a JSON array of any of these;
//!
//! or the same as YAML documents. A directory holds any number of such files. Everything is read by [`crate::source::reader`], as every other
//! command reads its input. A value that is not JSON stops the read with an error naming the line
//! and column; a value of an unknown shape, or a pod without containers, becomes an
//! [`Item::Invalid`] so the rest of the input is still processed.

use std::io::Read;
use std::path::Path;

use serde_json::Value;

use crate::error::{Error, Problem, Result};
use crate::kubelet::json::{to_value, Json, JsonValue};
use crate::source::parallel::{for_each_file, Input};
use crate::source::pods::{container_slots, kubectl_table_hint, ContainerSlot};
use crate::source::reader::for_each_object_in_stream;

/// One thing to hash, or the reason a part of the input could not become one. `J` is the
/// container's JSON, a view of the object it came from (`&Value`, or a [`crate::source::doc`]
/// node).
#[derive(Debug)]
pub enum Item<J> {
    Container {
        /// `namespace/pod/container`, the record's `id`, or the container's name.
        id: String,
        /// Prefix for decode errors, e.g. `default/web: spec.containers[1]`.
        path: String,
        json: J,
    },
    Invalid {
        id: String,
        error: Problem,
    },
}

/// Every item in `path`: a file, a directory of them, or `-` for stdin, read by the one reader
/// ([`crate::source::reader`]), one object at a time: the items of a PodList are parsed and
/// handed over one at a time.
pub fn for_each_item(path: &Path, mut each: impl FnMut(Item<&Value>)) -> Result<()> {
    for_each_placed_object(path, |source, n, value| {
        object_items(&value, source, n, &mut each)
    })
}

/// Every object in `path` with where it is: its file and its number there (from 1), a
/// directory's files one after the other, each named as itself; `stdin` for `-`. An input
/// without a single object is an error.
pub fn for_each_placed_object(path: &Path, each: impl FnMut(&str, usize, Value)) -> Result<()> {
    if count_placed_objects(path, each)? == 0 {
        return Err(no_input(&Input::Path(path).name()));
    }
    Ok(())
}

/// [`for_each_placed_object`], and how many there were: none is no error here (an empty list
/// of something other than pods may be all there is).
pub fn count_placed_objects(
    path: &Path,
    mut each: impl FnMut(&str, usize, Value),
) -> Result<usize> {
    let mut objects = 0usize;
    for_each_file(&Input::Path(path), 0, |file, _| {
        let source = file.name();
        let mut n = 0usize;
        file.for_each_object(&mut |value| {
            n += 1;
            each(&source, n, value);
        })?;
        objects += n;
        Ok(())
    })?;
    Ok(objects)
}

/// [`for_each_item`] over a stream (JSON, or YAML if its first byte says so).
pub fn for_each_item_in(
    reader: impl Read,
    source: &str,
    each: impl FnMut(Item<&Value>),
) -> Result<()> {
    items(source, each, |f| {
        for_each_object_in_stream(reader, source, None, f)
    })
}

fn items(
    source: &str,
    mut each: impl FnMut(Item<&Value>),
    read: impl FnOnce(&mut dyn FnMut(Value)) -> Result<()>,
) -> Result<()> {
    let mut n = 0usize;
    read(&mut |value| {
        n += 1;
        object_items(&value, source, n, &mut each);
    })?;
    if n == 0 {
        return Err(no_input(source));
    }
    Ok(())
}

/// Calls `each` with the items of the `n`th object (from 1) of `source`, in input order.
pub fn object_items<'a, J: Json<'a>>(
    value: J,
    source: &str,
    n: usize,
    each: &mut impl FnMut(Item<J>),
) {
    collect(value, &Here { source, n }, each);
}

/// Where an object is in its input, `<source>: object <n>`, for ids and messages: written out
/// only when one needs it (most containers have a name and no error).
struct Here<'s> {
    source: &'s str,
    n: usize,
}

impl std::fmt::Display for Here<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: object {}", self.source, self.n)
    }
}

/// The error for an input without a single object.
pub fn no_input(source: &str) -> Error {
    Error::Input {
        source_name: source.to_string(),
        reason: "no container in it (no input, or an empty list)".into(),
    }
}

/// The keys that make an object something other than a container alone: a record's
/// `container`, a list's `items`, a `kind`, a pod's `spec`. An object with none of them is read
/// as a container (by its `name`).
pub const NOT_A_CONTAINER_KEYS: [&str; 4] = ["container", "items", "kind", "spec"];

/// The keys of an object that `collect` reads, found in one pass over its entries (each looked
/// up on its own, a bare container's keys were walked five times). An object never repeats a
/// key here (`kubelet::json`), so the entry found is the one `Json::field` finds.
struct RootKeys<J> {
    kind: Option<J>,
    items: Option<J>,
    container: Option<J>,
    id: Option<J>,
    spec: Option<J>,
    name: Option<J>,
}

impl<'a, J: Json<'a>> RootKeys<J> {
    fn of(entries: J::Entries) -> Self {
        let mut keys = RootKeys {
            kind: None,
            items: None,
            container: None,
            id: None,
            spec: None,
            name: None,
        };
        for (k, v) in entries {
            let slot = match k {
                "kind" => &mut keys.kind,
                "items" => &mut keys.items,
                "container" => &mut keys.container,
                "id" => &mut keys.id,
                "spec" => &mut keys.spec,
                "name" => &mut keys.name,
                _ => continue,
            };
            slot.get_or_insert(v);
        }
        keys
    }
}

fn collect<'a, J: Json<'a>>(value: J, here: &Here, each: &mut impl FnMut(Item<J>)) {
    let invalid = |reason: String| Item::Invalid {
        id: here.to_string(),
        error: Problem(format!("{here}: {reason}")),
    };
    match value.view() {
        JsonValue::Array(_, values) => {
            for v in values {
                collect(v, here, each);
            }
        }
        JsonValue::Object(_, entries) => {
            let root = RootKeys::of(entries);
            let kind = root.kind.and_then(J::as_str).unwrap_or("");
            if let Some(container) = root.container.filter(|c| c.is_object()) {
                // A golden-vector record; its own "kind" (synthetic, …) is not a Kubernetes kind.
                let id = match root.id {
                    Some(id) => id
                        .as_str()
                        .map_or_else(|| to_value(id).to_string(), str::to_string),
                    None => format!("#{}", here.n),
                };
                each(Item::Container {
                    path: id.clone(),
                    id,
                    json: container,
                });
            } else if kind == "PodList"
                || kind == "List"
                || (kind.is_empty() && root.items.is_some())
            {
                match root.items.map(J::view) {
                    Some(JsonValue::Array(_, pods)) => {
                        for pod in pods {
                            collect(pod, here, each);
                        }
                    }
                    Some(JsonValue::Null) | None => {}
                    Some(_) => each(invalid(format!("{kind} items is not a list"))),
                }
            } else if kind == "Pod" || (kind.is_empty() && root.spec.is_some()) {
                pod_containers(value, here, each);
            } else if !kind.is_empty() {
                each(invalid(format!(
                    "a {kind} is not a Pod, PodList or container"
                )));
            } else if let Some(id) = root.name.and_then(J::as_str) {
                each(Item::Container {
                    path: id.to_string(),
                    id: id.to_string(),
                    json: value,
                });
            } else {
                each(invalid(
                    "not a Pod, PodList, container (no \"name\") or {\"id\",\"container\"} record"
                        .to_string(),
                ));
            }
        }
        other => each(invalid(format!(
            "expected a JSON object, got {}{}",
            other.a_kind(),
            match other {
                JsonValue::String(s) => kubectl_table_hint(s),
                _ => "",
            }
        ))),
    }
}

/// The containers of one pod object, in the order the kubelet starts them.
fn pod_containers<'a, J: Json<'a>>(pod: J, here: &Here, each: &mut impl FnMut(Item<J>)) {
    let metadata = pod.field("metadata");
    let meta = |k: &str| {
        metadata
            .and_then(|m| m.field(k))
            .and_then(J::as_str)
            .unwrap_or("")
    };
    let (ns, name) = (meta("namespace"), meta("name"));
    let pod_id = match (ns.is_empty(), name.is_empty()) {
        (_, true) => here.to_string(),
        (true, false) => name.to_string(),
        (false, false) => format!("{ns}/{name}"),
    };
    let mut found = 0;
    for slot in container_slots(pod) {
        match slot {
            ContainerSlot::Container {
                list,
                index: i,
                json: c,
            } => {
                found += 1;
                let path = format!("{pod_id}: spec.{list}[{i}]");
                match c.field("name").and_then(J::as_str) {
                    Some(cname) if c.is_object() => each(Item::Container {
                        id: format!("{pod_id}/{cname}"),
                        path,
                        json: c,
                    }),
                    _ => each(Item::Invalid {
                        id: format!("{pod_id}/{list}[{i}]"),
                        error: Problem(format!("{path}: a container needs a string \"name\"")),
                    }),
                }
            }
            ContainerSlot::NotAList { list, got } => each(Item::Invalid {
                id: pod_id.clone(),
                error: Problem(format!(
                    "{pod_id}: spec.{list} must be a list, got {}",
                    got.view().a_kind()
                )),
            }),
        }
    }
    if found == 0 {
        each(Item::Invalid {
            id: pod_id.clone(),
            error: Problem(format!("{pod_id}: pod has no containers")),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The one pass finds what a lookup of each key finds, on both views, the keys present,
    /// absent, null, nested or at either end.
    #[test]
    fn root_keys_are_found_as_each_field_is() {
        for text in [
            r#"{"name":"a","image":"b"}"#,
            r#"{"id":"x","container":{"name":"a"},"kind":"synthetic"}"#,
            r#"{"kind":"List","metadata":{"name":"m"},"items":[{"name":"a"}]}"#,
            r#"{"spec":{"containers":[]},"metadata":{"name":"p"},"name":null}"#,
            r#"{"a":{"kind":"x","items":[]},"id":7}"#,
            "{}",
        ] {
            let value: Value = serde_json::from_str(text).unwrap();
            let doc = crate::source::doc::Doc::parse(text.as_bytes().to_vec()).unwrap();
            fn check<'a, J: Json<'a>>(v: J, text: &str) {
                let JsonValue::Object(_, entries) = v.view() else {
                    panic!("{text}")
                };
                let r = RootKeys::<J>::of(entries);
                let seen = [r.kind, r.items, r.container, r.id, r.spec, r.name];
                for (key, got) in ["kind", "items", "container", "id", "spec", "name"]
                    .into_iter()
                    .zip(seen)
                {
                    let want = v.field(key).map(|j| to_value(j));
                    assert_eq!(got.map(|j| to_value(j)), want, "{key} in {text}");
                }
            }
            check(&value, text);
            check(doc.root(), text);
        }
    }

    fn ids(input: &str) -> Vec<String> {
        let mut ids = Vec::new();
        for_each_item_in(input.as_bytes(), "t", |i| {
            ids.push(match i {
                Item::Container { id, .. } => id,
                Item::Invalid { error, .. } => format!("ERR {error}"),
            })
        })
        .unwrap();
        ids
    }

    #[test]
    fn shapes() {
        let pod = r#"{"kind":"Pod","metadata":{"namespace":"ns","name":"p"},
            "spec":{"initContainers":[{"name":"init"}],"containers":[{"name":"a"},{"name":"b"}]}}"#;
        assert_eq!(ids(pod), ["ns/p/init", "ns/p/a", "ns/p/b"]);
        let list = format!(r#"{{"kind":"PodList","items":[{pod},{pod}]}}"#);
        assert_eq!(ids(&list).len(), 6);
        assert_eq!(
            ids("{\"id\":\"x\",\"container\":{\"name\":\"c\"}}\n{\"name\":\"d\"}"),
            ["x", "d"]
        );
        let golden = r#"{"id":"g","kind":"synthetic","container":{"name":"c"},"hash":{}}"#;
        assert_eq!(ids(golden), ["g"]);
        assert_eq!(ids(r#"[{"name":"a"},{"name":"b"}]"#), ["a", "b"]);
    }

    #[test]
    fn problems_are_reported_and_the_rest_goes_on() {
        let got = ids("{\"name\":\"a\"}\n{\"kind\":\"Pod\",\"metadata\":{\"name\":\"p\"},\"spec\":{}}\n7\n{\"name\":\"b\"}");
        assert_eq!(got[0], "a");
        assert_eq!(got[1], "ERR p: pod has no containers");
        assert_eq!(
            got[2],
            "ERR t: object 3: expected a JSON object, got a number"
        );
        assert_eq!(got[3], "b");
    }

    #[test]
    fn broken_json_is_an_error_with_a_position() {
        let err = for_each_item_in(&b"{\"name\":\"a\"}\n{\"name\":"[..], "in.jsonl", |_| {})
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("in.jsonl: not valid JSON: EOF while parsing"),
            "{err}"
        );
        assert!(err.contains("line 2"), "{err}");
        assert!(for_each_item_in(&b"  "[..], "x", |_| {}).is_err());
    }
}
