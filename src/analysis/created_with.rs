//! Whether what the runtime recorded a container was created with contradicts its spec. Facts
//! the runtime recorded when the kubelet created the container overrule the hashes, never the
//! other way round: a stored (or journaled) hash that still proves a spec the record contradicts
//! is a collision, crafted or not, or a forged original, and is never acted on.

use serde_json::Value;

use crate::runtime::cri::Cri;
use crate::runtime::record::{CreatedWith, LinuxSecurity, Profile};

/// Why the runtime says container `id` was not created from `spec` in a pod spec `pod` (where
/// known), where it says what the container was created with (containerd's verbose
/// `ContainerStatus`); `None` where it agrees or does not say. What the shim asks before acting
/// on a saved proof ([`contradiction_in_pod`]).
pub async fn the_runtime_contradicts(
    cri: &mut Cri,
    id: &str,
    spec: &Value,
    pod: Option<&Value>,
) -> Option<String> {
    contradiction_in_pod(spec, pod, &cri.created_with(id).await?)
}

/// Why the runtime's record contradicts the spec, if it does: the image the kubelet created the
/// container for (`ImageSpec.user_specified_image`, which kuberuntime_container.go
/// `generateContainerConfig` sets to `container.Image` where kubelet and runtime know the field)
/// is not the image the spec names now. The spec then changed whatever the hashes say.
pub fn another_image(spec: &Value, created_for: &str) -> Option<String> {
    // A spec without an image decodes to Go's "" (a non-string one does not decode at all).
    let named = spec.get("image").and_then(Value::as_str).unwrap_or("");
    (named != created_for).then(|| {
        format!("the runtime's record shows the container was created for image {created_for:?} and the spec now names {named:?}")
    })
}

/// Why the container was not created from `spec`, if the record says so: its image where the
/// record has it ([`another_image`]), its environment (`another_env`); and
/// kuberuntime_container.go `generateContainerConfig` copies `workingDir`, `stdin`, `stdinOnce`
/// and `tty` as they are, and `command` and `args` one string for one through
/// `ExpandContainerCommandAndArgs`, whose `$(VAR)` expansion (third_party/forked/golang/expansion
/// `Expand`) leaves a string without `$` as it is; a string with `$` is compared by place alone;
/// `securityContext.privileged`, `readOnlyRootFilesystem`, `allowPrivilegeEscalation`,
/// `capabilities`, and where the container sets them `runAsUser`, `runAsGroup`,
/// `seLinuxOptions`, `seccompProfile` and `appArmorProfile`, where the record has a Linux
/// security context ([`crate::runtime::record::LinuxSecurity`]).
/// A field of a type the kubelet does not decode says nothing here (such a spec does not hash
/// either).
pub fn contradiction(spec: &Value, created: &CreatedWith) -> Option<String> {
    if !created.image.is_empty() {
        if let Some(why) = another_image(spec, &created.image) {
            return Some(why);
        }
    }
    let says = |what: &str, recorded: String, said: String| {
        format!("the runtime's record shows the container was created with {what} {recorded}, and the spec now says {said}")
    };
    for (key, recorded) in [("command", &created.command), ("args", &created.args)] {
        let said = match spec.get(key) {
            None | Some(Value::Null) => &[][..],
            Some(Value::Array(items)) => items.as_slice(),
            Some(_) => continue,
        };
        let differs = said.len() != recorded.len()
            || said.iter().zip(recorded).any(|(s, r)| {
                s.as_str()
                    .is_some_and(|s| !s.contains('$') && s != r.as_str())
            });
        if differs {
            return Some(says(key, json(recorded), json(said)));
        }
    }
    if let Some(why) = another_env(spec, &created.envs) {
        return Some(says("env", why.0, why.1));
    }
    match spec.get("workingDir") {
        None | Some(Value::Null) if !created.working_dir.is_empty() => {
            return Some(says(
                "workingDir",
                json(&created.working_dir),
                "none".into(),
            ))
        }
        Some(Value::String(d)) if *d != created.working_dir => {
            return Some(says("workingDir", json(&created.working_dir), json(d)))
        }
        _ => {}
    }
    for (key, recorded) in [
        ("stdin", created.stdin),
        ("stdinOnce", created.stdin_once),
        ("tty", created.tty),
    ] {
        let said = match spec.get(key) {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(_) => continue,
        };
        if said != recorded {
            return Some(says(key, recorded.to_string(), said.to_string()));
        }
    }
    if let Some(linux) = &created.linux {
        return another_security(spec.get("securityContext"), linux);
    }
    None
}

