//! A stream kept as it is read, so that it can be read again from the start: the framer's
//! fallback ([`crate::source::parallel`]) reads its input a second time, and a pipe cannot be.
//!
//! The first [`MEMORY`] bytes stay in memory, the rest go to an anonymous temporary file (removed
//! by the OS once closed). If that file cannot be made or written, the bytes just read stay in
//! memory and the next read fails, which stops the framer; the second reading then reads
//! everything from the start, as the one reader always did, so no byte is lost.

use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::FileExt;

use crate::source::reader::first_look;

/// Bytes kept in memory before the temporary file.
pub const MEMORY: usize = 4 << 20;

/// A reader over `source` that keeps every byte it reads; [`Spool::rewind`] reads them again.
///
/// The kept bytes are three runs, one after the other: `memory`, the file, `overflow`.
pub struct Spool<R> {
    source: R,
    /// The first bytes read, up to `memory_cap`.
    memory: Vec<u8>,
    memory_cap: usize,
    /// The bytes after `memory`, from the file's offset 0.
    file: Option<File>,
    file_len: u64,
    make_file: fn() -> io::Result<File>,
    /// What the file failed to take (the last read's bytes).
    overflow: Vec<u8>,
    /// Bytes kept: every byte read from `source` before the rewind, none after.
    kept: u64,
    /// The offset of the next byte handed out.
    at: u64,
    /// How many bytes the first look read.
    head_len: usize,
    /// Why reading cannot go on: keeping failed (the next read from `source` fails with it,
    /// until the rewind), or a second rewind (every read fails).
    failed: Option<(io::ErrorKind, String)>,
    /// False after the rewind: a second reading keeps nothing more.
    keeping: bool,
}

impl<R: Read> Spool<R> {
    pub fn new(source: R) -> Self {
        Spool::with(source, MEMORY, tempfile::tempfile)
    }

    /// A spool keeping `memory_cap` bytes in memory and the rest in the file `make_file` makes.
    pub(crate) fn with(source: R, memory_cap: usize, make_file: fn() -> io::Result<File>) -> Self {
        Spool {
            source,
            memory: Vec::new(),
            memory_cap,
            file: None,
            file_len: 0,
            make_file,
            overflow: Vec::new(),
            kept: 0,
            at: 0,
            head_len: 0,
            failed: None,
            keeping: true,
        }
    }

    /// The input's first bytes, as the one reader looks at a stream to tell YAML from JSON
    /// ([`first_look`]). They are read again from the start afterwards.
    pub fn head(&mut self) -> io::Result<Vec<u8>> {
        if self.kept == 0 {
            let mut head = Vec::new();
            let looked = first_look(&mut self.source, &mut head);
            self.head_len = head.len();
            self.keep(&head);
            looked?;
            return Ok(head);
        }
        let at = self.at;
        self.at = 0;
        let mut head = vec![0; self.head_len];
        let mut n = 0;
        while n < head.len() {
            match self.replay(&mut head[n..]) {
                Ok(k) => n += k,
                Err(e) => {
                    self.at = at;
                    return Err(e);
                }
            }
        }
        self.at = at;
        Ok(head)
    }

    /// Reads from the start again; what is read past the kept bytes is no longer kept.
    /// Once only: a second rewind would skip what the second reading did not keep, so reads
    /// after it fail.
    pub fn rewind(&mut self) {
        self.failed = match self.keeping {
            true => None,
            false => Some((
                io::ErrorKind::Unsupported,
                "stdin was read past what was kept of it, and cannot be read again".into(),
            )),
        };
        self.at = 0;
        self.keeping = false;
    }

    /// Keeps `bytes`, just read from the source: in memory up to the cap, then in the file; in
    /// `overflow` if the file fails, and the failure is noted for the next read.
    fn keep(&mut self, bytes: &[u8]) {
        let room = self.memory_cap.saturating_sub(self.memory.len());
        let (now, rest) = bytes.split_at(room.min(bytes.len()));
        self.memory.extend_from_slice(now);
        if !rest.is_empty() {
            if let Err(e) = self.keep_in_file(rest) {
                self.overflow.extend_from_slice(rest);
                self.failed = Some((
                    e.kind(),
                    format!("stdin could not be kept in a temporary file: {e}"),
                ));
            }
        }
        self.kept += bytes.len() as u64;
    }

    fn keep_in_file(&mut self, bytes: &[u8]) -> io::Result<()> {
        // After a failure the file takes nothing more: its bytes and `overflow`'s must follow
        // each other.
        if !self.overflow.is_empty() {
            return Err(io::Error::other("the temporary file failed before"));
        }
        let file = match &mut self.file {
            Some(f) => f,
            None => self.file.insert((self.make_file)()?),
        };
        file.write_all_at(bytes, self.file_len)?;
        self.file_len += bytes.len() as u64;
        Ok(())
    }

