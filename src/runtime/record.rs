//! The seam between the write path and a container runtime: where the runtime keeps a container's
//! CRI annotations, how kubehash reads and replaces the two hash annotations in it, and how the
//! runtime is made to load the change. containerd is the one implementation
//! ([`crate::runtime::containerd`]); a second runtime implements these two traits and nothing in
//! `rewrite/` changes.

use std::future::Future;

use crate::error::{Problem, Result};

/// The hash annotations a record holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoredHashes {
    /// `io.kubernetes.container.hash`.
    pub hash: Option<String>,
    /// `io.kubernetes.container.hashWithoutResources` (kubelet 1.27 – 1.30).
    pub without_resources: Option<String>,
}

/// A runtime's encoding of the bytes that hold a container's CRI annotations. Pure functions of
/// bytes, so that the journal can be validated without a runtime.
pub trait RecordFormat {
    /// The hash annotations in `value`, after checking that the runtime would load it as the
    /// record of container `id`.
    fn stored_hashes(&self, id: &str, value: &[u8]) -> Result<StoredHashes, Problem>;

    /// `value` with `hash` set, and `without_resources` set where given and already present
    /// (never added); every other byte kept. The result has passed [`RecordFormat::check_edit`].
    fn set_hashes(
        &self,
        id: &str,
        value: &[u8],
        hash: &str,
        without_resources: Option<&str>,
    ) -> Result<Vec<u8>, Problem>;

    /// Proves that `new` may replace `old` in container `id`'s record: it loads, belongs to the
    /// same container and differs from `old` only in the hash annotations' values.
    fn check_edit(&self, id: &str, old: &[u8], new: &[u8]) -> Result<(), Problem>;
}

/// Where the runtime keeps its records, read and written through its own API.
pub trait RecordStore: Sync {
    /// The encoding of this runtime's records.
    fn format(&self) -> &dyn RecordFormat;

    /// The runtime's name and version, as the journal records it (`containerd 1.7.24`).
    fn runtime(&self) -> String;

    /// The bytes holding container `id`'s CRI annotations, after the checks of
    /// [`RecordFormat::stored_hashes`].
    fn read(&self, id: &str) -> impl Future<Output = Result<Vec<u8>>> + Send;

    /// Replaces container `id`'s bytes with `new` only while they still hold `expected`
    /// (compare-and-swap), then reads them back and checks that they hold `new`.
    fn replace(
        &self,
        id: &str,
        expected: &[u8],
        new: &[u8],
    ) -> impl Future<Output = Result<()>> + Send;
}

/// The record format a journal's `begin` line names: `containerd 1.7.24`, or a bare version as
/// kubehash 0.1 wrote it (it knew only containerd).
pub fn format_named(runtime: &str) -> Option<&'static dyn RecordFormat> {
    let bare_version = runtime.starts_with(|c: char| c.is_ascii_digit() || c == 'v');
    if runtime.starts_with("containerd") || bare_version || runtime.is_empty() {
        Some(&crate::runtime::containerd::METADATA)
    } else {
        None
    }
}
