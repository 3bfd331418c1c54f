//! Pods, nodes, and claims with their persistent volumes from a live API server (kube-rs), for
//! scans of a running cluster.
//!
//! Configuration is the standard one: `--kubeconfig`, else `$KUBECONFIG` / `~/.kube/config`, else
//! the in-cluster service account. Pods are listed in pages (`limit` + `continue`) and handed over
//! one at a time, so a large cluster scans in bounded memory. When a continue token expires
//! (410 Gone, reason Expired) the list starts again from the beginning and pods already handed
//! over (by UID) are skipped, so nothing is counted twice. Server errors are retried a few times,
//! for a page of a list and a get alike (429, 503 and 504 by the kube client itself); 401 and 403
//! are reported at once with what to check.
//!
//! Pods are read as raw JSON (`DynamicObject`), not as k8s-openapi's typed `Pod`: typed structs
//! drop fields newer than the crate's API version, and those fields change the hashes of the
//! kubelets that know them.

use std::collections::HashSet;
use std::path::Path;
use std::time::Duration;

use kube::api::{Api, ApiResource, DynamicObject, ListParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use serde_json::Value;

use crate::error::{Error, Result};
use crate::source::claims::{claim_of, Claims};
use crate::source::nodes::NodeVersions;

/// A connection to an API server.
#[derive(Clone)]
pub struct Cluster {
    client: Client,
    url: String,
}

/// How many pods to ask for per page.
pub const PAGE_SIZE: u32 = 500;
/// How often to start a list again after its continue token expired.
const MAX_RESTARTS: usize = 3;
/// How often to retry a request after a server error.
const MAX_RETRIES: usize = 3;

fn pods_resource() -> ApiResource {
    ApiResource {
        group: String::new(),
        version: "v1".into(),
        api_version: "v1".into(),
        kind: "Pod".into(),
        plural: "pods".into(),
    }
}

fn resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        kind: kind.into(),
        plural: plural.into(),
        ..pods_resource()
    }
}

fn nodes_resource() -> ApiResource {
    resource("Node", "nodes")
}

/// What a list produced.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ListStats {
    pub pods: u64,
    pub pages: u64,
    /// Lists started again after an expired continue token.
    pub restarts: u64,
    /// Pages retried after a server error.
    pub retries: u64,
}

/// Whether `$KUBECONFIG` names at least one file that exists.
fn env_kubeconfig_set() -> bool {
    std::env::var_os("KUBECONFIG")
        .is_some_and(|v| std::env::split_paths(&v).any(|p| !p.as_os_str().is_empty() && p.exists()))
}

