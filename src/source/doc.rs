//! One JSON value parsed into a flat tape: what `hash` workers parse a frame into.
//!
//! A `serde_json::Value` costs an allocation and a hash-map insert per object, and serde_json
//! checks each string's UTF-8 on its own, which made parsing most of the time `hash` spent per
//! container. A [`Doc`] keeps the frame's bytes and one vector of nodes for the whole value: a
//! string is a span of the bytes (or of a side buffer when it had escapes), and the members of a
//! list or object sit next to each other on the tape. It is read through [`Json`], as a `Value`
//! is.
//!
//! [`Doc::parse`] accepts a part of JSON and refuses the rest; [`Object::frame`] hands what it
//! refuses to serde_json, so a frame always ends up exactly as `serde_json::from_slice::<Value>`
//! has it. What it accepts, it reads as a `Value` holds it (tested against `Value` on random
//! JSON below):
//! * an object keeps each key once, at its first position, with its last value (the
//!   `preserve_order` map);
//! * integers are kept when serde_json keeps them as integers: from 0 to `u64::MAX`, and
//!   negative ones down to `i64::MIN`; a fraction, an exponent, `-0` or a larger integer is
//!   refused (serde_json makes those `f64`);
//! * string escapes are decoded, a `\u` surrogate only as a whole pair; a lone surrogate,
//!   a control byte, a bad escape, or nesting deeper than [`MAX_DEPTH`] is refused;
//! * the whole frame must be UTF-8, checked once.

use serde_json::{Number, Value};

use crate::kubelet::json::{Json, JsonValue};
use crate::source::bytescan::find_string_stop;
use crate::source::parallel::Parse;

/// One object of an input as `hash` has it: a [`Doc`] parsed from its frame, or the `Value` the
/// one reader parsed where the input is not framed (stdin, YAML, after a frame that did not
/// parse).
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

/// A parsed JSON value, owning its bytes.
#[derive(Debug)]
pub struct Doc {
    /// The frame, valid UTF-8 once parsed.
    text: String,
    /// Strings that had escapes, unescaped.
    unescaped: String,
    /// Every value but the root; the members of one list or object are consecutive.
    nodes: Vec<Node>,
    /// `keys[i]` is the key of `nodes[i]` when that is an object member.
    keys: Vec<Span>,
    root: Node,
}

#[derive(Debug, Clone)]
enum Node {
    Null,
    Bool(bool),
    Number(Number),
    String(Span),
    /// Members at `nodes[start..start + len]`.
    Array {
        start: u32,
        len: u32,
    },
    Object {
        start: u32,
        len: u32,
    },
}

/// A string: a range of the frame, or of `unescaped`.
#[derive(Debug, Clone, Copy)]
struct Span {
    start: u32,
    len: u32,
    unescaped: bool,
}

impl Span {
    const EMPTY: Span = Span {
        start: 0,
        len: 0,
        unescaped: false,
    };
}

impl Doc {
    /// Parses one JSON value (whitespace around it allowed) of the part of JSON it reads (see
    /// the module's documentation). What it refuses, and a frame of 4 GiB or more, it hands
    /// back.
    pub fn parse(frame: Vec<u8>) -> Result<Doc, Vec<u8>> {
        if u32::try_from(frame.len()).is_err() {
            return Err(frame);
        }
        let text = String::from_utf8(frame).map_err(|e| e.into_bytes())?;
        let mut p = Parser {
            bytes: text.as_bytes(),
            at: 0,
            unescaped: String::new(),
            // About one value per 12 bytes of a pod's JSON.
            nodes: Vec::with_capacity(text.len() / 12),
            keys: Vec::with_capacity(text.len() / 12),
            members: Vec::new(),
            member_keys: Vec::new(),
        };
        p.skip_space();
        let root = p.value(0);
        p.skip_space();
        let Some(root) = root.filter(|_| p.at == p.bytes.len()) else {
            return Err(text.into_bytes());
        };
        let Parser {
            unescaped,
            nodes,
            keys,
            ..
        } = p;
        Ok(Doc {
            text,
            unescaped,
            nodes,
            keys,
            root,
        })
    }

    /// The value, to read.
    pub fn root(&self) -> DocRef<'_> {
        DocRef {
            doc: self,
            node: &self.root,
        }
    }

    fn str(&self, s: Span) -> &str {
        let from = if s.unescaped {
            &self.unescaped
        } else {
            &self.text
        };
        let (start, end) = (s.start as usize, s.start as usize + s.len as usize);
        // Spans are made from the `&str`s serde_json handed over, so they are on boundaries.
        from.get(start..end).unwrap_or_default()
    }
}

/// A value of a [`Doc`].
#[derive(Debug, Clone, Copy)]
pub struct DocRef<'a> {
    doc: &'a Doc,
    node: &'a Node,
}

/// The members of a list.
pub struct DocItems<'a> {
    doc: &'a Doc,
    nodes: std::slice::Iter<'a, Node>,
}

impl<'a> Iterator for DocItems<'a> {
    type Item = DocRef<'a>;

