//! Every object of an input, parsed and worked on on every core, handed on in input order.
//!
//! A JSON file (or bytes in memory) is split into frames on the reading thread
//! ([`crate::source::frames`]), and the workers parse the frames as well as doing the work, so
//! parsing, the largest cost of reading, runs on every core. Where the framer stops or a frame
//! does not parse, the one reader ([`crate::source::reader`]) reads the input again from the
//! start, skips the objects already handed on, and goes on from there, so the objects and every
//! error are exactly the one reader's. stdin is framed too, kept as it is read
//! ([`crate::source::spool`]) so that the one reader can read it again. YAML, and a directory
//! given whole, are read by the one reader on the reading thread; the work still runs on every
//! core. The commands read a directory's files one after another, each as an input of its own
//! ([`for_each_file`]), so that each is framed if it can be and its objects are named by it.

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::Value;

use crate::error::Result;
use crate::kubelet::spelling::pod_value_from_slice;
use crate::source::encoding::Bom;
use crate::source::frames::{frame_objects, Framed};
use crate::source::pool::{map_batches_in_order, map_weighed_batches_in_order};
use crate::source::reader::{
    extension_says, files_of_directory, for_each_object_in_path, for_each_object_in_stream,
    looks_like_yaml,
};
use crate::source::spool::Spool;

/// Where objects are read from.
#[derive(Debug, Clone, Copy)]
pub enum Input<'a> {
    /// A file, a directory of them, or `-` for stdin.
    Path(&'a Path),
    /// Bytes in memory, JSON or YAML as their first byte says (benches and tests).
    Bytes { name: &'a str, bytes: &'a [u8] },
}

impl Input<'_> {
    /// The input's name in messages: `stdin` for `-`.
    pub fn name(&self) -> String {
        match self {
            Input::Path(p) if p.as_os_str() == "-" => "stdin".into(),
            Input::Path(p) => p.display().to_string(),
            Input::Bytes { name, .. } => name.to_string(),
        }
    }

    /// Every object, one at a time on this thread: the one reader.
    pub fn for_each_object(&self, each: &mut dyn FnMut(Value)) -> Result<()> {
        match self {
            Input::Path(p) => for_each_object_in_path(p, each),
            Input::Bytes { name, bytes } => for_each_object_in_stream(*bytes, name, None, each),
        }
    }

    /// How the framed path reads the input, if it is JSON: a regular file or bytes in memory,
    /// which the one reader can read again from the start, or stdin, kept as it is read
    /// ([`Spool`]) so that the one reader can read it again too. `None` sends the input to the
    /// one reader.
    fn framable(&self) -> Option<Framable<'_>> {
        match self {
            Input::Path(p) if p.as_os_str() == "-" => {
                Some(Framable::kept(Spool::new(Box::new(std::io::stdin()))))
            }
            Input::Path(p) => {
                let file = File::open(p).ok()?;
                if !file.metadata().ok()?.is_file() {
                    return None;
                }
                let mut file = BufReader::with_capacity(1 << 16, file);
                let head = file.fill_buf().ok()?;
                // Marked text is the one reader's to decode (the framer would stop at its first
                // byte and hand it over anyway).
                if Bom::of(head).is_some() {
                    return None;
                }
                let yaml = match extension_says(p) {
                    Some(yaml) => yaml,
                    None => looks_like_yaml(head),
                };
                (!yaml).then(|| Framable::Again(Box::new(file) as Box<dyn Read + Send>))
            }
            // A mark is no white space nor `{`: marked bytes go to the one reader too.
            Input::Bytes { bytes, .. } => (!looks_like_yaml(bytes))
                .then(|| Framable::Again(Box::new(*bytes) as Box<dyn Read + Send>)),
        }
    }
}

/// A stream read once, as stdin is.
type Stream = Box<dyn Read + Send>;

