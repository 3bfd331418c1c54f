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
//!
//! The socket waits for readability only. A socket registered for writability too (as tokio's
//! own are) reports each time the peer has read what was written, and that woke the shim's
//! thread two or three times a call for nothing (strace). When the socket cannot take more, a
//! duplicate of its descriptor is registered for writing until the outbox is written out.

use std::io::{self, Read, Write};
use std::os::unix::net::UnixStream as StdUnixStream;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{ready, Context, Poll};

use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncRead, AsyncWrite, BufReader, Interest, ReadBuf};
use tokio::net::UnixStream;

/// Bytes an outbox gathers before writes go straight out.
pub const LIMIT: usize = 1 << 20;

/// What a [`Batched`] socket has been given to write and has not yet written.
struct Outbox {
    buf: Vec<u8>,
    /// Bytes at the start of `buf` already written.
    done: usize,
    socket: Arc<AsyncFd<StdUnixStream>>,
    /// While the socket cannot take more: a duplicate of it, registered for writability.
    writable: Option<AsyncFd<StdUnixStream>>,
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
            match self.socket.get_ref().write(&self.buf[self.done..]) {
                Ok(0) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                Ok(n) => self.done += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if self.writable.is_none() {
                        let dup = self.socket.get_ref().try_clone()?;
                        self.writable = Some(register(dup, Interest::WRITABLE)?);
                    }
                    if let Some(w) = &self.writable {
                        // Ready here may be from before the write that just failed: clear it,
                        // and the next wait is for the socket to drain.
                        ready!(w.poll_write_ready(cx))?.clear_ready();
                    }
                }
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
        self.writable = None;
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
    read: BufReader<Reading>,
    out: OutboxHandle,
}

impl Batched {
    pub fn new(stream: UnixStream, read_buffer: usize) -> io::Result<(Batched, OutboxHandle)> {
        let socket = Arc::new(register(stream.into_std()?, Interest::READABLE)?);
        let out = OutboxHandle(Arc::new(Mutex::new(Outbox {
            buf: Vec::new(),
            done: 0,
            socket: socket.clone(),
            writable: None,
        })));
        let batched = Batched {
            read: BufReader::with_capacity(read_buffer, Reading(socket)),
            out: out.clone(),
        };
        Ok((batched, out))
    }
}

/// Registers `socket` with the reactor for `interest` only.
fn register(socket: StdUnixStream, interest: Interest) -> io::Result<AsyncFd<StdUnixStream>> {
    // SAFETY: the descriptor is the stream's own, and the stream is moved into the AsyncFd, which
    // keeps it open and unchanged until the AsyncFd is dropped.
    unsafe { AsyncFd::register_with_interest(socket, interest) }.map_err(io::Error::from)
}

/// The reading side of a [`Batched`] socket.
struct Reading(Arc<AsyncFd<StdUnixStream>>);

impl AsyncRead for Reading {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        loop {
            let mut guard = ready!(self.0.poll_read_ready(cx))?;
            let unfilled = buf.initialize_unfilled();
            let wanted = unfilled.len();
            match guard.try_io(|socket| socket.get_ref().read(unfilled)) {
                Ok(Ok(n)) => {
                    // Less than asked for: the socket is empty now, so the next read waits for
                    // news instead of asking the kernel first (as tokio's own sockets do).
                    if n > 0 && n < wanted {
                        guard.clear_ready();
                    }
                    buf.advance(n);
                    return Poll::Ready(Ok(()));
                }
                Ok(Err(e)) => return Poll::Ready(Err(e)),
                Err(_would_block) => continue,
            }
        }
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
        Poll::Ready(o.socket.get_ref().shutdown(std::net::Shutdown::Write))
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
        let (mut a, out) = Batched::new(a, 4096).unwrap();
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
        let (mut a, out) = Batched::new(a, 4096).unwrap();
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
    async fn a_full_socket_waits_for_the_reader_and_then_stops_watching_for_room() {
        let (a, mut b) = UnixStream::pair().unwrap();
        let (mut a, out) = Batched::new(a, 4096).unwrap();
        let data: Vec<u8> = (0..LIMIT - 1).map(|i| (i % 251) as u8).collect();
        a.write_all(&data).await.unwrap();
        let reader = tokio::spawn(async move {
            // Far more than the socket takes is waiting by the time this starts reading.
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            let mut all = Vec::new();
            b.read_to_end(&mut all).await.unwrap();
            all
        });
        poll_fn(|cx| out.poll_write_out(cx)).await.unwrap();
        assert!(
            out.lock().writable.is_none(),
            "nothing waits for room once the outbox is out"
        );
        a.shutdown().await.unwrap();
        drop(a);
        drop(out);
        assert_eq!(reader.await.unwrap(), data, "every byte, in order");
    }

    #[tokio::test]
    async fn reads_pass_through() {
        let (a, mut b) = UnixStream::pair().unwrap();
        let (mut a, _out) = Batched::new(a, 16).unwrap();
        b.write_all(b"0123456789abcdefghij").await.unwrap();
        drop(b);
        let mut got = Vec::new();
        a.read_to_end(&mut got).await.unwrap();
        assert_eq!(got, b"0123456789abcdefghij");
    }
}
