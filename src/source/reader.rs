//! The one input reader: every command reads pods, nodes and hash input through it, so every
//! command accepts the same things and reads them the same way.
//!
//! Accepted: a file, a directory of `.json`/`.yaml`/`.yml` files (sorted by name), or `-` for
//! stdin; JSON (one or several values one after another, so JSON Lines too) or YAML (several
//! `---`-separated documents), told apart by the file's extension, or on stdin by the first
//! byte (`{`, `[` or `"` is JSON). Each value is an object, a JSON array of objects, or a
//! List/PodList whose items are streamed one at a time, so a multi-gigabyte list is read in the
//! memory of one item (YAML: see [`crate::source::yaml`] for which Lists).
//!
//! JSON bytes are read the way Go's `encoding/json` reads them ([`crate::source::goread`]): an
//! invalid UTF-8 byte or a lone UTF-16 surrogate escape becomes U+FFFD instead of an error. YAML
//! must be valid UTF-8, as for the Go YAML reader.

use std::cell::{Cell, RefCell};
use std::fmt;
use std::fs::File;
use std::io::{BufReader, Read};
use std::path::{Path, PathBuf};
use std::rc::Rc;

use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

use crate::error::{Error, Result};
use crate::kubelet::once_keys::{repeated_key, OnceKeys};
use crate::kubelet::spelling::respell_if_needed;
use crate::source::encoding;
use crate::source::goread::GoRead;
pub use crate::source::yaml::for_each_yaml_object;

/// Calls `each` for every object in the JSON `reader` (Go's byte rules): the items of a
/// List/PodList (streamed), the elements of a JSON array, or a single object. Several top-level
/// values may follow each other. Top-level values that are not objects or arrays are passed on
/// as they are, for the caller to report.
pub fn for_each_object<R: Read>(
    reader: R,
    source: &str,
    mut each: impl FnMut(Value),
) -> Result<()> {
    // serde_json reads byte by byte; the recorder is the buffer that makes that cheap.
    let (recorder, seen) = Recorder::new(GoRead::new(reader));
    let read = serde_json::de::IoRead::new(recorder);
    match for_each_value_raw(read, &seen, &mut each) {
        Ok(true) => Ok(()),
        Ok(false) => Err(Error::Input {
            source_name: source.to_string(),
            reason: "no JSON input".into(),
        }),
        Err(e) => Err(Error::Input {
            source_name: source.to_string(),
            reason: match e.classify() {
                // Well-formed JSON that is not what it must be (`items` not a list, a key
                // repeated): said as it is, not as invalid JSON.
                serde_json::error::Category::Data => e.to_string(),
                // The input could not be read (or decoded: `encoding`): nothing about JSON.
                serde_json::error::Category::Io => e.to_string(),
                _ => own_limit(&e.to_string()).unwrap_or_else(|| format!("not valid JSON: {e}")),
            },
        }),
    }
}

/// What serde_json or serde_yaml_ng said, where it is one of kubehash's own limits: the two
/// kinds of text they stop on that Go's decoders read (README, "How exact it is"), named as such
/// rather than as a fault of the input.
pub fn own_limit(reason: &str) -> Option<String> {
    if let Some(place) = reason.strip_prefix("recursion limit exceeded") {
        Some(format!("nesting deeper than 128 levels, which kubehash does not read (Go's decoders do; no pod nests that deep){place}"))
    } else {
        reason.strip_prefix("number out of range").map(|place| {
            format!("a number beyond float64's range, which kubehash does not read (Go's decoder reads a quantity's text and skips a field it does not know){place}")
        })
    }
}

/// The values of a serde_json input read through a [`Recorder`] whose [`Seen`] is `seen`, with
/// serde_json's own error; `Ok(false)` when there was no value at all.
pub fn for_each_value_raw<'de, R: serde_json::de::Read<'de>>(
    read: R,
    seen: &Rc<Seen>,
    mut each: impl FnMut(Value),
) -> std::result::Result<bool, serde_json::Error> {
    let mut de = serde_json::Deserializer::new(read);
    let mut any = false;
    loop {
        // Stop cleanly at end of input (after optional whitespace).
        if de.end().is_ok() {
            return Ok(any);
        }
        Top {
            each: &mut each,
            seen,
        }
        .deserialize(&mut de)?;
        seen.forget();
        any = true;
    }
}

