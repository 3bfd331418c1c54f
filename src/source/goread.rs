//! Raw JSON bytes read the way Go's `encoding/json` decoder reads them, before serde sees them
//! (`decode.go` `unquote` and `utf8.DecodeRune`):
//! * each byte that does not start a valid UTF-8 sequence becomes U+FFFD (`DecodeRune` returns
//!   `RuneError, 1`, and the decoder writes the replacement rune), one byte at a time;
//! * a `\uXXXX` escape of a UTF-16 surrogate that is not the first half of a valid pair (serde
//!   rejects those) becomes `\ufffd`.
//!
//! One rule, [`clean`], serves every stream through [`GoRead`].
//! Escapes are recognised by pairing backslashes, without tracking strings: outside a string a
//! backslash is not JSON, and the parser rejects it either way.

use std::io::{self, Read};

use crate::kubelet::bytescan::find_non_ascii_or_backslash;

const REPLACEMENT: &[u8] = "\u{fffd}".as_bytes();

/// Cleans `input` into `out` and returns how many bytes were consumed. Unless `eof`, it stops
/// before a UTF-8 sequence or escape that may continue past the end of `input`; the caller
/// passes those bytes again with more behind them.
pub fn clean(input: &[u8], eof: bool, out: &mut Vec<u8>) -> usize {
    let mut i = 0;
    let mut copied = 0;
    while i < input.len() {
        match find_non_ascii_or_backslash(&input[i..]) {
            Some(k) => i += k,
            None => break,
        }
        let b = input[i];
        out.extend_from_slice(&input[copied..i]);
        let rest = &input[i..];
        let step = if b == b'\\' {
            match escape(rest, eof) {
                None => return i,
                Some((n, replaced)) => {
                    out.extend_from_slice(if replaced { b"\\ufffd" } else { &rest[..n] });
                    n
                }
            }
        } else {
            let len = utf8_len(b);
            if len > rest.len() && !eof {
                return i;
            }
            match rest.get(..len).map(std::str::from_utf8) {
                Some(Ok(_)) if len > 0 => {
                    out.extend_from_slice(&rest[..len]);
                    len
                }
                _ => {
                    out.extend_from_slice(REPLACEMENT);
                    1
                }
            }
        };
        i += step;
        copied = i;
    }
    out.extend_from_slice(&input[copied..]);
    input.len()
}

/// The length a UTF-8 lead byte announces (0 for a byte that cannot lead).
fn utf8_len(b: u8) -> usize {
    match b {
        0xC2..=0xDF => 2,
        0xE0..=0xEF => 3,
        0xF0..=0xF4 => 4,
        _ => 0,
    }
}

/// At a backslash: how many bytes the escape spans and whether it becomes `\ufffd`; `None` when
/// more input is needed to decide.
fn escape(rest: &[u8], eof: bool) -> Option<(usize, bool)> {
    let need = |n: usize| rest.len() >= n || eof;
    if !need(2) {
        return None;
    }
    if rest.get(1) != Some(&b'u') {
        // `\\`, `\"`, … (or a lone backslash at the end): kept as they are.
        return Some((rest.len().min(2), false));
    }
    if !need(6) {
        return None;
    }
    let Some(u) = hex4(&rest[2..]) else {
        // Not a valid escape: the backslash is kept for the parser to reject.
        return Some((1, false));
    };
    match u {
        0xD800..=0xDBFF => {
            if !need(12) {
                return None;
            }
            let paired = rest.get(6..8) == Some(b"\\u")
                && hex4(&rest[8..]).is_some_and(|lo| (0xDC00..0xE000).contains(&lo));
            Some(if paired { (12, false) } else { (6, true) })
        }
        0xDC00..=0xDFFF => Some((6, true)),
        _ => Some((6, false)),
    }
}

fn hex4(b: &[u8]) -> Option<u32> {
    let s = std::str::from_utf8(b.get(..4)?).ok()?;
    u32::from_str_radix(s, 16)
        .ok()
        .filter(|_| s.bytes().all(|c| c.is_ascii_hexdigit()))
}

/// A reader whose bytes are cleaned by [`clean`] as they are read.
pub struct GoRead<R> {
    inner: R,
    raw: Vec<u8>,
    /// Raw bytes from `raw_start` on are not cleaned yet.
    raw_start: usize,
    eof: bool,
    out: Vec<u8>,
    out_start: usize,
}

impl<R: Read> GoRead<R> {
    pub fn new(inner: R) -> Self {
        GoRead {
            inner,
            raw: Vec::with_capacity(64 * 1024),
            raw_start: 0,
            eof: false,
            out: Vec::with_capacity(64 * 1024),
            out_start: 0,
        }
    }

    /// Refills `out` with at least one byte, unless the input is exhausted.
    fn fill(&mut self) -> io::Result<()> {
        self.out.clear();
        self.out_start = 0;
        while self.out.is_empty() {
            if self.raw_start == self.raw.len() || !self.eof {
                self.raw.drain(..self.raw_start);
                self.raw_start = 0;
                if !self.eof {
                    let len = self.raw.len();
                    self.raw.resize(len + 64 * 1024, 0);
                    let n = self.inner.read(&mut self.raw[len..])?;
                    self.raw.truncate(len + n);
                    self.eof = n == 0;
                }
            }
            if self.raw_start == self.raw.len() && self.eof {
                return Ok(());
            }
            self.raw_start += clean(&self.raw[self.raw_start..], self.eof, &mut self.out);
        }
        Ok(())
    }
}

