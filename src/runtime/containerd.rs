//! containerd's record of a CRI container, and the one edit kubehash makes to it.
//!
//! containerd keeps the kubelet's CRI annotations in the container record's extension
//! `io.cri-containerd.container.metadata` (type URL
//! `github.com/containerd/cri/pkg/store/container/Metadata`), as compact JSON:
//! `{"Version":"v1","Metadata":{"ID","Name","SandboxID","Config":{…,"annotations":{…}},…}}`.
//! The same key, type URL and shape (`Version: "v1"`) are used by every containerd from 1.6 to 2.4;
//! newer releases add keys (`ImageDigest`, `ImageName` after `ImageRef`). kubehash therefore
//! accepts any containerd whose record validates by content, and keeps every key it does not know,
//! and their order, byte for byte. The CRI plugin reads the extension only at start-up, so an edit
//! shows over CRI after containerd restarts.
//!
//! containerd stores *any* bytes it is given, and a bad value makes the container invisible to CRI
//! after the next restart (see docs/containerd-notes.md), so [`rewrite_hashes`] changes only
//! the hash values, byte for byte in place, and [`validate_edit`] proves that before anything is
//! written: the new value parses, `Version` is `v1`, `ID`/`Name`/`SandboxID` are unchanged, the
//! type URL is exact, and the two values are equal but for the hash annotations. [`Store::write`]
//! uses the exact field mask and reads the record back.

use containerd_client::services::v1::containers_client::ContainersClient;
use containerd_client::services::v1::version_client::VersionClient;
use containerd_client::services::v1::{Container, GetContainerRequest, UpdateContainerRequest};
use prost_types::{Any, FieldMask};
use serde_json::Value;
use tonic::transport::Channel;
use tonic::Request;

use crate::error::{Error, Problem, Result};
use crate::kubelet::once_keys::value_from_slice;
use crate::runtime::cri::{keys, unix_channel};
use crate::runtime::record::{CreatedWith, RecordFormat, RecordStore, StoredHashes};

/// The extension holding the CRI metadata of a container.
pub const EXTENSION: &str = "io.cri-containerd.container.metadata";
/// Its type URL, which must be exactly this for the CRI plugin to load the container.
pub const TYPE_URL: &str = "github.com/containerd/cri/pkg/store/container/Metadata";
/// The only field mask kubehash ever writes with (an empty mask would replace the whole record).
pub const FIELD_MASK: &str = "extensions.io.cri-containerd.container.metadata";
/// The containerd namespace of CRI containers.
pub const NAMESPACE: &str = "k8s.io";

/// A connection to containerd's own API (not CRI).
#[derive(Clone)]
pub struct Store {
    channel: Channel,
    endpoint: String,
    version: String,
}

fn with_ns<T>(msg: T) -> Request<T> {
    let mut req = Request::new(msg);
    req.metadata_mut().insert(
        "containerd-namespace",
        tonic::metadata::MetadataValue::from_static(NAMESPACE),
    );
    req
}

/// `1.6.20~ds1` → `1.6`.
pub fn major_minor(version: &str) -> String {
    let v = version.trim_start_matches('v');
    let mut parts = v.split(|c: char| !c.is_ascii_digit());
    match (parts.next(), parts.next()) {
        (Some(a), Some(b)) if !a.is_empty() && !b.is_empty() => format!("{a}.{b}"),
        _ => v.to_string(),
    }
}

impl Store {
    /// Connects to containerd and reads its version.
    pub async fn connect(endpoint: &str) -> Result<Store> {
        let channel = unix_channel(endpoint).await?;
        let version = VersionClient::new(channel.clone())
            .version(Request::new(()))
            .await
            .map_err(|s| Error::Containerd {
                endpoint: endpoint.into(),
                reason: format!("Version: {}", s.message()),
            })?
            .into_inner()
            .version;
        Ok(Store {
            channel,
            endpoint: endpoint.into(),
            version,
        })
    }

    /// containerd's version, as it reports it (`1.6.20~ds1`).
    pub fn version(&self) -> &str {
        &self.version
    }

    fn error(&self, what: &str, s: tonic::Status) -> Error {
        Error::Containerd {
            endpoint: self.endpoint.clone(),
            reason: format!("{what}: {} ({:?})", s.message(), s.code()),
        }
    }

