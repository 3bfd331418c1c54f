//! Kubelet versions and the hash epoch each one belongs to.
//!
//! A kubelet's container hash depends only on its *minor* version: the Go structs it vendored and
//! the hashing function in `pkg/kubelet/container/helpers.go` never change within a minor release.
//! This module turns whatever an operator or a Node object says (`1.12`, `v1.12.3`,
//! `v1.30.0-gke.1`, `1.31.4+k3s1`) into a [`KubeletVersion`], and says which [`HashEpoch`] it is in.
//!
//! ```
//! use kubehash::kubelet::version::{KubeletVersion, HashEpoch};
//! let v: KubeletVersion = "v1.30.0-gke.1".parse().unwrap();
//! assert_eq!(v.to_string(), "1.30");
//! assert_eq!(v.epoch(), HashEpoch::Json);
//! assert!(v.has_hash_without_resources());
//! ```

use std::fmt;
use std::str::FromStr;

use crate::error::Error;

// MIN_MINOR, MAX_MINOR and SCHEMA_FILES, from the schema/1.N.json files (build.rs).
include!(concat!(env!("OUT_DIR"), "/schemas.rs"));

/// A kubelet minor version `1.MINOR`, always within [`MIN_MINOR`]..=[`MAX_MINOR`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct KubeletVersion {
    minor: u8,
}

/// What a kubelet feeds to FNV-1a when it hashes a container (design §2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HashEpoch {
    /// 1.8 – 1.15: go-spew `%#v` of the `v1.Container` struct itself.
    Spew,
    /// 1.16 – 1.30: go-spew `%#v` of the `[]byte` from `json.Marshal(container)`.
    Json,
    /// 1.31 +: go-spew `%#v` of `json.Marshal(map[string]string{"name":…,"image":…})`.
    NameImage,
}

impl HashEpoch {
    /// Short stable name, as used in the schema files and in JSON output.
    pub fn as_str(self) -> &'static str {
        match self {
            HashEpoch::Spew => "spew",
            HashEpoch::Json => "json",
            HashEpoch::NameImage => "name-image",
        }
    }
}

impl KubeletVersion {
    /// The version `1.minor`, or an error if kubehash does not know it.
    pub fn from_minor(minor: u8) -> Result<Self, Error> {
        if (MIN_MINOR..=MAX_MINOR).contains(&minor) {
            Ok(KubeletVersion { minor })
        } else {
            Err(Error::UnsupportedVersion {
                given: format!("1.{minor}"),
                known: Self::supported_range(),
            })
        }
    }

    /// Every supported version, oldest first.
    pub fn all() -> impl DoubleEndedIterator<Item = KubeletVersion> + Clone {
        (MIN_MINOR..=MAX_MINOR).map(|minor| KubeletVersion { minor })
    }

    /// The minor number (`30` for 1.30).
    pub fn minor(self) -> u8 {
        self.minor
    }

    /// Which hashing scheme this kubelet uses.
    pub fn epoch(self) -> HashEpoch {
        match self.minor {
            0..=15 => HashEpoch::Spew,
            16..=30 => HashEpoch::Json,
            _ => HashEpoch::NameImage,
        }
    }

    /// Whether this kubelet also stores `io.kubernetes.container.hashWithoutResources`
    /// (1.27 – 1.30, added for in-place pod resize and removed in 1.31).
    pub fn has_hash_without_resources(self) -> bool {
        (27..=30).contains(&self.minor)
    }

    /// A list of the supported range, for error messages.
    pub fn supported_range() -> String {
        format!("1.{MIN_MINOR} … 1.{MAX_MINOR}")
    }
}

impl fmt::Display for KubeletVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "1.{}", self.minor)
    }
}

impl FromStr for KubeletVersion {
    type Err = Error;

    /// Accepts `1.12`, `v1.12`, `1.12.3`, `v1.30.0-gke.1`, `v1.31.4+k3s1`: an optional `v`, the major
    /// version `1`, the minor version, and anything after a further `.`, `-` or `+`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || Error::UnsupportedVersion {
            given: s.to_string(),
            known: Self::supported_range(),
        };
        let t = s.trim();
        let t = t.strip_prefix(['v', 'V']).unwrap_or(t);
        let rest = t.strip_prefix("1.").ok_or_else(bad)?;
        let end = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        let (digits, tail) = rest.split_at(end);
        if digits.is_empty() || digits.len() > 3 {
            return Err(bad());
        }
        if !(tail.is_empty() || tail.starts_with(['.', '-', '+'])) {
            return Err(bad());
        }
        let minor: u16 = digits.parse().map_err(|_| bad())?;
        let minor = u8::try_from(minor).map_err(|_| bad())?;
        KubeletVersion::from_minor(minor).map_err(|_| bad())
    }
}

