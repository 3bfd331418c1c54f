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

/// Edits one container message, returning the new message bytes, or None when `decide` changes
/// nothing or the message does not parse. Untouched bytes are copied in spans; only replaced
/// annotation entries are encoded anew.
fn edit_container(b: &[u8], annotations_field: u32, decide: &mut Decide) -> Option<Vec<u8>> {
    let mut id = None;
    let mut entries: Vec<(&str, &str)> = Vec::with_capacity(8);
    let mut ranges: Vec<std::ops::Range<usize>> = Vec::with_capacity(8);
    for f in fields(b) {
        let f = f.ok()?;
        if f.wire != 2 {
            continue;
        }
        if f.number == 1 {
            id = Some(std::str::from_utf8(&b[f.payload]).ok()?);
        } else if f.number == annotations_field {
            entries.push(map_entry(&b[f.payload])?);
            ranges.push(f.whole);
        }
    }
    let replace = decide(id?, &entries);
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
        return None;
    }
    let entry_len = |k: &str, v: &str| len_field_len(1, k.len()) + len_field_len(2, v.len());
    let mut out = Vec::with_capacity(b.len() + 32);
    let mut last = 0;
    for (r, k, v) in edits {
        out.extend_from_slice(&b[last..r.start]);
        put_varint(&mut out, (u64::from(annotations_field) << 3) | 2);
        put_varint(&mut out, entry_len(k, v) as u64);
        put_len_field(&mut out, 1, k.as_bytes());
        put_len_field(&mut out, 2, v.as_bytes());
        last = r.end;
    }
    out.extend_from_slice(&b[last..]);
    Some(out)
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
        if f.number == field && f.wire == 2 {
            if let Some(edited) = edit_container(&msg[f.payload.clone()], annotations, decide) {
                put_len_field(&mut out, field, &edited);
                changed = true;
                continue;
            }
        }
        out.extend_from_slice(&msg[f.whole]);
    }
    changed.then_some(out)
}

/// The largest container element [`StreamEditor`] holds back to edit; a larger one passes as is.
const MAX_ELEMENT: usize = 8 << 20;

#[derive(Debug, Clone, Copy)]
enum St {
    /// Expecting a gRPC frame header (5 bytes).
    Header,
    /// Passing `left` bytes through; then back to the fields of the message (`then` bytes left
    /// in it) or, with `None`, to the next frame header.
    Raw { left: usize, then: Option<usize> },
    /// At a field key inside an uncompressed message with `left` bytes left.
    Fields { left: usize },
    /// Holding back a carrier element of `need` bytes; `after` bytes of the message follow it.
    Element { need: usize, after: usize },
}

/// Edits gRPC response frames as they stream, for edits that keep every length (a translated hash
/// as long as the stored one). Bytes are passed on as soon as their place in the message is known;
/// only the container element being read is held back, edited in place and passed on. An edit
/// that would change a length, and anything that does not parse, passes through unedited.
pub struct StreamEditor {
    field: u32,
    annotations: u32,
    buf: Vec<u8>,
    st: St,
}

impl StreamEditor {
    pub fn new(carrier: Carrier) -> StreamEditor {
        let (field, annotations) = carrier.field_and_layout();
        StreamEditor {
            field,
            annotations,
            buf: Vec::new(),
            st: St::Header,
        }
    }

