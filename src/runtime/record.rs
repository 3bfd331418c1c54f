//! The seam between the write path and a container runtime: where the runtime keeps a container's
//! CRI annotations, how kubehash reads and replaces the two hash annotations in it, and how the
//! runtime is made to load the change. containerd is the one implementation
//! ([`crate::runtime::containerd`]); a second runtime implements these two traits and nothing in
//! `rewrite/` changes.

use std::future::Future;

use serde_json::Value;

use crate::error::{Problem, Result};

/// The hash annotations a record holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoredHashes {
    /// `io.kubernetes.container.hash`.
    pub hash: Option<String>,
    /// `io.kubernetes.container.hashWithoutResources` (kubelet 1.27 – 1.30).
    pub without_resources: Option<String>,
}

/// What the kubelet passed to `CreateContainer` straight from the container's spec, as the
/// runtime's record keeps it (kuberuntime_container.go `generateContainerConfig`: the image the
/// spec names, `Command` and `Args` after `$(VAR)` expansion, the environment, `WorkingDir`,
/// `Stdin`, `StdinOnce` and `Tty` as the spec says, and what the Linux security context holds of
/// the container's own). Facts about what runs, which no hash and no journal can change.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CreatedWith {
    /// `image.user_specified_image`: the spec's `image` (kubelet ≥ 1.28, and a runtime that
    /// keeps the field); empty where either does not.
    pub image: String,
    pub command: Vec<String>,
    pub args: Vec<String>,
    pub working_dir: String,
    /// `envs`, as (name, value): the environment `makeEnvironmentVariables` made.
    pub envs: Vec<(String, String)>,
    pub stdin: bool,
    pub stdin_once: bool,
    pub tty: bool,
    /// `linux.security_context`, where the record has one (not for a Windows container).
    pub linux: Option<LinuxSecurity>,
}

/// What a CRI `LinuxContainerSecurityContext` holds of the container's `securityContext`
/// (kuberuntime security_context.go `determineEffectiveSecurityContext`):
/// `convertToRuntimeSecurityContext` copies `privileged`, `readOnlyRootFilesystem` and
/// `capabilities.add`/`drop` (unset being false or none), `runAsUser`, `runAsGroup` and
/// `seLinuxOptions`; `AddNoNewPrivileges` sets `no_new_privs` exactly where
/// `allowPrivilegeEscalation` is false; `getSeccompProfile` and `getAppArmorProfile` give the
/// profiles. The user, group, SELinux options and profiles may come from the pod (or the image's
/// user) where the container sets none.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LinuxSecurity {
    pub privileged: bool,
    pub readonly_rootfs: bool,
    pub no_new_privs: bool,
    pub add_capabilities: Vec<String>,
    pub drop_capabilities: Vec<String>,
    /// `run_as_user.value`, where the record has `run_as_user`.
    pub run_as_user: Option<i64>,
    /// `run_as_group.value`, where the record has `run_as_group`.
    pub run_as_group: Option<i64>,
    /// `selinux_options` as user, role, type and level, where the record has them.
    pub selinux: Option<[String; 4]>,
    /// `seccomp`, or before it the deprecated `seccomp_profile_path`.
    pub seccomp: Option<Profile>,
    /// `apparmor`, or before it the deprecated `apparmor_profile`.
    pub apparmor: Option<Profile>,
    /// `namespace_options`' network, pid and ipc modes (POD 0, CONTAINER 1, NODE 2, TARGET 3),
    /// as runtimeutil `NamespacesForPod` gives them from the pod's `hostNetwork`, `hostPID`,
    /// `shareProcessNamespace` and `hostIPC`; `None` where the record has none, or the
    /// `host_*` flags of CRI v1alpha1.
    pub namespaces: Option<[i64; 3]>,
}

/// A CRI `SecurityProfile` (seccomp or AppArmor), as the kubelet gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Profile {
    RuntimeDefault,
    Unconfined,
    /// `localhost_ref`: a seccomp profile's path on the node, an AppArmor profile's name.
    Localhost(String),
}

impl Profile {
    /// A `SecurityProfile` in Go's JSON: `profile_type` a number (RuntimeDefault, 0, omitted),
    /// `localhost_ref` a string. `None` for a type this CRI version does not know.
    fn of_object(p: &Value, at: &str) -> Result<Option<Profile>, Problem> {
        let kind = match &p["profile_type"] {
            Value::Null => 0,
            Value::Number(n) => n.as_i64().unwrap_or(-1),
            _ => return Err(Problem(format!("Config.{at}.profile_type is not a number"))),
        };
        let reference = match &p["localhost_ref"] {
            Value::Null => "",
            Value::String(r) => r.as_str(),
            _ => {
                return Err(Problem(format!(
                    "Config.{at}.localhost_ref is not a string"
                )))
            }
        };
        Ok(match kind {
            0 => Some(Profile::RuntimeDefault),
            1 => Some(Profile::Unconfined),
            2 => Some(Profile::Localhost(reference.into())),
            _ => None,
        })
    }

