//! `kubehash hash` over a whole input on every core: one thread splits the input into objects,
//! the others parse (into a [`crate::source::doc::Doc`]), decode and hash them, and the results
//! come back in input order.

use crate::error::{Problem, Result};
use crate::kubelet::hash::{name_image_hashes, only_name_image, ContainerHashes, HashBatch};
use crate::kubelet::json::Json;
use crate::kubelet::schema::Schema;
use crate::kubelet::version::KubeletVersion;
use crate::source::doc::{Object, Unparsed};
use crate::source::input::{no_input, object_items, Item};
use crate::source::name_image::name_and_image;
use crate::source::parallel::{for_each_batch_on_cores, for_each_file, Input};

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
    let mut objects = 0;
    for_each_file(input, workers, |file, workers| {
        objects += hash_each(file, versions, workers, &mut each)?;
        Ok(())
    })?;
    if objects == 0 {
        return Err(no_input(&input.name()));
    }
    Ok(())
}

/// [`for_each_hashed`] over one file, stdin or bytes: how many objects it held.
fn hash_each(
    input: &Input,
    versions: &[KubeletVersion],
    workers: usize,
    each: &mut impl FnMut(Hashed),
) -> Result<usize> {
    let source = input.name();
    let mut objects = 0usize;
    for_each_batch_on_cores(
        input,
        workers,
        BATCH,
        || {
            let source = &source;
            let mut batch = HashBatch::default();
            move |objects: &mut dyn Iterator<Item = (usize, Unparsed)>| {
                hash_objects(objects, source, versions, &mut batch)
            }
        },
        |hashed| {
            objects += 1;
            hashed.into_iter().for_each(&mut *each);
        },
    )?;
    Ok(objects)
}