/// How the framed path reads an input ([`Input::framable`]).
enum Framable<'a> {
    /// JSON that the one reader can open again.
    Again(Box<dyn Read + Send + 'a>),
    /// JSON from stdin, kept as it is read.
    Kept(Spool<Stream>),
    /// stdin that is YAML (`Some(true)`), or that starts with a byte order mark or is unknown
    /// after a failed first look (`None`): for the one reader, from what was kept.
    KeptForOneReader(Spool<Stream>, Option<bool>),
}

impl Framable<'_> {
    /// stdin (or any stream read once), kept; the one reader's first look at it
    /// ([`crate::source::reader::first_look`]) tells YAML from JSON.
    fn kept(mut kept: Spool<Stream>) -> Self {
        match kept.head() {
            Ok(head) if Bom::of(&head).is_some() => Framable::KeptForOneReader(kept, None),
            Ok(head) if !looks_like_yaml(&head) => Framable::Kept(kept),
            Ok(_) => Framable::KeptForOneReader(kept, Some(true)),
            Err(_) => Framable::KeptForOneReader(kept, None),
        }
    }
}

/// How a worker has each object: parsed from its frame on the worker, or as the one reader
/// parsed it.
pub trait Parse: Sized {
    /// The value in `frame`, or `None` where [`pod_value_from_slice`] fails on it (the one reader
    /// then reads the input from there and names the error).
    fn frame(frame: Vec<u8>) -> Option<Self>;
    /// A value the one reader parsed.
    fn value(value: Value) -> Self;
}

impl Parse for Value {
    fn frame(frame: Vec<u8>) -> Option<Value> {
        pod_value_from_slice(&frame).ok()
    }

    fn value(value: Value) -> Value {
        value
    }
}

/// Calls `read` with each file of a directory in name order, each an input of its own so that
/// its objects are numbered and named by the file (`dir/b.json: object 2`, not the directory's
/// seventh object), or with `input` itself when it is not a directory; and with the workers to
/// read it with: `workers`, or none for a directory's file smaller than [`SMALL_FILE`].
pub fn for_each_file(
    input: &Input,
    workers: usize,
    mut read: impl FnMut(&Input, usize) -> Result<()>,
) -> Result<()> {
    if let Input::Path(path) = input {
        if let Some(files) = files_of_directory(path)? {
            return files.iter().try_for_each(|file| {
                let small = std::fs::metadata(file).is_ok_and(|m| m.len() < SMALL_FILE);
                read(&Input::Path(file), if small { 0 } else { workers })
            });
        }
    }
    read(input, workers)
}

/// [`for_each_object_on_cores`] over each file of a directory in turn ([`for_each_file`]), or over
/// `input` itself: `worker` and `each` are told the name of the file the objects come from, to
/// say where an object is (`dir/b.json: object 2`).
pub fn for_each_placed_object_on_cores<P, U, F>(
    input: &Input,
    workers: usize,
    batch: usize,
    worker: impl Fn(&str) -> F + Sync,
    mut each: impl FnMut(&str, U),
) -> Result<()>
where
    P: Parse,
    U: Send,
    F: FnMut(usize, P) -> U,
{
    for_each_file(input, workers, |file, workers| {
        let source = file.name();
        for_each_object_on_cores(
            file,
            workers,
            batch,
            || worker(&source),
            |u| each(&source, u),
        )
    })
}

/// Below this size, a directory's file is read and worked on by the calling thread alone:
/// starting workers for it costs more than they save (a directory of 5,000 one-pod files took
/// seven times as long with workers for each).
pub const SMALL_FILE: u64 = 256 * 1024;

/// Calls `each`, in input order, with what a worker's function made of each object of `input`
/// (numbered from 1). `worker` is called once per worker thread (and once more if the one
/// reader has to finish the input); see [`crate::source::pool::map_in_order`] for the threads
/// and the memory bound. With no workers, the one reader parses and the work runs on the
/// calling thread.
pub fn for_each_object_on_cores<P, U, F>(
    input: &Input,
    workers: usize,
    batch: usize,
    worker: impl Fn() -> F + Sync,
    each: impl FnMut(U),
) -> Result<()>
where
    P: Parse,
    U: Send,
    F: FnMut(usize, P) -> U,
{
    for_each_batch_on_cores(
        input,
        workers,
        batch,
        || {
            let mut work = worker();
            move |objects: &mut dyn Iterator<Item = (usize, P)>| {
                objects.map(|(n, object)| work(n, object)).collect()
            }
        },
        each,
    )
}

