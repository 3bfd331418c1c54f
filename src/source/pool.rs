//! Work on every core with results in input order: one thread reads and parses, worker threads
//! do the per-item work, and the calling thread takes the results in the order the items were
//! read. `hash` and `scan` both run on it, so their output is the same whatever the core count.

use std::collections::BTreeMap;
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread;

use crate::error::{Error, Result};

/// Objects travel to the workers in batches of this many: a channel operation per object costs
/// more in thread wake-ups than the work on most objects.
pub const BATCH: usize = 64;

/// A batch also ends once its items weigh this many bytes (where the items are weighed: frames,
/// by their length), so that a few batches of large objects (a container spec can be 100 KB)
/// hold what a few batches of ordinary ones do.
pub const BATCH_BYTES: usize = 1 << 20;

/// A worker per core.
pub fn cores() -> usize {
    thread::available_parallelism().map_or(1, usize::from)
}

/// Maps every item `produce` hands over (on a thread of its own) through a worker's function on
/// `workers` threads, and hands the results to `each` in input order. With no workers, all of
/// it runs on the calling thread (the reference the benches compare with; the results are the
/// same), a batch at a time as [`map_batches_in_order`] does.
///
/// `worker` is called once per worker thread and returns that thread's function, so a worker
/// may keep state (a cache) between items. Items travel in batches of `batch`, and at most
/// `8 × workers` batches are between the reader and `each` at any time, so memory stays bounded
/// by a few batches however long the input is. `source` names the input if the reading thread
/// stops unexpectedly.
pub fn map_in_order<T, U, F>(
    source: &str,
    workers: usize,
    batch: usize,
    produce: impl FnOnce(&mut dyn FnMut(T)) -> Result<()> + Send,
    worker: impl Fn() -> F + Sync,
    each: impl FnMut(U),
) -> Result<()>
where
    T: Send,
    U: Send,
    F: FnMut(T) -> U,
{
    map_batches_in_order(
        source,
        workers,
        batch,
        produce,
        || {
            let mut work = worker();
            move |items: Vec<T>| items.into_iter().map(&mut work).collect()
        },
        each,
    )
}

/// [`map_in_order`] with a worker's function that takes a whole batch and returns its results,
/// one per item and in the same order, for work that is cheaper done for many items together
/// (hashing their texts in lanes). With no workers, the calling thread gathers a batch and
/// works on it before reading on.
pub fn map_batches_in_order<T, U, F>(
    source: &str,
    workers: usize,
    batch: usize,
    produce: impl FnOnce(&mut dyn FnMut(T)) -> Result<()> + Send,
    worker: impl Fn() -> F + Sync,
    each: impl FnMut(U),
) -> Result<()>
where
    T: Send,
    U: Send,
    F: FnMut(Vec<T>) -> Vec<U>,
{
    map_weighed_batches_in_order(source, workers, batch, |_| 0, produce, worker, each)
}

