//! Finding the next byte of interest eight bytes at a time: the Go byte cleaner passes over every
//! input byte, and nearly all of them are ASCII and not a backslash.

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

/// The first index at which `hit` holds for a byte of `bytes`. `word` marks the high bit of
/// the hits in a little-endian word, exactly for the lowest one (it may mark bytes above it).
#[inline]
fn find(bytes: &[u8], word: impl Fn(u64) -> u64, hit: impl Fn(u8) -> bool) -> Option<usize> {
    let mut i = 0;
    while let Some(chunk) = bytes.get(i..i + 8) {
        let mut w = [0u8; 8];
        w.copy_from_slice(chunk);
        let marks = word(u64::from_le_bytes(w));
        if marks != 0 {
            return Some(i + (marks.trailing_zeros() / 8) as usize);
        }
        i += 8;
    }
    bytes[i..].iter().position(|&b| hit(b)).map(|k| i + k)
}

/// The first `"` or `\`.
pub fn find_quote_or_backslash(bytes: &[u8]) -> Option<usize> {
    find(
        bytes,
        |x| has(x, b'"') | has(x, b'\\'),
        |b| b == b'"' || b == b'\\',
    )
}

/// The first `"`, `\` or control byte (below 0x20): where a JSON string's plain run ends.
pub fn find_string_stop(bytes: &[u8]) -> Option<usize> {
    find(
        bytes,
        |x| has(x, b'"') | has(x, b'\\') | below(x, 0x20),
        |b| b == b'"' || b == b'\\' || b < 0x20,
    )
}

/// The first byte that is not ASCII, or a `\`.
pub fn find_non_ascii_or_backslash(bytes: &[u8]) -> Option<usize> {
    find(
        bytes,
        |x| (x & HIGHS) | has(x, b'\\'),
        |b| b >= 0x80 || b == b'\\',
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn the_same_as_a_byte_at_a_time(bytes in proptest::collection::vec(
            prop_oneof![any::<u8>(), prop::sample::select(vec![0u8, 1, 0x1f, 0x20, b'"', b'\\', 0x7f, 0x80, 0xff])],
            0..40,
        )) {
            let slow = |hit: fn(u8) -> bool| bytes.iter().position(|&b| hit(b));
            prop_assert_eq!(find_quote_or_backslash(&bytes), slow(|b| b == b'"' || b == b'\\'));
            prop_assert_eq!(
                find_string_stop(&bytes),
                slow(|b| b == b'"' || b == b'\\' || b < 0x20)
            );
            prop_assert_eq!(
                find_non_ascii_or_backslash(&bytes),
                slow(|b| b >= 0x80 || b == b'\\')
            );
        }
    }

    #[test]
    fn every_position_of_a_word() {
        for at in 0..20 {
            for b in [b'"', b'[', b'\\', 0x7f, 0x80, 0xff, 0x00, 0x1f, 0x20] {
                let mut bytes = vec![b'a'; 20];
                bytes[at] = b;
                let escape = b == b'"' || b == b'\\';
                assert_eq!(find_quote_or_backslash(&bytes), escape.then_some(at));
                let stop = escape || b < 0x20;
                assert_eq!(find_string_stop(&bytes), stop.then_some(at));
                let dirty = b >= 0x80 || b == b'\\';
                assert_eq!(find_non_ascii_or_backslash(&bytes), dirty.then_some(at));
            }
        }
    }
}
