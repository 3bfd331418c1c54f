//! The columns of every table for people: widths by visible length, colours only on a terminal,
//! and counted nouns.

use std::io::{self, Write};

use super::for_people;

/// Left-aligned columns, two spaces apart, trailing space trimmed.
pub(super) fn write_columns(rows: &[Vec<String>], out: &mut dyn Write) -> io::Result<()> {
    let n = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..n)
        .map(|i| {
            rows.iter()
                .filter_map(|r| r.get(i))
                .map(|c| visible_len(c))
                .max()
                .unwrap_or(0)
        })
        .collect();
    for r in rows {
        write_row(r, &widths, out)?;
    }
    Ok(())
}

/// `n` and the noun, plural unless `n` is 1 ("1 restart", "5 restarts").
pub(super) fn counted(n: u64, noun: &str) -> String {
    match n {
        1 => format!("1 {noun}"),
        _ => format!("{n} {noun}s"),
    }
}

/// Colours for people: only when standard output is a terminal and `NO_COLOR` is not set
/// (<https://no-color.org>).
pub(super) fn colour() -> bool {
    use std::io::IsTerminal;
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| {
        io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
    })
}

/// `text` in red (1), green (2) or yellow (3) when [`colour`] says so.
pub(super) fn paint(text: String, ansi: u8) -> String {
    if colour() {
        format!("\x1b[3{ansi}m{text}\x1b[0m")
    } else {
        text
    }
}

/// The width a cell takes on screen, as [`write_row`] shows it: its characters, without colour
/// escapes.
pub(super) fn visible_len(s: &str) -> usize {
    shown_len(&shown(s))
}

/// The width of text already [`shown`]: its characters, without kubehash's colour escapes.
fn shown_len(shown: &str) -> usize {
    let mut n = 0;
    let mut escape = false;
    for ch in shown.chars() {
        match (escape, ch) {
            (false, '\x1b') => escape = true,
            (true, 'm') => escape = false,
            (true, _) => {}
            (false, _) => n += 1,
        }
    }
    n
}

/// A cell as people see it: one line, what it holds of other people's text shown and not obeyed
/// ([`for_people`]), kubehash's own colours kept.
fn shown(cell: &str) -> std::borrow::Cow<'_, str> {
    for_people(cell, colour(), false)
}

pub(super) fn write_row(cells: &[String], widths: &[usize], out: &mut dyn Write) -> io::Result<()> {
    let mut line = String::new();
    for (i, c) in cells.iter().enumerate() {
        let c = shown(c);
        line.push_str(&c);
        if i + 1 < cells.len() {
            line.push_str(&" ".repeat(widths[i].saturating_sub(shown_len(&c)) + 2));
        }
    }
    writeln!(out, "{}", line.trim_end())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_count_of_one_is_singular() {
        assert_eq!(counted(1, "static pod"), "1 static pod");
        assert_eq!(counted(0, "restart"), "0 restarts");
        assert_eq!(counted(5, "restart"), "5 restarts");
    }
}
