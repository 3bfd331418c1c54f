//! Where the writers put their bytes: straight into an FNV-1a hasher (no intermediate text), or
//! into a buffer when a person wants to see the text (`--explain`).

/// A byte sink. The writers in [`crate::spew`] and [`crate::gojson`] stream into any of these.
pub trait Sink {
    fn put(&mut self, bytes: &[u8]);
}

impl Sink for Vec<u8> {
    #[inline]
    fn put(&mut self, bytes: &[u8]) {
        self.extend_from_slice(bytes);
    }
}

/// FNV-1a, 32 bit: what the kubelet's `fnv.New32a()` computes.
///
/// (The `fnv` crate offers only the 64-bit variant; this is the whole 32-bit algorithm.)
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fnv32a(pub u32);

impl Fnv32a {
    pub const OFFSET_BASIS: u32 = 0x811c_9dc5;
    pub const PRIME: u32 = 0x0100_0193;

    pub fn new() -> Self {
        Fnv32a(Self::OFFSET_BASIS)
    }

    pub fn finish(self) -> u32 {
        self.0
    }

    /// FNV-1a of `bytes` in one call.
    pub fn hash(bytes: &[u8]) -> u32 {
        let mut h = Fnv32a::new();
        h.put(bytes);
        h.finish()
    }
}

impl Default for Fnv32a {
    fn default() -> Self {
        Fnv32a::new()
    }
}

impl Sink for Fnv32a {
    #[inline]
    fn put(&mut self, bytes: &[u8]) {
        let mut h = self.0;
        for &b in bytes {
            h ^= u32::from(b);
            h = h.wrapping_mul(Self::PRIME);
        }
        self.0 = h;
    }
}

/// How a kubelet stores a hash: `strconv.FormatUint(uint64(h), 16)`, lowercase, unpadded.
pub fn format_hash(h: u32) -> String {
    format!("{h:x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1a_32_reference_values() {
        // Published FNV-1a 32-bit test vectors.
        assert_eq!(Fnv32a::hash(b""), 0x811c9dc5);
        assert_eq!(Fnv32a::hash(b"a"), 0xe40c292c);
        assert_eq!(Fnv32a::hash(b"foobar"), 0xbf9cf968);
    }

    #[test]
    fn hashes_are_unpadded_lowercase_hex() {
        assert_eq!(format_hash(0x030695c8), "30695c8");
        assert_eq!(format_hash(0), "0");
    }
}
