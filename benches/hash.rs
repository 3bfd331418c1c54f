//! Containers hashed per second, per epoch, over the golden corpus — next to the floor: FNV-1a
//! alone over the same texts, pre-rendered, in the same run.
//!
//! * `render+fnv`: the writers streaming a decoded container into the hasher (what `hash` does
//!   after decoding);
//! * `fnv-floor`: FNV-1a over the exact same bytes, already in memory, one text after another;
//! * `fnv-lanes`: the same texts hashed as a batch in interleaved lanes (`lanes::fnv1a_batch`);
//! * `decode+render+fnv`: from `serde_json::Value` to hash, decode included;
//! * `from-bytes-*`: from the input bytes, as `kubehash hash` reads them (the one reader, the
//!   CLI's allocator) for 1.15, 1.30, 1.31 and all 29 versions, next to the FNV floor over every
//!   text those versions hash and the reading alone (`parse-only`); `framed-*` does the same the
//!   way `kubehash hash` now reads a file (framed, each frame parsed from a slice), on one thread;
//!   `framed+batch+hash` as its workers hash them, the containers of a batch of objects together
//!   (`HashBatch`: their texts in the same FNV lanes).
//! * `from-bytes-reading`: floors for the reading itself, version-free: `framing-only` (finding
//!   where each object ends) and `framed-validate-only` (each frame checked by serde_json
//!   without building anything: what reading a frame costs before a value is made of it).
//! * `from-bytes-reading-list`: `framing-podlist`, the bundled example's PodList framed into
//!   its items, in bytes per second.
//! * `bare-1.31-parts`: what #16's ×20 at 1.31 is made of, bare containers, in one run: each
//!   step of `bare+batch+hash` alone (`framing`, the name+image `check` of each frame, FNV over
//!   each hashed text, serial and in lanes) next to the whole and to serde_json only
//!   validating each frame (`serde-validate`, `IgnoredAny`): the floor of a check that builds
//!   nothing and knows no types.
//!
//! Run: `cargo bench --bench hash` (add `-- --quick` for a fast look).

use criterion::measurement::WallTime;
use criterion::{
    black_box, criterion_group, criterion_main, BenchmarkGroup, Criterion, Throughput,
};
use kubehash::analysis::hashing::{hash_objects, BATCH};
use kubehash::kubelet::decode::{decode_container, Arena};
use kubehash::kubelet::hash::{
    hash_container, hashed_text, write_hashed_text, Annotation, HashBatch,
};
use kubehash::kubelet::json::Json;
use kubehash::kubelet::lanes::fnv1a_batch;
use kubehash::kubelet::schema::Schema;
use kubehash::kubelet::sink::Fnv32a;
use kubehash::kubelet::version::{parse_version_set, KubeletVersion};
use kubehash::source::doc::{Doc, Unparsed};
use kubehash::source::frames::frame_objects;
use kubehash::source::input::{for_each_item_in, object_items, Item};
use kubehash::source::name_image::name_and_image;

// The allocator the CLI uses, so that parsing costs what it costs in `kubehash hash`.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;
use serde_json::Value;

fn corpus() -> Vec<Value> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/testdata/golden/public.jsonl");
    let text = std::fs::read_to_string(path).expect("golden corpus");
    text.split('\n')
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let mut v: Value = serde_json::from_str(l).expect("golden line");
            v["container"].take()
        })
        .collect()
}

/// The floor: FNV-1a alone over the texts, already in memory, one after another.
fn bench_floor(g: &mut BenchmarkGroup<'_, WallTime>, texts: &[Vec<u8>]) {
    g.bench_function("fnv-floor", |b| {
        b.iter(|| {
            let mut acc = 0u32;
            for t in texts {
                acc ^= Fnv32a::hash(black_box(t));
            }
            acc
        })
    });
}

/// The same texts hashed as one batch in interleaved lanes.
fn bench_lanes(g: &mut BenchmarkGroup<'_, WallTime>, texts: &[Vec<u8>]) {
    let refs: Vec<&[u8]> = texts.iter().map(Vec::as_slice).collect();
    g.bench_function("fnv-lanes", |b| {
        let mut out = vec![0u32; refs.len()];
        b.iter(|| {
            fnv1a_batch(black_box(&refs), &mut out);
            out[0]
        })
    });
}

/// The containers as `kubehash hash` reads a file of them: one compact JSON object a line.
fn bare_lines(containers: &[Value]) -> Vec<u8> {
    let mut bare = Vec::new();
    for c in containers {
        serde_json::to_writer(&mut bare, c).expect("container");
        bare.push(b'\n');
    }
    bare
}

