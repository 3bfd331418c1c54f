//! The restart matrix: for a set of pods and every pair of kubelet versions (A, B), how many of
//! their containers an in-place upgrade A → B would restart, by `scan`'s rules: a running
//! container whose hash differs is restarted, one that does not run is not (whatever its hash),
//! and a running static pod's are recreated with it by any other minor. How many hashes differ,
//! running or not, is counted too.
//!
//! Each container is hashed once for all versions; pairs are then compared. Containers that
//! cannot be hashed are counted apart. An input is read on every core ([`matrix_input`]): the
//! workers split pods into containers and hash them, and the counts are added up in input order,
//! so the matrix is the same whatever the core count.

use std::collections::hash_map::RandomState;
use std::collections::HashSet;

use serde::Serialize;
use serde_json::Value;

use crate::analysis::cache::Memo;
use crate::analysis::listings::{Again, Listing, Seen};
use crate::analysis::runs::a_temporary_file;
use crate::analysis::scan::PodFilter;
use crate::analysis::spill::Spill;
use crate::error::{Error, Problem, Result};
use crate::kubelet::hash::hash_container;
use crate::kubelet::version::KubeletVersion;
use crate::source::parallel::{for_each_placed_object_on_cores, Input};
use crate::source::pods::{pod_containers, PodContainer};
use crate::source::pool::{map_in_order, BATCH};

/// What a kubelet does with a container whose hash changes, by `scan`'s rules
/// ([`crate::analysis::scan::Scanner::assess_pod`]), the same for every pair of versions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Fate {
    /// Restarted when its hash differs.
    Runs,
    /// Not restarted, whatever its hash: its pod has finished, is pending or being deleted, or it
    /// is an init or ephemeral container, or its status says it is not running.
    NotRunning,
    /// A running container of a static pod: recreated with its pod by a kubelet of another minor,
    /// which derives the pod's UID anew.
    Recreated,
}

impl Fate {
    pub fn of(c: &PodContainer) -> Fate {
        match (&c.not_running, &c.static_uid) {
            (Some(_), _) => Fate::NotRunning,
            (None, Some(_)) => Fate::Recreated,
            (None, None) => Fate::Runs,
        }
    }
}

/// Restart counts for every ordered pair of versions.
#[derive(Debug, Clone, Serialize)]
pub struct RestartMatrix {
    pub versions: Vec<String>,
    /// Containers hashed (distinct specs are hashed once but counted each time).
    pub containers: u64,
    /// Containers that could not be hashed (bad specs); not in the counts.
    pub errors: u64,
    /// `changed[i][j]`: containers whose hash differs between `versions[i]` and `versions[j]`,
    /// running or not.
    pub changed: Vec<Vec<u64>>,
    /// `restarted[i][j]`: the running containers (not of a static pod) whose hash differs: the
    /// ones kubelet `versions[j]` restarts where `versions[i]` ran.
    pub restarted: Vec<Vec<u64>>,
    /// Containers of static pods that run: recreated by every upgrade between two versions.
    pub recreated: u64,
    /// Containers that do not run: no upgrade restarts them.
    pub not_running: u64,
    #[serde(skip)]
    hasher: MatrixHasher,
}

/// A container's hashes for a matrix's versions, in their order, specs seen before answered
/// from a memo: what each worker keeps.
#[derive(Debug, Clone)]
pub struct MatrixHasher {
    order: Vec<KubeletVersion>,
    seen: Memo<String, Option<Vec<u32>>>,
}

impl MatrixHasher {
    pub fn new(versions: &[KubeletVersion]) -> Self {
        MatrixHasher {
            order: versions.to_vec(),
            seen: Default::default(),
        }
    }

    /// `None` for a container that cannot be hashed.
    pub fn hashes(&mut self, container: &Value) -> Option<Vec<u32>> {
        let key = container.to_string();
        if let Some(h) = self.seen.get(&key) {
            return h.clone();
        }
        let h = hash_container(container, &self.order, "")
            .ok()
            .map(|h| h.hash.iter().map(|(_, x)| *x).collect::<Vec<u32>>());
        self.seen.insert(key, h.clone());
        h
    }
}

