//! The proof rule against random specs, single-field mutations and every pair of kubelet versions.
//!
//! A container is created by kubelet G from spec S0: it runs what G decoded of S0 (fields G did not
//! know were dropped and never applied) and stores `hash_G(S0)`. The pod's spec then becomes S
//! (one field added, changed or removed, or none). kubehash plans the upgrade F → T (F is what the
//! operator or the Node says runs now; usually G, sometimes not). Whenever the plan says
//! `rewrite` — the only verdict `node apply`, the agent and the shim act on — kubelet T must see
//! no difference between S and what runs: T's hashed text of S equals T's hashed text of the
//! running container (S0 as G applied it). Otherwise the rewrite would mask a change T acts on.

use kubehash::analysis::created_with::contradiction_in_pod;
use kubehash::analysis::plan::{plan, PodIndex, Verdict};
use kubehash::kubelet::decode::{decode_container, Arena};
use kubehash::kubelet::gojson;
use kubehash::kubelet::hash::{hash_container, hashed_text, Annotation};
use kubehash::kubelet::schema::Schema;
use kubehash::kubelet::sink::format_hash;
use kubehash::kubelet::version::KubeletVersion;
use kubehash::runtime::cri::{keys, proto};
use kubehash::runtime::record::{CreatedWith, LinuxSecurity, Profile};
use kubehash::source::manifests::Manifests;
use proptest::prelude::*;
use serde_json::{json, Map, Value};

/// Fields and the values a test spec may give them, across the versions' type graphs: old and
/// new fields (added in 1.9 … 1.33), nested ones, pointers to empty structs.
fn features() -> Vec<(&'static str, Vec<Value>)> {
    vec![
        ("image", vec![json!("nginx:1"), json!("nginx:2")]),
        ("args", vec![json!(["--a"]), json!(["--b", "x"])]),
        ("command", vec![json!(["/bin/app"])]),
        (
            "env",
            vec![
                json!([{"name":"X","value":"1"}]),
                json!([{"name":"X","value":"2"}]),
                json!([{"name":"Y","valueFrom":{"fieldRef":{"fieldPath":"spec.nodeName"}}}]),
            ],
        ),
        ("workingDir", vec![json!("/w")]),
        (
            "ports",
            vec![
                json!([{"containerPort":80}]),
                json!([{"containerPort":80,"protocol":"TCP","name":"http"}]),
                json!([{"containerPort":80,"hostIP":"10.0.0.1"}]),
            ],
        ),
        (
            "resources",
            vec![
                json!({"limits":{"cpu":"1","memory":"64Mi"}}),
                json!({"requests":{"cpu":"100m"}}),
                json!({"claims":[{"name":"gpu"}]}),
            ],
        ),
        (
            "resizePolicy",
            vec![json!([{"resourceName":"cpu","restartPolicy":"NotRequired"}])],
        ),
        ("restartPolicy", vec![json!("Always")]),
        (
            "volumeMounts",
            vec![
                json!([{"name":"v","mountPath":"/v"}]),
                json!([{"name":"v","mountPath":"/v","subPathExpr":"$(X)"}]),
                json!([{"name":"v","mountPath":"/v","mountPropagation":"HostToContainer"}]),
                json!([{"name":"v","mountPath":"/v","readOnly":true,"recursiveReadOnly":"Enabled"}]),
            ],
        ),
        (
            "volumeDevices",
            vec![json!([{"name":"d","devicePath":"/dev/xvda"}])],
        ),
        (
            "livenessProbe",
            vec![
                json!({"httpGet":{"port":8080,"path":"/"}}),
                json!({"grpc":{"port":9000}}),
                json!({"exec":{"command":["true"]},"terminationGracePeriodSeconds":5}),
            ],
        ),
        ("startupProbe", vec![json!({"tcpSocket":{"port":80}})]),
        (
            "lifecycle",
            vec![
                json!({"preStop":{"exec":{"command":["sleep","1"]}}}),
                json!({"preStop":{"sleep":{"seconds":5}}}),
                json!({"stopSignal":"SIGUSR1"}),
            ],
        ),
        (
            "securityContext",
            vec![
                json!({"privileged":true}),
                json!({"privileged":false}),
                json!({"readOnlyRootFilesystem":true}),
                json!({"allowPrivilegeEscalation":false}),
                json!({"allowPrivilegeEscalation":true}),
                json!({"capabilities":{"add":["NET_ADMIN"]}}),
                json!({"capabilities":{"drop":["ALL"]}}),
                json!({"runAsUser":1000}),
                json!({"runAsUser":0,"runAsGroup":3000}),
                json!({"seLinuxOptions":{"type":"spc_t"}}),
                json!({"seccompProfile":{"type":"Unconfined"}}),
                json!({"seccompProfile":{"type":"Localhost","localhostProfile":"profiles/a.json"}}),
                json!({"appArmorProfile":{"type":"Localhost","localhostProfile":"k8s-app"}}),
                json!({"procMount":"Default"}),
                json!({"seccompProfile":{"type":"RuntimeDefault"}}),
                json!({"appArmorProfile":{"type":"RuntimeDefault"}}),
                json!({"appArmorProfile":{}}),
                json!({"windowsOptions":{"hostProcess":true}}),
            ],
        ),
        (
            "terminationMessagePolicy",
            vec![json!("FallbackToLogsOnError")],
        ),
        (
            "imagePullPolicy",
            vec![json!("Always"), json!("IfNotPresent")],
        ),
        ("stdin", vec![json!(true)]),
        ("tty", vec![json!(true)]),
        ("envFrom", vec![json!([{"configMapRef":{"name":"cfg"}}])]),
    ]
}

