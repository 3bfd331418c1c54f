//! Kubernetes names as apimachinery's `util/validation` checks them: label and annotation keys
//! (qualified names), label values. Each refusal says what the rule wants, in one line.

/// Alphanumeric, `-`, `_` and `.`, beginning and ending alphanumeric (`qualifiedNameFmt`, the
/// label value format without the empty string).
fn is_name(s: &str) -> bool {
    let b = s.as_bytes();
    let edge = |c: Option<&u8>| c.is_some_and(u8::is_ascii_alphanumeric);
    edge(b.first())
        && edge(b.last())
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

/// Lower-case alphanumeric and `-`, beginning and ending alphanumeric: an RFC 1123 label, without
/// its length limit.
fn is_dns_label(s: &str) -> bool {
    let b = s.as_bytes();
    let edge = |c: Option<&u8>| c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    edge(b.first())
        && edge(b.last())
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
}

/// A lower-case RFC 1123 subdomain of at most 253 characters (`IsDNS1123Subdomain`).
fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(is_dns_label)
}

/// An object name that must be a DNS subdomain, as a Node's (`ValidateNodeName`).
pub fn dns_subdomain_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        Err("it is empty".into())
    } else if is_dns_subdomain(name) {
        Ok(())
    } else {
        Err(
            "a name must be a DNS subdomain: lower-case alphanumeric, '-' and '.', at most 253 \
             characters, beginning and ending alphanumeric"
                .into(),
        )
    }
}

/// A namespace's name: a DNS label, lower-case alphanumeric and `-`, at most 63 characters,
/// beginning and ending alphanumeric (`ValidateNamespaceName`).
pub fn namespace_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        Err("it is empty".into())
    } else if name.len() <= 63 && is_dns_label(name) {
        Ok(())
    } else {
        Err(
            "a namespace is named by a DNS label: lower-case alphanumeric and '-', at most 63 \
             characters, beginning and ending alphanumeric"
                .into(),
        )
    }
}

/// A label or annotation key: an optional DNS subdomain prefix and `/`, then a name of at most
/// 63 characters (`validation.IsQualifiedName`). The error says what is wrong with it.
pub fn qualified_name(key: &str) -> Result<(), String> {
    let name = match key.split('/').collect::<Vec<_>>()[..] {
        [name] => name,
        ["", _] => return Err("the prefix before '/' is empty".into()),
        [prefix, _] if !is_dns_subdomain(prefix) => {
            return Err(format!(
                "the prefix {prefix:?} is not a DNS subdomain (lower-case alphanumeric, '-' and \
                 '.', at most 253 characters)"
            ));
        }
        [_, name] => name,
        _ => return Err("at most one '/', between a DNS subdomain prefix and the name".into()),
    };
    if name.is_empty() {
        Err("the name is empty".into())
    } else if name.len() > 63 {
        Err("the name is longer than 63 characters".into())
    } else if !is_name(name) {
        Err(
            "the name takes alphanumeric characters, '-', '_' and '.', beginning and ending \
             alphanumeric"
                .into(),
        )
    } else {
        Ok(())
    }
}

/// [`qualified_name`], for a label key.
pub fn label_key(key: &str) -> Result<(), String> {
    qualified_name(key).map_err(|why| format!("label key {key:?}: {why}"))
}

/// A label value: empty, or at most 63 characters of the name format
/// (`validation.IsValidLabelValue`).
pub fn label_value(key: &str, value: &str) -> Result<(), String> {
    if value.len() > 63 {
        Err(format!(
            "{key:?}: the value {value:?} is longer than 63 characters"
        ))
    } else if !value.is_empty() && !is_name(value) {
        Err(format!(
            "{key:?}: the value {value:?} is not a label value (alphanumeric characters, '-', \
             '_' and '.', beginning and ending alphanumeric)"
        ))
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qualified_names_as_apimachinery_takes_them() {
        for ok in [
            "a",
            "kubehash.dev/target-kubelet-version",
            "A_b.C-9",
            "x.y-z.example/Name",
            &"n".repeat(63),
            &format!("{}/n", ["a"; 127].join(".")),
        ] {
            assert_eq!(qualified_name(ok), Ok(()), "{ok}");
        }
        for (bad, why) in [
            ("", "the name is empty"),
            ("a/", "the name is empty"),
            ("/a", "prefix before '/' is empty"),
            ("a/b/c", "at most one '/'"),
            ("Example.com/a", "not a DNS subdomain"),
            ("a..b/c", "not a DNS subdomain"),
            ("-a.b/c", "not a DNS subdomain"),
            ("a b", "alphanumeric"),
            ("a.", "alphanumeric"),
            ("é", "alphanumeric"),
            (&"n".repeat(64), "longer than 63"),
            (
                &format!("{}/n", ["a"; 128].join(".")),
                "not a DNS subdomain",
            ),
        ] {
            let err = qualified_name(bad).unwrap_err();
            assert!(err.contains(why), "{bad:?}: {err}");
        }
        assert!(label_value("k", "").is_ok() && label_value("k", "a.b_c-D").is_ok());
        assert!(dns_subdomain_name("node-1.example").is_ok());
        assert!(namespace_name("kube-system").is_ok() && namespace_name("a").is_ok());
        for bad in ["", "Shop", "a.b", "-a", "a-", "a b", &"n".repeat(64)] {
            assert!(namespace_name(bad).is_err(), "{bad}");
        }
        for bad in ["", "Node-1", "node_1", "-node", "node.", &"n".repeat(254)] {
            assert!(dns_subdomain_name(bad).is_err(), "{bad}");
        }
        assert!(label_value("k", "a b").is_err() && label_value("k", &"v".repeat(64)).is_err());
    }
}
