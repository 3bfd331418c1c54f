//! The v1 defaults a kubelet applies to a static pod read from a manifest, as far as a container's
//! hash sees them: the file source decodes the manifest through the defaulting v1 scheme
//! (`pkg/kubelet/config/common.go` `tryDecodeSinglePod`), which runs
//! `pkg/apis/core/v1/defaults.go`. A mirror pod in the API server carries the same defaults; this
//! is for when no mirror pod is reachable.
//!
//! A default missed here can only make the old kubelet's hash of the spec differ from the stored
//! one, which makes the container `will-restart`, never a rewrite: the proof rule checks the stored
//! hash against the spec built here.

use serde_json::{Map, Value};

/// Applies the container defaults to every init and regular container of `pod`, and
/// `SetDefaults_Pod`'s `defaultHostNetworkPorts`: in a pod on the node's network, a port
/// without a `hostPort` gets its `containerPort`.
pub fn default_pod(pod: &mut Value) {
    let host_network = pod.pointer("/spec/hostNetwork") == Some(&Value::Bool(true));
    for list in ["initContainers", "containers"] {
        if let Some(Value::Array(cs)) = pod.pointer_mut(&format!("/spec/{list}")) {
            for c in cs.iter_mut() {
                default_container(c);
                if host_network {
                    for port in objects(c.get_mut("ports")) {
                        match port.get("containerPort") {
                            Some(n @ Value::Number(_)) if unset(port.get("hostPort")) => {
                                let n = n.clone();
                                port.insert("hostPort".into(), n);
                            }
                            _ => {}
                        }
                    }
                }
            }
        }
    }
}

/// `SetDefaults_Container`, `SetDefaults_ContainerPort`, `SetDefaults_Probe`,
/// `SetDefaults_HTTPGetAction`, `SetDefaults_ObjectFieldSelector`, and the requests-from-limits
/// rule of `SetDefaults_Pod`.
pub fn default_container(c: &mut Value) {
    let Some(c) = c.as_object_mut() else { return };
    if unset(c.get("imagePullPolicy")) {
        let image = c.get("image").and_then(Value::as_str).unwrap_or("");
        let policy = if image_tag(image) == "latest" {
            "Always"
        } else {
            "IfNotPresent"
        };
        c.insert("imagePullPolicy".into(), policy.into());
    }
    set_if_unset(c, "terminationMessagePath", "/dev/termination-log");
    set_if_unset(c, "terminationMessagePolicy", "File");
    for port in objects(c.get_mut("ports")) {
        set_if_unset(port, "protocol", "TCP");
    }
    for probe in ["livenessProbe", "readinessProbe", "startupProbe"] {
        if let Some(Value::Object(p)) = c.get_mut(probe) {
            for (k, v) in [
                ("timeoutSeconds", 1),
                ("periodSeconds", 10),
                ("successThreshold", 1),
                ("failureThreshold", 3),
            ] {
                if unset(p.get(k)) {
                    p.insert(k.into(), v.into());
                }
            }
            default_http_get(p.get_mut("httpGet"));
        }
    }
    if let Some(Value::Object(l)) = c.get_mut("lifecycle") {
        for hook in ["postStart", "preStop"] {
            if let Some(Value::Object(h)) = l.get_mut(hook) {
                default_http_get(h.get_mut("httpGet"));
            }
        }
    }
    for env in objects(c.get_mut("env")) {
        if let Some(Value::Object(f)) = env.get_mut("valueFrom").and_then(|v| v.get_mut("fieldRef"))
        {
            set_if_unset(f, "apiVersion", "v1");
        }
    }
    if let Some(Value::Object(r)) = c.get_mut("resources") {
        if let Some(Value::Object(limits)) = r.get("limits").cloned() {
            if !limits.is_empty() {
                let requests = r
                    .entry("requests")
                    .or_insert_with(|| Value::Object(Map::new()));
                if requests.is_null() {
                    *requests = Value::Object(Map::new());
                }
                if let Some(req) = requests.as_object_mut() {
                    for (k, v) in limits {
                        req.entry(k).or_insert(v);
                    }
                }
            }
        }
    }
}

fn default_http_get(h: Option<&mut Value>) {
    if let Some(Value::Object(h)) = h {
        set_if_unset(h, "path", "/");
        set_if_unset(h, "scheme", "HTTP");
    }
}