fn bench_epochs(c: &mut Criterion) {
    let containers = corpus();
    let arena = Arena::new();
    for (label, version) in [
        ("spew-1.15", "1.15"),
        ("json-1.30", "1.30"),
        ("name-image-1.31", "1.31"),
    ] {
        let v: KubeletVersion = version.parse().expect("version");
        let schema = Schema::for_version(v).expect("schema");
        let decoded: Vec<_> = containers
            .iter()
            .map(|j| decode_container(schema, j, "", &arena).expect("decode"))
            .collect();
        let texts: Vec<Vec<u8>> = decoded
            .iter()
            .map(|d| {
                let mut t = Vec::new();
                write_hashed_text(schema, d, v.epoch(), Annotation::Hash, &mut t);
                t
            })
            .collect();
        let bytes: usize = texts.iter().map(Vec::len).sum();

        let mut g = c.benchmark_group(label);
        g.throughput(Throughput::Elements(containers.len() as u64));
        bench_floor(&mut g, &texts);
        bench_lanes(&mut g, &texts);
        g.bench_function("render+fnv", |b| {
            b.iter(|| {
                let mut acc = 0u32;
                for d in &decoded {
                    let mut h = Fnv32a::new();
                    write_hashed_text(schema, black_box(d), v.epoch(), Annotation::Hash, &mut h);
                    acc ^= h.finish();
                }
                acc
            })
        });
        g.bench_function("decode+render+fnv", |b| {
            b.iter(|| {
                let mut acc = 0u32;
                for j in &containers {
                    let h = hash_container(black_box(j), &[v], "").expect("hash");
                    acc ^= h.hash[0].1;
                }
                acc
            })
        });
        g.finish();
        eprintln!(
            "{label}: {} containers, {bytes} hashed bytes",
            containers.len()
        );
    }
}

/// From the input bytes, as `kubehash hash` reads them (the one reader, the same allocator),
/// for each epoch and for all 29 versions, next to the FNV-1a floor over the texts those
/// versions hash (every annotation, every version: what a kubelet would feed FNV).
fn bench_from_bytes(c: &mut Criterion) {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/testdata/golden/public.jsonl");
    let bytes = std::fs::read(path).expect("golden corpus");
    let containers = corpus();
    let bare = bare_lines(&containers);
    for (label, spec) in [
        ("from-bytes-1.15", "1.15"),
        ("from-bytes-1.30", "1.30"),
        ("from-bytes-1.31", "1.31"),
        ("from-bytes-all-29", "all"),
    ] {
        let versions = parse_version_set(spec).expect("versions");
        let texts: Vec<Vec<u8>> = containers
            .iter()
            .flat_map(|j| {
                let mut t = Vec::new();
                for &v in &versions {
                    t.push(hashed_text(j, v, Annotation::Hash, "").expect("text"));
                    if v.has_hash_without_resources() {
                        t.push(
                            hashed_text(j, v, Annotation::HashWithoutResources, "").expect("text"),
                        );
                    }
                }
                t
            })
            .collect();
        let mut g = c.benchmark_group(label);
        g.throughput(Throughput::Elements(containers.len() as u64));
        bench_floor(&mut g, &texts);
        g.bench_function("parse-only", |b| {
            b.iter(|| {
                let mut n = 0usize;
                for_each_item_in(black_box(bytes.as_slice()), "bench", |_| n += 1).expect("read");
                n
            })
        });
        g.bench_function("read+decode+hash", |b| {
            b.iter(|| {
                let mut acc = 0u32;
                for_each_item_in(black_box(bytes.as_slice()), "bench", |item| {
                    if let Item::Container { json, path, .. } = item {
                        if let Ok(h) = hash_container(json, &versions, &path) {
                            acc ^= h.hash[0].1;
                        }
                    }
                })
                .expect("read");
                acc
            })
        });
        // What each `kubehash hash` worker does per object since files are framed: the frame
        // parsed from a slice into a `Doc`, then decoded and hashed (the framing itself is the
        // reading thread's, and is counted here too, on the same thread). `framed-parse-value`
        // is the same frames parsed into a `serde_json::Value`, as workers did before.
        g.bench_function("framed-parse-value", |b| {
            b.iter(|| {
                sum_over_frames(&bytes, |frame| {
                    let v: Value = serde_json::from_slice(&frame).expect("frame");
                    usize::from(v.is_object())
                })
            })
        });
        g.bench_function("framed-parse-only", |b| {
            b.iter(|| {
                sum_over_frames(&bytes, |frame| {
                    usize::from(Doc::parse(frame).expect("frame").root().is_object())
                })
            })
        });
        g.bench_function("framed+decode+hash", |b| {
            b.iter(|| {
                let mut acc = 0u32;
                let mut n = 0;
                frame_objects(black_box(bytes.as_slice()), &mut |frame| {
                    n += 1;
                    let doc = Doc::parse(frame).expect("frame");
                    object_items(doc.root(), "bench", n, &mut |item| {
                        if let Item::Container { json, path, .. } = item {
                            if let Ok(h) = hash_container(json, &versions, &path) {
                                acc ^= h.hash[0].1;
                            }
                        }
                    });
                    true
                })
                .expect("frame");
                acc
            })
        });
        // What a `kubehash hash` worker does since containers are hashed in batches: its batch
        // of frames, each parsed when taken, their containers decoded and rendered into a
        // `HashBatch`, and the texts of the whole batch hashed in FNV lanes.
        g.bench_function("framed+batch+hash", |b| {
            let mut batch = HashBatch::default();
            b.iter(|| hash_in_batches(&bytes, &versions, &mut batch))
        });
        // The same over the containers alone, one compact JSON object a line (768 bytes on
        // average), without the records' ids and expected hashes (676 bytes more a record).
        g.bench_function("bare+batch+hash", |b| {
            let mut batch = HashBatch::default();
            b.iter(|| hash_in_batches(&bare, &versions, &mut batch))
        });
        g.finish();
    }
    let mut g = c.benchmark_group("from-bytes-reading");
    g.throughput(Throughput::Elements(containers.len() as u64));
    g.bench_function("framing-only", |b| {
        b.iter(|| sum_over_frames(&bytes, |frame| frame.len()))
    });
    g.bench_function("framed-validate-only", |b| {
        b.iter(|| {
            sum_over_frames(&bytes, |frame| {
                let _: serde::de::IgnoredAny = serde_json::from_slice(&frame).expect("frame");
                1
            })
        })
    });
    g.finish();
    // A PodList (the bundled example), whose items the framer hands over as the List streams
    // them: framed once, not first followed whole to its end (the regression aa59a52 fixed).
    let list = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/testdata/cluster/pods.json"
    ))
    .expect("the bundled PodList");
    let mut g = c.benchmark_group("from-bytes-reading-list");
    g.throughput(Throughput::Bytes(list.len() as u64));
    g.bench_function("framing-podlist", |b| {
        b.iter(|| sum_over_frames(&list, |frame| frame.len()))
    });
    g.finish();
}

