//! What `kubehash hash` reads: the containers to hash and a name for each.
//!
//! Accepted, in one file or on stdin, one or several JSON values one after another (so JSON Lines
//! work too):
//! * a Pod (`kubectl get pod -o json`): its init, regular and ephemeral containers, named
//!   `namespace/pod/container`;
//! * a PodList or List (`kubectl get pods -A -o json`): every pod in it;
//! * a golden-vector record `{"id": …, "container": {…}}`, named by its `id`;
//! * a container object alone (`{"name": …, "image": …}`), named by its `name`;
//! * a JSON array of any of these.
//!
//! Input bytes are first read the way Go's decoder reads them ([`crate::kubelet::gojson::go_clean_input`]).
//! A value that is not JSON stops the read with an error naming the line and column; a value of
//! an unknown shape, or a pod without containers, becomes an [`Item::Invalid`] so the rest of the
//! input is still processed.

use serde_json::Value;

use crate::error::{Error, Result};
use crate::kubelet::gojson::go_clean_input;
use crate::source::pods::{for_each_value_raw, take_container_slots, ContainerSlot};

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
        error: String,
    },
}

/// Reads every item from `bytes`. `source` names the input in messages (a path, or `stdin`).
pub fn read_items(bytes: &[u8], source: &str) -> Result<Vec<Item>> {
    let mut items = Vec::new();
    for_each_item(bytes, source, |i| items.push(i))?;
    Ok(items)
}

/// Calls `each` for every item in `bytes`, in order, without holding more than one pod (or one
/// record) in memory: the items of a PodList are parsed and handed over one at a time.
///
/// The input is cut into its top-level values first, and each is parsed on its own: checking
/// for the end of input over the whole slice before every value made serde_json count lines from
/// the start each time (quadratic in the input). Errors name the line and column in the whole
/// input, as before.
pub fn for_each_item(bytes: &[u8], source: &str, mut each: impl FnMut(Item)) -> Result<()> {
    let cleaned = go_clean_input(bytes);
    let mut n = 0usize;
    let mut buf = Vec::new();
    for (start, end) in top_level_values(&cleaned) {
        let part = serde_json::de::SliceRead::new(&cleaned[start..end]);
        let parsed = for_each_value_raw(part, |value| {
            n += 1;
            let here = format!("{source}: object {n}");
            collect(value, &here, n, &mut buf);
            for item in buf.drain(..) {
                each(item);
            }
        });
        if let Err(e) = parsed {
            return Err(Error::Input {
                source_name: source.to_string(),
                reason: format!("not valid JSON: {}", at_position_in(&cleaned, start, &e)),
            });
        }
    }
    if n == 0 {
        return Err(Error::Input {
            source_name: source.to_string(),
            reason: "no JSON input".into(),
        });
    }
    Ok(())
}

/// The byte ranges of the top-level JSON values in `bytes`, found by one linear scan (strings
/// and their escapes respected). A value cut short runs to the end of the input, where parsing it
/// reports the error; bytes that are not JSON form a range of their own, for the same reason.
fn top_level_values(bytes: &[u8]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut i = 0;
    let ws = |b: u8| matches!(b, b' ' | b'\t' | b'\n' | b'\r');
    while i < bytes.len() {
        if ws(bytes[i]) {
            i += 1;
            continue;
        }
        let start = i;
        let (mut depth, mut in_string) = (0usize, false);
        while i < bytes.len() {
            let b = bytes[i];
            i += 1;
            if in_string {
                match b {
                    b'\\' => i += 1,
                    b'"' => {
                        in_string = false;
                        if depth == 0 {
                            break;
                        }
                    }
                    _ => {}
                }
                continue;
            }
            match b {
                b'"' => in_string = true,
                b'{' | b'[' => depth += 1,
                b'}' | b']' => {
                    depth = depth.saturating_sub(1);
                    if depth == 0 {
                        break;
                    }
                }
                // A scalar at the top level ends at white space or a structural character.
                _ if depth == 0
                    && i < bytes.len()
                    && (ws(bytes[i]) || b"{[\"".contains(&bytes[i])) =>
                {
                    break
                }
                _ => {}
            }
        }
        out.push((start, i.min(bytes.len())));
    }
    out
}