    /// Takes the next bytes of the body and appends to `out` what can be passed on already.
    pub fn push(&mut self, data: &[u8], decide: &mut Decide, out: &mut Vec<u8>) {
        self.buf.extend_from_slice(data);
        let mut pos = 0;
        loop {
            let avail = &self.buf[pos..];
            match self.st {
                St::Header => {
                    if avail.len() < 5 {
                        break;
                    }
                    let len = u32::from_be_bytes([avail[1], avail[2], avail[3], avail[4]]) as usize;
                    out.extend_from_slice(&avail[..5]);
                    self.st = match (avail[0], len) {
                        (_, 0) => St::Header,
                        (0, _) => St::Fields { left: len },
                        _ => St::Raw {
                            left: len,
                            then: None,
                        }, // compressed: forwarded as is
                    };
                    pos += 5;
                }
                St::Raw { left, then } => {
                    let n = left.min(avail.len());
                    out.extend_from_slice(&avail[..n]);
                    pos += n;
                    if n < left {
                        self.st = St::Raw {
                            left: left - n,
                            then,
                        };
                        break;
                    }
                    self.st = match then {
                        Some(0) | None => St::Header,
                        Some(rest) => St::Fields { left: rest },
                    };
                }
                St::Fields { left } => {
                    let mut p = 0;
                    let Some(key) = read_varint(avail, &mut p) else {
                        if avail.len() >= 10 {
                            self.st = St::Raw { left, then: None }; // not protobuf: pass the rest
                            continue;
                        }
                        break;
                    };
                    let (number, wire) = ((key >> 3) as u32, key & 7);
                    let (head, payload) = match wire {
                        0 => match read_varint(avail, &mut p) {
                            Some(_) => (p, 0),
                            None if avail.len() < p + 10 => break,
                            None => (p, 0),
                        },
                        1 => (p, 8),
                        5 => (p, 4),
                        2 => match read_varint(avail, &mut p).and_then(|n| usize::try_from(n).ok())
                        {
                            Some(n) => (p, n),
                            None if avail.len() < p + 10 => break,
                            None => {
                                self.st = St::Raw { left, then: None };
                                continue;
                            }
                        },
                        _ => {
                            self.st = St::Raw { left, then: None };
                            continue;
                        }
                    };
                    if head + payload > left {
                        self.st = St::Raw { left, then: None };
                        continue;
                    }
                    out.extend_from_slice(&avail[..head]);
                    pos += head;
                    let after = left - head - payload;
                    self.st = if wire == 2 && number == self.field && payload <= MAX_ELEMENT {
                        St::Element {
                            need: payload,
                            after,
                        }
                    } else if payload == 0 {
                        if after == 0 {
                            St::Header
                        } else {
                            St::Fields { left: after }
                        }
                    } else {
                        St::Raw {
                            left: payload,
                            then: Some(after),
                        }
                    };
                }
                St::Element { need, after } => {
                    if avail.len() < need {
                        break;
                    }
                    let element = &avail[..need];
                    match edit_container(element, self.annotations, decide) {
                        Some(edited) if edited.len() == need => out.extend_from_slice(&edited),
                        _ => out.extend_from_slice(element),
                    }
                    pos += need;
                    self.st = if after == 0 {
                        St::Header
                    } else {
                        St::Fields { left: after }
                    };
                }
            }
        }
        self.buf.drain(..pos);
    }

    /// Passes on whatever is still held (the body ended).
    pub fn finish(&mut self, out: &mut Vec<u8>) {
        out.append(&mut self.buf);
        self.st = St::Header;
    }
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

    fn frame(msg: &[u8]) -> Vec<u8> {
        let mut f = vec![0];
        f.extend_from_slice(&(msg.len() as u32).to_be_bytes());
        f.extend_from_slice(msg);
        f
    }

    #[test]
    fn streaming_edits_equal_whole_message_edits_for_any_chunking() {
        let resp = proto::ListContainersResponse {
            containers: (0..20)
                .map(|i| {
                    container(
                        &format!("c{i}"),
                        if i % 3 == 0 { "aaaa1111" } else { "bbbb2222" },
                    )
                })
                .collect(),
        };
        let mut msg = resp.encode_to_vec();
        put_len_field(&mut msg, 99, b"future"); // an unknown field survives
        let mut decide = |_: &str, ann: &[(&str, &str)]| -> Vec<(String, String)> {
            if ann
                .iter()
                .any(|(k, v)| *k == "io.kubernetes.container.hash" && *v == "aaaa1111")
            {
                vec![("io.kubernetes.container.hash".into(), "cccc3333".into())]
            } else {
                vec![]
            }
        };
        let whole = edit_response(&msg, Carrier::Containers, &mut decide).unwrap();
        let mut input = frame(&msg);
        input.extend_from_slice(&frame(&msg));
        let mut want = frame(&whole);
        want.extend_from_slice(&frame(&whole));
        for chunk in [1, 2, 3, 7, 64, 1000, input.len()] {
            let mut ed = StreamEditor::new(Carrier::Containers);
            let mut out = Vec::new();
            for c in input.chunks(chunk) {
                ed.push(c, &mut decide, &mut out);
            }
            ed.finish(&mut out);
            assert_eq!(out, want, "chunks of {chunk}");
        }
        // A length-changing edit is not made (the element passes as is).
        let mut longer = |_: &str, _: &[(&str, &str)]| {
            vec![(
                "io.kubernetes.container.hash".to_string(),
                "toolong12345".to_string(),
            )]
        };
        let mut ed = StreamEditor::new(Carrier::Containers);
        let mut out = Vec::new();
        ed.push(&frame(&msg), &mut longer, &mut out);
        ed.finish(&mut out);
        assert_eq!(out, frame(&msg));
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
