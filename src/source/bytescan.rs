//! Finding the next byte of interest eight bytes at a time: the Go byte cleaner passes over every
//! input byte, and nearly all of them are ASCII and not a backslash.

const ONES: u64 = 0x0101_0101_0101_0101;
const HIGHS: u64 = 0x8080_8080_8080_8080;

/// A non-zero value when some byte of `x` is zero (exact for "any", not for "which").
#[inline]
fn zero_byte(x: u64) -> u64 {
    x.wrapping_sub(ONES) & !x & HIGHS
}

#[inline]
fn has(x: u64, b: u8) -> u64 {
    zero_byte(x ^ (ONES * u64::from(b)))
}

/// The first index from which `hit` holds for a byte of `bytes`, checking whole words with
/// `word` first (`word` may say yes for a word without a hit, never no for one with).
#[inline]
fn find(bytes: &[u8], word: impl Fn(u64) -> bool, hit: impl Fn(u8) -> bool) -> Option<usize> {
    let mut i = 0;
    while i + 8 <= bytes.len() {
        let mut w = [0u8; 8];
        w.copy_from_slice(&bytes[i..i + 8]);
        if word(u64::from_le_bytes(w)) {
            break;
        }
        i += 8;
    }
    bytes[i..].iter().position(|&b| hit(b)).map(|k| i + k)
}

/// The first `"` or `\`.
pub fn find_quote_or_backslash(bytes: &[u8]) -> Option<usize> {
    find(
        bytes,
        |x| has(x, b'"') | has(x, b'\\') != 0,
        |b| b == b'"' || b == b'\\',
    )
}

/// The first byte that is not ASCII, or a `\`.
pub fn find_non_ascii_or_backslash(bytes: &[u8]) -> Option<usize> {
    find(
        bytes,
        |x| (x & HIGHS) | has(x, b'\\') != 0,
        |b| b >= 0x80 || b == b'\\',
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn the_same_as_a_byte_at_a_time(bytes in proptest::collection::vec(any::<u8>(), 0..40)) {
            let slow = |hit: fn(u8) -> bool| bytes.iter().position(|&b| hit(b));
            prop_assert_eq!(find_quote_or_backslash(&bytes), slow(|b| b == b'"' || b == b'\\'));
            prop_assert_eq!(
                find_non_ascii_or_backslash(&bytes),
                slow(|b| b >= 0x80 || b == b'\\')
            );
        }
    }

    #[test]
    fn every_position_of_a_word() {
        for at in 0..20 {
            for b in [b'"', b'[', b'\\', 0x7f, 0x80, 0xff] {
                let mut bytes = vec![b'a'; 20];
                bytes[at] = b;
                let escape = b == b'"' || b == b'\\';
                assert_eq!(find_quote_or_backslash(&bytes), escape.then_some(at));
                let dirty = b >= 0x80 || b == b'\\';
                assert_eq!(find_non_ascii_or_backslash(&bytes), dirty.then_some(at));
            }
        }
    }
}