/// A spec from choices: for each feature, `None` (unset) or the index of a value.
fn spec_of(choices: &[Option<usize>]) -> Value {
    let mut m = Map::new();
    m.insert("name".into(), json!("app"));
    m.insert("image".into(), json!("nginx:1"));
    for ((key, values), c) in features().iter().zip(choices) {
        if let Some(i) = c {
            m.insert((*key).into(), values[i % values.len()].clone());
        }
    }
    Value::Object(m)
}

/// The versions whose places (from the oldest) are picked.
fn picked(picks: &[bool]) -> Vec<KubeletVersion> {
    picks
        .iter()
        .enumerate()
        .filter(|(_, p)| **p)
        .map(|(i, _)| version(kubehash::kubelet::version::MIN_MINOR + i as u8))
        .collect()
}

fn version(minor: u8) -> KubeletVersion {
    KubeletVersion::from_minor(minor).unwrap()
}

/// S0 as kubelet G applied it: G's Go value, marshalled (fields G did not know are gone).
fn as_applied_by(g: KubeletVersion, spec: &Value) -> Value {
    let schema = Schema::for_version(g).unwrap();
    let arena = Arena::new();
    let val = decode_container(schema, spec, "", &arena).unwrap();
    let mut out = Vec::new();
    gojson::write_container(schema, &val, false, &mut out);
    serde_json::from_slice(&out).unwrap()
}

fn container(hash: &str) -> proto::Container {
    let mut c = proto::Container {
        id: "c1".into(),
        state: proto::ContainerState::ContainerRunning as i32,
        ..Default::default()
    };
    for (k, v) in [
        (keys::POD_UID, "u1"),
        (keys::POD_NAMESPACE, "ns"),
        (keys::POD_NAME, "p"),
        (keys::CONTAINER_NAME, "app"),
    ] {
        c.labels.insert(k.into(), v.into());
    }
    c.annotations.insert(keys::HASH.into(), hash.into());
    c
}