    /// Hands out kept bytes from `at`: from memory, the file or the overflow, whichever holds it.
    fn replay(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let left = usize::try_from(self.kept - self.at).unwrap_or(usize::MAX);
        let want = buf.len().min(left);
        let memory = self.memory.len() as u64;
        let n = if self.at < memory {
            let at = self.at as usize;
            let n = want.min(self.memory.len() - at);
            buf[..n].copy_from_slice(&self.memory[at..at + n]);
            n
        } else if self.at < memory + self.file_len {
            let file = self
                .file
                .as_ref()
                .ok_or_else(|| io::Error::other("kept bytes past memory without a file"))?;
            let in_file = usize::try_from(memory + self.file_len - self.at).unwrap_or(usize::MAX);
            file.read_at(&mut buf[..want.min(in_file)], self.at - memory)?
        } else {
            let at = usize::try_from(self.at - memory - self.file_len).unwrap_or(usize::MAX);
            let n = want.min(self.overflow.len().saturating_sub(at));
            buf[..n].copy_from_slice(&self.overflow[at..at + n]);
            n
        };
        if n == 0 && want > 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the temporary file holding stdin is shorter than what was written to it",
            ));
        }
        self.at += n as u64;
        Ok(n)
    }
}

impl<R: Read> Read for Spool<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.at < self.kept && (self.keeping || self.failed.is_none()) {
            return self.replay(buf);
        }
        if let Some((kind, why)) = &self.failed {
            return Err(io::Error::new(*kind, why.clone()));
        }
        let n = self.source.read(buf)?;
        if self.keeping {
            self.keep(&buf[..n]);
        }
        self.at += n as u64;
        Ok(n)
    }
}

/// Test support: a stream read once that hands out at most `step` bytes a read, as a pipe does
/// when its writer cuts its writes that way.
#[cfg(test)]
pub(crate) struct Pipe {
    bytes: Vec<u8>,
    at: usize,
    step: usize,
}

#[cfg(test)]
impl Pipe {
    pub(crate) fn new(bytes: &[u8], step: usize) -> Self {
        Pipe {
            bytes: bytes.to_vec(),
            at: 0,
            step,
        }
    }
}

#[cfg(test)]
impl Read for Pipe {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = buf.len().min(self.step).min(self.bytes.len() - self.at);
        buf[..n].copy_from_slice(&self.bytes[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Reads `r` to its end in pieces of at most `piece` bytes, or up to `stop` bytes.
    fn read_some(r: &mut impl Read, piece: usize, stop: usize) -> Vec<u8> {
        let mut out = Vec::new();
        let mut buf = vec![0; piece.max(1)];
        while out.len() < stop {
            match r.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => out.extend_from_slice(&buf[..n]),
            }
        }
        out
    }

    fn no_file() -> io::Result<File> {
        Err(io::Error::new(io::ErrorKind::StorageFull, "no space"))
    }

    /// `input` through a pipe of 30 bytes a read, `cap` bytes kept in memory and no file.
    fn without_file(input: &[u8], cap: usize) -> Spool<Pipe> {
        Spool::with(Pipe::new(input, 30), cap, no_file)
    }

    proptest! {
        /// Whatever was read first, and however the reads are cut, the second reading from
        /// the start gives the whole input, through memory, the file and the source.
        #[test]
        fn the_second_reading_is_the_whole_input(
            input in proptest::collection::vec(any::<u8>(), 0..3000),
            cap in 0..200usize,
            step in 1..700usize,
            piece in 1..500usize,
            first in 0..3000usize,
            look in any::<bool>(),
            file_fails in any::<bool>(),
        ) {
            let source = Pipe::new(&input, step);
            let make: fn() -> io::Result<File> = if file_fails { no_file } else { tempfile::tempfile };
            let mut spool = Spool::with(source, cap, make);
            if look {
                let head = spool.head().unwrap();
                prop_assert!(input.starts_with(&head));
                prop_assert_eq!(spool.head().unwrap(), head);
            }
            let read = read_some(&mut spool, piece, first);
            prop_assert!(input.starts_with(&read));
            spool.rewind();
            prop_assert_eq!(read_some(&mut spool, piece, usize::MAX), input);
        }
    }

    #[test]
    fn a_failed_file_keeps_the_bytes_and_stops_the_first_reading() {
        let input: Vec<u8> = (0..100u8).collect();
        let mut spool = without_file(&input, 10);
        let mut buf = [0; 30];
        assert_eq!(spool.read(&mut buf).unwrap(), 30);
        let e = spool.read(&mut buf).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::StorageFull);
        assert!(e.to_string().contains("temporary file"), "{e}");
        spool.rewind();
        assert_eq!(read_some(&mut spool, 7, usize::MAX), input);
    }

    #[test]
    fn a_second_rewind_fails_rather_than_skip() {
        let input: Vec<u8> = (0..100u8).collect();
        let mut spool = without_file(&input, 1000);
        assert_eq!(read_some(&mut spool, 10, 40), &input[..40]);
        spool.rewind();
        assert_eq!(read_some(&mut spool, 10, 70), &input[..70]);
        spool.rewind();
        let e = spool.read(&mut [0; 10]).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::Unsupported, "{e}");
    }

    #[test]
    fn the_head_reads_past_white_space_and_is_read_again() {
        let input = b"  \n {\"a\":1}".repeat(10);
        // Reads of 2 bytes: two of white space, then one that holds the first other byte.
        let mut spool = Spool::new(Pipe::new(&input, 2));
        assert_eq!(spool.head().unwrap(), b"  \n {\"");
        assert_eq!(spool.head().unwrap(), b"  \n {\"");
        let mut read = read_some(&mut spool, 3, 6);
        assert_eq!(spool.head().unwrap(), b"  \n {\"");
        read.extend(read_some(&mut spool, 3, usize::MAX));
        assert_eq!(read, input);
    }
}