/// What a [`Recorder`] has read from below that a value's text may still be needed from: the
/// chunks read so far (from the first byte not looked at yet), and how far into the last one
/// serde_json has read.
#[derive(Default)]
pub struct Seen {
    bytes: RefCell<Vec<u8>>,
    /// Where the bytes not looked at yet start in `bytes`.
    start: Cell<usize>,
    /// Where the last chunk starts in `bytes`.
    chunk: Cell<usize>,
    /// How much of the last chunk serde_json has read.
    at: Cell<usize>,
    /// Where the value being read starts in `bytes` ([`Seen::mark`]).
    value: Cell<usize>,
}

impl Seen {
    /// Notes that serde_json is about to read a value. It has peeked at the value's first byte
    /// (to tell a value from the end of a list, or from the end of the input), so that byte is
    /// the last one it took.
    fn mark(&self) {
        let taken = self.chunk.get() + self.at.get();
        self.value
            .set(taken.saturating_sub(1).max(self.start.get()));
    }

    /// The bytes serde_json took since the value last marked began (and perhaps one after it),
    /// and forgets all it took.
    fn take<T>(&self, with: impl FnOnce(&[u8]) -> T) -> T {
        let mut bytes = self.bytes.borrow_mut();
        let (chunk, end) = (self.chunk.get(), self.chunk.get() + self.at.get());
        let from = self.value.get().clamp(self.start.get(), end);
        let out = with(&bytes[from..end]);
        // Keep the memory of one value and one chunk: drop the chunks before the last one once
        // they are large (all checked: `end` is in the last chunk).
        let dropped = match chunk >= 1 << 20 {
            true => {
                bytes.drain(..chunk);
                self.chunk.set(0);
                chunk
            }
            false => 0,
        };
        self.start.set(end - dropped);
        out
    }

    fn forget(&self) {
        self.take(|_| ());
    }
}

/// The buffered reader under serde_json that also keeps what it hands on, so that what a value
/// lost of its text can be put back ([`crate::kubelet::spelling`]): the stream reader's only
/// way to see a number's text, or a string's escapes. It reads a chunk at a time from below,
/// keeps a copy of it in [`Seen`], and hands it on a byte at a time, as serde_json asks, moving
/// one shared counter.
pub struct Recorder<R> {
    inner: R,
    chunk: Box<[u8]>,
    len: usize,
    seen: Rc<Seen>,
}

impl<R: Read> Recorder<R> {
    pub fn new(inner: R) -> (Recorder<R>, Rc<Seen>) {
        let seen = Rc::new(Seen::default());
        let recorder = Recorder {
            inner,
            chunk: vec![0; 1 << 16].into_boxed_slice(),
            len: 0,
            seen: seen.clone(),
        };
        (recorder, seen)
    }

    /// The next chunk from below, kept in `seen` too; false at the end.
    #[cold]
    fn refill(&mut self) -> std::io::Result<bool> {
        let n = self.inner.read(&mut self.chunk)?;
        let mut bytes = self.seen.bytes.borrow_mut();
        self.seen.chunk.set(bytes.len());
        self.seen.at.set(0);
        bytes.extend_from_slice(&self.chunk[..n]);
        self.len = n;
        Ok(n > 0)
    }
}

impl<R: Read> Read for Recorder<R> {
    #[inline]
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        if self.seen.at.get() == self.len && !self.refill()? {
            return Ok(0);
        }
        let at = self.seen.at.get();
        let n = match out {
            // serde_json's way: one byte a call.
            [byte] => {
                *byte = self.chunk[at];
                1
            }
            _ => {
                let n = out.len().min(self.len - at);
                out[..n].copy_from_slice(&self.chunk[at..at + n]);
                n
            }
        };
        self.seen.at.set(at + n);
        Ok(n)
    }
}

