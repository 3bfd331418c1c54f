//! A container's name and image read straight from its JSON bytes, for the kubelets that hash
//! only those two (1.31 +, `HashContainer` over `{"image":…,"name":…}`).
//!
//! Such a kubelet still decodes the whole container into its `v1.Container` first, and one that
//! does not decode has no hash. So the bytes are checked against each version's type graph as
//! [`crate::kubelet::decode`] would decode them (every field's value of its JSON type, integers
//! in range, quantities that parse; a key the version does not know dropped, its value checked
//! as plain JSON), building nothing.
//!
//! The check answers only where it is sure, over a plain subset of JSON. An escape in a key or a
//! quantity, or a `\u` escape of a surrogate anywhere; a number that is not a plain integer; a
//! key seen before in the same object; a root key that makes the object a record, a list or a
//! pod ([`NOT_A_CONTAINER_KEYS`]); a frame that is not UTF-8: all give `None`, and the caller
//! parses and decodes the container the usual way, which hashes it or names its error. So what
//! the check accepts, the usual path accepts too, as the same container with the same name and
//! image (tests in `analysis::hashing` hold the two paths equal on broken containers and on
//! names and images made of escapes).

use std::borrow::Cow;

use std::sync::OnceLock;

use crate::kubelet::bytescan::{find_string_stop_or_non_ascii, plain_integer};
use crate::kubelet::quantity;
use crate::kubelet::schema::{Kind, Schema, TypeId};
use crate::kubelet::version::{MAX_MINOR, MIN_MINOR};
use crate::source::input::NOT_A_CONTAINER_KEYS;

/// What the check takes for a type, pointers seen through (a pointer takes what its element
/// takes; `null`, every type's zero value, is taken before this is looked at): one small
/// table per type graph, so that a value is one load and one branch away from its key.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Takes {
    String,
    Bool,
    Int32,
    Int64,
    Quantity,
    IntOrString,
    /// A list of items of this type.
    List(TypeId),
    /// A map with string keys and values of this type.
    Map(TypeId),
    /// A struct's fields.
    Struct(TypeId),
}

/// [`Takes`] per type of `schema`, made once per version (the registry holds the one schema
/// of each version: [`Schema::for_version`]).
fn takes_of(schema: &Schema) -> &'static [Takes] {
    const N: usize = (MAX_MINOR - MIN_MINOR + 1) as usize;
    static TABLES: [OnceLock<Box<[Takes]>>; N] = [const { OnceLock::new() }; N];
    let at = usize::from(schema.version().minor() - MIN_MINOR);
    TABLES[at].get_or_init(|| {
        (0..schema.type_count())
            .map(|ty| takes(schema, ty))
            .collect()
    })
}

fn takes(schema: &Schema, ty: TypeId) -> Takes {
    match &schema.ty(ty).kind {
        // A pointer points to a struct, a slice or a leaf, never to itself.
        Kind::Ptr(elem) => takes(schema, *elem),
        Kind::String => Takes::String,
        Kind::Bool => Takes::Bool,
        Kind::Int32 => Takes::Int32,
        Kind::Int64 => Takes::Int64,
        Kind::Quantity => Takes::Quantity,
        Kind::IntOrString => Takes::IntOrString,
        Kind::Slice(elem) => Takes::List(*elem),
        Kind::Map { value } => Takes::Map(*value),
        Kind::Struct(_) => Takes::Struct(ty),
    }
}