    /// The container record (namespace `k8s.io`).
    pub async fn get(&self, id: &str) -> Result<Container> {
        ContainersClient::new(self.channel.clone())
            .get(with_ns(GetContainerRequest { id: id.into() }))
            .await
            .map_err(|s| self.error(&format!("get container {id}"), s))?
            .into_inner()
            .container
            .ok_or_else(|| Error::Containerd {
                endpoint: self.endpoint.clone(),
                reason: format!("get container {id}: empty answer"),
            })
    }

    /// Writes `value` as the CRI metadata extension of `id` (exact type URL, exact field mask),
    /// reads the record back and checks that it holds exactly `value`.
    pub async fn write(&self, id: &str, value: &[u8]) -> Result<Container> {
        let mut record = Container {
            id: id.into(),
            ..Default::default()
        };
        record.extensions.insert(
            EXTENSION.into(),
            Any {
                type_url: TYPE_URL.into(),
                value: value.to_vec(),
            },
        );
        ContainersClient::new(self.channel.clone())
            .update(with_ns(UpdateContainerRequest {
                container: Some(record),
                update_mask: Some(FieldMask {
                    paths: vec![FIELD_MASK.into()],
                }),
            }))
            .await
            .map_err(|s| self.error(&format!("update container {id}"), s))?;
        let back = self.get(id).await?;
        match back.extensions.get(EXTENSION) {
            Some(a) if a.type_url == TYPE_URL && a.value == value => Ok(back),
            _ => Err(Error::Containerd {
                endpoint: self.endpoint.clone(),
                reason: format!(
                    "container {id}: the record read back does not hold the value written"
                ),
            }),
        }
    }
}

/// The CRI metadata extension of a record: its raw bytes, after the checks of [`parse_metadata`].
pub fn extension(record: &Container) -> std::result::Result<&[u8], Problem> {
    let any = record
        .extensions
        .get(EXTENSION)
        .ok_or_else(|| Problem(format!("the record has no {EXTENSION} extension")))?;
    if any.type_url != TYPE_URL {
        return Err(format!(
            "extension type URL is {:?}, expected {TYPE_URL:?}",
            any.type_url
        )
        .into());
    }
    parse_metadata(&any.value, &record.id)?;
    Ok(&any.value)
}

/// Parses a metadata value and checks what the CRI plugin needs to load it.
pub fn parse_metadata(value: &[u8], record_id: &str) -> std::result::Result<Value, Problem> {
    // containerd's Go decoder would merge a repeated key's values: such a record is refused.
    let v = value_from_slice(value).map_err(|e| format!("metadata is not JSON: {e}"))?;
    if v["Version"] != "v1" {
        return Err(format!("metadata Version is {}, expected \"v1\"", v["Version"]).into());
    }
    let m = &v["Metadata"];
    if m["ID"] != record_id {
        return Err(format!("metadata ID {} is not the record's id {record_id}", m["ID"]).into());
    }
    for k in ["Name", "SandboxID"] {
        if !m[k].is_string() {
            return Err(format!("metadata has no {k}").into());
        }
    }
    let Some(annotations) = m["Config"]["annotations"].as_object() else {
        return Err("metadata has no Config.annotations".into());
    };
    // The CRI plugin's Go type is `map[string]string`: containerd writes every value as a
    // string, and does not load an object, a list, a number or a bool there (it would read
    // `null` as ""). Any other value is a record containerd did not write, and is refused: the
    // hash annotations are edited in place, and one that is not a string could hide a key of
    // the same name inside it.
    if let Some((k, _)) = annotations.iter().find(|(_, v)| !v.is_string()) {
        return Err(format!("metadata Config.annotations {k:?} is not a string").into());
    }
    Ok(v)
}

/// The hash annotations stored in a metadata value: (hash, hashWithoutResources).
pub fn stored_hashes(meta: &Value) -> (Option<String>, Option<String>) {
    let a = &meta["Metadata"]["Config"]["annotations"];
    let s = |k: &str| a[k].as_str().map(str::to_string);
    (s(keys::HASH), s(keys::HASH_WITHOUT_RESOURCES))
}