impl RestartMatrix {
    pub fn new(versions: &[KubeletVersion]) -> Self {
        RestartMatrix {
            versions: versions.iter().map(ToString::to_string).collect(),
            containers: 0,
            errors: 0,
            changed: vec![vec![0; versions.len()]; versions.len()],
            restarted: vec![vec![0; versions.len()]; versions.len()],
            recreated: 0,
            not_running: 0,
            hasher: MatrixHasher::new(versions),
        }
    }

    /// Adds one container spec, of `fate`.
    pub fn add(&mut self, container: &Value, fate: Fate) {
        let hashes = self.hasher.hashes(container);
        self.count(hashes.as_deref(), fate);
    }

    /// Counts one container of `fate` by its hashes ([`MatrixHasher::hashes`]; `None`: not
    /// hashed).
    pub fn count(&mut self, hashes: Option<&[u32]>, fate: Fate) {
        let Some(h) = hashes else {
            self.errors += 1;
            return;
        };
        self.containers += 1;
        match fate {
            Fate::Runs => {}
            Fate::NotRunning => self.not_running += 1,
            Fate::Recreated => self.recreated += 1,
        }
        for i in 0..h.len() {
            for j in 0..h.len() {
                if h[i] != h[j] {
                    self.changed[i][j] += 1;
                    if fate == Fate::Runs {
                        self.restarted[i][j] += 1;
                    }
                }
            }
        }
    }

    /// Upgrading `versions[i]` → `versions[j]`.
    pub fn step(&self, i: usize, j: usize) -> Step {
        let (restart, recreated) = match i == j {
            true => (0, 0),
            false => (self.restarted[i][j], self.recreated),
        };
        Step {
            from: self.versions[i].clone(),
            to: self.versions[j].clone(),
            restart,
            recreated,
            kept: self.containers - self.not_running - restart - recreated,
            not_running: self.not_running,
            hash_changed: self.changed[i][j],
        }
    }

    /// The rows people usually want: each step to the next listed version, then the first to
    /// the last.
    pub fn steps(&self) -> Vec<Step> {
        let n = self.versions.len();
        let mut out: Vec<(usize, usize)> = (1..n).map(|i| (i - 1, i)).collect();
        if n > 2 {
            out.push((0, n - 1));
        }
        let mut seen = HashSet::new();
        out.into_iter()
            .filter(|p| seen.insert(*p))
            .map(|(i, j)| self.step(i, j))
            .collect()
    }
}

/// One upgrade's counts, as `scan --from FROM --to TO` counts the same pods.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Step {
    pub from: String,
    pub to: String,
    /// Running containers whose hash differs.
    pub restart: u64,
    /// Running containers of static pods.
    pub recreated: u64,
    /// Running containers whose hash is the same.
    pub kept: u64,
    pub not_running: u64,
    /// Containers whose hash differs, running or not.
    pub hash_changed: u64,
}

/// The matrix of every container of the pods in `input` (those `keep` keeps, when given), read
/// and hashed on `workers` threads (none: all on this thread), and why each object that is not a
/// pod was not counted, in input order (on disk past a size: a file may hold any number of
/// them). A pod listed twice counts once ([`crate::analysis::listings`]).
pub fn matrix_input(
    input: &Input,
    versions: &[KubeletVersion],
    workers: usize,
    keep: Option<&PodFilter>,
) -> Result<(RestartMatrix, Spill<String>)> {
    let mut tally = Tally::new(versions);
    let keys = RandomState::new();
    // An object that is not a pod is named by its file and its place there.
    let worker = |source: &str| {
        let (mut hasher, source) = (MatrixHasher::new(versions), source.to_string());
        let keys = &keys;
        move |n, pod: Value| {
            // As scan does: the object is dropped before anything is made of it.
            if keep.is_some_and(|keep| !keep(&pod)) {
                return (None, Ok(Vec::new()));
            }
            let listing = Listing::of(&pod);
            let counted = counted(&mut hasher, pod).map_err(|p| p.at(&source, n));
            let listing = listing.map(|l| {
                let mut l = came_to(l, keys, &counted);
                l.placed(&source, n);
                l
            });
            (listing, counted)
        }
    };
    for_each_placed_object_on_cores(input, workers, BATCH, worker, |_, pod| tally.take(pod))?;
    tally.finish()
}

