//! No input makes kubehash panic: random JSON (containers of roughly the right shape, with
//! wrong types, odd numbers and odd strings) either hashes or returns an error.

use kubehash::kubelet::hash::hash_container;
use kubehash::kubelet::quantity;
use kubehash::kubelet::version::KubeletVersion;
use proptest::prelude::*;
use serde_json::{Map, Value};

fn leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Value::from),
        "[ -~\u{80}-\u{2030}]{0,12}".prop_map(Value::String),
        prop::sample::select(vec![
            "1.5Gi",
            "0.0000000001",
            "1e-20",
            "9223372036854775807Ki",
            "100Ei",
            "Mi",
            "-1",
            "1e4294967297",
            "0.1",
            "+",
            "1E"
        ])
        .prop_map(Value::from),
    ]
}

const KEYS: &[&str] = &[
    "name",
    "image",
    "args",
    "command",
    "ports",
    "containerPort",
    "env",
    "value",
    "resources",
    "limits",
    "requests",
    "cpu",
    "memory",
    "securityContext",
    "capabilities",
    "livenessProbe",
    "httpGet",
    "port",
    "exec",
    "lifecycle",
    "preStop",
    "sleep",
    "seconds",
    "volumeMounts",
    "mountPath",
    "divisor",
    "valueFrom",
    "resourceFieldRef",
    "tty",
    "restartPolicyRules",
    "exitCodes",
    "values",
    "runAsUser",
    "grpc",
    "service",
];

fn json() -> impl Strategy<Value = Value> {
    leaf().prop_recursive(4, 64, 8, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::vec((prop::sample::select(KEYS), inner), 0..6).prop_map(|kv| {
                Value::Object(
                    kv.into_iter()
                        .map(|(k, v)| (k.to_string(), v))
                        .collect::<Map<_, _>>(),
                )
            }),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn random_containers_never_panic(mut c in json()) {
        if let Value::Object(m) = &mut c {
            m.insert("name".into(), Value::from("x"));
        }
        let versions: Vec<KubeletVersion> = KubeletVersion::all().collect();
        let _ = hash_container(&c, &versions, "c");
    }

    #[test]
    fn random_quantity_strings_never_panic(s in "[-+0-9.eEinumkKMGTP ]{0,24}") {
        if let Ok(q) = quantity::parse(&s) {
            let _ = q.canonical();
        }
    }

    #[test]
    fn random_input_bytes_never_panic(b in prop::collection::vec(any::<u8>(), 0..200)) {
        let _ = kubehash::source::input::for_each_item_in(&b[..], "fuzz", |_| {});
        let _ = kubehash::source::doc::Doc::parse(b);
    }
}