/// `value`, the value serde_json just read from its text in `seen` (marked), as Go's decoder
/// reads that text ([`respell_if_needed`]).
fn respelled<E: serde::de::Error>(seen: &Seen, mut value: Value) -> std::result::Result<Value, E> {
    seen.take(|bytes| respell_if_needed(&mut value, bytes))
        .map_err(E::custom)?;
    Ok(value)
}

/// A value read with [`OnceKeys`], marked in `seen` first.
struct Marked<'s>(&'s Seen);

impl<'de> DeserializeSeed<'de> for Marked<'_> {
    type Value = Value;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> std::result::Result<Value, D::Error> {
        self.0.mark();
        OnceKeys.deserialize(d)
    }
}

/// Every object in `path`: a file, every `.json`/`.yaml`/`.yml` file of a directory (sorted by
/// name), or stdin for `-`.
pub fn for_each_object_in_path(path: &Path, mut each: impl FnMut(Value)) -> Result<()> {
    read_path(path, &mut each)
}

fn read_path(path: &Path, each: &mut dyn FnMut(Value)) -> Result<()> {
    let name = path.display().to_string();
    if name == "-" {
        return for_each_object_in_stream(std::io::stdin().lock(), "stdin", None, each);
    }
    let io = |e| Error::Io {
        source_name: name.clone(),
        source: e,
    };
    if let Some(files) = files_of_directory(path)? {
        for f in files {
            read_path(&f, each)?;
        }
        return Ok(());
    }
    let file = File::open(path).map_err(io)?;
    // A buffer no larger than the file (and a little more, to see its end in one read): a
    // directory of many small files would otherwise allocate and clear a whole buffer each.
    let size = file.metadata().map_or(STREAM_BUFFER as u64, |m| m.len());
    let buffer = usize::try_from(size).map_or(STREAM_BUFFER, |s| {
        s.saturating_add(1).clamp(8 << 10, STREAM_BUFFER)
    });
    read_stream(file, &name, extension_says(path), buffer, each)
}

/// The files a directory input stands for: its `.json`/`.yaml`/`.yml` files, sorted by name
/// (one without any is refused); `None` when `path` is not a directory (a file, or `-`).
pub fn files_of_directory(path: &Path) -> Result<Option<Vec<PathBuf>>> {
    if path.as_os_str() == "-" || !path.is_dir() {
        return Ok(None);
    }
    let name = path.display().to_string();
    let mut files: Vec<_> = std::fs::read_dir(path)
        .map_err(|e| Error::Io {
            source_name: name.clone(),
            source: e,
        })?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file() && extension_says(p).is_some())
        .collect();
    files.sort();
    if files.is_empty() {
        return Err(Error::Input {
            source_name: name,
            reason: "directory has no .json, .yaml or .yml files".into(),
        });
    }
    Ok(Some(files))
}

/// Whether a stream of unknown kind that starts with `head` is YAML: its first byte other than
/// white space is not `{`, `[` or `"`.
pub fn looks_like_yaml(head: &[u8]) -> bool {
    head.iter()
        .find(|b| !b.is_ascii_whitespace())
        .is_some_and(|b| !b"{[\"".contains(b))
}

/// How far the first look at a stream of unknown kind reads for a byte other than white space.
pub const FIRST_LOOK: usize = 1 << 20;

