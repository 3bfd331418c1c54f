//! `resource.Quantity`, parsed and printed exactly as apimachinery does.
//!
//! A kubelet never sees the quantity string of a pod spec; it sees the Go value that
//! `ParseQuantity` made of it, and both hashes depend on that value's details:
//!
//! * go-spew (kubelet ≤ 1.15) prints every field: the int64 form `i{value,scale}`, the `inf.Dec`
//!   form `d` (used when the number does not fit the int64 form), the cached input string `s`
//!   and the `Format`;
//! * `json.Marshal` (1.16 – 1.30) prints `s` if it is set, else the canonical form.
//!
//! `ParseQuantity` caches the input in `s` only when the input is already canonical (rules at
//! [`parse`]), so `"2"` keeps `s="2"` while `"64Mi"` does not. Everything here mirrors
//! `k8s.io/apimachinery/pkg/api/resource` (quantity.go, amount.go, math.go, suffix.go) and
//! `gopkg.in/inf.v0`, which have not changed in these respects from kubelet 1.8 to 1.36
//! (in particular `maxInt64Factors` is 18 in every release up to 1.36).
//!
//! ```
//! use kubehash::kubelet::quantity::{parse, Format};
//! let q = parse("2").unwrap();
//! assert_eq!((q.value, q.scale, q.s.as_str(), q.format), (2, 0, "2", Format::DecimalSI));
//! let q = parse("64Mi").unwrap();
//! assert_eq!((q.value, q.s.as_str(), q.canonical().as_str()), (67108864, "", "64Mi"));
//! assert_eq!(parse("1.5Gi").unwrap().canonical(), "1536Mi"); // via inf.Dec
//! ```

use std::cmp::Ordering;

use num_bigint::{BigInt, Sign};
use num_integer::Integer;
use num_traits::{One, Signed, Zero};

/// `resource.Format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Format {
    /// The zero value `""` (a Quantity that was never parsed).
    #[default]
    Empty,
    DecimalExponent,
    BinarySI,
    DecimalSI,
}

impl Format {
    pub fn as_str(self) -> &'static str {
        match self {
            Format::Empty => "",
            Format::DecimalExponent => "DecimalExponent",
            Format::BinarySI => "BinarySI",
            Format::DecimalSI => "DecimalSI",
        }
    }
}

/// `inf.Dec`: the value `unscaled × 10^-scale`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dec {
    pub unscaled: BigInt,
    pub scale: i32,
}

/// A parsed `resource.Quantity` with the fields Go keeps.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Quantity {
    /// `i.value`
    pub value: i64,
    /// `i.scale` (a power of ten: value × 10^scale)
    pub scale: i32,
    /// `d.Dec`, set only when the number did not fit the int64 form.
    pub dec: Option<Dec>,
    /// `s`, the cached string (empty unless the input was canonical).
    pub s: String,
    pub format: Format,
}

/// A [`Quantity`] as plain data, borrowed from an arena that runs no destructors (the decoded
/// value tree lives in one): the cached string copied in, `d.Dec` as its `big.nat` words.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuantityRef<'a> {
    pub value: i64,
    pub scale: i32,
    pub dec: Option<DecRef<'a>>,
    pub s: &'a str,
    pub format: Format,
}

/// `inf.Dec` as plain data: the sign and `big.nat` words ([`nat_words`]) of `unscaled`, and
/// `scale`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DecRef<'a> {
    pub negative: bool,
    pub words: &'a [u64],
    pub scale: i32,
}

impl QuantityRef<'static> {
    /// The zero `Quantity` (a field that was never set).
    pub const ZERO: QuantityRef<'static> = QuantityRef {
        value: 0,
        scale: 0,
        dec: None,
        s: "",
        format: Format::Empty,
    };
}

impl Quantity {
    /// This quantity as plain data in `arena`.
    pub fn to_ref<'a>(&self, arena: &'a bumpalo::Bump) -> QuantityRef<'a> {
        QuantityRef {
            value: self.value,
            scale: self.scale,
            dec: self.dec.as_ref().map(|d| DecRef {
                negative: d.unscaled.sign() == Sign::Minus,
                words: arena.alloc_slice_copy(&nat_words(&d.unscaled)),
                scale: d.scale,
            }),
            s: arena.alloc_str(&self.s),
            format: self.format,
        }
    }
}

