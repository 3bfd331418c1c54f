//! Where the writers put their bytes: straight into an FNV-1a hasher (no intermediate text), or
//! into a buffer when a person wants to see the text (`--explain`).

use std::collections::HashMap;
use std::ops::Range;

use crate::multiply_hash::MultiplyHash;

/// A byte sink. The writers in [`crate::kubelet::spew`] and [`crate::kubelet::gojson`] stream into any of these.
pub trait Sink {
    fn put(&mut self, bytes: &[u8]);

    /// How many bytes were written, for sinks that keep them.
    #[inline]
    fn position(&self) -> Option<usize> {
        None
    }

    /// Writes the text of a value several type graphs of one container share (`key` names it
    /// while they live, [`crate::kubelet::decode::Val::Shared`]); `render` writes it. A sink that
    /// keeps such texts ([`Remembering`]) renders each once and copies it after.
    #[inline]
    fn shared(&mut self, key: usize, render: &mut dyn FnMut(&mut Self))
    where
        Self: Sized,
    {
        let _ = key;
        render(self);
    }
}

/// The texts of shared values already rendered for one container, by key (see [`Sink::shared`]).
/// Keys are addresses, so it must be cleared before the next container.
#[derive(Default)]
pub struct SharedTexts {
    at: HashMap<usize, Range<usize>, MultiplyHash>,
    bytes: Vec<u8>,
}

impl SharedTexts {
    pub fn clear(&mut self) {
        self.at.clear();
        self.bytes.clear();
    }
}

/// A buffer that writes each shared value's text once and copies it where it comes again.
pub struct Remembering<'a> {
    pub out: &'a mut Vec<u8>,
    pub texts: &'a mut SharedTexts,
}

impl Sink for Remembering<'_> {
    #[inline]
    fn put(&mut self, bytes: &[u8]) {
        put_short(self.out, bytes);
    }

    #[inline]
    fn position(&self) -> Option<usize> {
        Some(self.out.len())
    }

    fn shared(&mut self, key: usize, render: &mut dyn FnMut(&mut Self)) {
        if let Some(r) = self.texts.at.get(&key) {
            self.out.extend_from_slice(&self.texts.bytes[r.clone()]);
            return;
        }
        let start = self.out.len();
        render(self);
        let from = self.texts.bytes.len();
        self.texts.bytes.extend_from_slice(&self.out[start..]);
        self.texts.at.insert(key, from..self.texts.bytes.len());
    }
}

impl Sink for Vec<u8> {
    #[inline]
    fn put(&mut self, bytes: &[u8]) {
        put_short(self, bytes);
    }

    #[inline]
    fn position(&self) -> Option<usize> {
        Some(self.len())
    }
}

/// Appends `bytes` to `out`. The writers put many short pieces (a field's head, a value), and
/// `extend_from_slice` copies each through a `memcpy` call that costs more than the copy (a
/// tenth of a 1.15 container's time, perf): a piece of up to 32 bytes is moved in two
/// fixed-size halves instead, which may overlap.
#[inline]
fn put_short(out: &mut Vec<u8>, bytes: &[u8]) {
    let n = bytes.len();
    if n > 32 {
        return out.extend_from_slice(bytes);
    }
    out.reserve(32);
    let at = out.len();
    let (src, dst) = (
        bytes.as_ptr(),
        out.spare_capacity_mut().as_mut_ptr().cast::<u8>(),
    );
    // SAFETY: `reserve(32)` leaves room for 32 bytes past `at`, and each copy reads and writes
    // inside `0..n` (n <= 32) of `bytes` and of that room: a half of `h` bytes is copied only
    // when `h <= n`, at 0 and at `n - h`. So all of `at..at + n` is written before `set_len`,
    // and `bytes` (borrowed) cannot overlap `out`'s spare room (borrowed mutably).
    unsafe {
        let halves = |h: usize| {
            std::ptr::copy_nonoverlapping(src, dst, h);
            std::ptr::copy_nonoverlapping(src.add(n - h), dst.add(n - h), h);
        };
        match n {
            16.. => halves(16),
            8.. => halves(8),
            4.. => halves(4),
            _ => (0..n).for_each(|i| *dst.add(i) = *src.add(i)),
        }
        out.set_len(at + n);
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

    /// One FNV-1a step: the state `h` after byte `b`.
    #[inline(always)]
    pub const fn step(h: u32, b: u8) -> u32 {
        (h ^ b as u32).wrapping_mul(Self::PRIME)
    }

    /// The hasher that has had `bytes` (at compile time, for fixed texts).
    pub const fn after(bytes: &[u8]) -> Self {
        let (mut h, mut i) = (Self::OFFSET_BASIS, 0);
        while i < bytes.len() {
            h = Self::step(h, bytes[i]);
            i += 1;
        }
        Fnv32a(h)
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
        self.0 = bytes.iter().fold(self.0, |h, &b| Self::step(h, b));
    }
}

/// How a kubelet stores a hash: `strconv.FormatUint(uint64(h), 16)`, lowercase, unpadded.
pub fn format_hash(h: u32) -> String {
    format!("{h:x}")
}

#[cfg(test)]
mod tests {
    proptest::proptest! {
        /// Every length around the halves' bounds, onto buffers of any length and spare room.
        #[test]
        fn a_short_put_appends_what_extend_appends(
            before in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..70),
            spare in 0usize..40,
            pieces in proptest::collection::vec(
                proptest::collection::vec(proptest::prelude::any::<u8>(), 0..40), 1..8),
        ) {
            let mut got = Vec::with_capacity(before.len() + spare);
            got.extend_from_slice(&before);
            let mut want = before.clone();
            for p in &pieces {
                super::put_short(&mut got, p);
                want.extend_from_slice(p);
            }
            proptest::prop_assert_eq!(got, want);
        }
    }

    #[test]
    fn a_shared_text_is_rendered_once_and_copied_after() {
        let (mut out, mut texts) = (Vec::new(), SharedTexts::default());
        let mut renders = 0;
        let mut sink = Remembering {
            out: &mut out,
            texts: &mut texts,
        };
        for key in [7, 9, 7, 7] {
            sink.put(b"<");
            sink.shared(key, &mut |s| {
                renders += 1;
                s.put(format!("text{key}").as_bytes());
            });
        }
        assert_eq!(out, b"<text7<text9<text7<text7");
        assert_eq!(renders, 2);
        texts.clear();
        let mut again = Vec::new();
        Remembering {
            out: &mut again,
            texts: &mut texts,
        }
        .shared(7, &mut |s| s.put(b"new"));
        assert_eq!(again, b"new", "cleared texts are rendered anew");
    }

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
