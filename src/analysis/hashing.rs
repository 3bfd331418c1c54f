//! `kubehash hash` over a whole input on every core: one thread splits the input into objects,
//! the others parse (into a [`crate::source::doc::Doc`]), decode and hash them, and the results
//! come back in input order.

use crate::error::{Problem, Result};
use crate::kubelet::hash::{ContainerHashes, HashBatch};
use crate::kubelet::json::Json;
use crate::kubelet::version::KubeletVersion;
use crate::source::doc::Object;
use crate::source::input::{no_input, object_items, Item};
use crate::source::parallel::{for_each_batch_on_cores, Input};

/// One item's id and hashes, or why it has none.
pub type Hashed = (String, std::result::Result<ContainerHashes, Problem>);

/// Objects travel in batches: a channel operation per object costs more than hashing one. A
/// batch's containers are hashed together ([`HashBatch`]).
pub const BATCH: usize = 64;

/// Hashes every item of `input` (see [`crate::source::input`]) for `versions`, parsing and
/// hashing on `workers` threads (none: all on this thread, the one reader parsing), and calls `each` with the results in input order. Memory stays
/// bounded: at most `8 × workers` batches are between the reader and `each` at any time.
pub fn for_each_hashed(
    input: &Input,
    versions: &[KubeletVersion],
    workers: usize,
    mut each: impl FnMut(Hashed),
) -> Result<()> {
    let source = input.name();
    let mut objects = 0usize;
    for_each_batch_on_cores(
        input,
        workers,
        BATCH,
        || {
            let source = &source;
            let mut batch = HashBatch::default();
            move |objects: &mut dyn Iterator<Item = (usize, Object)>| {
                hash_objects(objects, source, versions, &mut batch)
            }
        },
        |hashed| {
            objects += 1;
            hashed.into_iter().for_each(&mut each);
        },
    )?;
    if objects == 0 {
        return Err(no_input(&source));
    }
    Ok(())
}

/// The items of `objects`, each object's in a list of its own, their containers hashed together
/// in `batch` (their texts in the same FNV lanes): what a `hash` worker does with its batch.
pub fn hash_objects(
    objects: &mut dyn Iterator<Item = (usize, Object)>,
    source: &str,
    versions: &[KubeletVersion],
    batch: &mut HashBatch,
) -> Vec<Vec<Hashed>> {
    // Per item: its id, and its index in the batch or its problem. Each object is dropped once
    // its containers' texts are rendered.
    let mut items: Vec<Vec<Added>> = Vec::with_capacity(objects.size_hint().0);
    for (n, object) in objects {
        let mut found = Vec::new();
        match &object {
            Object::Doc(doc) => object_items(doc.root(), source, n, &mut |i| {
                found.push(add_item(i, versions, batch))
            }),
            Object::Value(value) => object_items(value, source, n, &mut |i| {
                found.push(add_item(i, versions, batch))
            }),
        }
        items.push(found);
    }
    let mut hashes = batch.finish();
    items
        .into_iter()
        .map(|found| {
            found
                .into_iter()
                .map(|(id, added)| (id, added.map(|k| std::mem::take(&mut hashes[k]))))
                .collect()
        })
        .collect()
}

/// An item's id, and its index in a [`HashBatch`] or its problem.
type Added = (String, std::result::Result<usize, Problem>);