/// [`matrix_input`] of the pods `produce` hands over (one at a time, to the callback it is
/// given, on a thread of its own with workers), such as an API server's list, narrowed where
/// they are listed.
pub fn matrix_source(
    name: &str,
    versions: &[KubeletVersion],
    workers: usize,
    produce: impl FnOnce(&mut dyn FnMut(Value)) -> Result<()> + Send,
) -> Result<(RestartMatrix, Spill<String>)> {
    let mut tally = Tally::new(versions);
    let keys = RandomState::new();
    let worker = || {
        let (mut hasher, keys) = (MatrixHasher::new(versions), &keys);
        move |pod: Value| {
            let listing = Listing::of(&pod);
            let counted = counted(&mut hasher, pod);
            (listing.map(|l| came_to(l, keys, &counted)), counted)
        }
    };
    map_in_order(name, workers, BATCH, produce, worker, |pod| tally.take(pod))?;
    tally.finish()
}

/// A pod's containers, each with its hashes (`None`: not hashed) and its fate.
type Counted = std::result::Result<Vec<(Option<Vec<u32>>, Fate)>, Problem>;

/// `listing` with what its pod came to: its containers' hashes and fates, or its problem.
fn came_to(listing: Listing, keys: &RandomState, counted: &Counted) -> Listing {
    match counted {
        Ok(containers) => listing.came_to(keys, containers),
        Err(p) => listing.came_to(keys, &p.0),
    }
}

fn counted(hasher: &mut MatrixHasher, pod: Value) -> Counted {
    pod_containers(pod).map(|cs| {
        cs.iter()
            .map(|c| (hasher.hashes(&c.json), Fate::of(c)))
            .collect()
    })
}

/// The matrix and the objects not counted, as the pods come in input order.
struct Tally {
    m: RestartMatrix,
    problems: Spill<String>,
    kept: std::io::Result<()>,
    seen: Seen,
}

impl Tally {
    fn new(versions: &[KubeletVersion]) -> Self {
        Tally {
            m: RestartMatrix::new(versions),
            problems: Spill::default(),
            kept: Ok(()),
            seen: Seen::default(),
        }
    }

    /// Counts one pod (a pod listed before counts once), or keeps why it was not counted.
    fn take(&mut self, (listing, pod): (Option<Listing>, Counted)) {
        let problem = match (listing.map(|l| self.seen.again(&l, "hashed")), pod) {
            (Some(Again::Alike), _) => None,
            (Some(Again::Otherwise(why)), _) => Some(why),
            (_, Ok(containers)) => {
                containers
                    .iter()
                    .for_each(|(h, fate)| self.m.count(h.as_deref(), *fate));
                None
            }
            (_, Err(e)) => Some(e.0),
        };
        if let (Some(p), true) = (problem, self.kept.is_ok()) {
            self.kept = self.problems.push(p);
        }
    }

