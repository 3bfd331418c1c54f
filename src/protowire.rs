//! Editing CRI responses at the protobuf wire level, for the shim.
//!
//! The shim must change one annotation value and nothing else. Decoding into our `proto/` subset
//! and re-encoding would drop every field the subset does not model (and a newer runtime adds
//! fields all the time), so this module walks the wire format instead: it copies every field
//! verbatim except the annotation map entries it replaces, and re-encodes only the length
//! prefixes of the messages that contain them. Anything it cannot parse is left untouched.
//!
//! Where container annotations travel (field numbers from upstream `api.proto`):
//!
//! | response | field → message |
//! |---|---|
//! | `ListContainersResponse`, `StreamContainersResponse` | 1 → `Container` (id 1, annotations 9) |
//! | `ContainerStatusResponse` | 1 → `ContainerStatus` (id 1, annotations 13) |
//! | `PodSandboxStatusResponse` | 3 → `ContainerStatus` |
//! | `ContainerEventResponse` | 5 → `ContainerStatus` |

/// Which response message a gRPC method returns, for the fields that hold containers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Carrier {
    /// Repeated `Container` at field 1.
    Containers,
    /// `ContainerStatus` (single or repeated) at this field.
    Statuses(u32),
}

impl Carrier {
    /// The carrier for a RuntimeService method, if its response holds container annotations.
    pub fn for_method(method: &str) -> Option<Carrier> {
        match method {
            "ListContainers" | "StreamContainers" => Some(Carrier::Containers),
            "ContainerStatus" => Some(Carrier::Statuses(1)),
            "PodSandboxStatus" => Some(Carrier::Statuses(3)),
            "GetContainerEvents" => Some(Carrier::Statuses(5)),
            _ => None,
        }
    }

    fn field_and_layout(self) -> (u32, u32) {
        // (field of the container message in the response, annotations field in it)
        match self {
            Carrier::Containers => (1, 9),
            Carrier::Statuses(f) => (f, 13),
        }
    }
}