impl QuantityRef<'_> {
    /// What `MarshalJSON` puts between the quotes ([`Quantity::json_text`]).
    pub fn json_text(&self) -> std::borrow::Cow<'_, str> {
        if !self.s.is_empty() {
            return self.s.into();
        }
        Quantity {
            value: self.value,
            scale: self.scale,
            dec: self.dec.map(|d| {
                let digits = d.words.iter().flat_map(|w| [*w as u32, (w >> 32) as u32]);
                let sign = if d.negative { Sign::Minus } else { Sign::Plus };
                Dec {
                    unscaled: BigInt::from_biguint(
                        sign,
                        num_bigint::BigUint::new(digits.collect()),
                    ),
                    scale: d.scale,
                }
            }),
            s: String::new(),
            format: self.format,
        }
        .canonical()
        .into()
    }
}

/// Why `ParseQuantity` rejected a string (its error texts).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuantityError {
    FormatWrong,
    Numeric,
    Suffix,
    /// Not an apimachinery error: an exponent so far from the nano scale that Go would build a
    /// number with more than [`MAX_SHIFT_DIGITS`] digits. kubehash refuses instead of guessing.
    TooLarge,
}

impl std::fmt::Display for QuantityError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            QuantityError::FormatWrong => {
                "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
            }
            QuantityError::Numeric => "unable to parse numeric part of quantity",
            QuantityError::Suffix => "unable to parse quantity's suffix",
            QuantityError::TooLarge => "exponent too far from the nano scale for kubehash to evaluate",
        })
    }
}

/// The largest power of ten kubehash will build while rounding to the nano scale.
pub const MAX_SHIFT_DIGITS: i64 = 100_000;

/// apimachinery's `maxInt64Factors` in every kubelet release 1.8 – 1.36.
const MAX_INT64_FACTORS: i64 = 18;
/// `resource.Nano`
const NANO: i32 = -9;

/// How `Quantity.UnmarshalJSON` reads a JSON string: surrounding white space is trimmed
/// (`strings.TrimSpace`), then [`parse`].
pub fn parse_json_string(raw: &str) -> Result<Quantity, QuantityError> {
    parse(raw.trim_matches(char::is_whitespace))
}

/// Whether `ParseQuantity` surely takes `text`, seen without parsing it: one to fifteen digits
/// and a suffix of the suffixer's table (`interpret`: SI or binary, or none; not an exponent).
/// Such a text always parses (the digits never overflow: too many for the int64 fast path take
/// the `inf.Dec` one); `false` says nothing. For checks that need no value: [`parse`] allocates.
pub fn plainly_parses(text: &[u8]) -> bool {
    let digits = text.iter().take_while(|b| b.is_ascii_digit()).count();
    (1..=15).contains(&digits)
        && matches!(
            interpret(&text[digits..]),
            Some((_, _, Format::DecimalSI | Format::BinarySI))
        )
}

