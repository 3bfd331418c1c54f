//! The text encodings an input file comes in. Windows PowerShell 5 saves `kubectl … > pods.json`
//! as UTF-16 with a byte order mark, and `Out-File -Encoding utf8` as UTF-8 with one; kubectl and
//! the kubelet read both, because go-yaml's reader goes by the mark (`readerc.go`
//! `yaml_parser_determine_encoding`). So does kubehash's: every input is read as UTF-8, a UTF-8
//! mark that starts it is dropped, UTF-16 after its mark is transcoded, and malformed UTF-16 is
//! an error (go-yaml's "incomplete UTF-16 character", "unexpected low surrogate area"), never a
//! replacement character. Text without a mark is UTF-8, as to go-yaml. A compressed file (gzip,
//! zstd, xz: `kubectl get pods -o json | gzip`) is named by its magic number, not read as text.

use std::io::{self, Read};

/// The UTF-8 byte order mark.
pub const UTF8_BOM: &[u8] = b"\xEF\xBB\xBF";

/// What a byte order mark that starts a stream says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bom {
    Utf8,
    Utf16Le,
    Utf16Be,
}

impl Bom {
    /// The mark `head` starts with, if any.
    pub fn of(head: &[u8]) -> Option<Bom> {
        if head.starts_with(UTF8_BOM) {
            Some(Bom::Utf8)
        } else if head.starts_with(b"\xFF\xFE") {
            Some(Bom::Utf16Le)
        } else if head.starts_with(b"\xFE\xFF") {
            Some(Bom::Utf16Be)
        } else {
            None
        }
    }

    fn len(self) -> usize {
        match self {
            Bom::Utf8 => 3,
            Bom::Utf16Le | Bom::Utf16Be => 2,
        }
    }
}

/// Compressed files, by the magic number that starts them: named, not parsed as text.
const COMPRESSED: [(&[u8], &str, &str); 3] = [
    (b"\x1F\x8B", "gzip", "zcat"),
    (b"\x28\xB5\x2F\xFD", "zstd", "zstdcat"),
    (b"\xFD7zXZ\x00", "xz", "xzcat"),
];

/// How many bytes [`utf8`] looks at first: the longest mark or magic number.
const HEAD: usize = 6;

/// `reader` as UTF-8: a stream as it is, without the UTF-8 mark that starts it, or the UTF-16
/// after a UTF-16 mark transcoded. Reads the first bytes to know; a compressed file is an error
/// that says so (it would otherwise be "not valid JSON" at its first byte).
pub fn utf8<R: Read>(mut reader: R) -> io::Result<Utf8<R>> {
    let mut head = Vec::with_capacity(HEAD);
    while head.len() < HEAD {
        let mut byte = [0; HEAD];
        match reader.read(&mut byte[..HEAD - head.len()]) {
            Ok(0) => break,
            Ok(n) => head.extend_from_slice(&byte[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
    if let Some((_, what, cat)) = COMPRESSED.iter().find(|(m, ..)| head.starts_with(m)) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{what}-compressed, not JSON or YAML: decompress it first ({cat})"),
        ));
    }
    let bom = Bom::of(&head);
    let rest = head.split_off(bom.map_or(0, Bom::len));
    let stream = io::Cursor::new(rest).chain(reader);
    Ok(match bom {
        Some(Bom::Utf16Le | Bom::Utf16Be) => Utf8::Utf16(Utf16 {
            inner: stream,
            big_endian: bom == Some(Bom::Utf16Be),
            pending: Vec::new(),
            out: Vec::new(),
            at: 0,
            offset: 2,
            failed: None,
        }),
        _ => Utf8::Plain(stream),
    })
}

/// `bytes` as UTF-8, as [`utf8`] reads them.
pub fn decoded(bytes: &[u8]) -> io::Result<std::borrow::Cow<'_, [u8]>> {
    Ok(match Bom::of(bytes) {
        None => bytes.into(),
        Some(Bom::Utf8) => bytes[UTF8_BOM.len()..].into(),
        Some(_) => {
            let mut out = Vec::with_capacity(bytes.len());
            utf8(bytes)?.read_to_end(&mut out)?;
            out.into()
        }
    })
}

/// Whether `bytes` start with a UTF-16 byte order mark: text kubehash reads, transcoded, and
/// never writes.
pub fn is_utf16(bytes: &[u8]) -> bool {
    matches!(Bom::of(bytes), Some(Bom::Utf16Le | Bom::Utf16Be))
}

/// A stream read as UTF-8 ([`utf8`]).
pub enum Utf8<R> {
    Plain(io::Chain<io::Cursor<Vec<u8>>, R>),
    Utf16(Utf16<io::Chain<io::Cursor<Vec<u8>>, R>>),
}