/// [`for_each_object_on_cores`] with a worker's function that takes a batch of objects (each
/// with its number) and returns what it made of each, in order (see [`map_batches_in_order`]).
/// The objects come as an iterator, each parsed when it is taken, so that a worker holds one
/// parsed object at a time; the function must take them all and return one result for each,
/// or stop at one it cannot parse itself (a [`crate::source::doc::Unparsed`] frame): the reader
/// then reads the input from there, as for a frame `P::frame` refuses.
pub fn for_each_batch_on_cores<P, U, F>(
    input: &Input,
    workers: usize,
    batch: usize,
    worker: impl Fn() -> F + Sync,
    each: impl FnMut(U),
) -> Result<()>
where
    P: Parse,
    U: Send,
    F: FnMut(&mut dyn Iterator<Item = (usize, P)>) -> Vec<U>,
{
    let framable = if workers == 0 { None } else { input.framable() };
    on_cores(input, framable, workers, batch, worker, each)
}

/// [`for_each_batch_on_cores`], the input to be read as `framable` says (`None`: by the one
/// reader).
fn on_cores<P, U, F>(
    input: &Input,
    framable: Option<Framable>,
    workers: usize,
    batch: usize,
    worker: impl Fn() -> F + Sync,
    mut each: impl FnMut(U),
) -> Result<()>
where
    P: Parse,
    U: Send,
    F: FnMut(&mut dyn Iterator<Item = (usize, P)>) -> Vec<U>,
{
    let source = input.name();
    // The worker's function over objects the one reader parsed.
    let on_parsed = || {
        let mut work = worker();
        move |values: Vec<(usize, Value)>| {
            work(&mut values.into_iter().map(|(n, v)| (n, P::value(v))))
        }
    };
    // With no workers (everything on this thread), or an input that cannot be framed, the one
    // reader parses.
    // stdin's spool, once the framer is done with it, for the one reader.
    let mut kept = None;
    let bytes: Box<dyn Read + Send + '_> = match framable {
        Some(Framable::Again(bytes)) => bytes,
        Some(Framable::Kept(spool)) => Box::new(kept.insert(spool)),
        Some(Framable::KeptForOneReader(mut kept, yaml)) => {
            return map_batches_in_order(
                &source,
                workers,
                batch,
                |emit| one_reader_kept(&mut kept, yaml, 0, emit),
                on_parsed,
                each,
            );
        }
        None => {
            return map_batches_in_order(
                &source,
                workers,
                batch,
                |emit| one_reader_from(input, 0, emit),
                on_parsed,
                each,
            );
        }
    };
    // Set when a frame does not parse: nothing after it is handed on.
    let broken = AtomicBool::new(false);
    // Set when the framer stopped before the end (an I/O error too: the one reader reads again
    // and names what it finds). What it framed before stopping is handed on.
    let stopped = AtomicBool::new(false);
    let mut handed_on = 0usize;
    let framed = map_weighed_batches_in_order(
        &source,
        workers,
        batch,
        |(_, frame): &(usize, Vec<u8>)| frame.len(),
        |emit| {
            let mut n = 0;
            let framed = frame_objects(bytes, &mut |frame| {
                n += 1;
                emit((n, frame));
                !broken.load(Ordering::Relaxed)
            });
            if !matches!(framed, Ok(Framed::Complete)) {
                stopped.store(true, Ordering::Relaxed);
            }
            Ok(())
        },
        || {
            let mut work = worker();
            // The objects up to the first frame that does not parse; nothing after that one is
            // handed on (`None` for it and the rest of the batch).
            move |frames: Vec<(usize, Vec<u8>)>| {
                let count = frames.len();
                let mut parsed = frames
                    .into_iter()
                    .map_while(|(n, frame)| Some((n, P::frame(frame)?)));
                let mut done: Vec<Option<U>> = work(&mut parsed).into_iter().map(Some).collect();
                done.resize_with(count, || None);
                done
            }
        },
        |done: Option<U>| match done {
            Some(u) if !broken.load(Ordering::Relaxed) => {
                handed_on += 1;
                each(u);
            }
            _ => broken.store(true, Ordering::Relaxed),
        },
    );
    framed?;
    if !broken.load(Ordering::Relaxed) && !stopped.load(Ordering::Relaxed) {
        return Ok(());
    }
    // The one reader from the start, past what was handed on, on this thread.
    map_batches_in_order(
        &source,
        0,
        batch,
        |emit| match kept.as_mut() {
            Some(kept) => one_reader_kept(kept, Some(false), handed_on, emit),
            None => one_reader_from(input, handed_on, emit),
        },
        on_parsed,
        each,
    )
}