/// `resource.ParseQuantity`.
///
/// The int64 fast path is taken when the digits fit (at most 18 of them for decimal formats, a
/// suffix-dependent budget for binary ones, no fraction for binary ones) and the scale is at least
/// nano. The input is cached in `s` when it is already canonical: for BinarySI when the suffix
/// exponent is a multiple of 10 and `value & 7 != 0`; otherwise when the scale is a multiple of 3,
/// the digits do not end in `000` and do not start with `0`. Everything else becomes an
/// `inf.Dec`, rounded up (away from zero) to nano precision, BinarySI capped at MaxInt64.
pub fn parse(str: &str) -> Result<Quantity, QuantityError> {
    if str.is_empty() {
        return Err(QuantityError::FormatWrong);
    }
    if str == "0" {
        return Ok(Quantity {
            format: Format::DecimalSI,
            s: str.to_string(),
            ..Quantity::default()
        });
    }
    let p = split(str.as_bytes())?;
    let (base, exponent, format) = interpret(p.suffix).ok_or(QuantityError::Suffix)?;

    let mut scale: i32 = 0;
    let mut mantissa: i64 = 1;
    let precision: i64 = match format {
        Format::BinarySI if exponent >= 0 && p.denom.is_empty() => {
            mantissa <<= exponent;
            // Go: 15 - len(num) - int32(float32(exponent)*3/10) - 1; exponent is a multiple of 10.
            15 - p.num.len() as i64 - i64::from(exponent) * 3 / 10 - 1
        }
        Format::BinarySI => -1,
        _ => {
            scale = exponent;
            MAX_INT64_FACTORS - (p.num.len() + p.denom.len()) as i64
        }
    };

    if precision >= 0 {
        scale = scale.wrapping_sub(p.denom.len() as i32);
        if scale >= NANO {
            let mut shifted = Vec::with_capacity(p.num.len() + p.denom.len());
            shifted.extend_from_slice(p.num);
            shifted.extend_from_slice(p.denom);
            let value: i64 = ascii(&shifted)
                .parse()
                .map_err(|_| QuantityError::Numeric)?;
            if let Some(mut result) = value.checked_mul(mantissa) {
                if !p.positive {
                    result = -result;
                }
                let canonical = match format {
                    Format::BinarySI => exponent % 10 == 0 && value & 0x07 != 0,
                    _ => scale % 3 == 0 && !shifted.ends_with(b"000") && shifted[0] != b'0',
                };
                return Ok(Quantity {
                    value: result,
                    scale,
                    dec: None,
                    s: if canonical {
                        str.to_string()
                    } else {
                        String::new()
                    },
                    format,
                });
            }
        }
    }

    let mut amount = dec_from_string(p.value).ok_or(QuantityError::Numeric)?;
    if base == 10 {
        // Scale(exponent).infScale() is -exponent; int32 arithmetic wraps in Go.
        amount.scale = amount.scale.wrapping_add(exponent.wrapping_neg());
    } else {
        amount.unscaled <<= exponent as usize;
    }
    let negative = amount.unscaled.is_negative();
    if negative {
        amount.unscaled = -amount.unscaled;
    }
    if !amount.unscaled.is_zero() {
        amount = round_up(&amount, -NANO)?;
    }
    let mut format = format;
    if format == Format::BinarySI {
        let max = Dec {
            unscaled: BigInt::from(i64::MAX),
            scale: 0,
        };
        if cmp_dec(&amount, &max) == Ordering::Greater {
            amount = max;
        }
        let one = Dec {
            unscaled: BigInt::one(),
            scale: 0,
        };
        if cmp_dec(&amount, &one) == Ordering::Less && amount.unscaled.is_positive() {
            format = Format::DecimalSI;
        }
    }
    if negative {
        amount.unscaled = -amount.unscaled;
    }
    Ok(Quantity {
        dec: Some(amount),
        format,
        ..Quantity::default()
    })
}

/// `ParseQuantity(s).MilliValue()`, for comparing amounts (`None` past the i128 range).
pub fn parse_quantity_milli(s: &str) -> Result<i128, QuantityError> {
    parse(s)?.milli_value().ok_or(QuantityError::TooLarge)
}

impl Quantity {
    /// The amount in thousandths, rounded up as `MilliValue` rounds.
    pub fn milli_value(&self) -> Option<i128> {
        let (unscaled, scale): (BigInt, i32) = match &self.dec {
            Some(d) => (d.unscaled.clone(), -d.scale),
            None => (BigInt::from(self.value), self.scale),
        };
        let shift = scale + 3;
        let v = if shift >= 0 {
            unscaled * BigInt::from(10).pow(shift.unsigned_abs())
        } else {
            let d = BigInt::from(10).pow(shift.unsigned_abs());
            let (q, r) = unscaled.div_rem(&d);
            if r.sign() == num_bigint::Sign::Plus {
                q + 1
            } else {
                q
            }
        };
        i128::try_from(v).ok()
    }