/// [`contradiction`], and then what the pod spec `pod` gives the container where the container
/// sets nothing of its own (securitycontext `DetermineEffectiveSecurityContext`: the pod's
/// `runAsUser`, `runAsGroup` and `seLinuxOptions`), and the PID and IPC namespaces runtimeutil
/// `NamespacesForPod` makes of `hostPID`, `shareProcessNamespace` and `hostIPC`. (The network
/// namespace is the sandbox's, which `PodSandboxChanged` compares: the `sandboxes` check.)
pub fn contradiction_in_pod(
    spec: &Value,
    pod: Option<&Value>,
    created: &CreatedWith,
) -> Option<String> {
    contradiction(spec, created).or_else(|| another_pod_level(spec, pod?, created.linux.as_ref()?))
}

fn another_pod_level(spec: &Value, pod: &Value, linux: &LinuxSecurity) -> Option<String> {
    let says = |key: &str, recorded: String, said: String| {
        format!("the runtime's record shows the container was created with the pod's {key} {recorded}, and the pod now says {said}")
    };
    let own = |k: &str| !spec["securityContext"][k].is_null();
    if let Some((key, recorded, said)) = another_identity(&pod["securityContext"], own, linux) {
        return Some(says(&format!("securityContext.{key}"), recorded, said));
    }
    let [_, pid, ipc] = linux.namespaces?;
    let host = |k: &str| match &pod[k] {
        Value::Null => Some(false),
        Value::Bool(b) => Some(*b),
        _ => None,
    };
    const NODE: i64 = 2;
    const POD: i64 = 0;
    const TARGET: i64 = 3;
    for (key, mode) in [("hostPID", pid), ("hostIPC", ipc)] {
        // An ephemeral container with a target shares that container's PID namespace, whatever
        // the pod says.
        if mode == TARGET {
            continue;
        }
        if let Some(said) = host(key) {
            if said != (mode == NODE) {
                return Some(says(key, (mode == NODE).to_string(), said.to_string()));
            }
        }
    }
    // A shared PID namespace is the pod's; not shared, the container's (or its target's, for an
    // ephemeral container). Shared but the container's may be kubelet 1.10 – 1.11's gate.
    if host("hostPID") == Some(false) && pid == POD && host("shareProcessNamespace") == Some(false)
    {
        return Some(says("shareProcessNamespace", "true".into(), "false".into()));
    }
    None
}

/// `seLinuxOptions` as user, role, type and level (unset ones ""), where it is an object of
/// strings.
fn selinux_of(options: &Value) -> Option<[String; 4]> {
    let options = options.as_object()?;
    let part = |k: &str| match options.get(k) {
        None | Some(Value::Null) => Some(String::new()),
        Some(Value::String(s)) => Some(s.clone()),
        Some(_) => None,
    };
    Some([part("user")?, part("role")?, part("type")?, part("level")?])
}

/// Where the user, group or SELinux options a `securityContext` gives (a container's, or a pod's
/// for what `taken` says the container sets itself) are not what the record holds: (the field,
/// what the record holds, what `context` says). The user and the SELinux options (which replace
/// the pod's whole) are always copied; the group from kubelet 1.14 (behind the RunAsGroup gate
/// before), so it is compared where the record has one.
fn another_identity(
    context: &Value,
    taken: impl Fn(&str) -> bool,
    linux: &LinuxSecurity,
) -> Option<(&'static str, String, String)> {
    let given = |k: &str| Some(&context[k]).filter(|v| !v.is_null() && !taken(k));
    if let Some(said) = given("runAsUser").and_then(Value::as_i64) {
        if linux.run_as_user != Some(said) {
            let recorded = linux.run_as_user.map_or("none".into(), |u| u.to_string());
            return Some(("runAsUser", recorded, said.to_string()));
        }
    }
    if let (Some(said), Some(recorded)) = (
        given("runAsGroup").and_then(Value::as_i64),
        linux.run_as_group,
    ) {
        if said != recorded {
            return Some(("runAsGroup", recorded.to_string(), said.to_string()));
        }
    }
    if let Some(said) = given("seLinuxOptions").and_then(selinux_of) {
        let recorded = linux.selinux.clone().unwrap_or_default();
        if recorded != said {
            let label = |parts: &[String; 4]| json(&parts.join(":"));
            return Some(("seLinuxOptions", label(&recorded), label(&said)));
        }
    }
    None
}