/// [`map_batches_in_order`] where a batch also ends once its items weigh [`BATCH_BYTES`] by
/// `weigh` (an item heavier than that is a batch of its own).
pub fn map_weighed_batches_in_order<T, U, F>(
    source: &str,
    workers: usize,
    batch: usize,
    weigh: impl Fn(&T) -> usize + Send,
    produce: impl FnOnce(&mut dyn FnMut(T)) -> Result<()> + Send,
    worker: impl Fn() -> F + Sync,
    mut each: impl FnMut(U),
) -> Result<()>
where
    T: Send,
    U: Send,
    F: FnMut(Vec<T>) -> Vec<U>,
{
    let batch = batch.max(1);
    // The batch being filled, and what its items weigh.
    let mut full = Vec::with_capacity(batch);
    let mut weight = 0;
    // Whether the batch is full once `item` is in it.
    let mut add = move |item: T, full: &mut Vec<T>| {
        weight += weigh(&item);
        full.push(item);
        let done = full.len() == batch || weight >= BATCH_BYTES;
        if done {
            weight = 0;
        }
        done
    };
    if workers == 0 {
        let mut work = worker();
        let read = produce(&mut |item| {
            if add(item, &mut full) {
                work(std::mem::take(&mut full))
                    .into_iter()
                    .for_each(&mut each);
            }
        });
        if !full.is_empty() {
            work(full).into_iter().for_each(&mut each);
        }
        return read;
    }
    // Set once a worker panicked: the reader stops handing items on.
    let stop = AtomicBool::new(false);
    let stop = &stop;
    thread::scope(|s| {
        let (items_tx, items_rx) = mpsc::sync_channel::<(usize, Vec<T>)>(2 * workers);
        let items_rx = Arc::new(Mutex::new(items_rx));
        let (done_tx, done_rx) = mpsc::sync_channel::<(usize, thread::Result<Vec<U>>)>(2 * workers);

        // A permit per batch read and not yet handed on: when one batch is slow, the others
        // wait for it within this bound instead of piling up.
        let in_flight = 8 * workers;
        let (permit_tx, permit_rx) = mpsc::sync_channel::<()>(in_flight);
        for _ in 0..in_flight {
            let _ = permit_tx.send(());
        }
        let reader = s.spawn(move || {
            let mut seq = 0;
            let read = produce(&mut |item| {
                if stop.load(Ordering::Relaxed) {
                    return;
                }
                if add(item, &mut full) {
                    let items = std::mem::replace(&mut full, Vec::with_capacity(batch));
                    // Both fail only once the other side is gone; the error comes from there.
                    let _ = permit_rx.recv();
                    let _ = items_tx.send((seq, items));
                    seq += 1;
                }
            });
            if !full.is_empty() {
                let _ = items_tx.send((seq, full));
            }
            read
        });
        for _ in 0..workers {
            let items_rx = Arc::clone(&items_rx);
            let done_tx = done_tx.clone();
            let worker = &worker;
            s.spawn(move || {
                // A panic (a bug) is handed to the calling thread, which raises it again once
                // the other threads have stopped, instead of leaving them waiting for its batch.
                let run = panic::catch_unwind(AssertUnwindSafe(|| {
                    let mut work = worker();
                    loop {
                        let next = match items_rx.lock() {
                            Ok(rx) => rx.recv(),
                            Err(_) => return,
                        };
                        let Ok((seq, items)) = next else { return };
                        let done = work(items);
                        if done_tx.send((seq, Ok(done))).is_err() {
                            return;
                        }
                    }
                }));
                if let Err(panicked) = run {
                    let _ = done_tx.send((usize::MAX, Err(panicked)));
                }
            });
        }
        drop(done_tx);
        // In input order: a batch waits until every batch before it has been handed on.
        let mut waiting: BTreeMap<usize, Vec<U>> = BTreeMap::new();
        let mut next = 0;
        let mut permits = Some(permit_tx);
        let mut panicked = None;
        for (seq, done) in done_rx {
            match done {
                Ok(done) if panicked.is_none() => {
                    waiting.insert(seq, done);
                }
                Ok(_) => {}
                Err(p) => {
                    // Nothing after the lost batch can be handed on: stop the reader, and let
                    // it go on to its end without waiting for permits.
                    panicked.get_or_insert(p);
                    stop.store(true, Ordering::Relaxed);
                    permits = None;
                    waiting.clear();
                }
            }
            while let Some(ready) = waiting.remove(&next) {
                ready.into_iter().for_each(&mut each);
                next += 1;
                if let Some(permits) = &permits {
                    let _ = permits.try_send(());
                }
            }
        }
        let read = reader.join();
        if let Some(p) = panicked {
            panic::resume_unwind(p);
        }
        match read {
            Ok(read) => read,
            Err(_) => Err(Error::Input {
                source_name: source.to_string(),
                reason: "the reading thread stopped unexpectedly".into(),
            }),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reader that hands over `0..n`.
    fn items(n: u32) -> impl FnOnce(&mut dyn FnMut(u32)) -> Result<()> + Send {
        move |each| {
            (0..n).for_each(each);
            Ok(())
        }
    }

    #[test]
    fn results_come_in_input_order_with_per_worker_state() {
        for workers in [0, 1, 2, 5] {
            let mut out = Vec::new();
            map_in_order(
                "t",
                workers,
                3,
                items(1000),
                || {
                    let mut seen = 0u32;
                    move |i: u32| {
                        seen += 1;
                        // Later items of a batch take less time, so batches finish out of order.
                        thread::sleep(std::time::Duration::from_micros(u64::from(i % 7)));
                        (i, seen)
                    }
                },
                |(i, seen)| out.push((i, seen)),
            )
            .unwrap();
            let order: Vec<u32> = out.iter().map(|(i, _)| *i).collect();
            assert_eq!(order, (0..1000).collect::<Vec<_>>(), "{workers} workers");
            // Each worker counted its own items: together they saw each item once.
            assert!(out.iter().all(|(_, seen)| *seen >= 1));
        }
    }

    #[test]
    fn whole_batches_come_back_in_input_order() {
        for workers in [0, 1, 2, 5] {
            let mut out = Vec::new();
            map_batches_in_order(
                "t",
                workers,
                7,
                items(1000),
                || {
                    |items: Vec<u32>| {
                        assert!(!items.is_empty() && items.len() <= 7, "{}", items.len());
                        // Later batches take less time, so they finish out of order.
                        thread::sleep(std::time::Duration::from_micros(u64::from(
                            7 - items[0] % 7,
                        )));
                        items.iter().map(|&i| (i, items.len())).collect::<Vec<_>>()
                    }
                },
                |(i, _)| out.push(i),
            )
            .unwrap();
            assert_eq!(out, (0..1000).collect::<Vec<_>>(), "{workers} workers");
        }
    }

    /// Items weighed: a batch ends at `batch` items or once they weigh `BATCH_BYTES`, a heavy
    /// item is a batch of its own, and the results still come in input order.
    #[test]
    fn weighed_batches_end_at_their_bytes() {
        // Item i weighs a third of a batch's bytes, or all of them for every tenth item.
        let weigh = |&i: &u32| match i % 10 {
            0 => BATCH_BYTES,
            _ => BATCH_BYTES / 3,
        };
        for workers in [0, 1, 2, 5] {
            let mut out = Vec::new();
            map_weighed_batches_in_order(
                "t",
                workers,
                64,
                weigh,
                items(1000),
                || {
                    move |items: Vec<u32>| {
                        let bytes: usize = items.iter().map(weigh).sum();
                        let without_last: usize = items[..items.len() - 1].iter().map(weigh).sum();
                        assert!(without_last < BATCH_BYTES, "{items:?}");
                        items
                            .iter()
                            .map(|&i| (i, bytes >= BATCH_BYTES || i == 999))
                            .collect::<Vec<_>>()
                    }
                },
                |(i, ended_by_bytes)| {
                    assert!(ended_by_bytes, "the batch of {i} ended before its bytes");
                    out.push(i);
                },
            )
            .unwrap();
            assert_eq!(out, (0..1000).collect::<Vec<_>>(), "{workers} workers");
        }
    }

    #[test]
    fn a_panicking_worker_is_a_panic_not_a_hang() {
        // Run where a hang shows as a timeout rather than as a test that never ends.
        let (tx, rx) = mpsc::channel();
        thread::spawn(move || {
            let outcome = panic::catch_unwind(|| {
                let mut handed = 0;
                let _ = map_in_order(
                    "t",
                    2,
                    3,
                    items(100_000),
                    || {
                        |i: u32| {
                            assert!(i != 50, "a bug at item 50");
                            i
                        }
                    },
                    |_| handed += 1,
                );
                handed
            });
            let _ = tx.send(outcome.is_err());
        });
        let panicked = rx.recv_timeout(std::time::Duration::from_secs(60));
        assert_eq!(panicked, Ok(true), "the worker's panic reached the caller");
    }

    #[test]
    fn the_readers_error_is_the_error_after_what_was_read() {
        let mut out = Vec::new();
        let err = map_in_order(
            "t",
            2,
            4,
            |each| {
                (0..10u32).for_each(&mut *each);
                Err(Error::Input {
                    source_name: "t".into(),
                    reason: "broken".into(),
                })
            },
            || |i: u32| i,
            |i| out.push(i),
        )
        .unwrap_err();
        assert_eq!(err.to_string(), "t: broken");
        assert_eq!(out, (0..10).collect::<Vec<_>>());
    }
}