    fn next(&mut self) -> Option<DocRef<'a>> {
        let doc = self.doc;
        self.nodes.next().map(|node| DocRef { doc, node })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.nodes.size_hint()
    }
}

/// The members of an object, with their keys.
pub struct DocEntries<'a> {
    doc: &'a Doc,
    members: std::iter::Zip<std::slice::Iter<'a, Span>, std::slice::Iter<'a, Node>>,
}

impl<'a> Iterator for DocEntries<'a> {
    type Item = (&'a str, DocRef<'a>);

    fn next(&mut self) -> Option<Self::Item> {
        let doc = self.doc;
        self.members
            .next()
            .map(|(k, node)| (doc.str(*k), DocRef { doc, node }))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.members.size_hint()
    }
}

impl<'a> DocRef<'a> {
    fn members(self, start: u32, len: u32) -> (&'a [Span], &'a [Node]) {
        let range = start as usize..start as usize + len as usize;
        (
            self.doc.keys.get(range.clone()).unwrap_or_default(),
            self.doc.nodes.get(range).unwrap_or_default(),
        )
    }
}

impl<'a> Json<'a> for DocRef<'a> {
    type Items = DocItems<'a>;
    type Entries = DocEntries<'a>;

    fn view(self) -> JsonValue<'a, Self> {
        match self.node {
            Node::Null => JsonValue::Null,
            Node::Bool(b) => JsonValue::Bool(*b),
            Node::Number(n) => JsonValue::Number(n),
            Node::String(s) => JsonValue::String(self.doc.str(*s)),
            &Node::Array { start, len } => {
                let (_, nodes) = self.members(start, len);
                JsonValue::Array(
                    nodes.len(),
                    DocItems {
                        doc: self.doc,
                        nodes: nodes.iter(),
                    },
                )
            }
            &Node::Object { start, len } => {
                let (keys, nodes) = self.members(start, len);
                JsonValue::Object(
                    nodes.len(),
                    DocEntries {
                        doc: self.doc,
                        members: keys.iter().zip(nodes),
                    },
                )
            }
        }
    }

    fn entry(self, key: &str) -> Option<(&'a str, Self)> {
        match self.view() {
            JsonValue::Object(_, mut entries) => entries.find(|(k, _)| *k == key),
            _ => None,
        }
    }

    fn address(self) -> usize {
        std::ptr::from_ref(self.node) as usize
    }
}

/// A key's bit (0 – 255) in an object's filter of the keys it has: from its length and its
/// first and last eight bytes.
fn filter_bit(key: &[u8]) -> usize {
    let word = |part: &[u8]| {
        let mut w = [0u8; 8];
        w[..part.len()].copy_from_slice(part);
        u64::from_le_bytes(w)
    };
    let n = key.len();
    let (head, tail) = (&key[..n.min(8)], &key[n.saturating_sub(8)..]);
    let h = word(head) ^ word(tail).rotate_left(29) ^ n as u64;
    (h.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 56) as usize
}

/// How deep lists and objects may nest in a [`Doc`] (serde_json allows 128; deeper frames go
/// to it).
pub const MAX_DEPTH: usize = 100;

