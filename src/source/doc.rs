//! One JSON value parsed into a flat tape: what `hash` workers parse a frame into.
//!
//! A `serde_json::Value` costs an allocation and a hash-map insert per object, and serde_json
//! checks each string's UTF-8 on its own, which made parsing most of the time `hash` spent per
//! container. A [`Doc`] keeps the frame's bytes and one vector of nodes for the whole value, in
//! document order, each written once: a string is a span of the bytes (or of a side buffer when
//! it had escapes), a list or object knows how many members it has and where its last one ends.
//! It is read through [`Json`], as a `Value` is.
//!
//! [`Doc::parse`] accepts a part of JSON and refuses the rest; [`Object::frame`] hands what it
//! refuses to the one reader's `Value` parser ([`crate::source::parallel::Parse`]), so a frame
//! always ends up exactly as that parser has it. What it accepts, it reads as a `Value` holds it
//! (tested against `Value` on random JSON below). It refuses:
//! * an object with a repeated key (which the `Value` parser refuses too, with its place:
//!   [`crate::kubelet::once_keys`]);
//! * a fraction, an exponent, `-0`, or an integer above `u64::MAX` or below `i64::MIN`
//!   (serde_json makes those `f64`);
//! * a lone `\u` surrogate, a control byte in a string, a bad escape, nesting deeper than
//!   [`MAX_DEPTH`], a frame that is not UTF-8, and anything that is not JSON.
//! * a string with an escape in a quantity's place, whose raw text the `Value` parser keeps
//!   for the decoder ([`crate::kubelet::spelling`]).

use serde_json::{Number, Value};

use crate::kubelet::bytescan::{find_string_stop, plain_integer};
use crate::kubelet::json::{Json, JsonValue};
use crate::kubelet::schema::key_words;
use crate::kubelet::spelling::Place;
use crate::source::parallel::Parse;

/// One object of an input as `hash` has it: a [`Doc`] parsed from its frame, or the `Value` the
/// one reader parsed where the input is not framed (YAML, a directory, one thread, after a
/// frame that did not parse).
#[derive(Debug)]
pub enum Object {
    Doc(Doc),
    Value(Value),
}

impl Parse for Object {
    /// A [`Doc`], or what serde_json makes of a frame the `Doc` parser refuses.
    fn frame(frame: Vec<u8>) -> Option<Object> {
        match Doc::parse(frame) {
            Ok(doc) => Some(Object::Doc(doc)),
            Err(frame) => Value::frame(frame).map(Object::Value),
        }
    }

    fn value(value: Value) -> Object {
        Object::Value(value)
    }
}

/// An object as a worker is handed it before it is parsed: its frame, which the worker parses
/// (or reads what it needs from without parsing it, see [`crate::source::name_image`]), or a
/// value the one reader parsed.
pub enum Unparsed {
    Frame(Vec<u8>),
    Value(Value),
}

impl Parse for Unparsed {
    /// Every frame: the worker parses it with [`Unparsed::parse`], and stops at one that does
    /// not parse, as the reader stops for [`Object::frame`].
    fn frame(frame: Vec<u8>) -> Option<Unparsed> {
        Some(Unparsed::Frame(frame))
    }

    fn value(value: Value) -> Unparsed {
        Unparsed::Value(value)
    }
}

impl Unparsed {
    /// The object parsed: `None` for a frame [`Object::frame`] refuses.
    pub fn parse(self) -> Option<Object> {
        match self {
            Unparsed::Frame(frame) => Object::frame(frame),
            Unparsed::Value(value) => Some(Object::Value(value)),
        }
    }
}

/// A parsed JSON value, owning its bytes.
#[derive(Debug)]
pub struct Doc {
    /// The frame, valid UTF-8 once parsed.
    text: String,
    /// Strings that had escapes, unescaped.
    unescaped: String,
    /// Every value in document order, the whole value first.
    nodes: Vec<Node>,
    /// `keys[i]` is the key of `nodes[i]` when that is an object member.
    keys: Vec<Span>,
}

#[derive(Debug, Clone)]
enum Node {
    Null,
    Bool(bool),
    Number(Number),
    String(Span),
    /// `len` members from the next node on; `end` is the index after the last one's nodes.
    Array {
        len: u32,
        end: u32,
    },
    Object {
        len: u32,
        end: u32,
    },
}

