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

use std::ops::Range;

use crate::runtime::cri::keys;

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

#[inline]
fn read_varint(b: &[u8], pos: &mut usize) -> Option<u64> {
    // Keys, lengths and small numbers take one byte: the common case, without the loop.
    if let Some(&byte) = b.get(*pos) {
        if byte < 0x80 {
            *pos += 1;
            return Some(u64::from(byte));
        }
    }
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
    whole: Range<usize>,
    payload: Range<usize>,
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

    #[inline]
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
    #[inline]
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

/// The two annotations the shim may translate, as a container carries them or as they should be
/// shown instead (`None`: absent, or leave as is). Values are the raw bytes of protobuf strings.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Hashes<'a> {
    /// `io.kubernetes.container.hash`
    pub hash: Option<&'a [u8]>,
    /// `io.kubernetes.container.hashWithoutResources`
    pub hash_without_resources: Option<&'a [u8]>,
}

impl Hashes<'_> {
    fn is_empty(&self) -> bool {
        self.hash.is_none() && self.hash_without_resources.is_none()
    }
}

/// Decides, for one container (its id and the hashes it carries), which values to show instead.
/// The values returned borrow from the decider's data (`'s`), not from the closure (`'c`).
pub type Decide<'s, 'c> = dyn FnMut(&[u8], Hashes<'_>) -> Hashes<'s> + 'c;

/// One map<string,string> entry field of a container: the whole field and its value's payload
/// (`None` when the entry has no value field, i.e. the empty string).
#[derive(Debug, Clone)]
struct Entry {
    whole: Range<usize>,
    value: Option<Range<usize>>,
}

impl Entry {
    fn value<'b>(&self, b: &'b [u8]) -> &'b [u8] {
        self.value.clone().map_or(&[], |r| &b[r])
    }
}

/// Parses a map entry at `b[at]`: (key, value range), ranges relative to `b`.
fn map_entry(b: &[u8], at: Range<usize>) -> Option<(&[u8], Option<Range<usize>>)> {
    let mut key: &[u8] = &[];
    let mut value = None;
    for f in fields(&b[at.clone()]) {
        let f = f.ok()?;
        if f.wire != 2 {
            return None; // map entries hold two strings
        }
        let abs = at.start + f.payload.start..at.start + f.payload.end;
        match f.number {
            1 => key = &b[abs],
            2 => value = Some(abs),
            _ => {}
        }
    }
    Some((key, value))
}

/// Where, in one container message, its id and the translatable annotations are. Where a key
/// occurs more than once the last entry counts, as it does when the kubelet decodes the map.
struct Found {
    id: Range<usize>,
    hash: Option<Entry>,
    hash_without_resources: Option<Entry>,
}

fn scan_container(b: &[u8], annotations_field: u32) -> Option<Found> {
    let mut id = None;
    let (mut hash, mut hash_without_resources) = (None, None);
    for f in fields(b) {
        let f = f.ok()?;
        if f.wire != 2 {
            continue;
        }
        if f.number == 1 {
            id = Some(f.payload);
        } else if f.number == annotations_field {
            let (key, value) = map_entry(b, f.payload)?;
            let entry = Some(Entry {
                whole: f.whole,
                value,
            });
            if key == keys::HASH.as_bytes() {
                hash = entry;
            } else if key == keys::HASH_WITHOUT_RESOURCES.as_bytes() {
                hash_without_resources = entry;
            }
        }
    }
    Some(Found {
        id: id?,
        hash,
        hash_without_resources,
    })
}