/// Replaces the value of annotation `key` in the raw JSON, in place. The key must occur exactly
/// once as a JSON key (`"key":"`); hash values are plain hex, so no escaping is involved.
fn replace_annotation(raw: &[u8], key: &str, new: &str) -> std::result::Result<Vec<u8>, Problem> {
    let pat = format!("\"{key}\":\"");
    let starts: Vec<usize> = raw
        .windows(pat.len())
        .enumerate()
        .filter(|(_, w)| *w == pat.as_bytes())
        .map(|(i, _)| i + pat.len())
        .collect();
    let [start] = starts[..] else {
        return Err(format!(
            "annotation {key} occurs {} times in the metadata, expected once",
            starts.len()
        )
        .into());
    };
    let len = raw[start..]
        .iter()
        .position(|&c| c == b'"')
        .ok_or_else(|| Problem(format!("annotation {key} has no closing quote")))?;
    let old = &raw[start..start + len];
    if !old.iter().all(u8::is_ascii_hexdigit)
        || !new.bytes().all(|c| c.is_ascii_hexdigit())
        || new.is_empty()
    {
        return Err(format!("annotation {key} is not a plain hex hash").into());
    }
    let mut out = Vec::with_capacity(raw.len() + new.len());
    out.extend_from_slice(&raw[..start]);
    out.extend_from_slice(new.as_bytes());
    out.extend_from_slice(&raw[start + len..]);
    Ok(out)
}

/// The new metadata value: `hash` set to `new_hash`, and `hashWithoutResources` set to
/// `new_without` when given and already present (never added). Every other byte is kept.
pub fn rewrite_hashes(
    raw: &[u8],
    record_id: &str,
    new_hash: &str,
    new_without: Option<&str>,
) -> std::result::Result<Vec<u8>, Problem> {
    let meta = parse_metadata(raw, record_id)?;
    let (_, without) = stored_hashes(&meta);
    let mut out = replace_annotation(raw, keys::HASH, new_hash)?;
    let mut want = (Some(new_hash), without.as_deref());
    if let (Some(nw), Some(_)) = (new_without, &without) {
        out = replace_annotation(&out, keys::HASH_WITHOUT_RESOURCES, nw)?;
        want.1 = Some(nw);
    }
    // What the CRI plugin will read back is what was asked for, not bytes edited elsewhere.
    let got = checked_edit(raw, &out, record_id)?;
    if (got.0.as_deref(), got.1.as_deref()) != want {
        return Err("the edit does not leave the hash annotations as asked".into());
    }
    Ok(out)
}

/// Proves that `new` may replace `old`: it loads in the CRI plugin, belongs to the same container,
/// and differs from `old` only in the values of the two hash annotations.
pub fn validate_edit(old: &[u8], new: &[u8], record_id: &str) -> std::result::Result<(), Problem> {
    checked_edit(old, new, record_id).map(drop)
}

/// [`validate_edit`], and the hash annotations `new` holds ([`stored_hashes`]).
fn checked_edit(
    old: &[u8],
    new: &[u8],
    record_id: &str,
) -> std::result::Result<(Option<String>, Option<String>), Problem> {
    let mut a = parse_metadata(old, record_id)?;
    let mut b = parse_metadata(new, record_id)?;
    let hashes = stored_hashes(&b);
    for k in ["ID", "Name", "SandboxID"] {
        if a["Metadata"][k] != b["Metadata"][k] {
            return Err(format!("the edit changes Metadata.{k}").into());
        }
    }
    for v in [&mut a, &mut b] {
        if let Some(ann) = v["Metadata"]["Config"]["annotations"].as_object_mut() {
            for k in [keys::HASH, keys::HASH_WITHOUT_RESOURCES] {
                if let Some(x) = ann.get_mut(k) {
                    *x = Value::Null;
                }
            }
        }
    }
    if a != b {
        return Err("the edit changes more than the hash annotations".into());
    }
    if old.len() != new.len() && (old.len() as i64 - new.len() as i64).abs() > 32 {
        return Err("the edit changes the value's length by more than two hashes".into());
    }
    Ok(hashes)
}

/// containerd's encoding: the CRI metadata extension's JSON (see the module notes).
pub struct Metadata;