/// A string: a range of the frame, or of `unescaped`. Packed in one word (start, then length
/// below the flag bit) so that a parse step hands it over in a register: as three fields it
/// went through the stack, and loading it back stalled on the narrower stores just made
/// (a third of the parser's time, perf).
#[derive(Debug, Clone, Copy)]
struct Span(u64);

/// `unescaped` in a [`Span`]'s word; the length is below it, which [`MAX_FRAME`] allows.
const UNESCAPED: u64 = 1 << 31;

/// Frames must be shorter than this for their spans to pack.
const MAX_FRAME: usize = 1 << 31;

impl Span {
    const EMPTY: Span = Span(0);

    /// `start..start + len` of the frame, or of `unescaped`; both below [`MAX_FRAME`] (the
    /// unescaped text of a frame is never longer than the frame).
    #[inline]
    fn new(start: usize, len: usize, unescaped: bool) -> Span {
        debug_assert!(start < MAX_FRAME && len < MAX_FRAME);
        Span((start as u64) << 32 | len as u64 | if unescaped { UNESCAPED } else { 0 })
    }

    fn unescaped(self) -> bool {
        self.0 & UNESCAPED != 0
    }

    /// Its bytes' range in the frame, or in `unescaped`.
    fn range(self) -> std::ops::Range<usize> {
        let start = (self.0 >> 32) as usize;
        start..start + (self.0 & (UNESCAPED - 1)) as usize
    }
}

impl Doc {
    /// Parses one JSON value (whitespace around it allowed) of the part of JSON it reads (see
    /// the module's documentation). What it refuses, and a frame of 2 GiB or more, it hands
    /// back.
    pub fn parse(frame: Vec<u8>) -> Result<Doc, Vec<u8>> {
        if frame.len() >= MAX_FRAME {
            return Err(frame);
        }
        let text = String::from_utf8(frame).map_err(|e| e.into_bytes())?;
        let mut p = Parser {
            bytes: text.as_bytes(),
            at: 0,
            unescaped: String::new(),
            // About one value per 12 bytes of a pod's JSON; a frame that is one long string
            // gets no more than a pod's worth reserved.
            nodes: Vec::with_capacity((text.len() / 12).min(CAPACITY)),
            keys: Vec::with_capacity((text.len() / 12).min(CAPACITY)),
            // The keys of the objects open at once: a pod's record has a few dozen (34 at most
            // in the golden corpus); growing from nothing reallocated five times a parse.
            open_keys: Vec::with_capacity(64),
        };
        p.skip_space();
        let parsed = p.value(0, Span::EMPTY);
        p.skip_space();
        if parsed.is_none() || p.at != p.bytes.len() {
            return Err(text.into_bytes());
        }
        let Parser {
            unescaped,
            nodes,
            keys,
            ..
        } = p;
        let doc = Doc {
            text,
            unescaped,
            nodes,
            keys,
        };
        if !doc.unescaped.is_empty() && doc.escaped_quantity(0, Place::Plain) {
            return Err(doc.text.into_bytes());
        }
        Ok(doc)
    }

    /// Whether the value at node `at`, in `place`, holds a string with an escape in a
    /// quantity's place: the decoder must see its raw text, which the `Value` parser keeps
    /// ([`crate::kubelet::spelling`]).
    fn escaped_quantity(&self, at: u32, place: Place) -> bool {
        let members = |len| self.members(at, len);
        match self.nodes.get(at as usize) {
            Some(Node::String(s)) => place == Place::Quantity && s.unescaped(),
            Some(&Node::Array { len, .. }) => {
                members(len).any(|m| self.escaped_quantity(m.at, Place::Plain))
            }
            Some(&Node::Object { len, .. }) => Entries(members(len)).any(|(key, m)| {
                let object = matches!(self.nodes.get(m.at as usize), Some(Node::Object { .. }));
                self.escaped_quantity(m.at, place.of_member(key, object))
            }),
            _ => false,
        }
    }