    /// What `MarshalJSON` puts between the quotes: the cached `s`, else the canonical form.
    pub fn json_text(&self) -> std::borrow::Cow<'_, str> {
        if self.s.is_empty() {
            self.canonical().into()
        } else {
            self.s.as_str().into()
        }
    }

    /// `CanonicalizeBytes`: number and suffix in canonical form (`1.5Gi` → `1536Mi`).
    pub fn canonical(&self) -> String {
        if self.is_zero() {
            return "0".into();
        }
        let mut format = self.format;
        let mut rounded = None;
        match format {
            Format::DecimalExponent | Format::DecimalSI => {}
            Format::BinarySI => {
                if self.cmp_int(-1024) == Ordering::Greater && self.cmp_int(1024) == Ordering::Less
                {
                    format = Format::DecimalSI;
                } else {
                    let (r, exact) = self.as_scale0();
                    if exact {
                        rounded = Some(r);
                    } else {
                        format = Format::DecimalSI;
                    }
                }
            }
            Format::Empty => format = Format::DecimalExponent,
        }
        match (format, rounded) {
            (Format::BinarySI, Some(r)) => {
                let (mut number, exponent) = r.base1024();
                number.push_str(suffix(2, exponent.wrapping_mul(10), format));
                number
            }
            _ => {
                let (mut number, exponent) = self.canonical_base10();
                match format {
                    Format::DecimalExponent if exponent != 0 => {
                        number.push('e');
                        number.push_str(&exponent.to_string());
                    }
                    Format::DecimalExponent => {}
                    _ => number.push_str(suffix(10, exponent, format)),
                }
                number
            }
        }
    }

    fn is_zero(&self) -> bool {
        match &self.dec {
            Some(d) => d.unscaled.is_zero(),
            None => self.value == 0,
        }
    }

    fn as_dec(&self) -> Dec {
        match &self.dec {
            Some(d) => d.clone(),
            None => Dec {
                unscaled: BigInt::from(self.value),
                scale: self.scale.wrapping_neg(),
            },
        }
    }

    fn cmp_int(&self, y: i64) -> Ordering {
        cmp_dec(
            &self.as_dec(),
            &Dec {
                unscaled: BigInt::from(y),
                scale: 0,
            },
        )
    }

    /// `AsScale(0)`: the value rounded up to an integer, and whether that was exact.
    fn as_scale0(&self) -> (Amount, bool) {
        match &self.dec {
            None if self.scale >= 0 => (Amount::Int(self.value, self.scale), true),
            None => {
                let (v, exact) = negative_scale_i64(self.value, -(self.scale as i64));
                (Amount::Int(v, 0), exact)
            }
            Some(d) => match round_up(d, 0) {
                Ok(r) => {
                    let exact = cmp_dec(&r, d) == Ordering::Equal;
                    (Amount::Dec(r), exact)
                }
                // Unreachable for parsed values (their scale is 9 or 0); treat as inexact.
                Err(_) => (Amount::Dec(d.clone()), false),
            },
        }
    }

    /// `AsCanonicalBytes`: mantissa digits and a base-10 exponent that is a multiple of 3.
    fn canonical_base10(&self) -> (String, i32) {
        if let Some(d) = &self.dec {
            return dec_canonical(d);
        }
        let (amount, times) = remove_i64_factors(self.value, 10);
        let exponent = self.scale.wrapping_add(times);
        let adjusted = match exponent % 3 {
            1 | -2 => amount.checked_mul(10).map(|a| (a, exponent - 1)),
            2 | -1 => amount.checked_mul(100).map(|a| (a, exponent - 2)),
            _ => Some((amount, exponent)),
        };
        match adjusted {
            Some((a, e)) => (a.to_string(), e),
            None => dec_canonical(&self.as_dec()),
        }
    }
}

/// A value after `AsScale(0)`, either still int64-backed or an `inf.Dec`.
enum Amount {
    Int(i64, i32),
    Dec(Dec),
}

impl Amount {
    /// `AsCanonicalBase1024Bytes`.
    fn base1024(&self) -> (String, i32) {
        match self {
            Amount::Int(v, scale) => {
                let value = match positive_scale_i64(*v, *scale) {
                    Some(value) => value,
                    None => {
                        return Amount::Dec(Dec {
                            unscaled: BigInt::from(*v),
                            scale: scale.wrapping_neg(),
                        })
                        .base1024()
                    }
                };
                let (amount, times) = remove_i64_factors(value, 1024);
                (amount.to_string(), times)
            }
            Amount::Dec(d) => {
                let r = round_up(d, 0).unwrap_or_else(|_| d.clone());
                let (amount, times) = remove_big_factors(r.unscaled, 1024);
                (amount.to_string(), times)
            }
        }
    }
}

fn dec_canonical(d: &Dec) -> (String, i32) {
    let (mut amount, times) = remove_big_factors(d.unscaled.clone(), 10);
    let mut exponent = d.scale.wrapping_neg().wrapping_add(times);
    while exponent % 3 != 0 {
        amount *= 10;
        exponent -= 1;
    }
    (amount.to_string(), exponent)
}

/// The suffix table of suffix.go; a pair it lacks yields no suffix (Go ignores the miss).
fn suffix(base: i32, exponent: i32, format: Format) -> &'static str {
    match (format, base, exponent) {
        (Format::DecimalSI, 10, -9) => "n",
        (Format::DecimalSI, 10, -6) => "u",
        (Format::DecimalSI, 10, -3) => "m",
        (Format::DecimalSI, 10, 3) => "k",
        (Format::DecimalSI, 10, 6) => "M",
        (Format::DecimalSI, 10, 9) => "G",
        (Format::DecimalSI, 10, 12) => "T",
        (Format::DecimalSI, 10, 15) => "P",
        (Format::DecimalSI, 10, 18) => "E",
        (Format::BinarySI, 2, 10) => "Ki",
        (Format::BinarySI, 2, 20) => "Mi",
        (Format::BinarySI, 2, 30) => "Gi",
        (Format::BinarySI, 2, 40) => "Ti",
        (Format::BinarySI, 2, 50) => "Pi",
        (Format::BinarySI, 2, 60) => "Ei",
        _ => "",
    }
}

