//! Label selectors on pods read from files, parsed and matched as apimachinery's `labels.Parse`
//! parses and matches them for the API server with `--cluster` (`pkg/labels/selector.go`):
//! `key=value`, `key==value`, `key!=value`, `key in (a,b)`, `key notin (a,b)`, `key`, `!key`,
//! `key>1`, `key<1`, comma-separated, all must hold. A selector the API server would refuse is
//! refused, naming the first term at fault, never read as one that matches nothing.

use serde_json::Value;

use crate::error::{Error, Result};
use crate::source::names::{label_key, label_value};

/// How a requirement relates a label to its values (`selection.Operator`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    /// `=`, `==` and `in`: the label is there and holds one of the values.
    In,
    /// `!=` and `notin`: the label is absent or holds none of the values.
    NotIn,
    Exists,
    DoesNotExist,
    /// `>` and `<`: the label is there, an integer, and above (below) the one value.
    Gt,
    Lt,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Requirement {
    key: String,
    op: Op,
    values: Vec<String>,
}

/// A parsed label selector. The empty selector matches every object.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Selector(Vec<Requirement>);

/// A token of the selector lexer (`labels.Lexer`): operators are the longest of `==`, `!=` or one
/// of `=!()<>,`; anything else up to white space or an operator is an identifier, and `in` and
/// `notin` are keywords where an operator is expected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tok<'a> {
    End,
    Ident(&'a str),
    In,
    NotIn,
    Not,
    Equals,
    DoubleEquals,
    NotEquals,
    Gt,
    Lt,
    Open,
    Close,
    Comma,
}

impl Tok<'_> {
    /// The token as the selector spells it, for messages.
    fn text(self) -> String {
        let s = match self {
            Tok::End => return "the end".into(),
            Tok::Ident(s) => return format!("{s:?}"),
            Tok::In => "in",
            Tok::NotIn => "notin",
            Tok::Not => "!",
            Tok::Equals => "=",
            Tok::DoubleEquals => "==",
            Tok::NotEquals => "!=",
            Tok::Gt => ">",
            Tok::Lt => "<",
            Tok::Open => "(",
            Tok::Close => ")",
            Tok::Comma => ",",
        };
        format!("'{s}'")
    }
}

/// The identifier a token is where a key or a value is expected: there `in` and `notin` are
/// identifiers too (the parser's `Values` context).
fn word(tok: Tok<'_>) -> Option<&str> {
    match tok {
        Tok::Ident(s) => Some(s),
        Tok::In => Some("in"),
        Tok::NotIn => Some("notin"),
        _ => None,
    }
}

/// A requirement starts with a key or `!`.
fn starts_requirement(tok: Tok<'_>) -> bool {
    tok == Tok::Not || word(tok).is_some()
}

fn found(tok: Tok<'_>, expected: &str) -> String {
    format!("found {}, expected {expected}", tok.text())
}

/// `labels.isWhitespace`.
fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\r' | b'\n')
}

/// `labels.isSpecialSymbol`.
fn is_special(b: u8) -> bool {
    matches!(b, b'=' | b'!' | b'(' | b')' | b',' | b'>' | b'<')
}

/// The selector's tokens, ending with [`Tok::End`].
fn lex(s: &str) -> Vec<Tok<'_>> {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    loop {
        while i < b.len() && is_space(b[i]) {
            i += 1;
        }
        let Some(&c) = b.get(i) else {
            out.push(Tok::End);
            return out;
        };
        if is_special(c) {
            let two = matches!(b.get(i..i + 2), Some(b"==") | Some(b"!="));
            out.push(match (c, two) {
                (b'=', true) => Tok::DoubleEquals,
                (b'!', true) => Tok::NotEquals,
                (b'=', _) => Tok::Equals,
                (b'!', _) => Tok::Not,
                (b'(', _) => Tok::Open,
                (b')', _) => Tok::Close,
                (b',', _) => Tok::Comma,
                (b'>', _) => Tok::Gt,
                _ => Tok::Lt,
            });
            i += if two { 2 } else { 1 };
            continue;
        }
        let start = i;
        while i < b.len() && !is_special(b[i]) && !is_space(b[i]) {
            i += 1;
        }
        // Both ends are ASCII delimiters or the ends of the text: a char boundary.
        out.push(match &s[start..i] {
            "in" => Tok::In,
            "notin" => Tok::NotIn,
            word => Tok::Ident(word),
        });
    }
}

