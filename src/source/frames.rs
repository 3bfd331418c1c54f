//! Where each object of a JSON input begins and ends, found without parsing it, so that several
//! threads can parse the objects of one input.
//!
//! The one reader ([`crate::source::reader`]) hands over: each element of a top-level array, each
//! element of the `items` array of a top-level object (a List, a PodList), and a top-level object
//! without `items` as a whole. The framer finds those spans in the cleaned bytes ([`clean`]) by
//! following strings and brackets; each frame is then parsed on its own, as the one reader parses
//! a value ([`crate::kubelet::once_keys`]), which checks everything the framer did not. A JSON
//! value ends where its closing bracket is, so a frame that parses is exactly the value the one
//! reader would have parsed at that place. A top-level object none of whose keys can be `items`
//! is found whole by its brackets (`Framer::whole_object`); others are walked member by member.
//!
//! The framer never decides that an input is broken. At anything it does not expect (a syntax
//! error, a top-level scalar, nesting deeper than [`MAX_DEPTH`], an `items` that is not a list,
//! an input without any object) it stops and reports how many frames it handed over, and the
//! caller reads the rest with the one reader, skipping as many objects. A frame that does not
//! parse is handled the same way. So what an input means, and every error's text and position,
//! still come from the one reader.

use std::io::{self, Read};
use std::sync::LazyLock;

use memchr::memmem;

use crate::kubelet::bytescan::{find_quote_or_backslash, structure, Structure};
#[cfg(target_arch = "x86_64")]
use crate::kubelet::bytescan::{has_avx2_popcnt, structure_avx2};
use crate::kubelet::once_keys::value_from_slice;
use crate::source::goread::clean;

/// Deeper nesting than any pod has; serde_json refuses 128 levels, counted from the top-level
/// value, so a deeper input is left to the one reader to reject exactly.
pub const MAX_DEPTH: usize = 100;

/// The most bytes of a top-level object looked at whole for being one frame
/// ([`Framer::whole_object`]); a larger one is walked member by member.
const WHOLE_OBJECT: usize = 1 << 20;

/// How far into a top-level object an `items` makes it walked member by member at once
/// (`Framer::whole_object`).
const LIST_HEAD: usize = 512;

/// Bytes read from the input at a time, at most.
const CHUNK: usize = 1 << 20;

/// Bytes read at first: the read buffer doubles, up to [`CHUNK`], each time a read fills it,
/// so a small input does not pay for zeroing a large buffer.
const FIRST_CHUNK: usize = 1 << 16;

/// How framing ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Framed {
    /// Every object of the input was handed over.
    Complete,
    /// The framer stopped after handing over this many frames; the rest is the one reader's.
    Stopped(usize),
}

/// Why a scan could not go on: the input needs the one reader, or could not be read.
enum Halt {
    Unsure,
    Io(io::Error),
}

impl From<io::Error> for Halt {
    fn from(e: io::Error) -> Self {
        Halt::Io(e)
    }
}

type Step<T> = std::result::Result<T, Halt>;

/// Hands `emit` the bytes of every object of the JSON `reader`, in input order, until `emit`
/// returns `false` (the caller stopped) or the input ends or needs the one reader.
pub fn frame_objects<R: Read>(
    reader: R,
    emit: &mut dyn FnMut(Vec<u8>) -> bool,
) -> io::Result<Framed> {
    frame_with(reader, emit, WHOLE_OBJECT)
}

/// [`frame_objects`], top-level objects up to `whole` bytes looked at whole
/// ([`Framer::whole_object`]; 0 walks every one member by member).
fn frame_with<R: Read>(
    reader: R,
    emit: &mut dyn FnMut(Vec<u8>) -> bool,
    whole: usize,
) -> io::Result<Framed> {
    let mut f = Framer {
        inner: reader,
        raw: vec![0; FIRST_CHUNK],
        raw_start: 0,
        raw_len: 0,
        buf: Vec::with_capacity(CHUNK),
        base: 0,
        keep: 0,
        eof: false,
        emitted: 0,
        emit,
        whole,
    };
    match f.run() {
        Ok(()) if f.emitted > 0 => Ok(Framed::Complete),
        // Without any object, what the input is (empty, scalars, empty lists) is the one
        // reader's to say.
        Ok(()) | Err(Halt::Unsure) => Ok(Framed::Stopped(f.emitted)),
        Err(Halt::Io(e)) => Err(e),
    }
}

