//! Larger inputs made from the golden corpus, for the output-identity test and the scaling
//! benches (`benches/scale.rs` includes this file): the same containers, cycled, under unique
//! names, as hash records or as running pods spread over four nodes.

use serde_json::{json, Value};

/// The golden corpus's containers, in file order.
pub fn golden_containers() -> Vec<Value> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/testdata/golden/public.jsonl");
    let text = std::fs::read_to_string(path).expect("golden corpus");
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let mut v: Value = serde_json::from_str(l).expect("golden line");
            v["container"].take()
        })
        .collect()
}

#[allow(dead_code)] // used by benches/scale.rs, not by every test that includes this file
/// `n` hash records (`{"id":…,"container":…}`), one per line.
pub fn records_jsonl(containers: &[Value], n: usize) -> Vec<u8> {
    let mut out = Vec::new();
    for i in 0..n {
        let c = &containers[i % containers.len()];
        serde_json::to_writer(&mut out, &json!({"id": format!("c{i}"), "container": c}))
            .expect("write");
        out.push(b'\n');
    }
    out
}

/// `n` running pods of one container each, on nodes `node-0` … `node-3`, as one PodList.
pub fn podlist(containers: &[Value], n: usize) -> Vec<u8> {
    let mut out = br#"{"apiVersion":"v1","kind":"PodList","metadata":{},"items":["#.to_vec();
    for i in 0..n {
        if i > 0 {
            out.push(b',');
        }
        serde_json::to_writer(&mut out, &pod(&containers[i % containers.len()], i)).expect("write");
    }
    out.extend_from_slice(b"]}\n");
    out
}

/// `n` files of one pod each (the pods of [`podlist`]), written into `dir`.
#[allow(dead_code)] // used by benches/scale.rs, not by every test that includes this file
pub fn pod_files(containers: &[Value], n: usize, dir: &std::path::Path) {
    for i in 0..n {
        let pod = pod(&containers[i % containers.len()], i);
        let text = serde_json::to_vec(&pod).expect("write");
        std::fs::write(dir.join(format!("pod-{i:06}.json")), text).expect("pod file");
    }
}

fn pod(container: &Value, i: usize) -> Value {
    let name = container["name"].as_str().unwrap_or("c");
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": format!("pod-{i}"),
            "namespace": format!("ns-{}", i % 7),
            "uid": format!("00000000-0000-0000-0000-{i:012}"),
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                "name": format!("rs-{}", i % 13), "uid": "u", "controller": true}],
        },
        "spec": {"nodeName": format!("node-{}", i % 4), "containers": [container]},
        "status": {
            "phase": "Running",
            "containerStatuses": [{
                "name": name,
                "ready": true,
                "restartCount": 0,
                "image": container["image"],
                "containerID": format!("containerd://{i:064x}"),
                "state": {"running": {"startedAt": "2026-11-01T00:00:00Z"}},
            }],
        },
    })
}
