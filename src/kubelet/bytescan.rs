//! Finding the bytes of interest several at a time: the Go byte cleaner and the JSON readers
//! pass over every input byte, and the Go JSON writer over every string it writes; nearly all
//! of those bytes are plain ASCII.

const ONES: u64 = 0x0101_0101_0101_0101;
const HIGHS: u64 = 0x8080_8080_8080_8080;

/// The high bit of each byte of `x` that is zero, and maybe of bytes above one that is: a
/// borrow only runs upwards from a zero byte, so the lowest bit set is always a zero byte.
#[inline]
fn zero_byte(x: u64) -> u64 {
    x.wrapping_sub(ONES) & !x & HIGHS
}

/// Like [`zero_byte`], for the bytes of `x` below `n` (at most 0x80).
#[inline]
fn below(x: u64, n: u8) -> u64 {
    x.wrapping_sub(ONES * u64::from(n)) & !x & HIGHS
}

#[inline]
fn has(x: u64, b: u8) -> u64 {
    zero_byte(x ^ (ONES * u64::from(b)))
}

/// A set of bytes to find: each test marks the bytes of the set, the lowest mark exactly (a
/// word's test may mark bytes above it).
trait Stops {
    /// The high bit of each byte of sixteen that is in the set.
    #[cfg(target_arch = "x86_64")]
    fn lanes(v: std::arch::x86_64::__m128i) -> std::arch::x86_64::__m128i;
    /// The high bit of the bytes of a little-endian word that are in the set.
    fn word(x: u64) -> u64;
    fn hit(b: u8) -> bool;
}

/// The first index of a byte of `bytes` in `S`: sixteen bytes at a time with SSE2 on x86-64,
/// then eight in a word, then one at a time. Most strings in a pod are shorter than sixteen
/// bytes, so the first step usually finds the end.
#[inline(always)]
fn find<S: Stops>(bytes: &[u8]) -> Option<usize> {
    let mut i = 0;
    #[cfg(target_arch = "x86_64")]
    while let Some(chunk) = bytes.get(i..i + 16) {
        let marks = lanes::marks(chunk, S::lanes);
        if marks != 0 {
            return Some(i + marks.trailing_zeros() as usize);
        }
        i += 16;
    }
    while let Some(chunk) = bytes.get(i..i + 8) {
        let mut w = [0u8; 8];
        w.copy_from_slice(chunk);
        let marks = S::word(u64::from_le_bytes(w));
        if marks != 0 {
            return Some(i + (marks.trailing_zeros() / 8) as usize);
        }
        i += 8;
    }
    bytes[i..].iter().position(|&b| S::hit(b)).map(|k| i + k)
}

/// SSE2 tests for [`Stops::lanes`].
///
/// SAFETY (every `unsafe` here): the intrinsics need SSE2, which is part of the x86-64
/// baseline: every CPU this code is built for has it.
#[cfg(target_arch = "x86_64")]
mod lanes {
    use std::arch::x86_64::{
        __m128i, _mm_cmpeq_epi8, _mm_max_epu8, _mm_movemask_epi8, _mm_or_si128, _mm_set1_epi8,
        _mm_set_epi64x,
    };

    /// One bit per byte of `chunk` (its first sixteen), set where `test` marks the byte.
    #[inline(always)]
    pub fn marks(chunk: &[u8], test: fn(__m128i) -> __m128i) -> u32 {
        let word = |at: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&chunk[at..at + 8]);
            i64::from_le_bytes(w)
        };
        // SAFETY: see the module.
        let v = unsafe { _mm_set_epi64x(word(8), word(0)) };
        // SAFETY: see the module.
        unsafe { _mm_movemask_epi8(test(v)) as u32 }
    }

    #[inline(always)]
    pub fn eq(v: __m128i, b: u8) -> __m128i {
        // SAFETY: see the module.
        unsafe { _mm_cmpeq_epi8(v, _mm_set1_epi8(b as i8)) }
    }

    /// Bytes below `n` (unsigned): those whose maximum with `n - 1` is `n - 1`.
    #[inline(always)]
    pub fn below(v: __m128i, n: u8) -> __m128i {
        // SAFETY: see the module.
        unsafe {
            let top = _mm_set1_epi8((n - 1) as i8);
            _mm_cmpeq_epi8(_mm_max_epu8(v, top), top)
        }
    }

    #[inline(always)]
    pub fn or(a: __m128i, b: __m128i) -> __m128i {
        // SAFETY: see the module.
        unsafe { _mm_or_si128(a, b) }
    }
}

/// `"` and `\`.
struct QuoteOrBackslash;