/// `suffixer.interpret`: (base, exponent, format) for a suffix.
fn interpret(s: &[u8]) -> Option<(i32, i32, Format)> {
    let dec = |e| Some((10, e, Format::DecimalSI));
    let bin = |e| Some((2, e, Format::BinarySI));
    match s {
        b"" => dec(0),
        b"n" => dec(-9),
        b"u" => dec(-6),
        b"m" => dec(-3),
        b"k" => dec(3),
        b"M" => dec(6),
        b"G" => dec(9),
        b"T" => dec(12),
        b"P" => dec(15),
        b"E" => dec(18),
        b"Ki" => bin(10),
        b"Mi" => bin(20),
        b"Gi" => bin(30),
        b"Ti" => bin(40),
        b"Pi" => bin(50),
        b"Ei" => bin(60),
        [b'e' | b'E', rest @ ..] if !rest.is_empty() => {
            // strconv.ParseInt(rest, 10, 64), then int32(parsed): Go truncates silently.
            let parsed: i64 = ascii(rest).parse().ok()?;
            Some((10, parsed as i32, Format::DecimalExponent))
        }
        _ => None,
    }
}

struct Parts<'a> {
    positive: bool,
    value: &'a [u8],
    num: &'a [u8],
    denom: &'a [u8],
    suffix: &'a [u8],
}

/// `parseQuantityString`: sign, digits, fraction and suffix, without interpreting them.
fn split(b: &[u8]) -> Result<Parts<'_>, QuantityError> {
    let end = b.len();
    let mut p = Parts {
        positive: true,
        value: b"",
        num: b"",
        denom: b"",
        suffix: b"",
    };
    let mut pos = 0;
    match b.first() {
        Some(b'-') => {
            p.positive = false;
            pos += 1;
        }
        Some(b'+') => pos += 1,
        _ => {}
    }
    // Leading zeros; all zeros (or nothing) means "0".
    while pos < end && b[pos] == b'0' {
        pos += 1;
    }
    if pos >= end {
        p.num = b"0";
        p.value = b"0";
        return Ok(p);
    }
    let start = pos;
    while pos < end && b[pos].is_ascii_digit() {
        pos += 1;
    }
    if pos >= end {
        p.num = &b[start..end];
        p.value = b;
        return Ok(p);
    }
    p.num = if pos == start { b"0" } else { &b[start..pos] };
    if b[pos] == b'.' {
        pos += 1;
        let start = pos;
        while pos < end && b[pos].is_ascii_digit() {
            pos += 1;
        }
        p.denom = &b[start..pos];
        if pos >= end {
            p.value = b;
            return Ok(p);
        }
    }
    p.value = &b[..pos];
    let suffix_start = pos;
    while pos < end && b"eEinumkKMGTP".contains(&b[pos]) {
        pos += 1;
    }
    if pos < end && (b[pos] == b'-' || b[pos] == b'+') {
        pos += 1;
    }
    while pos < end && b[pos].is_ascii_digit() {
        pos += 1;
    }
    if pos < end {
        return Err(QuantityError::FormatWrong);
    }
    p.suffix = &b[suffix_start..];
    Ok(p)
}

/// The parts handed around here are ASCII by construction.
fn ascii(b: &[u8]) -> &str {
    std::str::from_utf8(b).unwrap_or("\u{fffd}")
}

/// `inf.Dec.SetString`: `[+-]digits[.digits]`, scale = digits after the point.
fn dec_from_string(v: &[u8]) -> Option<Dec> {
    let (negative, rest) = match v.first() {
        Some(b'-') => (true, &v[1..]),
        Some(b'+') => (false, &v[1..]),
        _ => (false, v),
    };
    let (int, frac) = match rest.iter().position(|&c| c == b'.') {
        Some(i) => (&rest[..i], &rest[i + 1..]),
        None => (rest, &b""[..]),
    };
    if int.is_empty() && frac.is_empty() {
        return None; // "no digits read"
    }
    if !int.iter().chain(frac).all(u8::is_ascii_digit) {
        return None;
    }
    let mut digits = Vec::with_capacity(int.len() + frac.len());
    digits.extend_from_slice(int);
    digits.extend_from_slice(frac);
    let magnitude = num_bigint::BigUint::parse_bytes(&digits, 10)?;
    let sign = if negative { Sign::Minus } else { Sign::Plus };
    Some(Dec {
        unscaled: BigInt::from_biguint(sign, magnitude),
        scale: i32::try_from(frac.len()).ok()?,
    })
}

