//! A float64 as Go's `encoding/json` writes it (`floatEncoder.encode`).
//!
//! Go writes the shortest digits that read back as the same float: fixed-point from 1e-6 up to
//! (not including) 1e21, with an exponent outside that range (`1e+21`, `1e-7`: every exponent
//! gets a sign, and a negative one loses the zero Go's `strconv` pads it with).
//!
//! Why it matters: the kubelet turns YAML into JSON with Go's `json.Marshal`
//! (`sigs.k8s.io/yaml`), so a YAML float reaches its JSON decoder as exactly this text, and
//! `Quantity.UnmarshalJSON` parses a number's *text* (`0.5` and `0.50` are one value but two
//! quantities to a kubelet ≤ 1.15, which hashes the text it cached). A float read from JSON
//! keeps its own text where that matters ([`crate::kubelet::spelling`]).
//!
//! ```
//! use kubehash::kubelet::gofloat::float64_text;
//! assert_eq!(float64_text(0.5), "0.5");
//! assert_eq!(float64_text(1e21), "1e+21");
//! assert_eq!(float64_text(1e-7), "1e-7");
//! ```

/// `json.Marshal(f)` for a finite float64 (Go refuses NaN and infinities).
pub fn float64_text(f: f64) -> String {
    let abs = f.abs();
    if abs != 0.0 && !(1e-6..1e21).contains(&abs) {
        // Rust's `{:e}` is the same shortest digits; Go signs every exponent (`e+21`), and its
        // clean-up turns `e-07` into `e-7`, which is how Rust writes it already.
        let text = format!("{f:e}");
        return match text.split_once('e') {
            Some((digits, exponent)) if !exponent.starts_with('-') => {
                format!("{digits}e+{exponent}")
            }
            _ => text,
        };
    }
    // Rust's `{}` is the shortest digits, fixed-point: Go's `'f'` with precision -1.
    format!("{f}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    /// What Go 1.22 prints for `json.Marshal(f)`.
    #[test]
    fn writes_floats_as_encoding_json_does() {
        for (f, go) in [
            (0.5, "0.5"),
            (0.1, "0.1"),
            (0.1 + 0.2, "0.30000000000000004"),
            (-2.5, "-2.5"),
            (1.0, "1"),
            (100.0, "100"),
            (0.0, "0"),
            (-0.0, "-0"),
            (1e20, "100000000000000000000"),
            (9007199254740993.0, "9007199254740992"),
            (1e21, "1e+21"),
            (1.5e21, "1.5e+21"),
            (1.23456789e23, "1.23456789e+23"),
            (1e-6, "0.000001"),
            (1.5e-6, "0.0000015"),
            (1e-7, "1e-7"),
            (-1.5e-7, "-1.5e-7"),
            (1e-10, "1e-10"),
            (5e-324, "5e-324"),
            (f64::MAX, "1.7976931348623157e+308"),
        ] {
            assert_eq!(float64_text(f), go, "{f:?}");
        }
    }

    /// `Quantity.UnmarshalJSON` strips a string's quotes and parses what is left, so a quantity
    /// written as a number hashes as the same text in a string, in every version: each golden
    /// container's quantities that are numbers as Go writes them, written as numbers.
    #[test]
    fn a_number_quantity_hashes_as_its_text() {
        use crate::kubelet::hash::hash_container;
        use crate::kubelet::spelling::{for_each_placed, Place};
        use crate::kubelet::version::parse_version_set;
        // A quantity string that is a number as Go writes it, as that number.
        let numbers = |v: &mut Value, n: &mut usize| {
            for_each_placed(v, &mut |q, place| {
                let Value::String(s) = q else { return };
                let go = match serde_json::from_str::<serde_json::Number>(s) {
                    Ok(num) if num.is_f64() => float64_text(num.as_f64().unwrap_or(0.0)),
                    Ok(num) => num.to_string(),
                    Err(_) => return,
                };
                if place == Place::Quantity && go == *s {
                    *q = Value::Number(serde_json::from_str(s).unwrap());
                    *n += 1;
                }
            })
        };
        let all = parse_version_set("all").unwrap();
        let mut rewritten = 0;
        for c in crate::test_corpus::golden_containers() {
            let mut as_numbers = c.clone();
            let mut n = 0;
            numbers(&mut as_numbers, &mut n);
            if n == 0 {
                continue;
            }
            rewritten += n;
            let (a, b) = (
                hash_container(c, &all, "").unwrap(),
                hash_container(&as_numbers, &all, "").unwrap(),
            );
            assert_eq!(
                (a.hash_hex(), a.without_resources_hex()),
                (b.hash_hex(), b.without_resources_hex()),
                "{as_numbers}"
            );
        }
        assert!(rewritten >= 100, "{rewritten} quantities rewritten");
    }
}