    fn finish(mut self) -> Result<(RestartMatrix, Spill<String>)> {
        let kept = std::mem::replace(&mut self.kept, Ok(()));
        kept.and_then(|()| self.problems.finish())
            .map_err(|source| Error::Io {
                source_name: format!(
                    "the objects not counted (kept past a size in {})",
                    a_temporary_file()
                ),
                source,
            })?;
        Ok((self.m, self.problems))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kubelet::version::parse_version_set;
    use serde_json::json;

    #[test]
    fn epoch_boundaries_change_everything() {
        let vs = parse_version_set("1.15,1.16,1.30,1.31").unwrap();
        let mut m = RestartMatrix::new(&vs);
        m.add(&json!({"name":"a","image":"b"}), Fate::Runs);
        m.add(&json!({"name":"a","image":"b"}), Fate::Runs);
        m.add(&json!({"name":"a","tty":"x"}), Fate::Runs);
        assert_eq!((m.containers, m.errors), (2, 1));
        let steps = m.steps();
        let counts = |s: &Step| (s.from.clone(), s.to.clone(), s.restart, s.kept);
        assert_eq!(counts(&steps[0]), ("1.15".into(), "1.16".into(), 2, 0));
        assert_eq!(counts(&steps[2]), ("1.30".into(), "1.31".into(), 2, 0));
        assert_eq!(counts(&steps[3]), ("1.15".into(), "1.31".into(), 2, 0));
    }

    /// A container that does not run is not restarted and a static pod's is recreated, whatever
    /// their hashes; both still count among the hashes that change.
    #[test]
    fn only_running_containers_restart_and_static_pods_are_recreated() {
        let vs = parse_version_set("1.30,1.31").unwrap();
        let mut m = RestartMatrix::new(&vs);
        for fate in [Fate::Runs, Fate::NotRunning, Fate::Recreated] {
            m.add(&json!({"name":"a","image":"b"}), fate);
        }
        let s = m.step(0, 1);
        assert_eq!(
            (
                s.restart,
                s.recreated,
                s.kept,
                s.not_running,
                s.hash_changed
            ),
            (1, 1, 0, 1, 3)
        );
        // No upgrade, nothing restarted or recreated.
        let s = m.step(1, 1);
        assert_eq!(
            (s.restart, s.recreated, s.kept, s.not_running),
            (0, 0, 2, 1)
        );
    }

    /// Every pair of the matrix counts what `scan --from A --to B` counts of the same pods.
    #[test]
    fn every_pair_is_what_scan_counts() {
        use crate::analysis::scan::{scan_input, FromVersions, ScanSetup};
        use crate::source::manifests::Manifests;
        let pods = concat!(env!("CARGO_MANIFEST_DIR"), "/testdata/cluster/pods.json");
        let input = Input::Path(pods.as_ref());
        let vs = parse_version_set("1.15,1.16,1.26..1.31,1.37").unwrap();
        let (m, _) = matrix_input(&input, &vs, 0, None).unwrap();
        for (i, from) in vs.iter().enumerate() {
            for (j, to) in vs.iter().enumerate() {
                let setup = ScanSetup::new(*to, FromVersions::Fixed(*from), Manifests::none());
                let t = scan_input(setup, |_| {}, "pods".into(), &input)
                    .unwrap()
                    .total;
                let s = m.step(i, j);
                assert_eq!(
                    (s.restart, s.recreated, s.kept, s.not_running),
                    (t.restart, t.recreated, t.kept, t.not_running),
                    "{from} → {to}"
                );
                assert_eq!((m.containers, t.error), (t.containers, 0));
            }
        }
    }

    /// On every core, the matrix and the problems are the ones a single thread finds.
    #[test]
    fn the_same_matrix_on_every_core() {
        let pods = concat!(env!("CARGO_MANIFEST_DIR"), "/testdata/cluster/pods.json");
        let text = std::fs::read_to_string(pods).unwrap();
        // The example's pods, many times (as other pods: a pod listed again counts once), with
        // objects that are not pods among them.
        let many: String = (0..40)
            .map(|i| {
                let text = text.replace("\"uid\": \"", &format!("\"uid\": \"{i}-"));
                format!("{text} {{\"kind\":\"Node\"}} ")
            })
            .collect();
        let input = Input::Bytes {
            name: "t",
            bytes: many.as_bytes(),
        };
        let vs = parse_version_set("1.15,1.16,1.27..1.31").unwrap();
        let one = matrix_input(&input, &vs, 0, None).unwrap();
        for workers in [1, 3] {
            let on_cores = matrix_input(&input, &vs, workers, None).unwrap();
            assert_eq!(on_cores.0.changed, one.0.changed);
            assert_eq!(on_cores.0.restarted, one.0.restarted);
            assert_eq!(
                (on_cores.0.recreated, on_cores.0.not_running),
                (one.0.recreated, one.0.not_running)
            );
            assert_eq!(
                (on_cores.0.containers, on_cores.0.errors),
                (one.0.containers, one.0.errors)
            );
            let problems = |p: &Spill<String>| p.iter().map(Result::unwrap).collect::<Vec<_>>();
            assert_eq!(problems(&on_cores.1), problems(&one.1));
        }
        assert_eq!(one.0.containers, 24 * 40);
        assert_eq!(one.1.len(), 40);
    }
}