fn case() -> impl Strategy<Value = (Vec<Option<usize>>, usize, Option<usize>, u8, u8, u8, bool)> {
    let n = features().len();
    (
        proptest::collection::vec(proptest::option::weighted(0.3, 0..1000usize), n),
        0..n,
        proptest::option::of(0..1000usize),
        kubehash::kubelet::version::MIN_MINOR..=kubehash::kubelet::version::MAX_MINOR,
        kubehash::kubelet::version::MIN_MINOR..=kubehash::kubelet::version::MAX_MINOR,
        kubehash::kubelet::version::MIN_MINOR..=kubehash::kubelet::version::MAX_MINOR,
        proptest::bool::weighted(0.75),
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 3000, ..ProptestConfig::default() })]

    #[test]
    fn a_rewrite_never_masks_what_the_new_kubelet_would_restart_for(
        (choices, field, value, f, t, g, created_by_f) in case()
    ) {
        let (f, t) = (version(f), version(t));
        let g = if created_by_f { f } else { version(g) };
        let s0 = spec_of(&choices);
        let mut mutated = choices.clone();
        mutated[field] = value;
        let s = spec_of(&mutated);

        let stored = format_hash(hash_container(&s0, &[g], "").unwrap().hash[0].1);
        let mut pods = PodIndex::default();
        pods.add_pod(json!({"metadata":{"namespace":"ns","name":"p","uid":"u1"},"spec":{"containers":[s.clone()]}}));
        let p = plan(&[container(&stored)], &pods, &Manifests::none(), t, Some(f)).remove(0);

        if p.verdict == Verdict::Rewrite {
            let running = as_applied_by(g, &s0);
            let mut annotations = vec![Annotation::Hash];
            if t.has_hash_without_resources() {
                annotations.push(Annotation::HashWithoutResources);
            }
            for a in annotations {
                prop_assert_eq!(
                    String::from_utf8(hashed_text(&s, t, a, "").unwrap()).unwrap(),
                    String::from_utf8(hashed_text(&running, t, a, "").unwrap()).unwrap(),
                    "rewrite {} → {} (created by {}) masks a change kubelet {} acts on: {} vs running {}; {}",
                    f, t, g, t, s, running, p.reason
                );
            }
        }
        // Not vacuous: an unchanged spec on the kubelet that made it is refused only for the two
        // reasons of the coverage rule.
        if created_by_f && choices[field] == value && !matches!(p.verdict, Verdict::Rewrite | Verdict::Unchanged) {
            prop_assert!(
                p.reason.contains("dropped") || p.reason.contains("only name and image"),
                "{} → {}: {:?} {}", f, t, p.verdict, p.reason
            );
        }
        // Without the old kubelet's version nothing is ever proven.
        let blind = plan(&[container(&stored)], &pods, &Manifests::none(), t, None).remove(0);
        prop_assert_ne!(blind.verdict, Verdict::Rewrite, "{}", blind.reason);
        // The image the runtime records (as kubelet ≥ 1.28 and a runtime that keeps it do) never
        // changes the verdict of a container whose spec still names that image.
        if s["image"] == s0["image"] {
            let recorded = created_for(&stored, s0["image"].as_str().unwrap());
            let q = plan(&[recorded], &pods, &Manifests::none(), t, Some(f)).remove(0);
            prop_assert_eq!((q.verdict, &q.reason), (p.verdict, &p.reason));
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 500, ..ProptestConfig::default() })]

    /// Hashing several versions at once shares decodes and texts (equal JSON documents give one
    /// text) and hashes them in FNV lanes; none of that may change a hash. Each version alone,
    /// streamed straight into one hasher, is the reference.
    #[test]
    fn many_versions_at_once_hash_as_each_alone(
        choices in proptest::collection::vec(proptest::option::weighted(0.4, 0..4usize), features().len()),
        picks in proptest::collection::vec(proptest::bool::ANY, usize::from(kubehash::kubelet::version::MAX_MINOR - kubehash::kubelet::version::MIN_MINOR) + 1),
    ) {
        let spec = spec_of(&choices);
        let versions = picked(&picks);
        let together = hash_container(&spec, &versions, "").unwrap();
        for &v in &versions {
            let alone = hash_container(&spec, &[v], "").unwrap();
            prop_assert_eq!(together.get(v), alone.get(v), "{} {}", v, spec);
            prop_assert_eq!(together.get_without_resources(v), alone.get_without_resources(v), "{} {}", v, spec);
            let text = hashed_text(&spec, v, Annotation::Hash, "").unwrap();
            prop_assert_eq!(alone.get(v), Some(kubehash::kubelet::sink::Fnv32a::hash(&text)));
            if v.has_hash_without_resources() {
                let text = hashed_text(&spec, v, Annotation::HashWithoutResources, "").unwrap();
                prop_assert_eq!(
                    alone.get_without_resources(v),
                    Some(kubehash::kubelet::sink::Fnv32a::hash(&text))
                );
            }
        }
    }
}

