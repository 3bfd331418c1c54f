//! Sorting more items than memory should hold: sorted runs of them in anonymous temporary
//! files, merged back in order. A large scan's tables (a total per workload, rows sorted by a
//! column) are made this way in bounded memory; a few thousand items never leave memory.
//!
//! ```
//! use kubehash::analysis::runs::Sorter;
//! let mut s = Sorter::new(2, |a: &u32, b: &u32| a.cmp(b));
//! for n in [5, 3, 9, 1, 3] {
//!     s.push(n).unwrap();
//! }
//! let sorted: Vec<u32> = s.sorted().map(Result::unwrap).collect();
//! assert_eq!(sorted, [1, 3, 3, 5, 9]);
//! ```

use std::cmp::Ordering;
use std::fs::File;
use std::io::{self, BufRead, BufReader, BufWriter, Read, Write};
use std::os::unix::fs::FileExt;

use serde::de::DeserializeOwned;
use serde::Serialize;

/// How many runs are merged at once: when a sorter or a total has this many, they are merged
/// into one, so that picking the next item compares at most this many heads.
pub const FAN_IN: usize = 16;

/// Where the temporary files of runs and spills are made, for messages: "a temporary file in
/// DIR" (`$TMPDIR`, else `/tmp`).
pub fn a_temporary_file() -> String {
    format!("a temporary file in {}", std::env::temp_dir().display())
}

/// Items read one at a time, or the error that stopped reading them.
pub type Items<'a, T> = Box<dyn Iterator<Item = io::Result<T>> + 'a>;

/// `items` written to a new anonymous temporary file (removed by the OS once closed), a JSON
/// line each, in the order given; the first error stops the writing.
pub fn write_run<T: Serialize>(items: impl IntoIterator<Item = io::Result<T>>) -> io::Result<File> {
    let mut w = BufWriter::new(tempfile::tempfile()?);
    for item in items {
        serde_json::to_writer(&mut w, &item?)?;
        w.write_all(b"\n")?;
    }
    w.into_inner().map_err(io::IntoInnerError::into_error)
}

/// The items of a run that [`write_run`] wrote, from its start. Each reader keeps its own
/// place (positioned reads), so a run can be read by several readers, one after another or at
/// once.
pub fn read_run<'a, T: DeserializeOwned + 'a>(run: &File) -> Items<'a, T> {
    match run.try_clone() {
        Err(e) => Box::new(std::iter::once(Err(e))),
        Ok(file) => Box::new(
            BufReader::with_capacity(1 << 16, At { file, at: 0 })
                .lines()
                .map(|line| line.and_then(|l| serde_json::from_str(&l).map_err(io::Error::other))),
        ),
    }
}

/// A file read from a place of its own (`pread`), not from the offset its descriptors share.
struct At {
    file: File,
    at: u64,
}

impl Read for At {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.file.read_at(buf, self.at)?;
        self.at += n as u64;
        Ok(n)
    }
}

/// Adds `run` to `runs`, all sorted by `order`; once there are [`FAN_IN`], they are merged into
/// one, through `combine` (which may add up equal items, or hand them on as they are).
pub fn add_run<T, C, I>(
    runs: &mut Vec<File>,
    run: File,
    order: C,
    combine: impl FnOnce(Merged<'static, T, C>) -> I,
) -> io::Result<()>
where
    T: Serialize + DeserializeOwned + 'static,
    C: Fn(&T, &T) -> Ordering,
    I: Iterator<Item = io::Result<T>>,
{
    runs.push(run);
    if runs.len() >= FAN_IN {
        let sources = runs.iter().map(read_run).collect();
        *runs = vec![write_run(combine(Merged::new(sources, order)))?];
    }
    Ok(())
}

/// Sorted sources merged into one sorted sequence. Ties come from the earlier source first, so
/// the runs of a stable sort, merged in the order they were written, stay stable. The first
/// error of any source is handed on, and nothing after it.
pub struct Merged<'a, T, C> {
    sources: Vec<Items<'a, T>>,
    heads: Vec<Option<T>>,
    order: C,
    failed: Option<io::Error>,
    done: bool,
}

impl<'a, T, C: Fn(&T, &T) -> Ordering> Merged<'a, T, C> {
    pub fn new(mut sources: Vec<Items<'a, T>>, order: C) -> Self {
        let mut failed = None;
        let mut heads = Vec::with_capacity(sources.len());
        for s in &mut sources {
            heads.push(match s.next() {
                Some(Ok(item)) => Some(item),
                Some(Err(e)) => {
                    failed.get_or_insert(e);
                    None
                }
                None => None,
            });
        }
        Merged {
            sources,
            heads,
            order,
            failed,
            done: false,
        }
    }
}