/// An entry to replace: the entry, its key, and the value to show.
type Edit<'f, 's> = (&'f Entry, &'static str, &'s [u8]);

impl Found {
    /// Asks `decide`, and pairs each value to show with the entry it replaces, in the order the
    /// entries come (at most two, so without allocating).
    fn edits<'s>(&self, b: &[u8], decide: &mut Decide<'s, '_>) -> [Option<Edit<'_, 's>>; 2] {
        let carried = Hashes {
            hash: self.hash.as_ref().map(|e| e.value(b)),
            hash_without_resources: self.hash_without_resources.as_ref().map(|e| e.value(b)),
        };
        if carried.is_empty() {
            return [None, None];
        }
        let show = decide(&b[self.id.clone()], carried);
        let hash = self
            .hash
            .as_ref()
            .zip(show.hash)
            .map(|(e, v)| (e, keys::HASH, v));
        let without = (self.hash_without_resources.as_ref())
            .zip(show.hash_without_resources)
            .map(|(e, v)| (e, keys::HASH_WITHOUT_RESOURCES, v));
        match (hash, without) {
            (Some(h), Some(w)) if w.0.whole.start < h.0.whole.start => [Some(w), Some(h)],
            (h, w) => [h, w],
        }
    }
}

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

/// Appends one container element to `out`: its field head as it came (`head`), then its message
/// `b` with the values `decide` gives in place of the old ones. With `resize` (the most the
/// element may grow), an edit that changes a value's length re-encodes the entry and the
/// element's length (field `number`); without it such an edit is not made. Equal-length edits are
/// written over the old values in place. An element that does not parse, or that `decide` leaves
/// alone, is appended as it came. Returns how much longer the element became (negative: shorter).
fn write_container(
    head: &[u8],
    b: &[u8],
    number: u32,
    annotations_field: u32,
    resize: Option<usize>,
    decide: &mut Decide,
    out: &mut Vec<u8>,
) -> isize {
    let found = scan_container(b, annotations_field);
    let edits = match &found {
        Some(found) => found.edits(b, decide),
        None => [None, None],
    };
    let edits = edits.iter().flatten();
    let entry_len = |k: &str, v: &[u8]| len_field_len(1, k.len()) + len_field_len(2, v.len());
    let new_len = edits.clone().fold(b.len(), |n, (e, k, v)| {
        n - e.whole.len() + len_field_len(annotations_field, entry_len(k, v))
    });
    let new_whole = len_field_len(number, new_len);
    let grows = new_whole as isize - (head.len() + b.len()) as isize;
    let in_place = edits.clone().all(|(e, _, v)| e.value(b).len() == v.len());
    let resizable = resize.is_some_and(|most| grows <= most as isize);
    if edits.clone().next().is_none() || !(in_place || resizable) {
        out.extend_from_slice(head);
        out.extend_from_slice(b);
        return 0;
    }
    if in_place {
        let at = out.len() + head.len();
        out.extend_from_slice(head);
        out.extend_from_slice(b);
        for (e, _, v) in edits {
            if let Some(r) = &e.value {
                out[at + r.start..at + r.end].copy_from_slice(v);
            }
        }
        return 0;
    }
    // Untouched bytes are copied in spans; only the replaced entries are encoded anew.
    put_varint(out, (u64::from(number) << 3) | 2);
    put_varint(out, new_len as u64);
    let mut last = 0;
    for (e, k, v) in edits {
        out.extend_from_slice(&b[last..e.whole.start]);
        put_varint(out, (u64::from(annotations_field) << 3) | 2);
        put_varint(out, entry_len(k, v) as u64);
        put_len_field(out, 1, k.as_bytes());
        put_len_field(out, 2, v);
        last = e.whole.end;
    }
    out.extend_from_slice(&b[last..]);
    grows
}

/// The largest container element [`StreamEditor`] holds back to edit; a larger one passes as is.
const MAX_ELEMENT: usize = 8 << 20;

/// The largest message a holding [`StreamEditor`] holds whole; a larger one streams, and only
/// edits that keep lengths are made in it. (The kubelet accepts CRI messages up to 16 MB.)
const MAX_HELD: usize = 64 << 20;

#[derive(Debug, Clone, Copy)]
enum St {
    /// Expecting a gRPC frame header (5 bytes).
    Header,
    /// Passing `left` bytes through; then back to the fields of the message (`then` bytes left
    /// in it) or, with `None`, to the next frame header.
    Raw { left: usize, then: Option<usize> },
    /// At a field key inside an uncompressed message with `left` bytes left.
    Fields { left: usize },
    /// Holding back a carrier element: its field head (`head` bytes, key and length) and its
    /// message (`need` bytes); `after` bytes of the message follow it.
    Element {
        head: usize,
        need: usize,
        after: usize,
    },
}

