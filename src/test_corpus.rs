//! The public golden containers, for unit tests (`testdata/golden/public.jsonl`, each record's
//! `container`), read and parsed once per test binary.

use std::sync::OnceLock;

use serde_json::Value;

/// Every golden record's container, in file order.
pub fn golden_containers() -> &'static [Value] {
    static ALL: OnceLock<Vec<Value>> = OnceLock::new();
    ALL.get_or_init(|| {
        include_str!("../testdata/golden/public.jsonl")
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str::<Value>(l).expect("golden record")["container"].take())
            .collect()
    })
}