/// The one [`Metadata`] format value.
pub static METADATA: Metadata = Metadata;

impl RecordFormat for Metadata {
    fn stored_hashes(&self, id: &str, value: &[u8]) -> std::result::Result<StoredHashes, Problem> {
        let (hash, without_resources) = stored_hashes(&parse_metadata(value, id)?);
        Ok(StoredHashes {
            hash,
            without_resources,
        })
    }

    fn set_hashes(
        &self,
        id: &str,
        value: &[u8],
        hash: &str,
        without_resources: Option<&str>,
    ) -> std::result::Result<Vec<u8>, Problem> {
        rewrite_hashes(value, id, hash, without_resources)
    }

    fn check_edit(&self, id: &str, old: &[u8], new: &[u8]) -> std::result::Result<(), Problem> {
        validate_edit(old, new, id)
    }

    fn created_with(&self, id: &str, value: &[u8]) -> std::result::Result<CreatedWith, Problem> {
        CreatedWith::from_config(&parse_metadata(value, id)?["Metadata"]["Config"])
            .map_err(|e| Problem(format!("metadata {e}")))
    }
}

impl RecordStore for Store {
    fn format(&self) -> &dyn RecordFormat {
        &METADATA
    }

    fn runtime(&self) -> String {
        format!("containerd {}", self.version)
    }

    async fn read(&self, id: &str) -> Result<Vec<u8>> {
        let record = self.get(id).await?;
        extension(&record)
            .map(<[u8]>::to_vec)
            .map_err(|e| Error::record(id, e))
    }

