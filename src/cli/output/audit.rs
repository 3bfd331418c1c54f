//! `audit compare`'s report: what became of each container after the upgrade.

use std::io::{self, Write};

use serde_json::Value;

use crate::analysis::audit::{report, Audited, Tally};

use super::table::write_columns;
use super::Render;

/// `audit compare`: what became of each container, against the prediction when there was one.
pub struct AuditReport {
    pub audited: Vec<Audited>,
}

impl Render for AuditReport {
    fn kind(&self) -> Option<&'static str> {
        Some("AuditReport")
    }

    fn document(&self) -> Value {
        report(&self.audited)
    }

    fn table(&self, out: &mut dyn Write) -> io::Result<()> {
        writeln!(out, "{}.", Tally::of(&self.audited).summary())?;
        let mut rows = vec![[
            "CONTAINER",
            "POD",
            "NAME",
            "FATE",
            "PREDICTED",
            "AS PREDICTED",
            "ENDED",
        ]
        .map(String::from)
        .to_vec()];
        for a in &self.audited {
            rows.push(vec![
                a.before.id.chars().take(13).collect(),
                format!("{}/{}", a.before.namespace, a.before.pod),
                a.before.container.clone(),
                a.fate.as_str().to_string(),
                a.predicted.map_or("-".into(), |v| v.as_str().to_string()),
                match a.as_predicted {
                    None => "-".into(),
                    Some(true) => "yes".into(),
                    Some(false) => "NO".into(),
                },
                a.ended.clone().unwrap_or_else(|| "-".into()),
            ]);
        }
        writeln!(out)?;
        write_columns(&rows, out)
    }
}