/// The adversary's image tag: with meet-in-the-middle on FNV-1a, an image tag is found in seconds
/// that makes kubelet 1.14's hash of the *new* spec equal the stored 1.30 hash of the old one. The
/// plan sees exactly that: a stored hash that is some other version's hash of the current spec.
/// Once the old kubelet's version is known, it proves nothing.
#[test]
fn a_collision_with_another_versions_hash_proves_nothing() {
    let old = json!({"name":"app","image":"registry/app:1.0"});
    let stored = format_hash(hash_container(&old, &[version(30)], "").unwrap().hash[0].1);
    let new = json!({"name":"app","image":"registry/app:2.0"});
    let mut pods = PodIndex::default();
    pods.add_pod(json!({"metadata":{"namespace":"ns","name":"p","uid":"u1"},"spec":{"containers":[new.clone()]}}));
    // The attacker's success: the stored hash is kubelet 1.14's hash of the new spec.
    let forged = format_hash(hash_container(&new, &[version(14)], "").unwrap().hash[0].1);
    let p = plan(
        &[container(&forged)],
        &pods,
        &Manifests::none(),
        version(31),
        Some(version(30)),
    )
    .remove(0);
    assert_eq!(p.verdict, Verdict::WillRestart, "{}", p.reason);
    assert_eq!(p.provenance, ["1.9–1.15"]);
    let p = plan(
        &[container(&forged)],
        &pods,
        &Manifests::none(),
        version(31),
        None,
    )
    .remove(0);
    assert_eq!(p.verdict, Verdict::Unprovable, "{}", p.reason);
    // And the honest container still proves itself.
    let mut same = PodIndex::default();
    same.add_pod(
        json!({"metadata":{"namespace":"ns","name":"p","uid":"u1"},"spec":{"containers":[old]}}),
    );
    let p = plan(
        &[container(&stored)],
        &same,
        &Manifests::none(),
        version(31),
        Some(version(30)),
    )
    .remove(0);
    assert_eq!(p.verdict, Verdict::Rewrite, "{}", p.reason);
}

/// The container as a runtime lists it after kubelet ≥ 1.29 made it on a runtime that keeps
/// `ImageSpec.user_specified_image` (containerd 2.x): the image the spec named then.
fn created_for(hash: &str, image: &str) -> proto::Container {
    let mut c = container(hash);
    c.image = Some(proto::ImageSpec {
        image: "sha256:0123".into(),
        user_specified_image: image.into(),
        ..Default::default()
    });
    c
}