struct Framer<'e, R> {
    inner: R,
    /// Input bytes read and not yet cleaned: `raw[raw_start..raw_len]`.
    raw: Vec<u8>,
    raw_start: usize,
    raw_len: usize,
    /// Cleaned bytes from absolute offset `base` on.
    buf: Vec<u8>,
    base: usize,
    /// Bytes before this absolute offset are no longer needed.
    keep: usize,
    eof: bool,
    emitted: usize,
    emit: &'e mut dyn FnMut(Vec<u8>) -> bool,
    /// The most bytes of a top-level object looked at whole.
    whole: usize,
}

impl<R: Read> Framer<'_, R> {
    /// The byte at absolute offset `i`, reading more input if needed; `None` at the end.
    fn at(&mut self, i: usize) -> Step<Option<u8>> {
        while i >= self.base + self.buf.len() {
            if !self.fill()? {
                return Ok(None);
            }
        }
        Ok(Some(self.buf[i - self.base]))
    }

    /// Cleans more input onto the end of the buffer ([`clean`], Go's byte rules), dropping what
    /// is no longer needed; `false` at the end.
    fn fill(&mut self) -> Step<bool> {
        let drop = (self.keep - self.base).min(self.buf.len());
        if drop >= self.buf.len() / 2 && drop > 0 {
            self.buf.drain(..drop);
            self.base += drop;
        }
        loop {
            if self.raw_start < self.raw_len || self.eof {
                let before = self.buf.len();
                let raw = &self.raw[self.raw_start..self.raw_len];
                self.raw_start += clean(raw, self.eof, &mut self.buf);
                if self.buf.len() > before {
                    return Ok(true);
                }
                if self.eof {
                    return Ok(false);
                }
            }
            // What `clean` left (the start of a UTF-8 sequence or an escape) goes first.
            self.raw.copy_within(self.raw_start..self.raw_len, 0);
            self.raw_len -= self.raw_start;
            self.raw_start = 0;
            let n = loop {
                match self.inner.read(&mut self.raw[self.raw_len..]) {
                    Ok(n) => break n,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(Halt::Io(e)),
                }
            };
            self.raw_len += n;
            self.eof = n == 0;
            if self.raw_len == self.raw.len() && self.raw.len() < CHUNK {
                self.raw.resize(self.raw.len() * 2, 0);
            }
        }
    }

    fn bytes(&self, from: usize, to: usize) -> &[u8] {
        &self.buf[from - self.base..to - self.base]
    }

    /// The offset of the first byte at or after `i` that is not JSON white space.
    fn skip_ws(&mut self, mut i: usize) -> Step<usize> {
        while let Some(b) = self.at(i)? {
            if !matches!(b, b' ' | b'\n' | b'\t' | b'\r') {
                break;
            }
            i += 1;
        }
        Ok(i)
    }

    /// Hands over the frame `from..to`; `Unsure` once the caller wants no more.
    fn frame(&mut self, from: usize, to: usize) -> Step<()> {
        let bytes = self.bytes(from, to).to_vec();
        self.emitted += 1;
        if (self.emit)(bytes) {
            Ok(())
        } else {
            Err(Halt::Unsure)
        }
    }

    fn run(&mut self) -> Step<()> {
        let mut i = 0;
        loop {
            self.keep = i;
            i = self.skip_ws(i)?;
            match self.at(i)? {
                None => return Ok(()),
                Some(b'[') => i = self.elements(i, 1)?,
                Some(b'{') => i = self.top_object(i)?,
                // A top-level scalar is rare and handed over as it is: the one reader's.
                Some(_) => return Err(Halt::Unsure),
            }
        }
    }

    /// Frames each element of the array opening at `open`, `depth` levels deep; returns the
    /// offset after its `]`.
    fn elements(&mut self, open: usize, depth: usize) -> Step<usize> {
        let mut i = self.skip_ws(open + 1)?;
        if self.at(i)? == Some(b']') {
            return Ok(i + 1);
        }
        loop {
            self.keep = i;
            let end = self.value_end(i, depth + 1)?;
            self.frame(i, end)?;
            i = self.skip_ws(end)?;
            match self.at(i)? {
                Some(b',') => i = self.skip_ws(i + 1)?,
                Some(b']') => return Ok(i + 1),
                _ => return Err(Halt::Unsure),
            }
            // `[1,]` is an error the one reader names.
            if self.at(i)? == Some(b']') {
                return Err(Halt::Unsure);
            }
        }
    }

    /// A top-level object: its `items` elements are frames, or, without `items`, the object is.
    /// Returns the offset after its `}`.
    fn top_object(&mut self, open: usize) -> Step<usize> {
        if let Some(end) = self.whole_object(open)? {
            self.frame(open, end)?;
            return Ok(end);
        }
        // Members before the first `items` (key, then value), checked only once `items` shows
        // they are not part of a frame.
        let mut before: Vec<(usize, usize, usize, usize)> = Vec::new();
        let mut streamed = false;
        // Once streamed, the keys met: a repeated one is the one reader's to refuse.
        let mut keys: Vec<String> = Vec::new();
        let mut i = self.skip_ws(open + 1)?;
        if self.at(i)? == Some(b'}') {
            self.frame(open, i + 1)?;
            return Ok(i + 1);
        }
        loop {
            if self.at(i)? != Some(b'"') {
                return Err(Halt::Unsure);
            }
            let key_start = i;
            let key_end = self.string_end(i)?;
            let is_items = self.key_is_items(i, key_end)?;
            i = self.skip_ws(key_end)?;
            if self.at(i)? != Some(b':') {
                return Err(Halt::Unsure);
            }
            i = self.skip_ws(i + 1)?;
            if is_items {
                if streamed {
                    return Err(Halt::Unsure);
                }
                for (key_from, key_to, from, to) in std::mem::take(&mut before) {
                    self.new_key(&mut keys, key_from, key_to)?;
                    self.check_value(from, to)?;
                }
                keys.push("items".into());
                streamed = true;
                i = match self.at(i)? {
                    Some(b'[') => self.elements(i, 2)?,
                    Some(b'n') if self.literal(i, b"null")? => i + 4,
                    _ => return Err(Halt::Unsure),
                };
                self.keep = i;
            } else {
                let end = self.value_end(i, 2)?;
                if streamed {
                    self.new_key(&mut keys, key_start, key_end)?;
                    self.check_value(i, end)?;
                    self.keep = end;
                } else {
                    before.push((key_start, key_end, i, end));
                }
                i = end;
            }
            i = self.skip_ws(i)?;
            match self.at(i)? {
                Some(b',') => i = self.skip_ws(i + 1)?,
                Some(b'}') => {
                    if !streamed {
                        self.frame(open, i + 1)?;
                    }
                    return Ok(i + 1);
                }
                _ => return Err(Halt::Unsure),
            }
        }
    }

    /// The offset after the top-level object opening at `open`, if it closes within `whole`
    /// bytes ([`WHOLE_OBJECT`]) and none of its keys can be `items`: then it is one frame,
    /// found by following its brackets alone instead of member by member. A key that decodes
    /// to `items` holds those five letters as they are or a `\u` escape (no other escape
    /// decodes to a letter), so an object with neither, anywhere in it, has no such key. Its
    /// syntax is checked where every frame's is, when it is parsed. `None` for anything else:
    /// the member by member walk then frames it (a List streams its items from there, without
    /// being held whole).
    fn whole_object(&mut self, open: usize) -> Step<Option<usize>> {
        // The searchers are built once: building them per object was a fifth of the time it
        // took to frame a bare container.
        static ITEMS: LazyLock<memmem::Finder<'static>> =
            LazyLock::new(|| memmem::Finder::new(b"items"));
        static U_ESCAPE: LazyLock<memmem::Finder<'static>> =
            LazyLock::new(|| memmem::Finder::new(b"\\u"));
        if self.whole == 0 {
            return Ok(None);
        }
        // A List names its `items` within its first few members (kubectl and the API server
        // write a few short ones first): walked at once, not followed to its end first. The
        // head may reach past a short object into the next; an `items` there only costs this
        // object the member by member walk, which frames it the same.
        let head = self.bytes(open, (open + LIST_HEAD).min(self.base + self.buf.len()));
        if ITEMS.find(head).is_some() {
            return Ok(None);
        }
        let head_len = head.len();
        let Some(end) = self.closing(open, 1, self.whole)? else {
            return Ok(None);
        };
        let span = self.bytes(open, end);
        // The head was searched already, but for an `items` it cut short.
        let rest = &span[head_len.saturating_sub(b"items".len() - 1).min(span.len())..];
        let maybe_items = ITEMS.find(rest).is_some() || U_ESCAPE.find(span).is_some();
        Ok((!maybe_items).then_some(end))
    }

    /// Whether the key string `from..to` (quotes included) is `items`, decoded as JSON.
    fn key_is_items(&mut self, from: usize, to: usize) -> Step<bool> {
        let key = self.bytes(from + 1, to - 1);
        if !key.iter().any(|&b| b == b'\\' || b < 0x20) {
            return Ok(key == b"items");
        }
        match serde_json::from_slice::<String>(self.bytes(from, to)) {
            Ok(k) => Ok(k == "items"),
            Err(_) => Err(Halt::Unsure),
        }
    }

    /// Adds the key string `from..to` (quotes included) to `keys`, unless it is there already.
    fn new_key(&mut self, keys: &mut Vec<String>, from: usize, to: usize) -> Step<()> {
        let key = match serde_json::from_slice::<String>(self.bytes(from, to)) {
            Ok(k) => k,
            Err(_) => return Err(Halt::Unsure),
        };
        if keys.contains(&key) {
            return Err(Halt::Unsure);
        }
        keys.push(key);
        Ok(())
    }

    /// A member the one reader parses and drops (a List's `kind`, `metadata`, …): it must parse.
    fn check_value(&mut self, from: usize, to: usize) -> Step<()> {
        match value_from_slice(self.bytes(from, to)) {
            Ok(_) => Ok(()),
            Err(_) => Err(Halt::Unsure),
        }
    }

    fn literal(&mut self, i: usize, word: &[u8]) -> Step<bool> {
        for (k, &w) in word.iter().enumerate() {
            if self.at(i + k)? != Some(w) {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// The offset after the value starting at `i`, `depth` levels deep if it is an array or an
    /// object. Only strings and brackets are followed; the value's parse checks the rest.
    fn value_end(&mut self, i: usize, depth: usize) -> Step<usize> {
        match self.at(i)? {
            Some(b'"') => self.string_end(i),
            Some(b'{' | b'[') => self.nested_end(i, depth),
            Some(_) => {
                // A number or a literal: up to the next delimiter.
                let mut j = i;
                while let Some(b) = self.at(j)? {
                    if matches!(b, b',' | b']' | b'}' | b' ' | b'\n' | b'\t' | b'\r') {
                        break;
                    }
                    j += 1;
                }
                Ok(j)
            }
            None => Err(Halt::Unsure),
        }
    }

    /// The offset after the array or object opening at `open`, `depth` levels deep.
    fn nested_end(&mut self, open: usize, depth: usize) -> Step<usize> {
        self.closing(open, depth, usize::MAX)?.ok_or(Halt::Unsure)
    }

    /// [`Framer::nested_end`] if the value closes within `limit` bytes; `None` if it does not,
    /// nests too deep or the input ends first.
    fn closing(&mut self, open: usize, depth: usize, limit: usize) -> Step<Option<usize>> {
        let mut n = Nesting {
            level: 0,
            in_string: false,
            escaped: false,
            most: MAX_DEPTH + 1 - depth,
        };
        let mut i = open;
        loop {
            if i >= self.base + self.buf.len() && (i - open >= limit || !self.fill()?) {
                return Ok(None);
            }
            let start = i - self.base;
            match n.scan(&self.buf[start..]) {
                Scanned::End(k) => return Ok(Some(i + k)),
                Scanned::More => i = self.base + self.buf.len(),
                Scanned::TooDeep => return Ok(None),
            }
        }
    }

    /// The offset after the string whose opening quote is at `open`.
    fn string_end(&mut self, open: usize) -> Step<usize> {
        let mut i = open + 1;
        loop {
            if i >= self.base + self.buf.len() && !self.fill()? {
                return Err(Halt::Unsure);
            }
            let start = i - self.base;
            let hit = find_quote_or_backslash(&self.buf[start..]);
            match hit {
                None => i = self.base + self.buf.len(),
                Some(k) if self.buf[start + k] == b'"' => return Ok(i + k + 1),
                // An escape: the byte after the backslash is never the string's end.
                Some(k) => i += k + 2,
            }
        }
    }
}

/// Where a scan through nested arrays and objects is, between chunks of input.
#[derive(Debug, Clone, PartialEq)]
struct Nesting {
    level: usize,
    in_string: bool,
    /// The previous byte was a backslash inside a string.
    escaped: bool,
    /// The deepest level allowed.
    most: usize,
}

#[derive(Debug, PartialEq)]
enum Scanned {
    /// The outermost bracket closes just before this index.
    End(usize),
    /// Not closed within these bytes.
    More,
    TooDeep,
}

impl Nesting {
    /// Follows strings and brackets through `bytes`, 64 bytes at a time where a block has no
    /// backslash: its quotes and brackets as bit masks ([`structure`]), the bytes inside
    /// strings by a prefix XOR of the quotes, and only the brackets outside them visited. A
    /// block with a backslash (or after one) goes a byte at a time, so escapes are followed
    /// exactly as [`Nesting::bytewise`] follows them.
    fn scan(&mut self, bytes: &[u8]) -> Scanned {
        #[cfg(target_arch = "x86_64")]
        if has_avx2_popcnt() {
            // SAFETY: the CPU has AVX2 and POPCNT.
            return unsafe { self.scan_avx2(bytes) };
        }
        self.scan_with(bytes, structure, false)
    }

    /// [`Nesting::scan`] with AVX2 and POPCNT: blocks found 32 bytes at a time, and a block
    /// whose brackets cannot close the value passed on their counts alone.
    ///
    /// # Safety
    /// The CPU must have AVX2 and POPCNT ([`has_avx2_popcnt`]).
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,popcnt")]
    unsafe fn scan_avx2(&mut self, bytes: &[u8]) -> Scanned {
        // SAFETY: the caller's CPU has AVX2.
        self.scan_with(bytes, |b| unsafe { structure_avx2(b) }, true)
    }

    /// [`Nesting::scan`], each block's masks from `structure`; with `counted`, a block that
    /// cannot close the value or nest too deep is passed on its bracket counts.
    #[inline(always)]
    fn scan_with(
        &mut self,
        bytes: &[u8],
        structure: impl Fn(&[u8; 64]) -> Structure,
        counted: bool,
    ) -> Scanned {
        let mut k = 0;
        while let Some(block) = bytes
            .get(k..k + 64)
            .and_then(|b| <&[u8; 64]>::try_from(b).ok())
        {
            let found = structure(block);
            let done = if found.backslash != 0 || self.escaped {
                self.bytewise(block)
            } else {
                self.block(&found, counted)
            };
            match done {
                Scanned::End(i) => return Scanned::End(k + i),
                Scanned::TooDeep => return Scanned::TooDeep,
                Scanned::More => k += 64,
            }
        }
        match self.bytewise(&bytes[k..]) {
            Scanned::End(i) => Scanned::End(k + i),
            other => other,
        }
    }

    /// One block without backslashes, from its masks.
    ///
    /// With `counted`, a block with fewer closing brackets than the level (so the level cannot
    /// come to 0 in it) and too few opening ones to pass the deepest level is passed on their
    /// counts; worth it only where counting bits is one instruction.
    #[inline(always)]
    fn block(&mut self, found: &Structure, counted: bool) -> Scanned {
        // Bit i is set when byte i is inside a string (an opening quote counts as inside, a
        // closing one as outside): the parity of the quotes up to it, and of those before.
        let inside = prefix_xor(found.quote) ^ 0u64.wrapping_sub(u64::from(self.in_string));
        self.in_string = inside >> 63 != 0;
        let open = found.open & !inside;
        if counted {
            let opens = open.count_ones() as usize;
            let closes = (found.close & !inside).count_ones() as usize;
            if closes < self.level && self.level + opens <= self.most {
                self.level = self.level + opens - closes;
                return Scanned::More;
            }
        }
        let mut brackets = (open | found.close) & !inside;
        while brackets != 0 {
            let i = brackets.trailing_zeros();
            if open >> i & 1 != 0 {
                self.level += 1;
                if self.level > self.most {
                    return Scanned::TooDeep;
                }
            } else {
                self.level -= 1;
                if self.level == 0 {
                    return Scanned::End(i as usize + 1);
                }
            }
            brackets &= brackets - 1;
        }
        Scanned::More
    }

    /// Follows strings and brackets through `bytes` one byte at a time outside strings, and
    /// inside them eight bytes at a time to the next quote or backslash.
    fn bytewise(&mut self, bytes: &[u8]) -> Scanned {
        let mut k = 0;
        while let Some(&b) = bytes.get(k) {
            if self.in_string {
                if self.escaped {
                    self.escaped = false;
                    k += 1;
                    continue;
                }
                let Some(j) = find_quote_or_backslash(&bytes[k..]) else {
                    break;
                };
                k += j;
                match bytes[k] {
                    b'"' => self.in_string = false,
                    _ => self.escaped = true,
                }
                k += 1;
                continue;
            }
            k += 1;
            match b {
                b'"' => self.in_string = true,
                b'{' | b'[' => {
                    self.level += 1;
                    if self.level > self.most {
                        return Scanned::TooDeep;
                    }
                }
                b'}' | b']' => {
                    self.level -= 1;
                    if self.level == 0 {
                        return Scanned::End(k);
                    }
                }
                _ => {}
            }
        }
        Scanned::More
    }
}

/// Each bit i set where byte i, or an odd number of the bytes before it, has its bit set.
#[inline]
fn prefix_xor(mut x: u64) -> u64 {
    for shift in [1, 2, 4, 8, 16, 32] {
        x ^= x << shift;
    }
    x
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn frames(input: &str) -> (Vec<String>, Framed) {
        let got = frames_with(input.as_bytes(), WHOLE_OBJECT);
        // Every input frames the same without looking at top-level objects whole, up to a
        // frame that does not parse (where the one reader takes over either way).
        assert_eq!(
            as_read(frames_with(input.as_bytes(), 0)),
            as_read(got.clone()),
            "{input}"
        );
        (
            got.0
                .into_iter()
                .map(|f| String::from_utf8(f).unwrap())
                .collect(),
            got.1,
        )
    }

    /// What the caller makes of frames: those before the first that does not parse, and
    /// where the one reader takes over.
    fn as_read((frames, end): (Vec<Vec<u8>>, Framed)) -> (Vec<Vec<u8>>, Framed) {
        match frames.iter().position(|f| value_from_slice(f).is_err()) {
            Some(k) => (frames[..k].to_vec(), Framed::Stopped(k)),
            None => (frames, end),
        }
    }

    fn frames_with(input: &[u8], whole: usize) -> (Vec<Vec<u8>>, Framed) {
        let mut out = Vec::new();
        let framed = frame_with(
            input,
            &mut |f| {
                out.push(f);
                true
            },
            whole,
        )
        .unwrap();
        (out, framed)
    }

    /// Top-level objects looked at whole or walked member by member frame alike: with and
    /// without `items` (as a key, a value, escaped, nested), broken ones, too deep ones, and
    /// ones larger than the limit.
    #[test]
    fn whole_objects_frame_as_members_do() {
        let deep = |n: usize| format!("{{\"a\":{}{}}}", "[".repeat(n), "]".repeat(n));
        let mut inputs = vec![
            r#"{"name":"a","image":"b"} {"name":"c"}"#.to_string(),
            r#"{"name":"a","items":[{"x":1},{"y":2}]}"#.into(),
            r#"{"name":"items"} {"a":{"items":[1]}}"#.into(),
            r#"{"it\u0065ms":[{"a":1}]} {"k":"\u00e9"}"#.into(),
            r#"{"it\"ems":[{"a":1}]}"#.into(),
            r#"{"a" "b"} {"c":1}"#.into(),
            r#"{"a":1,} {"c":1}"#.into(),
            r#"{"a":1}} {"c":1}"#.into(),
            r#"{"a":"\""} {"b":"}"}"#.into(),
            r#"{"a":1"#.into(),
            deep(MAX_DEPTH - 2),
            deep(MAX_DEPTH - 1),
            deep(MAX_DEPTH),
        ];
        inputs.push(format!(r#"{{"a":"{}"}} {{"b":1}}"#, "x".repeat(3 * CHUNK)));
        // An `items` before, across and after the first LIST_HEAD bytes.
        for at in [LIST_HEAD - 8, LIST_HEAD - 3, LIST_HEAD + 40] {
            let pad = "x".repeat(at - r#"{"m":"","#.len() - 1);
            inputs.push(format!(r#"{{"m":"{pad}","items":[{{"a":1}}]}} {{"b":1}}"#));
        }
        for input in &inputs {
            frames(input);
        }
        // Over the limit: walked member by member, framed the same.
        let big = format!(r#"{{"a":"{}"}}"#, "x".repeat(100));
        assert_eq!(
            frames_with(big.as_bytes(), 50),
            frames_with(big.as_bytes(), 0)
        );
    }

    #[test]
    fn lists_arrays_and_objects_are_split_as_the_reader_hands_them_over() {
        let (f, end) = frames(
            r#"{"kind":"List","metadata":{"x":"}"},"items":[{"a":"]"} , {"b":[1,{"c":2}]}]}
               [{"d":1},2,"s"]{"e":{}}
               {}"#,
        );
        assert_eq!(end, Framed::Complete);
        assert_eq!(
            f,
            [
                r#"{"a":"]"}"#,
                r#"{"b":[1,{"c":2}]}"#,
                r#"{"d":1}"#,
                "2",
                r#""s""#,
                r#"{"e":{}}"#,
                "{}"
            ]
        );
    }

    #[test]
    fn escaped_quotes_and_escaped_keys() {
        let (f, end) = frames(r#"{"it\u0065ms":[{"a":"x\"}"}],"k":"\\"}"#);
        assert_eq!(end, Framed::Complete);
        assert_eq!(f, [r#"{"a":"x\"}"}"#]);
        // `items: null` streams nothing, as the one reader does, and keeps the object's place.
        assert_eq!(frames(r#"{"items":null} {"a":1}"#).0, [r#"{"a":1}"#]);
    }

    #[test]
    fn anything_unexpected_stops_after_what_was_handed_over() {
        for (input, handed) in [
            (r#"{"a":1} x"#, 1),
            (r#"[{"a":1},]"#, 1),
            (r#"[{"a":1}"#, 1),
            (r#"{"items":[{"a":1}],"kind":{]}"#, 1),
            // Brackets are only counted: this frame is `{"kind":{]}`, whose parse fails.
            (r#"{"kind":{]},"items":[{"a":1}]}"#, 1),
            // An `items` near its start has the object walked member by member, which stops at
            // the `}` that closes `[1`: nothing handed over.
            (r#"{"kind":[1}],"items":[{"a":1}]}"#, 0),
            (r#"{"items":{"a":1}}"#, 0),
            (r#"{"items":nul}"#, 0),
            (r#"{"items":nxll} {"a":1}"#, 0),
            // A repeated key of a List is the one reader's to refuse.
            (r#"{"items":[{"a":1}],"items":[{"b":2}]}"#, 1),
            (r#"{"items":null,"items":[{"a":1}]}"#, 0),
            (r#"{"items":[{"a":1}],"it\u0065ms":[]}"#, 1),
            (r#"{"kind":"List","kind":"List","items":[{"a":1}]}"#, 0),
            (r#"{"items":[{"a":1}],"kind":"x","k\u0069nd":"y"}"#, 1),
            ("7", 0),
            ("", 0),
            ("[]", 0),
        ] {
            assert_eq!(frames(input).1, Framed::Stopped(handed), "{input}");
        }
        // A top-level object without `items`, looked at whole, is handed over whatever its
        // syntax: its parse fails where it is broken.
        for broken in [r#"{"a":1,}"#, r#"{"a" 1}"#] {
            assert_eq!(frames(broken), (vec![broken.to_string()], Framed::Complete));
            assert!(value_from_slice(broken.as_bytes()).is_err());
        }
        let deep = format!("[{}{}]", "[".repeat(MAX_DEPTH), "]".repeat(MAX_DEPTH));
        assert_eq!(frames(&deep).1, Framed::Stopped(0));
        let fine = format!(
            "[{}{}]",
            "[".repeat(MAX_DEPTH - 1),
            "]".repeat(MAX_DEPTH - 1)
        );
        assert_eq!(frames(&fine).1, Framed::Complete);
    }

    #[test]
    fn frames_span_chunk_boundaries() {
        let big = "x".repeat(CHUNK + 17);
        let input = format!(r#"{{"items":[{{"a":"{big}"}},{{"b":"\"{big}"}}]}}"#);
        let (f, end) = frames(&input);
        assert_eq!(end, Framed::Complete);
        assert_eq!(f.len(), 2);
        assert_eq!(f[1].len(), big.len() + 10);
    }

    /// A backslash or quote on either side of a read's end, inside nested objects: the first
    /// read's, and the second's, into the buffer grown once.
    #[test]
    fn escapes_at_chunk_ends() {
        for (edge, shift) in [FIRST_CHUNK, 3 * FIRST_CHUNK]
            .into_iter()
            .flat_map(|edge| (0..24).map(move |shift| (edge, shift)))
        {
            let pad = "y".repeat(edge - 40 + shift);
            let item = format!(r#"{{"a":{{"b":["{pad}\\\"\\\\x\""]}},"c":"]}}"}}"#);
            let input = format!(r#"{{"items":[{item},{item}]}}"#);
            let want: Value = serde_json::from_str(&item).unwrap();
            let (f, end) = frames(&input);
            assert_eq!(end, Framed::Complete, "{edge} {shift}");
            assert_eq!(f.len(), 2, "{edge} {shift}");
            for frame in f {
                assert_eq!(
                    serde_json::from_str::<Value>(&frame).unwrap(),
                    want,
                    "{edge} {shift}"
                );
            }
        }
    }

    #[test]
    fn the_caller_can_stop_it() {
        let mut n = 0;
        let framed = frame_objects(&b"{} {} {}"[..], &mut |_| {
            n += 1;
            n < 2
        })
        .unwrap();
        assert_eq!(framed, Framed::Stopped(2));
    }

    proptest::proptest! {
        /// The block scan ends, refuses and carries its state as the byte scan does, however
        /// the input is cut into chunks: on any bytes, escapes and stray backslashes included.
        #[test]
        fn blocks_follow_nesting_as_bytes_do(
            body in proptest::collection::vec(
                proptest::prop_oneof![
                    20 => proptest::strategy::Just(b'a'),
                    3 => proptest::strategy::Just(b'"'),
                    3 => proptest::sample::select(b"{[".to_vec()),
                    2 => proptest::sample::select(b"}]".to_vec()),
                    3 => proptest::sample::select(b" ,:".to_vec()),
                    1 => proptest::strategy::Just(b'\\'),
                    1 => proptest::arbitrary::any::<u8>(),
                ],
                0..400,
            ),
            escapes in proptest::arbitrary::any::<bool>(),
            cut in 0usize..400,
            most in 1usize..12,
            start in 0usize..4,
        ) {
            // Opened a few levels deep, so that whole blocks can be passed on their counts.
            let mut bytes = vec![b'{'];
            bytes.extend(std::iter::repeat_n(b'[', start));
            // Half the inputs without a backslash, so that whole blocks take the mask path.
            bytes.extend(body.into_iter().filter(|&b| escapes || b != b'\\'));
            let fresh = Nesting { level: 0, in_string: false, escaped: false, most };
            let mut by_bytes = fresh.clone();
            let want = by_bytes.bytewise(&bytes);
            let mut by_blocks = fresh.clone();
            proptest::prop_assert_eq!(&by_blocks.scan(&bytes), &want);
            if want == Scanned::More {
                proptest::prop_assert_eq!(&by_blocks, &by_bytes);
            }
            // Whichever path this CPU takes, the baseline's masks with and without the
            // bracket counts do the same.
            for counted in [false, true] {
                let mut baseline = fresh.clone();
                proptest::prop_assert_eq!(&baseline.scan_with(&bytes, structure, counted), &want);
                if want == Scanned::More {
                    proptest::prop_assert_eq!(&baseline, &by_bytes);
                }
            }
            // In two chunks.
            let cut = cut.min(bytes.len());
            let mut chunked = fresh;
            let got = match chunked.scan(&bytes[..cut]) {
                Scanned::More => match chunked.scan(&bytes[cut..]) {
                    Scanned::End(i) => Scanned::End(cut + i),
                    other => other,
                },
                done => done,
            };
            proptest::prop_assert_eq!(&got, &want);
            if want == Scanned::More {
                proptest::prop_assert_eq!(&chunked, &by_bytes);
            }
        }
    }

    #[test]
    fn a_block_of_pod_json_is_followed_without_the_byte_scan() {
        // 200 bytes with no backslash, closing at the end: found in blocks.
        let inner = format!(r#"{{"a":["{}",{{"b":"]}}"}}]}}"#, "x".repeat(170));
        let mut n = Nesting {
            level: 0,
            in_string: false,
            escaped: false,
            most: 5,
        };
        assert_eq!(n.scan(inner.as_bytes()), Scanned::End(inner.len()));
        let deep = "[".repeat(80);
        let mut n = Nesting {
            level: 0,
            in_string: false,
            escaped: false,
            most: 70,
        };
        assert_eq!(n.scan(deep.as_bytes()), Scanned::TooDeep);
    }
}