/// Hashes every container of `bytes` as a `kubehash hash` worker does: frames in batches of
/// `BATCH`, each parsed (or, for name+image versions, checked) by the worker's own `hash_objects`.
fn hash_in_batches(bytes: &[u8], versions: &[KubeletVersion], batch: &mut HashBatch) -> u32 {
    let mut acc = 0u32;
    let mut n = 0;
    let mut frames = Vec::with_capacity(BATCH);
    let mut hash_frames = |frames: &mut Vec<(usize, Vec<u8>)>| {
        let mut objects = frames
            .drain(..)
            .map(|(n, frame)| (n, Unparsed::Frame(frame)));
        for (_, hashed) in hash_objects(&mut objects, "bench", versions, batch)
            .into_iter()
            .flatten()
        {
            acc ^= hashed.map_or(0, |h| h.hash[0].1);
        }
    };
    frame_objects(black_box(bytes), &mut |frame| {
        n += 1;
        frames.push((n, frame));
        if frames.len() == BATCH {
            hash_frames(&mut frames);
        }
        true
    })
    .expect("frame");
    hash_frames(&mut frames);
    acc
}

/// Frames `bytes` as `kubehash hash` reads a file and adds up what `each` makes of each frame.
/// `bare-1.31-parts` (see the top of the file): per bare container, per step.
fn bench_bare_name_image_parts(c: &mut Criterion) {
    let versions = parse_version_set("1.31").expect("versions");
    let schema = Schema::for_version(versions[0]).expect("schema");
    let containers = corpus();
    let bare = bare_lines(&containers);
    let mut frames = Vec::new();
    frame_objects(bare.as_slice(), &mut |frame| {
        frames.push(frame);
        true
    })
    .expect("frame");
    let texts: Vec<Vec<u8>> = containers
        .iter()
        .map(|j| hashed_text(j, versions[0], Annotation::Hash, "").expect("text"))
        .collect();
    let mut g = c.benchmark_group("bare-1.31-parts");
    g.throughput(Throughput::Elements(containers.len() as u64));
    g.bench_function("framing", |b| {
        b.iter(|| sum_over_frames(&bare, |frame| frame.len()))
    });
    g.bench_function("serde-validate", |b| {
        b.iter(|| {
            frames
                .iter()
                .filter(|f| serde_json::from_slice::<serde::de::IgnoredAny>(black_box(f)).is_ok())
                .count()
        })
    });
    g.bench_function("check", |b| {
        b.iter(|| {
            frames
                .iter()
                .filter(|f| name_and_image(black_box(f), &[schema]).is_some())
                .count()
        })
    });
    bench_floor(&mut g, &texts);
    bench_lanes(&mut g, &texts);
    g.bench_function("bare+batch+hash", |b| {
        let mut batch = HashBatch::default();
        b.iter(|| hash_in_batches(&bare, &versions, &mut batch))
    });
    g.finish();
}

fn sum_over_frames(bytes: &[u8], mut each: impl FnMut(Vec<u8>) -> usize) -> usize {
    let mut n = 0;
    frame_objects(black_box(bytes), &mut |frame| {
        n += each(frame);
        true
    })
    .expect("frame");
    n
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(std::time::Duration::from_millis(500))
        .measurement_time(std::time::Duration::from_secs(3));
    targets = bench_epochs, bench_from_bytes, bench_bare_name_image_parts
}
criterion_main!(benches);
