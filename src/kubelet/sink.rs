//! Where the writers put their bytes: straight into an FNV-1a hasher (no intermediate text), or
//! into a buffer when a person wants to see the text (`--explain`).

use std::collections::HashMap;
use std::hash::BuildHasherDefault;
use std::ops::Range;

use crate::kubelet::decode::AddressHasher;

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
    at: HashMap<usize, Range<usize>, BuildHasherDefault<AddressHasher>>,
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
        self.out.extend_from_slice(bytes);
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
        self.extend_from_slice(bytes);
    }

    #[inline]
    fn position(&self) -> Option<usize> {
        Some(self.len())
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

/// How many texts [`fnv1a_batch`] hashes side by side.
pub const LANES: usize = 8;

/// FNV-1a 32 of many independent texts, `out[i]` for `texts[i]`.
///
/// One FNV-1a chain is a serial dependency (xor, then a multiply that must wait for it), so a
/// single text cannot be hashed faster than its length times the multiply latency. Independent
/// texts can: this runs [`LANES`] chains in lockstep so that their multiplies overlap, and refills
/// a lane from the queue as soon as its text ends, so lanes stay busy whatever the lengths.
pub fn fnv1a_batch(texts: &[&[u8]], out: &mut [u32]) {
    assert_eq!(texts.len(), out.len(), "one output per text");
    // (text index, bytes left); a lane with no text is None.
    let mut lane: [Option<(usize, &[u8])>; LANES] = [None; LANES];
    let mut h = [Fnv32a::OFFSET_BASIS; LANES];
    let mut next = 0;
    loop {
        for l in 0..LANES {
            while lane[l].is_none() && next < texts.len() {
                if texts[next].is_empty() {
                    out[next] = Fnv32a::OFFSET_BASIS;
                } else {
                    lane[l] = Some((next, texts[next]));
                    h[l] = Fnv32a::OFFSET_BASIS;
                }
                next += 1;
            }
        }
        let active = lane.iter().filter(|x| x.is_some()).count();
        if active == 0 {
            return;
        }
        if active == 1 {
            // The queue is empty and one text is left: finish it as one chain.
            for l in 0..LANES {
                if let Some((i, rest)) = lane[l].take() {
                    let mut one = Fnv32a(h[l]);
                    one.put(rest);
                    out[i] = one.finish();
                }
            }
            return;
        }
        // Advance the busy lanes together by the shortest remaining length (idle lanes hash
        // nothing that is kept: their chunks are empty). Two texts in lockstep take about the
        // time of one: the chains' multiplies overlap.
        let step = lane
            .iter()
            .flatten()
            .map(|(_, r)| r.len())
            .min()
            .unwrap_or(0);
        // As few lanes as the busy ones fit in: a lane costs a multiply per byte even when idle,
        // and two chains are as fast as four when only two texts are left.
        let busy: [usize; LANES] = {
            let mut b = [0; LANES];
            let mut k = 0;
            for (l, x) in lane.iter().enumerate() {
                if x.is_some() {
                    b[k] = l;
                    k += 1;
                }
            }
            b
        };
        match active {
            2 => lockstep_some::<2>(&mut h, &lane, &busy, step),
            3 | 4 => lockstep_some::<4>(&mut h, &lane, &busy, step),
            _ => lockstep_some::<LANES>(&mut h, &lane, &busy, step),
        }
        for l in 0..LANES {
            if let Some((i, r)) = lane[l] {
                if r.len() == step {
                    out[i] = h[l];
                    lane[l] = None;
                } else {
                    lane[l] = Some((i, &r[step..]));
                }
            }
        }
    }
}

/// Advances the lanes `busy[..K]` by `step` bytes in `K` chains (the first of `busy` that are
/// idle, past the busy count, get empty chunks and their results are not kept).
#[inline]
fn lockstep_some<const K: usize>(
    h: &mut [u32; LANES],
    lane: &[Option<(usize, &[u8])>; LANES],
    busy: &[usize; LANES],
    step: usize,
) {
    let mut hk: [u32; K] = std::array::from_fn(|k| h[busy[k]]);
    let chunks: [&[u8]; K] = std::array::from_fn(|k| match lane[busy[k]] {
        Some((_, r)) => &r[..step],
        None => &[],
    });
    lockstep(&mut hk, &chunks, step);
    for k in 0..K {
        if lane[busy[k]].is_some() {
            h[busy[k]] = hk[k];
        }
    }
}

/// Advances every lane by `step` bytes (each chunk is exactly `step` long). Eight bytes per lane
/// are read as one little-endian word and fed to the lane a byte at a time by shifting, so the
/// loop is mostly the xor-multiply chains themselves.
#[inline]
fn lockstep<const K: usize>(h: &mut [u32; K], chunks: &[&[u8]; K], step: usize) {
    let words = step / 8;
    for j in 0..words {
        let w: [u64; K] = std::array::from_fn(|l| {
            chunks[l]
                .get(j * 8..j * 8 + 8)
                .and_then(|b| b.try_into().ok())
                .map_or(0, u64::from_le_bytes)
        });
        for k in 0..8 {
            for l in 0..K {
                let byte = (w[l] >> (8 * k)) as u8;
                h[l] = (h[l] ^ u32::from(byte)).wrapping_mul(Fnv32a::PRIME);
            }
        }
    }
    for i in words * 8..step {
        for l in 0..K {
            let byte = chunks[l].get(i).copied().unwrap_or(0);
            h[l] = (h[l] ^ u32::from(byte)).wrapping_mul(Fnv32a::PRIME);
        }
    }
}

/// How a kubelet stores a hash: `strconv.FormatUint(uint64(h), 16)`, lowercase, unpadded.
pub fn format_hash(h: u32) -> String {
    format!("{h:x}")
}

#[cfg(test)]
mod tests {

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
    fn batch_lanes_agree_with_one_chain() {
        // Lengths chosen so that lanes end at different times and refill, including empty texts.
        let texts: Vec<Vec<u8>> = (0..37)
            .map(|i| (0..(i * 37 % 101)).map(|b| (b * 7 + i) as u8).collect())
            .collect();
        let refs: Vec<&[u8]> = texts.iter().map(Vec::as_slice).collect();
        for n in [0, 1, 7, 8, 9, 37] {
            let mut out = vec![0; n];
            fnv1a_batch(&refs[..n], &mut out);
            let want: Vec<u32> = refs[..n].iter().map(|t| Fnv32a::hash(t)).collect();
            assert_eq!(out, want, "{n} texts");
        }
    }

    #[test]
    fn hashes_are_unpadded_lowercase_hex() {
        assert_eq!(format_hash(0x030695c8), "30695c8");
        assert_eq!(format_hash(0), "0");
    }
}
