//! A memo of answers for specs seen before, in bounded memory.
//!
//! Replicas of one workload share a spec, so scans and matrices answer most containers from a
//! memo; but a cluster of distinct specs would grow a plain map with its input (each key is a
//! whole container's JSON). This one forgets everything when it is full: the replicas of a
//! workload are listed together, so the memo still answers them, and memory stays bounded.

use std::collections::HashMap;
use std::hash::Hash;

/// How many answers a memo keeps before it starts over (a few KB each at most).
pub const MEMO_ENTRIES: usize = 4_096;

#[derive(Debug, Clone)]
pub struct Memo<K, V> {
    map: HashMap<K, V>,
    capacity: usize,
}

impl<K: Hash + Eq, V> Default for Memo<K, V> {
    fn default() -> Self {
        Memo::with_capacity(MEMO_ENTRIES)
    }
}

impl<K: Hash + Eq, V> Memo<K, V> {
    pub fn with_capacity(capacity: usize) -> Self {
        Memo {
            map: HashMap::new(),
            capacity: capacity.max(1),
        }
    }

    pub fn get(&self, key: &K) -> Option<&V> {
        self.map.get(key)
    }

    /// Remembers `value` for `key`, first forgetting everything if the memo is full.
    pub fn insert(&mut self, key: K, value: V) {
        if self.map.len() >= self.capacity && !self.map.contains_key(&key) {
            self.map.clear();
        }
        self.map.insert(key, value);
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
        let mut m = Memo::with_capacity(3);
        for i in 0..10 {
            m.insert(i, i * 2);
            assert!(m.len() <= 3);
            assert_eq!(m.get(&i), Some(&(i * 2)), "the newest answer is kept");
        }
        m.insert(9, 0);
        assert_eq!(m.get(&9), Some(&0));
    }
}