/// A message held until it ends, so that its header can give its edited length.
#[derive(Debug, Clone, Copy)]
struct Held {
    /// Where its 5-byte header is in the output.
    at: usize,
    /// The length its header declared.
    declared: usize,
    /// How much longer its edits have made it so far (negative: shorter).
    grown: isize,
}

impl Held {
    /// The length its header gives: the declared length, changed by the edits so far. For a
    /// message cut short this leaves exactly as many bytes missing as the runtime's did.
    fn length(&self) -> usize {
        // Never negative (edits remove at most what they replace) and never past u32::MAX
        // (`StreamEditor::room`).
        (self.declared as isize + self.grown) as usize
    }
}

/// Edits gRPC response frames as they stream. Only the container element being read is held
/// back; anything that does not parse passes through unedited.
///
/// In place ([`StreamEditor::new`], for plans whose every translated hash is as long as the
/// stored one): bytes are passed on as soon as their place in the message is known, and an edit
/// that would change a length is not made. Holding ([`StreamEditor::holding`]): each uncompressed
/// message is held until it ends, so that edits may change lengths, and then passed on with its
/// new length. Either way the input is copied once, into the output (and an element that
/// arrives split between two pieces once more, while it is held back).
pub struct StreamEditor {
    field: u32,
    annotations: u32,
    hold: bool,
    /// Input that cannot be passed on yet (a header or an element not all there).
    buf: Vec<u8>,
    /// Output not handed out yet.
    out: Vec<u8>,
    /// The message being held, if any.
    held: Option<Held>,
    st: St,
}

impl StreamEditor {
    /// An editor that edits in place: every length stays as it came.
    pub fn new(carrier: Carrier) -> StreamEditor {
        StreamEditor::with(carrier, false)
    }

    /// An editor that holds each message until it ends, so that edits may change lengths.
    pub fn holding(carrier: Carrier) -> StreamEditor {
        StreamEditor::with(carrier, true)
    }

    fn with(carrier: Carrier, hold: bool) -> StreamEditor {
        let (field, annotations) = carrier.field_and_layout();
        StreamEditor {
            field,
            annotations,
            hold,
            buf: Vec::new(),
            out: Vec::new(),
            held: None,
            st: St::Header,
        }
    }

    /// Takes the next bytes of the body; returns what can be passed on now.
    pub fn push(&mut self, data: &[u8], decide: &mut Decide) -> Vec<u8> {
        if self.held.is_none() {
            self.out.reserve(self.buf.len() + data.len());
        }
        if self.buf.is_empty() {
            // The usual case: nothing held back, so work on `data` itself and keep only its tail.
            let used = self.run(data, decide);
            self.buf.extend_from_slice(&data[used..]);
        } else {
            let mut buf = std::mem::take(&mut self.buf);
            buf.extend_from_slice(data);
            let used = self.run(&buf, decide);
            buf.drain(..used);
            self.buf = buf;
        }
        self.ready()
    }

    /// The body ended (or its trailers came): returns what is still held, with the input not yet
    /// used as it came. A held message that did not end keeps as many bytes missing as it had.
    pub fn finish(&mut self) -> Vec<u8> {
        self.close();
        self.out.append(&mut self.buf);
        self.st = St::Header;
        std::mem::take(&mut self.out)
    }

    /// The output before the message being held.
    fn ready(&mut self) -> Vec<u8> {
        match &mut self.held {
            None => std::mem::take(&mut self.out),
            Some(h) if h.at == 0 => Vec::new(),
            Some(h) => {
                let mut rest = self.out.split_off(h.at);
                rest.reserve((5 + h.declared).saturating_sub(rest.len()));
                h.at = 0;
                std::mem::replace(&mut self.out, rest)
            }
        }
    }