/// Adds an item's container to `batch`.
fn add_item<'a>(
    item: Item<impl Json<'a>>,
    versions: &[KubeletVersion],
    batch: &mut HashBatch,
) -> Added {
    match item {
        Item::Container { id, path, json } => {
            (id, batch.add(json, versions, &path).map_err(Problem::from))
        }
        Item::Invalid { id, error } => (id, Err(error)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kubelet::hash::hash_container;
    use crate::kubelet::version::parse_version_set;
    use crate::source::input::for_each_item;
    use std::path::Path;

    /// The reference: one item's hashes by itself (no batch, no lanes shared with others), or
    /// its problem.
    fn hash_item<'a>(item: Item<impl Json<'a>>, versions: &[KubeletVersion]) -> Hashed {
        match item {
            Item::Container { id, path, json } => (
                id,
                hash_container(json, versions, &path).map_err(Problem::from),
            ),
            Item::Invalid { id, error } => (id, Err(error)),
        }
    }

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
        for workers in [0, 1, 2, 5] {
            let mut together = Vec::new();
            for_each_hashed(&Input::Path(path), &versions, workers, |h| together.push(h)).unwrap();
            assert_eq!(together, alone, "{workers} workers");
        }
    }

    /// Containers and pods to break: typed fields, escapes, numbers the `Doc` parser leaves to
    /// serde_json, a repeated key, a record.
    const PIECES: [&str; 6] = [
        r#"{"name":"a","image":"b:1","ports":[{"containerPort":80,"protocol":"TCP"}],"env":[{"name":"X","value":"\u00e9\n"}]}"#,
        r#"{"kind":"Pod","metadata":{"namespace":"n","name":"p"},"spec":{"initContainers":[{"name":"i","image":"x","restartPolicy":"Always"}],"containers":[{"name":"c","image":"y","resources":{"limits":{"cpu":"500m","memory":1024,"cpu":"1"}}}]}}"#,
        r#"{"id":"g","container":{"name":"c","image":"i","livenessProbe":{"httpGet":{"port":"http"},"periodSeconds":10}},"hash":{"1.30":"x"}}"#,
        r#"{"name":"f","image":"i","ports":[{"containerPort":8.0}],"tty":true}"#,
        r#"{"name":"d","image":"i","image":"j","args":["-0",-0,1e2]}"#,
        r#"{"kind":"List","items":[{"spec":{"containers":[{"name":"q","image":"z","livenessProbe":{"exec":{"command":["x"]},"periodSeconds":-3}}]}}]}"#,
    ];

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(300))]
        /// The adversary against the `Doc` path: containers and pods with random bytes broken,
        /// inserted or removed, hashed on cores (frames parsed into `Doc`s, or by serde_json
        /// where the `Doc` parser refuses) and hashed in batches give the one reader's hashes,
        /// problems and errors, and each item hashed by itself.
        #[test]
        fn broken_inputs_hash_on_cores_as_by_the_one_reader(
            picks in proptest::collection::vec(0..PIECES.len(), 1..5),
            edits in proptest::collection::vec((proptest::prelude::any::<proptest::sample::Index>(), 0..3u8,
                proptest::sample::select(vec![b'{', b'}', b'[', b']', b'"', b',', b':', b'\\', b'-', b'.', b'e', b'0', b'9', b'x', 0xff])), 0..3),
        ) {
            let mut input = picks.iter().map(|&i| PIECES[i]).collect::<Vec<_>>().join("\n").into_bytes();
            crate::source::parallel::break_bytes(&mut input, &edits);
            let versions = parse_version_set("1.15,1.30,1.31").unwrap();
            // Each item hashed by itself, as the one reader has it (no batch, no lanes).
            let mut one_by_one = Vec::new();
            let _ = crate::source::input::for_each_item_in(input.as_slice(), "t", |i| {
                one_by_one.push(hash_item(i, &versions))
            });
            let input = Input::Bytes { name: "t", bytes: &input };
            let run = |workers| {
                let mut out = Vec::new();
                let err = for_each_hashed(&input, &versions, workers, |h| out.push(h)).err().map(|e| e.to_string());
                (out, err)
            };
            let alone = run(0);
            proptest::prop_assert_eq!(&alone.0, &one_by_one);
            proptest::prop_assert_eq!(run(2), alone);
        }
    }

    #[test]
    fn a_read_error_is_the_error() {
        let dir = tempfile::tempdir().unwrap();
        let bad = dir.path().join("bad.json");
        std::fs::write(&bad, "{\"name\":\"a\",\"image\":\"b\"}\n{\"name\":").unwrap();
        let mut seen = 0;
        let err = for_each_hashed(
            &Input::Path(&bad),
            &parse_version_set("1.31").unwrap(),
            2,
            |_| seen += 1,
        )
        .unwrap_err();
        assert!(err.to_string().contains("not valid JSON"), "{err}");
    }
}