/// What an operator should hear about an in-place kubelet upgrade `from` → `to` before acting: a
/// downgrade, or a jump wider than the Kubernetes version-skew policy allows (the kubelet may be
/// at most 3 minors older than kube-apiserver from 1.28 on, 2 before; the API server is already at
/// `to` or newer, so the old kubelet must be within that distance of `to`).
pub fn upgrade_warnings(from: KubeletVersion, to: KubeletVersion) -> Vec<String> {
    let mut out = Vec::new();
    if to < from {
        out.push(format!(
            "--to {to} is older than kubelet {from}: a downgrade (kubelet {to} hashes what it knows of each spec; nothing it cannot prove is rewritten)"
        ));
    }
    let allowed = if to.minor() >= 28 { 3 } else { 2 };
    let gap = to.minor().saturating_sub(from.minor());
    if gap > allowed {
        out.push(format!(
            "kubelet {from} → {to} is {gap} minors apart: the version-skew policy allows a kubelet at most {allowed} minors older than the API server (at {to} or newer); upgrade in steps"
        ));
    }
    out
}

/// A set of versions chosen on the command line: `all`, `1.12,1.31`, `1.16..1.30`, or a mix
/// (`1.8..1.15,1.31`). Kept sorted and without duplicates.
pub fn parse_version_set(spec: &str) -> Result<Vec<KubeletVersion>, Error> {
    let mut out = Vec::new();
    for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        if part.eq_ignore_ascii_case("all") {
            out.extend(KubeletVersion::all());
        } else if let Some((a, b)) = part.split_once("..") {
            let a: KubeletVersion = a.parse()?;
            let b: KubeletVersion = b.trim_start_matches('=').parse()?;
            if a > b {
                return Err(Error::BadVersionRange {
                    given: part.to_string(),
                });
            }
            out.extend((a.minor..=b.minor).map(|minor| KubeletVersion { minor }));
        } else if part
            .split_once('-')
            .is_some_and(|(_, b)| b.parse::<KubeletVersion>().is_ok())
        {
            // `1.28-1.30` reads as 1.28 with a pre-release tag: almost surely a range, mistyped.
            return Err(Error::BadVersionRange {
                given: part.to_string(),
            });
        } else {
            out.push(part.parse()?);
        }
    }
    if out.is_empty() {
        return Err(Error::BadVersionRange {
            given: spec.to_string(),
        });
    }
    out.sort();
    out.dedup();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_usual_spellings() {
        for (s, minor) in [
            ("1.12", 12),
            ("v1.12.3", 12),
            ("1.30.0-gke.1", 30),
            ("v1.31.4+k3s1", 31),
            ("V1.8", 8),
            (" 1.36.0 ", 36),
            ("v1.27.0-rc.1", 27),
        ] {
            assert_eq!(s.parse::<KubeletVersion>().unwrap().minor(), minor, "{s}");
        }
    }

    #[test]
    fn rejects_unknown_versions_and_says_what_is_supported() {
        for s in [
            "1.7", "1.38", "2.0", "1.", "v1.x", "1.300", "", "1.12a", "112",
        ] {
            let err = s.parse::<KubeletVersion>().unwrap_err().to_string();
            assert!(err.contains("1.8 … 1.37"), "{s}: {err}");
        }
    }

    #[test]
    fn epochs_follow_upstream() {
        let v = |m| KubeletVersion::from_minor(m).unwrap();
        assert_eq!(v(8).epoch(), HashEpoch::Spew);
        assert_eq!(v(15).epoch(), HashEpoch::Spew);
        assert_eq!(v(16).epoch(), HashEpoch::Json);
        assert_eq!(v(30).epoch(), HashEpoch::Json);
        assert_eq!(v(31).epoch(), HashEpoch::NameImage);
        assert!(!v(26).has_hash_without_resources());
        assert!(v(27).has_hash_without_resources());
        assert!(v(30).has_hash_without_resources());
        assert!(!v(31).has_hash_without_resources());
    }

    #[test]
    fn downgrades_and_skew() {
        let v = |m| KubeletVersion::from_minor(m).unwrap();
        assert!(upgrade_warnings(v(30), v(31)).is_empty());
        assert!(
            upgrade_warnings(v(28), v(31)).is_empty(),
            "3 minors from 1.28 on"
        );
        assert!(
            upgrade_warnings(v(24), v(27))[0].contains("is 3 minors apart"),
            "2 before 1.28"
        );
        assert!(upgrade_warnings(v(22), v(33))[0].contains("is 11 minors apart"));
        assert!(upgrade_warnings(v(31), v(30))[0].contains("a downgrade"));
    }

    #[test]
    fn version_sets() {
        let s = |spec| {
            parse_version_set(spec)
                .unwrap()
                .iter()
                .map(|v| v.to_string())
                .collect::<Vec<_>>()
        };
        assert_eq!(s("1.12,1.31"), ["1.12", "1.31"]);
        assert_eq!(s("1.28..1.30"), ["1.28", "1.29", "1.30"]);
        assert_eq!(s("1.31,1.8..1.9,1.31"), ["1.8", "1.9", "1.31"]);
        assert_eq!(parse_version_set("all").unwrap().len(), 30);
        assert!(parse_version_set("1.30..1.28").is_err());
        // A range written with a dash is not taken for one version with a pre-release tag.
        assert!(parse_version_set("1.28-1.30").is_err());
        assert!(parse_version_set("1.28,v1.30-v1.31").is_err());
        assert_eq!(s("1.30.0-gke.1,v1.31.4-rc.1"), ["1.30", "1.31"]);
        assert!(parse_version_set("").is_err());
    }
}
