//! Text for a person's terminal holds no control characters it did not mean. Tables and messages
//! carry other people's strings: a pod's image is any text the API server takes (it refuses only
//! white space at the ends), and names read from files are any text. An escape sequence there
//! would act on the operator's terminal: erase the line that says "drain needed", move the
//! cursor over a row, set the title, write the clipboard. kubectl escapes them for the same
//! reason (CVE-2021-25743, kubernetes/kubernetes#112553). Here every control character (C0, DEL,
//! C1) and every bidirectional-text or line-separator control is written as a visible escape
//! (`\u{1b}`, `\r`), except a line's end and the colours kubehash paints itself. JSON and YAML
//! keep strings as they are: they are for programs, and escape them in their own syntax.

use std::borrow::Cow;
use std::io::{self, Write};

/// The colours [`super::table::paint`] writes: the only escape sequences passed on, and only
/// where it paints.
const PAINT: [&str; 4] = ["\x1b[31m", "\x1b[32m", "\x1b[33m", "\x1b[0m"];

/// Whether `c` is written escaped: a control character other than a line's end, or one that
/// reorders or breaks the text around it on screen.
fn unsafe_char(c: char) -> bool {
    (c.is_control() && c != '\n')
        || matches!(c, '\u{200e}' | '\u{200f}' | '\u{2028}' | '\u{2029}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// `text` with every unsafe character escaped, and also `\n` unless `lines`; kubehash's own
/// colours kept where `paint`.
pub(crate) fn for_people(text: &str, paint: bool, lines: bool) -> Cow<'_, str> {
    let unsafe_at = |c: char| unsafe_char(c) || (c == '\n' && !lines);
    if !text.chars().any(unsafe_at) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    let mut rest = text;
    while let Some(c) = rest.chars().next() {
        if let Some(code) = PAINT.iter().find(|p| paint && rest.starts_with(**p)) {
            out.push_str(code);
            rest = &rest[code.len()..];
            continue;
        }
        match c {
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            '\n' if !lines => out.push_str("\\n"),
            c if unsafe_at(c) => out.push_str(&format!("\\u{{{:x}}}", u32::from(c))),
            c => out.push(c),
        }
        rest = &rest[c.len_utf8()..];
    }
    Cow::Owned(out)
}

/// A writer for people: what is written passes through [`for_people`] a line at a time (a line
/// is held until its end, or a flush), so an escape sequence split across writes is still seen
/// whole.
pub(crate) struct ForPeople<'w> {
    inner: &'w mut dyn Write,
    line: Vec<u8>,
    paint: bool,
}

impl<'w> ForPeople<'w> {
    pub(crate) fn new(inner: &'w mut dyn Write, paint: bool) -> ForPeople<'w> {
        ForPeople {
            inner,
            line: Vec::new(),
            paint,
        }
    }

    /// Writes out the held bytes up to `end`.
    fn pass(&mut self, end: usize) -> io::Result<()> {
        let held: Vec<u8> = self.line.drain(..end).collect();
        // kubehash writes UTF-8 (a byte that is not would show as U+FFFD).
        let text = String::from_utf8_lossy(&held);
        self.inner
            .write_all(for_people(&text, self.paint, true).as_bytes())
    }
}

impl Write for ForPeople<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.line.extend_from_slice(buf);
        if let Some(last) = self.line.iter().rposition(|&b| b == b'\n') {
            self.pass(last + 1)?;
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.pass(self.line.len())?;
        self.inner.flush()
    }
}

impl Drop for ForPeople<'_> {
    fn drop(&mut self) {
        // What a caller did not flush: written out as flushing would (a write error has
        // nowhere to go here, and the inner writer reports it on its own flush).
        let _ = self.pass(self.line.len());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_and_reordering_characters_are_shown_not_obeyed() {
        for (text, want) in [
            ("web", "web"),
            ("nginx:1.25 é 😀", "nginx:1.25 é 😀"),
            ("i\x1b[2K\rdrain", "i\\u{1b}[2K\\rdrain"),
            ("t\x1b]0;title\x07", "t\\u{1b}]0;title\\u{7}"),
            ("a\tb\x7f\u{9b}c", "a\\tb\\u{7f}\\u{9b}c"),
            ("abc\u{202e}fed\u{2066}", "abc\\u{202e}fed\\u{2066}"),
            ("two\nlines\u{2028}", "two\\nlines\\u{2028}"),
        ] {
            assert_eq!(for_people(text, false, false), want, "{text:?}");
        }
        assert_eq!(for_people("a\nb\n", false, true), "a\nb\n");
    }

    #[test]
    fn only_kubehash_s_own_colours_pass_and_only_where_it_paints() {
        let painted = "\x1b[31mdrain needed\x1b[0m";
        assert_eq!(for_people(painted, true, false), painted);
        assert_eq!(
            for_people(painted, false, false),
            "\\u{1b}[31mdrain needed\\u{1b}[0m"
        );
        // Black on black, conceal, and a colour that is not one kubehash paints.
        for foreign in ["\x1b[30m", "\x1b[8m", "\x1b[34m", "\x1b[31;8m"] {
            assert!(
                !for_people(foreign, true, false).contains('\x1b'),
                "{foreign:?}"
            );
        }
    }

    #[test]
    fn the_writer_escapes_what_arrives_in_pieces() {
        let mut out = Vec::new();
        {
            let mut w = ForPeople::new(&mut out, true);
            for piece in [
                &b"row \x1b"[..],
                b"[31m",
                b"red\x1b[0m \x1b",
                b"[2K\n",
                b"\xF0\x9F",
                b"\x98\x80 tail",
            ] {
                w.write_all(piece).unwrap();
            }
            w.flush().unwrap();
        }
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "row \x1b[31mred\x1b[0m \\u{1b}[2K\n😀 tail"
        );
    }
}