impl Stops for QuoteOrBackslash {
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    fn lanes(v: std::arch::x86_64::__m128i) -> std::arch::x86_64::__m128i {
        lanes::or(lanes::eq(v, b'"'), lanes::eq(v, b'\\'))
    }
    #[inline(always)]
    fn word(x: u64) -> u64 {
        has(x, b'"') | has(x, b'\\')
    }
    #[inline(always)]
    fn hit(b: u8) -> bool {
        b == b'"' || b == b'\\'
    }
}

/// Where a JSON string's plain run ends: `"`, `\` or a control byte (below 0x20).
struct StringStop;

impl Stops for StringStop {
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    fn lanes(v: std::arch::x86_64::__m128i) -> std::arch::x86_64::__m128i {
        lanes::or(
            lanes::or(lanes::eq(v, b'"'), lanes::eq(v, b'\\')),
            lanes::below(v, 0x20),
        )
    }
    #[inline(always)]
    fn word(x: u64) -> u64 {
        has(x, b'"') | has(x, b'\\') | below(x, 0x20)
    }
    #[inline(always)]
    fn hit(b: u8) -> bool {
        b == b'"' || b == b'\\' || b < 0x20
    }
}

/// [`StringStop`], and bytes that are not ASCII.
struct StringStopOrNonAscii;

impl Stops for StringStopOrNonAscii {
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    fn lanes(v: std::arch::x86_64::__m128i) -> std::arch::x86_64::__m128i {
        // A byte of 0x80 or more marks itself (the mask is taken from each byte's high bit).
        lanes::or(StringStop::lanes(v), v)
    }
    #[inline(always)]
    fn word(x: u64) -> u64 {
        StringStop::word(x) | (x & HIGHS)
    }
    #[inline(always)]
    fn hit(b: u8) -> bool {
        StringStop::hit(b) || b >= 0x80
    }
}

/// Bytes that are not ASCII, and `\`.
struct NonAsciiOrBackslash;

impl Stops for NonAsciiOrBackslash {
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    fn lanes(v: std::arch::x86_64::__m128i) -> std::arch::x86_64::__m128i {
        // The mask is taken from each byte's high bit: a byte of 0x80 or more marks itself.
        lanes::or(v, lanes::eq(v, b'\\'))
    }
    #[inline(always)]
    fn word(x: u64) -> u64 {
        (x & HIGHS) | has(x, b'\\')
    }
    #[inline(always)]
    fn hit(b: u8) -> bool {
        b >= 0x80 || b == b'\\'
    }
}

/// What Go's `encodeState.string` (HTML escaping on) does not copy as it is: `"`, `\`, control
/// bytes, `<`, `>`, `&`, and 0xE2, the first byte of U+2028 and U+2029.
struct GoEscape;

impl Stops for GoEscape {
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    fn lanes(v: std::arch::x86_64::__m128i) -> std::arch::x86_64::__m128i {
        let quotes = lanes::or(lanes::eq(v, b'"'), lanes::eq(v, b'\\'));
        let html = lanes::or(
            lanes::or(lanes::eq(v, b'<'), lanes::eq(v, b'>')),
            lanes::eq(v, b'&'),
        );
        lanes::or(
            lanes::or(quotes, html),
            lanes::or(lanes::below(v, 0x20), lanes::eq(v, 0xE2)),
        )
    }
    #[inline(always)]
    fn word(x: u64) -> u64 {
        has(x, b'"')
            | has(x, b'\\')
            | below(x, 0x20)
            | has(x, b'<')
            | has(x, b'>')
            | has(x, b'&')
            | has(x, 0xE2)
    }
    #[inline(always)]
    fn hit(b: u8) -> bool {
        matches!(b, b'"' | b'\\' | b'<' | b'>' | b'&' | 0xE2) || b < 0x20
    }
}

/// The first byte Go's JSON string writer may not copy as it is: `"`, `\`, a control byte,
/// `<`, `>`, `&`, or 0xE2 (which may start U+2028 or U+2029).
#[inline]
pub fn find_go_escape(bytes: &[u8]) -> Option<usize> {
    find::<GoEscape>(bytes)
}

/// The first `"` or `\`.
pub fn find_quote_or_backslash(bytes: &[u8]) -> Option<usize> {
    find::<QuoteOrBackslash>(bytes)
}