/// Where the Linux security context the container was created with is not what the spec's
/// `securityContext` says ([`LinuxSecurity`]).
fn another_security(context: Option<&Value>, linux: &LinuxSecurity) -> Option<String> {
    let field = |key: &str| context.and_then(|c| c.get(key)).filter(|v| !v.is_null());
    let says = |key: &str, recorded: String, said: String| {
        format!("the runtime's record shows the container was created with securityContext.{key} {recorded}, and the spec now says {said}")
    };
    for (key, recorded) in [
        ("privileged", linux.privileged),
        ("readOnlyRootFilesystem", linux.readonly_rootfs),
    ] {
        let said = match field(key) {
            None => false,
            Some(Value::Bool(b)) => *b,
            Some(_) => continue,
        };
        if said != recorded {
            return Some(says(key, recorded.to_string(), said.to_string()));
        }
    }
    // no_new_privs is set exactly where allowPrivilegeEscalation is false.
    let said = match field("allowPrivilegeEscalation") {
        None => Some(None),
        Some(Value::Bool(b)) => Some(Some(*b)),
        Some(_) => None,
    };
    if let Some(said) = said {
        if (said == Some(false)) != linux.no_new_privs {
            let spelt = |a: Option<bool>| a.map_or("unset".to_string(), |a| a.to_string());
            let recorded = if linux.no_new_privs {
                "false"
            } else {
                "unset or true"
            };
            return Some(says(
                "allowPrivilegeEscalation",
                format!("{recorded} (no_new_privs {})", linux.no_new_privs),
                spelt(said),
            ));
        }
    }
    let capabilities = field("capabilities");
    for (key, recorded) in [
        ("add", &linux.add_capabilities),
        ("drop", &linux.drop_capabilities),
    ] {
        let said = match capabilities.and_then(|c| c.get(key)) {
            None | Some(Value::Null) => &[][..],
            Some(Value::Array(items)) => items.as_slice(),
            Some(_) => continue,
        };
        if said.iter().any(|s| !s.is_string()) {
            continue;
        }
        if said.len() != recorded.len() || said.iter().zip(recorded).any(|(s, r)| s != r.as_str()) {
            return Some(says(
                &format!("capabilities.{key}"),
                json(recorded),
                json(said),
            ));
        }
    }
    // The container's own user, group and SELinux options win over the pod's (and the image's
    // user).
    let context = context.unwrap_or(&Value::Null);
    if let Some((key, recorded, said)) = another_identity(context, |_| false, linux) {
        return Some(says(key, recorded, said));
    }
    for (key, recorded) in [
        ("seccompProfile", &linux.seccomp),
        ("appArmorProfile", &linux.apparmor),
    ] {
        let (Some(said), Some(recorded)) = (field(key).and_then(profile_of), recorded) else {
            continue;
        };
        let differs = match (&said, recorded) {
            // A seccomp profile's reference is its path under the kubelet's root.
            (Profile::Localhost(name), Profile::Localhost(path)) if key == "seccompProfile" => {
                seccomp_ref(name).is_some_and(|end| !path.ends_with(&end))
            }
            (said, recorded) => said != recorded,
        };
        if differs {
            return Some(says(key, recorded.to_string(), said.to_string()));
        }
    }
    None
}

/// What a container's `seccompProfile` or `appArmorProfile` asks for (`localhostProfile` as
/// written); `None` for a type the kubelet refuses to create a container with.
fn profile_of(profile: &Value) -> Option<Profile> {
    match profile.get("type")?.as_str()? {
        "RuntimeDefault" => Some(Profile::RuntimeDefault),
        "Unconfined" => Some(Profile::Unconfined),
        "Localhost" => match profile.get("localhostProfile")?.as_str()? {
            "" => None,
            name => Some(Profile::Localhost(name.into())),
        },
        _ => None,
    }
}