impl<T, C: Fn(&T, &T) -> Ordering> Iterator for Merged<'_, T, C> {
    type Item = io::Result<T>;

    fn next(&mut self) -> Option<io::Result<T>> {
        if self.done {
            return None;
        }
        if let Some(e) = self.failed.take() {
            self.done = true;
            return Some(Err(e));
        }
        let mut least: Option<(usize, &T)> = None;
        for (i, head) in self.heads.iter().enumerate() {
            if let Some(item) = head {
                // Strictly less: on a tie the earlier source keeps its place.
                if least.is_none_or(|(_, l)| (self.order)(item, l) == Ordering::Less) {
                    least = Some((i, item));
                }
            }
        }
        let Some((i, _)) = least else {
            self.done = true;
            return None;
        };
        let item = self.heads[i].take();
        match self.sources[i].next() {
            Some(Ok(next)) => self.heads[i] = Some(next),
            Some(Err(e)) => self.failed = Some(e),
            None => {}
        }
        item.map(Ok)
    }
}

/// Items sorted by `order` (stable: equal items keep the order they were pushed in), at most
/// `keep` of them in memory: each time that many are held they are sorted and written out as a
/// run.
pub struct Sorter<T, C> {
    memory: Vec<T>,
    runs: Vec<File>,
    keep: usize,
    order: C,
}

impl<T, C> Sorter<T, C>
where
    T: Serialize + DeserializeOwned + 'static,
    C: Fn(&T, &T) -> Ordering + Copy,
{
    /// A sorter that keeps at most `keep` items (at least one) in memory.
    pub fn new(keep: usize, order: C) -> Self {
        Sorter {
            memory: Vec::new(),
            runs: Vec::new(),
            keep: keep.max(1),
            order,
        }
    }

    pub fn push(&mut self, item: T) -> io::Result<()> {
        self.memory.push(item);
        if self.memory.len() >= self.keep {
            self.memory.sort_by(self.order);
            let run = write_run(self.memory.drain(..).map(Ok))?;
            add_run(&mut self.runs, run, self.order, |merged| merged)?;
        }
        Ok(())
    }

    /// Every item pushed, in order (reading the runs back can fail: I/O).
    pub fn sorted(mut self) -> Merged<'static, T, C> {
        self.memory.sort_by(self.order);
        let mut sources: Vec<Items<'static, T>> = self.runs.iter().map(read_run).collect();
        sources.push(Box::new(self.memory.into_iter().map(Ok)));
        Merged::new(sources, self.order)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Whatever is pushed and however little memory keeps, the items come out as a stable
        /// in-memory sort has them (ties in the order pushed: each item carries its place).
        #[test]
        fn a_sorter_sorts_as_a_stable_sort_in_memory(
            keys in proptest::collection::vec(0u8..6, 0..300),
            keep in 1usize..40,
        ) {
            let items: Vec<(u8, usize)> = keys.iter().copied().zip(0..).collect();
            let order = |a: &(u8, usize), b: &(u8, usize)| a.0.cmp(&b.0);
            let mut s = Sorter::new(keep, order);
            for &item in &items {
                s.push(item).unwrap();
            }
            let got: Vec<(u8, usize)> = s.sorted().map(Result::unwrap).collect();
            let mut want = items;
            want.sort_by(order);
            prop_assert_eq!(got, want);
        }
    }

    #[test]
    fn a_run_is_read_by_readers_of_their_own() {
        let run = write_run([1u32, 2, 3].map(Ok)).unwrap();
        let mut a = read_run::<u32>(&run);
        let mut b = read_run::<u32>(&run);
        assert_eq!(a.next().unwrap().unwrap(), 1);
        assert_eq!(b.next().unwrap().unwrap(), 1);
        assert_eq!(a.next().unwrap().unwrap(), 2);
        assert_eq!(
            read_run::<u32>(&run)
                .map(Result::unwrap)
                .collect::<Vec<_>>(),
            [1, 2, 3]
        );
    }

    #[test]
    fn a_broken_source_ends_the_merge_with_its_error() {
        let good: Items<u32> = Box::new([1, 4].map(Ok).into_iter());
        let broken: Items<u32> =
            Box::new(vec![Ok(2), Err(io::Error::other("disk gone")), Ok(3)].into_iter());
        let got: Vec<String> = Merged::new(vec![good, broken], |a: &u32, b: &u32| a.cmp(b))
            .map(|r| r.map_or_else(|e| e.to_string(), |n| n.to_string()))
            .collect();
        assert_eq!(got, ["1", "2", "disk gone"]);
    }
}
