//! Every hash of every golden vector, for every kubelet version, both annotations.
//! The vectors (`testdata/golden/public.jsonl`) were produced by the real upstream hashing code;
//! `public-texts.jsonl` holds the exact text fed to FNV-1a for the first 40 cases.

use kubehash::kubelet::hash::{hash_container, hashed_text, Annotation, HashBatch};
use kubehash::kubelet::version::{HashEpoch, KubeletVersion};
use serde_json::Value;

fn records(name: &str) -> Vec<Value> {
    let path = format!("{}/testdata/golden/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    // Split on '\n' only: the vectors contain U+2028, which `lines()` would not split on but
    // other splitters do.
    text.split('\n')
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn every_public_vector_matches_every_version() {
    let versions: Vec<KubeletVersion> = KubeletVersion::all().collect();
    let mut failures = Vec::new();
    let cases = records("public.jsonl");
    assert_eq!(cases.len(), 600);
    for case in &cases {
        let id = case["id"].as_str().unwrap();
        let got = match hash_container(&case["container"], &versions, id) {
            Ok(h) => h,
            Err(e) => {
                failures.push(format!("{id}: {e}"));
                continue;
            }
        };
        for (v, hex) in got.hash_hex() {
            // Vectors newer than the set (1.37) follow the name+image rule: kubelet 1.31+ hash
            // the same text, so they must equal the vector's newest name+image hash.
            let want = case["hash"][&v]
                .as_str()
                .or_else(|| {
                    let parsed: KubeletVersion = v.parse().ok()?;
                    (parsed.epoch() == HashEpoch::NameImage)
                        .then(|| case["hash"]["1.36"].as_str())?
                })
                .unwrap_or_else(|| panic!("{id}: no vector and no rule for kubelet {v}"));
            if hex != want {
                failures.push(format!("{id} {v} hash: got {hex}, want {want}"));
            }
        }
        for (v, hex) in got.without_resources_hex() {
            let want = case["hash_without_resources"][&v].as_str().unwrap();
            if hex != want {
                failures.push(format!(
                    "{id} {v} hashWithoutResources: got {hex}, want {want}"
                ));
            }
        }
        assert_eq!(got.hash.len(), versions.len(), "{id}: every version hashed");
        assert!(case["hash"].as_object().unwrap().len() <= versions.len());
        assert_eq!(
            got.hash_without_resources.len(),
            case["hash_without_resources"].as_object().unwrap().len(),
            "{id}"
        );
    }
    assert!(
        failures.is_empty(),
        "{} mismatches, first ones:\n{}",
        failures.len(),
        failures
            .iter()
            .take(30)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// Each struct-dump version alone (`hash --versions 1.15`), whose text is written straight from
/// the JSON without the value tree (`kubelet::spew_direct`): one container at a time and as a
/// batch, every vector.
#[test]
fn every_public_vector_matches_each_struct_dump_version_alone() {
    let cases = records("public.jsonl");
    let mut failures = Vec::new();
    for v in KubeletVersion::all().filter(|v| v.epoch() == HashEpoch::Spew) {
        let mut batch = HashBatch::default();
        for case in &cases {
            let id = case["id"].as_str().unwrap();
            let want = case["hash"][v.to_string()].as_str().unwrap();
            let one = hash_container(&case["container"], &[v], id).unwrap();
            batch.add(&case["container"], &[v], id).unwrap();
            if one.hash_hex() != [(v.to_string(), want.to_string())] {
                failures.push(format!("{id} {v}: got {:?}, want {want}", one.hash_hex()));
            }
        }
        for (case, got) in cases.iter().zip(batch.finish()) {
            let want = case["hash"][v.to_string()].as_str().unwrap();
            if got.hash_hex() != [(v.to_string(), want.to_string())] {
                failures.push(format!(
                    "{} {v} in a batch: got {:?}",
                    case["id"],
                    got.hash_hex()
                ));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{}",
        failures[..failures.len().min(10)].join("\n")
    );
}

#[test]
fn hashed_texts_match_byte_for_byte() {
    let cases = records("public.jsonl");
    let mut failures = Vec::new();
    let mut seen_without = std::collections::HashSet::new();
    for t in records("public-texts.jsonl") {
        let id = t["id"].as_str().unwrap();
        let v: KubeletVersion = t["version"].as_str().unwrap().parse().unwrap();
        let case = cases.iter().find(|c| c["id"] == id).unwrap();
        // For 1.27 – 1.30 the file lists the hash text, then the hashWithoutResources text.
        let a = if v.has_hash_without_resources() && !seen_without.insert((id.to_string(), v)) {
            Annotation::HashWithoutResources
        } else {
            Annotation::Hash
        };
        let got = hashed_text(&case["container"], v, a, id).unwrap();
        let want = t["text"].as_str().unwrap();
        if got != want.as_bytes() {
            let got = String::from_utf8_lossy(&got);
            let at = got
                .bytes()
                .zip(want.bytes())
                .take_while(|(a, b)| a == b)
                .count();
            failures.push(format!(
                "{id} {v} {a:?} differs at byte {at}:\n  got  …{}\n  want …{}",
                &got[at.saturating_sub(80)..(at + 80).min(got.len())],
                &want[at.saturating_sub(80)..(at + 80).min(want.len())]
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{}",
        failures
            .iter()
            .take(5)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
}
