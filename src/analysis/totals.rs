//! A total per group, for any number of groups, in bounded memory: a scan's counts per
//! workload, where a pod without an owner is a workload of its own, so a cluster of bare pods
//! has as many as it has pods.
//!
//! The totals of up to [`KEEP`] groups stay in memory. When one more group comes, those are
//! written out, in key order, as a sorted run ([`crate::analysis::runs`]), and memory starts
//! again; a group may then have a part in several runs. Reading merges the runs by key and adds
//! up the parts of each group, so the totals come out as one map in memory would have them.

use std::collections::BTreeMap;
use std::fs::File;
use std::io;

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::analysis::runs::{add_run, read_run, write_run, Items, Merged};

/// How many groups' totals stay in memory (about 130 bytes each for a workload's counts).
pub const KEEP: usize = 50_000;

/// A total that two parts of add up to.
pub trait Add: Sized {
    fn add_part(&mut self, part: Self);
}

/// A total of type `V` per key, in key order.
#[derive(Debug)]
pub struct Totals<V> {
    memory: BTreeMap<String, V>,
    runs: Vec<File>,
    keep: usize,
}

impl<V> Default for Totals<V> {
    fn default() -> Self {
        Totals::with_keep(KEEP)
    }
}

impl<V> Totals<V> {
    /// Totals that keep at most `keep` groups (at least one) in memory.
    pub fn with_keep(keep: usize) -> Self {
        Totals {
            memory: BTreeMap::new(),
            runs: Vec::new(),
            keep: keep.max(1),
        }
    }
}

impl<V> Totals<V>
where
    V: Add + Default + Clone + Serialize + DeserializeOwned + 'static,
{
    /// The total of `key`, to add to; it may first write the totals held so far to disk.
    pub fn entry(&mut self, key: String) -> io::Result<&mut V> {
        if self.memory.len() >= self.keep && !self.memory.contains_key(&key) {
            let held = std::mem::take(&mut self.memory);
            let run = write_run(held.into_iter().map(Ok))?;
            add_run(&mut self.runs, run, by_key::<V>, Summed::new)?;
        }
        Ok(self.memory.entry(key).or_default())
    }

    /// Every key and its total, in key order.
    pub fn iter(&self) -> impl Iterator<Item = io::Result<(String, V)>> + '_ {
        let mut sources: Vec<Items<'_, (String, V)>> = self.runs.iter().map(read_run).collect();
        sources.push(Box::new(
            self.memory.iter().map(|(k, v)| Ok((k.clone(), v.clone()))),
        ));
        Summed::new(Merged::new(sources, by_key))
    }

    /// Whether no key has a total.
    pub fn is_empty(&self) -> bool {
        self.memory.is_empty() && self.runs.is_empty()
    }
}

fn by_key<V>(a: &(String, V), b: &(String, V)) -> std::cmp::Ordering {
    a.0.cmp(&b.0)
}

/// Totals in key order with the parts of each key added up (they come one after another).
struct Summed<I: Iterator> {
    parts: std::iter::Peekable<I>,
}

impl<I: Iterator> Summed<I> {
    fn new(parts: I) -> Self {
        Summed {
            parts: parts.peekable(),
        }
    }
}

impl<V: Add, I: Iterator<Item = io::Result<(String, V)>>> Iterator for Summed<I> {
    type Item = io::Result<(String, V)>;

    fn next(&mut self) -> Option<Self::Item> {
        let (key, mut total) = match self.parts.next()? {
            Ok(part) => part,
            Err(e) => return Some(Err(e)),
        };
        while let Some(part) = self.parts.next_if(|p| matches!(p, Ok((k, _)) if *k == key)) {
            if let Ok((_, v)) = part {
                total.add_part(v);
            }
        }
        Some(Ok((key, total)))
    }
}

/// A JSON or YAML map, key → total, in key order. Reading a run back can fail (I/O); that fails
/// the serializing.
impl<V> Serialize for Totals<V>
where
    V: Add + Default + Clone + Serialize + DeserializeOwned + 'static,
{
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::{Error as _, SerializeMap};
        let mut map = s.serialize_map(None)?;
        for entry in self.iter() {
            let (k, v) = entry.map_err(S::Error::custom)?;
            map.serialize_entry(&k, &v)?;
        }
        map.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    impl Add for u64 {
        fn add_part(&mut self, part: u64) {
            *self += part;
        }
    }

    proptest! {
        /// However little memory keeps (runs merged past FAN_IN included), the totals are a
        /// map's in memory, and serialize as it does.
        #[test]
        fn totals_are_a_maps_in_memory(
            adds in proptest::collection::vec((0u16..400, 1u64..5), 0..600),
            keep in 1usize..30,
        ) {
            let mut totals = Totals::<u64>::with_keep(keep);
            let mut want = BTreeMap::<String, u64>::new();
            for (key, n) in adds {
                let key = format!("ns/Pod/{key}");
                *totals.entry(key.clone()).unwrap() += n;
                *want.entry(key).or_default() += n;
            }
            let got: Vec<(String, u64)> = totals.iter().map(Result::unwrap).collect();
            prop_assert_eq!(&got, &want.clone().into_iter().collect::<Vec<_>>());
            prop_assert_eq!(
                serde_json::to_string_pretty(&totals).unwrap(),
                serde_json::to_string_pretty(&want).unwrap()
            );
            prop_assert_eq!(totals.is_empty(), want.is_empty());
        }
    }
}