impl<R: Read> Read for Utf8<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Utf8::Plain(r) => r.read(buf),
            Utf8::Utf16(r) => r.read(buf),
        }
    }
}

/// UTF-16 code units in, UTF-8 out. What decodes is handed on before an error, and the error is
/// then given to every read, as the stream cannot go on.
pub struct Utf16<R> {
    inner: R,
    big_endian: bool,
    /// Bytes read and not yet decoded: an odd byte, or a high surrogate waiting for its pair.
    pending: Vec<u8>,
    /// UTF-8 decoded and not yet handed out, from `at`.
    out: Vec<u8>,
    at: usize,
    /// Where in the stream (bytes, the mark included) `pending` starts.
    offset: u64,
    /// Why the stream stopped: given once `out` is handed on.
    failed: Option<String>,
}

impl<R: Read> Read for Utf16<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.at == self.out.len() {
            if let Some(why) = &self.failed {
                return Err(io::Error::new(io::ErrorKind::InvalidData, why.clone()));
            }
            let mut chunk = [0; 16 << 10];
            let n = loop {
                match self.inner.read(&mut chunk) {
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    other => break other?,
                }
            };
            self.out.clear();
            self.at = 0;
            if n == 0 {
                if self.pending.is_empty() {
                    return Ok(0);
                }
                self.fail("the input ends inside a character");
                continue;
            }
            self.pending.extend_from_slice(&chunk[..n]);
            self.decode();
        }
        let n = buf.len().min(self.out.len() - self.at);
        buf[..n].copy_from_slice(&self.out[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

impl<R> Utf16<R> {
    /// Decodes the whole code units of `pending` into `out`, up to a malformed one, keeping an
    /// odd byte and a high surrogate that the next read may pair.
    fn decode(&mut self) {
        let big_endian = self.big_endian;
        let mut units: Vec<u16> = self
            .pending
            .chunks_exact(2)
            .map(|b| match big_endian {
                true => u16::from_be_bytes([b[0], b[1]]),
                false => u16::from_le_bytes([b[0], b[1]]),
            })
            .collect();
        if units.last().is_some_and(|u| (0xD800..0xDC00).contains(u)) {
            units.pop();
        }
        let mut done = 0;
        let mut malformed = false;
        for c in char::decode_utf16(units.iter().copied()) {
            let Ok(c) = c else {
                malformed = true;
                break;
            };
            self.out
                .extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes());
            done += 2 * c.len_utf16();
        }
        self.pending.drain(..done);
        self.offset += done as u64;
        if malformed {
            self.fail("a surrogate without its pair");
        }
    }

    fn fail(&mut self, what: &str) {
        self.failed = Some(format!(
            "byte {} is not UTF-16 as the byte order mark says ({what})",
            self.offset
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_all(bytes: &[u8], chunk: usize) -> io::Result<Vec<u8>> {
        // A reader that hands over at most `chunk` bytes a read, as a pipe may.
        struct Trickle<'a>(&'a [u8], usize);
        impl Read for Trickle<'_> {
            fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
                let n = self.0.len().min(self.1).min(buf.len());
                buf[..n].copy_from_slice(&self.0[..n]);
                self.0 = &self.0[n..];
                Ok(n)
            }
        }
        let mut out = Vec::new();
        utf8(Trickle(bytes, chunk))?.read_to_end(&mut out)?;
        Ok(out)
    }

    fn utf16(text: &str, big_endian: bool) -> Vec<u8> {
        let mut out = if big_endian {
            vec![0xFE, 0xFF]
        } else {
            vec![0xFF, 0xFE]
        };
        for u in text.encode_utf16() {
            out.extend(if big_endian {
                u.to_be_bytes()
            } else {
                u.to_le_bytes()
            });
        }
        out
    }

    #[test]
    fn every_marked_encoding_reads_as_the_utf8_text() {
        let text =
            "{\"name\":\"a\",\"image\":\"b\",\"env\":[{\"name\":\"é\",\"value\":\"😀 x\"}]}\n";
        for chunk in [1, 2, 3, 5, 1 << 20] {
            for (label, bytes) in [
                ("plain", text.as_bytes().to_vec()),
                ("utf-8 mark", [UTF8_BOM, text.as_bytes()].concat()),
                ("utf-16le", utf16(text, false)),
                ("utf-16be", utf16(text, true)),
            ] {
                let got = read_all(&bytes, chunk).unwrap_or_else(|e| panic!("{label}: {e}"));
                assert_eq!(got, text.as_bytes(), "{label}, {chunk}-byte reads");
            }
        }
    }

    proptest::proptest! {
        /// Any text, in either UTF-16 order, read in reads of any size, is its UTF-8; and any
        /// bytes after a UTF-16 mark read as `char::decode_utf16` decodes them, or fail.
        #[test]
        fn utf16_reads_as_decode_utf16_decodes(
            text in "\\PC{0,64}",
            raw in proptest::collection::vec(proptest::num::u8::ANY, 0..64),
            chunk in 1usize..9,
            big in proptest::bool::ANY,
        ) {
            proptest::prop_assert_eq!(read_all(&utf16(&text, big), chunk).unwrap(), text.as_bytes());
            let marked = [if big { &[0xFE, 0xFF] } else { &[0xFF, 0xFE] }, &raw[..]].concat();
            let units = raw.chunks_exact(2).map(|b| match big {
                true => u16::from_be_bytes([b[0], b[1]]),
                false => u16::from_le_bytes([b[0], b[1]]),
            });
            let decoded: Result<String, _> = char::decode_utf16(units).collect();
            match (read_all(&marked, chunk), decoded) {
                (Ok(got), Ok(want)) if raw.len() % 2 == 0 => {
                    proptest::prop_assert_eq!(got, want.as_bytes())
                }
                (Err(e), want) if want.is_err() || raw.len() % 2 == 1 => {
                    proptest::prop_assert_eq!(e.kind(), io::ErrorKind::InvalidData)
                }
                (got, want) => proptest::prop_assert!(false, "{:?} for {:?}", got, want),
            }
        }
    }

    #[test]
    fn compressed_files_are_named_not_parsed() {
        for (bytes, what) in [
            (
                &b"\x1F\x8B\x08\x00rest"[..],
                "gzip-compressed, not JSON or YAML: decompress it first (zcat)",
            ),
            (b"\x28\xB5\x2F\xFDrest", "zstd-compressed"),
            (b"\xFD7zXZ\x00rest", "xz-compressed"),
        ] {
            for chunk in [1, 1 << 10] {
                let e = read_all(bytes, chunk).unwrap_err();
                assert!(e.to_string().starts_with(what), "{e}");
            }
        }
        // Text that merely starts alike is text.
        assert_eq!(read_all(b"\xFD7zX", 1).unwrap(), b"\xFD7zX");
        assert_eq!(read_all(b"(x", 1).unwrap(), b"(x");
    }

    #[test]
    fn short_and_unmarked_streams_are_kept_as_they_are() {
        for bytes in [&b""[..], b"{", b"{}", b"\xEF\xBB", b"\xFF", b"\xFE"] {
            assert_eq!(read_all(bytes, 1).unwrap(), bytes);
        }
        // Only a mark that starts the stream is one.
        let later = [b" ", UTF8_BOM].concat();
        assert_eq!(read_all(&later, 1 << 10).unwrap(), later);
        assert_eq!(read_all(UTF8_BOM, 1).unwrap(), b"");
        assert_eq!(read_all(b"\xFF\xFE", 1).unwrap(), b"");
    }

    #[test]
    fn malformed_utf16_is_an_error_naming_where() {
        let mut lone_low = utf16("ab", false);
        lone_low.extend([0x00, 0xDC]);
        let mut lone_high = utf16("ab", false);
        lone_high.extend([0x00, 0xD8, b'c', 0]);
        let mut odd = utf16("ab", true);
        odd.push(b'c');
        let mut high_at_end = utf16("ab", true);
        high_at_end.extend([0xD8, 0x00]);
        for (bytes, what) in [
            (lone_low, "byte 6 is not UTF-16 as the byte order mark says (a surrogate without its pair)"),
            (lone_high, "byte 6 is not UTF-16 as the byte order mark says (a surrogate without its pair)"),
            (odd, "byte 6 is not UTF-16 as the byte order mark says (the input ends inside a character)"),
            (high_at_end, "byte 6 is not UTF-16 as the byte order mark says (the input ends inside a character)"),
        ] {
            for chunk in [1, 3, 1 << 10] {
                let e = read_all(&bytes, chunk).unwrap_err();
                assert_eq!(e.kind(), io::ErrorKind::InvalidData);
                assert!(e.to_string().contains(what), "{e} ({chunk}-byte reads)");
            }
            // What decodes comes first, then the error, at every read after it.
            let mut r = utf8(&bytes[..]).unwrap();
            let mut got = [0; 8];
            assert_eq!(r.read(&mut got).unwrap(), 2);
            assert_eq!(&got[..2], b"ab");
            for _ in 0..2 {
                assert!(r.read(&mut got).unwrap_err().to_string().contains(what));
            }
        }
    }
}