/// serde_json's error for a value that starts at `start`, with its line and column counted in
/// the whole input.
fn at_position_in(bytes: &[u8], start: usize, e: &serde_json::Error) -> String {
    let text = e.to_string();
    let suffix = format!(" at line {} column {}", e.line(), e.column());
    let Some(message) = text.strip_suffix(&suffix) else {
        return text;
    };
    let line_start = bytes[..start]
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(0, |p| p + 1);
    let base_line = 1 + bytes[..start].iter().filter(|&&b| b == b'\n').count();
    let line = base_line + e.line() - 1;
    let column = if e.line() == 1 {
        start - line_start + e.column()
    } else {
        e.column()
    };
    format!("{message} at line {line} column {column}")
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
                        error: format!("{here}: {kind} items is not a list"),
                    }),
                }
            } else if kind == "Pod" || (kind.is_empty() && obj.contains_key("spec")) {
                pod_containers(value, here, items);
            } else if !kind.is_empty() {
                items.push(Item::Invalid {
                    id: here.to_string(),
                    error: format!("{here}: a {kind} is not a Pod, PodList or container"),
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
                    error: format!(
                        "{here}: not a Pod, PodList, container (no \"name\") or {{\"id\",\"container\"}} record"
                    ),
                });
            }
        }
        other => items.push(Item::Invalid {
            id: here.to_string(),
            error: format!("{here}: expected a JSON object, got {}", short(other)),
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
                        error: format!("{path}: a container needs a string \"name\""),
                    }),
                }
            }
            ContainerSlot::NotAList { list, got } => items.push(Item::Invalid {
                id: pod_id.clone(),
                error: format!("{pod_id}: spec.{list} must be a list, got {}", short(&got)),
            }),
        }
    }
    if found == 0 {
        items.push(Item::Invalid {
            id: pod_id.clone(),
            error: format!("{pod_id}: pod has no containers"),
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

    /// The value-by-value reading must say exactly what one pass over the whole input says.
    #[test]
    fn cutting_into_values_changes_no_answer_and_no_error() {
        let whole = |bytes: &[u8]| -> std::result::Result<usize, String> {
            let mut n = 0;
            crate::source::pods::for_each_value(serde_json::de::SliceRead::new(bytes), "in", |_| {
                n += 1
            })
            .map(|()| n)
            .map_err(|e| e.to_string())
        };
        let cut = |bytes: &[u8]| -> std::result::Result<usize, String> {
            let mut n = 0;
            for_each_item(bytes, "in", |_| n += 1)
                .map(|()| n)
                .map_err(|e| e.to_string())
        };
        for input in [
            &b"{\"name\":\"a\"}\n{\"name\":\"b\"}\n"[..],
            b"{\"name\":\"a\"}{\"name\":\"b\"}",
            b"  [{\"name\":\"a\"},{\"name\":\"x}\"}]  ",
            b"{\"name\":\"a\"}\n{\"name\":",
            b"{\"name\":\"a\"}\n  {\"name\" 1}",
            b"{\"name\":\"a\"}\n{\"a\":\n\"b\" x}",
            b"{\"name\":\"a\"} junk",
            b"{\"name\":\"a\\\"}\"}\n{\"name\":\"b\"}",
            b"{} 1 \"s\" {}",
            b"   ",
            b"",
            b"{\"name\":\"a\"}]",
        ] {
            let (w, c) = (whole(input), cut(input));
            match (&w, &c) {
                (Ok(_), Ok(_)) => {}
                (Err(a), Err(b)) => assert_eq!(a, b, "{}", String::from_utf8_lossy(input)),
                _ => panic!("{}: {w:?} vs {c:?}", String::from_utf8_lossy(input)),
            }
        }
    }

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
        let err = read_items(b"{\"name\":\"a\"}\n{\"name\":", "in.jsonl")
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("in.jsonl: not valid JSON: EOF while parsing"),
            "{err}"
        );
        assert!(err.contains("line 2"), "{err}");
        assert!(read_items(b"  ", "x").is_err());
    }
}