/// A JSON integer written plainly at the start of `bytes` (`-?(0|[1-9][0-9]*)`, no fraction or
/// exponent after it): whether it is negative, its magnitude and its length in bytes. `None` for
/// anything else, and for a magnitude past `u64`.
#[inline]
pub fn plain_integer(bytes: &[u8]) -> Option<(bool, u64, usize)> {
    let negative = bytes.first() == Some(&b'-');
    let start = usize::from(negative);
    let mut at = start;
    let mut n: u64 = 0;
    while let Some(d @ b'0'..=b'9') = bytes.get(at).copied() {
        n = n.checked_mul(10)?.checked_add(u64::from(d - b'0'))?;
        at += 1;
    }
    let digits = at - start;
    // No digits, a leading zero, or a fraction or exponent next.
    if digits == 0
        || (digits > 1 && bytes[start] == b'0')
        || matches!(bytes.get(at), Some(b'.' | b'e' | b'E'))
    {
        return None;
    }
    Some((negative, n, at))
}

/// The first `"`, `\` or control byte (below 0x20): where a JSON string's plain run ends.
// Inlined, and the `Doc` parser's string reader inlined too (doc.rs): when it had a second
// caller and was left to the compiler, the parser's string reader was no longer inlined
// (+2 % instructions a bare container at 1.15), and out of line it cost the golden records +1 %.
#[inline(always)]
pub fn find_string_stop(bytes: &[u8]) -> Option<usize> {
    find::<StringStop>(bytes)
}

/// [`find_string_stop`], stopping at the first byte that is not ASCII too: for a reader that
/// checks each character that is not ASCII where it meets it, not the whole text after.
#[inline(always)]
pub fn find_string_stop_or_non_ascii(bytes: &[u8]) -> Option<usize> {
    find::<StringStopOrNonAscii>(bytes)
}

/// The first byte that is not ASCII, or a `\`.
pub fn find_non_ascii_or_backslash(bytes: &[u8]) -> Option<usize> {
    find::<NonAsciiOrBackslash>(bytes)
}

/// The bytes of a 64-byte block that matter for following JSON's nesting, one bit per byte
/// (bit i for byte i).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Structure {
    pub quote: u64,
    pub backslash: u64,
    /// `{` or `[`.
    pub open: u64,
    /// `}` or `]`.
    pub close: u64,
}

/// [`Structure`] of `block`, sixteen bytes at a time with SSE2 on x86-64.
#[cfg(target_arch = "x86_64")]
#[inline]
pub fn structure(block: &[u8; 64]) -> Structure {
    // SAFETY: SSE2 is part of the x86-64 baseline: every CPU this code is built for has it.
    unsafe { structure_sse2(block) }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse2")]
fn structure_sse2(block: &[u8; 64]) -> Structure {
    use std::arch::x86_64::{
        _mm_cmpeq_epi8, _mm_movemask_epi8, _mm_or_si128, _mm_set1_epi8, _mm_set_epi64x,
    };
    let mut out = Structure::default();
    // `[` and `]` are `{` and `}` without the 0x20 bit; no other byte becomes one with it.
    let (quote, backslash) = (_mm_set1_epi8(b'"' as i8), _mm_set1_epi8(b'\\' as i8));
    let (open, close, case) = (
        _mm_set1_epi8(b'{' as i8),
        _mm_set1_epi8(b'}' as i8),
        _mm_set1_epi8(0x20),
    );
    for (i, lane) in block.chunks_exact(16).enumerate() {
        let word = |at: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&lane[at..at + 8]);
            i64::from_le_bytes(w)
        };
        let v = _mm_set_epi64x(word(8), word(0));
        let folded = _mm_or_si128(v, case);
        let bits = |m| u64::from(_mm_movemask_epi8(m) as u16) << (16 * i);
        out.quote |= bits(_mm_cmpeq_epi8(v, quote));
        out.backslash |= bits(_mm_cmpeq_epi8(v, backslash));
        out.open |= bits(_mm_cmpeq_epi8(folded, open));
        out.close |= bits(_mm_cmpeq_epi8(folded, close));
    }
    out
}

/// Whether this CPU has AVX2 and POPCNT, for the code paths built for them (std asks the CPU
/// once and keeps the answer; the build itself targets the x86-64 baseline).
#[cfg(target_arch = "x86_64")]
#[inline]
pub fn has_avx2_popcnt() -> bool {
    std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("popcnt")
}

