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

/// The top-level fields of a message, without allocating. Yields `Err(())` once on bad input.
struct Fields<'b> {
    b: &'b [u8],
    pos: usize,
}

fn fields(b: &[u8]) -> Fields<'_> {
    Fields { b, pos: 0 }
}

impl Iterator for Fields<'_> {
    type Item = Result<Field, ()>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.pos >= self.b.len() {
            return None;
        }
        let r = self.step();
        if r.is_err() {
            self.pos = self.b.len();
        }
        Some(r)
    }
}

impl Fields<'_> {
    fn step(&mut self) -> Result<Field, ()> {
        let b = self.b;
        let start = self.pos;
        let mut pos = self.pos;
        let key = read_varint(b, &mut pos).ok_or(())?;
        let (number, wire) = ((key >> 3) as u32, (key & 7) as u8);
        let payload = match wire {
            0 => {
                read_varint(b, &mut pos).ok_or(())?;
                pos..pos
            }
            1 | 5 => {
                let n = if wire == 1 { 8 } else { 4 };
                pos = pos.checked_add(n).filter(|&p| p <= b.len()).ok_or(())?;
                pos..pos
            }
            2 => {
                let len = usize::try_from(read_varint(b, &mut pos).ok_or(())?).map_err(|_| ())?;
                let p = pos..pos.checked_add(len).filter(|&e| e <= b.len()).ok_or(())?;
                pos = p.end;
                p
            }
            _ => return Err(()), // groups (3, 4) are not used by CRI
        };
        self.pos = pos;
        Ok(Field {
            number,
            wire,
            whole: start..pos,
            payload,
        })
    }
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

fn varint_len(mut v: u64) -> usize {
    let mut n = 1;
    while v >= 0x80 {
        v >>= 7;
        n += 1;
    }
    n
}

fn len_field_len(number: u32, payload: usize) -> usize {
    varint_len(u64::from(number) << 3) + varint_len(payload as u64) + payload
}

/// Edits one container message (`b`, at response field `field`) into `out` and returns true, or
/// returns false (writing nothing) when `decide` changes nothing or the message does not parse.
/// Untouched bytes are copied in spans; only replaced annotation entries are encoded anew.
fn edit_container_into(
    b: &[u8],
    field: u32,
    annotations_field: u32,
    decide: &mut Decide,
    out: &mut Vec<u8>,
) -> bool {
    let mut id = None;
    let mut entries: Vec<(&str, &str)> = Vec::with_capacity(8);
    let mut ranges: Vec<std::ops::Range<usize>> = Vec::with_capacity(8);
    for f in fields(b) {
        let Ok(f) = f else { return false };
        if f.wire != 2 {
            continue;
        }
        if f.number == 1 {
            match std::str::from_utf8(&b[f.payload]) {
                Ok(s) => id = Some(s),
                Err(_) => return false,
            }
        } else if f.number == annotations_field {
            let Some(e) = map_entry(&b[f.payload]) else {
                return false;
            };
            entries.push(e);
            ranges.push(f.whole);
        }
    }
    let Some(id) = id else { return false };
    let replace = decide(id, &entries);
    // (range of the old entry field, key, new value)
    let edits: Vec<(&std::ops::Range<usize>, &str, &str)> = entries
        .iter()
        .zip(&ranges)
        .filter_map(|((k, _), r)| {
            replace
                .iter()
                .find(|(rk, _)| rk == k)
                .map(|(_, nv)| (r, *k, nv.as_str()))
        })
        .collect();
    if edits.is_empty() {
        return false;
    }
    let entry_len = |k: &str, v: &str| len_field_len(1, k.len()) + len_field_len(2, v.len());
    let new_len = edits.iter().fold(b.len(), |n, (r, k, v)| {
        n - r.len() + len_field_len(annotations_field, entry_len(k, v))
    });
    put_varint(out, (u64::from(field) << 3) | 2);
    put_varint(out, new_len as u64);
    let mut last = 0;
    for (r, k, v) in edits {
        out.extend_from_slice(&b[last..r.start]);
        put_varint(out, (u64::from(annotations_field) << 3) | 2);
        put_varint(out, entry_len(k, v) as u64);
        put_len_field(out, 1, k.as_bytes());
        put_len_field(out, 2, v.as_bytes());
        last = r.end;
    }
    out.extend_from_slice(&b[last..]);
    true
}

/// Edits every container message a response carries. `decide` gets each container's id and
/// annotations and returns the annotation values to replace. Returns None when nothing changed
/// or the message could not be parsed (the caller then forwards the original bytes).
pub fn edit_response(msg: &[u8], carrier: Carrier, decide: &mut Decide) -> Option<Vec<u8>> {
    let (field, annotations) = carrier.field_and_layout();
    let mut out = Vec::with_capacity(msg.len() + 1024);
    let mut changed = false;
    for f in fields(msg) {
        let f = f.ok()?;
        if f.number == field
            && f.wire == 2
            && edit_container_into(
                &msg[f.payload.clone()],
                field,
                annotations,
                decide,
                &mut out,
            )
        {
            changed = true;
            continue;
        }
        out.extend_from_slice(&msg[f.whole]);
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
