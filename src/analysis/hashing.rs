//! `kubehash hash` over a whole input on every core: one thread reads and parses the items, the
//! others decode and hash them, and the results come back in input order.

use std::path::Path;

use crate::error::{Problem, Result};
use crate::kubelet::hash::{hash_container, ContainerHashes};
use crate::kubelet::version::KubeletVersion;
use crate::source::input::{for_each_item, Item};
use crate::source::pool::map_in_order;

/// One item's id and hashes, or why it has none.
pub type Hashed = (String, std::result::Result<ContainerHashes, Problem>);

/// Items travel in batches: a channel operation per container costs more than hashing one.
const BATCH: usize = 64;

/// Hashes every item of `path` (see [`for_each_item`]) for `versions` on `workers` threads
/// besides the reader, and calls `each` with the results in input order. Memory stays bounded:
/// at most `8 × workers` batches are between the reader and `each` at any time.
pub fn for_each_hashed(
    path: &Path,
    versions: &[KubeletVersion],
    workers: usize,
    each: impl FnMut(Hashed),
) -> Result<()> {
    let source = path.display().to_string();
    hash_all(&source, versions, workers, |f| for_each_item(path, f), each)
}

/// [`for_each_hashed`] over the items `produce` hands over (on its own thread); `source` names
/// the input in errors.
pub fn hash_all(
    source: &str,
    versions: &[KubeletVersion],
    workers: usize,
    produce: impl FnOnce(&mut dyn FnMut(Item)) -> Result<()> + Send,
    each: impl FnMut(Hashed),
) -> Result<()> {
    map_in_order(
        source,
        workers,
        BATCH,
        produce,
        || |item| hash_item(item, versions),
        each,
    )
}

/// The hashes of one item, or its problem.
pub fn hash_item(item: Item, versions: &[KubeletVersion]) -> Hashed {
    match item {
        Item::Container { id, path, json } => (
            id,
            hash_container(&json, versions, &path).map_err(Problem::from),
        ),
        Item::Invalid { id, error } => (id, Err(error)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kubelet::version::parse_version_set;

    #[test]
    fn results_come_in_input_order_whatever_the_workers() {
        let path = Path::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/testdata/golden/public.jsonl"
        ));
        let versions = parse_version_set("1.15,1.30,1.31").unwrap();
        let mut alone = Vec::new();
        for_each_item(path, |i| alone.push(hash_item(i, &versions))).unwrap();
        assert!(alone.len() > 2 * BATCH);
        for workers in [1, 2, 5] {
            let mut together = Vec::new();
            for_each_hashed(path, &versions, workers, |h| together.push(h)).unwrap();
            assert_eq!(together, alone, "{workers} workers");
        }
    }

    #[test]
    fn a_read_error_is_the_error() {
        let dir = tempfile::tempdir().unwrap();
        let bad = dir.path().join("bad.json");
        std::fs::write(&bad, "{\"name\":\"a\",\"image\":\"b\"}\n{\"name\":").unwrap();
        let mut seen = 0;
        let err = for_each_hashed(&bad, &parse_version_set("1.31").unwrap(), 2, |_| seen += 1)
            .unwrap_err();
        assert!(err.to_string().contains("not valid JSON"), "{err}");
    }
}
