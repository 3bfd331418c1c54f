//! The restart matrix: for a set of containers and every pair of kubelet versions (A, B), how many
//! containers an in-place upgrade A → B would recreate (their hashes differ).
//!
//! Each container is hashed once for all versions; pairs are then compared. Containers that
//! cannot be hashed are counted apart.

use std::collections::HashSet;

use serde::Serialize;
use serde_json::Value;

use crate::analysis::cache::Memo;
use crate::kubelet::hash::hash_container;
use crate::kubelet::version::KubeletVersion;

/// Changed-container counts for every ordered pair of versions.
#[derive(Debug, Clone, Serialize)]
pub struct RestartMatrix {
    pub versions: Vec<String>,
    /// Containers hashed (distinct specs are hashed once but counted each time).
    pub containers: u64,
    /// Containers that could not be hashed (bad specs); not in the counts.
    pub errors: u64,
    /// `changed[i][j]`: containers whose hash differs between `versions[i]` and `versions[j]`.
    pub changed: Vec<Vec<u64>>,
    #[serde(skip)]
    seen: Memo<String, Option<Vec<u32>>>,
    #[serde(skip)]
    order: Vec<KubeletVersion>,
}

impl RestartMatrix {
    pub fn new(versions: &[KubeletVersion]) -> Self {
        RestartMatrix {
            versions: versions.iter().map(ToString::to_string).collect(),
            containers: 0,
            errors: 0,
            changed: vec![vec![0; versions.len()]; versions.len()],
            seen: Default::default(),
            order: versions.to_vec(),
        }
    }

    /// Adds one container spec.
    pub fn add(&mut self, container: &Value) {
        let key = container.to_string();
        let hashes = match self.seen.get(&key) {
            Some(h) => h.clone(),
            None => {
                let h = hash_container(container, &self.order, "")
                    .ok()
                    .map(|h| h.hash.iter().map(|(_, x)| *x).collect::<Vec<u32>>());
                self.seen.insert(key, h.clone());
                h
            }
        };
        let Some(h) = hashes else {
            self.errors += 1;
            return;
        };
        self.containers += 1;
        for i in 0..h.len() {
            for j in 0..h.len() {
                if h[i] != h[j] {
                    self.changed[i][j] += 1;
                }
            }
        }
    }

    /// The rows people usually want: each step to the next listed version, then the first to
    /// the last. `(from, to, changed)`.
    pub fn steps(&self) -> Vec<(String, String, u64)> {
        let n = self.versions.len();
        let mut out: Vec<(usize, usize)> = (1..n).map(|i| (i - 1, i)).collect();
        if n > 2 {
            out.push((0, n - 1));
        }
        let mut seen = HashSet::new();
        out.into_iter()
            .filter(|p| seen.insert(*p))
            .map(|(i, j)| {
                (
                    self.versions[i].clone(),
                    self.versions[j].clone(),
                    self.changed[i][j],
                )
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kubelet::version::parse_version_set;
    use serde_json::json;

    #[test]
    fn epoch_boundaries_change_everything() {
        let vs = parse_version_set("1.15,1.16,1.30,1.31").unwrap();
        let mut m = RestartMatrix::new(&vs);
        m.add(&json!({"name":"a","image":"b"}));
        m.add(&json!({"name":"a","image":"b"}));
        m.add(&json!({"name":"a","tty":"x"}));
        assert_eq!((m.containers, m.errors), (2, 1));
        let steps = m.steps();
        assert_eq!(steps[0], ("1.15".into(), "1.16".into(), 2));
        assert_eq!(steps[2], ("1.30".into(), "1.31".into(), 2));
        assert_eq!(steps[3], ("1.15".into(), "1.31".into(), 2));
    }
}