fn pow10(n: u64) -> BigInt {
    num_traits::pow(BigInt::from(10u8), n as usize)
}

/// `inf.Dec.Round(x, s, inf.RoundUp)`: to scale `s`, rounding away from zero.
fn round_up(x: &Dec, s: i32) -> Result<Dec, QuantityError> {
    // quoRem: shift = s - (x.scale - 0), in int32 arithmetic.
    let shift = i64::from(s.wrapping_sub(x.scale));
    let unscaled = match shift.cmp(&0) {
        Ordering::Equal => x.unscaled.clone(),
        Ordering::Greater => {
            if shift > MAX_SHIFT_DIGITS {
                return Err(QuantityError::TooLarge);
            }
            &x.unscaled * pow10(shift as u64)
        }
        Ordering::Less => {
            let digits = -shift;
            // |x| < 10^digits for sure when it has fewer decimal digits: quotient 0, remainder x.
            let max_digits = (x.unscaled.bits() as f64 * std::f64::consts::LOG10_2) as i64 + 2;
            if digits > max_digits {
                x.unscaled.signum()
            } else {
                let (q, r) = x.unscaled.div_rem(&pow10(digits as u64));
                q + r.signum()
            }
        }
    };
    Ok(Dec { unscaled, scale: s })
}

/// `inf.Dec.Cmp`: compares values, aligning scales.
fn cmp_dec(a: &Dec, b: &Dec) -> Ordering {
    match a.scale.cmp(&b.scale) {
        Ordering::Equal => a.unscaled.cmp(&b.unscaled),
        Ordering::Greater => {
            let k = (i64::from(a.scale) - i64::from(b.scale)) as u64;
            a.unscaled.cmp(&(&b.unscaled * pow10(k)))
        }
        Ordering::Less => {
            let k = (i64::from(b.scale) - i64::from(a.scale)) as u64;
            (&a.unscaled * pow10(k)).cmp(&b.unscaled)
        }
    }
}

/// `removeInt64Factors`: value == result × base^times.
fn remove_i64_factors(value: i64, base: i64) -> (i64, i32) {
    let negative = value < 0;
    let mut result = if negative {
        value.wrapping_neg()
    } else {
        value
    };
    let mut times = 0;
    while result >= base && result % base == 0 {
        times += 1;
        result /= base;
    }
    if negative {
        result = result.wrapping_neg();
    }
    (result, times)
}

/// `removeBigIntFactors`.
fn remove_big_factors(mut d: BigInt, factor: i64) -> (BigInt, i32) {
    let f = BigInt::from(factor);
    let mut times = 0;
    while !d.is_zero() {
        let (q, m) = d.div_mod_floor(&f);
        if !m.is_zero() {
            break;
        }
        times += 1;
        d = q;
    }
    (d, times)
}

/// `negativeScaleInt64`: base / 10^scale rounded away from zero, and whether it was exact.
fn negative_scale_i64(base: i64, scale: i64) -> (i64, bool) {
    if scale == 0 {
        return (base, true);
    }
    let mut value = base;
    let mut fraction = false;
    for _ in 0..scale {
        if !fraction && value % 10 != 0 {
            fraction = true;
        }
        value /= 10;
        if value == 0 {
            if fraction {
                return (if base > 0 { 1 } else { -1 }, false);
            }
            return (0, true);
        }
    }
    if fraction {
        value += if base > 0 { 1 } else { -1 };
    }
    (value, !fraction)
}

/// `positiveScaleInt64` (None on overflow).
fn positive_scale_i64(base: i64, scale: i32) -> Option<i64> {
    let mut v = base;
    for _ in 0..scale {
        v = v.checked_mul(10)?;
    }
    Some(v)
}