/// The name and image of the container object in `frame` (nothing else but white space around
/// it), if it surely decodes under every one of `schemas` and its name is a string; `None` when
/// that is not sure (see the module). A name or image without escapes is a slice of `frame`.
pub fn name_and_image<'f>(
    frame: &'f [u8],
    schemas: &[&Schema],
) -> Option<(Cow<'f, str>, Cow<'f, str>)> {
    // The readers refuse frames of 2 GiB or more.
    if frame.len() >= 1 << 31 {
        return None;
    }
    let mut found = None;
    for schema in schemas {
        let mut c = Check {
            b: frame,
            i: 0,
            schema,
            takes: takes_of(schema),
            name: None,
            image: None,
        };
        c.space();
        c.fields(schema.root(), true)?;
        c.space();
        if c.i != frame.len() {
            return None;
        }
        found = Some((c.name?, c.image));
    }
    // A frame the check takes is UTF-8: outside strings it takes only ASCII, and inside them
    // each byte that is not ASCII starts a character it checked. The name and image are slices
    // of it, or their escapes read.
    let (name, image) = found?;
    let image = match image {
        Some(at) => contents(frame, at)?,
        None => Cow::Borrowed(""),
    };
    Some((contents(frame, name)?, image))
}

/// The contents of the string `at` in `frame`: as they are, or with their escapes read (JSON's
/// escapes; the check took none of a surrogate, so each stands for one character).
fn contents(frame: &[u8], at: Noted) -> Option<Cow<'_, str>> {
    match at {
        (start, end, false) => std::str::from_utf8(frame.get(start..end)?)
            .ok()
            .map(Cow::Borrowed),
        (start, end, true) => serde_json::from_slice(frame.get(start - 1..end + 1)?)
            .ok()
            .map(Cow::Owned),
    }
}

/// Where a string's contents are in the frame, and whether they have an escape.
type Noted = (usize, usize, bool);

/// A walk over one frame for one type graph.
struct Check<'f, 's> {
    b: &'f [u8],
    i: usize,
    schema: &'s Schema,
    takes: &'s [Takes],
    /// Where the root's `name` and `image` strings are, once met.
    name: Option<Noted>,
    image: Option<Noted>,
}

/// How deep a value no field takes may nest.
const MAX_SKIPPED_DEPTH: usize = 32;

/// The keys of one object met so far, for repeats: a few, compared in full.
#[derive(Default)]
struct KeySet<'f> {
    keys: [&'f [u8]; 16],
    n: usize,
}

impl<'f> KeySet<'f> {
    /// `None` for a key met before, or one too many to keep.
    fn insert(&mut self, key: &'f [u8]) -> Option<()> {
        if self.n == self.keys.len() || self.keys[..self.n].contains(&key) {
            return None;
        }
        self.keys[self.n] = key;
        self.n += 1;
        Some(())
    }
}

