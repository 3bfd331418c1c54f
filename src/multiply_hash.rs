//! A multiply-per-word hasher for hash maps whose keys nobody outside can choose: addresses and
//! shape numbers the program makes, container ids the runtime makes. Nobody can aim collisions
//! at such a map (and one would only slow a lookup down), so SipHash's protection buys nothing.
//! Measured where it is used: SipHash was a tenth of hashing all 29 versions (the shared-decode
//! map), and a fifth of the shim's edit of a ListContainers answer (container ids).

use std::hash::{BuildHasherDefault, Hasher};

/// See the module documentation.
#[derive(Default)]
pub struct MultiplyHasher(u64);

/// Builds [`MultiplyHasher`]s, for `HashMap<K, V, MultiplyHash>`.
pub type MultiplyHash = BuildHasherDefault<MultiplyHasher>;

impl Hasher for MultiplyHasher {
    fn finish(&self) -> u64 {
        self.0 ^ (self.0 >> 29)
    }

    /// Eight bytes at a time; the length goes into the last word, so that keys differing only
    /// in trailing zero bytes differ.
    fn write(&mut self, bytes: &[u8]) {
        let mut words = bytes.chunks_exact(8);
        for w in &mut words {
            let mut word = [0; 8];
            word.copy_from_slice(w);
            self.write_u64(u64::from_le_bytes(word));
        }
        let rest = words.remainder();
        let mut last = [0; 8];
        last[..rest.len()].copy_from_slice(rest);
        self.write_u64(u64::from_le_bytes(last) ^ ((bytes.len() as u64) << 56));
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(26) ^ n).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }

    fn write_u32(&mut self, n: u32) {
        self.write_u64(u64::from(n));
    }

    fn write_usize(&mut self, n: usize) {
        self.write_u64(n as u64);
    }
}
