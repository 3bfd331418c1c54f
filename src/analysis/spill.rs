//! Records kept in input order in bounded memory (a scan's containers, the objects it could not
//! read as pods): in memory up to a count, then in an anonymous temporary file, written and
//! read back as the runs of [`crate::analysis::runs`] are.

use std::io::Write;

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::analysis::runs::read_run;
use crate::analysis::scan::ContainerImpact;

/// How many records stay in memory before they go to a temporary file.
pub const SPILL_AFTER: usize = 50_000;

/// A scan's per-container details.
pub type Details = Spill<ContainerImpact>;

/// Records in input order: in memory up to [`SPILL_AFTER`], then appended to an anonymous
/// temporary file as JSON lines (removed by the OS when dropped), so that a command reading any
/// number of containers runs in bounded memory.
#[derive(Debug)]
pub struct Spill<T> {
    memory: Vec<T>,
    spill: Option<std::io::BufWriter<std::fs::File>>,
    len: usize,
    spill_after: usize,
}

impl<T> Default for Spill<T> {
    fn default() -> Self {
        Spill::with_spill_after(SPILL_AFTER)
    }
}

impl<T> Spill<T> {
    /// Keeps at most `n` details in memory.
    pub fn with_spill_after(n: usize) -> Self {
        Spill {
            memory: Vec::new(),
            spill: None,
            len: 0,
            spill_after: n,
        }
    }

    pub fn push(&mut self, c: T) -> std::io::Result<()>
    where
        T: Serialize,
    {
        self.len += 1;
        if self.spill.is_none() && self.memory.len() < self.spill_after {
            self.memory.push(c);
            return Ok(());
        }
        if self.spill.is_none() {
            self.spill = Some(std::io::BufWriter::new(tempfile::tempfile()?));
        }
        if let Some(w) = &mut self.spill {
            serde_json::to_writer(&mut *w, &c)?;
            w.write_all(b"\n")?;
        }
        Ok(())
    }

    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether details went to disk.
    pub fn spilled(&self) -> bool {
        self.spill.is_some()
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Every record, in order. Reading back spilled records can fail (I/O).
    pub fn iter(&self) -> impl Iterator<Item = std::io::Result<T>> + '_
    where
        T: Clone + DeserializeOwned,
    {
        let spilled = self.spill.as_ref().map(|w| read_run(w.get_ref()));
        self.memory
            .iter()
            .cloned()
            .map(Ok)
            .chain(spilled.into_iter().flatten())
    }

    /// Flushes spilled records so that [`Spill::iter`] sees all of them.
    pub fn finish(&mut self) -> std::io::Result<()> {
        match &mut self.spill {
            Some(w) => w.flush(),
            None => Ok(()),
        }
    }
}

impl<T: Serialize + Clone + DeserializeOwned> Serialize for Spill<T> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        use serde::ser::{Error as _, SerializeSeq};
        let mut seq = s.serialize_seq(Some(self.len))?;
        for c in self.iter() {
            seq.serialize_element(&c.map_err(S::Error::custom)?)?;
        }
        seq.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_come_back_in_order_from_memory_and_disk_to_each_reader() {
        let mut s = Spill::with_spill_after(2);
        for n in 0..5u32 {
            s.push(n).unwrap();
        }
        s.finish().unwrap();
        assert!(s.spilled());
        assert_eq!(s.len(), 5);
        // Two readers at once: each has its own place in the file.
        let pairs: Vec<(u32, u32)> = s
            .iter()
            .zip(s.iter())
            .map(|(a, b)| (a.unwrap(), b.unwrap()))
            .collect();
        assert_eq!(pairs, (0..5).map(|n| (n, n)).collect::<Vec<_>>());
    }
}
