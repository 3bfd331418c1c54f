//! What must hold before the write path writes: checked before the first write and again before
//! every other one, so the moment it fails nothing more is written.

use std::future::Future;

use thiserror::Error;

/// Why writing is no longer safe.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{0}")]
pub struct Unsafe(pub String);

/// A check made before each write.
pub trait WriteGate {
    /// `Err` when writing is no longer safe.
    fn check(&mut self) -> impl Future<Output = Result<(), Unsafe>>;

    /// What a check let through only because it was told to go on anyway (`--force`): the
    /// running kubelet it saw. Writing goes on; evidence taken now, such as what runs, may
    /// already show that kubelet's doing.
    fn overridden(&self) -> Option<&str> {
        None
    }
}

/// A gate that is always open, for callers who have established safety some other way (tests,
/// `--force`).
pub struct Open;

impl WriteGate for Open {
    async fn check(&mut self) -> Result<(), Unsafe> {
        Ok(())
    }
}