/// [`Structure`] of `block`, thirty-two bytes at a time with AVX2.
///
/// # Safety
/// The CPU must have AVX2 ([`has_avx2_popcnt`]).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline]
pub unsafe fn structure_avx2(block: &[u8; 64]) -> Structure {
    use std::arch::x86_64::{
        __m256i, _mm256_cmpeq_epi8, _mm256_loadu_si256, _mm256_movemask_epi8, _mm256_or_si256,
        _mm256_set1_epi8,
    };
    // SAFETY: both loads read 32 bytes inside the 64-byte block (unaligned loads).
    let (lo, hi) = unsafe {
        (
            _mm256_loadu_si256(block.as_ptr().cast::<__m256i>()),
            _mm256_loadu_si256(block.as_ptr().add(32).cast::<__m256i>()),
        )
    };
    // `[` and `]` are `{` and `}` without the 0x20 bit; no other byte becomes one with it.
    let case = _mm256_set1_epi8(0x20);
    let folded = (_mm256_or_si256(lo, case), _mm256_or_si256(hi, case));
    let mask = |(l, h): (__m256i, __m256i), byte: u8| {
        let b = _mm256_set1_epi8(byte as i8);
        let low = _mm256_movemask_epi8(_mm256_cmpeq_epi8(l, b)) as u32;
        let high = _mm256_movemask_epi8(_mm256_cmpeq_epi8(h, b)) as u32;
        u64::from(low) | u64::from(high) << 32
    };
    Structure {
        quote: mask((lo, hi), b'"'),
        backslash: mask((lo, hi), b'\\'),
        open: mask(folded, b'{'),
        close: mask(folded, b'}'),
    }
}

/// [`Structure`] of `block`, a byte at a time.
#[cfg_attr(target_arch = "x86_64", allow(dead_code))]
pub fn structure_bytewise(block: &[u8; 64]) -> Structure {
    let mut out = Structure::default();
    for (i, &b) in block.iter().enumerate() {
        let bit = 1u64 << i;
        match b {
            b'"' => out.quote |= bit,
            b'\\' => out.backslash |= bit,
            b'{' | b'[' => out.open |= bit,
            b'}' | b']' => out.close |= bit,
            _ => {}
        }
    }
    out
}

/// [`Structure`] of `block`, a byte at a time.
#[cfg(not(target_arch = "x86_64"))]
pub fn structure(block: &[u8; 64]) -> Structure {
    structure_bytewise(block)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn the_same_as_a_byte_at_a_time(bytes in proptest::collection::vec(
            prop_oneof![any::<u8>(), prop::sample::select(vec![
                0u8, 1, 0x1f, 0x20, b'"', b'\\', 0x7f, 0x80, 0xff, b'<', b'>', b'&', 0xE1, 0xE2, 0xE3,
            ])],
            0..40,
        )) {
            let slow = |hit: fn(u8) -> bool| bytes.iter().position(|&b| hit(b));
            prop_assert_eq!(find_quote_or_backslash(&bytes), slow(|b| b == b'"' || b == b'\\'));
            prop_assert_eq!(
                find_string_stop(&bytes),
                slow(|b| b == b'"' || b == b'\\' || b < 0x20)
            );
            prop_assert_eq!(
                find_string_stop_or_non_ascii(&bytes),
                slow(|b| b == b'"' || b == b'\\' || !(0x20..0x80).contains(&b))
            );
            prop_assert_eq!(
                find_non_ascii_or_backslash(&bytes),
                slow(|b| b >= 0x80 || b == b'\\')
            );
            prop_assert_eq!(
                find_go_escape(&bytes),
                slow(|b| matches!(b, b'"' | b'\\' | b'<' | b'>' | b'&' | 0xE2) || b < 0x20)
            );
        }
    }

    proptest! {
        #[test]
        fn structure_is_the_bytes_one_at_a_time(block in proptest::collection::vec(
            prop_oneof![any::<u8>(), prop::sample::select(b"\"\\{}[];{}=]".to_vec())],
            64,
        )) {
            let block: [u8; 64] = block.try_into().unwrap();
            prop_assert_eq!(structure(&block), structure_bytewise(&block));
            #[cfg(target_arch = "x86_64")]
            if has_avx2_popcnt() {
                // SAFETY: the CPU has AVX2.
                prop_assert_eq!(unsafe { structure_avx2(&block) }, structure_bytewise(&block));
            }
        }
    }

    #[test]
    fn every_position_of_a_word() {
        for at in 0..20 {
            for b in [
                b'"', b'[', b'\\', 0x7f, 0x80, 0xff, 0x00, 0x1f, 0x20, b'&', 0xE2, 0xE3,
            ] {
                let mut bytes = vec![b'a'; 20];
                bytes[at] = b;
                let escape = b == b'"' || b == b'\\';
                assert_eq!(find_quote_or_backslash(&bytes), escape.then_some(at));
                let stop = escape || b < 0x20;
                assert_eq!(find_string_stop(&bytes), stop.then_some(at));
                let dirty = b >= 0x80 || b == b'\\';
                assert_eq!(find_non_ascii_or_backslash(&bytes), dirty.then_some(at));
                let go = escape || b < 0x20 || b == b'&' || b == 0xE2;
                assert_eq!(find_go_escape(&bytes), go.then_some(at));
            }
        }
    }
}