impl<'f> Check<'f, '_> {
    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    /// JSON's white space. Inlined as one compare: white space is at most a space, and most
    /// JSON read here has none between its tokens.
    #[inline(always)]
    fn space(&mut self) {
        if self.peek().is_some_and(|c| c <= b' ') {
            self.more_space();
        }
    }

    #[inline(never)]
    fn more_space(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.peek() {
            self.i += 1;
        }
    }

    fn eat(&mut self, byte: u8) -> Option<()> {
        (self.peek()? == byte).then(|| self.i += 1)
    }

    fn literal(&mut self, word: &[u8]) -> Option<()> {
        let end = self.i + word.len();
        (self.b.get(self.i..end)? == word).then(|| self.i = end)
    }

    /// A string at the cursor: where its raw contents are, and whether they have an escape. An
    /// escape is checked (a surrogate is not taken: lone ones have rules of their own), and so
    /// is each character that is not ASCII (UTF-8, as Rust's `str` has it); a control byte or
    /// a missing end quote is `None`.
    // Inlined, with the rest of a string after an escape or a byte that is not ASCII out of
    // line: nearly every string of a pod is plain ASCII, and its end the first stop found.
    #[inline(always)]
    fn string(&mut self) -> Option<(usize, usize, bool)> {
        self.eat(b'"')?;
        let start = self.i;
        self.i += find_string_stop_or_non_ascii(self.b.get(self.i..)?)?;
        match self.peek()? {
            b'"' => {
                self.i += 1;
                Some((start, self.i - 1, false))
            }
            b'\\' | 0x80.. => self.string_rest(start),
            _ => None,
        }
    }

    /// The rest of a string from its first escape or byte that is not ASCII, at the cursor;
    /// see [`Check::string`].
    #[inline(never)]
    fn string_rest(&mut self, start: usize) -> Option<(usize, usize, bool)> {
        let mut escaped = false;
        loop {
            match self.peek()? {
                b'"' => break,
                b'\\' => {
                    self.escape()?;
                    escaped = true;
                }
                lead @ 0x80.. => self.character(lead)?,
                _ => return None,
            }
            self.i += find_string_stop_or_non_ascii(self.b.get(self.i..)?)?;
        }
        self.i += 1;
        Some((start, self.i - 1, escaped))
    }

    /// A character that is not ASCII at the cursor, its first byte `lead`: as many bytes as
    /// `lead` says, which must be UTF-8 (no overlong form, no surrogate, nothing past U+10FFFF).
    fn character(&mut self, lead: u8) -> Option<()> {
        let len = match lead {
            0xC2..=0xDF => 2,
            0xE0..=0xEF => 3,
            0xF0..=0xF4 => 4,
            _ => return None,
        };
        std::str::from_utf8(self.b.get(self.i..self.i + len)?).ok()?;
        self.i += len;
        Some(())
    }

    /// Where a string without escapes is.
    fn plain_string(&mut self) -> Option<(usize, usize)> {
        match self.string()? {
            (start, end, false) => Some((start, end)),
            _ => None,
        }
    }

    fn escape(&mut self) -> Option<()> {
        match *self.b.get(self.i + 1)? {
            b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => self.i += 2,
            b'u' => {
                let hex = std::str::from_utf8(self.b.get(self.i + 2..self.i + 6)?).ok()?;
                if !hex.bytes().all(|h| h.is_ascii_hexdigit()) {
                    return None;
                }
                let unit = u16::from_str_radix(hex, 16).ok()?;
                if (0xD800..=0xDFFF).contains(&unit) {
                    return None;
                }
                self.i += 6;
            }
            _ => return None,
        }
        Some(())
    }

    /// A plain integer ([`plain_integer`], not `-0`) from `min` to `max`.
    #[inline(always)]
    fn integer(&mut self, min: i64, max: i64) -> Option<()> {
        let (negative, n, len) = plain_integer(self.b.get(self.i..)?)?;
        let n = match negative {
            // `-0` is a float to serde_json, which the decoder does not take as an integer.
            true => 0i64.checked_sub_unsigned(n).filter(|&i| i != 0)?,
            false => i64::try_from(n).ok()?,
        };
        if !(min..=max).contains(&n) {
            return None;
        }
        self.i += len;
        Some(())
    }

    /// A value of type `ty` (`null` is every type's zero value, as the decoder has it).
    #[inline(always)]
    fn value(&mut self, ty: TypeId) -> Option<()> {
        if self.peek()? == b'n' {
            return self.literal(b"null");
        }
        match *self.takes.get(ty)? {
            Takes::String => self.string().map(drop),
            Takes::Bool => match self.peek()? {
                b't' => self.literal(b"true"),
                _ => self.literal(b"false"),
            },
            Takes::Int32 => self.integer(i64::from(i32::MIN), i64::from(i32::MAX)),
            Takes::Int64 => self.integer(i64::MIN, i64::MAX),
            Takes::Quantity => self.quantity(),
            Takes::IntOrString => match self.peek()? {
                b'"' => self.string().map(drop),
                _ => self.integer(i64::from(i32::MIN), i64::from(i32::MAX)),
            },
            Takes::List(elem) => self.list_of(elem),
            Takes::Map(value) => self.map(value),
            Takes::Struct(ty) => self.fields(ty, false),
        }
    }

    /// A list of values of type `elem` (out of line: [`Check::value`] is inlined into it).
    #[inline(never)]
    fn list_of(&mut self, elem: TypeId) -> Option<()> {
        self.list(|c| c.value(elem))
    }

    /// `Quantity.UnmarshalJSON`: a string's contents or an integer's text, parsed.
    fn quantity(&mut self) -> Option<()> {
        let text = match self.peek()? {
            b'"' => {
                let (start, end) = self.plain_string()?;
                self.b.get(start..end)?
            }
            _ => {
                let start = self.i;
                self.integer(i64::MIN, i64::MAX)?;
                self.b.get(start..self.i)?
            }
        };
        // Most quantities are plain (`500m`, `64Mi`): seen to parse without parsing them.
        if quantity::plainly_parses(text) {
            return Some(());
        }
        quantity::parse_json_string(std::str::from_utf8(text).ok()?)
            .ok()
            .map(drop)
    }

    /// A list, each item read by `item`.
    fn list(&mut self, item: impl FnMut(&mut Self) -> Option<()>) -> Option<()> {
        self.eat(b'[')?;
        self.sequence(b']', item)
    }

    /// After an opening bracket: nothing, or items read by `item` with commas between them,
    /// then `close`.
    fn sequence(&mut self, close: u8, mut item: impl FnMut(&mut Self) -> Option<()>) -> Option<()> {
        self.space();
        if self.eat(close).is_some() {
            return Some(());
        }
        loop {
            self.space();
            item(self)?;
            self.space();
            match self.peek()? {
                b',' => self.i += 1,
                c if c == close => break,
                _ => return None,
            }
        }
        self.i += 1;
        Some(())
    }

    /// A value no field takes (its key unknown to the version), which the decoder drops: taken
    /// only as plain JSON (integers, keys without escapes, none repeated, not deep), so that
    /// the usual path reads the frame too.
    fn skip(&mut self, depth: usize) -> Option<()> {
        if depth > MAX_SKIPPED_DEPTH {
            return None;
        }
        match self.peek()? {
            b'"' => self.string().map(drop),
            b'{' => {
                let mut keys = KeySet::default();
                self.members(|c, key| {
                    keys.insert(key)?;
                    c.skip(depth + 1)
                })
            }
            b'[' => self.list(|c| c.skip(depth + 1)),
            b't' => self.literal(b"true"),
            b'f' => self.literal(b"false"),
            b'n' => self.literal(b"null"),
            _ => self.integer(i64::MIN, i64::MAX),
        }
    }

    /// A map with string keys (`ResourceList`): no key twice.
    #[inline(never)]
    fn map(&mut self, value: TypeId) -> Option<()> {
        let mut keys = KeySet::default();
        self.members(|c, key| {
            keys.insert(key)?;
            c.value(value)
        })
    }

    /// A struct's fields, each key one of its (flattened) fields, none twice; the root's
    /// `name` and `image` noted.
    #[inline(never)]
    fn fields(&mut self, ty: TypeId, root: bool) -> Option<()> {
        let keys = self.schema.struct_keys(ty).filter(|k| k.flat_len <= 64)?;
        let (name, image) = match root {
            true => (keys.find("name"), keys.find("image")),
            false => (None, None),
        };
        let mut seen = 0u64;
        // Made at the first unknown key: most structs have none.
        let mut unknown: Option<KeySet> = None;
        self.members(|c, key| {
            let Some(at) = keys.find_bytes(key) else {
                // At the root, a key that makes the object a record, a list or a pod: the
                // usual path reads it as that.
                if root && NOT_A_CONTAINER_KEYS.iter().any(|k| k.as_bytes() == key) {
                    return None;
                }
                unknown.get_or_insert_with(KeySet::default).insert(key)?;
                return c.skip(0);
            };
            if seen & 1 << at != 0 {
                return None;
            }
            seen |= 1 << at;
            let ty = *keys.types.get(at)?;
            if Some(at) == name {
                c.name = c.note(ty)?;
            } else if Some(at) == image {
                c.image = c.note(ty)?;
            } else {
                c.value(ty)?;
            }
            Some(())
        })
    }

    /// A root string field whose place is kept: a string, or `null` (`None`).
    fn note(&mut self, ty: TypeId) -> Option<Option<Noted>> {
        if !matches!(self.schema.ty(ty).kind, Kind::String) {
            return None;
        }
        if self.peek()? == b'n' {
            self.literal(b"null")?;
            return Some(None);
        }
        self.string().map(Some)
    }

    /// An object's members: `member` is called at each value with its key (keys with escapes
    /// are not taken).
    fn members(&mut self, mut member: impl FnMut(&mut Self, &'f [u8]) -> Option<()>) -> Option<()> {
        self.eat(b'{')?;
        self.sequence(b'}', |c| {
            let (start, end, false) = c.string()? else {
                return None;
            };
            let key = c.b.get(start..end)?;
            c.space();
            c.eat(b':')?;
            c.space();
            member(c, key)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kubelet::version::parse_version_set;

    fn schemas(set: &str) -> Vec<&'static Schema> {
        parse_version_set(set)
            .unwrap()
            .into_iter()
            .map(|v| Schema::for_version(v).unwrap())
            .collect()
    }

    fn check(container: &str) -> Option<(String, String)> {
        name_and_image(container.as_bytes(), &schemas("1.31,1.37"))
            .map(|(n, i)| (n.into_owned(), i.into_owned()))
    }

    fn both(name: &str, image: &str) -> Option<(String, String)> {
        Some((name.into(), image.into()))
    }

    #[test]
    fn reads_plain_containers() {
        let c = r#" {"name":"web","image":"nginx:1","ports":[{"containerPort":80,"hostPort":-1}],
            "resources":{"limits":{"cpu":"500m","memory":1024},"requests":null},
            "env":[{"name":"A","value":"say \"hi\" \u00e9"}],"tty":true,"stdin":false,
            "livenessProbe":{"httpGet":{"port":"http"},"periodSeconds":10,"terminationGracePeriodSeconds":-9223372036854775808},
            "readinessProbe":{"tcpSocket":{"port":8080}},"args":[],"workingDir":null} "#;
        assert_eq!(check(c), both("web", "nginx:1"));
        assert_eq!(check(r#"{"name":"","image":null}"#), both("", ""));
        assert_eq!(check(r#"{"name":"a"}"#), both("a", ""));
    }

    #[test]
    fn keys_that_differ_only_in_case_are_unknown() {
        // As the decoder has them (`kubelet::decode`): dropped, their values only checked as
        // JSON, so `90.0` under `portS` is no integer field's.
        assert_eq!(
            check(r#"{"name":"a","Image":"x","portS":[{"containerPort":1}],"NAME":"b"}"#),
            both("a", "")
        );
        // A fraction is not plain JSON to the check: the usual path reads it.
        assert_eq!(
            check(r#"{"name":"a","portS":[{"containerPort":90.0}]}"#),
            None
        );
    }

    #[test]
    fn reads_the_escapes_of_a_name_and_an_image() {
        let cases = [
            (r#"{"name":"a\n","image":"i\/j"}"#, "a\n", "i/j"),
            (
                r#"{"name":"say \"hi\"","image":"\\x"}"#,
                "say \"hi\"",
                "\\x",
            ),
            (
                r#"{"name":"t\tb\bf\fr\r","image":"\u00e9\u2028"}"#,
                "t\tb\u{8}f\u{c}r\r",
                "é\u{2028}",
            ),
        ];
        for (c, name, image) in cases {
            assert_eq!(check(c), both(name, image), "{c}");
        }
        // The same frame without the check: its name is the decoded string.
        let frame = br#"{"name":"say \"hi\"","image":"i"}"#;
        let (name, image) = name_and_image(frame, &schemas("1.31")).unwrap();
        assert!(matches!(name, Cow::Owned(_)) && matches!(image, Cow::Borrowed("i")));
    }

    /// Every case here is one the check must leave to the decoder: what a kubelet refuses, or
    /// what the check does not follow (the decoder then hashes it or names the error).
    #[test]
    fn leaves_everything_else_to_the_decoder() {
        let cases = [
            // No name, or not a string; not an object; more after it.
            r#"{"image":"i"}"#,
            r#"{"name":null,"image":"i"}"#,
            r#"{"name":1,"image":"i"}"#,
            r#"["name"]"#,
            r#"{"name":"a"} x"#,
            r#"{"name":"a"}{"name":"b"}"#,
            r#"{"name":"a""#,
            r#"{"name":"a",}"#,
            r#"{"name":"a" "image":"i"}"#,
            // Escapes in a key, the name, the image, a quantity, a map key; bad escapes;
            // surrogates; control bytes.
            r#"{"n\u0061me":"a"}"#,
            r#"{"name":"a\ud800"}"#,
            r#"{"name":"a","image":"i\ud83d\ude00"}"#,
            r#"{"name":"a\x"}"#,
            r#"{"name":"a","image":"i\u00g0"}"#,
            r#"{"name":"a","resources":{"limits":{"cpu":"\u0031"}}}"#,
            r#"{"name":"a","resources":{"limits":{"c\u0070u":"1"}}}"#,
            r#"{"name":"a","args":["\q"]}"#,
            r#"{"name":"a","args":["\u12"]}"#,
            r#"{"name":"a","args":["\ud800"]}"#,
            r#"{"name":"a","args":["\ud83d\ude00"]}"#,
            "{\"name\":\"a\",\"args\":[\"\u{1}\"]}",
            // Keys repeated (root, deeper, map).
            r#"{"name":"a","image":"i","image":"j"}"#,
            r#"{"name":"a","name":"a"}"#,
            r#"{"name":"a","livenessProbe":{"periodSeconds":1,"periodSeconds":2}}"#,
            r#"{"name":"a","resources":{"limits":{"cpu":"1","cpu":"1"}}}"#,
            // Numbers: fractions, exponents, -0, leading zeros, out of range, as strings.
            r#"{"name":"a","ports":[{"containerPort":80.0}]}"#,
            r#"{"name":"a","ports":[{"containerPort":8e1}]}"#,
            r#"{"name":"a","ports":[{"containerPort":-0}]}"#,
            r#"{"name":"a","ports":[{"containerPort":080}]}"#,
            r#"{"name":"a","ports":[{"containerPort":2147483648}]}"#,
            r#"{"name":"a","ports":[{"containerPort":-2147483649}]}"#,
            r#"{"name":"a","ports":[{"containerPort":"80"}]}"#,
            r#"{"name":"a","livenessProbe":{"terminationGracePeriodSeconds":9223372036854775808}}"#,
            r#"{"name":"a","livenessProbe":{"httpGet":{"port":2147483648}}}"#,
            r#"{"name":"a","livenessProbe":{"httpGet":{"port":true}}}"#,
            // Quantities: fractions as numbers, bad ones, wrong types.
            r#"{"name":"a","resources":{"limits":{"cpu":0.5}}}"#,
            r#"{"name":"a","resources":{"limits":{"cpu":"lots"}}}"#,
            r#"{"name":"a","resources":{"limits":{"cpu":""}}}"#,
            r#"{"name":"a","resources":{"limits":{"cpu":true}}}"#,
            r#"{"name":"a","resources":{"limits":["1"]}}"#,
            // Wrong JSON types and bad literals.
            r#"{"name":"a","tty":"true"}"#,
            r#"{"name":"a","tty":tru}"#,
            r#"{"name":"a","tty":nul}"#,
            r#"{"name":"a","args":"x"}"#,
            r#"{"name":"a","args":[1]}"#,
            r#"{"name":"a","securityContext":[]}"#,
            r#"{"name":"a","image":{}}"#,
        ];
        for c in cases {
            assert_eq!(check(c), None, "{c}");
        }
        // Bytes that are not UTF-8: in the name, in another string, in a key, outside strings.
        let not_utf8: [&[u8]; 12] = [
            b"\xff",
            b"\x80",
            b"\xc0\xaf",
            b"\xc1\xbf",
            b"\xc3",
            b"\xe2\x82",
            b"\xe0\x80\xaf",
            b"\xed\xa0\x80",
            b"\xf0\x80\x80\xaf",
            b"\xf4\x90\x80\x80",
            b"\xf5\x80\x80\x80",
            b"\xc3\xa9\xa9",
        ];
        for bad in not_utf8 {
            let with = |head: &[u8], tail: &[u8]| [head, bad, tail].concat();
            for frame in [
                with(b"{\"name\":\"a", b"\"}"),
                with(b"{\"name\":\"", b"\"}"),
                with(b"{\"name\":\"a\",\"image\":\"i", b"x\"}"),
                with(b"{\"name\":\"a\",\"args\":[\"", b"\"]}"),
                with(b"{\"name\":\"a\",\"x", b"\":1}"),
                with(b"{\"name\":\"a\",\"x\":\"\\n", b"\"}"),
                with(b"{\"name\":\"a\"", b"}"),
            ] {
                assert_eq!(name_and_image(&frame, &schemas("1.31")), None, "{frame:?}");
                assert!(std::str::from_utf8(&frame).is_err(), "{frame:?}");
            }
        }
    }

    #[test]
    fn reads_characters_that_are_not_ascii() {
        // Two, three and four bytes, at the start, the end and between escapes.
        for text in [
            "é",
            "aé",
            "éa",
            "€",
            "a€b",
            "😀",
            "x😀",
            "é\\n€",
            "\\\"😀\\\"",
            "\u{7ff}\u{800}\u{ffff}\u{10000}\u{10ffff}",
        ] {
            // An unknown key of those characters too (a key with an escape is not taken).
            let key = if text.contains('\\') { "k" } else { text };
            let c = format!(
                r#"{{"name":"{text}","image":"i{text}","args":["{text}"],"{key}":"{text}"}}"#
            );
            let read = |s: &str| serde_json::from_str::<String>(&format!("\"{s}\"")).unwrap();
            assert_eq!(
                check(&c),
                both(&read(text), &format!("i{}", read(text))),
                "{c}"
            );
        }
    }

    #[test]
    fn a_key_a_version_does_not_know_is_dropped_as_plain_json() {
        // `restartPolicyRules` came in 1.34: 1.31 drops it, 1.34 decodes it.
        let rules = |v: &str| format!(r#"{{"name":"a","image":"i","restartPolicyRules":{v}}}"#);
        fn at(c: &str, set: &str) -> Option<(String, String)> {
            name_and_image(c.as_bytes(), &schemas(set))
                .map(|(n, i)| (n.into_owned(), i.into_owned()))
        }
        let good =
            rules(r#"[{"action":"Restart","exitCodes":{"operator":"In","values":[1,255]}}]"#);
        assert_eq!(at(&good, "1.31"), both("a", "i"));
        assert_eq!(at(&good, "1.31,1.34"), both("a", "i"));
        // A value 1.31 drops but 1.34 cannot decode.
        let typed = rules(r#"[{"action":1}]"#);
        assert_eq!(at(&typed, "1.31"), both("a", "i"));
        assert_eq!(at(&typed, "1.31,1.34"), None);
        // What the check does not follow in a dropped value: numbers that are not plain
        // integers, escaped or repeated keys, deep nesting, bad JSON.
        let deep = format!("{}1{}", "[".repeat(40), "]".repeat(40));
        for v in [
            "[1.5]",
            "-0",
            "1e2",
            r#"{"a\u0062":1}"#,
            r#"{"a":1,"a":2}"#,
            &deep,
            "[1,]",
            "tru",
            r#""\x""#,
        ] {
            assert_eq!(at(&rules(v), "1.31"), None, "{v}");
        }
        // Keys that make the object a record, a list or a pod, whatever their value.
        for k in NOT_A_CONTAINER_KEYS {
            for v in [r#"{"name":"x"}"#, "[]", r#""Pod""#, "{}", "null", "1"] {
                let c = format!(r#"{{"name":"a","image":"i","{k}":{v}}}"#);
                assert_eq!(check(&c), None, "{c}");
            }
        }
        // An unknown key twice at the root.
        assert_eq!(check(r#"{"name":"a","x":1,"x":1}"#), None);
        assert_eq!(
            check(r#"{"name":"a","x":{"y":[true,null,"z"]}}"#),
            both("a", "")
        );
    }
}