/// `big.nat` words of |x| (64-bit `big.Word`, least significant first), as go-spew prints them.
pub fn nat_words(x: &BigInt) -> Vec<u64> {
    x.magnitude().to_u64_digits()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(s: &str) -> Quantity {
        parse(s).unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    #[test]
    fn canonical_inputs_are_cached_in_s() {
        // (input, value, scale, s, format)
        for (input, value, scale, s, format) in [
            ("2", 2, 0, "2", Format::DecimalSI),
            ("0", 0, 0, "0", Format::DecimalSI),
            ("500m", 500, -3, "500m", Format::DecimalSI),
            ("1k", 1, 3, "1k", Format::DecimalSI),
            ("1Mi", 1 << 20, 0, "1Mi", Format::BinarySI),
            ("+1", 1, 0, "+1", Format::DecimalSI),
            ("1e3", 1, 3, "1e3", Format::DecimalExponent),
            ("100e-3", 100, -3, "100e-3", Format::DecimalExponent),
            ("5e6", 5, 6, "5e6", Format::DecimalExponent),
        ] {
            let got = q(input);
            assert_eq!(
                (
                    got.value,
                    got.scale,
                    got.s.as_str(),
                    got.format,
                    got.dec.is_none()
                ),
                (value, scale, s, format, true),
                "{input}"
            );
        }
    }

    #[test]
    fn noncanonical_inputs_are_not_cached() {
        for (input, value, scale, canonical) in [
            ("64Mi", 64 << 20, 0, "64Mi"), // value & 7 == 0
            ("1000m", 1000, -3, "1"),      // ends in 000
            ("0.25", 25, -2, "250m"),      // scale not a multiple of 3
            ("0.5", 5, -1, "500m"),        // starts with 0
            ("1.0", 10, -1, "1"),
            ("2000M", 2000, 6, "2G"),
            ("1000000", 1000000, 0, "1M"),
            ("2048Ki", 2048 << 10, 0, "2Mi"),
            ("1536Mi", 1536 << 20, 0, "1536Mi"), // cached? 1536 & 7 == 0: no
        ] {
            let got = q(input);
            assert_eq!(
                (got.value, got.scale, got.s.as_str()),
                (value, scale, ""),
                "{input}"
            );
            assert_eq!(got.canonical(), canonical, "{input}");
        }
    }

    #[test]
    fn inf_dec_path() {
        let got = q("1.5Gi");
        let d = got.dec.as_ref().unwrap();
        assert_eq!(got.value, 0);
        assert_eq!(got.format, Format::BinarySI);
        assert_eq!(
            (d.unscaled.to_string(), d.scale),
            ("1610612736000000000".into(), 9)
        );
        assert_eq!(nat_words(&d.unscaled), vec![1610612736000000000]);
        assert_eq!(got.canonical(), "1536Mi");

        // More than 18 digits.
        let got = q("12345678901234567890");
        let d = got.dec.as_ref().unwrap();
        assert_eq!(d.scale, 9);
        assert_eq!(got.canonical(), "12345678901234567890");

        // Below nano: rounded up, away from zero.
        assert_eq!(q("0.0000000001").canonical(), "1n");
        assert_eq!(q("-0.0000000001").canonical(), "-1n");

        // BinarySI below one becomes DecimalSI; above MaxInt64 is capped.
        assert_eq!(q("0.5Ki").canonical(), "512");
        let half = q("0.0001Ki");
        assert_eq!(half.format, Format::DecimalSI);
        assert_eq!(q("100Ei").canonical(), "9223372036854775807");
    }

    #[test]
    fn the_arena_form_keeps_every_field_and_the_json_text() {
        // What the writers print comes from `QuantityRef`: each field, and `MarshalJSON`'s
        // text, rebuilt for an uncached value, must be the parsed quantity's.
        let arena = bumpalo::Bump::new();
        for input in [
            "2",
            "64Mi",
            "1000m",
            "0.25",
            "1.5Gi",
            "-1.5Gi",
            "12345678901234567890",
            "-12345678901234567890123456789012345678901234567890",
            "0.0000000001",
            "-0.0000000001",
            "0.5Ki",
            "100Ei",
            "1E",
            "1000E",
            "0",
            "-0.0",
            "Mi",
            "1e-30",
        ] {
            let got = q(input);
            let r = got.to_ref(&arena);
            assert_eq!(
                (r.value, r.scale, r.s, r.format),
                (got.value, got.scale, got.s.as_str(), got.format),
                "{input}"
            );
            match (&got.dec, r.dec) {
                (None, None) => {}
                (Some(d), Some(rd)) => {
                    assert_eq!(
                        (rd.negative, rd.words, rd.scale),
                        (
                            d.unscaled.sign() == Sign::Minus,
                            nat_words(&d.unscaled).as_slice(),
                            d.scale
                        ),
                        "{input}"
                    );
                }
                _ => panic!("{input}: dec lost or invented"),
            }
            assert_eq!(r.json_text(), got.json_text(), "{input}");
        }
        assert_eq!(QuantityRef::ZERO, Quantity::default().to_ref(&arena));
    }

    proptest::proptest! {
        /// The adversary against the arena form: any string that parses keeps every field and
        /// its JSON text through `QuantityRef`, big decimals and exponents included.
        #[test]
        fn the_arena_form_of_any_quantity_is_the_quantity(
            input in "[-+]?[0-9]{0,30}(\\.[0-9]{0,30})?([eE][-+]?[0-9]{1,3}|[numkMGTPE]|[KMGTPE]i)?",
        ) {
            let Ok(got) = parse(&input) else {
                return Ok(());
            };
            let arena = bumpalo::Bump::new();
            let r = got.to_ref(&arena);
            proptest::prop_assert_eq!((r.value, r.scale, r.s, r.format), (got.value, got.scale, got.s.as_str(), got.format));
            proptest::prop_assert_eq!(r.dec.map(|d| (d.negative, d.words.to_vec(), d.scale)), got.dec.as_ref().map(|d| (d.unscaled.sign() == Sign::Minus, nat_words(&d.unscaled), d.scale)));
            proptest::prop_assert_eq!(r.json_text(), got.json_text());
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(3000))]
        /// The adversary against the plain-quantity shortcut: texts around its edges (no digits,
        /// sixteen, leading zeros, signs, fractions, every suffix and near misses, white space).
        /// What it takes, `ParseQuantity` as `Quantity.UnmarshalJSON` calls it takes too.
        #[test]
        fn what_plainly_parses_parses(
            input in "[ +-]?[0-9]{0,17}(\\.[0-9]{0,2})?([numkMGTPEe]|[KMGTPEkmi]i|Ki |E1|ki|mi|Ii)? ?",
        ) {
            if plainly_parses(input.as_bytes()) {
                proptest::prop_assert!(parse_json_string(&input).is_ok(), "{input:?}");
            }
        }
    }

    #[test]
    fn plain_quantities_are_seen_to_parse() {
        for text in [
            "0",
            "1",
            "500m",
            "64Mi",
            "000",
            "007k",
            "999999999999999Ei",
            "999999999999999n",
            "1u",
            "2E",
        ] {
            assert!(plainly_parses(text.as_bytes()), "{text}");
            assert!(parse_json_string(text).is_ok(), "{text}");
        }
        // Not plain: left to the parser, which takes some of them.
        for text in [
            "",
            "m",
            "1000000000000000",
            "-1",
            "+1",
            "1.5",
            "1e3",
            " 1",
            "1 ",
            "1mi",
            "1ki",
            "1Ii",
            "1K",
        ] {
            assert!(!plainly_parses(text.as_bytes()), "{text}");
        }
    }

    #[test]
    fn suffix_quirks() {
        assert_eq!(q("1E").canonical(), "1E");
        assert_eq!(q("1e0").canonical(), "1");
        assert_eq!(q("1000E").canonical(), "1"); // 10^21 has no DecimalSI suffix; Go drops it
        assert_eq!(q("12e4294967297").scale, 1); // int32(parsed) truncates
        assert_eq!(q(".").canonical(), "0");
        assert_eq!(q("1.").canonical(), "1");
        assert_eq!(q("-").canonical(), "0");
    }

    #[test]
    fn rejects_what_go_rejects() {
        for s in [
            "", "1Mi ", " 1", "1x", "1e", "1.5.5", "1ki", "--1", "1e+", "１",
        ] {
            assert!(parse(s).is_err(), "{s:?}");
        }
        assert_eq!(parse("1ki"), Err(QuantityError::Suffix));
        assert_eq!(parse("1x"), Err(QuantityError::FormatWrong));
        assert_eq!(parse_json_string(" 2 ").unwrap().s, "2");
    }

    #[test]
    fn the_scanner_is_looser_than_its_documented_regex() {
        // parseQuantityString treats a missing number as 0, so these parse (to zero) in Go too.
        for s in ["Mi", "e3", "m"] {
            let got = q(s);
            assert_eq!(
                (got.value, got.s.as_str(), got.canonical().as_str()),
                (0, "", "0"),
                "{s}"
            );
        }
    }
}