    /// The deprecated string form (`runtime/default`, `docker/default`, `unconfined`,
    /// `localhost/<ref>`); `None` for "" (the runtime's default, unnamed) or another string.
    fn of_path(path: &str) -> Option<Profile> {
        match path {
            "runtime/default" | "docker/default" => Some(Profile::RuntimeDefault),
            "unconfined" => Some(Profile::Unconfined),
            _ => path
                .strip_prefix("localhost/")
                .map(|r| Profile::Localhost(r.into())),
        }
    }
}

impl std::fmt::Display for Profile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Profile::RuntimeDefault => f.write_str("RuntimeDefault"),
            Profile::Unconfined => f.write_str("Unconfined"),
            Profile::Localhost(r) => write!(f, "Localhost {r:?}"),
        }
    }
}

impl CreatedWith {
    /// What Go's JSON of a CRI `ContainerConfig` (containerd's record, and its verbose
    /// `ContainerStatus` info) says. Empty fields are omitted there, so an absent one is empty;
    /// one of another type is not what containerd writes, and is refused.
    pub fn from_config(config: &Value) -> Result<CreatedWith, Problem> {
        let strings_of = |within: &Value, k: &str, at: &str| -> Result<Vec<String>, Problem> {
            let wrong = || Problem(format!("Config.{at}{k} is not a list of strings"));
            match &within[k] {
                Value::Null => Ok(Vec::new()),
                Value::Array(items) => items
                    .iter()
                    .map(|i| i.as_str().map(str::to_string))
                    .collect::<Option<_>>()
                    .ok_or_else(wrong),
                _ => Err(wrong()),
            }
        };
        let flag_of = |within: &Value, k: &str, at: &str| match &within[k] {
            Value::Null => Ok(false),
            Value::Bool(b) => Ok(*b),
            _ => Err(Problem(format!("Config.{at}{k} is not a boolean"))),
        };
        let flag = |k: &str| flag_of(config, k, "");
        let strings = |k: &str| strings_of(config, k, "");
        const SC: &str = "linux.security_context.";
        Ok(CreatedWith {
            image: match &config["image"]["user_specified_image"] {
                Value::Null => String::new(),
                Value::String(i) => i.clone(),
                _ => return Err("Config.image.user_specified_image is not a string".into()),
            },
            command: strings("command")?,
            args: strings("args")?,
            working_dir: match &config["working_dir"] {
                Value::Null => String::new(),
                Value::String(d) => d.clone(),
                _ => return Err("Config.working_dir is not a string".into()),
            },
            envs: match &config["envs"] {
                Value::Null => Vec::new(),
                Value::Array(items) => items
                    .iter()
                    .map(|kv| match (&kv["key"], &kv["value"]) {
                        (Value::String(k), Value::String(v)) => Some((k.clone(), v.clone())),
                        // Go's JSON omits an empty value.
                        (Value::String(k), Value::Null) => Some((k.clone(), String::new())),
                        _ => None,
                    })
                    .collect::<Option<_>>()
                    .ok_or("Config.envs is not a list of keys and values")?,
                _ => return Err("Config.envs is not a list of keys and values".into()),
            },
            stdin: flag("stdin")?,
            stdin_once: flag("stdin_once")?,
            tty: flag("tty")?,
            linux: match &config["linux"]["security_context"] {
                Value::Null => None,
                sc @ Value::Object(_) => {
                    const CAPS: &str = "linux.security_context.capabilities.";
                    let caps = match &sc["capabilities"] {
                        c @ (Value::Null | Value::Object(_)) => c,
                        _ => return Err(format!("Config.{SC}capabilities is not an object").into()),
                    };
                    // An Int64Value: `{}` is 0 (Go's JSON omits it).
                    let id_of = |k: &str| {
                        match &sc[k] {
                            Value::Null => Ok(None),
                            Value::Object(o) => match o.get("value") {
                                None | Some(Value::Null) => Ok(Some(0)),
                                Some(v) => v.as_i64().map(Some).ok_or(()),
                            },
                            _ => Err(()),
                        }
                        .map_err(|()| Problem(format!("Config.{SC}{k} is not an Int64Value")))
                    };
                    let text_of = |within: &Value, k: &str, at: &str| match &within[k] {
                        Value::Null => Ok(String::new()),
                        Value::String(s) => Ok(s.clone()),
                        _ => Err(Problem(format!("Config.{at}{k} is not a string"))),
                    };
                    let profile = |object: &str, path: &str| match &sc[object] {
                        Value::Null => Ok(Profile::of_path(&text_of(sc, path, SC)?)),
                        p @ Value::Object(_) => Profile::of_object(p, &format!("{SC}{object}")),
                        _ => Err(Problem(format!("Config.{SC}{object} is not an object"))),
                    };
                    const SEL: &str = "linux.security_context.selinux_options.";
                    let selinux = match &sc["selinux_options"] {
                        Value::Null => None,
                        o @ Value::Object(_) => Some([
                            text_of(o, "user", SEL)?,
                            text_of(o, "role", SEL)?,
                            text_of(o, "type", SEL)?,
                            text_of(o, "level", SEL)?,
                        ]),
                        _ => {
                            return Err(
                                format!("Config.{SC}selinux_options is not an object").into()
                            )
                        }
                    };
                    const NS: &str = "linux.security_context.namespace_options.";
                    let namespaces = match &sc["namespace_options"] {
                        Value::Object(o) if o.keys().any(|k| k.starts_with("host_")) => None,
                        o @ Value::Object(_) => {
                            let mode = |k: &str| {
                                match &o[k] {
                                    Value::Null => Ok(0),
                                    Value::Number(n) => n.as_i64().ok_or(()),
                                    _ => Err(()),
                                }
                                .map_err(|()| Problem(format!("Config.{NS}{k} is not a number")))
                            };
                            Some([mode("network")?, mode("pid")?, mode("ipc")?])
                        }
                        Value::Null => None,
                        _ => {
                            return Err(
                                format!("Config.{SC}namespace_options is not an object").into()
                            )
                        }
                    };
                    Some(LinuxSecurity {
                        privileged: flag_of(sc, "privileged", SC)?,
                        readonly_rootfs: flag_of(sc, "readonly_rootfs", SC)?,
                        no_new_privs: flag_of(sc, "no_new_privs", SC)?,
                        add_capabilities: strings_of(caps, "add_capabilities", CAPS)?,
                        drop_capabilities: strings_of(caps, "drop_capabilities", CAPS)?,
                        run_as_user: id_of("run_as_user")?,
                        run_as_group: id_of("run_as_group")?,
                        selinux,
                        seccomp: profile("seccomp", "seccomp_profile_path")?,
                        apparmor: profile("apparmor", "apparmor_profile")?,
                        namespaces,
                    })
                }
                _ => return Err("Config.linux.security_context is not an object".into()),
            },
        })
    }
}

