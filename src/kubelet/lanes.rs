//! FNV-1a over many texts at once: in lanes, and each prefix texts share hashed once.
//!
//! One FNV-1a chain is a serial dependency (xor, then a multiply that must wait for it), so a
//! single text cannot be hashed faster than its length times the multiply latency. Independent
//! runs of bytes can: [`LANES`] chains advance in lockstep so that their multiplies overlap, and a
//! lane is refilled as soon as its run ends, so lanes stay busy whatever the lengths.
//!
//! FNV-1a reads its input front to back with nothing but its 32-bit state, so two texts that
//! begin with the same bytes are in the same state where they part. The texts of one container
//! under several kubelets often do (type graphs that differ only in a late field): the common
//! prefix is hashed once, and each text goes on from the state where it parts.

use crate::kubelet::sink::Fnv32a;

/// How many runs are hashed side by side.
pub const LANES: usize = 8;

/// The shortest common prefix worth splitting a run for (shorter ones are hashed again).
const MIN_SHARED: usize = 64;

/// Bytes to hash from the state another run ended in, or from the offset basis.
#[derive(Debug, Clone, Copy)]
pub struct Run<'t> {
    /// The run (an index into the same slice, any order) whose end state this run starts from.
    pub after: Option<usize>,
    pub bytes: &'t [u8],
}

/// No run.
const NONE: u32 = u32::MAX;

/// FNV-1a 32 of many independent texts, `out[i]` for `texts[i]`.
pub fn fnv1a_batch(texts: &[&[u8]], out: &mut [u32]) {
    let runs: Vec<Run> = texts
        .iter()
        .map(|&bytes| Run { after: None, bytes })
        .collect();
    fnv1a_runs(&runs, out);
}

/// FNV-1a 32 of many texts, `out[i]` for `texts[i]`, where a text that begins as one of the two
/// before it does is hashed from the state that one is in where they part.
///
/// The texts of a container come in version order, so the text most like each is next to it.
pub fn fnv1a_sharing(texts: &[&[u8]], out: &mut [u32]) {
    assert_eq!(texts.len(), out.len(), "one output per text");
    let n = texts.len();
    // Per text: the earlier text it shares its prefix with, and how long that prefix is.
    let mut parent: Vec<(u32, usize)> = Vec::with_capacity(n);
    for (i, t) in texts.iter().enumerate() {
        let mut best = (NONE, 0);
        let from = i.saturating_sub(2);
        for (j, earlier) in texts[from..i].iter().enumerate() {
            let p = common_prefix(t, earlier);
            if p >= MIN_SHARED && p > best.1 {
                best = ((from + j) as u32, p);
            }
        }
        // The state at `p` must be one the parent's own runs pass through: a prefix no longer
        // than the parent's own is also its parent's prefix, so go up until it is longer.
        while best.0 != NONE && best.1 <= parent[best.0 as usize].1 {
            best.0 = parent[best.0 as usize].0;
        }
        parent.push(best);
    }
    // Where texts part from each text: (text, offset), sorted.
    let mut cuts: Vec<(u32, usize)> = parent.iter().filter(|p| p.0 != NONE).copied().collect();
    cuts.sort_unstable();
    cuts.dedup();
    // Each text's own bytes (after its shared prefix) as runs ending at its cuts; the run of
    // text `j` ending at offset `c` is found in `ends` for its children.
    let mut runs: Vec<Run> = Vec::with_capacity(n + cuts.len());
    let mut ends: Vec<(u32, usize, usize)> = Vec::with_capacity(cuts.len());
    let mut last = vec![0usize; n];
    let mut cut = cuts.iter().peekable();
    for (j, t) in texts.iter().enumerate() {
        let (from, mut at) = parent[j];
        // The parent's run ending where this text parts from it (made before: parents come
        // first). Were it missing, the whole text is hashed from the start, still exactly.
        let mut after = None;
        if from != NONE {
            match ends.binary_search_by(|e| (e.0, e.1).cmp(&(from, at))) {
                Ok(k) => after = Some(ends[k].2),
                Err(_) => at = 0,
            }
        }
        while let Some(&(_, c)) = cut.next_if(|&&(k, _)| k as usize == j) {
            runs.push(Run {
                after,
                bytes: &t[at..c],
            });
            after = Some(runs.len() - 1);
            ends.push((j as u32, c, runs.len() - 1));
            at = c;
        }
        if at < t.len() || after.is_none() {
            runs.push(Run {
                after,
                bytes: &t[at..],
            });
            after = Some(runs.len() - 1);
        }
        last[j] = after.unwrap_or_default();
    }
    let mut states = vec![0u32; runs.len()];
    fnv1a_runs(&runs, &mut states);
    for (o, &r) in out.iter_mut().zip(&last) {
        *o = states[r];
    }
}