/// Reads the start of a stream of unknown kind onto `head` until it holds a byte other than
/// white space (what [`looks_like_yaml`] decides on) and a byte order mark's length (what
/// [`crate::source::encoding::Bom`] decides on), the stream ends, or it holds [`FIRST_LOOK`]
/// bytes: the same decision however a pipe's writer cut its writes (white space first, then the
/// rest). What was read stays in `head`, an error too.
pub fn first_look(reader: &mut impl Read, head: &mut Vec<u8>) -> std::io::Result<()> {
    let mut buf = vec![0; 64 << 10];
    let mut content = !head.iter().all(u8::is_ascii_whitespace);
    while head.len() < FIRST_LOOK && (head.len() < encoding::UTF8_BOM.len() || !content) {
        let want = (FIRST_LOOK - head.len()).min(buf.len());
        match reader.read(&mut buf[..want]) {
            Ok(0) => break,
            Ok(n) => {
                content |= !buf[..n].iter().all(u8::is_ascii_whitespace);
                head.extend_from_slice(&buf[..n]);
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// `Some(true)` for `.yaml`/`.yml`, `Some(false)` for `.json`, `None` otherwise.
pub fn extension_says(p: &Path) -> Option<bool> {
    match p.extension()?.to_str()? {
        "yaml" | "yml" => Some(true),
        "json" => Some(false),
        _ => None,
    }
}

/// Every object in one stream, read as UTF-8 ([`encoding::utf8`]): YAML if `yaml` says so, else
/// (when unknown) when its first byte other than white space is not `{`, `[` or `"`.
pub fn for_each_object_in_stream(
    reader: impl Read,
    source: &str,
    yaml: Option<bool>,
    each: &mut dyn FnMut(Value),
) -> Result<()> {
    read_stream(reader, source, yaml, STREAM_BUFFER, each)
}

/// How much of a stream is read at a time.
const STREAM_BUFFER: usize = 1 << 20;

/// [`for_each_object_in_stream`], reading `buffer` bytes at a time.
fn read_stream(
    reader: impl Read,
    source: &str,
    yaml: Option<bool>,
    buffer: usize,
    each: &mut dyn FnMut(Value),
) -> Result<()> {
    let io = |e| Error::Io {
        source_name: source.to_string(),
        source: e,
    };
    let mut reader = encoding::utf8(reader).map_err(io)?;
    let mut head = Vec::new();
    let yaml = match yaml {
        Some(y) => y,
        None => {
            first_look(&mut reader, &mut head).map_err(io)?;
            looks_like_yaml(&head)
        }
    };
    let reader = BufReader::with_capacity(buffer, std::io::Cursor::new(head).chain(reader));
    if yaml {
        for_each_yaml_object(reader, source, each)
    } else {
        for_each_object(reader, source, each)
    }
}

struct Top<'f, F> {
    each: &'f mut F,
    seen: &'f Rc<Seen>,
}

impl<'de, F: FnMut(Value)> DeserializeSeed<'de> for Top<'_, F> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> std::result::Result<(), D::Error> {
        self.seen.mark();
        d.deserialize_any(self)
    }
}

impl<'de, F: FnMut(Value)> Visitor<'de> for Top<'_, F> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a Pod, a PodList/List, or an array of them")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<(), A::Error> {
        while let Some(v) = seq.next_element_seed(Marked(self.seen))? {
            (self.each)(respelled(self.seen, v)?);
        }
        Ok(())
    }

    fn visit_bool<E>(self, v: bool) -> std::result::Result<(), E> {
        (self.each)(Value::Bool(v));
        Ok(())
    }
    fn visit_i64<E>(self, v: i64) -> std::result::Result<(), E> {
        (self.each)(Value::from(v));
        Ok(())
    }
    fn visit_u64<E>(self, v: u64) -> std::result::Result<(), E> {
        (self.each)(Value::from(v));
        Ok(())
    }
    fn visit_f64<E>(self, v: f64) -> std::result::Result<(), E> {
        (self.each)(Value::from(v));
        Ok(())
    }
    fn visit_str<E>(self, v: &str) -> std::result::Result<(), E> {
        (self.each)(Value::from(v));
        Ok(())
    }
    fn visit_unit<E>(self) -> std::result::Result<(), E> {
        (self.each)(Value::Null);
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<(), A::Error> {
        let mut rest = Map::new();
        let mut streamed = false;
        while let Some(key) = map.next_key::<String>()? {
            if (key == "items" && streamed) || rest.contains_key(&key) {
                return Err(repeated_key(&key));
            }
            if key == "items" {
                map.next_value_seed(Items {
                    each: self.each,
                    seen: self.seen,
                })?;
                streamed = true;
            } else {
                let v = map.next_value_seed(OnceKeys)?;
                rest.insert(key, v);
            }
        }
        // A List's other members are dropped.
        if !streamed {
            (self.each)(respelled(self.seen, Value::Object(rest))?);
        }
        Ok(())
    }
}