/// Reads one frame onto a tape. The members of the list or object being read wait on `members`
/// (their keys on `member_keys`) and move to the tape together when it ends, so that they are
/// consecutive there. Every method returns `None` for what it refuses.
struct Parser<'f> {
    bytes: &'f [u8],
    at: usize,
    unescaped: String,
    nodes: Vec<Node>,
    keys: Vec<Span>,
    members: Vec<Node>,
    member_keys: Vec<Span>,
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

    fn value(&mut self, depth: usize) -> Option<Node> {
        match self.peek()? {
            b'{' if depth < MAX_DEPTH => self.object(depth + 1),
            b'[' if depth < MAX_DEPTH => self.array(depth + 1),
            b'"' => self.string().map(Node::String),
            b't' => self.expect(b"true").map(|()| Node::Bool(true)),
            b'f' => self.expect(b"false").map(|()| Node::Bool(false)),
            b'n' => self.expect(b"null").map(|()| Node::Null),
            b'-' | b'0'..=b'9' => self.number(),
            _ => None,
        }
    }

    /// An integer as serde_json keeps it: `u64` when not negative, `i64` when negative.
    fn number(&mut self) -> Option<Node> {
        let negative = self.peek() == Some(b'-');
        if negative {
            self.at += 1;
        }
        let start = self.at;
        let mut n: u64 = 0;
        while let Some(d @ b'0'..=b'9') = self.peek() {
            n = n.checked_mul(10)?.checked_add(u64::from(d - b'0'))?;
            self.at += 1;
        }
        let digits = self.at - start;
        // No digits, a leading zero, or a fraction or exponent next.
        if digits == 0
            || (digits > 1 && self.bytes[start] == b'0')
            || matches!(self.peek(), Some(b'.' | b'e' | b'E'))
        {
            return None;
        }
        if !negative {
            return Some(Node::Number(n.into()));
        }
        // serde_json makes `-0` the float -0.0.
        let i = 0i64.checked_sub_unsigned(n).filter(|&i| i != 0)?;
        Some(Node::Number(i.into()))
    }

    /// A string at its opening quote, as a span of the frame, or of `unescaped` if it had
    /// escapes.
    fn string(&mut self) -> Option<Span> {
        self.at += 1;
        let start = self.at;
        let stop = start + find_string_stop(self.bytes.get(start..)?)?;
        self.at = stop + 1;
        match self.bytes[stop] {
            b'"' => Some(Span {
                start: start as u32,
                len: (stop - start) as u32,
                unescaped: false,
            }),
            b'\\' => self.escaped(start, stop),
            _ => None,
        }
    }

    /// The rest of a string whose plain run `start..stop` ended at a backslash; `self.at` is
    /// just after it.
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
                    return Some(Span {
                        start: u32::try_from(out_start).ok()?,
                        len: u32::try_from(self.unescaped.len() - out_start).ok()?,
                        unescaped: true,
                    });
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

    fn array(&mut self, depth: usize) -> Option<Node> {
        self.at += 1;
        let from = self.members.len();
        self.skip_space();
        if self.peek()? == b']' {
            self.at += 1;
        } else {
            loop {
                let node = self.value(depth)?;
                self.members.push(node);
                self.member_keys.push(Span::EMPTY);
                self.skip_space();
                match self.peek()? {
                    b',' => {
                        self.at += 1;
                        self.skip_space();
                    }
                    b']' => {
                        self.at += 1;
                        break;
                    }
                    _ => return None,
                }
            }
        }
        let (start, len) = self.close(from);
        Some(Node::Array { start, len })
    }

    fn object(&mut self, depth: usize) -> Option<Node> {
        self.at += 1;
        let from = self.members.len();
        // A 256-bit filter of the keys seen in this object: a key is looked for among them
        // only when its bit is set (repeated keys are rare; objects of 30 keys are not).
        let mut seen = [0u64; 4];
        self.skip_space();
        if self.peek()? == b'}' {
            self.at += 1;
        } else {
            loop {
                if self.peek()? != b'"' {
                    return None;
                }
                let key = self.string()?;
                self.skip_space();
                self.expect(b":")?;
                self.skip_space();
                let node = self.value(depth)?;
                let k = self.key(key);
                let bit = filter_bit(k);
                let (word, mask) = (bit / 64, 1u64 << (bit % 64));
                let repeated = if seen[word] & mask != 0 {
                    (from..self.members.len()).find(|&i| self.key(self.member_keys[i]) == k)
                } else {
                    None
                };
                match repeated {
                    // The first position, the last value.
                    Some(i) => self.members[i] = node,
                    None => {
                        seen[word] |= mask;
                        self.members.push(node);
                        self.member_keys.push(key);
                    }
                }
                self.skip_space();
                match self.peek()? {
                    b',' => {
                        self.at += 1;
                        self.skip_space();
                    }
                    b'}' => {
                        self.at += 1;
                        break;
                    }
                    _ => return None,
                }
            }
        }
        let (start, len) = self.close(from);
        Some(Node::Object { start, len })
    }

    fn key(&self, s: Span) -> &[u8] {
        let from = if s.unescaped {
            self.unescaped.as_bytes()
        } else {
            self.bytes
        };
        from.get(s.start as usize..s.start as usize + s.len as usize)
            .unwrap_or_default()
    }

    /// Moves the members from `from` on to the tape; returns where they start and how many.
    fn close(&mut self, from: usize) -> (u32, u32) {
        let start = self.nodes.len() as u32;
        let len = (self.members.len() - from) as u32;
        self.nodes.extend(self.members.drain(from..));
        self.keys.extend(self.member_keys.drain(from..));
        (start, len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kubelet::json::to_value;
    use proptest::prelude::*;

    /// What `Value` makes of `text`, and what an [`Object`] shows of it, both in order; and
    /// whether the `Doc` parser read it.
    fn both(text: &str) -> (Option<String>, Option<String>, bool) {
        let value = serde_json::from_slice::<Value>(text.as_bytes()).ok();
        let object = Object::frame(text.as_bytes().to_vec());
        let shown = object.as_ref().map(|o| match o {
            Object::Doc(d) => to_value(d.root()).to_string(),
            Object::Value(v) => to_value(v).to_string(),
        });
        // A `Value` read through the view shows itself.
        if let Some(v) = &value {
            assert_eq!(to_value(v).to_string(), v.to_string());
        }
        let by_doc = matches!(object, Some(Object::Doc(_)));
        (value.map(|v| v.to_string()), shown, by_doc)
    }

    #[test]
    fn it_reads_what_a_value_holds() {
        for text in [
            r#"{"name":"a","image":"b","args":["x","y\n\u00e9"],"n":[1,-2,0,-9223372036854775808,18446744073709551615]}"#,
            r#"{"a":1,"b":2,"a":3}"#,
            r#"{"b":{"x":1},"a":[],"b":{"y":2},"\u0062":null}"#,
            r#"{"long-key-one":1,"long-key-two":2,"long-key-one":3,"q":4}"#,
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