    /// The value, to read.
    pub fn root(&self) -> DocRef<'_> {
        DocRef { doc: self, at: 0 }
    }

    fn str(&self, s: Span) -> &str {
        let from = if s.unescaped() {
            &self.unescaped
        } else {
            &self.text
        };
        // Spans are made at ASCII quotes and backslashes of UTF-8 text, so on boundaries.
        from.get(s.range()).unwrap_or_default()
    }

    /// The `len` members of the list or object at node `at`.
    #[inline]
    fn members(&self, at: u32, len: u32) -> Members<'_> {
        Members {
            doc: self,
            next: at + 1,
            left: len,
        }
    }

    /// The index after node `at` and its members.
    fn after(&self, at: u32) -> u32 {
        match self.nodes.get(at as usize) {
            Some(Node::Array { end, .. } | Node::Object { end, .. }) => *end,
            _ => at + 1,
        }
    }
}

/// A value of a [`Doc`].
#[derive(Debug, Clone, Copy)]
pub struct DocRef<'a> {
    doc: &'a Doc,
    at: u32,
}

/// The members of a list or object, in order.
pub struct Members<'a> {
    doc: &'a Doc,
    next: u32,
    left: u32,
}

impl<'a> Iterator for Members<'a> {
    type Item = DocRef<'a>;

    fn next(&mut self) -> Option<DocRef<'a>> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let at = self.next;
        self.next = self.doc.after(at);
        Some(DocRef { doc: self.doc, at })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left as usize, Some(self.left as usize))
    }
}

/// The members of an object, with their keys.
pub struct Entries<'a>(Members<'a>);

impl<'a> Iterator for Entries<'a> {
    type Item = (&'a str, DocRef<'a>);

    fn next(&mut self) -> Option<Self::Item> {
        let member = self.0.next()?;
        let key = member.doc.keys.get(member.at as usize).copied();
        Some((member.doc.str(key.unwrap_or(Span::EMPTY)), member))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.0.size_hint()
    }
}

impl<'a> Json<'a> for DocRef<'a> {
    type Items = Members<'a>;
    type Entries = Entries<'a>;

    #[inline]
    fn view(self) -> JsonValue<'a, Self> {
        let doc = self.doc;
        let members = |len| doc.members(self.at, len);
        match doc.nodes.get(self.at as usize) {
            None | Some(Node::Null) => JsonValue::Null,
            Some(Node::Bool(b)) => JsonValue::Bool(*b),
            Some(Node::Number(n)) => JsonValue::Number(n),
            Some(Node::String(s)) => JsonValue::String(doc.str(*s)),
            Some(&Node::Array { len, .. }) => JsonValue::Array(len as usize, members(len)),
            Some(&Node::Object { len, .. }) => {
                JsonValue::Object(len as usize, Entries(members(len)))
            }
        }
    }

    fn entry(self, key: &str) -> Option<(&'a str, Self)> {
        match self.view() {
            JsonValue::Object(_, mut entries) => entries.find(|(k, _)| *k == key),
            _ => None,
        }
    }

    fn is_list_or_object(self) -> bool {
        matches!(
            self.doc.nodes.get(self.at as usize),
            Some(Node::Array { .. } | Node::Object { .. })
        )
    }

    fn address(self) -> usize {
        self.doc.nodes.as_ptr().wrapping_add(self.at as usize) as usize
    }
}

/// A key's bit (0 – 255) in an object's filter of the keys it has: from its length and its
/// first and last bytes.
#[inline]
fn filter_bit(key: &[u8]) -> usize {
    let (head, tail) = key_words(key);
    let h = head ^ tail.rotate_left(29) ^ key.len() as u64;
    (h.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 56) as usize
}

/// The most nodes a parse reserves room for before it has seen them.
const CAPACITY: usize = 4096;

/// How deep lists and objects may nest in a [`Doc`] (serde_json allows 128; deeper frames go
/// to it).
pub const MAX_DEPTH: usize = 100;

/// Reads one frame onto a tape, each node pushed once, in document order. The keys of the
/// objects being read wait on `open_keys`, to find a repeated one. Every method returns `None`
/// for what it refuses.
struct Parser<'f> {
    bytes: &'f [u8],
    at: usize,
    unescaped: String,
    nodes: Vec<Node>,
    keys: Vec<Span>,
    open_keys: Vec<Span>,
}