/// [`one_reader_from`] stdin, from what was kept of it and on from there; `yaml` as the one
/// reader's first look at it said (`None`: that look failed, so the one reader looks again).
fn one_reader_kept(
    kept: &mut Spool<Stream>,
    yaml: Option<bool>,
    skip: usize,
    emit: &mut dyn FnMut((usize, Value)),
) -> Result<()> {
    kept.rewind();
    let mut n = 0;
    for_each_object_in_stream(kept, "stdin", yaml, &mut |v| {
        n += 1;
        if n > skip {
            emit((n, v));
        }
    })
}

/// The one reader's objects of `input`, numbered from 1, after the first `skip`.
fn one_reader_from(input: &Input, skip: usize, emit: &mut dyn FnMut((usize, Value))) -> Result<()> {
    let mut n = 0;
    input.for_each_object(&mut |v| {
        n += 1;
        if n > skip {
            emit((n, v));
        }
    })
}

/// Test support: `input` with each edit applied in turn, at its index into the bytes: 0 replaces
/// the byte there, 1 removes it, anything else inserts the edit's byte.
#[cfg(test)]
pub(crate) fn break_bytes(input: &mut Vec<u8>, edits: &[(proptest::sample::Index, u8, u8)]) {
    for (at, how, byte) in edits {
        let i = at.index(input.len() + 1);
        match how {
            0 if i < input.len() => input[i] = *byte,
            1 if i < input.len() => {
                input.remove(i);
            }
            _ => input.insert(i, *byte),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::spool::Pipe;
    use proptest::prelude::*;

    /// What the one reader hands over, or its error.
    fn one_reader(input: &[u8]) -> (Vec<Value>, Option<String>) {
        let mut seen = Vec::new();
        let err = Input::Bytes {
            name: "t",
            bytes: input,
        }
        .for_each_object(&mut |v| seen.push(v))
        .err()
        .map(|e| e.to_string());
        (seen, err)
    }

    fn on_cores(input: &[u8], workers: usize, batch: usize) -> (Vec<Value>, Option<String>) {
        let input = Input::Bytes {
            name: "t",
            bytes: input,
        };
        read_on_cores(&input, input.framable(), workers, batch)
    }

    fn read_on_cores(
        input: &Input,
        framable: Option<Framable>,
        workers: usize,
        batch: usize,
    ) -> (Vec<Value>, Option<String>) {
        let mut seen = Vec::new();
        let err = super::on_cores(
            input,
            framable,
            workers,
            batch,
            || |objects: &mut dyn Iterator<Item = (usize, Value)>| objects.collect::<Vec<_>>(),
            |(n, v)| {
                assert_eq!(n, seen.len() + 1, "numbered in input order");
                seen.push(v);
            },
        )
        .err()
        .map(|e| e.to_string());
        (seen, err)
    }

    /// `input` read as stdin is on cores: through a pipe, `step` bytes a read at most, kept
    /// past `memory` bytes in a temporary file (or, with `no_file`, in none: the first reading
    /// then stops there).
    fn piped_on_cores(
        input: &[u8],
        step: usize,
        memory: usize,
        no_file: bool,
        workers: usize,
        batch: usize,
    ) -> (Vec<Value>, Option<String>) {
        let pipe = Pipe::new(input, step);
        let make: fn() -> std::io::Result<File> = match no_file {
            true => || Err(std::io::Error::other("no room")),
            false => tempfile::tempfile,
        };
        let kept = Framable::kept(Spool::with(Box::new(pipe), memory, make));
        let stdin = Input::Path(Path::new("-"));
        read_on_cores(&stdin, Some(kept), workers, batch)
    }

    #[test]
    fn the_same_objects_and_errors_as_the_one_reader() {
        for input in [
            r#"{"kind":"List","metadata":{},"items":[{"a":1},{"a":2},{"a":3}]} [{"a":4}] {"a":5}"#,
            r#"{"a":1} {"a":2} {"a":3} {"b": tru} {"a":5}"#,
            r#"{"items":[{"a":1},{"a":2},{"a":3},{"a":4},{"a":5},]}"#,
            r#"{"items":[{"a":1},{"a":2},{"a":3}],"metadata":{"x":1e999}}"#,
            r#"{"metadata":{"x":1e999},"items":[{"a":1},{"a":2}]}"#,
            r#"[{"a":1},{"a":2},{"a":3},7,"x",null,{"a":8}]"#,
            r#"{"a":1} "top" {"a":2}"#,
            r#"{"a":1}{"a":2}{"a":3"#,
            "{\"a\":\"\u{1}\"} {\"a\":2}",
            "",
            "[] {\"items\":[]}",
            r#"{"items":[{"a":1},{"a":2}],"items":[{"a":3}]}"#,
            r#"{"kind":"List","kind":"List","items":[{"a":1}]}"#,
            r#"{"items":[{"a":1}],"metadata":{},"metadata":{}}"#,
            r#"{"a":1} {"b":2,"b":3} {"c":4}"#,
        ] {
            let want = one_reader(input.as_bytes());
            for workers in [0, 1, 3] {
                assert_eq!(on_cores(input.as_bytes(), workers, 2), want, "{input}");
            }
        }
    }

    /// Pieces of JSON that inputs are built from: lists, arrays, objects, scalars, and the
    /// bytes Go's reader replaces.
    fn piece() -> impl Strategy<Value = String> {
        let leaf = prop_oneof![
            Just(r#"{"a":1}"#.to_string()),
            Just(r#"{"s":"x\"]}\\","n":[1,2.5,-0]}"#.to_string()),
            Just(r#"{"u":"\ud800 \u00e9"}"#.to_string()),
            Just("{\"b\":\"\u{e9}\"}".to_string()),
            Just("{}".to_string()),
            Just("[]".to_string()),
            Just("7".to_string()),
            Just("\"s\"".to_string()),
            Just("null".to_string()),
            Just(r#"{"items":null,"kind":"List"}"#.to_string()),
            // A repeated key, which the one reader refuses, naming it.
            Just(r#"{"a":1,"b":{"c":1,"\u0063":2}}"#.to_string()),
        ];
        leaf.prop_recursive(3, 12, 4, |inner| {
            prop_oneof![
                4 => proptest::collection::vec(inner.clone(), 0..4)
                    .prop_map(|v| format!("[{}]", v.join(","))),
                4 => proptest::collection::vec(inner.clone(), 0..4).prop_map(|v| format!(
                    r#"{{"kind":"List","items":[{}],"metadata":{{}}}}"#,
                    v.join(" , ")
                )),
                4 => (inner.clone(), inner.clone())
                    .prop_map(|(a, b)| format!(r#"{{"x":{a},"it\u0065ms":[{b}]}}"#)),
                // A List that repeats `items`, or a key before or after it.
                1 => (inner.clone(), inner.clone())
                    .prop_map(|(a, b)| format!(r#"{{"items":[{a}],"kind":"L","items":[{b}]}}"#)),
                1 => (inner.clone(), inner.clone())
                    .prop_map(|(a, b)| format!(r#"{{"k":{a},"items":[{b}],"\u006b":1}}"#)),
                // `items` past the first 512 bytes, where the framer looks for it first.
                1 => (0..80usize, inner).prop_map(|(n, b)| format!(
                    r#"{{"m":"{}","items":[{b}]}}"#,
                    "x".repeat(470 + n)
                )),
            ]
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(400))]
        /// The adversary: random inputs, then random bytes broken, inserted or removed (and
        /// invalid UTF-8), read on several threads in small batches, must give the one reader's
        /// objects and error, byte for byte.
        #[test]
        fn broken_inputs_read_on_cores_as_by_the_one_reader(
            pieces in proptest::collection::vec(piece(), 1..5),
            edits in proptest::collection::vec((any::<prop::sample::Index>(), 0..4u8, prop::sample::select(vec![b'{', b'}', b'[', b']', b'"', b',', b':', b'\\', b' ', b'x', b'1', b'n', b'l', 0xff, 0xc3])), 0..3),
            workers in 1..4usize,
            batch in 1..4usize,
        ) {
            let mut input = pieces.join("\n").into_bytes();
            break_bytes(&mut input, &edits);
            let want = one_reader(&input);
            prop_assert_eq!(on_cores(&input, workers, batch), want, "{}", String::from_utf8_lossy(&input));
        }

        /// The same through a pipe, as stdin is read on cores: kept as read (in memory, then
        /// in a temporary file, or in none when it cannot be made), it must give the one
        /// reader's objects and error, byte for byte, however the reads are cut.
        #[test]
        fn broken_inputs_piped_on_cores_as_by_the_one_reader(
            pieces in proptest::collection::vec(piece(), 1..5),
            edits in proptest::collection::vec((any::<prop::sample::Index>(), 0..4u8, prop::sample::select(vec![b'{', b'}', b'[', b']', b'"', b',', b':', b'\\', b' ', b'x', b'1', b'n', b'l', 0xff, 0xc3, b'-', b'\n'])), 0..3),
            step in 1..64usize,
            memory in 0..300usize,
            no_file in any::<bool>(),
            workers in 1..4usize,
            batch in 1..4usize,
        ) {
            let mut input = pieces.join("\n").into_bytes();
            break_bytes(&mut input, &edits);
            // The one reader reading the same pipe, as it read stdin before it was kept.
            let mut seen = Vec::new();
            let pipe = Pipe::new(&input, step);
            let err = for_each_object_in_stream(pipe, "stdin", None, &mut |v| seen.push(v))
                .err()
                .map(|e| e.to_string());
            let want = (seen, err);
            prop_assert_eq!(
                piped_on_cores(&input, step, memory, no_file, workers, batch),
                want,
                "{}",
                String::from_utf8_lossy(&input)
            );
        }
    }

    #[test]
    fn files_are_framed_and_yaml_is_read_by_the_one_reader() {
        let dir = tempfile::tempdir().unwrap();
        let json = dir.path().join("pods");
        std::fs::write(&json, r#"{"items":[{"a":1},{"a":2}]}"#).unwrap();
        let yaml = dir.path().join("pods.yaml");
        std::fs::write(&yaml, "items:\n- {a: 1}\n- {a: 2}\n").unwrap();
        for p in [&json, &yaml] {
            let input = Input::Path(p);
            assert_eq!(
                matches!(input.framable(), Some(Framable::Again(_))),
                p == &json
            );
            let mut seen = Vec::new();
            for_each_object_on_cores(&input, 2, 1, || |_, v: Value| v, |v| seen.push(v)).unwrap();
            assert_eq!(
                seen,
                [serde_json::json!({"a":1}), serde_json::json!({"a":2})]
            );
        }
    }
}
