//! Label selectors on pods read from files, as the API server applies them with `--cluster`:
//! `key=value`, `key==value`, `key!=value`, `key` and `!key`, comma-separated, all must hold.
//! Set-based terms (`in`, `notin`) are left to the API server: they are refused here.

use serde_json::Value;

use crate::error::{Error, Result};

#[derive(Debug, Clone, PartialEq, Eq)]
enum Term {
    Equals(String, String),
    NotEquals(String, String),
    Exists(String),
    Absent(String),
}

/// A parsed label selector.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Selector(Vec<Term>);

impl Selector {
    pub fn parse(text: &str) -> Result<Selector> {
        let bad = |reason: String| Error::Input {
            source_name: "--selector".into(),
            reason,
        };
        let mut terms = Vec::new();
        for t in text.split(',').map(str::trim).filter(|t| !t.is_empty()) {
            if t.contains(" in ") || t.contains(" notin ") || t.contains('(') {
                return Err(bad(format!(
                    "{t:?}: set-based terms are applied by the API server; use --cluster"
                )));
            }
            let term = if let Some((k, v)) = t.split_once("!=") {
                Term::NotEquals(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = t.split_once("==").or_else(|| t.split_once('=')) {
                Term::Equals(k.trim().into(), v.trim().into())
            } else if let Some(k) = t.strip_prefix('!') {
                Term::Absent(k.trim().into())
            } else {
                Term::Exists(t.into())
            };
            terms.push(term);
        }
        Ok(Selector(terms))
    }

    /// Whether the object's `metadata.labels` match.
    pub fn matches(&self, object: &Value) -> bool {
        let label = |k: &str| {
            object
                .pointer("/metadata/labels")
                .and_then(|l| l.get(k))
                .and_then(Value::as_str)
        };
        self.0.iter().all(|t| match t {
            Term::Equals(k, v) => label(k) == Some(v.as_str()),
            Term::NotEquals(k, v) => label(k) != Some(v.as_str()),
            Term::Exists(k) => label(k).is_some(),
            Term::Absent(k) => label(k).is_none(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn equality_and_existence_terms() {
        let pod = json!({"metadata": {"labels": {"app": "web", "tier": "front"}}});
        let m = |s: &str| Selector::parse(s).unwrap().matches(&pod);
        assert!(m("app=web") && m("app==web,tier") && m("tier!=db") && m("!canary") && m(""));
        assert!(!m("app=db") && !m("canary") && !m("!tier") && !m("tier!=front"));
        assert!(Selector::parse("app in (web)").is_err());
    }
}