/// The recursive-descent parser of `labels.Parser`, over the lexed tokens.
struct Parser<'a> {
    toks: Vec<Tok<'a>>,
    at: usize,
}

type Parsed<T> = std::result::Result<T, String>;

impl<'a> Parser<'a> {
    fn peek(&self) -> Tok<'a> {
        self.toks[self.at.min(self.toks.len() - 1)]
    }

    fn next(&mut self) -> Tok<'a> {
        let t = self.peek();
        self.at += 1;
        t
    }

    /// `<requirement> ["," <requirement>]…`, or nothing.
    fn selector(&mut self) -> Parsed<Vec<Requirement>> {
        let mut out = Vec::new();
        loop {
            match self.peek() {
                Tok::End => return Ok(out),
                t if starts_requirement(t) => out.push(self.requirement()?),
                t => return Err(found(t, "'!', a label key, or the end")),
            }
            match self.next() {
                Tok::End => return Ok(out),
                Tok::Comma if starts_requirement(self.peek()) => {}
                Tok::Comma => return Err(found(self.peek(), "a label key after ','")),
                t => return Err(found(t, "',' or the end")),
            }
        }
    }

    /// `[!] KEY [<operator> <values>]`, checked as `labels.NewRequirement` checks it.
    fn requirement(&mut self) -> Parsed<Requirement> {
        let absent = self.peek() == Tok::Not;
        if absent {
            self.at += 1;
        }
        let t = self.next();
        let key = word(t).ok_or_else(|| found(t, "a label key"))?;
        label_key(key)?;
        let (op, values) = if absent {
            (Op::DoesNotExist, Vec::new())
        } else if matches!(self.peek(), Tok::End | Tok::Comma) {
            (Op::Exists, Vec::new())
        } else {
            match self.next() {
                Tok::In => (Op::In, self.value_set()?),
                Tok::NotIn => (Op::NotIn, self.value_set()?),
                Tok::Equals | Tok::DoubleEquals => (Op::In, vec![self.exact_value()?]),
                Tok::NotEquals => (Op::NotIn, vec![self.exact_value()?]),
                Tok::Gt => (Op::Gt, vec![self.exact_value()?]),
                Tok::Lt => (Op::Lt, vec![self.exact_value()?]),
                t => return Err(found(t, "in, notin, =, ==, !=, > or <")),
            }
        };
        if matches!(op, Op::Gt | Op::Lt) && values[0].parse::<i64>().is_err() {
            return Err(format!(
                "{key:?}: '>' and '<' compare with an integer, got {:?}",
                values[0]
            ));
        }
        for v in &values {
            label_value(key, v)?;
        }
        Ok(Requirement {
            key: key.to_string(),
            op,
            values,
        })
    }

    /// `(a,b,…)`, where an empty entry is the empty value (`parseValues`,
    /// `parseIdentifiersList`).
    fn value_set(&mut self) -> Parsed<Vec<String>> {
        let t = self.next();
        if t != Tok::Open {
            return Err(found(t, "'('"));
        }
        match self.peek() {
            Tok::Close => {
                self.at += 1;
                return Ok(vec![String::new()]);
            }
            Tok::Comma => {}
            t if word(t).is_some() => {}
            t => return Err(found(t, "',', ')' or a value")),
        }
        let mut values = Vec::new();
        loop {
            let t = self.next();
            if let Some(v) = word(t) {
                values.push(v.to_string());
                match self.peek() {
                    Tok::Comma => {}
                    Tok::Close => break,
                    t => return Err(found(t, "',' or ')'")),
                }
            } else if t == Tok::Comma {
                if values.is_empty() {
                    values.push(String::new()); // `(,`
                }
                match self.peek() {
                    Tok::Close => {
                        values.push(String::new()); // `,)`
                        break;
                    }
                    Tok::Comma => {
                        // `,,`: the second comma is taken with the first, so `(a,,)` ends on a
                        // `)` where a value or a comma must come, and is refused.
                        self.at += 1;
                        values.push(String::new());
                    }
                    _ => {}
                }
            } else {
                return Err(found(t, "',' or a value"));
            }
        }
        self.at += 1; // the `)`
        values.sort();
        values.dedup();
        Ok(values)
    }

    /// The one value after `=`, `==`, `!=`, `>` or `<`; none is the empty value
    /// (`parseExactValue`).
    fn exact_value(&mut self) -> Parsed<String> {
        if matches!(self.peek(), Tok::End | Tok::Comma) {
            return Ok(String::new());
        }
        let t = self.next();
        word(t)
            .map(str::to_string)
            .ok_or_else(|| found(t, "a value"))
    }
}

