//! `audit compare`'s report: what became of each container after the upgrade.

use std::io::{self, Write};

use serde_json::{json, Value};

use crate::analysis::audit::{Audited, Fate};

use super::table::write_columns;
use super::{to_value, Render};

/// `audit compare`: what became of each container, against the prediction when there was one.
pub struct AuditReport {
    pub audited: Vec<Audited>,
}

impl AuditReport {
    fn count(&self, f: Fate) -> usize {
        self.audited.iter().filter(|a| a.fate == f).count()
    }
}

impl Render for AuditReport {
    fn kind(&self) -> Option<&'static str> {
        Some("AuditReport")
    }

    fn document(&self) -> Value {
        json!({
            "counts": {
                "kept": self.count(Fate::Kept),
                "restarted": self.count(Fate::Restarted),
                "recreated": self.count(Fate::Recreated),
                "gone": self.count(Fate::Gone),
            },
            "mispredicted": self.audited.iter().filter(|a| a.as_predicted == Some(false)).count(),
            "containers": to_value(&self.audited),
        })
    }

    fn table(&self, out: &mut dyn Write) -> io::Result<()> {
        writeln!(
            out,
            "{} containers ran before: {} kept, {} restarted, {} recreated with their pod, {} gone.",
            self.audited.len(),
            self.count(Fate::Kept),
            self.count(Fate::Restarted),
            self.count(Fate::Recreated),
            self.count(Fate::Gone)
        )?;
        let mut rows = vec![[
            "CONTAINER",
            "POD",
            "NAME",
            "FATE",
            "PREDICTED",
            "AS PREDICTED",
        ]
        .map(String::from)
        .to_vec()];
        for a in &self.audited {
            rows.push(vec![
                a.before.id.chars().take(13).collect(),
                format!("{}/{}", a.before.namespace, a.before.pod),
                a.before.container.clone(),
                to_value(&a.fate).as_str().unwrap_or("").to_string(),
                a.predicted.map_or("-".into(), |v| v.as_str().to_string()),
                match a.as_predicted {
                    None => "-".into(),
                    Some(true) => "yes".into(),
                    Some(false) => "NO".into(),
                },
            ]);
        }
        writeln!(out)?;
        write_columns(&rows, out)
    }
}
