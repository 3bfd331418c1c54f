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
use crate::source::pods::{take_container_slots, ContainerSlot};
use crate::source::reader::{for_each_object_in_path, for_each_object_in_stream};

/// One thing to hash, or the reason a part of the input could not become one.
#[derive(Debug)]
pub enum Item {
    Container {
        /// `namespace/pod/container`, the record's `id`, or the container's name.
        id: String,
        /// Prefix for decode errors, e.g. `default/web: spec.containers[1]`.
        path: String,
        json: Value,
    },
    Invalid {
        id: String,
        error: Problem,
    },
}

/// Every item in `path`: a file, a directory of them, or `-` for stdin, read by the one reader
/// ([`crate::source::reader`]), one object at a time: the items of a PodList are parsed and
/// handed over one at a time.
pub fn for_each_item(path: &Path, each: impl FnMut(Item)) -> Result<()> {
    let source = if path.as_os_str() == "-" {
        "stdin".to_string()
    } else {
        path.display().to_string()
    };
    items(&source, each, |f| for_each_object_in_path(path, f))
}

/// [`for_each_item`] over a stream (JSON, or YAML if its first byte says so).
pub fn for_each_item_in(reader: impl Read, source: &str, each: impl FnMut(Item)) -> Result<()> {
    items(source, each, |f| {
        for_each_object_in_stream(reader, source, None, f)
    })
}

/// Every item of a stream, collected.
pub fn read_items(reader: impl Read, source: &str) -> Result<Vec<Item>> {
    let mut items = Vec::new();
    for_each_item_in(reader, source, |i| items.push(i))?;
    Ok(items)
}

fn items(
    source: &str,
    mut each: impl FnMut(Item),
    read: impl FnOnce(&mut dyn FnMut(Value)) -> Result<()>,
) -> Result<()> {
    let mut n = 0usize;
    let mut buf = Vec::new();
    read(&mut |value| {
        n += 1;
        object_items(value, source, n, &mut buf);
        for item in buf.drain(..) {
            each(item);
        }
    })?;
    if n == 0 {
        return Err(no_input(source));
    }
    Ok(())
}

/// The items of the `n`th object (from 1) of `source`, appended to `items`.
pub fn object_items(value: Value, source: &str, n: usize, items: &mut Vec<Item>) {
    let here = format!("{source}: object {n}");
    collect(value, &here, n, items);
}

/// The error for an input without a single object.
pub fn no_input(source: &str) -> Error {
    Error::Input {
        source_name: source.to_string(),
        reason: "no input".into(),
    }
}

fn collect(mut value: Value, here: &str, n: usize, items: &mut Vec<Item>) {
    match &mut value {
        Value::Array(values) => {
            for v in std::mem::take(values) {
                collect(v, here, n, items);
            }
        }
        Value::Object(obj) => {
            let kind = obj
                .get("kind")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            let kind = kind.as_str();
            if obj.get("container").is_some_and(Value::is_object) {
                // A golden-vector record; its own "kind" (synthetic, …) is not a Kubernetes kind.
                let container = obj
                    .get_mut("container")
                    .map(Value::take)
                    .unwrap_or_default();
                let id = match obj.get("id") {
                    Some(Value::String(s)) => s.clone(),
                    Some(other) => other.to_string(),
                    None => format!("#{n}"),
                };
                items.push(Item::Container {
                    path: id.clone(),
                    id,
                    json: container,
                });
            } else if kind == "PodList"
                || kind == "List"
                || (kind.is_empty() && obj.contains_key("items"))
            {
                match obj.get_mut("items").map(Value::take) {
                    Some(Value::Array(pods)) => {
                        for pod in pods {
                            collect(pod, here, n, items);
                        }
                    }
                    Some(Value::Null) | None => {}
                    Some(_) => items.push(Item::Invalid {
                        id: here.to_string(),
                        error: Problem(format!("{here}: {kind} items is not a list")),
                    }),
                }
            } else if kind == "Pod" || (kind.is_empty() && obj.contains_key("spec")) {
                pod_containers(value, here, items);
            } else if !kind.is_empty() {
                items.push(Item::Invalid {
                    id: here.to_string(),
                    error: Problem(format!(
                        "{here}: a {kind} is not a Pod, PodList or container"
                    )),
                });
            } else if obj.get("name").is_some_and(Value::is_string) {
                let id = obj
                    .get("name")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string();
                items.push(Item::Container {
                    path: id.clone(),
                    id,
                    json: value,
                });
            } else {
                items.push(Item::Invalid {
                    id: here.to_string(),
                    error: Problem(format!(
                        "{here}: not a Pod, PodList, container (no \"name\") or {{\"id\",\"container\"}} record"
                    )),
                });
            }
        }
        other => items.push(Item::Invalid {
            id: here.to_string(),
            error: Problem(format!(
                "{here}: expected a JSON object, got {}",
                short(other)
            )),
        }),
    }
}

/// The containers of one pod object, in the order the kubelet starts them.
fn pod_containers(mut pod: Value, here: &str, items: &mut Vec<Item>) {
    let meta = |k: &str| {
        pod.pointer(&format!("/metadata/{k}"))
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let (ns, name) = (meta("namespace"), meta("name"));
    let pod_id = match (ns.is_empty(), name.is_empty()) {
        (_, true) => here.to_string(),
        (true, false) => name,
        (false, false) => format!("{ns}/{name}"),
    };
    let mut found = 0;
    for slot in take_container_slots(&mut pod) {
        match slot {
            ContainerSlot::Container {
                list,
                index: i,
                json: c,
            } => {
                found += 1;
                let path = format!("{pod_id}: spec.{list}[{i}]");
                match c.get("name").and_then(Value::as_str).map(str::to_string) {
                    Some(cname) if c.is_object() => items.push(Item::Container {
                        id: format!("{pod_id}/{cname}"),
                        path,
                        json: c,
                    }),
                    _ => items.push(Item::Invalid {
                        id: format!("{pod_id}/{list}[{i}]"),
                        error: Problem(format!("{path}: a container needs a string \"name\"")),
                    }),
                }
            }
            ContainerSlot::NotAList { list, got } => items.push(Item::Invalid {
                id: pod_id.clone(),
                error: Problem(format!(
                    "{pod_id}: spec.{list} must be a list, got {}",
                    short(&got)
                )),
            }),
        }
    }
    if found == 0 {
        items.push(Item::Invalid {
            id: pod_id.clone(),
            error: Problem(format!("{pod_id}: pod has no containers")),
        });
    }
}

fn short(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a bool",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(input: &str) -> Vec<String> {
        read_items(input.as_bytes(), "t")
            .unwrap()
            .into_iter()
            .map(|i| match i {
                Item::Container { id, .. } => id,
                Item::Invalid { error, .. } => format!("ERR {error}"),
            })
            .collect()
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
        let err = read_items(&b"{\"name\":\"a\"}\n{\"name\":"[..], "in.jsonl")
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("in.jsonl: not valid JSON: EOF while parsing"),
            "{err}"
        );
        assert!(err.contains("line 2"), "{err}");
        assert!(read_items(&b"  "[..], "x").is_err());
    }
}
