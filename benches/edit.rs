//! The shim's own work on a `ListContainers` answer, without sockets: finding each container's
//! hash annotations in the protobuf bytes, deciding, and writing the answer on — for a node of 300
//! containers, all translated (the most work there can be). The answer is shaped like
//! containerd's (about 215 KB: ids, labels and the annotations a kubelet sets) and arrives in
//! 16 KB pieces, as HTTP/2 DATA frames do. Both edit modes: streaming (every translated hash as
//! long as the stored one, so edits happen in place) and whole messages (each held until it ends),
//! with equal lengths and with realistic ones (the kubelet's unpadded hex hashes: the usual case).
//!
//! Run: `cargo bench --bench edit`.

use std::collections::HashMap;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use kubehash::runtime::cri::{keys, proto};
use kubehash::shim::decisions::Decisions;
use kubehash::shim::proxy::{ShimState, Translation};
use kubehash::shim::wire::{Carrier, Hashes, StreamEditor};
use prost::Message;

const CONTAINERS: usize = 300;
const CHUNK: usize = 16 << 10;

fn hex64(seed: usize) -> String {
    (0..8)
        .map(|i| format!("{:08x}", (seed * 2_654_435_761 + i * 40_503) as u32))
        .collect()
}

/// The answer, and a state translating every container: to hashes as long as the stored ones
/// (`keep_lengths`), or to hashes as a kubelet writes them (unpadded hex: about one in eight is
/// shorter than 8 digits), which makes the shim re-encode lengths.
fn answer(keep_lengths: bool) -> (Vec<u8>, ShimState) {
    let mut state = ShimState {
        to: "1.31".into(),
        from: None,
        created_at_unix: 0,
        translations: Default::default(),
    };
    let containers = (0..CONTAINERS)
        .map(|i| {
            let id = hex64(i);
            let hash = format!("{:08x}", i * 7919);
            let labels: HashMap<String, String> = [
                (keys::POD_UID, format!("uid-{i:04}-aaaa-bbbb-cccc")),
                (keys::POD_NAMESPACE, "bench".into()),
                (keys::POD_NAME, format!("pod-{i}")),
                (keys::CONTAINER_NAME, format!("c{i}")),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
            let annotations: HashMap<String, String> = [
                (keys::HASH, hash.clone()),
                ("io.kubernetes.container.restartCount", "0".into()),
                (
                    "io.kubernetes.container.terminationMessagePath",
                    "/dev/termination-log".into(),
                ),
                (
                    "io.kubernetes.container.terminationMessagePolicy",
                    "File".into(),
                ),
                ("io.kubernetes.pod.terminationGracePeriod", "30".into()),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
            state.translations.insert(
                id.clone(),
                Translation {
                    pod: format!("bench/pod-{i}"),
                    container: format!("c{i}"),
                    stored_hash: hash.clone(),
                    new_hash: if keep_lengths {
                        "f".repeat(hash.len())
                    } else {
                        format!("{:x}", (i as u32).wrapping_mul(2_654_435_761) >> (i % 8))
                    },
                    stored_hash_without_resources: None,
                    new_hash_without_resources: None,
                    spec: None,
                },
            );
            proto::Container {
                id,
                pod_sandbox_id: hex64(i + 100_000),
                metadata: Some(proto::ContainerMetadata {
                    name: format!("c{i}"),
                    attempt: 0,
                }),
                image: Some(proto::ImageSpec {
                    image: format!("sha256:{}", hex64(7)),
                    ..Default::default()
                }),
                image_ref: format!("sha256:{}", hex64(7)),
                state: 1,
                created_at: 1_700_000_000_000_000_000 + i as i64,
                labels,
                annotations,
            }
        })
        .collect();
    let msg = proto::ListContainersResponse { containers }.encode_to_vec();
    let mut framed = vec![0];
    framed.extend_from_slice(&(msg.len() as u32).to_be_bytes());
    framed.extend_from_slice(&msg);
    (framed, state)
}

/// Edits the answer as the shim does: pushed in 16 KB pieces; returns the bytes passed on.
fn edit(mut ed: StreamEditor, framed: &[u8], decisions: &Decisions) -> usize {
    let mut decide = |id: &[u8], carried: Hashes<'_>| decisions.decide(id, carried);
    let mut n = 0;
    for chunk in framed.chunks(CHUNK) {
        n += ed.push(chunk, &mut decide).len();
    }
    n + ed.finish().len()
}

fn bench_edit(c: &mut Criterion) {
    let (framed, state) = answer(true);
    let decisions = Decisions::new(&state);
    let mut g = c.benchmark_group("edit");
    g.throughput(Throughput::Bytes(framed.len() as u64));
    g.bench_function("ListContainers-300/streaming", |b| {
        b.iter(|| {
            let n = edit(StreamEditor::new(Carrier::Containers), &framed, &decisions);
            assert_eq!(n, framed.len());
        })
    });
    g.bench_function("ListContainers-300/whole", |b| {
        b.iter(|| {
            edit(
                StreamEditor::holding(Carrier::Containers),
                &framed,
                &decisions,
            )
        })
    });
    // The usual case: real hashes, whose lengths differ; only the holding editor applies.
    let (framed, state) = answer(false);
    assert!(!state.keeps_lengths());
    let decisions = Decisions::new(&state);
    g.bench_function("ListContainers-300/whole, realistic lengths", |b| {
        b.iter(|| {
            edit(
                StreamEditor::holding(Carrier::Containers),
                &framed,
                &decisions,
            )
        })
    });
    g.finish();
}

criterion_group!(benches, bench_edit);
criterion_main!(benches);