fn read_varint(b: &[u8], pos: &mut usize) -> Option<u64> {
    let mut v: u64 = 0;
    for shift in (0..64).step_by(7) {
        let byte = *b.get(*pos)?;
        *pos += 1;
        v |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// One top-level field: number, wire type, the whole encoded field, and the payload range of a
/// length-delimited one.
struct Field {
    number: u32,
    wire: u8,
    whole: std::ops::Range<usize>,
    payload: std::ops::Range<usize>,
}

fn fields(b: &[u8]) -> Option<Vec<Field>> {
    let mut out = Vec::new();
    let mut pos = 0;
    while pos < b.len() {
        let start = pos;
        let key = read_varint(b, &mut pos)?;
        let (number, wire) = ((key >> 3) as u32, (key & 7) as u8);
        let payload = match wire {
            0 => {
                read_varint(b, &mut pos)?;
                pos..pos
            }
            1 => {
                pos = pos.checked_add(8).filter(|&p| p <= b.len())?;
                pos..pos
            }
            2 => {
                let len = usize::try_from(read_varint(b, &mut pos)?).ok()?;
                let p = pos..pos.checked_add(len).filter(|&e| e <= b.len())?;
                pos = p.end;
                p
            }
            5 => {
                pos = pos.checked_add(4).filter(|&p| p <= b.len())?;
                pos..pos
            }
            _ => return None, // groups (3, 4) are not used by CRI
        };
        out.push(Field {
            number,
            wire,
            whole: start..pos,
            payload,
        });
    }
    Some(out)
}

fn put_len_field(out: &mut Vec<u8>, number: u32, payload: &[u8]) {
    put_varint(out, (u64::from(number) << 3) | 2);
    put_varint(out, payload.len() as u64);
    out.extend_from_slice(payload);
}

/// A map<string,string> entry: (key, value), borrowed, if it is one.
fn map_entry(b: &[u8]) -> Option<(&str, &str)> {
    let mut key = "";
    let mut value = "";
    let mut pos = 0;
    while pos < b.len() {
        let k = read_varint(b, &mut pos)?;
        if k & 7 != 2 {
            return None; // map entries hold two strings
        }
        let len = usize::try_from(read_varint(b, &mut pos)?).ok()?;
        let s = std::str::from_utf8(b.get(pos..pos.checked_add(len)?)?).ok()?;
        pos += len;
        match k >> 3 {
            1 => key = s,
            2 => value = s,
            _ => {}
        }
    }
    Some((key, value))
}

/// Decides, for one container (its id and annotations), which annotation values to replace.
pub type Decide<'a> = dyn FnMut(&str, &[(&str, &str)]) -> Vec<(String, String)> + 'a;

/// Calls `decide(container_id, annotations)` for one container message; it returns replacement
/// values for some annotation keys. Returns the edited message, or None when nothing changed.
fn edit_container(b: &[u8], annotations_field: u32, decide: &mut Decide) -> Option<Vec<u8>> {
    let fs = fields(b)?;
    let id = fs
        .iter()
        .find(|f| f.number == 1 && f.wire == 2)
        .and_then(|f| std::str::from_utf8(&b[f.payload.clone()]).ok())?;
    let entries: Vec<(&str, &str)> = fs
        .iter()
        .filter(|f| f.number == annotations_field && f.wire == 2)
        .map(|f| map_entry(&b[f.payload.clone()]))
        .collect::<Option<_>>()?;
    let replace = decide(id, &entries);
    if replace.is_empty() {
        return None;
    }
    let mut out = Vec::with_capacity(b.len() + 16);
    let mut changed = false;
    for f in &fs {
        if f.number == annotations_field && f.wire == 2 {
            if let Some((k, _)) = map_entry(&b[f.payload.clone()]) {
                let k = k.to_string();
                if let Some((_, new)) = replace.iter().find(|(rk, _)| *rk == k) {
                    let mut entry = Vec::new();
                    put_len_field(&mut entry, 1, k.as_bytes());
                    put_len_field(&mut entry, 2, new.as_bytes());
                    put_len_field(&mut out, annotations_field, &entry);
                    changed = true;
                    continue;
                }
            }
        }
        out.extend_from_slice(&b[f.whole.clone()]);
    }
    changed.then_some(out)
}

/// Edits every container message a response carries. `decide` gets each container's id and
/// annotations and returns the annotation values to replace. Returns None when nothing changed
/// or the message could not be parsed (the caller then forwards the original bytes).
pub fn edit_response(msg: &[u8], carrier: Carrier, decide: &mut Decide) -> Option<Vec<u8>> {
    let (field, annotations) = carrier.field_and_layout();
    let fs = fields(msg)?;
    let mut out = Vec::with_capacity(msg.len() + 64);
    let mut changed = false;
    for f in &fs {
        if f.number == field && f.wire == 2 {
            if let Some(edited) = edit_container(&msg[f.payload.clone()], annotations, decide) {
                put_len_field(&mut out, field, &edited);
                changed = true;
                continue;
            }
        }
        out.extend_from_slice(&msg[f.whole.clone()]);
    }
    changed.then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cri::proto;
    use prost::Message;

    fn container(id: &str, hash: &str) -> proto::Container {
        proto::Container {
            id: id.into(),
            pod_sandbox_id: "s".into(),
            labels: [("l".to_string(), "1".to_string())].into(),
            annotations: [
                ("io.kubernetes.container.hash".to_string(), hash.to_string()),
                ("other".to_string(), "x".to_string()),
            ]
            .into(),
            created_at: 42,
            ..Default::default()
        }
    }

    #[test]
    fn replaces_one_annotation_and_keeps_everything_else() {
        let resp = proto::ListContainersResponse {
            containers: vec![container("a", "111"), container("b", "222")],
        };
        // An unknown field (number 99) at the end must survive.
        let mut bytes = resp.encode_to_vec();
        put_len_field(&mut bytes, 99, b"future");
        let edited = edit_response(&bytes, Carrier::Containers, &mut |id, ann| {
            if id == "a"
                && ann
                    .iter()
                    .any(|(k, v)| *k == "io.kubernetes.container.hash" && *v == "111")
            {
                vec![("io.kubernetes.container.hash".into(), "999".into())]
            } else {
                vec![]
            }
        })
        .unwrap();
        assert!(edited.ends_with(b"future"));
        let got = proto::ListContainersResponse::decode(&edited[..]).unwrap();
        assert_eq!(
            got.containers[0].annotations["io.kubernetes.container.hash"],
            "999"
        );
        assert_eq!(got.containers[0].annotations["other"], "x");
        assert_eq!(got.containers[0].created_at, 42);
        assert_eq!(got.containers[1], container("b", "222"));
        // Nothing to change: None, so the original bytes are forwarded.
        assert!(edit_response(&bytes, Carrier::Containers, &mut |_, _| vec![]).is_none());
    }

    #[test]
    fn container_status_and_garbage() {
        let resp = proto::ContainerStatusResponse {
            status: Some(proto::ContainerStatus {
                id: "a".into(),
                annotations: [("io.kubernetes.container.hash".to_string(), "1".to_string())].into(),
                ..Default::default()
            }),
            info: Default::default(),
        };
        let edited = edit_response(&resp.encode_to_vec(), Carrier::Statuses(1), &mut |_, _| {
            vec![("io.kubernetes.container.hash".into(), "2".into())]
        })
        .unwrap();
        let got = proto::ContainerStatusResponse::decode(&edited[..]).unwrap();
        assert_eq!(
            got.status.unwrap().annotations["io.kubernetes.container.hash"],
            "2"
        );
        assert!(
            edit_response(&[0xff, 0xff, 0xff], Carrier::Containers, &mut |_, _| vec![
                ("a".into(), "b".into())
            ])
            .is_none()
        );
    }
}
