//! Writes a large synthetic cluster dump for scale tests and benchmarks: a `kubectl get pods -A -o
//! json`-shaped List of N pods made from the bundled example cluster's pods (renamed, spread over
//! nodes on mixed kubelet versions), and optionally the matching node list.
//!
//! ```sh
//! cargo run --release --example gen_cluster -- --pods 100000 --nodes-out /tmp/nodes.json > /tmp/pods.json
//! ```
//! The output is streamed, so any size can be written in constant memory.

use std::io::{self, BufWriter, Write};

use serde_json::{json, Value};

fn main() -> anyhow::Result<()> {
    let mut pods: u64 = 100_000;
    let mut nodes: u64 = 1_000;
    let mut nodes_out: Option<String> = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--pods" => pods = args.next().unwrap_or_default().parse()?,
            "--nodes" => nodes = args.next().unwrap_or_default().parse()?,
            "--nodes-out" => nodes_out = args.next(),
            "-h" | "--help" => {
                println!("gen_cluster [--pods N] [--nodes N] [--nodes-out FILE] > pods.json\n\nWrites a PodList of N pods (default 100000) spread over N nodes (default 1000),\nmade from the bundled example's pods, and with --nodes-out their NodeList.");
                return Ok(());
            }
            other => {
                anyhow::bail!("unknown argument {other}; use --pods N --nodes N --nodes-out FILE")
            }
        }
    }
    let nodes = nodes.max(1);
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/testdata/cluster/pods.json");
    let list: Value = serde_json::from_str(&std::fs::read_to_string(example)?)?;
    let templates = list["items"].as_array().cloned().unwrap_or_default();
    anyhow::ensure!(!templates.is_empty(), "no template pods in {example}");
    let versions = ["v1.27.8", "v1.28.9", "v1.29.4", "v1.30.2"];

    if let Some(path) = nodes_out {
        let items: Vec<Value> = (0..nodes)
            .map(|n| {
                json!({"apiVersion":"v1","kind":"Node","metadata":{"name":format!("node-{n:05}")},
                       "status":{"nodeInfo":{"kubeletVersion":versions[(n as usize) % versions.len()]}}})
            })
            .collect();
        std::fs::write(
            &path,
            serde_json::to_vec(&json!({"apiVersion":"v1","kind":"List","items":items}))?,
        )?;
    }

    let mut out = BufWriter::with_capacity(1 << 20, io::stdout().lock());
    out.write_all(
        br#"{"apiVersion":"v1","kind":"List","metadata":{"resourceVersion":""},"items":["#,
    )?;
    for i in 0..pods {
        let mut p = templates[(i as usize) % templates.len()].clone();
        let base = p["metadata"]["name"].as_str().unwrap_or("pod").to_string();
        p["metadata"]["name"] = json!(format!("{base}-{i}"));
        p["metadata"]["uid"] = json!(format!("00000000-0000-4000-8000-{i:012}"));
        p["spec"]["nodeName"] = json!(format!("node-{:05}", i % nodes));
        if i > 0 {
            out.write_all(b",")?;
        }
        serde_json::to_writer(&mut out, &p)?;
    }
    out.write_all(b"]}\n")?;
    out.flush()?;
    Ok(())
}
