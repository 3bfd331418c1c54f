//! What the shim shows for each container, laid out for the answer path.
//!
//! Every container of every answer is looked up, and between two kubelet calls the runtime, the
//! kubelet and the kernel have been through the CPU caches, so a lookup costs what it touches.
//! A map of ids to whole translations ([`crate::shim::proxy::Translation`]) touched a 232-byte
//! bucket, the id behind it and the strings behind that: perf put four fifths of the lookup on
//! the first of those loads. Here a lookup reads a 4-byte slot and one packed entry that holds
//! the id and the values.

use std::hash::BuildHasher;

use hashbrown::HashTable;

use crate::multiply_hash::MultiplyHash;
use crate::shim::proxy::ShimState;
use crate::shim::wire::Hashes;

/// The translations of a [`ShimState`], by the container id's bytes (no UTF-8 check).
#[derive(Default)]
pub struct Decisions {
    /// Each entry's offset in `packed`, by the hash of its id.
    table: HashTable<u32>,
    /// The entries one after another: four lengths (u32, little-endian: id, stored hash, hash to
    /// show, hashWithoutResources to show or [`NONE`]), then those bytes.
    packed: Vec<u8>,
}

/// The length that marks "no hashWithoutResources to show".
const NONE: u32 = u32::MAX;

/// One packed entry, read back.
struct Entry<'a> {
    id: &'a [u8],
    stored: &'a [u8],
    new: &'a [u8],
    new_without_resources: Option<&'a [u8]>,
}

impl Decisions {
    pub fn new(state: &ShimState) -> Decisions {
        let mut d = Decisions::default();
        for (id, t) in &state.translations {
            let without = t.new_hash_without_resources.as_deref();
            let parts = [
                Some(id.as_str()),
                Some(t.stored_hash.as_str()),
                Some(t.new_hash.as_str()),
                without,
            ];
            // A state is the shim's own file; no field of it comes near 4 GB.
            let (Ok(at), Some(lengths)) = (
                u32::try_from(d.packed.len()),
                parts
                    .iter()
                    .map(|p| match p {
                        None => Some(NONE),
                        Some(p) => u32::try_from(p.len()).ok().filter(|&l| l != NONE),
                    })
                    .collect::<Option<Vec<u32>>>(),
            ) else {
                continue; // never shown: the container keeps its stored hash
            };
            for l in lengths {
                d.packed.extend_from_slice(&l.to_le_bytes());
            }
            for p in parts.into_iter().flatten() {
                d.packed.extend_from_slice(p.as_bytes());
            }
            let hash = hash_id(id.as_bytes());
            let packed = &d.packed;
            d.table
                .insert_unique(hash, at, |&at| hash_id(entry(packed, at).id));
        }
        d
    }

    /// The hash values to show for one container, given the ones the runtime reported: the
    /// translation, only when the stored hash is still exactly the one planned.
    pub fn decide(&self, id: &[u8], carried: Hashes<'_>) -> Hashes<'_> {
        let found = self
            .table
            .find(hash_id(id), |&at| entry(&self.packed, at).id == id);
        let Some(&at) = found else {
            return Hashes::default();
        };
        let e = entry(&self.packed, at);
        if carried.hash != Some(e.stored) {
            return Hashes::default(); // not what was planned: never masked
        }
        Hashes {
            hash: Some(e.new),
            // Shown only where the container has one.
            hash_without_resources: carried.hash_without_resources.and(e.new_without_resources),
        }
    }
}

/// Reads the entry at `at` (an offset [`Decisions::new`] wrote).
fn entry(packed: &[u8], at: u32) -> Entry<'_> {
    let at = at as usize;
    let length = |i: usize| {
        let mut word = [0; 4];
        word.copy_from_slice(&packed[at + 4 * i..at + 4 * i + 4]);
        u32::from_le_bytes(word)
    };
    let mut pos = at + 16;
    let mut take = |l: u32| {
        let part = &packed[pos..pos + l as usize];
        pos += l as usize;
        part
    };
    let (id, stored, new) = (take(length(0)), take(length(1)), take(length(2)));
    let new_without_resources = match length(3) {
        NONE => None,
        l => Some(take(l)),
    };
    Entry {
        id,
        stored,
        new,
        new_without_resources,
    }
}

/// Container ids are made by the runtime: see [`crate::multiply_hash`].
fn hash_id(id: &[u8]) -> u64 {
    MultiplyHash::default().hash_one(id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shim::proxy::Translation;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    fn state(translations: BTreeMap<String, Translation>) -> ShimState {
        ShimState {
            to: "1.29".into(),
            from: None,
            created_at_unix: 0,
            translations,
        }
    }

    fn translation(stored: &str, new: &str, new_without: Option<&str>) -> Translation {
        Translation {
            pod: "ns/p".into(),
            container: "a".into(),
            stored_hash: stored.into(),
            new_hash: new.into(),
            stored_hash_without_resources: None,
            new_hash_without_resources: new_without.map(Into::into),
            spec: None,
        }
    }

    #[test]
    fn translates_only_what_was_planned() {
        let s = Decisions::new(&state(
            [("c1".to_string(), translation("111", "999", Some("888")))].into(),
        ));
        let carried = |h: &'static str| Hashes {
            hash: Some(h.as_bytes()),
            hash_without_resources: None,
        };
        assert_eq!(
            s.decide(b"c1", carried("111")),
            Hashes {
                hash: Some(b"999"),
                hash_without_resources: None
            }
        );
        assert_eq!(
            s.decide(b"c1", carried("222")),
            Hashes::default(),
            "a hash that changed is never masked"
        );
        assert_eq!(
            s.decide(b"other", carried("111")),
            Hashes::default(),
            "containers created later pass through"
        );
        let both = Hashes {
            hash_without_resources: Some(b"x"),
            ..carried("111")
        };
        assert_eq!(
            s.decide(b"c1", both).hash_without_resources,
            Some(&b"888"[..])
        );
    }

    proptest! {
        /// Every id finds its own translation and nothing else, however ids and values look
        /// (empty, sharing prefixes, differing only in trailing zero bytes).
        #[test]
        fn each_container_gets_its_own_translation(
            entries in proptest::collection::btree_map(
                "[ab\u{0}]{0,12}",
                ("[0-9a-f]{0,9}", "[0-9a-f]{0,9}", proptest::option::of("[0-9a-f]{0,9}")),
                0..40,
            ),
            probes in proptest::collection::vec("[ab\u{0}]{0,12}", 0..40),
        ) {
            let translations: BTreeMap<String, Translation> = entries
                .iter()
                .map(|(id, (s, n, w))| (id.clone(), translation(s, n, w.as_deref())))
                .collect();
            let d = Decisions::new(&state(translations));
            for id in entries.keys().chain(&probes) {
                for without in [None, Some(&b"x"[..])] {
                    let planned = entries.get(id);
                    let stored = planned.map_or("none", |(s, _, _)| s.as_str());
                    let carried = Hashes {
                        hash: Some(stored.as_bytes()),
                        hash_without_resources: without,
                    };
                    let want = match planned {
                        None => Hashes::default(),
                        Some((_, n, w)) => Hashes {
                            hash: Some(n.as_bytes()),
                            hash_without_resources: without.and(w.as_deref().map(str::as_bytes)),
                        },
                    };
                    prop_assert_eq!(d.decide(id.as_bytes(), carried), want);
                    // Any other stored value is never translated.
                    let changed = Hashes { hash: Some(b"changed"), ..carried };
                    prop_assert_eq!(d.decide(id.as_bytes(), changed), Hashes::default());
                }
            }
        }
    }
}
