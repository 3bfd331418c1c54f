//! A pod counted once however often an input lists it. `kubectl get -o json` lists a pod once,
//! but a directory may hold two listings of it (a PodList and a copy of one of its pods, or
//! listings taken at different times). Pods are told apart by UID: a second listing whose result
//! is the first's is the same pod; one whose result differs is named, and the first counts. Pods
//! without a UID (hand-written, or several nodes' manifests of one name) are never merged.

use std::collections::hash_map::{Entry, RandomState};
use std::collections::HashMap;
use std::hash::{BuildHasher, Hash};

use serde_json::Value;

/// One listing of a pod that has a UID.
pub struct Listing {
    uid: String,
    /// `namespace/name`, to say which pod.
    pod: String,
    /// Where it is in the input (`pods/b.json: object 2`), when it is read from one.
    at: Option<String>,
    /// A digest of what the listing came to: two listings alike are one pod, counted once.
    digest: u64,
}

impl Listing {
    /// The listing of `pod`, before it is judged; `None` for a pod without a UID.
    pub fn of(pod: &Value) -> Option<Listing> {
        let uid = pod.pointer("/metadata/uid").and_then(Value::as_str);
        let uid = uid.filter(|u| !u.is_empty())?.to_string();
        let name = ["namespace", "name"]
            .map(|k| pod["metadata"][k].as_str().unwrap_or_default())
            .join("/");
        Some(Listing {
            uid,
            pod: name,
            at: None,
            digest: 0,
        })
    }

    /// The listing, once its pod came to `result`: digested with `keys` (random for the run, so
    /// that no input can choose two listings' digests).
    pub fn came_to(mut self, keys: &RandomState, result: &impl Hash) -> Listing {
        self.digest = keys.hash_one(result);
        self
    }

    /// The listing as the `n`th object of `source`.
    pub fn placed(&mut self, source: &str, n: usize) {
        self.at = Some(format!("{source}: object {n}"));
    }
}

/// Whether a listing is the first of its pod.
#[derive(Debug, PartialEq, Eq)]
pub enum Again {
    /// The first listing of this UID: count it.
    First,
    /// Listed before, and came to the same: not counted again.
    Alike,
    /// Listed before, and came to something else: not counted again, and this says so.
    Otherwise(String),
}

/// The digest of each UID's first listing, in 24 bytes a pod for the UUIDs the API server gives
/// (300,000 pods raised a scan's peak RSS by 15 MB).
#[derive(Default)]
pub struct Seen {
    uuids: HashMap<u128, u64>,
    /// UIDs that are not a UUID in the API server's spelling (hand-written pods).
    others: HashMap<Box<str>, u64>,
}

impl Seen {
    /// Notes `l`, and says whether its pod was listed before; `came_to` says what differs (an
    /// assessment, hashes) when it was, and otherwise.
    pub fn again(&mut self, l: &Listing, came_to: &str) -> Again {
        match self.first(&l.uid, l.digest) {
            None => Again::First,
            Some(first) if first == l.digest => Again::Alike,
            Some(_) => {
                let at =
                    l.at.as_deref()
                        .map(|at| format!("{at}: "))
                        .unwrap_or_default();
                Again::Otherwise(format!(
                    "{at}pod {} (uid {}) is listed again, and {came_to} otherwise than where it is first listed (listings taken at different times?): counted from its first listing; give one current listing",
                    l.pod, l.uid
                ))
            }
        }
    }

    /// The first listing's digest of `uid`, after noting `digest` as it when there was none.
    fn first(&mut self, uid: &str, digest: u64) -> Option<u64> {
        fn note<K>(e: Entry<'_, K, u64>, digest: u64) -> Option<u64> {
            match e {
                Entry::Occupied(first) => Some(*first.get()),
                Entry::Vacant(v) => {
                    v.insert(digest);
                    None
                }
            }
        }
        match uuid_bits(uid) {
            Some(bits) => note(self.uuids.entry(bits), digest),
            None => note(self.others.entry(uid.into()), digest),
        }
    }
}

/// The 128 bits of a UUID spelt as the API server spells one (lowercase, `8-4-4-4-12`); `None`
/// for any other spelling, so that two different UIDs never share bits.
fn uuid_bits(uid: &str) -> Option<u128> {
    let b = uid.as_bytes();
    if b.len() != 36 || [8, 13, 18, 23].iter().any(|&i| b[i] != b'-') {
        return None;
    }
    let mut bits = 0u128;
    for (i, &c) in b.iter().enumerate() {
        let nibble = match c {
            b'0'..=b'9' => c - b'0',
            b'a'..=b'f' => c - b'a' + 10,
            b'-' if [8, 13, 18, 23].contains(&i) => continue,
            _ => return None,
        };
        bits = bits << 4 | u128::from(nibble);
    }
    Some(bits)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn only_the_api_servers_uuid_spelling_is_kept_as_bits() {
        let uid = "b4b09c4a-c39e-e288-ddaa-72512eed6a19";
        assert_eq!(uuid_bits(uid), Some(0xb4b09c4a_c39e_e288_ddaa_72512eed6a19));
        // Other spellings of the same bits are other UIDs: kept as strings, never confused.
        for other in [
            "B4B09C4A-C39E-E288-DDAA-72512EED6A19",
            "b4b09c4ac39ee288ddaa72512eed6a19",
            "b4b09c4a-c39e-e288-ddaa-72512eed6a1",
            "b4b09c4a-c39e-e288-ddaa-72512eed6a19 ",
            "b4b09c4a-c39e-e288-ddaa-72512eed6a-9",
            "b4b09c4a-c39e-e288-ddaa-72512eed6ag9",
            "b4b09c4ac-39e-e288-ddaa-72512eed6a19",
        ] {
            assert_eq!(uuid_bits(other), None, "{other}");
        }
        let mut seen = Seen::default();
        assert_eq!(seen.first(uid, 1), None);
        assert_eq!(seen.first(&uid.to_uppercase(), 2), None);
        assert_eq!(seen.first(uid, 3), Some(1));
        assert_eq!(seen.first(&uid.to_uppercase(), 4), Some(2));
    }

    #[test]
    fn a_second_listing_is_alike_or_named() {
        let keys = RandomState::new();
        let pod = json!({"metadata":{"namespace":"ns","name":"p","uid":"u-1"}});
        let listing = |result: u8| Listing::of(&pod).unwrap().came_to(&keys, &result);
        let mut seen = Seen::default();
        assert_eq!(seen.again(&listing(1), "hashed"), Again::First);
        assert_eq!(seen.again(&listing(1), "hashed"), Again::Alike);
        let mut later = listing(2);
        later.placed("b.json", 3);
        assert_eq!(
            seen.again(&later, "hashed"),
            Again::Otherwise("b.json: object 3: pod ns/p (uid u-1) is listed again, and hashed otherwise than where it is first listed (listings taken at different times?): counted from its first listing; give one current listing".into())
        );
        let bare = json!({"metadata":{"namespace":"ns","name":"p"}});
        assert!(Listing::of(&bare).is_none());
    }
}
