//! The kubelet's command line as its flag parser reads it (spf13/pflag, with
//! `cliflag.WordSepNormalizeFunc`), and the feature gates it is given: `--feature-gates`, merged
//! over its config file's `featureGates`.

use serde_json::Value;

/// Every `name` among `args` as pflag reads it: the argument as given and its value
/// (`--name=value`, or `--name value` where the next word is no flag). Flag names are compared
/// after `cliflag.WordSepNormalizeFunc` (`_` reads as `-`).
pub fn flags_in<'a>(args: &'a [String], name: &str) -> Vec<(&'a str, Option<&'a str>)> {
    let mut found = Vec::new();
    for (i, a) in args.iter().enumerate() {
        let (given, value) = match a.split_once('=') {
            Some((n, v)) => (n, Some(v)),
            None => (a.as_str(), None),
        };
        if given.starts_with("--") && given.replace('_', "-") == name {
            let value = value.or_else(|| {
                args.get(i + 1)
                    .map(String::as_str)
                    .filter(|next| !next.starts_with('-'))
            });
            found.push((a.as_str(), value));
        }
    }
    found
}

/// The last `name` among `args` ([`flags_in`]): a later one overrides.
pub fn flag_in<'a>(args: &'a [String], name: &str) -> Option<(&'a str, Option<&'a str>)> {
    flags_in(args, name).pop()
}

/// The `gate=value` entries of every `--feature-gates` among `args`, in order (every occurrence
/// adds to one map, as cliflag `MapStringBool.Set` does, trimming each key and value).
fn gate_entries(args: &[String]) -> impl DoubleEndedIterator<Item = (&str, &str)> {
    flags_in(args, "--feature-gates")
        .into_iter()
        .filter_map(|(_, v)| v)
        .flat_map(|gates| gates.split(','))
        .filter_map(|g| g.split_once('='))
        .map(|(k, v)| (k.trim(), v.trim()))
}

/// Feature gate `gate` as the kubelet is told it: the last `--feature-gates` entry for it (the
/// flag overrides the config file), else `config`'s `featureGates`; a value is read as Go's
/// `strconv.ParseBool` reads it.
pub fn feature_gate(args: &[String], config: Option<&Value>, gate: &str) -> Option<bool> {
    let parse_bool = |v: &str| match v {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    };
    match gate_entries(args).rev().find(|(k, _)| *k == gate) {
        Some((_, v)) => parse_bool(v),
        None => config?.get("featureGates")?.get(gate)?.as_bool(),
    }
}

/// Every feature gate named in `args`' `--feature-gates` and in `config`'s `featureGates`, with
/// where it is set, once each.
pub fn feature_gates_set(args: &[String], config: Option<&Value>) -> Vec<(String, &'static str)> {
    let mut set: Vec<(String, &'static str)> = gate_entries(args)
        .map(|(k, _)| (k.to_string(), "--feature-gates"))
        .collect();
    let in_config = config
        .and_then(|c| c.get("featureGates")?.as_object())
        .into_iter()
        .flat_map(|gates| gates.keys().cloned());
    set.extend(in_config.map(|g| (g, "the kubelet config's featureGates")));
    let mut seen = std::collections::BTreeSet::new();
    set.retain(|entry| seen.insert(entry.clone()));
    set
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn args(line: &str) -> Vec<String> {
        line.split_whitespace().map(str::to_string).collect()
    }

    #[test]
    fn flags_are_read_as_pflag_reads_them() {
        let a =
            args("--log_dir=/a --cloud-provider aws --v=2 --logtostderr --cloud-provider=external");
        assert_eq!(flag_in(&a, "--log-dir"), Some(("--log_dir=/a", Some("/a"))));
        assert_eq!(flags_in(&a, "--cloud-provider").len(), 2);
        assert_eq!(
            flag_in(&a, "--cloud-provider"),
            Some(("--cloud-provider=external", Some("external")))
        );
        assert_eq!(flags_in(&a, "--cloud-provider")[0].1, Some("aws"));
        assert_eq!(flag_in(&a, "--logtostderr"), Some(("--logtostderr", None)));
        assert_eq!(flag_in(&a, "--v"), Some(("--v=2", Some("2"))));
        assert_eq!(flag_in(&a, "--log-file"), None);
    }

    #[test]
    fn feature_gates_merge_over_the_config_and_the_last_entry_wins() {
        let config = json!({"featureGates": {"A": false, "B": true}});
        let a = args("--feature-gates=A=true,C=false --feature-gates= C = 1 ,D=maybe");
        assert_eq!(feature_gate(&a, Some(&config), "A"), Some(true));
        assert_eq!(feature_gate(&a, Some(&config), "B"), Some(true));
        // The shell's word split ends the second flag at `=`: it sets nothing.
        assert_eq!(feature_gate(&a, Some(&config), "C"), Some(false));
        let a = args("--feature-gates=A=true,C=false --feature-gates=C=1,A=F");
        assert_eq!(feature_gate(&a, Some(&config), "C"), Some(true));
        assert_eq!(feature_gate(&a, Some(&config), "A"), Some(false));
        assert_eq!(
            feature_gate(&args("--feature-gates=D=maybe"), None, "D"),
            None
        );
        assert_eq!(feature_gate(&[], Some(&config), "A"), Some(false));
        assert_eq!(
            feature_gates_set(
                &args("--feature-gates=X=true,Y=false,X=false"),
                Some(&config)
            ),
            [
                ("X".to_string(), "--feature-gates"),
                ("Y".to_string(), "--feature-gates"),
                ("A".to_string(), "the kubelet config's featureGates"),
                ("B".to_string(), "the kubelet config's featureGates"),
            ]
        );
    }
}