/// The end of the path helpers.go `fieldSeccompProfile` makes of `localhostProfile`:
/// `filepath.Join(seccompProfileRoot, name)` under a root only the kubelet knows; `None` where
/// cleaning the name would climb out of it or keep nothing (`.` or `..`).
fn seccomp_ref(name: &str) -> Option<String> {
    let parts: Vec<&str> = name.split('/').filter(|p| !p.is_empty()).collect();
    let clean = !parts.is_empty() && parts.iter().all(|p| *p != "." && *p != "..");
    clean.then(|| format!("/{}", parts.join("/")))
}

/// Where the environment the container was created with is not what the spec says: (what the
/// record has, what the spec says). kubelet_pods.go `makeEnvironmentVariables` gives each name
/// once, the last `env` entry of that name winning over `envFrom` and service links; a value
/// without `$` as it is, an empty one without `valueFrom` as "". Those are compared; a value
/// with `$(VAR)`, or from `valueFrom`, depends on what only the node knows, and a name the spec
/// does not set may come from `envFrom` or a service.
fn another_env(spec: &Value, envs: &[(String, String)]) -> Option<(String, String)> {
    let Some(Value::Array(entries)) = spec.get("env") else {
        return None;
    };
    for (i, e) in entries.iter().enumerate() {
        let Some(name) = e.get("name").and_then(Value::as_str) else {
            continue;
        };
        let later = entries[i + 1..]
            .iter()
            .any(|l| l.get("name").and_then(Value::as_str) == Some(name));
        let value = match e.get("value") {
            None | Some(Value::Null) => "",
            Some(Value::String(v)) => v.as_str(),
            Some(_) => continue,
        };
        let from_elsewhere = e.get("valueFrom").is_some_and(|f| !f.is_null());
        if later || value.contains('$') || (value.is_empty() && from_elsewhere) {
            continue;
        }
        // A device plugin's variables come first in the list (GenerateRunContainerOptions), so
        // a name may be there twice: the spec's value must be one of them.
        let mut recorded = envs.iter().filter(|(k, _)| k == name).map(|(_, v)| v);
        if !recorded.clone().any(|v| v == value) {
            let was = match recorded.next_back() {
                Some(v) => json(&format!("{name}={v}")),
                None => format!("no {name}"),
            };
            return Some((was, json(&format!("{name}={value}"))));
        }
    }
    None
}