/// `$KUBECONFIG`'s files merged as kubectl merges them (the first to set a value wins), skipping
/// the ones that do not exist, as kubectl does.
fn merged_env_kubeconfig() -> std::result::Result<Kubeconfig, String> {
    let value = std::env::var_os("KUBECONFIG").unwrap_or_default();
    let mut merged = Kubeconfig::default();
    for path in std::env::split_paths(&value).filter(|p| !p.as_os_str().is_empty() && p.exists()) {
        let kc = Kubeconfig::read_from(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        merged = merged
            .merge(kc)
            .map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(merged)
}

impl Cluster {
    /// Connects with a kubeconfig file (and context), `$KUBECONFIG` (a list of files merged as
    /// kubectl merges them, missing ones skipped), or the standard configuration.
    pub async fn connect(kubeconfig: Option<&Path>, context: Option<&str>) -> Result<Cluster> {
        let fail = |reason: String| Error::Input {
            source_name: match kubeconfig {
                Some(p) => format!("kubeconfig {}", p.display()),
                None => "kubeconfig".into(),
            },
            reason,
        };
        let options = KubeConfigOptions {
            context: context.map(str::to_string),
            ..Default::default()
        };
        let config = match kubeconfig {
            None if env_kubeconfig_set() => {
                let kc = merged_env_kubeconfig()
                    .map_err(|e| fail(format!("cannot read $KUBECONFIG: {e}")))?;
                Config::from_custom_kubeconfig(kc, &options)
                    .await
                    .map_err(|e| fail(format!("unusable kubeconfig: {e}")))?
            }
            Some(path) => {
                let kc = Kubeconfig::read_from(path)
                    .map_err(|e| fail(format!("cannot read kubeconfig: {e}")))?;
                Config::from_custom_kubeconfig(kc, &options)
                    .await
                    .map_err(|e| fail(format!("unusable kubeconfig: {e}")))?
            }
            None if context.is_some() => Config::from_kubeconfig(&options)
                .await
                .map_err(|e| fail(format!("unusable kubeconfig: {e}")))?,
            None => Config::infer()
                .await
                .map_err(|e| fail(format!("no kubeconfig and not in a cluster: {e}")))?,
        };
        let url = config.cluster_url.to_string();
        let client =
            Client::try_from(config).map_err(|e| fail(format!("cannot build a client: {e}")))?;
        Ok(Cluster { client, url })
    }

    /// The API server's URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    fn error(&self, what: &str, e: kube::Error) -> Error {
        let reason = match &e {
            kube::Error::Api(s) if s.code == 401 => format!(
                "{what}: 401 Unauthorized ({}): the credentials in the kubeconfig were refused",
                s.message
            ),
            kube::Error::Api(s) if s.code == 403 => format!(
                "{what}: 403 Forbidden ({}): kubehash needs get/list on pods and nodes",
                s.message
            ),
            _ => failed(what, e),
        };
        Error::Cluster {
            url: self.url.clone(),
            reason,
        }
    }

    /// One Node object, as JSON.
    pub async fn node(&self, name: &str) -> Result<Value> {
        let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &nodes_resource());
        let node = retrying(&mut 0, || api.get(name))
            .await
            .map_err(|e| self.error(&format!("getting node {name}"), e))?;
        serde_json::to_value(&node).map_err(|e| Error::Cluster {
            url: self.url.clone(),
            reason: format!("node {name}: {e}"),
        })
    }

    /// Keeps `latest` up to date with the Node `name`, through a watch (started again whenever it
    /// ends, after `pause`). Runs until the task is dropped.
    pub async fn watch_node(
        &self,
        name: &str,
        latest: std::sync::Arc<std::sync::Mutex<Option<Value>>>,
        pause: Duration,
    ) {
        use futures_util::StreamExt;
        use kube::api::{WatchEvent, WatchParams};
        let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &nodes_resource());
        let set = |v: Value| *latest.lock().unwrap_or_else(|p| p.into_inner()) = Some(v);
        loop {
            let version = match api.get(name).await {
                Ok(node) => {
                    let rv = node.metadata.resource_version.clone().unwrap_or_default();
                    if let Ok(v) = serde_json::to_value(&node) {
                        set(v);
                    }
                    rv
                }
                Err(e) => {
                    tracing::warn!(error = %e, "cannot get the node; will try again");
                    tokio::time::sleep(pause).await;
                    continue;
                }
            };
            let wp = WatchParams::default()
                .fields(&format!("metadata.name={name}"))
                .timeout(290);
            match api.watch(&wp, &version).await {
                Ok(stream) => {
                    let mut stream = std::pin::pin!(stream);
                    while let Some(ev) = stream.next().await {
                        match ev {
                            Ok(WatchEvent::Added(o)) | Ok(WatchEvent::Modified(o)) => {
                                if let Ok(v) = serde_json::to_value(&o) {
                                    set(v);
                                }
                            }
                            Ok(WatchEvent::Bookmark(_)) | Ok(WatchEvent::Deleted(_)) => {}
                            Ok(WatchEvent::Error(e)) => {
                                tracing::debug!(error = %e.message, "node watch ended");
                                break;
                            }
                            Err(e) => {
                                tracing::debug!(error = %e, "node watch ended");
                                break;
                            }
                        }
                    }
                }
                Err(e) => tracing::warn!(error = %e, "cannot watch the node; will try again"),
            }
            tokio::time::sleep(pause).await;
        }
    }

    /// Records a Kubernetes Event on a Node (namespace `default`, as the kubelet does).
    pub async fn node_event(
        &self,
        node: &str,
        uid: &str,
        reason: &str,
        message: &str,
        warning: bool,
    ) -> Result<()> {
        use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
        let now = Time(k8s_openapi::jiff::Timestamp::now());
        let event = Event {
            metadata: ObjectMeta {
                generate_name: Some(format!("{node}.kubehash.")),
                namespace: Some("default".into()),
                ..Default::default()
            },
            involved_object: ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Node".into()),
                name: Some(node.into()),
                uid: (!uid.is_empty()).then(|| uid.to_string()),
                ..Default::default()
            },
            reason: Some(reason.into()),
            message: Some(message.into()),
            type_: Some(if warning { "Warning" } else { "Normal" }.into()),
            source: Some(EventSource {
                component: Some("kubehash".into()),
                host: Some(node.into()),
            }),
            first_timestamp: Some(now.clone()),
            last_timestamp: Some(now),
            count: Some(1),
            ..Default::default()
        };
        let api: Api<Event> = Api::namespaced(self.client.clone(), "default");
        api.create(&kube::api::PostParams::default(), &event)
            .await
            .map_err(|e| self.error("creating an event", e))?;
        Ok(())
    }

    /// Every node's kubelet version.
    pub async fn node_versions(&self) -> Result<NodeVersions> {
        let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &nodes_resource());
        let mut nv = NodeVersions::default();
        let mut problems = Vec::new();
        self.list_pages(&api, &ListParams::default(), &mut |node| {
            let mut v = node;
            if let Value::Object(m) = &mut v {
                m.entry("kind").or_insert_with(|| "Node".into());
            }
            if let Err(e) = nv.add_node_object(&v) {
                problems.push(e);
            }
        })
        .await
        .map_err(|e| self.error("listing nodes", e))?;
        Ok(nv)
    }

    /// The persistent volumes with one of `sources` and the claims bound to them (claims of
    /// `namespace` only, when given), read in pages. `Err(why)` when they could not be read (the
    /// credentials may not list them, say): they serve one check, so the caller goes on without
    /// them and says so.
    pub async fn claims(
        &self,
        namespace: Option<&str>,
        sources: &[&'static str],
    ) -> std::result::Result<Claims, String> {
        let mut claims = Claims::new(sources);
        let volumes: Api<DynamicObject> = Api::all_with(
            self.client.clone(),
            &resource("PersistentVolume", "persistentvolumes"),
        );
        let pvcs = resource("PersistentVolumeClaim", "persistentvolumeclaims");
        let bound: Api<DynamicObject> = match namespace {
            Some(ns) => Api::namespaced_with(self.client.clone(), ns, &pvcs),
            None => Api::all_with(self.client.clone(), &pvcs),
        };
        let lp = ListParams::default().limit(PAGE_SIZE);
        let read = self
            .list_pages(&volumes, &lp, &mut |pv| claims.add_volume(&pv))
            .await
            .map_err(|e| ("listing persistentvolumes", e));
        claims.volumes_complete();
        let read = match read {
            Ok(_) => self
                .list_pages(&bound, &lp, &mut |pvc| claims.add_claim(&pvc))
                .await
                .map_err(|e| ("listing persistentvolumeclaims", e)),
            Err(e) => Err(e),
        };
        match read {
            Ok(_) => Ok(claims),
            Err((what, e)) => Err(failed(what, e)),
        }
    }

    /// The claims `pods` mount and the persistent volumes (with one of `sources`) bound to them,
    /// read one at a time as the kubelet reads them (get the claim, then its volume): what one
    /// node needs, with `get` alone. A claim or volume that does not exist is left out (no
    /// kubelet mounts it); `Err(why)` when one could not be read.
    pub async fn claims_of(
        &self,
        pods: &[Value],
        sources: &[&'static str],
    ) -> std::result::Result<Claims, String> {
        let mut claims = Claims::new(sources);
        let pvcs = resource("PersistentVolumeClaim", "persistentvolumeclaims");
        let volumes: Api<DynamicObject> = Api::all_with(
            self.client.clone(),
            &resource("PersistentVolume", "persistentvolumes"),
        );
        let wanted: std::collections::BTreeSet<(String, String)> = pods
            .iter()
            .flat_map(|pod| {
                let vols = pod.pointer("/spec/volumes").and_then(Value::as_array);
                vols.into_iter().flatten().filter_map(|v| claim_of(pod, v))
            })
            .map(|c| (c.namespace, c.name))
            .collect();
        let mut read = HashSet::new();
        for (namespace, name) in wanted {
            let api: Api<DynamicObject> =
                Api::namespaced_with(self.client.clone(), &namespace, &pvcs);
            let what = format!("getting persistentvolumeclaim {namespace}/{name}");
            let Some(pvc) = get_value(&api, &name, &what).await? else {
                continue;
            };
            claims.add_claim(&pvc);
            let volume = pvc
                .pointer("/spec/volumeName")
                .and_then(Value::as_str)
                .unwrap_or("");
            if volume.is_empty() || !read.insert(volume.to_string()) {
                continue;
            }
            let what = format!("getting persistentvolume {volume}");
            if let Some(pv) = get_value(&volumes, volume, &what).await? {
                claims.add_volume(&pv);
            }
        }
        Ok(claims)
    }

    /// Calls `each` for every pod (optionally restricted by a field selector such as
    /// `spec.nodeName=node-a`), one page at a time.
    pub async fn for_each_pod(
        &self,
        field_selector: Option<&str>,
        each: &mut dyn FnMut(Value),
    ) -> Result<ListStats> {
        self.for_each_pod_in(None, None, field_selector, each).await
    }

    /// [`Cluster::for_each_pod`] in one namespace and/or matching a label selector, both
    /// applied by the API server.
    pub async fn for_each_pod_in(
        &self,
        namespace: Option<&str>,
        label_selector: Option<&str>,
        field_selector: Option<&str>,
        each: &mut dyn FnMut(Value),
    ) -> Result<ListStats> {
        let api: Api<DynamicObject> = match namespace {
            Some(ns) => Api::namespaced_with(self.client.clone(), ns, &pods_resource()),
            None => Api::all_with(self.client.clone(), &pods_resource()),
        };
        let mut lp = ListParams::default().limit(PAGE_SIZE);
        if let Some(fs) = field_selector {
            lp = lp.fields(fs);
        }
        if let Some(ls) = label_selector {
            lp = lp.labels(ls);
        }
        self.list_pages(&api, &lp, &mut |pod| {
            let mut v = pod;
            if let Value::Object(m) = &mut v {
                m.entry("kind").or_insert_with(|| "Pod".into());
            }
            each(v)
        })
        .await
        .map_err(|e| self.error("listing pods", e))
    }

    async fn list_pages(
        &self,
        api: &Api<DynamicObject>,
        params: &ListParams,
        each: &mut dyn FnMut(Value),
    ) -> std::result::Result<ListStats, kube::Error> {
        let mut stats = ListStats::default();
        let mut seen: HashSet<String> = HashSet::new();
        let mut token: Option<String> = None;
        loop {
            let mut lp = params.clone();
            if let Some(t) = &token {
                lp = lp.continue_token(t);
            }
            let page = match self.page(api, &lp, &mut stats).await {
                Ok(p) => p,
                Err(kube::Error::Api(s))
                    if s.code == 410
                        && token.is_some()
                        && (stats.restarts as usize) < MAX_RESTARTS =>
                {
                    // The continue token expired: list again from the start, skipping what we have.
                    stats.restarts += 1;
                    token = None;
                    continue;
                }
                Err(e) => return Err(e),
            };
            stats.pages += 1;
            for obj in page.items {
                let uid = obj.metadata.uid.clone().unwrap_or_default();
                if !uid.is_empty() && !seen.insert(uid) {
                    continue;
                }
                match serde_json::to_value(&obj) {
                    Ok(v) => {
                        stats.pods += 1;
                        each(v)
                    }
                    Err(e) => return Err(kube::Error::SerdeError(e)),
                }
            }
            token = page.metadata.continue_.filter(|t| !t.is_empty());
            if token.is_none() {
                return Ok(stats);
            }
        }
    }

    async fn page(
        &self,
        api: &Api<DynamicObject>,
        lp: &ListParams,
        stats: &mut ListStats,
    ) -> std::result::Result<kube::api::ObjectList<DynamicObject>, kube::Error> {
        retrying(&mut stats.retries, || api.list(lp)).await
    }
}

/// `request`, tried again after a server error (5xx) up to [`MAX_RETRIES`] times, a little later
/// each time; `retries` counts the tries again. Not after 429, 503 or 504: the kube client has
/// already retried those (its default `RetryPolicy::server_retry`, honouring `Retry-After`), and
/// trying its whole round again would multiply the wait.
async fn retrying<T, F, Fut>(
    retries: &mut u64,
    mut request: F,
) -> std::result::Result<T, kube::Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = std::result::Result<T, kube::Error>>,
{
    let mut attempt = 0;
    loop {
        match request().await {
            Err(kube::Error::Api(s))
                if s.code >= 500 && !matches!(s.code, 503 | 504) && attempt < MAX_RETRIES =>
            {
                attempt += 1;
                *retries += 1;
                tokio::time::sleep(Duration::from_millis(200 * attempt as u64)).await;
            }
            other => return other,
        }
    }
}

/// One object as JSON, `None` when it does not exist; an error as one line saying `what` failed.
async fn get_value(
    api: &Api<DynamicObject>,
    name: &str,
    what: &str,
) -> std::result::Result<Option<Value>, String> {
    let found = retrying(&mut 0, || api.get_opt(name)).await;
    match found.map_err(|e| failed(what, e))? {
        None => Ok(None),
        Some(o) => serde_json::to_value(&o)
            .map(Some)
            .map_err(|e| format!("{what}: {e}")),
    }
}

/// A request that failed, as one line: `what`, then the API server's status or why it could
/// not be reached.
fn failed(what: &str, e: kube::Error) -> String {
    match e {
        kube::Error::Api(s) => format!("{what}: {} {} ({})", s.code, s.reason, s.message),
        other => format!(
            "{what}: cannot reach the API server: {}",
            crate::error::causes(&other)
        ),
    }
}
