//! A memo of answers for specs seen before, in bounded memory.
//!
//! Replicas of one workload share a spec, so scans and matrices answer most containers from a
//! memo; but a cluster of distinct specs would grow a plain map with its input (each key is a
//! whole container's JSON). This one forgets everything when it is full, by count or by the
//! bytes of its keys (a container's JSON can be tens of KB): the replicas of a workload are
//! listed together, so the memo still answers them, and memory stays bounded.

use std::collections::HashMap;
use std::hash::Hash;

/// How many answers a memo keeps before it starts over.
pub const MEMO_ENTRIES: usize = 4_096;

/// How many bytes of keys a memo keeps before it starts over: about 4,000 containers of 2 KB, or
/// 400 of 20 KB.
pub const MEMO_BYTES: usize = 8 << 20;

/// What keeping a key costs, in bytes: its text, and a little for the entry around it.
pub trait Weight {
    fn weight(&self) -> usize;
}

impl Weight for String {
    fn weight(&self) -> usize {
        self.len() + 64
    }
}

impl<A, B: Weight> Weight for (A, B) {
    fn weight(&self) -> usize {
        self.1.weight()
    }
}

#[derive(Debug, Clone)]
pub struct Memo<K, V> {
    map: HashMap<K, V>,
    capacity: usize,
    bytes: usize,
    byte_capacity: usize,
}

impl<K: Hash + Eq + Weight, V> Default for Memo<K, V> {
    fn default() -> Self {
        Memo::with_capacity(MEMO_ENTRIES, MEMO_BYTES)
    }
}

impl<K: Hash + Eq + Weight, V> Memo<K, V> {
    /// A memo of at most `capacity` answers (at least one) and `byte_capacity` bytes of keys
    /// (past that, it keeps the newest answer alone).
    pub fn with_capacity(capacity: usize, byte_capacity: usize) -> Self {
        Memo {
            map: HashMap::new(),
            capacity: capacity.max(1),
            bytes: 0,
            byte_capacity,
        }
    }

    pub fn get(&self, key: &K) -> Option<&V> {
        self.map.get(key)
    }

    /// Remembers `value` for `key`, first forgetting everything if the memo is full.
    pub fn insert(&mut self, key: K, value: V) {
        let weight = key.weight();
        let full = self.map.len() >= self.capacity || self.bytes + weight > self.byte_capacity;
        if full && !self.map.contains_key(&key) {
            self.map.clear();
            self.bytes = 0;
        }
        if self.map.insert(key, value).is_none() {
            self.bytes += weight;
        }
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_holds_more_than_its_capacity() {
        let mut m = Memo::with_capacity(3, usize::MAX);
        for i in 0..10 {
            m.insert(i.to_string(), i * 2);
            assert!(m.len() <= 3);
            assert_eq!(
                m.get(&i.to_string()),
                Some(&(i * 2)),
                "the newest answer is kept"
            );
        }
        m.insert("9".to_string(), 0);
        assert_eq!(m.get(&"9".to_string()), Some(&0));
    }

    #[test]
    fn never_holds_more_than_its_bytes() {
        let key = |i: usize| "x".repeat(100 + i);
        let budget = 1_000;
        let mut m = Memo::with_capacity(usize::MAX, budget);
        for i in 0..50 {
            m.insert(key(i), i);
            let held: usize = (0..=i)
                .filter(|&j| m.get(&key(j)).is_some())
                .map(|j| key(j).weight())
                .sum();
            assert!(held <= budget, "{held} bytes held");
            assert_eq!(m.get(&key(i)), Some(&i), "the newest answer is kept");
        }
        // A key larger than the whole budget is still the newest answer, alone.
        m.insert(key(2_000), 1);
        assert_eq!((m.len(), m.get(&key(2_000))), (1, Some(&1)));
    }
}