fn json<T: serde::Serialize + ?Sized>(v: &T) -> String {
    serde_json::to_string(v).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn created(command: &[&str], args: &[&str]) -> CreatedWith {
        CreatedWith {
            command: command.iter().map(|s| s.to_string()).collect(),
            args: args.iter().map(|s| s.to_string()).collect(),
            ..CreatedWith::default()
        }
    }

    #[test]
    fn a_spec_the_container_was_created_from_is_no_contradiction() {
        let spec = json!({"name":"a","image":"i","command":["sh","-c"],"args":["--x=1",""]});
        assert_eq!(
            contradiction(&spec, &created(&["sh", "-c"], &["--x=1", ""])),
            None
        );
        // Absent, null and empty lists are all none (Go's JSON omits an empty one).
        for spec in [
            json!({"name":"a"}),
            json!({"name":"a","command":null,"args":[]}),
        ] {
            assert_eq!(contradiction(&spec, &CreatedWith::default()), None);
        }
        // $(VAR) is expanded from the environment, and $$ is $: compared by place alone.
        let spec = json!({"args":["--home=$(HOME)","$$1","--v"]});
        assert_eq!(
            contradiction(&spec, &created(&[], &["--home=/root", "$1", "--v"])),
            None
        );
    }

    #[test]
    fn every_field_copied_from_the_spec_is_compared() {
        let base = created(&["app"], &["--v1"]);
        for (spec, says) in [
            (
                json!({"command":["app"],"args":["--v2"]}),
                "args [\"--v1\"], and the spec now says [\"--v2\"]",
            ),
            (
                json!({"command":["app"],"args":["--v1","--x"]}),
                "args [\"--v1\"]",
            ),
            (
                json!({"args":["--v1"]}),
                "command [\"app\"], and the spec now says []",
            ),
            (json!({"command":["other"],"args":["--v1"]}), "command"),
            // A string with `$` still has its place.
            (json!({"command":["app"],"args":["$(A)","--v1"]}), "args"),
            (
                json!({"command":["app"],"args":["--v1"],"workingDir":"/srv"}),
                "workingDir \"\", and the spec now says \"/srv\"",
            ),
            (
                json!({"command":["app"],"args":["--v1"],"tty":true}),
                "tty false, and the spec now says true",
            ),
            (
                json!({"command":["app"],"args":["--v1"],"stdin":true}),
                "stdin false",
            ),
            (
                json!({"command":["app"],"args":["--v1"],"stdinOnce":true}),
                "stdinOnce false",
            ),
        ] {
            let why = contradiction(&spec, &base).unwrap_or_else(|| panic!("{spec}"));
            assert!(why.contains(says), "{spec}: {why}");
        }
        let with_env = |envs: &[(&str, &str)]| CreatedWith {
            envs: envs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ..CreatedWith::default()
        };
        // The kubelet's environment: the last entry of a name wins; names from envFrom and
        // services beside it; $(VAR) expanded; valueFrom resolved.
        let made = with_env(&[
            ("MODE", "from a device plugin"),
            ("MODE", "new"),
            ("EMPTY", ""),
            ("HOME_DIR", "/root/x"),
            ("TOKEN", "s3cret"),
            ("FROM_CONFIGMAP", "1"),
            ("KUBERNETES_SERVICE_HOST", "10.0.0.1"),
        ]);
        let spec = json!({"env":[
            {"name":"MODE","value":"old"},
            {"name":"MODE","value":"new"},
            {"name":"EMPTY"},
            {"name":"HOME_DIR","value":"$(HOME)/x"},
            {"name":"TOKEN","valueFrom":{"secretKeyRef":{"name":"s","key":"t"}}}
        ]});
        assert_eq!(contradiction(&spec, &made), None);
        for (env, says) in [
            (
                json!([{"name":"MODE","value":"newer"}]),
                "env \"MODE=new\", and the spec now says \"MODE=newer\"",
            ),
            (
                json!([{"name":"EMPTY","value":"x"}]),
                "env \"EMPTY=\", and the spec now says \"EMPTY=x\"",
            ),
            (
                json!([{"name":"ADDED","value":"1"}]),
                "env no ADDED, and the spec now says \"ADDED=1\"",
            ),
            (
                json!([{"name":"MODE","value":"new"},{"name":"MODE","value":"old"}]),
                "MODE=old",
            ),
        ] {
            let why = contradiction(&json!({"env": env}), &made).unwrap_or_else(|| panic!("{env}"));
            assert!(why.contains(says), "{env}: {why}");
        }
        let for_image = CreatedWith {
            image: "registry/app:1".into(),
            ..CreatedWith::default()
        };
        assert_eq!(
            contradiction(&json!({"image":"registry/app:1"}), &for_image),
            None
        );
        assert!(
            contradiction(&json!({"image":"registry/app:2"}), &for_image)
                .is_some_and(|w| w.contains("created for image \"registry/app:1\""))
        );
        let in_srv = CreatedWith {
            working_dir: "/srv".into(),
            tty: true,
            ..CreatedWith::default()
        };
        assert_eq!(
            contradiction(&json!({"workingDir":"/srv","tty":true}), &in_srv),
            None
        );
        assert!(contradiction(&json!({"tty":true}), &in_srv)
            .is_some_and(|w| w.contains("workingDir \"/srv\", and the spec now says none")));
    }

    #[test]
    fn the_containers_own_security_context_is_compared_where_the_record_has_one() {
        let linux = |privileged, readonly_rootfs| CreatedWith {
            linux: Some(LinuxSecurity {
                privileged,
                readonly_rootfs,
                ..LinuxSecurity::default()
            }),
            ..CreatedWith::default()
        };
        // Unset and false are alike; the pod's securityContext has neither field.
        for spec in [
            json!({}),
            json!({"securityContext":null}),
            json!({"securityContext":{"privileged":false,"procMount":"Default"}}),
        ] {
            assert_eq!(contradiction(&spec, &linux(false, false)), None, "{spec}");
        }
        let both = json!({"securityContext":{"privileged":true,"readOnlyRootFilesystem":true}});
        assert_eq!(contradiction(&both, &linux(true, true)), None);
        for (spec, created, says) in [
            (
                json!({"securityContext":{"privileged":true}}),
                linux(false, false),
                "securityContext.privileged false, and the spec now says true",
            ),
            (
                json!({}),
                linux(true, false),
                "securityContext.privileged true, and the spec now says false",
            ),
            (
                json!({"securityContext":{"readOnlyRootFilesystem":false}}),
                linux(false, true),
                "securityContext.readOnlyRootFilesystem true, and the spec now says false",
            ),
        ] {
            let why = contradiction(&spec, &created).unwrap_or_else(|| panic!("{spec}"));
            assert!(why.contains(says), "{spec}: {why}");
        }
        // A record without a Linux security context (a Windows container) says nothing.
        let privileged = json!({"securityContext":{"privileged":true}});
        assert_eq!(contradiction(&privileged, &CreatedWith::default()), None);

        // no_new_privs exactly where allowPrivilegeEscalation is false; capabilities as listed.
        let made = CreatedWith {
            linux: Some(LinuxSecurity {
                no_new_privs: true,
                add_capabilities: vec!["NET_ADMIN".into()],
                drop_capabilities: vec!["ALL".into()],
                ..LinuxSecurity::default()
            }),
            ..CreatedWith::default()
        };
        let context = |c: Value| json!({ "securityContext": c });
        let same = json!({"allowPrivilegeEscalation":false,"capabilities":{"add":["NET_ADMIN"],"drop":["ALL"]}});
        assert_eq!(contradiction(&context(same), &made), None);
        for (c, says) in [
            (
                json!({"allowPrivilegeEscalation":true,"capabilities":{"add":["NET_ADMIN"],"drop":["ALL"]}}),
                "allowPrivilegeEscalation false (no_new_privs true), and the spec now says true",
            ),
            (
                json!({"capabilities":{"add":["NET_ADMIN"],"drop":["ALL"]}}),
                "allowPrivilegeEscalation false (no_new_privs true), and the spec now says unset",
            ),
            (
                json!({"allowPrivilegeEscalation":false,"capabilities":{"add":["NET_ADMIN","SYS_ADMIN"],"drop":["ALL"]}}),
                "capabilities.add [\"NET_ADMIN\"], and the spec now says [\"NET_ADMIN\",\"SYS_ADMIN\"]",
            ),
            (
                json!({"allowPrivilegeEscalation":false,"capabilities":{"add":["NET_ADMIN"]}}),
                "capabilities.drop [\"ALL\"], and the spec now says []",
            ),
        ] {
            let why = contradiction(&context(c.clone()), &made).unwrap_or_else(|| panic!("{c}"));
            assert!(why.contains(says), "{c}: {why}");
        }
        let unset = CreatedWith {
            linux: Some(LinuxSecurity::default()),
            ..CreatedWith::default()
        };
        for c in [
            json!({}),
            json!({"allowPrivilegeEscalation":true}),
            json!({"capabilities":{"add":[],"drop":null}}),
        ] {
            assert_eq!(contradiction(&context(c.clone()), &unset), None, "{c}");
        }
        assert!(contradiction(&context(json!({"allowPrivilegeEscalation":false})), &unset)
            .is_some_and(|w| w.contains("allowPrivilegeEscalation unset or true (no_new_privs false), and the spec now says false")));
    }

    #[test]
    fn the_containers_own_user_group_selinux_and_profiles_are_compared() {
        let made = |linux: LinuxSecurity| CreatedWith {
            linux: Some(linux),
            ..CreatedWith::default()
        };
        let context = |c: Value| json!({ "securityContext": c });
        let as_made = made(LinuxSecurity {
            run_as_user: Some(1000),
            run_as_group: Some(3000),
            selinux: Some(["".into(), "".into(), "spc_t".into(), "s0".into()]),
            seccomp: Some(Profile::Localhost(
                "/var/lib/kubelet/seccomp/profiles/audit.json".into(),
            )),
            apparmor: Some(Profile::Localhost("k8s-nginx".into())),
            ..LinuxSecurity::default()
        });
        let same = json!({
            "runAsUser": 1000, "runAsGroup": 3000,
            "seLinuxOptions": {"type": "spc_t", "level": "s0", "user": null},
            "seccompProfile": {"type": "Localhost", "localhostProfile": "profiles//audit.json"},
            "appArmorProfile": {"type": "Localhost", "localhostProfile": "k8s-nginx"}
        });
        assert_eq!(contradiction(&context(same), &as_made), None);
        // Unset in the container, each may come from the pod (or the user from the image).
        assert_eq!(contradiction(&context(json!({})), &as_made), None);
        for (c, says) in [
            (
                json!({"runAsUser": 0}),
                "securityContext.runAsUser 1000, and the spec now says 0",
            ),
            (
                json!({"runAsGroup": 0}),
                "securityContext.runAsGroup 3000, and the spec now says 0",
            ),
            (
                json!({"seLinuxOptions": {"type": "spc_t"}}),
                "securityContext.seLinuxOptions \"::spc_t:s0\", and the spec now says \"::spc_t:\"",
            ),
            (
                json!({"seccompProfile": {"type": "RuntimeDefault"}}),
                "securityContext.seccompProfile Localhost \"/var/lib/kubelet/seccomp/profiles/audit.json\", and the spec now says RuntimeDefault",
            ),
            (
                json!({"seccompProfile": {"type": "Localhost", "localhostProfile": "profiles/strict.json"}}),
                "and the spec now says Localhost \"profiles/strict.json\"",
            ),
            (
                json!({"appArmorProfile": {"type": "Unconfined"}}),
                "securityContext.appArmorProfile Localhost \"k8s-nginx\", and the spec now says Unconfined",
            ),
            (
                json!({"appArmorProfile": {"type": "Localhost", "localhostProfile": "nginx"}}),
                "and the spec now says Localhost \"nginx\"",
            ),
        ] {
            let why = contradiction(&context(c.clone()), &as_made).unwrap_or_else(|| panic!("{c}"));
            assert!(why.contains(says), "{c}: {why}");
        }
        // The user is always copied from the container; the rest only where the record holds
        // it: a group before kubelet 1.14 (behind a gate), profiles before the kubelet named
        // them, SELinux options never given (none is all four empty).
        let bare = made(LinuxSecurity::default());
        assert!(contradiction(&context(json!({"runAsUser": 0})), &bare)
            .is_some_and(|w| w.contains("runAsUser none, and the spec now says 0")));
        for c in [
            json!({"runAsGroup": 0}),
            json!({"seccompProfile": {"type": "RuntimeDefault"}}),
            json!({"appArmorProfile": {"type": "RuntimeDefault"}}),
            json!({"seLinuxOptions": {}}),
        ] {
            assert_eq!(contradiction(&context(c.clone()), &bare), None, "{c}");
        }
        assert!(
            contradiction(&context(json!({"seLinuxOptions": {"level": "s0"}})), &bare).is_some_and(
                |w| w.contains("seLinuxOptions \":::\", and the spec now says \":::s0\"")
            )
        );
        // What the kubelet would refuse, or cannot place, says nothing: a type it does not
        // know, Localhost without a name, a name whose path cleaning climbs, a value of
        // another type.
        for c in [
            json!({"seccompProfile": {"type": "Other"}}),
            json!({"seccompProfile": {"type": "Localhost"}}),
            json!({"seccompProfile": {"type": "Localhost", "localhostProfile": "../x.json"}}),
            json!({"seccompProfile": {"type": "Localhost", "localhostProfile": "./audit.json"}}),
            // The root is the kubelet's: `audit.json` under `…/seccomp/profiles` is the same path.
            json!({"seccompProfile": {"type": "Localhost", "localhostProfile": "audit.json"}}),
            json!({"appArmorProfile": {}}),
            json!({"runAsUser": "0", "runAsGroup": 1.5}),
            json!({"seLinuxOptions": {"type": 1}}),
        ] {
            assert_eq!(contradiction(&context(c.clone()), &as_made), None, "{c}");
        }
    }

    #[test]
    fn what_the_pod_sets_for_its_containers_is_compared_where_they_set_nothing() {
        let made = |linux: LinuxSecurity| CreatedWith {
            linux: Some(linux),
            ..CreatedWith::default()
        };
        // As NamespacesForPod makes them for a pod on the pod network: its own IPC namespace,
        // the container's PID namespace.
        let plain = made(LinuxSecurity {
            namespaces: Some([0, 1, 0]),
            ..LinuxSecurity::default()
        });
        let c = json!({"name":"c"});
        for pod in [
            json!({}),
            json!({"hostPID": false, "hostIPC": null, "shareProcessNamespace": false}),
            // The pod's network is the sandbox's, compared by the `sandboxes` check.
            json!({"hostNetwork": true}),
        ] {
            assert_eq!(contradiction_in_pod(&c, Some(&pod), &plain), None, "{pod}");
        }
        for (pod, says) in [
            (
                json!({"securityContext": {"runAsUser": 1000}}),
                "with the pod's securityContext.runAsUser none, and the pod now says 1000",
            ),
            (
                json!({"securityContext": {"seLinuxOptions": {"level": "s0:c1"}}}),
                "with the pod's securityContext.seLinuxOptions \":::\", and the pod now says \":::s0:c1\"",
            ),
            (json!({"hostPID": true}), "with the pod's hostPID false, and the pod now says true"),
            (json!({"hostIPC": true}), "with the pod's hostIPC false, and the pod now says true"),
        ] {
            let why = contradiction_in_pod(&c, Some(&pod), &plain).unwrap_or_else(|| panic!("{pod}"));
            assert!(why.contains(says), "{pod}: {why}");
        }
        // What the container sets wins over the pod; and the container's own is compared first.
        let as_user = made(LinuxSecurity {
            run_as_user: Some(1000),
            run_as_group: Some(10),
            selinux: Some(["".into(), "".into(), "spc_t".into(), "".into()]),
            namespaces: Some([2, 2, 2]),
            ..LinuxSecurity::default()
        });
        let own = json!({"name":"c","securityContext":{"runAsUser":1000,"runAsGroup":10,"seLinuxOptions":{"type":"spc_t"}}});
        let pod = json!({"hostPID": true, "hostIPC": true, "hostNetwork": true,
            "securityContext": {"runAsUser": 0, "runAsGroup": 0, "seLinuxOptions": {"type": "x"}}});
        assert_eq!(contradiction_in_pod(&own, Some(&pod), &as_user), None);
        let at_pod = json!({"hostPID": true, "hostIPC": true,
            "securityContext": {"runAsUser": 1000, "runAsGroup": 0}});
        assert!(
            contradiction_in_pod(&c, Some(&at_pod), &as_user)
                .is_some_and(|w| w
                    .contains("the pod's securityContext.runAsGroup 10, and the pod now says 0"))
        );
        assert!(
            contradiction_in_pod(&c, Some(&json!({"hostIPC": true})), &as_user)
                .is_some_and(|w| w.contains("the pod's hostPID true, and the pod now says false"))
        );
        let root = json!({"name":"c","securityContext":{"runAsUser":0}});
        assert!(
            contradiction_in_pod(&root, None, &as_user).is_some_and(
                |w| w.contains("securityContext.runAsUser 1000, and the spec now says 0")
            )
        );

        // A shared PID namespace is the pod's: no longer shared, said; shared where the record
        // has the container's, maybe the PodShareProcessNamespace gate (kubelet 1.10 – 1.11).
        let shared = made(LinuxSecurity {
            namespaces: Some([0, 0, 0]),
            ..LinuxSecurity::default()
        });
        assert_eq!(
            contradiction_in_pod(&c, Some(&json!({"shareProcessNamespace": true})), &shared),
            None
        );
        assert!(
            contradiction_in_pod(&c, Some(&json!({})), &shared)
                .is_some_and(|w| w
                    .contains("the pod's shareProcessNamespace true, and the pod now says false"))
        );
        assert_eq!(
            contradiction_in_pod(&c, Some(&json!({"shareProcessNamespace": true})), &plain),
            None
        );
        // An ephemeral container with a target, a record without namespaces (CRI v1alpha1's
        // host flags), a group the record does not hold, a value of another type: nothing.
        let target = made(LinuxSecurity {
            namespaces: Some([0, 3, 0]),
            ..LinuxSecurity::default()
        });
        assert_eq!(
            contradiction_in_pod(&c, Some(&json!({"hostPID": true})), &target),
            None
        );
        let bare = made(LinuxSecurity::default());
        for pod in [
            json!({"hostPID": true, "hostIPC": true}),
            json!({"securityContext": {"runAsGroup": 5}}),
            json!({"hostPID": "yes", "securityContext": {"runAsUser": "0", "seLinuxOptions": {"type": 1}}}),
        ] {
            assert_eq!(contradiction_in_pod(&c, Some(&pod), &bare), None, "{pod}");
        }
        // No Linux security context (Windows), or no pod: the container's own alone.
        assert_eq!(
            contradiction_in_pod(&c, Some(&json!({"hostPID": true})), &CreatedWith::default()),
            None
        );
    }
}