impl<R: Read> Read for GoRead<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.out_start == self.out.len() {
            self.fill()?;
        }
        let n = buf.len().min(self.out.len() - self.out_start);
        buf[..n].copy_from_slice(&self.out[self.out_start..self.out_start + n]);
        self.out_start += n;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;

    use super::*;

    /// `input` as Go's decoder reads it; borrowed when nothing changes, which is the usual case.
    fn go_clean_input(input: &[u8]) -> Cow<'_, [u8]> {
        let surrogate_escape = input
            .windows(3)
            .any(|w| w[0] == b'\\' && w[1] == b'u' && matches!(w[2], b'd' | b'D'));
        if !surrogate_escape && std::str::from_utf8(input).is_ok() {
            return Cow::Borrowed(input);
        }
        let mut out = Vec::with_capacity(input.len() + 16);
        clean(input, true, &mut out);
        Cow::Owned(out)
    }

    fn cleaned(b: &[u8]) -> String {
        String::from_utf8(go_clean_input(b).into_owned()).unwrap()
    }

    /// Every split of the input into two reads gives what cleaning it whole gives.
    fn streamed(b: &[u8]) -> String {
        let whole = cleaned(b);
        for cut in 0..=b.len() {
            let mut out = String::new();
            let reader = GoRead::new(Read::chain(&b[..cut], &b[cut..]));
            let mut r = io::BufReader::with_capacity(1, reader);
            r.read_to_string(&mut out).unwrap();
            assert_eq!(out, whole, "cut at {cut}");
        }
        whole
    }

    #[test]
    fn invalid_utf8_bytes_become_one_replacement_each() {
        assert_eq!(streamed(b"\"a\xffb\""), "\"a\u{fffd}b\"");
        // A truncated sequence: one replacement per byte, as Go's DecodeRune.
        assert_eq!(streamed(b"\"\xe2\x82(\""), "\"\u{fffd}\u{fffd}(\"");
        // Encoded surrogates and overlong forms are invalid too.
        assert_eq!(
            streamed(b"\"\xed\xa0\x80\xc0\x80\""),
            "\"\u{fffd}\u{fffd}\u{fffd}\u{fffd}\u{fffd}\""
        );
        assert_eq!(streamed("\"é€😀\"".as_bytes()), "\"é€😀\"");
        assert_eq!(streamed(b"\xf0\x9f"), "\u{fffd}\u{fffd}");
    }

    #[test]
    fn lone_surrogate_escapes_become_replacement_escapes() {
        assert_eq!(streamed(br#""\ud800""#), r#""\ufffd""#);
        assert_eq!(streamed(br#""\udc00x""#), r#""\ufffdx""#);
        assert_eq!(streamed(br#""\ud83d\ude00""#), r#""\ud83d\ude00""#);
        assert_eq!(streamed(br#""\ud83d\u0041""#), r#""\ufffd\u0041""#);
        // An escaped backslash is not the start of an escape.
        assert_eq!(streamed(br#""\\ud800""#), r#""\\ud800""#);
        assert_eq!(streamed(br#""\uzzzz""#), r#""\uzzzz""#);
        assert_eq!(streamed(br#""\ud8"#), r#""\ud8"#);
        let v: serde_json::Value = serde_json::from_slice(&go_clean_input(br#""\ud800""#)).unwrap();
        assert_eq!(v, "\u{fffd}");
    }

    #[test]
    fn input_cleanup_matches_gos_decoder() {
        let clean = |b: &[u8]| String::from_utf8(go_clean_input(b).into_owned()).unwrap();
        assert_eq!(clean(br#"{"a":"x"}"#), r#"{"a":"x"}"#);
        // Each invalid byte is one U+FFFD (Rust's lossy conversion would merge E2 82).
        assert_eq!(clean(b"\"a\xE2\x82b\""), "\"a\u{fffd}\u{fffd}b\"");
        assert_eq!(clean(b"\"\xff\""), "\"\u{fffd}\"");
        // Lone surrogates become \ufffd; valid pairs stay.
        assert_eq!(clean(br#""\ud800x""#), r#""\ufffdx""#);
        assert_eq!(clean(br#""\udc00""#), r#""\ufffd""#);
        assert_eq!(clean(br#""\ud83d\ude80""#), r#""\ud83d\ude80""#);
        assert_eq!(clean(br#""\ud800\u0041""#), r#""\ufffd\u0041""#);
        assert_eq!(clean(br#""\\ud800""#), r#""\\ud800""#); // an escaped backslash, not an escape
        let v: serde_json::Value = serde_json::from_slice(&go_clean_input(br#""\ud800""#)).unwrap();
        assert_eq!(v, "\u{fffd}");
    }

    #[test]
    fn clean_input_is_borrowed() {
        assert!(matches!(
            go_clean_input(br#"{"a":"\u00e9"}"#),
            Cow::Borrowed(_)
        ));
    }
}