/// A runtime's encoding of the bytes that hold a container's CRI annotations. Pure functions of
/// bytes, so that the journal can be validated without a runtime.
pub trait RecordFormat {
    /// The hash annotations in `value`, after checking that the runtime would load it as the
    /// record of container `id`.
    fn stored_hashes(&self, id: &str, value: &[u8]) -> Result<StoredHashes, Problem>;

    /// `value` with `hash` set, and `without_resources` set where given and already present
    /// (never added); every other byte kept. The result has passed [`RecordFormat::check_edit`].
    fn set_hashes(
        &self,
        id: &str,
        value: &[u8],
        hash: &str,
        without_resources: Option<&str>,
    ) -> Result<Vec<u8>, Problem>;

    /// Proves that `new` may replace `old` in container `id`'s record: it loads, belongs to the
    /// same container and differs from `old` only in the hash annotations' values.
    fn check_edit(&self, id: &str, old: &[u8], new: &[u8]) -> Result<(), Problem>;

    /// What `value`, the record of container `id`, says the container was created with.
    fn created_with(&self, id: &str, value: &[u8]) -> Result<CreatedWith, Problem>;
}

/// Where the runtime keeps its records, read and written through its own API.
pub trait RecordStore: Sync {
    /// The encoding of this runtime's records.
    fn format(&self) -> &dyn RecordFormat;

    /// The runtime's name and version, as the journal records it (`containerd 1.7.24`).
    fn runtime(&self) -> String;

    /// The bytes holding container `id`'s CRI annotations, after the checks of
    /// [`RecordFormat::stored_hashes`].
    fn read(&self, id: &str) -> impl Future<Output = Result<Vec<u8>>> + Send;

    /// Replaces container `id`'s bytes with `new` only while they still hold `expected`
    /// (compare-and-swap), then reads them back and checks that they hold `new`.
    fn replace(
        &self,
        id: &str,
        expected: &[u8],
        new: &[u8],
    ) -> impl Future<Output = Result<()>> + Send;
}

/// The record format a journal's `begin` line names: `containerd 1.7.24`, or a bare version as
/// kubehash 0.1 wrote it (it knew only containerd).
pub fn format_named(runtime: &str) -> Option<&'static dyn RecordFormat> {
    let bare_version = runtime.starts_with(|c: char| c.is_ascii_digit() || c == 'v');
    if runtime.starts_with("containerd") || bare_version || runtime.is_empty() {
        Some(&crate::runtime::containerd::METADATA)
    } else {
        None
    }
}