/// Absent, null, `""` or `0`: what Go sees as the zero value.
fn unset(v: Option<&Value>) -> bool {
    match v {
        None | Some(Value::Null) => true,
        Some(Value::String(s)) => s.is_empty(),
        Some(Value::Number(n)) => n.as_f64() == Some(0.0),
        Some(_) => false,
    }
}

fn set_if_unset(m: &mut Map<String, Value>, k: &str, v: &str) {
    if unset(m.get(k)) {
        m.insert(k.into(), v.into());
    }
}

fn objects(v: Option<&mut Value>) -> impl Iterator<Item = &mut Map<String, Value>> {
    v.and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
        .filter_map(Value::as_object_mut)
}

/// The tag `parsers.ParseImageName` finds: the text after the last `:` of the last path part,
/// `latest` when there is neither a tag nor a digest, and empty with a digest alone.
fn image_tag(image: &str) -> &str {
    let (name, digest) = match image.split_once('@') {
        Some((n, _)) => (n, true),
        None => (image, false),
    };
    let last = name.rsplit('/').next().unwrap_or(name);
    match last.rsplit_once(':') {
        Some((_, tag)) => tag,
        None if digest => "",
        None => "latest",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn image_pull_policy_follows_the_tag() {
        let policy = |image: &str| {
            let mut c = json!({"name": "c", "image": image});
            default_container(&mut c);
            c["imagePullPolicy"].as_str().unwrap().to_string()
        };
        assert_eq!(policy("nginx"), "Always");
        assert_eq!(policy("nginx:latest"), "Always");
        assert_eq!(policy("registry:5000/nginx"), "Always");
        assert_eq!(policy("registry:5000/nginx:1.25"), "IfNotPresent");
        assert_eq!(policy("nginx@sha256:abc"), "IfNotPresent");
        let mut set = json!({"name": "c", "image": "nginx", "imagePullPolicy": "Never"});
        default_container(&mut set);
        assert_eq!(set["imagePullPolicy"], "Never");
    }

    /// A kubeadm-style etcd manifest's container, defaulted, hashes as the API server's mirror
    /// pod holds it, for every kubelet: a mirrored static pod's container is proved only where the
    /// two agree (`analysis::plan`), so a default missed here would leave it alone.
    #[test]
    fn a_kubeadm_manifest_hashes_as_its_mirror_pod() {
        use crate::kubelet::hash::hash_container;
        use crate::kubelet::version::KubeletVersion;
        let mut manifest = json!({
            "command": ["etcd", "--data-dir=/var/lib/etcd"],
            "image": "registry.k8s.io/etcd:3.5.12-0",
            "imagePullPolicy": "IfNotPresent",
            "livenessProbe": {"failureThreshold": 8, "initialDelaySeconds": 10,
                "periodSeconds": 10, "timeoutSeconds": 15,
                "httpGet": {"host": "127.0.0.1", "path": "/health", "port": 2381, "scheme": "HTTP"}},
            "name": "etcd",
            "resources": {"requests": {"cpu": "100m", "memory": "100Mi"}},
            "volumeMounts": [{"mountPath": "/var/lib/etcd", "name": "etcd-data"}]
        });
        let mirror = json!({
            "name": "etcd", "image": "registry.k8s.io/etcd:3.5.12-0",
            "command": ["etcd", "--data-dir=/var/lib/etcd"],
            "resources": {"requests": {"cpu": "100m", "memory": "100Mi"}},
            "volumeMounts": [{"name": "etcd-data", "mountPath": "/var/lib/etcd"}],
            "livenessProbe": {"httpGet": {"host": "127.0.0.1", "path": "/health", "port": 2381,
                "scheme": "HTTP"}, "initialDelaySeconds": 10, "timeoutSeconds": 15,
                "periodSeconds": 10, "successThreshold": 1, "failureThreshold": 8},
            "terminationMessagePath": "/dev/termination-log",
            "terminationMessagePolicy": "File", "imagePullPolicy": "IfNotPresent"
        });
        default_container(&mut manifest);
        let all: Vec<KubeletVersion> = KubeletVersion::all().collect();
        let (m, a) = (
            hash_container(&manifest, &all, "manifest").unwrap(),
            hash_container(&mirror, &all, "mirror").unwrap(),
        );
        for v in all {
            assert_eq!(m.get(v), a.get(v), "{v}");
            assert_eq!(
                m.get_without_resources(v),
                a.get_without_resources(v),
                "{v}"
            );
        }
    }

    /// A static pod on the node's network with a port that names no hostPort: the kubelet
    /// decodes it with `hostPort` set to the `containerPort`, and hashes that, as the mirror pod
    /// shows it. Ephemeral containers, and pods on their own network, are left as they are.
    #[test]
    fn a_host_network_pods_ports_get_their_container_port_as_host_port() {
        use crate::kubelet::hash::hash_container;
        use crate::kubelet::version::KubeletVersion;
        let pod = |host_network: bool| {
            json!({"spec": {"hostNetwork": host_network,
                "initContainers": [{"name": "i", "image": "i:1", "ports": [{"containerPort": 9000}]}],
                "containers": [{"name": "c", "image": "i:1", "ports": [
                    {"containerPort": 2379, "name": "client"},
                    {"containerPort": 2380, "hostPort": 12380},
                    {"containerPort": 2381, "hostPort": 0}]}],
                "ephemeralContainers": [{"name": "e", "image": "i:1", "ports": [{"containerPort": 1}]}]}})
        };
        let mut on_node = pod(true);
        default_pod(&mut on_node);
        let c = &on_node["spec"]["containers"][0];
        let host_ports: Vec<&Value> = (0..3).map(|i| &c["ports"][i]["hostPort"]).collect();
        assert_eq!(host_ports, [&json!(2379), &json!(12380), &json!(2381)]);
        assert_eq!(
            on_node["spec"]["initContainers"][0]["ports"][0]["hostPort"],
            9000
        );
        assert!(on_node["spec"]["ephemeralContainers"][0]["ports"][0]
            .get("hostPort")
            .is_none());
        let mut own = pod(false);
        default_pod(&mut own);
        assert!(own["spec"]["containers"][0]["ports"][0]
            .get("hostPort")
            .is_none());

        // As the API server shows the mirror pod: every version hashes the two alike.
        let mirror = json!({"name": "c", "image": "i:1", "ports": [
                {"name": "client", "hostPort": 2379, "containerPort": 2379, "protocol": "TCP"},
                {"hostPort": 12380, "containerPort": 2380, "protocol": "TCP"},
                {"hostPort": 2381, "containerPort": 2381, "protocol": "TCP"}],
            "terminationMessagePath": "/dev/termination-log",
            "terminationMessagePolicy": "File", "imagePullPolicy": "IfNotPresent"});
        let all: Vec<KubeletVersion> = KubeletVersion::all().collect();
        let (m, a) = (
            hash_container(c, &all, "manifest").unwrap(),
            hash_container(&mirror, &all, "mirror").unwrap(),
        );
        for v in all {
            assert_eq!(m.get(v), a.get(v), "{v}");
        }
    }

    #[test]
    fn the_defaults_the_api_server_would_apply() {
        let mut pod = json!({"spec": {"containers": [{
            "name": "c", "image": "i:1",
            "ports": [{"containerPort": 80}],
            "livenessProbe": {"httpGet": {"port": 80}, "periodSeconds": 5},
            "lifecycle": {"preStop": {"httpGet": {"port": 80, "path": "/stop"}}},
            "env": [{"name": "N", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
            "resources": {"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "500m"}}
        }]}});
        default_pod(&mut pod);
        let c = &pod["spec"]["containers"][0];
        assert_eq!(c["terminationMessagePath"], "/dev/termination-log");
        assert_eq!(c["terminationMessagePolicy"], "File");
        assert_eq!(c["ports"][0]["protocol"], "TCP");
        assert_eq!(
            c["livenessProbe"],
            json!({"httpGet": {"port": 80, "path": "/", "scheme": "HTTP"}, "periodSeconds": 5,
                   "timeoutSeconds": 1, "successThreshold": 1, "failureThreshold": 3})
        );
        assert_eq!(c["lifecycle"]["preStop"]["httpGet"]["path"], "/stop");
        assert_eq!(c["lifecycle"]["preStop"]["httpGet"]["scheme"], "HTTP");
        assert_eq!(c["env"][0]["valueFrom"]["fieldRef"]["apiVersion"], "v1");
        assert_eq!(
            c["resources"]["requests"],
            json!({"cpu": "500m", "memory": "1Gi"})
        );
    }
}