    async fn replace(&self, id: &str, expected: &[u8], new: &[u8]) -> Result<()> {
        let record = self.get(id).await?;
        match record.extensions.get(EXTENSION) {
            Some(a) if a.type_url == TYPE_URL && a.value == expected => {}
            _ => {
                return Err(Error::record(
                    id,
                    "the record changed since kubehash read it".into(),
                ))
            }
        }
        self.write(id, new).await.map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::record::{LinuxSecurity, Profile};

    const BEFORE: &str = include_str!("../../testdata/containerd/container_metadata_before.json");
    const ID: &str = "b30e6d77791dfde103e24c06d51931ab0ffd3d978f98c6ede1a6ddadc4a683ef";

    #[test]
    fn rewrites_only_the_hash_bytes() {
        let raw = BEFORE.trim_end().as_bytes();
        let new = rewrite_hashes(raw, ID, "8e45cbd0", None).unwrap();
        let want = BEFORE.trim_end().replace(
            "\"io.kubernetes.container.hash\":\"abc123\"",
            "\"io.kubernetes.container.hash\":\"8e45cbd0\"",
        );
        assert_eq!(String::from_utf8(new).unwrap(), want);
        // hashWithoutResources is never added when absent.
        let new = rewrite_hashes(raw, ID, "8e45cbd0", Some("1234")).unwrap();
        assert!(!String::from_utf8(new)
            .unwrap()
            .contains("hashWithoutResources"));
    }

    #[test]
    fn reads_what_the_container_was_created_with() {
        let raw = BEFORE.trim_end();
        // The kubelet always gives a Linux container a security context, with the pod's
        // namespaces (here the node's network, the container's own PID namespace).
        let linux = Some(LinuxSecurity {
            namespaces: Some([2, 1, 0]),
            ..LinuxSecurity::default()
        });
        assert_eq!(
            METADATA.created_with(ID, raw.as_bytes()).unwrap(),
            CreatedWith {
                linux: linux.clone(),
                ..CreatedWith::default()
            }
        );
        let with = raw.replace(
            "\"log_path\"",
            "\"command\":[\"app\"],\"args\":[\"--v\",\"\"],\"working_dir\":\"/srv\",\"envs\":[{\"key\":\"A\",\"value\":\"1\"},{\"key\":\"E\"}],\"tty\":true,\"log_path\"",
        );
        assert_eq!(
            METADATA.created_with(ID, with.as_bytes()).unwrap(),
            CreatedWith {
                command: vec!["app".into()],
                args: vec!["--v".into(), String::new()],
                working_dir: "/srv".into(),
                envs: vec![("A".into(), "1".into()), ("E".into(), String::new())],
                tty: true,
                linux,
                ..CreatedWith::default()
            }
        );
        let privileged = raw.replace(
            "\"security_context\":{",
            "\"security_context\":{\"capabilities\":{\"add_capabilities\":[\"NET_ADMIN\"],\"drop_capabilities\":[\"ALL\"]},\"privileged\":true,\"readonly_rootfs\":true,\"no_new_privs\":true,",
        );
        assert_eq!(
            METADATA
                .created_with(ID, privileged.as_bytes())
                .unwrap()
                .linux,
            Some(LinuxSecurity {
                privileged: true,
                readonly_rootfs: true,
                no_new_privs: true,
                add_capabilities: vec!["NET_ADMIN".into()],
                drop_capabilities: vec!["ALL".into()],
                namespaces: Some([2, 1, 0]),
                ..LinuxSecurity::default()
            })
        );
        // User, group, SELinux options and the profiles; `{}` is an Int64Value of 0 and a
        // SecurityProfile of type RuntimeDefault (Go's JSON omits zeros).
        let security = |fields: &str| {
            let v = raw.replace(
                "\"security_context\":{",
                &format!("\"security_context\":{{{fields},"),
            );
            METADATA
                .created_with(ID, v.as_bytes())
                .unwrap()
                .linux
                .unwrap()
        };
        let who = security(
            "\"run_as_user\":{\"value\":1000},\"run_as_group\":{},\"selinux_options\":{\"type\":\"spc_t\",\"level\":\"s0\"},\"seccomp\":{},\"apparmor\":{\"profile_type\":2,\"localhost_ref\":\"k8s-nginx\"}",
        );
        assert_eq!(
            (
                who.run_as_user,
                who.run_as_group,
                who.selinux,
                who.seccomp,
                who.apparmor
            ),
            (
                Some(1000),
                Some(0),
                Some(["".into(), "".into(), "spc_t".into(), "s0".into()]),
                Some(Profile::RuntimeDefault),
                Some(Profile::Localhost("k8s-nginx".into()))
            )
        );
        let none = security("\"run_as_username\":\"app\"");
        assert_eq!(
            (
                none.run_as_user,
                none.run_as_group,
                none.selinux,
                none.seccomp,
                none.apparmor
            ),
            (None, None, None, None, None)
        );
        // Before `seccomp` and `apparmor`, the kubelet named profiles as paths (kept beside them
        // until 1.2x); the object wins where both are there. A type this version does not know,
        // or "", is no profile named.
        for (fields, seccomp, apparmor) in [
            (
                "\"seccomp_profile_path\":\"localhost//var/lib/kubelet/seccomp/a.json\",\"apparmor_profile\":\"runtime/default\"",
                Some(Profile::Localhost("/var/lib/kubelet/seccomp/a.json".into())),
                Some(Profile::RuntimeDefault),
            ),
            (
                "\"seccomp_profile_path\":\"docker/default\",\"apparmor_profile\":\"unconfined\"",
                Some(Profile::RuntimeDefault),
                Some(Profile::Unconfined),
            ),
            (
                "\"seccomp\":{\"profile_type\":1},\"seccomp_profile_path\":\"runtime/default\",\"apparmor_profile\":\"\"",
                Some(Profile::Unconfined),
                None,
            ),
            ("\"seccomp\":{\"profile_type\":7}", None, None),
        ] {
            let got = security(fields);
            assert_eq!((got.seccomp, got.apparmor), (seccomp, apparmor), "{fields}");
        }
        // CRI v1alpha1 (kubelet 1.8 – 1.9) had host flags instead of modes: no namespaces read.
        let context = "\"namespace_options\":{\"network\":2,\"pid\":1}";
        assert!(raw.contains(context));
        let old_shape = raw.replace(context, "\"namespace_options\":{\"host_network\":true}");
        let got = METADATA.created_with(ID, old_shape.as_bytes()).unwrap();
        assert_eq!(got.linux.unwrap().namespaces, None);
        for (bad, says) in [
            ("\"args\":\"--v\",", "Config.args is not a list of strings"),
            (
                "\"command\":[1],",
                "Config.command is not a list of strings",
            ),
            ("\"working_dir\":[],", "Config.working_dir is not a string"),
            ("\"stdin\":\"true\",", "Config.stdin is not a boolean"),
            (
                "\"envs\":[{\"key\":1}],",
                "Config.envs is not a list of keys and values",
            ),
        ] {
            let v = raw.replace("\"log_path\"", &format!("{bad}\"log_path\""));
            assert_eq!(
                METADATA.created_with(ID, v.as_bytes()).unwrap_err().0,
                format!("metadata {says}")
            );
        }
        let context = "\"security_context\":{\"namespace_options\":{\"network\":2,\"pid\":1}}";
        for (bad, says) in [
            (
                "\"security_context\":[]",
                "Config.linux.security_context is not an object",
            ),
            (
                "\"security_context\":{\"privileged\":1}",
                "Config.linux.security_context.privileged is not a boolean",
            ),
            (
                "\"security_context\":{\"capabilities\":[]}",
                "Config.linux.security_context.capabilities is not an object",
            ),
            (
                "\"security_context\":{\"capabilities\":{\"drop_capabilities\":\"ALL\"}}",
                "Config.linux.security_context.capabilities.drop_capabilities is not a list of strings",
            ),
            (
                "\"security_context\":{\"run_as_user\":1000}",
                "Config.linux.security_context.run_as_user is not an Int64Value",
            ),
            (
                "\"security_context\":{\"run_as_group\":{\"value\":\"0\"}}",
                "Config.linux.security_context.run_as_group is not an Int64Value",
            ),
            (
                "\"security_context\":{\"selinux_options\":{\"level\":0}}",
                "Config.linux.security_context.selinux_options.level is not a string",
            ),
            (
                "\"security_context\":{\"seccomp\":{\"profile_type\":\"Localhost\"}}",
                "Config.linux.security_context.seccomp.profile_type is not a number",
            ),
            (
                "\"security_context\":{\"apparmor\":{\"profile_type\":2,\"localhost_ref\":[]}}",
                "Config.linux.security_context.apparmor.localhost_ref is not a string",
            ),
            (
                "\"security_context\":{\"seccomp\":\"unconfined\"}",
                "Config.linux.security_context.seccomp is not an object",
            ),
            (
                "\"security_context\":{\"apparmor_profile\":1}",
                "Config.linux.security_context.apparmor_profile is not a string",
            ),
            (
                "\"security_context\":{\"namespace_options\":{\"pid\":\"NODE\"}}",
                "Config.linux.security_context.namespace_options.pid is not a number",
            ),
            (
                "\"security_context\":{\"namespace_options\":2}",
                "Config.linux.security_context.namespace_options is not an object",
            ),
        ] {
            assert!(raw.contains(context));
            assert_eq!(
                METADATA
                    .created_with(ID, raw.replace(context, bad).as_bytes())
                    .unwrap_err()
                    .0,
                format!("metadata {says}")
            );
        }
        // The image the spec named, where kubelet and runtime keep it.
        let image = |specified: &str| {
            raw.replace(
                "\"image\":{\"image\":\"docker.io/local/app:1\"}",
                &format!(
                    "\"image\":{{\"image\":\"sha256:1\",\"user_specified_image\":{specified}}}"
                ),
            )
        };
        let named = METADATA
            .created_with(ID, image("\"app:1\"").as_bytes())
            .unwrap();
        assert_eq!(named.image, "app:1");
        assert_eq!(
            METADATA
                .created_with(ID, image("1").as_bytes())
                .unwrap_err()
                .0,
            "metadata Config.image.user_specified_image is not a string"
        );
    }

    #[test]
    fn refuses_what_would_break_the_container() {
        let raw = BEFORE.trim_end();
        assert!(
            parse_metadata(raw.replace("\"v1\"", "\"v2\"").as_bytes(), ID)
                .unwrap_err()
                .0
                .contains("Version")
        );
        assert!(parse_metadata(&raw.as_bytes()[..200], ID)
            .unwrap_err()
            .0
            .contains("not JSON"));
        assert!(parse_metadata(raw.as_bytes(), "other")
            .unwrap_err()
            .0
            .contains("is not the record's id"));
        assert!(rewrite_hashes(raw.as_bytes(), ID, "not-hex", None).is_err());
        // Any other change, however small, is refused.
        let other = raw.replace(
            "io.kubernetes.container.restartCount\":\"0",
            "io.kubernetes.container.restartCount\":\"1",
        );
        assert_ne!(other, raw);
        assert_eq!(
            validate_edit(raw.as_bytes(), other.as_bytes(), ID)
                .unwrap_err()
                .0,
            "the edit changes more than the hash annotations"
        );
        let dup = raw.replace(
            "\"io.kubernetes.container.restartCount\"",
            "\"io.kubernetes.container.hash\":\"1\",\"x\"",
        );
        assert!(rewrite_hashes(dup.as_bytes(), ID, "ff", None).is_err());
        // Found by fuzzing (`metadata_edit`): a hash annotation whose value is an object
        // holding a key of the same name. The byte pattern found the inner one, and the edit
        // passed `validate_edit`, which masks the whole annotation value. containerd writes
        // every annotation as a string (`map[string]string`): any other value is refused.
        for value in [
            r#"{"io.kubernetes.container.hash":"abc123"}"#,
            r#"["abc123"]"#,
            "1",
            "null",
        ] {
            let nested = raw.replacen(
                "\"io.kubernetes.container.hash\":\"abc123\"",
                &format!("\"io.kubernetes.container.hash\":{value}"),
                1,
            );
            assert_ne!(nested, raw);
            let err = parse_metadata(nested.as_bytes(), ID).unwrap_err().0;
            assert_eq!(
                err,
                "metadata Config.annotations \"io.kubernetes.container.hash\" is not a string"
            );
            assert!(rewrite_hashes(nested.as_bytes(), ID, "0123abcd", None).is_err());
            let edited = nested.replacen("\"abc123\"", "\"0123abcd\"", 1);
            assert!(validate_edit(nested.as_bytes(), edited.as_bytes(), ID).is_err());
        }
        // containerd's Go decoder would merge a repeated key's values, so what it loads is not
        // what a `Value` keeps: any repeated key, at any depth, makes the record unreadable.
        for forged in [
            raw.replacen("{\"Version\":\"v1\",", "{\"Version\":\"v1\",\"Version\":\"v1\",", 1),
            raw.replacen("\"Config\":{", "\"Config\":{\"annotations\":{},", 1),
            raw.replacen(
                "\"io.kubernetes.container.restartCount\"",
                "\"io.kubernetes.pod.terminationGracePeriod\":\"1\",\"io.kubernetes.pod.terminationGracePeriod\"",
                1,
            ),
        ] {
            assert_ne!(forged, raw);
            let err = parse_metadata(forged.as_bytes(), ID).unwrap_err().0;
            assert!(
                err.starts_with("metadata is not JSON: the key") && err.contains("is repeated"),
                "{err}"
            );
            assert!(rewrite_hashes(forged.as_bytes(), ID, "ff", None).is_err());
        }
    }

    /// containerd's main branch adds `ImageDigest` and `ImageName` after `ImageRef` (still "v1"):
    /// such a record is accepted by content, and every unknown key and their order are kept.
    #[test]
    fn unknown_keys_of_newer_containerd_are_kept_byte_for_byte() {
        let raw = BEFORE.trim_end();
        let at = raw.find("\"ImageRef\":").expect("ImageRef");
        let end = at + raw[at..].find(",\"").expect("next key");
        let newer = format!(
            "{}{},\"ImageDigest\":\"sha256:{}\",\"ImageName\":\"docker.io/local/app:1\"{}",
            &raw[..at],
            &raw[at..end],
            "0".repeat(64),
            &raw[end..]
        );
        let new = rewrite_hashes(newer.as_bytes(), ID, "8e45cbd0", None).unwrap();
        let want = newer.replace(
            "\"io.kubernetes.container.hash\":\"abc123\"",
            "\"io.kubernetes.container.hash\":\"8e45cbd0\"",
        );
        assert_eq!(String::from_utf8(new).unwrap(), want);
    }

    #[test]
    fn versions() {
        assert_eq!(major_minor("1.6.20~ds1"), "1.6");
        assert_eq!(major_minor("v2.0.3"), "2.0");
        assert_eq!(major_minor("1.7.13"), "1.7");
    }
}
