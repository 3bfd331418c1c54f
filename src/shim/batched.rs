//! Socket writes batched per turn of the task that serves them.
//!
//! h2 writes every DATA frame over 256 bytes with a `writev` of its own and flushes after it, so a
//! 200 KB `ListContainers` answer leaves in a dozen writes, and a small answer's head, message and
//! trailers in two or three. Each write can wake the reading process, which on a busy node is the
//! dearest part of a proxied call. A [`Batched`] socket instead gathers what is written into its
//! outbox; the task that polls the connection writes the outbox out with
//! [`OutboxHandle::poll_write_out`] once it has nothing else to do, so everything the turn produced
//! leaves in as few writes as the socket takes.
//!
//! The contract: a [`Batched`] socket's `poll_flush` returns at once, and the owner of the outbox
//! must call `poll_write_out` before its task waits. Backpressure is kept: once [`LIMIT`] bytes
//! are gathered, or while the socket has taken only part of them, new writes wait until the
//! outbox is written out.

use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, BufReader, ReadBuf};
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::UnixStream;

/// Bytes an outbox gathers before writes go straight out.
pub const LIMIT: usize = 1 << 20;

/// What a [`Batched`] socket has been given to write and has not yet written.
struct Outbox {
    buf: Vec<u8>,
    /// Bytes at the start of `buf` already written.
    done: usize,
    socket: OwnedWriteHalf,
}

/// A shared handle on an outbox: the socket writes into it, its task writes it out.
#[derive(Clone)]
pub struct OutboxHandle(Arc<Mutex<Outbox>>);

impl OutboxHandle {
    fn lock(&self) -> MutexGuard<'_, Outbox> {
        // A panic while holding the lock cannot leave the outbox inconsistent (every method
        // leaves `done <= buf.len()`), so a poisoned lock is used as is.
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Writes everything gathered so far to the socket; Pending while the socket is full.
    pub fn poll_write_out(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.lock().poll_write_out(cx)
    }

    /// Bytes waiting to be written.
    #[cfg(test)]
    fn pending(&self) -> usize {
        let o = self.lock();
        o.buf.len() - o.done
    }
}

impl Outbox {
    /// See [`OutboxHandle::poll_write_out`].
    fn poll_write_out(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.done < self.buf.len() {
            let n = ready!(Pin::new(&mut self.socket).poll_write(cx, &self.buf[self.done..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.done += n;
        }
        self.buf.clear();
        self.done = 0;
        Poll::Ready(Ok(()))
    }

    /// Before more is gathered: a full outbox, or one the socket has taken only part of, is
    /// written out first (so bytes stay in order and memory stays bounded).
    fn poll_make_room(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.done > 0 || self.buf.len() >= LIMIT {
            ready!(self.poll_write_out(cx))?;
        }
        Poll::Ready(Ok(()))
    }
}

/// A Unix socket whose reads are buffered (`read_buffer` bytes at a time) and whose writes are
/// gathered in an outbox.
pub struct Batched {
    read: BufReader<OwnedReadHalf>,
    out: OutboxHandle,
}

impl Batched {
    pub fn new(stream: UnixStream, read_buffer: usize) -> (Batched, OutboxHandle) {
        let (read, socket) = stream.into_split();
        let out = OutboxHandle(Arc::new(Mutex::new(Outbox {
            buf: Vec::new(),
            done: 0,
            socket,
        })));
        let batched = Batched {
            read: BufReader::with_capacity(read_buffer, read),
            out: out.clone(),
        };
        (batched, out)
    }
}

impl AsyncRead for Batched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.read).poll_read(cx, buf)
    }
}

impl AsyncWrite for Batched {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let mut o = self.out.lock();
        ready!(o.poll_make_room(cx))?;
        o.buf.extend_from_slice(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let mut o = self.out.lock();
        ready!(o.poll_make_room(cx))?;
        let mut n = 0;
        for b in bufs {
            o.buf.extend_from_slice(b);
            n += b.len();
        }
        Poll::Ready(Ok(n))
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(())) // the owning task writes the outbox out before it waits
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut o = self.out.lock();
        ready!(o.poll_write_out(cx))?;
        Pin::new(&mut o.socket).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::poll_fn;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn writes_wait_in_the_outbox_until_written_out_together() {
        let (a, mut b) = UnixStream::pair().unwrap();
        let (mut a, out) = Batched::new(a, 4096);
        a.write_all(b"frame one;").await.unwrap();
        a.write_all(b"frame two").await.unwrap();
        a.flush().await.unwrap();
        assert_eq!(out.pending(), 19, "flush leaves the bytes to the owner");
        let mut got = [0u8; 64];
        assert!(
            tokio::time::timeout(std::time::Duration::from_millis(50), b.read(&mut got))
                .await
                .is_err(),
            "nothing is written before the outbox is written out"
        );
        poll_fn(|cx| out.poll_write_out(cx)).await.unwrap();
        assert_eq!(out.pending(), 0);
        let n = b.read(&mut got).await.unwrap();
        assert_eq!(&got[..n], b"frame one;frame two", "one write");
    }

    #[tokio::test]
    async fn past_the_limit_writes_go_out_and_wait_for_the_reader() {
        let (a, mut b) = UnixStream::pair().unwrap();
        let (mut a, out) = Batched::new(a, 4096);
        let big = vec![7u8; LIMIT];
        let reader = tokio::spawn(async move {
            let mut all = Vec::new();
            b.read_to_end(&mut all).await.unwrap();
            all
        });
        a.write_all(&big).await.unwrap();
        a.write_all(b"tail").await.unwrap(); // needs room: writes the first MB out
        assert_eq!(out.pending(), 4);
        a.shutdown().await.unwrap(); // writes the rest, then closes
        drop(a);
        drop(out);
        let all = reader.await.unwrap();
        assert_eq!(all.len(), LIMIT + 4);
        assert_eq!(&all[LIMIT..], b"tail");
    }

    #[tokio::test]
    async fn reads_pass_through() {
        let (a, mut b) = UnixStream::pair().unwrap();
        let (mut a, _out) = Batched::new(a, 16);
        b.write_all(b"0123456789abcdefghij").await.unwrap();
        drop(b);
        let mut got = Vec::new();
        a.read_to_end(&mut got).await.unwrap();
        assert_eq!(got, b"0123456789abcdefghij");
    }
}