/// The adversary's best case: an image tag crafted so that kubelet F's *own* hash of the new spec
/// equals the stored hash of the old one. The hashes alone cannot tell (F itself keeps the
/// container), but where the runtime records the image the container was created for, that
/// record contradicts the spec, and the rewrite that would keep the old image under kubelet T is
/// refused. (The collision is simulated by storing F's hash of the new spec; containerd 1.6 on
/// this machine drops the field, so the end-to-end path cannot run here.)
#[test]
fn a_collision_in_the_old_kubelets_own_hash_is_caught_by_the_image_the_runtime_records() {
    let new = json!({"name":"app","image":"registry/app:2.0"});
    let collided = format_hash(hash_container(&new, &[version(30)], "").unwrap().hash[0].1);
    let mut pods = PodIndex::default();
    pods.add_pod(
        json!({"metadata":{"namespace":"ns","name":"p","uid":"u1"},"spec":{"containers":[new]}}),
    );
    let verdict = |c: proto::Container| {
        let p = plan(
            &[c],
            &pods,
            &Manifests::none(),
            version(31),
            Some(version(30)),
        )
        .remove(0);
        (p.verdict, p.reason)
    };
    let (v, why) = verdict(created_for(&collided, "registry/app:1.0"));
    assert_eq!(v, Verdict::WillRestart, "{why}");
    assert!(
        why.contains("\"registry/app:1.0\"") && why.contains("collide"),
        "{why}"
    );
    // The same record created for the image the spec names proves itself, and so does a record
    // without the field (no evidence either way: the hashes decide, as before).
    assert_eq!(
        verdict(created_for(&collided, "registry/app:2.0")).0,
        Verdict::Rewrite
    );
    assert_eq!(verdict(container(&collided)).0, Verdict::Rewrite);
    // Only a rewrite is refused: a container the new kubelet keeps as it is stays unchanged.
    let kept = format_hash(
        hash_container(
            &json!({"name":"app","image":"registry/app:2.0"}),
            &[version(31)],
            "",
        )
        .unwrap()
        .hash[0]
            .1,
    );
    assert_eq!(
        verdict(created_for(&kept, "registry/app:1.0")).0,
        Verdict::Unchanged
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

    /// Over random specs, mutations and version pairs, with the collision made certain (the
    /// stored hash is kubelet F's hash of the *current* spec) and the record naming the image the
    /// container was created for: no rewrite ever keeps a container on an image its spec no
    /// longer names.
    #[test]
    fn a_recorded_image_the_spec_no_longer_names_is_never_rewritten(
        (choices, field, value, f, t, _g, _) in case()
    ) {
        let (f, t) = (version(f), version(t));
        let s0 = spec_of(&choices);
        let mut mutated = choices.clone();
        mutated[field] = value;
        let s = spec_of(&mutated);
        let collided = format_hash(hash_container(&s, &[f], "").unwrap().hash[0].1);
        let mut pods = PodIndex::default();
        pods.add_pod(json!({"metadata":{"namespace":"ns","name":"p","uid":"u1"},"spec":{"containers":[s.clone()]}}));
        let image0 = s0["image"].as_str().unwrap();
        let p = plan(&[created_for(&collided, image0)], &pods, &Manifests::none(), t, Some(f)).remove(0);
        if s["image"] != s0["image"] {
            prop_assert_ne!(p.verdict, Verdict::Rewrite, "{} → {}: {} created for {}", f, t, s, image0);
            // Not vacuous: without the record's image, the hashes alone prove this rewrite
            // wherever coverage allows it.
            let blind = plan(&[container(&collided)], &pods, &Manifests::none(), t, Some(f)).remove(0);
            if blind.verdict == Verdict::Rewrite {
                prop_assert_eq!(p.verdict, Verdict::WillRestart, "{}", p.reason);
            }
        }
    }
}

/// The CRI config a kubelet creates a container of `spec` with, as far as
/// `analysis::created_with` reads it: the image, command and args as they are (no test value has
/// a `$`), the environment of `makeEnvironmentVariables` (each name once, its last value; one from
/// `valueFrom` resolved, `envFrom` and service links adding names of their own), working
/// directory, stdin and tty; a Linux security context's `privileged`, `readonly_rootfs`,
/// `no_new_privs` and capabilities, the container's user, group and SELinux options (the pod
/// sets none and the image names no user), and the profiles of `getSeccompProfile` (Unconfined
/// where none is named, under the root `/var/lib/kubelet/seccomp`) and `getAppArmorProfile`.
fn kubelet_config(spec: &Value) -> CreatedWith {
    let strings = |k: &str| -> Vec<String> {
        spec[k]
            .as_array()
            .into_iter()
            .flatten()
            .map(|s| s.as_str().unwrap().to_string())
            .collect()
    };
    let context = &spec["securityContext"];
    let flag = |k: &str| context[k].as_bool().unwrap_or_default();
    let capabilities = |k: &str| -> Vec<String> {
        let listed = spec["securityContext"]["capabilities"][k].as_array();
        listed
            .into_iter()
            .flatten()
            .map(|c| c.as_str().unwrap().to_string())
            .collect()
    };
    let mut envs: Vec<(String, String)> =
        vec![("KUBERNETES_SERVICE_HOST".into(), "10.0.0.1".into())];
    if spec.get("envFrom").is_some() {
        envs.push(("FROM_CONFIGMAP".into(), "1".into()));
    }
    for e in spec["env"].as_array().into_iter().flatten() {
        let name = e["name"].as_str().unwrap().to_string();
        let value = match e.get("valueFrom") {
            Some(_) => "resolved on the node".to_string(),
            None => e["value"].as_str().unwrap_or_default().to_string(),
        };
        envs.retain(|(k, _)| *k != name);
        envs.push((name, value));
    }
    CreatedWith {
        image: spec["image"].as_str().unwrap_or_default().into(),
        command: strings("command"),
        args: strings("args"),
        working_dir: spec["workingDir"].as_str().unwrap_or_default().into(),
        envs,
        stdin: spec["stdin"].as_bool().unwrap_or_default(),
        stdin_once: spec["stdinOnce"].as_bool().unwrap_or_default(),
        tty: spec["tty"].as_bool().unwrap_or_default(),
        linux: Some(LinuxSecurity {
            privileged: flag("privileged"),
            readonly_rootfs: flag("readOnlyRootFilesystem"),
            no_new_privs: spec["securityContext"]["allowPrivilegeEscalation"] == json!(false),
            add_capabilities: capabilities("add"),
            drop_capabilities: capabilities("drop"),
            run_as_user: context["runAsUser"].as_i64(),
            run_as_group: context["runAsGroup"].as_i64(),
            selinux: context["seLinuxOptions"].as_object().map(|o| {
                ["user", "role", "type", "level"].map(|k| {
                    o.get(k)
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_string()
                })
            }),
            seccomp: Some(
                profile(&context["seccompProfile"], "/var/lib/kubelet/seccomp/")
                    .unwrap_or(Profile::Unconfined),
            ),
            apparmor: profile(&context["appArmorProfile"], ""),
            // NamespacesForPod for a pod that sets none: the pod's network and IPC namespaces,
            // the container's PID namespace.
            namespaces: Some([0, 1, 0]),
        }),
    }
}

/// A `seccompProfile` or `appArmorProfile` as the kubelet passes it: a Localhost profile's
/// name under `root`.
fn profile(p: &Value, root: &str) -> Option<Profile> {
    match p["type"].as_str()? {
        "RuntimeDefault" => Some(Profile::RuntimeDefault),
        "Localhost" => Some(Profile::Localhost(format!(
            "{root}{}",
            p["localhostProfile"].as_str()?
        ))),
        _ => Some(Profile::Unconfined),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    /// Over random specs and single-field mutations: a container created from S0 never looks
    /// created from another spec (what the record says overrules a proof only where it must, so
    /// no rewrite is lost to it), and a spec S that changed a field the kubelet copies into the
    /// record as it is (image, command, args, a plain env value, working directory, stdin, tty,
    /// privileged, a read-only root, allowPrivilegeEscalation, capabilities; the user, group,
    /// SELinux options and profiles the container sets) is always told apart from what runs,
    /// whatever the hashes say.
    #[test]
    fn the_record_tells_apart_exactly_the_fields_it_copies(
        (choices, field, value, _f, _t, _g, _) in case()
    ) {
        let s0 = spec_of(&choices);
        let mut mutated = choices.clone();
        mutated[field] = value;
        let s = spec_of(&mutated);
        let created = kubelet_config(&s0);
        // Checked as the plan checks it, with the pod (which sets nothing for its containers).
        let pod = json!({});
        let contradiction = |spec: &Value, created: &CreatedWith| {
            contradiction_in_pod(spec, Some(&pod), created)
        };
        prop_assert_eq!(contradiction(&s0, &created), None, "{}", s0);
        let copied = ["image", "command", "args", "workingDir", "stdin", "tty"];
        let plain_env = |spec: &Value| {
            spec["env"].as_array().into_iter().flatten().all(|e| e.get("valueFrom").is_none())
        };
        let key = features()[field].0;
        let changed = s.get(key) != s0.get(key);
        // What the record holds of the container's security context, as the kubelet makes it.
        let flags = |spec: &Value| kubelet_config(spec).linux.unwrap_or_default();
        let (now, then) = (flags(&s), flags(&s0));
        let flags_changed = key == "securityContext" && now != then;
        // Of that, what only the container gives: the flags and capabilities always; the user,
        // SELinux options and seccomp profile where S sets them (else the pod's or the image's
        // may be there); the group and AppArmor profile where S sets them and the record has one.
        let sets = |k: &str| !s["securityContext"][k].is_null();
        let own_changed = key == "securityContext"
            && ((now.privileged, now.readonly_rootfs, now.no_new_privs)
                != (then.privileged, then.readonly_rootfs, then.no_new_privs)
                || (&now.add_capabilities, &now.drop_capabilities)
                    != (&then.add_capabilities, &then.drop_capabilities)
                || (sets("runAsUser") && now.run_as_user != then.run_as_user)
                || (sets("seLinuxOptions") && now.selinux != then.selinux)
                || (sets("seccompProfile") && now.seccomp != then.seccomp)
                || (sets("runAsGroup")
                    && then.run_as_group.is_some()
                    && now.run_as_group != then.run_as_group)
                || (now.apparmor.is_some()
                    && then.apparmor.is_some()
                    && now.apparmor != then.apparmor));
        let told = copied.contains(&key)
            || (key == "env" && plain_env(&s) && s.get(key).is_some())
            || own_changed;
        if changed && told {
            prop_assert!(contradiction(&s, &created).is_some(), "{} created from {}", s, s0);
        }
        let compared = ["image", "command", "args", "workingDir", "stdin", "tty", "env"];
        if !changed || (!compared.contains(&key) && !flags_changed) {
            prop_assert_eq!(contradiction(&s, &created), None, "{} created from {}", s, s0);
        }
    }
}

/// Downgrades out of the name+image epoch prove nothing about the rest of the spec.
#[test]
fn a_name_image_hash_never_proves_a_whole_spec_hash() {
    let running = json!({"name":"app","image":"nginx:1","env":[{"name":"X","value":"old"}]});
    let now = json!({"name":"app","image":"nginx:1","env":[{"name":"X","value":"new"}]});
    let stored = format_hash(hash_container(&running, &[version(31)], "").unwrap().hash[0].1);
    let mut pods = PodIndex::default();
    pods.add_pod(
        json!({"metadata":{"namespace":"ns","name":"p","uid":"u1"},"spec":{"containers":[now]}}),
    );
    for (f, t) in [(31, 30), (33, 28), (36, 16), (31, 15)] {
        let p = plan(
            &[container(&stored)],
            &pods,
            &Manifests::none(),
            version(t),
            Some(version(f)),
        )
        .remove(0);
        assert_eq!(
            p.verdict,
            Verdict::Unprovable,
            "1.{f} → 1.{t}: {}",
            p.reason
        );
        assert!(p.reason.contains("only name and image"), "{}", p.reason);
    }
}

/// A security field the old kubelet never applied is named, and the container restarts.
#[test]
fn a_field_the_old_kubelet_dropped_is_never_masked() {
    for (spec, field) in [
        (
            json!({"name":"app","image":"nginx:1","securityContext":{"appArmorProfile":{"type":"RuntimeDefault"}}}),
            "securityContext.appArmorProfile",
        ),
        (
            json!({"name":"app","image":"nginx:1","volumeMounts":[{"name":"v","mountPath":"/v","readOnly":true,"recursiveReadOnly":"Enabled"}]}),
            "volumeMounts[].recursiveReadOnly",
        ),
    ] {
        let stored = format_hash(hash_container(&spec, &[version(29)], "").unwrap().hash[0].1);
        let mut pods = PodIndex::default();
        pods.add_pod(json!({"metadata":{"namespace":"ns","name":"p","uid":"u1"},"spec":{"containers":[spec]}}));
        let p = plan(
            &[container(&stored)],
            &pods,
            &Manifests::none(),
            version(30),
            Some(version(29)),
        )
        .remove(0);
        assert_eq!(p.verdict, Verdict::WillRestart, "{}", p.reason);
        assert!(p.reason.contains(field), "{}", p.reason);
    }
}

/// Every root key any version's `v1.Container` knows, with values the golden corpus gives it
/// (up to three) and values of every wrong JSON type.
fn root_values() -> &'static Vec<(String, Vec<Value>)> {
    static VALUES: std::sync::OnceLock<Vec<(String, Vec<Value>)>> = std::sync::OnceLock::new();
    VALUES.get_or_init(|| {
        let corpus = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/testdata/golden/public.jsonl"
        ))
        .unwrap();
        let containers: Vec<Value> = corpus
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap()["container"].clone())
            .collect();
        let mut keys: Vec<String> = Vec::new();
        for v in KubeletVersion::all() {
            let s = Schema::for_version(v).unwrap();
            if let kubehash::kubelet::schema::Kind::Struct(fields) = &s.ty(s.root()).kind {
                for f in fields {
                    if !keys.contains(&f.json) {
                        keys.push(f.json.clone());
                    }
                }
            }
        }
        keys.push("notAField".into());
        keys.into_iter()
            .map(|k| {
                let mut values: Vec<Value> = Vec::new();
                for c in &containers {
                    if let Some(v) = c.get(&k) {
                        if values.len() < 3 && !values.contains(v) {
                            values.push(v.clone());
                        }
                    }
                }
                values.extend([
                    json!(7),
                    json!("x"),
                    json!([1]),
                    json!({"a": 1}),
                    json!(true),
                    json!(null),
                ]);
                (k, values)
            })
            .collect()
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

    /// A type graph that takes the last graph's decode and texts (`kubelet::alike`: the
    /// container has none of the root keys where the two differ) must hash, and fail, as it
    /// would alone. Random root keys of every version, each with a real value or a wrong one,
    /// and random version sets: every hash equals the version's own, and the first version
    /// that refuses the container names the error of the whole set.
    #[test]
    fn a_graph_taking_anothers_decode_hashes_and_fails_as_itself(
        picks in proptest::collection::vec(proptest::option::weighted(0.3, 0..9usize), root_values().len()),
        versions in proptest::collection::vec(proptest::bool::weighted(0.6), usize::from(kubehash::kubelet::version::MAX_MINOR - kubehash::kubelet::version::MIN_MINOR) + 1),
    ) {
        let mut spec = Map::new();
        spec.insert("name".into(), json!("app"));
        for ((key, values), pick) in root_values().iter().zip(&picks) {
            if let Some(i) = pick {
                spec.insert(key.clone(), values[i % values.len()].clone());
            }
        }
        let spec = Value::Object(spec);
        let versions = picked(&versions);
        prop_assume!(!versions.is_empty());
        let together = hash_container(&spec, &versions, "c");
        let alone: Vec<_> = versions.iter().map(|&v| (v, hash_container(&spec, &[v], "c"))).collect();
        match alone.iter().find_map(|(_, r)| r.as_ref().err()) {
            Some(first) => prop_assert_eq!(
                together.map_err(|e| e.to_string()).err(),
                Some(first.to_string()),
                "{}", spec
            ),
            None => {
                let together = together.unwrap();
                for (v, a) in alone {
                    let a = a.unwrap();
                    prop_assert_eq!(together.get(v), a.get(v), "{} {}", v, spec);
                    prop_assert_eq!(together.get_without_resources(v), a.get_without_resources(v), "{} {}", v, spec);
                }
            }
        }
    }
}