/// How many leading bytes `a` and `b` have in common.
fn common_prefix(a: &[u8], b: &[u8]) -> usize {
    let n = a.len().min(b.len());
    let mut i = 0;
    // 32 bytes a step: four words compared at once, the first differing byte found after.
    while i + 32 <= n {
        let word = |s: &[u8], k: usize| {
            u64::from_le_bytes(s[i + 8 * k..i + 8 * k + 8].try_into().unwrap_or_default())
        };
        let diff = (0..4).fold(0, |d, k| d | (word(a, k) ^ word(b, k)));
        if diff != 0 {
            break;
        }
        i += 32;
    }
    i + a[i..n]
        .iter()
        .zip(&b[i..n])
        .take_while(|(x, y)| x == y)
        .count()
}

/// The FNV-1a state at the end of each run, `out[k]` for `runs[k]`. A run starts once the run it
/// continues has ended; the `after` links must form a forest (each run's chain ends at a root).
pub fn fnv1a_runs(runs: &[Run], out: &mut [u32]) {
    assert_eq!(runs.len(), out.len(), "one output per run");
    // Runs waiting for each run: a list threaded through `sibling`.
    let mut first = vec![NONE; runs.len()];
    let mut sibling = vec![NONE; runs.len()];
    let mut ready: Vec<usize> = Vec::with_capacity(runs.len());
    for (k, r) in runs.iter().enumerate().rev() {
        match r.after {
            None => ready.push(k),
            Some(p) => {
                sibling[k] = first[p];
                first[p] = k as u32;
            }
        }
    }
    let release = |k: usize, ready: &mut Vec<usize>| {
        let mut c = first[k];
        while c != NONE {
            ready.push(c as usize);
            c = sibling[c as usize];
        }
    };
    // (run, bytes left); a lane with no run is None.
    let mut lane: [Option<(usize, &[u8])>; LANES] = [None; LANES];
    let mut h = [Fnv32a::OFFSET_BASIS; LANES];
    loop {
        for l in 0..LANES {
            while lane[l].is_none() {
                let Some(k) = ready.pop() else { break };
                let start = runs[k].after.map_or(Fnv32a::OFFSET_BASIS, |p| out[p]);
                if runs[k].bytes.is_empty() {
                    out[k] = start;
                    release(k, &mut ready);
                } else {
                    lane[l] = Some((k, runs[k].bytes));
                    h[l] = start;
                }
            }
        }
        let active = lane.iter().filter(|x| x.is_some()).count();
        if active == 0 {
            return;
        }
        if active == 1 && ready.is_empty() {
            // One run is left until it ends: hash it as one chain.
            for l in 0..LANES {
                if let Some((k, rest)) = lane[l].take() {
                    let mut one = Fnv32a(h[l]);
                    crate::kubelet::sink::Sink::put(&mut one, rest);
                    out[k] = one.finish();
                    release(k, &mut ready);
                }
            }
            continue;
        }
        // Advance the busy lanes together by the shortest remaining length (idle lanes hash
        // nothing that is kept: their chunks are empty). Two runs in lockstep take about the
        // time of one: the chains' multiplies overlap.
        let step = lane
            .iter()
            .flatten()
            .map(|(_, r)| r.len())
            .min()
            .unwrap_or(0);
        // As few lanes as the busy ones fit in: a lane costs a multiply per byte even when idle,
        // and two chains are as fast as four when only two runs are left.
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
            if let Some((k, r)) = lane[l] {
                if r.len() == step {
                    out[k] = h[l];
                    lane[l] = None;
                    release(k, &mut ready);
                } else {
                    lane[l] = Some((k, &r[step..]));
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

/// Advances every lane by `step` bytes (each chunk is exactly `step` long): eight lanes at a time
/// in one AVX2 register where the CPU has it ([`wide`]), the rest as below.
#[inline]
fn lockstep<const K: usize>(h: &mut [u32; K], chunks: &[&[u8]; K], step: usize) {
    #[cfg(target_arch = "x86_64")]
    if K == wide::WIDTH && step >= 8 {
        let done = wide::lockstep(h, chunks, step);
        // Idle lanes have empty chunks.
        let rest: [&[u8]; K] = std::array::from_fn(|l| chunks[l].get(done..).unwrap_or(&[]));
        return lockstep_scalar(h, &rest, step - done);
    }
    lockstep_scalar(h, chunks, step);
}

/// [`lockstep`] in scalar registers. Eight bytes per lane are read as one little-endian word and
/// fed to the lane a byte at a time by shifting, so the loop is mostly the xor-multiply chains
/// themselves.
#[inline]
fn lockstep_scalar<const K: usize>(h: &mut [u32; K], chunks: &[&[u8]; K], step: usize) {
    let words = step / 8;
    for j in 0..words {
        let w: [u64; K] = std::array::from_fn(|l| word(chunks[l], j));
        for k in 0..8 {
            for l in 0..K {
                h[l] = Fnv32a::step(h[l], (w[l] >> (8 * k)) as u8);
            }
        }
    }
    for i in words * 8..step {
        for l in 0..K {
            h[l] = Fnv32a::step(h[l], chunks[l].get(i).copied().unwrap_or(0));
        }
    }
}

/// The `j`th eight bytes of `chunk`, little-endian (zero past its end).
#[inline(always)]
fn word(chunk: &[u8], j: usize) -> u64 {
    chunk
        .get(j * 8..j * 8 + 8)
        .and_then(|b| b.try_into().ok())
        .map_or(0, u64::from_le_bytes)
}

/// Eight FNV-1a chains in the eight 32-bit parts of one AVX2 register: one `vpmulld` advances
/// them all by a byte. The CPU is asked once (`is_x86_feature_detected!`, cached by std); where
/// it has no AVX2, the scalar loop runs.
#[cfg(target_arch = "x86_64")]
mod wide {
    use std::arch::x86_64::{
        __m128i, __m256i, _mm256_cvtepu8_epi32, _mm256_extract_epi32, _mm256_mullo_epi32,
        _mm256_set1_epi32, _mm256_setr_epi32, _mm256_xor_si256, _mm_cvtsi64_si128, _mm_srli_si128,
        _mm_unpackhi_epi16, _mm_unpackhi_epi32, _mm_unpacklo_epi16, _mm_unpacklo_epi32,
        _mm_unpacklo_epi8,
    };

    use super::word;
    use crate::kubelet::sink::Fnv32a;

    /// Lanes per register.
    pub const WIDTH: usize = 8;

    /// Advances the lanes by the whole words of `step` if they are [`WIDTH`] (one register)
    /// and the CPU has AVX2; returns how many bytes that is (none otherwise).
    pub fn lockstep<const K: usize>(h: &mut [u32; K], chunks: &[&[u8]; K], step: usize) -> usize {
        let (Ok(h), Ok(chunks), true) = (
            <&mut [u32; WIDTH]>::try_from(&mut h[..]),
            <&[&[u8]; WIDTH]>::try_from(&chunks[..]),
            std::arch::is_x86_feature_detected!("avx2"),
        ) else {
            return 0;
        };
        let words = step / 8;
        // SAFETY: the CPU has AVX2, asked just above.
        unsafe { avx2(h, chunks, words) };
        words * 8
    }

    /// Eight lanes by `words` words each: the eight words of a step transposed (byte `k` of
    /// every lane side by side), each byte row widened to 32 bits, xored in and multiplied.
    /// (Two registers of chains, sixteen lanes, measured slower: the lanes' runs are split into
    /// more, shorter steps.)
    #[target_feature(enable = "avx2")]
    fn avx2(h: &mut [u32; WIDTH], chunks: &[&[u8]; WIDTH], words: usize) {
        let prime = _mm256_set1_epi32(Fnv32a::PRIME as i32);
        let s = h.map(|x| x as i32);
        let mut state = _mm256_setr_epi32(s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7]);
        for j in 0..words {
            for row in transposed(chunks, j) {
                let widened: __m256i = _mm256_cvtepu8_epi32(row);
                state = _mm256_mullo_epi32(_mm256_xor_si256(state, widened), prime);
            }
        }
        *h = [
            _mm256_extract_epi32::<0>(state) as u32,
            _mm256_extract_epi32::<1>(state) as u32,
            _mm256_extract_epi32::<2>(state) as u32,
            _mm256_extract_epi32::<3>(state) as u32,
            _mm256_extract_epi32::<4>(state) as u32,
            _mm256_extract_epi32::<5>(state) as u32,
            _mm256_extract_epi32::<6>(state) as u32,
            _mm256_extract_epi32::<7>(state) as u32,
        ];
    }

    /// The `j`th words of eight lanes as an 8 x 8 byte matrix, transposed: the low eight bytes
    /// of row `k` are byte `k` of every lane, in lane order.
    #[target_feature(enable = "avx2")]
    fn transposed(chunks: &[&[u8]; WIDTH], j: usize) -> [__m128i; 8] {
        let row = |l: usize| _mm_cvtsi64_si128(word(chunks[l], j) as i64);
        let a0 = _mm_unpacklo_epi8(row(0), row(1));
        let a1 = _mm_unpacklo_epi8(row(2), row(3));
        let a2 = _mm_unpacklo_epi8(row(4), row(5));
        let a3 = _mm_unpacklo_epi8(row(6), row(7));
        let (b0, b1) = (_mm_unpacklo_epi16(a0, a1), _mm_unpackhi_epi16(a0, a1));
        let (b2, b3) = (_mm_unpacklo_epi16(a2, a3), _mm_unpackhi_epi16(a2, a3));
        let c = [
            _mm_unpacklo_epi32(b0, b2),
            _mm_unpackhi_epi32(b0, b2),
            _mm_unpacklo_epi32(b1, b3),
            _mm_unpackhi_epi32(b1, b3),
        ];
        std::array::from_fn(|k| match k % 2 {
            0 => c[k / 2],
            _ => _mm_srli_si128::<8>(c[k / 2]),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kubelet::sink::Sink;
    use proptest::prelude::*;

    /// Texts like a container's under many kubelets: each is the one before it, or one further
    /// back, or a fresh one, changed at one place (a byte, cut short or made longer).
    fn related_texts() -> impl Strategy<Value = Vec<Vec<u8>>> {
        let step = (0..4usize, 0..3usize, any::<u16>(), any::<u8>(), 0..300usize);
        (
            proptest::collection::vec(any::<u8>(), 0..700),
            proptest::collection::vec(step, 0..24),
        )
            .prop_map(|(base, steps)| {
                let mut texts: Vec<Vec<u8>> = vec![base];
                for (from, change, at, byte, more) in steps {
                    let mut t = match texts.len().checked_sub(1 + from) {
                        Some(i) => texts[i].clone(),
                        None => vec![byte; more],
                    };
                    let at = usize::from(at) % (t.len() + 1);
                    match change {
                        0 if at < t.len() => t[at] ^= byte | 1,
                        1 => t.truncate(at),
                        _ => t.extend(std::iter::repeat_n(byte, more)),
                    }
                    texts.push(t);
                }
                texts
            })
    }

    proptest! {
        #[test]
        fn shared_prefixes_hash_as_one_chain_each(texts in related_texts()) {
            let refs: Vec<&[u8]> = texts.iter().map(Vec::as_slice).collect();
            let mut out = vec![0; refs.len()];
            fnv1a_sharing(&refs, &mut out);
            let want: Vec<u32> = refs.iter().map(|t| Fnv32a::hash(t)).collect();
            prop_assert_eq!(out, want);
        }

        #[test]
        fn runs_end_in_the_state_of_their_chain(
            runs in proptest::collection::vec((any::<Option<prop::sample::Index>>(), proptest::collection::vec(any::<u8>(), 0..90)), 1..40)
        ) {
            // Each run continues an earlier one (any order of the slice is allowed; earlier
            // keeps the links a forest).
            let runs: Vec<Run> = runs
                .iter()
                .enumerate()
                .map(|(k, (after, bytes))| Run {
                    after: after.filter(|_| k > 0).map(|i| i.index(k)),
                    bytes,
                })
                .collect();
            let mut want = vec![0u32; runs.len()];
            for (k, r) in runs.iter().enumerate() {
                let mut h = Fnv32a(r.after.map_or(Fnv32a::OFFSET_BASIS, |p| want[p]));
                h.put(r.bytes);
                want[k] = h.finish();
            }
            // Reversed, so that runs wait for runs after them in the slice.
            let reversed: Vec<Run> = runs
                .iter()
                .rev()
                .map(|r| Run { after: r.after.map(|p| runs.len() - 1 - p), bytes: r.bytes })
                .collect();
            let mut out = vec![0; runs.len()];
            fnv1a_runs(&reversed, &mut out);
            out.reverse();
            prop_assert_eq!(out, want);
        }
    }

    proptest! {
        /// Eight lanes advanced in one AVX2 register end where the scalar chains do, idle lanes
        /// (empty chunks) included. (Where the CPU has no AVX2, both are the scalar loop.)
        #[test]
        fn wide_lanes_advance_as_scalar_ones(
            step in 0usize..70,
            bytes in proptest::collection::vec(any::<u8>(), 70 * LANES),
            idle in any::<[bool; LANES]>(),
            start in any::<[u32; LANES]>(),
        ) {
            let chunks: [&[u8]; LANES] = std::array::from_fn(|l| match idle[l] {
                true => &[][..],
                false => &bytes[70 * l..70 * l + step],
            });
            let mut scalar = start;
            lockstep_scalar(&mut scalar, &chunks, step);
            let mut wide = start;
            lockstep(&mut wide, &chunks, step);
            for l in (0..LANES).filter(|&l| !idle[l]) {
                prop_assert_eq!(wide[l], scalar[l], "lane {}", l);
            }
            // Each lane as one chain.
            for l in (0..LANES).filter(|&l| !idle[l]) {
                let mut one = Fnv32a(start[l]);
                one.put(chunks[l]);
                prop_assert_eq!(scalar[l], one.finish());
            }
        }
    }

    #[test]
    fn a_common_prefix_is_found_to_the_byte() {
        let a: Vec<u8> = (0..200u8).collect();
        for cut in [0, 1, 31, 32, 33, 64, 100, 199] {
            let mut b = a.clone();
            b[cut] ^= 0x80;
            assert_eq!(common_prefix(&a, &b), cut);
        }
        assert_eq!(common_prefix(&a, &a[..77]), 77);
        assert_eq!(common_prefix(&a, &a), 200);
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
}