impl Parser<'_> {
    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.at).copied()
    }

    /// JSON whitespace: space, tab, line feed, carriage return.
    fn skip_space(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.peek() {
            self.at += 1;
        }
    }

    fn expect(&mut self, word: &[u8]) -> Option<()> {
        let end = self.at + word.len();
        (self.bytes.get(self.at..end)? == word).then(|| self.at = end)
    }

    fn push(&mut self, node: Node, key: Span) {
        self.nodes.push(node);
        self.keys.push(key);
    }

    /// One value, with its key when it is an object member.
    fn value(&mut self, depth: usize, key: Span) -> Option<()> {
        let node = match self.peek()? {
            b'{' if depth < MAX_DEPTH => return self.object(depth + 1, key),
            b'[' if depth < MAX_DEPTH => return self.array(depth + 1, key),
            b'"' => Node::String(self.string()?),
            b't' => self.expect(b"true").map(|()| Node::Bool(true))?,
            b'f' => self.expect(b"false").map(|()| Node::Bool(false))?,
            b'n' => self.expect(b"null").map(|()| Node::Null)?,
            b'-' | b'0'..=b'9' => self.number()?,
            _ => return None,
        };
        self.push(node, key);
        Some(())
    }

    /// An integer as serde_json keeps it: `u64` when not negative, `i64` when negative.
    fn number(&mut self) -> Option<Node> {
        let (negative, n, len) = plain_integer(self.bytes.get(self.at..)?)?;
        self.at += len;
        if !negative {
            return Some(Node::Number(n.into()));
        }
        // serde_json makes `-0` the float -0.0.
        let i = 0i64.checked_sub_unsigned(n).filter(|&i| i != 0)?;
        Some(Node::Number(i.into()))
    }

    /// A string at its opening quote, as a span of the frame, or of `unescaped` if it had
    /// escapes.
    #[inline(always)]
    fn string(&mut self) -> Option<Span> {
        self.at += 1;
        let start = self.at;
        let stop = start + find_string_stop(self.bytes.get(start..)?)?;
        self.at = stop + 1;
        match self.bytes[stop] {
            b'"' => Some(Span::new(start, stop - start, false)),
            b'\\' => self.escaped(start, stop),
            _ => None,
        }
    }

    /// The rest of a string whose plain run `start..stop` ended at a backslash; `self.at` is
    /// just after it.
    #[cold]
    fn escaped(&mut self, start: usize, stop: usize) -> Option<Span> {
        let out_start = self.unescaped.len();
        let mut run = start..stop;
        loop {
            // The frame is UTF-8 and runs end at ASCII bytes, so each run is whole characters.
            self.unescaped
                .push_str(std::str::from_utf8(self.bytes.get(run)?).ok()?);
            let letter = self.peek()?;
            self.at += 1;
            let c = match letter {
                b'"' => '"',
                b'\\' => '\\',
                b'/' => '/',
                b'b' => '\u{8}',
                b'f' => '\u{c}',
                b'n' => '\n',
                b'r' => '\r',
                b't' => '\t',
                b'u' => match self.hex4()? {
                    hi @ 0xD800..=0xDBFF => {
                        self.expect(b"\\u")?;
                        let lo = self.hex4()?;
                        if !(0xDC00..=0xDFFF).contains(&lo) {
                            return None;
                        }
                        char::from_u32(0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00))?
                    }
                    // A lone surrogate is refused (serde_json refuses it too).
                    code => char::from_u32(code)?,
                },
                _ => return None,
            };
            self.unescaped.push(c);
            let from = self.at;
            let stop = from + find_string_stop(self.bytes.get(from..)?)?;
            self.at = stop + 1;
            run = from..stop;
            match self.bytes[stop] {
                b'\\' => {}
                b'"' => {
                    self.unescaped
                        .push_str(std::str::from_utf8(self.bytes.get(run)?).ok()?);
                    let len = self.unescaped.len() - out_start;
                    return Some(Span::new(out_start, len, true));
                }
                _ => return None,
            }
        }
    }

    /// Four hex digits at `self.at`.
    fn hex4(&mut self) -> Option<u32> {
        let digits = self.bytes.get(self.at..self.at + 4)?;
        let mut n = 0;
        for &d in digits {
            n = n * 16 + char::from(d).to_digit(16)?;
        }
        self.at += 4;
        Some(n)
    }

    /// Where the list or object opened at `me` ends, once its `len` members are read.
    fn close(&mut self, me: usize, len: u32) -> Option<()> {
        let end = u32::try_from(self.nodes.len()).ok()?;
        match &mut self.nodes[me] {
            Node::Array { len: l, end: e } | Node::Object { len: l, end: e } => {
                (*l, *e) = (len, end);
            }
            _ => {}
        }
        Some(())
    }

    /// Just inside a list or object: whether a member follows (else steps over `close`).
    fn first_member(&mut self, close: u8) -> Option<bool> {
        self.skip_space();
        if self.peek()? == close {
            self.at += 1;
            return Some(false);
        }
        Some(true)
    }

    /// After a member: whether another follows (a comma), or the list or object ends (`close`).
    fn next_member(&mut self, close: u8) -> Option<bool> {
        self.skip_space();
        let b = self.peek()?;
        self.at += 1;
        match b {
            b',' => {
                self.skip_space();
                Some(true)
            }
            _ if b == close => Some(false),
            _ => None,
        }
    }

    fn array(&mut self, depth: usize, key: Span) -> Option<()> {
        self.at += 1;
        let me = self.nodes.len();
        self.push(Node::Array { len: 0, end: 0 }, key);
        let mut len = 0u32;
        let mut more = self.first_member(b']')?;
        while more {
            self.value(depth, Span::EMPTY)?;
            len += 1;
            more = self.next_member(b']')?;
        }
        self.close(me, len)
    }

    fn object(&mut self, depth: usize, key: Span) -> Option<()> {
        self.at += 1;
        let me = self.nodes.len();
        self.push(Node::Object { len: 0, end: 0 }, key);
        let mut len = 0u32;
        let open = self.open_keys.len();
        // A 256-bit filter of the keys seen in this object: a key is looked for among them
        // only when its bit is set.
        let mut seen = [0u64; 4];
        let mut more = self.first_member(b'}')?;
        while more {
            if self.peek()? != b'"' {
                return None;
            }
            let key = self.string()?;
            let k = self.key(key);
            let bit = filter_bit(k);
            let (word, mask) = (bit / 64, 1u64 << (bit % 64));
            if seen[word] & mask != 0 && self.open_keys[open..].iter().any(|&o| self.key(o) == k) {
                // A repeated key: left to serde_json.
                return None;
            }
            seen[word] |= mask;
            self.open_keys.push(key);
            self.skip_space();
            self.expect(b":")?;
            self.skip_space();
            self.value(depth, key)?;
            len += 1;
            more = self.next_member(b'}')?;
        }
        self.open_keys.truncate(open);
        self.close(me, len)
    }

    fn key(&self, s: Span) -> &[u8] {
        let from = if s.unescaped() {
            self.unescaped.as_bytes()
        } else {
            self.bytes
        };
        from.get(s.range()).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kubelet::json::to_value;
    use crate::kubelet::spelling::pod_value_from_slice;
    use proptest::prelude::*;

    /// The compact JSON of what a view shows, entry by entry as it shows them (so a key shown
    /// twice is written twice, where a `Value` would keep one).
    fn written<'a>(j: impl Json<'a>) -> String {
        match j.view() {
            JsonValue::Array(_, items) => {
                format!("[{}]", items.map(written).collect::<Vec<_>>().join(","))
            }
            JsonValue::Object(_, entries) => {
                let members: Vec<String> = entries
                    .map(|(k, v)| format!("{}:{}", Value::from(k), written(v)))
                    .collect();
                format!("{{{}}}", members.join(","))
            }
            _ => to_value(j).to_string(),
        }
    }

    /// What the one reader's `Value` makes of `text` ([`pod_value_from_slice`]), and what an
    /// [`Object`] shows of it, both in order; and whether the `Doc` parser read it.
    fn both(text: &str) -> (Option<String>, Option<String>, bool) {
        let value = pod_value_from_slice(text.as_bytes()).ok();
        let object = Object::frame(text.as_bytes().to_vec());
        let shown = object.as_ref().map(|o| match o {
            Object::Doc(d) => written(d.root()),
            Object::Value(v) => written(v),
        });
        // A `Value` read through the view shows itself.
        if let Some(v) = &value {
            assert_eq!(written(v), v.to_string());
        }
        let by_doc = matches!(object, Some(Object::Doc(_)));
        (value.map(|v| v.to_string()), shown, by_doc)
    }

    #[test]
    fn a_span_packs_every_start_and_length_a_frame_allows() {
        let top = MAX_FRAME - 1;
        for (start, len) in [(0, 0), (1, 0), (0, top), (top, 0), (top, top), (12345, 678)] {
            for unescaped in [false, true] {
                let s = Span::new(start, len, unescaped);
                assert_eq!((s.range(), s.unescaped()), (start..start + len, unescaped));
            }
        }
        assert_eq!(Span::EMPTY.range(), 0..0);
        assert!(!Span::EMPTY.unescaped());
    }

    #[test]
    fn it_reads_what_a_value_holds() {
        for text in [
            r#"{"name":"a","image":"b","args":["x","y\n\u00e9"],"n":[1,-2,0,-9223372036854775808,18446744073709551615]}"#,
            r#"{"b":{"x":1},"a":[],"c":{"y":2},"\u0064":null,"é":{"b":1}}"#,
            r#"[[],{},[[{}]],"",null,true,false]"#,
            r#"  "top"  "#,
            r#"{"s":"\ud83d\ude00 \" \\ \/ \b \f \r \t \u0000 x"}"#,
            "{\"k\u{e9}\":\"\u{1f600}\"}",
            " {\n\t\"a\" : [ 1 , 2 ] \r} ",
        ] {
            let (value, shown, by_doc) = both(text);
            assert!(value.is_some(), "{text}");
            assert!(by_doc, "{text}");
            assert_eq!(shown, value, "{text}");
        }
    }

    #[test]
    fn what_it_refuses_serde_json_reads() {
        for text in [
            "[1.5]",
            "[1e3]",
            "[1E-3]",
            "[-0]",
            "[18446744073709551616]",
            "[-9223372036854775809]",
            &format!(
                "{}1{}",
                "[".repeat(MAX_DEPTH + 1),
                "]".repeat(MAX_DEPTH + 1)
            ),
        ] {
            let (value, shown, by_doc) = both(text);
            assert!(value.is_some(), "{text}");
            assert!(!by_doc, "{text}");
            assert_eq!(shown, value, "{text}");
        }
        // A repeated key: the `Doc` parser refuses it, and so does the one reader's `Value`
        // parser, so the frame is left to the one reader, which names the key.
        for text in [
            r#"{"a":1,"b":2,"a":3}"#,
            r#"{"b":{"x":1},"a":[],"b":{"y":2},"\u0062":null}"#,
            r#"{"long-key-one":1,"long-key-two":2,"long-key-one":3,"q":4}"#,
            r#"[{"a":[1,{"k":1,"k":2}]}]"#,
        ] {
            assert!(Doc::parse(text.as_bytes().to_vec()).is_err(), "{text}");
            assert_eq!(both(text), (None, None, false), "{text}");
        }
    }

    #[test]
    fn it_refuses_what_a_value_refuses() {
        for text in [
            "",
            "{",
            r#"{"a":1,}"#,
            "[1,]",
            r#"{"a":1} {"b":2}"#,
            "[1,2",
            r#"{"a":"\x01"}"#,
            "{\"a\":\"\u{1}\"}",
            r#"{"a":1e999}"#,
            r#"["\ud800"]"#,
            r#"["\udc00"]"#,
            r#"["\ud800\u0041"]"#,
            r#"["\u12"]"#,
            r#"["\q"]"#,
            "[01]",
            "[-]",
            "[tru]",
            "[nul]",
            "{\"a\" 1}",
            "{1:2}",
            &"[".repeat(200),
        ] {
            let (value, shown, _) = both(text);
            assert_eq!(value, None, "{text:?}");
            assert_eq!(shown, None, "{text:?}");
        }
        let mut not_utf8 = br#"{"a":""#.to_vec();
        not_utf8.extend([0xff, b'"', b'}']);
        assert!(serde_json::from_slice::<Value>(&not_utf8).is_err());
        assert_eq!(Doc::parse(not_utf8.clone()).err(), Some(not_utf8.clone()));
        assert!(Object::frame(not_utf8).is_none());
    }

    #[test]
    fn every_golden_record_is_read_by_the_doc_parser() {
        let corpus = include_str!("../../testdata/golden/public.jsonl");
        for line in corpus.lines() {
            let (value, shown, by_doc) = both(line);
            assert!(by_doc, "{line}");
            assert_eq!(shown, value);
        }
    }

    #[test]
    fn addresses_tell_values_apart() {
        let doc = Doc::parse(br#"{"a":{"x":1},"b":{"x":1}}"#.to_vec()).unwrap();
        let (a, b) = (
            doc.root().field("a").unwrap(),
            doc.root().field("b").unwrap(),
        );
        assert_ne!(a.address(), b.address());
        assert_eq!(a.address(), doc.root().field("a").unwrap().address());
        assert_ne!(doc.root().address(), a.address());
    }

    /// JSON text with repeated keys (short and long), escapes, numbers of every kind, nesting,
    /// and now and then a byte that breaks it.
    fn json_text() -> impl Strategy<Value = String> {
        let key = prop::sample::select(vec![
            "a",
            "b",
            "ab",
            "name",
            "image",
            "n\\u0061me",
            "\\\"",
            "é",
            "k-long-enough",
        ]);
        let leaf = prop_oneof![
            2 => Just("null".to_string()),
            2 => Just("true".to_string()),
            4 => any::<i64>().prop_map(|n| n.to_string()),
            2 => any::<u64>().prop_map(|n| n.to_string()),
            1 => any::<f64>().prop_map(|f| format!("{f:e}")),
            1 => any::<f64>().prop_map(|f| format!("{f}")),
            1 => prop::sample::select(vec!["-0", "0", "01", "-", "1.", ".5", "9223372036854775808",
                "-9223372036854775808", "18446744073709551616", "1e-400", "1e999"]).prop_map(String::from),
            6 => "[a-z/ é]{0,6}".prop_map(|s| format!("\"{s}\"")),
            1 => "[a-z\\\\\"/ é\u{1}]{0,6}".prop_map(|s| format!("\"{s}\"")),
            2 => prop::collection::vec(prop::sample::select(vec![
                "\\n", "\\u00e9", "\\ud83d\\ude00", "\\ud800", "\\udc00x", "\\u00", "\\x", "ab", "\\\\",
                "\\\"", "\\t", "\\/", "\\u0041", "\\uD83D\\uDE00",
            ]), 0..3).prop_map(|v| format!("\"{}\"", v.concat())),
        ];
        let value = leaf.prop_recursive(4, 48, 6, move |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6)
                    .prop_map(|v| format!("[{}]", v.join(","))),
                prop::collection::vec((key.clone(), inner), 0..7).prop_map(|v| {
                    let members: Vec<String> =
                        v.iter().map(|(k, v)| format!("\"{k}\":{v}")).collect();
                    format!("{{{}}}", members.join(","))
                }),
            ]
        });
        (
            value,
            prop::option::weighted(
                0.2,
                (
                    0usize..64,
                    prop::sample::select(vec!["}", ",", "\"", " ", "\u{0}"]),
                ),
            ),
        )
            .prop_map(|(mut text, cut)| {
                if let Some((at, with)) = cut {
                    let mut at = at.min(text.len());
                    while !text.is_char_boundary(at) {
                        at -= 1;
                    }
                    text.insert_str(at, with);
                }
                text
            })
    }

    /// The random texts reach both the `Doc` parser and the fallback, and some are not JSON.
    #[test]
    fn random_texts_reach_every_path() {
        use proptest::strategy::ValueTree;
        let mut runner = proptest::test_runner::TestRunner::deterministic();
        let mut counts = [0usize; 3];
        for _ in 0..1000 {
            let text = json_text().new_tree(&mut runner).unwrap().current();
            let (value, _, by_doc) = both(&text);
            counts[match (value.is_some(), by_doc) {
                (true, true) => 0,
                (true, false) => 1,
                (false, _) => 2,
            }] += 1;
        }
        assert!(counts.iter().all(|&n| n >= 100), "{counts:?}");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]
        #[test]
        fn a_doc_is_what_a_value_is(text in json_text()) {
            let (value, shown, _) = both(&text);
            prop_assert_eq!(shown, value, "{}", text);
        }
    }
}