    /// The message being held has ended (or the body has): its header gets its length.
    fn close(&mut self) {
        if let Some(h) = self.held.take() {
            let len = h.length() as u32;
            self.out[h.at + 1..h.at + 5].copy_from_slice(&len.to_be_bytes());
        }
    }

    /// How much the element being read may grow: in a held message, as much as keeps its
    /// length within a gRPC header's 32 bits; otherwise nothing may change a length.
    fn room(&self) -> Option<usize> {
        self.held.map(|h| u32::MAX as usize - h.length())
    }

    /// Passes on what `input` allows; returns how many bytes were used (the rest must be held).
    fn run(&mut self, input: &[u8], decide: &mut Decide) -> usize {
        let mut pos = 0;
        loop {
            let avail = &input[pos..];
            match self.st {
                St::Header => {
                    self.close();
                    if avail.len() < 5 {
                        break;
                    }
                    let len = u32::from_be_bytes([avail[1], avail[2], avail[3], avail[4]]) as usize;
                    if self.hold && avail[0] == 0 && len > 0 && len <= MAX_HELD {
                        // Edits change a length by a few bytes at most.
                        self.out.reserve(5 + len + len / 16);
                        self.held = Some(Held {
                            at: self.out.len(),
                            declared: len,
                            grown: 0,
                        });
                    }
                    self.out.extend_from_slice(&avail[..5]);
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
                    self.out.extend_from_slice(&avail[..n]);
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
                    let after = left - head - payload;
                    if wire == 2 && number == self.field && payload <= MAX_ELEMENT {
                        // The element's head is written with it, once its length is known.
                        self.st = St::Element {
                            head,
                            need: payload,
                            after,
                        };
                        continue;
                    }
                    self.out.extend_from_slice(&avail[..head]);
                    pos += head;
                    self.st = if payload == 0 {
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
                St::Element { head, need, after } => {
                    if avail.len() < head + need {
                        break;
                    }
                    let grown = write_container(
                        &avail[..head],
                        &avail[head..head + need],
                        self.field,
                        self.annotations,
                        self.room(),
                        decide,
                        &mut self.out,
                    );
                    if let Some(h) = &mut self.held {
                        h.grown += grown;
                    }
                    pos += head + need;
                    self.st = if after == 0 {
                        St::Header
                    } else {
                        St::Fields { left: after }
                    };
                }
            }
        }
        if let St::Header = self.st {
            self.close();
        }
        pos
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::cri::proto;
    use prost::Message;

    /// Edits one container message, returning the new message bytes, or None when `decide` changes
    /// nothing or the message does not parse. Untouched bytes are copied in spans; only replaced
    /// annotation entries are encoded anew.
    fn edit_container(b: &[u8], annotations_field: u32, decide: &mut Decide) -> Option<Vec<u8>> {
        let found = scan_container(b, annotations_field)?;
        let edits = found.edits(b, decide);
        let edits = edits.iter().flatten();
        edits.clone().next()?; // nothing to change
        let entry_len = |k: &str, v: &[u8]| len_field_len(1, k.len()) + len_field_len(2, v.len());
        let mut out = Vec::with_capacity(b.len() + 32);
        let mut last = 0;
        for (e, k, v) in edits {
            out.extend_from_slice(&b[last..e.whole.start]);
            put_varint(&mut out, (u64::from(annotations_field) << 3) | 2);
            put_varint(&mut out, entry_len(k, v) as u64);
            put_len_field(&mut out, 1, k.as_bytes());
            put_len_field(&mut out, 2, v);
            last = e.whole.end;
        }
        out.extend_from_slice(&b[last..]);
        Some(out)
    }

    /// The reference the stream editors are checked against: edits every container message a
    /// response carries, whole. `decide` gets each container's id and
    /// annotations and returns the annotation values to replace. Returns None when nothing changed
    /// or the message could not be parsed (the caller then forwards the original bytes).
    fn edit_response(msg: &[u8], carrier: Carrier, decide: &mut Decide) -> Option<Vec<u8>> {
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

    fn show(hash: &'static [u8]) -> Hashes<'static> {
        Hashes {
            hash: Some(hash),
            hash_without_resources: None,
        }
    }

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
        let edited = edit_response(&bytes, Carrier::Containers, &mut |id, carried| {
            if id == b"a" && carried.hash == Some(b"111") {
                show(b"999")
            } else {
                Hashes::default()
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
        assert!(
            edit_response(&bytes, Carrier::Containers, &mut |_, _| Hashes::default()).is_none()
        );
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
        let mut decide = |_: &[u8], carried: Hashes<'_>| -> Hashes<'static> {
            if carried.hash == Some(b"aaaa1111") {
                show(b"cccc3333")
            } else {
                Hashes::default()
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
                out.extend(ed.push(c, &mut decide));
            }
            out.extend(ed.finish());
            assert_eq!(out, want, "chunks of {chunk}");
        }
        // A length-changing edit is not made (the element passes as is).
        let mut longer = |_: &[u8], _: Hashes<'_>| show(b"toolong12345");
        let mut ed = StreamEditor::new(Carrier::Containers);
        let mut out = Vec::new();
        out.extend(ed.push(&frame(&msg), &mut longer));
        out.extend(ed.finish());
        assert_eq!(out, frame(&msg));
    }

    #[test]
    fn both_hashes_are_patched_in_place_and_the_last_duplicate_counts() {
        let hwr = "io.kubernetes.container.hashWithoutResources";
        let mut c = container("a", "11111111");
        c.annotations.insert(hwr.into(), "22222222".into());
        let mut msg = proto::ListContainersResponse {
            containers: vec![c],
        }
        .encode_to_vec();
        // A second, later `hash` entry in the same container: a decoder keeps the last one, so
        // that is the value decided on and replaced.
        let mut entry = Vec::new();
        put_len_field(&mut entry, 1, b"io.kubernetes.container.hash");
        put_len_field(&mut entry, 2, b"33333333");
        let mut element = Vec::new();
        put_len_field(&mut element, 9, &entry);
        let first = fields(&msg).next().unwrap().unwrap();
        let mut grown = msg[first.payload.clone()].to_vec();
        grown.extend_from_slice(&element);
        msg.clear();
        put_len_field(&mut msg, 1, &grown);

        let mut seen = Vec::new();
        let mut decide = |_: &[u8], carried: Hashes<'_>| -> Hashes<'static> {
            seen.push((
                carried.hash.map(<[u8]>::to_vec),
                carried.hash_without_resources.map(<[u8]>::to_vec),
            ));
            Hashes {
                hash: Some(b"aaaaaaaa"),
                hash_without_resources: Some(b"bbbbbbbb"),
            }
        };
        let mut ed = StreamEditor::new(Carrier::Containers);
        let mut out = Vec::new();
        out.extend(ed.push(&frame(&msg), &mut decide));
        out.extend(ed.finish());
        assert_eq!(
            seen,
            vec![(Some(b"33333333".to_vec()), Some(b"22222222".to_vec()))]
        );
        assert_eq!(out.len(), frame(&msg).len());
        let got = proto::ListContainersResponse::decode(&out[5..]).unwrap();
        let ann = &got.containers[0].annotations;
        assert_eq!(ann["io.kubernetes.container.hash"], "aaaaaaaa");
        assert_eq!(ann[hwr], "bbbbbbbb");
        assert_eq!(ann["other"], "x");
        // The whole-message editor agrees.
        let whole = edit_response(&msg, Carrier::Containers, &mut |_, _| Hashes {
            hash: Some(b"aaaaaaaa"),
            hash_without_resources: Some(b"bbbbbbbb"),
        })
        .unwrap();
        let got = proto::ListContainersResponse::decode(&whole[..]).unwrap();
        assert_eq!(&got.containers[0].annotations, ann);
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
            show(b"2")
        })
        .unwrap();
        let got = proto::ContainerStatusResponse::decode(&edited[..]).unwrap();
        assert_eq!(
            got.status.unwrap().annotations["io.kubernetes.container.hash"],
            "2"
        );
        assert!(
            edit_response(&[0xff, 0xff, 0xff], Carrier::Containers, &mut |_, _| show(
                b"2"
            ))
            .is_none()
        );
    }

    mod random {
        //! The stream editors against the whole-message reference, over random answers, random
        //! plans, random chunkings and answers cut short.
        use super::*;
        use proptest::prelude::*;

        /// One field of a container message, encoded canonically.
        fn container_field() -> impl Strategy<Value = Vec<u8>> {
            let key = prop::sample::select(vec![
                keys::HASH,
                keys::HASH_WITHOUT_RESOURCES,
                "io.kubernetes.container.restartCount",
                "",
            ]);
            let value = "[0-9a-f]{0,12}";
            prop_oneof![
                prop::sample::select(vec!["a", "b", "c", ""]).prop_map(|id| {
                    let mut f = Vec::new();
                    put_len_field(&mut f, 1, id.as_bytes());
                    f
                }),
                (key, value).prop_map(|(k, v)| {
                    let mut entry = Vec::new();
                    put_len_field(&mut entry, 1, k.as_bytes());
                    put_len_field(&mut entry, 2, v.as_bytes());
                    let mut f = Vec::new();
                    put_len_field(&mut f, 9, &entry);
                    f
                }),
                "[a-z]{0,9}".prop_map(|l| {
                    let mut f = Vec::new();
                    put_len_field(&mut f, 8, l.as_bytes()); // a label, as bytes
                    f
                }),
                any::<u32>().prop_map(|n| {
                    let mut f = vec![7 << 3]; // created_at, a varint
                    put_varint(&mut f, u64::from(n));
                    f
                }),
            ]
        }

        /// One gRPC frame: an uncompressed ListContainers answer (containers and an unknown
        /// field), or a compressed message of random bytes.
        fn grpc_frame() -> impl Strategy<Value = Vec<u8>> {
            let container = proptest::collection::vec(container_field(), 0..8).prop_map(|fs| {
                let mut f = Vec::new();
                put_len_field(&mut f, 1, &fs.concat());
                f
            });
            let unknown = proptest::collection::vec(any::<u8>(), 0..20).prop_map(|b| {
                let mut f = Vec::new();
                put_len_field(&mut f, 99, &b);
                f
            });
            let field = prop_oneof![4 => container, 1 => unknown];
            prop_oneof![
                6 => proptest::collection::vec(field, 0..10).prop_map(|fs| framed(0, &fs.concat())),
                1 => proptest::collection::vec(any::<u8>(), 0..40).prop_map(|b| framed(1, &b)),
            ]
        }

        fn framed(flag: u8, msg: &[u8]) -> Vec<u8> {
            let mut f = vec![flag];
            f.extend_from_slice(&(msg.len() as u32).to_be_bytes());
            f.extend_from_slice(msg);
            f
        }

        /// What a plan shows for containers `a`, `b` and `c`: per annotation, leave it (`None`)
        /// or show a value. With `keep`, each shown value is cut to the carried one's length.
        #[derive(Debug, Clone)]
        struct Plan {
            keep: bool,
            shown: Vec<(Option<String>, Option<String>)>,
        }

        fn plan(keep: bool) -> impl Strategy<Value = Plan> {
            // Carried values are at most 12 long, so a kept length can always be cut out.
            let value = if keep {
                "[0-9a-f]{12}"
            } else {
                "[0-9a-f]{0,12}"
            };
            let one = (proptest::option::of(value), proptest::option::of(value));
            proptest::collection::vec(one, 3).prop_map(move |shown| Plan { keep, shown })
        }

        fn decider<'p>(plan: &'p Plan) -> impl FnMut(&[u8], Hashes<'_>) -> Hashes<'p> + 'p {
            move |id, carried| {
                let Some(i) = [&b"a"[..], b"b", b"c"].iter().position(|x| *x == id) else {
                    return Hashes::default();
                };
                let (h, w) = &plan.shown[i];
                let show = |carried: Option<&[u8]>, new: &'p Option<String>| {
                    let (c, n) = (carried?, new.as_deref()?.as_bytes());
                    Some(if plan.keep { &n[..c.len()] } else { n })
                };
                Hashes {
                    hash: show(carried.hash, h),
                    hash_without_resources: show(carried.hash_without_resources, w),
                }
            }
        }

        /// What the reference makes of the frames: each uncompressed message edited whole.
        fn reference(frames: &[Vec<u8>], plan: &Plan) -> Vec<u8> {
            let mut decide = decider(plan);
            let mut out = Vec::new();
            for f in frames {
                match (
                    f[0],
                    edit_response(&f[5..], Carrier::Containers, &mut decide),
                ) {
                    (0, Some(msg)) => out.extend_from_slice(&framed(0, &msg)),
                    _ => out.extend_from_slice(f),
                }
            }
            out
        }

        fn run(ed: &mut StreamEditor, input: &[u8], cuts: &[usize], plan: &Plan) -> Vec<u8> {
            let mut decide = decider(plan);
            let mut out = Vec::new();
            let mut at = 0;
            for &c in cuts.iter().chain([&input.len()]) {
                let c = c.clamp(at, input.len());
                out.extend(ed.push(&input[at..c], &mut decide));
                at = c;
            }
            out.extend(ed.finish());
            out
        }

        /// The frames, one after another, and what `ed` makes of them when they come cut at
        /// `cuts`.
        fn edited(
            mut ed: StreamEditor,
            frames: &[Vec<u8>],
            mut cuts: Vec<usize>,
            plan: &Plan,
        ) -> (Vec<u8>, Vec<u8>) {
            let input = frames.concat();
            cuts.sort_unstable();
            let got = run(&mut ed, &input, &cuts, plan);
            (input, got)
        }

        /// Bytes missing from the last frame of a body that ends inside a frame's message.
        fn missing(body: &[u8]) -> Option<usize> {
            let mut pos = 0;
            while pos + 5 <= body.len() {
                let len = u32::from_be_bytes([
                    body[pos + 1],
                    body[pos + 2],
                    body[pos + 3],
                    body[pos + 4],
                ]);
                let end = pos + 5 + len as usize;
                if end > body.len() {
                    return Some(end - body.len());
                }
                pos = end;
            }
            None
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(512))]

            #[test]
            fn holding_edits_as_the_whole_message_reference_in_any_chunking(
                frames in proptest::collection::vec(grpc_frame(), 1..4),
                plan in prop_oneof![plan(true), plan(false)],
                cuts in proptest::collection::vec(0usize..600, 0..6),
            ) {
                let (_, got) = edited(StreamEditor::holding(Carrier::Containers), &frames, cuts, &plan);
                prop_assert_eq!(got, reference(&frames, &plan));
            }

            #[test]
            fn in_place_changes_no_length_and_agrees_where_lengths_are_kept(
                frames in proptest::collection::vec(grpc_frame(), 1..4),
                plan in prop_oneof![plan(true), plan(false)],
                cuts in proptest::collection::vec(0usize..600, 0..6),
            ) {
                let (input, got) = edited(StreamEditor::new(Carrier::Containers), &frames, cuts, &plan);
                prop_assert_eq!(got.len(), input.len());
                if plan.keep {
                    // Every edit keeps lengths, so every one is made, as the reference makes it
                    // (it re-encodes entries canonically, as the generator writes them).
                    prop_assert_eq!(got, reference(&frames, &plan));
                }
            }

            #[test]
            fn an_answer_cut_short_stays_as_short(
                frames in proptest::collection::vec(grpc_frame(), 1..4),
                plan in plan(false),
                keep in 0usize..2000,
                chunk in 1usize..300,
            ) {
                let whole = frames.concat();
                let input = &whole[..keep.min(whole.len())];
                let cuts: Vec<usize> = (chunk..input.len()).step_by(chunk).collect();
                let got = run(&mut StreamEditor::holding(Carrier::Containers), input, &cuts, &plan);
                prop_assert_eq!(missing(&got), missing(input));
                if input.len() < 5 {
                    prop_assert_eq!(got, input);
                }
            }
        }
    }
}
