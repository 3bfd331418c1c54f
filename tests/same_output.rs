//! Performance work must not change a byte of what any command prints.
//!
//! `testdata/expected/outputs.txt` records, for every command below, the exit code and the length
//! and FNV-1a 64 digest of its stdout and of its stderr, as printed by the commit before the
//! performance work (909e4a4). The commands cover the golden corpus in every output format and
//! version set, `--explain` for each epoch, the bundled example through `hash`, `scan` and
//! `matrix`, and `testdata/expected/mixed.jsonl`: decoding corner cases (nulls, escapes, invalid
//! UTF-8, lone surrogates, numbers as quantities, out-of-range integers, several errors in one
//! container) whose error messages are output too. `testdata/expected/repeated/` holds repeated
//! keys, one case a file: JSON refuses them (Go would merge them), YAML keeps the last value.
//!
//! When an output is *meant* to change, rerun with `KUBEHASH_BLESS=1` and say why in the commit.

mod corpus;

use std::fmt::Write as _;
use std::process::Command;

const EXPECTED: &str = "testdata/expected/outputs.txt";

const GOLDEN: &str = "testdata/golden/public.jsonl";
const MIXED: &str = "testdata/expected/mixed.jsonl";
const PODS: &str = "testdata/cluster/pods.json";
const NODES: &str = "testdata/cluster/nodes.json";
/// The golden containers as 1,200 running pods (written by the test, see [`corpus::podlist`]).
const GOLDEN_PODS: &str = "target/same-output/golden-pods.json";

fn commands() -> Vec<Vec<&'static str>> {
    let mut out: Vec<Vec<&str>> = Vec::new();
    for input in [GOLDEN, MIXED, PODS] {
        for format in ["table", "wide", "json", "yaml", "jsonl"] {
            out.push(vec!["hash", "-i", input, "-o", format]);
        }
        for versions in [
            "1.8",
            "1.15",
            "1.16",
            "1.27",
            "1.30",
            "1.31",
            "1.37",
            "1.12..1.33",
        ] {
            out.push(vec![
                "hash",
                "-i",
                input,
                "--versions",
                versions,
                "-o",
                "jsonl",
            ]);
        }
        for version in ["1.8", "1.15", "1.16", "1.30", "1.31", "1.37"] {
            out.push(vec!["hash", "-i", input, "--explain", version]);
        }
    }
    for format in ["table", "wide", "json", "yaml", "jsonl"] {
        out.push(vec![
            "scan", "--to", "1.31", "-i", PODS, "--nodes", NODES, "-o", format,
        ]);
        out.push(vec!["matrix", "-i", PODS, "-o", format]);
    }
    for (from, to) in [("1.15", "1.16"), ("1.27", "1.30"), ("1.30", "1.37")] {
        out.push(vec!["scan", "--from", from, "--to", to, "-i", PODS]);
        out.push(vec!["scan", "--from", from, "--to", to, "-i", GOLDEN_PODS]);
        out.push(vec![
            "scan",
            "--from",
            from,
            "--to",
            to,
            "-i",
            GOLDEN_PODS,
            "-o",
            "jsonl",
        ]);
    }
    out.push(vec!["hash", "-i", GOLDEN_PODS, "-o", "jsonl"]);
    out.push(vec![
        "matrix",
        "-i",
        GOLDEN_PODS,
        "--versions",
        "1.14..1.32",
    ]);
    out.push(vec!["matrix", "-i", PODS, "--versions", "1.14..1.18"]);
    for file in REPEATED {
        out.push(vec!["hash", "-i", file, "-o", "jsonl"]);
    }
    out
}

/// Repeated keys, one case a file (a read stops at the first).
const REPEATED: [&str; 6] = [
    "testdata/expected/repeated/scalar.jsonl",
    "testdata/expected/repeated/list.jsonl",
    "testdata/expected/repeated/map-key.jsonl",
    "testdata/expected/repeated/object.jsonl",
    "testdata/expected/repeated/list-items.json",
    "testdata/expected/repeated/last-wins.yaml",
];

/// FNV-1a, 64 bit.
fn digest(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

fn record(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_kubehash"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("NO_COLOR", "1")
        .output()
        .expect("run kubehash");
    format!(
        "{} out={}:{:016x} err={}:{:016x} | {}",
        out.status.code().unwrap_or(-1),
        out.stdout.len(),
        digest(&out.stdout),
        out.stderr.len(),
        digest(&out.stderr),
        args.join(" ")
    )
}

#[test]
fn every_command_prints_what_it_printed_before_the_performance_work() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    std::fs::create_dir_all(root.join("target/same-output")).unwrap();
    let pods = corpus::podlist(&corpus::golden_containers(), 1200);
    std::fs::write(root.join(GOLDEN_PODS), pods).unwrap();
    let mut got = String::new();
    for args in commands() {
        writeln!(got, "{}", record(&args)).unwrap();
    }
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(EXPECTED);
    if std::env::var_os("KUBEHASH_BLESS").is_some() {
        std::fs::write(&path, &got).unwrap();
        return;
    }
    let want = std::fs::read_to_string(&path).expect("testdata/expected/outputs.txt");
    let mut wrong = Vec::new();
    for (g, w) in got.lines().zip(want.lines()) {
        if g != w {
            wrong.push(format!("  was: {w}\n  now: {g}"));
        }
    }
    assert_eq!(
        got.lines().count(),
        want.lines().count(),
        "the command list changed; bless it deliberately"
    );
    assert!(
        wrong.is_empty(),
        "{} commands print something else now:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
}