struct Items<'f, F> {
    each: &'f mut F,
    seen: &'f Rc<Seen>,
}

impl<'de, F: FnMut(Value)> DeserializeSeed<'de> for Items<'_, F> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> std::result::Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de, F: FnMut(Value)> Visitor<'de> for Items<'_, F> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a list of items")
    }
    fn visit_unit<E>(self) -> std::result::Result<(), E> {
        Ok(())
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<(), A::Error> {
        while let Some(v) = seq.next_element_seed(Marked(self.seen))? {
            (self.each)(respelled(self.seen, v)?);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kubelet::spelling::{for_each_placed, pod_value_from_slice, Place};
    use crate::source::spool::Pipe;

    #[test]
    fn streams_list_items_arrays_and_single_objects() {
        let mut names = Vec::new();
        let input = r#"{"kind":"List","metadata":{},"items":[{"a":1},{"a":2}]} [{"a":3}] {"a":4}"#;
        for_each_object(input.as_bytes(), "t", |v| {
            names.push(v["a"].as_i64().unwrap())
        })
        .unwrap();
        assert_eq!(names, [1, 2, 3, 4]);
        let err = for_each_object(&b"{\"items\":[{\"a\":1},"[..], "t", |_| {}).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("t: not valid JSON: EOF while parsing"),
            "{err}"
        );
        assert!(for_each_object(&b"  "[..], "t", |_| {}).is_err());
    }

    /// A stream whose writer sent its leading white space in reads of its own (a script that
    /// prints a blank line first) is told YAML from JSON by its first other byte, as a file is:
    /// the first read alone said JSON, and the YAML was refused.
    #[test]
    fn a_pipe_is_told_yaml_from_json_past_its_leading_white_space() {
        for (input, want) in [
            (
                &b"\n  \nname: a\nimage: b\n"[..],
                serde_json::json!({"name":"a","image":"b"}),
            ),
            (b"\n \t{\"name\":\"a\"}", serde_json::json!({"name":"a"})),
        ] {
            let mut seen = Vec::new();
            for_each_object_in_stream(Pipe::new(input, 1), "t", None, &mut |v| seen.push(v))
                .unwrap();
            assert_eq!(seen, [want]);
        }
        let mut head = Vec::new();
        first_look(&mut Pipe::new(b"   ", 1), &mut head).unwrap();
        assert_eq!(head, b"   ");
    }

    /// go-yaml drops a UTF-8 BOM that starts the stream (readerc.go
    /// yaml_parser_determine_encoding), and so does the stream reader before YAML sees it
    /// (serde_yaml_ng, told its input is UTF-8, would scan it as a character of the first line):
    /// a document, several, and a List read one entry at a time read as without it, and an error
    /// names the same line.
    #[test]
    fn a_byte_order_mark_that_starts_the_stream_is_dropped() {
        let streamed = |bytes: &[u8]| {
            let mut out = Vec::new();
            for_each_object_in_stream(bytes, "t", Some(true), &mut |v| out.push(v))
                .map(|()| out)
                .map_err(|e| e.to_string().trim_start_matches("t: ").to_string())
        };
        for text in [
            "name: a\nimage: b\n",
            "---\nname: a\n---\nname: b\n",
            "kind: List\nitems:\n- name: a\n  image: b\n- name: c\n",
            "{\"name\": \"a\",\n \"image\": \"b\"}\n",
        ] {
            let marked = [encoding::UTF8_BOM, text.as_bytes()].concat();
            assert_eq!(streamed(&marked), streamed(text.as_bytes()), "{text:?}");
            assert!(streamed(&marked).is_ok_and(|v| !v.is_empty()), "{text:?}");
        }
        let bad = "name: a\nimage: [\n";
        let marked = [encoding::UTF8_BOM, bad.as_bytes()].concat();
        let err = streamed(&marked).unwrap_err();
        assert_eq!(err, streamed(bad.as_bytes()).unwrap_err());
        assert!(err.contains("line 3 column 1"), "{err}");
    }

    /// A byte order mark that came in reads of its own is a mark all the same: the first look
    /// takes at least a mark's length, and what follows the mark is told YAML from JSON.
    #[test]
    fn a_byte_order_mark_split_across_reads_is_one() {
        let utf16 = |t: &str| -> Vec<u8> {
            [0xFF, 0xFE]
                .into_iter()
                .chain(t.encode_utf16().flat_map(u16::to_le_bytes))
                .collect()
        };
        for text in ["\n{\"name\":\"a\"}", "name: a\n", "[{\"name\":\"a\"}]"] {
            let want = serde_json::json!({"name":"a"});
            for input in [[encoding::UTF8_BOM, text.as_bytes()].concat(), utf16(text)] {
                let mut head = Vec::new();
                first_look(&mut Pipe::new(&input, 1), &mut head).unwrap();
                assert!(head.len() >= 3, "{head:?}");
                let mut seen = Vec::new();
                for_each_object_in_stream(Pipe::new(&input, 1), "t", None, &mut |v| seen.push(v))
                    .unwrap();
                assert_eq!(seen, std::slice::from_ref(&want), "{text:?}");
            }
        }
    }

    /// How many objects the reader hands on before it refuses `input`, and its error.
    fn refused(input: &str) -> (usize, String) {
        let mut n = 0;
        let err = for_each_object(input.as_bytes(), "t", |_| n += 1).unwrap_err();
        (n, err.to_string())
    }

    /// Each item, read from a stream, as [`pod_value_from_slice`] reads its text alone.
    fn alone(items: &[&str]) -> Vec<Value> {
        items
            .iter()
            .map(|i| pod_value_from_slice(i.as_bytes()).unwrap())
            .collect()
    }

    fn streamed(input: &str) -> Vec<Value> {
        let mut out = Vec::new();
        for_each_object(input.as_bytes(), "t", |v| out.push(v)).unwrap();
        out
    }

    /// What a value lost of its text is put back wherever the stream puts the value: a List's
    /// item, an array's element, a single object, one value after another, with white space
    /// around; a List's own members are dropped, whatever they hold.
    #[test]
    fn the_stream_reads_each_value_as_go_reads_its_text() {
        let items = [
            r#"{"resources":{"limits":{"cpu":0.50,"memory":"1\u0030"}}}"#,
            r#"{"ports":[{"containerPort":-0,"hostPort":80.0}],"n":-0.0}"#,
            r#"{"env":[{"valueFrom":{"resourceFieldRef":{"divisor":1e3}}}],"x":"\n"}"#,
            r#"{"resources":{"requests":{"cpu":"500m"}},"y":[1.50,-0]}"#,
        ];
        let want = alone(&items);
        assert_eq!(want[0]["resources"]["limits"]["cpu"], "0.50");
        assert_eq!(want[0]["resources"]["limits"]["memory"], r"1\u0030");
        assert_eq!(want[1]["ports"][0]["containerPort"], 0);
        let joined = items.join(" ,\n ");
        for input in [
            format!(
                r#"{{"kind":"List","metadata":{{"limits":{{"a":1.50}}}},"items":[{joined}],"x":{{"limits":{{"a":1.50}}}}}}"#
            ),
            format!("[ {joined} ]"),
            items.join("\n"),
            format!(
                "{} [{}] {{\"items\":[{}]}}",
                items[0],
                items[1..3].join(","),
                items[3]
            ),
        ] {
            assert_eq!(streamed(&input), want, "{input}");
        }
        // Floats elsewhere stay floats, for the decoder to take or refuse.
        assert!(want[1]["ports"][0]["hostPort"].is_f64());
        assert!(want[3]["y"][0].is_f64());
    }

    /// Over many chunks and past the recorder's compaction, a value is read from its own text,
    /// across a chunk's edge too.
    #[test]
    fn a_value_is_read_from_its_text_across_chunks() {
        let item = |i: usize, cpu: &str| {
            format!(
                r#"{{"name":"c{i}","x":"{}","resources":{{"limits":{{"cpu":{cpu}}}}}}}"#,
                "y".repeat(i % 97)
            )
        };
        for (at, cpu, read) in [
            (30_000, "0.50", Value::from("0.50")),
            (30_000, r#""0.\u0035""#, Value::from(r"0.\u0035")),
            (1, "-0", Value::from("-0")),
        ] {
            // Items of every length, so that some item with a float crosses a chunk's edge.
            for shift in [0, 17, 40] {
                let mut items: Vec<String> = (0..at + shift).map(|i| item(i, "\"1\"")).collect();
                items.push(item(0, cpu));
                items.extend((0..10).map(|i| item(i, "0.25")));
                let input = format!(r#"{{"kind":"List","items":[{}]}}"#, items.join(","));
                let values = streamed(&input);
                assert_eq!(values.len(), items.len());
                let cpu = |v: &Value| v["resources"]["limits"]["cpu"].clone();
                assert_eq!(cpu(&values[at + shift]), read, "{at} {shift}");
                assert!(values[at + shift + 1..].iter().all(|v| cpu(v) == "0.25"));
                assert!(values[..at + shift].iter().all(|v| cpu(v) == "1"));
            }
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::test_runner::Config::with_cases(1024))]

        /// The claim the decoder rests on, attacked with random spellings: both readers read a
        /// number in a quantity's place as its text, where serde_json keeps a float, and `-0`
        /// elsewhere as 0; and they take the same texts as the same values.
        #[test]
        fn both_readers_read_a_quantity_as_its_text(
            (text, quantities) in proptest::strategy::Strategy::prop_map(
                proptest::collection::vec((0usize..4, number_text(), 0usize..3), 1..6),
                placed,
            ),
        ) {
            let sliced = pod_value_from_slice(text.as_bytes()).ok();
            let mut streamed = Vec::new();
            let read = for_each_object(text.as_bytes(), "t", |v| streamed.push(v));
            proptest::prop_assert_eq!(sliced.is_some(), read.is_ok(), "{}", text);
            if let Some(v) = sliced {
                proptest::prop_assert_eq!(vec![v.clone()], streamed);
                let mut found = Vec::new();
                for_each_placed(&mut v.clone(), &mut |q, place| {
                    if place == Place::Quantity {
                        found.push(q.clone());
                    }
                });
                let want: Vec<Value> = quantities
                    .iter()
                    .map(|token| match serde_json::from_str::<Value>(token) {
                        Ok(n) if n.is_f64() => Value::from(token.as_str()),
                        Ok(v) => v,
                        Err(_) => Value::Null,
                    })
                    .collect();
                proptest::prop_assert_eq!(found, want, "{}", text);
            }
        }
    }

    /// A JSON number spelled one of many ways: as Go writes a float, as Rust does, padded,
    /// with exponents of every form, `-0`, integers past `u64`.
    fn number_text() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        let finite = any::<f64>().prop_filter("finite", |f| f.is_finite());
        prop_oneof![
            finite
                .clone()
                .prop_map(crate::kubelet::gofloat::float64_text),
            finite.clone().prop_map(|f| format!("{f:e}")),
            finite.clone().prop_map(|f| format!("{f}")),
            (0u32..1000, 0usize..4).prop_map(|(n, zeros)| format!("{n}.5{}", "0".repeat(zeros))),
            (
                1u32..10,
                -30i32..30,
                prop::sample::select(vec!["e", "E", "e+", "E-"])
            )
                .prop_map(|(m, e, how)| format!("{m}{how}{}", e.abs())),
            prop::sample::select(vec![
                "-0",
                "-0.0",
                "0.0",
                "1.0",
                "1e21",
                "1e+21",
                "1e-7",
                "0.0000001",
                "18446744073709551616",
                "100000000000000000000",
                "7",
                "-3"
            ])
            .prop_map(String::from),
        ]
    }

    /// A pod whose containers hold `numbers` in quantity places (`limits`, `requests`,
    /// `divisor`) and, now and then, elsewhere; and the numbers put in quantity places.
    fn placed(numbers: Vec<(usize, String, usize)>) -> (String, Vec<String>) {
        let mut quantities = Vec::new();
        let containers: Vec<String> = numbers
            .into_iter()
            .map(|(place, n, spaces)| {
                let pad = " ".repeat(spaces);
                match place {
                    0 => {
                        quantities.push(n.clone());
                        format!(r#"{{"name":"a","resources":{{"limits":{{"cpu":{pad}{n}}}}}}}"#)
                    }
                    1 => {
                        quantities.extend([r#""1""#.to_string(), n.clone()]);
                        format!(r#"{{"name":"a","resources":{{"requests":{{"m":"1","cpu":{n}{pad}}}}}}}"#)
                    }
                    2 => {
                        quantities.push(n.clone());
                        format!(r#"{{"env":[{{"valueFrom":{{"resourceFieldRef":{{"divisor":{n}}}}}}}]}}"#)
                    }
                    _ => format!(r#"{{"ports":[{{"containerPort":{n}}}],"x":{{"limits":[{n}]}}}}"#),
                }
            })
            .collect();
        let text = format!(
            r#"{{"kind":"Pod","spec":{{"containers":[{}]}}}}"#,
            containers.join(",")
        );
        (text, quantities)
    }

    #[test]
    fn a_repeated_key_stops_the_read_naming_it_and_its_place() {
        // The place is just after the repeated key.
        for (input, handed, place) in [
            (
                r#"{"a":1} {"a":2,"b":{"c":1,"c":2}}"#,
                1,
                "line 1 column 30",
            ),
            (r#"[{"a":1},{"a":[{"x":1,"x":1}]}]"#, 1, "line 1 column 26"),
            (
                r#"{"items":[{"a":1}],"items":[{"a":2}]}"#,
                1,
                "line 1 column 27",
            ),
            (
                r#"{"kind":"List","items":[],"kind":"List"}"#,
                0,
                "line 1 column 33",
            ),
            ("{\"items\":[\n{\"a\":1,\n\"a\":1}]}", 0, "line 3 column 4"),
        ] {
            let (n, err) = refused(input);
            assert_eq!(n, handed, "{input}");
            assert!(
                err.starts_with("t: the key ") && err.ends_with(place),
                "{input}: {err}"
            );
        }
        // The same key in different objects is no repeat.
        let mut n = 0;
        for_each_object(&br#"{"items":[{"a":1},{"a":1}],"a":1}"#[..], "t", |_| {
            n += 1
        })
        .unwrap();
        assert_eq!(n, 2);
    }

    #[test]
    fn yaml_documents_and_lists() {
        let y = "apiVersion: v1\nkind: Pod\nmetadata: {name: a}\n---\n---\nkind: List\nitems:\n- {kind: Pod, metadata: {name: b}}\n- {kind: Pod, metadata: {name: c}}\n";
        let mut names = Vec::new();
        for_each_yaml_object(y.as_bytes(), "t.yaml", &mut |v| {
            names.push(v["metadata"]["name"].as_str().unwrap().to_string())
        })
        .unwrap();
        assert_eq!(names, ["a", "b", "c"]);
        let err = for_each_yaml_object("a: [1".as_bytes(), "bad.yaml", &mut |_| {}).unwrap_err();
        let deep = "{a: ".repeat(100_000);
        let e = for_each_yaml_object(deep.as_bytes(), "deep.yaml", &mut |_| {}).unwrap_err();
        assert!(e.to_string().contains("deeper than 256"), "{e}");
        // Brackets in quoted scalars and comments do not count; a Pod-like depth passes the check.
        let quoted = format!(
            "a: \"{}\" # {}\nb: '{}'\n",
            "[".repeat(300),
            "{".repeat(300),
            "{".repeat(300)
        );
        assert_eq!(
            crate::source::yaml::flow_nesting_beyond(quoted.as_bytes(), 256),
            None
        );
        assert_eq!(
            crate::source::yaml::flow_nesting_beyond(b"x: don't [[[", 2),
            Some(1)
        );
        assert!(
            err.to_string().starts_with("bad.yaml: YAML document 1: "),
            "{err}"
        );
    }
}