impl Selector {
    /// Parses a selector as `labels.Parse` does, refusing what it refuses.
    pub fn parse(text: &str) -> Result<Selector> {
        let mut parser = Parser {
            toks: lex(text),
            at: 0,
        };
        parser.selector().map(Selector).map_err(|why| Error::Input {
            source_name: "--selector".into(),
            reason: format!("{text:?}: {why}"),
        })
    }

    /// Whether the object's `metadata.labels` match (`Requirement.Matches`).
    pub fn matches(&self, object: &Value) -> bool {
        let label = |k: &str| {
            object
                .pointer("/metadata/labels")
                .and_then(|l| l.get(k))
                .and_then(Value::as_str)
        };
        let int = |v: &str| v.parse::<i64>().ok();
        self.0.iter().all(|r| {
            let has = |v: &str| r.values.iter().any(|w| w == v);
            match (r.op, label(&r.key)) {
                (Op::In, l) => l.is_some_and(has),
                (Op::NotIn, l) => !l.is_some_and(has),
                (Op::Exists, l) => l.is_some(),
                (Op::DoesNotExist, l) => l.is_none(),
                (Op::Gt | Op::Lt, None) => false,
                (op, Some(l)) => match (int(l), int(&r.values[0])) {
                    (Some(l), Some(v)) => (op == Op::Gt && l > v) || (op == Op::Lt && l < v),
                    _ => false,
                },
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn matches(selector: &str, labels: Value) -> bool {
        Selector::parse(selector)
            .unwrap_or_else(|e| panic!("{selector:?}: {e}"))
            .matches(&json!({"metadata": {"labels": labels}}))
    }

    fn refusal(selector: &str) -> String {
        match Selector::parse(selector) {
            Ok(s) => panic!("{selector:?} was accepted: {s:?}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn equality_and_existence_terms() {
        let l = json!({"app": "web", "tier": "front"});
        for s in [
            "app=web",
            "app==web,tier",
            "tier!=db",
            "!canary",
            "",
            "  app = web ",
            "app!=db",
        ] {
            assert!(matches(s, l.clone()), "{s}");
        }
        for s in ["app=db", "canary", "!tier", "tier!=front", "app=web,canary"] {
            assert!(!matches(s, l.clone()), "{s}");
        }
    }

    #[test]
    fn set_based_terms_match_as_the_api_server_matches_them() {
        let l = json!({"app": "web", "tier": "", "rank": "10"});
        for s in [
            "app in (web,db)",
            "app in(web)",
            "app notin (db)",
            "canary notin (x)",
            "tier in (,x)",
            "tier in ()",
            "tier in (x,)",
            "tier in (x,,y)",
            "tier in (x,,,)",
            "tier in (,,,)",
            "tier in (,,,,,y)",
            "app in (in, web)",
            "rank>9",
            "rank<11",
            "rank > 009",
            "tier=",
            "tier==",
            "tier,app",
        ] {
            assert!(matches(s, l.clone()), "{s}");
        }
        for s in [
            "app in (db)",
            "app notin (web)",
            "canary in (x)",
            "tier in (x)",
            "rank>10",
            "rank<10",
            "app>1",
            "canary<100",
            "app=",
        ] {
            assert!(!matches(s, l.clone()), "{s}");
        }
    }

    #[test]
    fn in_and_notin_are_keys_or_values_where_one_is_expected() {
        assert!(matches("in=notin", json!({"in": "notin"})));
        assert!(matches("notin in (in)", json!({"notin": "in"})));
        assert!(matches("!in", json!({})));
    }

    #[test]
    fn what_the_api_server_refuses_is_refused_naming_the_term() {
        for (s, says) in [
            ("a,", "found the end, expected a label key after ','"),
            (",a", "found ',', expected '!', a label key, or the end"),
            ("a=b,,c=d", "found ',', expected a label key after ','"),
            ("a=b=c", "found '=', expected ',' or the end"),
            ("a=b c", "found \"c\", expected ',' or the end"),
            ("A B", "found \"B\", expected in, notin"),
            ("=b", "found '=', expected '!', a label key, or the end"),
            ("a===b", "found '=', expected a value"),
            ("a=(b)", "found '(', expected a value"),
            ("a in b", "found \"b\", expected '('"),
            ("a in (b", "found the end, expected ',' or ')'"),
            ("a in (b c)", "found \"c\", expected ',' or ')'"),
            ("a in (=)", "found '=', expected ',', ')' or a value"),
            ("a in (b,", "found the end, expected ',' or a value"),
            ("a in (b,,)", "found ')', expected ',' or a value"),
            ("a in (,,)", "found ')', expected ',' or a value"),
            ("a in (b,,,,)", "found ')', expected ',' or a value"),
            ("!a=b", "found '=', expected ',' or the end"),
            ("!!a", "found '!', expected a label key"),
            ("a/b/c=d", "at most one '/'"),
            ("/a", "the prefix before '/' is empty"),
            ("Example.com/a", "is not a DNS subdomain"),
            ("example.com/", "the name is empty"),
            ("-a", "beginning and ending alphanumeric"),
            ("a=b$", "is not a label value"),
            ("a in (x,-y)", "\"-y\" is not a label value"),
            ("a>x", "compare with an integer"),
            ("a<99999999999999999999", "compare with an integer"),
            ("a>", "compare with an integer"),
            ("a>-1", "is not a label value"),
        ] {
            let err = refusal(s);
            assert!(err.contains(says), "{s:?}: {err}");
            assert!(err.starts_with(&format!("--selector: {s:?}: ")), "{err}");
        }
        let long = "x".repeat(64);
        assert!(refusal(&long).contains("longer than 63"));
        assert!(refusal(&format!("a={long}")).contains("longer than 63"));
        assert!(refusal(&format!("{}.com/a", "x".repeat(250))).contains("DNS subdomain"));
        // At the limits, accepted.
        let name = "x".repeat(63);
        assert!(matches(
            &format!("{name}={name}"),
            json!({ name.clone(): name })
        ));
        assert!(matches("a.b-c_d=A.b-C_9", json!({"a.b-c_d": "A.b-C_9"})));
        assert!(matches(
            "kubernetes.io/os=linux",
            json!({"kubernetes.io/os": "linux"})
        ));
    }

    proptest::proptest! {
        /// Any text of the selector's symbols, words and keywords parses or is refused, never
        /// panics; what parses re-parses alike from its canonical spelling.
        #[test]
        fn random_selectors_parse_or_are_refused(
            parts in proptest::collection::vec(
                proptest::sample::select(vec![
                    "a", "b.c/d", "in", "notin", "9", "-", "=", "==", "!", "!=", "(", ")", ",", ">",
                    "<", " ", "\t", "é", "$",
                ]),
                0..14,
            )
        ) {
            let text = parts.concat();
            if let Ok(sel) = Selector::parse(&text) {
                let again = Selector::parse(&spelled(&sel)).unwrap();
                proptest::prop_assert_eq!(again, sel);
            }
        }
    }

    /// A selector as `Requirement.String` spells it.
    fn spelled(sel: &Selector) -> String {
        let term = |r: &Requirement| match r.op {
            Op::Exists => r.key.clone(),
            Op::DoesNotExist => format!("!{}", r.key),
            Op::In => format!("{} in ({})", r.key, r.values.join(",")),
            Op::NotIn => format!("{} notin ({})", r.key, r.values.join(",")),
            Op::Gt => format!("{}>{}", r.key, r.values[0]),
            Op::Lt => format!("{}<{}", r.key, r.values[0]),
        };
        sel.0.iter().map(term).collect::<Vec<_>>().join(",")
    }

    #[test]
    fn tokens_are_the_longest_operator_then_single_symbols() {
        assert_eq!(lex("a!==b")[1], Tok::NotEquals);
        assert_eq!(lex("a!==b")[2], Tok::Equals);
        assert_eq!(lex("a===b")[1..3], [Tok::DoubleEquals, Tok::Equals]);
        assert_eq!(lex(" in\tnotin\n"), [Tok::In, Tok::NotIn, Tok::End]);
        assert_eq!(
            lex("é=ü")[..],
            [Tok::Ident("é"), Tok::Equals, Tok::Ident("ü"), Tok::End]
        );
    }
}