/// The items of `objects`, each object's in a list of its own, their containers hashed together
/// in `batch` (their texts in the same FNV lanes): what a `hash` worker does with its batch.
///
/// Each frame is parsed here, and the objects end at the first that does not parse (the reader
/// then reads the input from there, see [`crate::source::parallel`]). When every version hashes
/// only the name and image, a bare container's frame is first checked and read without parsing
/// it ([`name_and_image`]); the frames the check is not sure of are parsed and decoded as the
/// others.
pub fn hash_objects(
    objects: &mut dyn Iterator<Item = (usize, Unparsed)>,
    source: &str,
    versions: &[KubeletVersion],
    batch: &mut HashBatch,
) -> Vec<Vec<Hashed>> {
    let checked = name_image_schemas(versions);
    // Per item: its id, and its index in the batch or its problem. Each object is dropped once
    // its containers' texts are rendered.
    let mut items: Vec<Vec<Added>> = Vec::with_capacity(objects.size_hint().0);
    for (n, object) in objects {
        if let (Some(schemas), Unparsed::Frame(frame)) = (&checked, &object) {
            if let Some((name, image)) = name_and_image(frame, schemas) {
                let k = batch.add_hashes(name_image_hashes(&name, &image, versions));
                items.push(vec![(name.into_owned(), Ok(k))]);
                continue;
            }
        }
        let Some(object) = object.parse() else {
            break;
        };
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

/// The type graphs to check a frame against when every one of `versions` hashes only the name
/// and image (one per distinct graph); `None` otherwise.
fn name_image_schemas(versions: &[KubeletVersion]) -> Option<Vec<&'static Schema>> {
    if versions.is_empty() || !only_name_image(versions) {
        return None;
    }
    let mut schemas: Vec<&'static Schema> = Vec::with_capacity(versions.len());
    for &v in versions {
        let schema = Schema::for_version(v).ok()?;
        if !schemas.iter().any(|s| s.same_as() == schema.same_as()) {
            schemas.push(schema);
        }
    }
    Some(schemas)
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
    use crate::test_corpus::golden_containers;
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

    /// The whole usual path for one frame: parsed (a `Doc`, or serde_json where the `Doc`
    /// parser refuses), its items found, each decoded and hashed by itself. `None` for a frame
    /// that does not parse.
    fn usual_path(frame: &[u8], versions: &[KubeletVersion]) -> Option<Vec<Hashed>> {
        let object = Unparsed::Frame(frame.to_vec()).parse()?;
        let mut out = Vec::new();
        match &object {
            Object::Doc(doc) => object_items(doc.root(), "t", 1, &mut |i| {
                out.push(hash_item(i, versions))
            }),
            Object::Value(value) => {
                object_items(value, "t", 1, &mut |i| out.push(hash_item(i, versions)))
            }
        }
        Some(out)
    }

    /// Values that break a container where a type, a range, a number form, a quantity or an
    /// escape matters.
    const NASTY: [&str; 34] = [
        "null",
        "true",
        "false",
        "0",
        "-0",
        "1",
        "-1",
        "1.0",
        "1e2",
        "0.5",
        "01",
        "2147483647",
        "2147483648",
        "-2147483649",
        "9223372036854775807",
        "9223372036854775808",
        r#""x""#,
        r#""""#,
        r#""1Gi""#,
        r#""1.5""#,
        r#"" 2 ""#,
        r#""lots""#,
        r#""\u00e9""#,
        r#""\ud800""#,
        r#""a\"b""#,
        r#""\q""#,
        "[]",
        "[1]",
        r#"["a"]"#,
        "{}",
        r#"{"a":1}"#,
        r#"{"cpu":"1","cpu":"2"}"#,
        r#"{"name":"n"}"#,
        "\"\u{1}\"",
    ];

    /// Keys to repeat or add: the container's own, deeper ones, one no version knows, one in
    /// another case, and those that make an object a record, a list or a pod.
    const KEYS: [&str; 15] = [
        "name",
        "image",
        "tty",
        "cpu",
        "port",
        "periodSeconds",
        "command",
        "restartPolicy",
        "unknownField",
        "Name",
        "kind",
        "spec",
        "items",
        "container",
        "id",
    ];

    /// A golden container with its `at`-th value (in document order, modulo their number)
    /// replaced by `nasty` (`how` 0), or a member `key: nasty` put first in the `at`-th object
    /// (`how` 1).
    fn mutated(
        container: &serde_json::Value,
        how: u8,
        at: usize,
        nasty: &str,
        key: &str,
    ) -> Vec<u8> {
        if how == 0 {
            fn mark(v: &mut serde_json::Value, at: &mut usize) -> bool {
                if *at == 0 {
                    *v = serde_json::Value::String("\u{1}MARK".into());
                    return true;
                }
                *at -= 1;
                match v {
                    serde_json::Value::Array(items) => items.iter_mut().any(|i| mark(i, at)),
                    serde_json::Value::Object(m) => m.values_mut().any(|i| mark(i, at)),
                    _ => false,
                }
            }
            fn count(v: &serde_json::Value) -> usize {
                1 + match v {
                    serde_json::Value::Array(items) => items.iter().map(count).sum(),
                    serde_json::Value::Object(m) => m.values().map(count).sum(),
                    _ => 0,
                }
            }
            let mut c = container.clone();
            mark(&mut c, &mut (at % count(container)));
            return c
                .to_string()
                .replacen(r#""\u0001MARK""#, nasty, 1)
                .into_bytes();
        }
        let text = container.to_string();
        let opens: Vec<usize> = text.match_indices('{').map(|(i, _)| i).collect();
        let i = opens[at % opens.len()] + 1;
        format!("{}\"{key}\":{nasty},{}", &text[..i], &text[i..]).into_bytes()
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(3000))]
        /// The adversary against the name+image check: golden containers broken in a value, a
        /// key or their bytes, for name+image versions. Whatever the check reads a name and
        /// image from, the usual path (parse, find the items, decode under every version) must
        /// take as one container of that name with the same hashes; and `hash` on cores, the
        /// check on, must give what the one reader gives.
        #[test]
        fn the_name_image_check_takes_only_what_the_decoder_takes(
            pick in 0..600usize,
            how in 0..3u8,
            at in 0..200usize,
            nasty in proptest::sample::select(NASTY.to_vec()),
            key in proptest::sample::select(KEYS.to_vec()),
            edits in proptest::collection::vec((proptest::prelude::any::<proptest::sample::Index>(), 0..3u8,
                proptest::sample::select(vec![b'{', b'}', b'[', b']', b'"', b',', b':', b'\\', b'-', b'.', b'e', b'0', b'9', b'x', b' ', 0x01, 0xff])), 1..3),
            set in proptest::sample::select(vec!["1.31", "1.33", "1.36", "1.37", "1.31..1.37"]),
        ) {
            let versions = parse_version_set(set).unwrap();
            let container = &golden_containers()[pick];
            let mut frame = mutated(container, how.min(1), at, nasty, key);
            if how == 2 {
                crate::source::parallel::break_bytes(&mut frame, &edits);
            }
            let schemas = name_image_schemas(&versions).unwrap();
            if let Some((name, image)) = name_and_image(&frame, &schemas) {
                let expected = vec![(name.to_string(), Ok(name_image_hashes(&name, &image, &versions)))];
                proptest::prop_assert_eq!(usual_path(&frame, &versions), Some(expected), "{}", String::from_utf8_lossy(&frame));
            }
            let mut one_by_one = Vec::new();
            let _ = crate::source::input::for_each_item_in(frame.as_slice(), "t", |i| {
                one_by_one.push(hash_item(i, &versions))
            });
            let input = Input::Bytes { name: "t", bytes: &frame };
            let mut on_cores = Vec::new();
            let _ = for_each_hashed(&input, &versions, 2, |h| on_cores.push(h));
            proptest::prop_assert_eq!(on_cores, one_by_one);
        }
    }

    /// Pieces of a JSON string's contents: plain text, every escape JSON has (surrogates alone,
    /// in pairs and reversed), escapes JSON does not have, and bytes a string may not hold.
    const STRING_PIECES: [&str; 24] = [
        "a",
        "web-1",
        "<>&",
        "é",
        "\u{2028}",
        r#"\""#,
        r#"\\"#,
        r#"\/"#,
        r#"\b"#,
        r#"\f"#,
        r#"\n"#,
        r#"\r"#,
        r#"\t"#,
        r#"\u0000"#,
        r#"\u001f"#,
        r#"\u00E9"#,
        r#"\u2029"#,
        r#"\ud83d\ude00"#,
        r#"\ud800"#,
        r#"\ude00\ud83d"#,
        r#"\x"#,
        r#"\u12"#,
        "\u{1}",
        "\\",
    ];

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(1000))]
        /// The adversary against the check's reading of escapes: a golden container's name and
        /// image made of random escapes and text. Whatever the check reads, the usual path must
        /// read the same name and hash the same.
        #[test]
        fn an_escaped_name_or_image_is_read_as_the_decoder_reads_it(
            pick in 0..600usize,
            name in proptest::collection::vec(proptest::sample::select(STRING_PIECES.to_vec()), 0..5),
            image in proptest::collection::vec(proptest::sample::select(STRING_PIECES.to_vec()), 0..5),
            set in proptest::sample::select(vec!["1.31", "1.37", "1.31..1.37"]),
        ) {
            let versions = parse_version_set(set).unwrap();
            let mut container = golden_containers()[pick].clone();
            container["name"] = serde_json::Value::String("\u{1}NAME".into());
            container["image"] = serde_json::Value::String("\u{1}IMAGE".into());
            let frame = container
                .to_string()
                .replacen(r#""\u0001NAME""#, &format!("\"{}\"", name.concat()), 1)
                .replacen(r#""\u0001IMAGE""#, &format!("\"{}\"", image.concat()), 1)
                .into_bytes();
            let schemas = name_image_schemas(&versions).unwrap();
            if let Some((name, image)) = name_and_image(&frame, &schemas) {
                let expected = vec![(name.to_string(), Ok(name_image_hashes(&name, &image, &versions)))];
                proptest::prop_assert_eq!(usual_path(&frame, &versions), Some(expected), "{}", String::from_utf8_lossy(&frame));
            }
        }
    }

    #[test]
    fn every_golden_container_is_hashed_alike_with_and_without_the_check() {
        for set in ["1.31", "1.36", "1.31..1.37"] {
            let versions = parse_version_set(set).unwrap();
            let schemas = name_image_schemas(&versions).unwrap();
            let mut checked = 0;
            for c in golden_containers() {
                let frame = c.to_string().into_bytes();
                if let Some((name, image)) = name_and_image(&frame, &schemas) {
                    checked += 1;
                    let expected = vec![(
                        name.to_string(),
                        Ok(name_image_hashes(&name, &image, &versions)),
                    )];
                    assert_eq!(usual_path(&frame, &versions), Some(expected), "{set} {c}");
                }
            }
            // All are read by the check (before it read escapes, those with an escape in their
            // name or image were not).
            assert_eq!(checked, golden_containers().len(), "{set}");
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
