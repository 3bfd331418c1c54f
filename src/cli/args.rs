//! The command line's arguments (clap): one struct per subcommand, shared groups flattened in.

use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};

use crate::agent::kubelet_health::KubeletGuard;
use crate::cli::output::Format;

#[derive(Parser)]
#[command(
    name = "kubehash",
    version,
    args_override_self = true,
    about = "Exact kubelet container hashes, and in-place kubelet upgrades without container restarts"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand)]
pub enum Command {
    /// Compute the io.kubernetes.container.hash (and hashWithoutResources) that kubelet versions
    /// store for each container.
    ///
    /// Reads a Pod, a PodList (kubectl get pods -o json), a container object, or JSON Lines of
    /// {"id":…,"container":{…}} records.
    ///
    /// Exit codes: 0 every container hashed; 1 unusable input or flags (nothing printed), or some
    /// container could not be hashed (its row names the error, the others are printed).
    Hash(HashArgs),

    /// Report which containers a kubelet upgrade would restart, per node and workload.
    ///
    /// Pod specs come from saved JSON or YAML (kubectl get pods -A -o json, single pods, or a
    /// directory of them) or, with --cluster, from the API server. The source version is --from,
    /// or each node's kubeletVersion from --nodes (kubectl get nodes -o json) or the API server.
    ///
    /// Exit codes: 0 done; 1 unusable input or flags, or the API server unreachable; 2 some
    /// containers could not be assessed;
    /// 3 with --fail-on-restart, some container would restart or be recreated with its static
    /// pod (with --cri: even after `node apply`).
    Scan(ScanArgs),

    /// The restart table for every upgrade step between the given versions, for a set of pods:
    /// restarted, recreated, kept and not running, as scan counts them.
    ///
    /// Pods come from a file, as scan's, or with --cluster from the API server.
    ///
    /// Exit codes: 0 done; 1 unusable input or flags, or the API server unreachable; 2 some
    /// containers could not be hashed, or some objects were not counted (each named).
    Matrix(MatrixArgs),

    /// The node agent: make an in-place kubelet upgrade restart-free by rewriting verified
    /// hashes in containerd (stop kubelet → apply → restart containerd → verify → new kubelet).
    Node {
        #[command(subcommand)]
        command: NodeCommand,
    },

    /// A CRI proxy for the new kubelet that shows it the hash it expects for every container that
    /// provably runs its current spec: no writes to the runtime, no runtime restart.
    ///
    /// Point the kubelet at it with --container-runtime-endpoint=unix:///run/kubehash/cri.sock.
    /// It plans once (like `node plan`) and keeps its decisions in --state, so a restart of the
    /// shim or an API-server outage never changes what the kubelet sees. Remove it (point the
    /// kubelet back at the runtime) after `node apply` has persisted the hashes, or when
    /// `kubehash shim --status` reports that no translated container is left.
    Shim(ShimArgs),

    /// Prove which containers an upgrade restarted: snapshot this node's running containers
    /// before it, compare after it (and with the node plan made before, check the prediction).
    ///
    /// Exit codes of compare: 0 every container kept; 1 unusable input; 3 a container restarted,
    /// its pod was recreated, or it is gone.
    Audit {
        #[command(subcommand)]
        command: AuditCommand,
    },

    /// Run as a DaemonSet pod: plan when the Node gets the target-version annotation, apply while
    /// the kubelet is down, verify when it is back. See deploy/.
    Agent(AgentArgs),

    /// Print a shell completion script for kubehash's commands and flags.
    ///
    /// bash: `source <(kubehash completion bash)`, or write it to
    /// /etc/bash_completion.d/kubehash; zsh: `kubehash completion zsh > "${fpath[1]}/_kubehash"`;
    /// fish: `kubehash completion fish > ~/.config/fish/completions/kubehash.fish`.
    ///
    /// Exit codes: 0 the script printed; 1 a shell it does not know.
    Completion(CompletionArgs),
}

#[derive(clap::Args)]
pub struct CompletionArgs {
    /// The shell to complete in.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

#[derive(clap::Args)]
pub struct AgentArgs {
    /// This node's name (the downward API's spec.nodeName, in NODE_NAME).
    #[arg(long, env = "NODE_NAME", value_name = "NAME")]
    pub node_name: String,
    /// Kubeconfig (default: in-cluster service account, or the usual kubeconfig).
    #[arg(long, value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,
    /// CRI endpoint.
    #[arg(long, value_name = "ENDPOINT", default_value = DEFAULT_ENDPOINT)]
    pub cri: String,
    /// containerd's own API endpoint.
    #[arg(long, value_name = "ENDPOINT", default_value = DEFAULT_ENDPOINT)]
    pub containerd: String,
    /// Where plans, pod specs, journals and the agent's state live.
    #[arg(long, value_name = "DIR", default_value = "/var/lib/kubehash")]
    pub state_dir: PathBuf,
    /// The kubelet's healthz URL.
    #[arg(
        long,
        value_name = "URL",
        default_value = "http://127.0.0.1:10248/healthz"
    )]
    pub kubelet_healthz: String,
    /// The kubelet binary on the host (mount it read-only): apply waits until it reports the
    /// target version.
    #[arg(long, value_name = "PATH", default_value = "/usr/bin/kubelet")]
    pub kubelet_binary: PathBuf,
    /// The static pod manifests (mount read-write): apply pins each static pod's running UID
    /// into its manifest (`metadata.uid`, nothing else) before rewriting its containers' hashes.
    #[arg(long, value_name = "DIR", default_value = crate::source::manifests::DEFAULT_DIR)]
    pub manifests: PathBuf,
    /// Where preflight reads the node's cgroups and kubelet files (mount them from the host).
    #[command(flatten)]
    pub host: HostArgs,
    /// How long the kubelet must be down before apply runs.
    #[arg(long, value_name = "SECONDS", default_value_t = 15)]
    pub grace_seconds: u64,
    /// How often to look at the Node and the kubelet.
    #[arg(long, value_name = "MILLISECONDS", default_value_t = 2000)]
    pub poll_ms: u64,
    /// The Node annotation that carries the target kubelet version.
    #[arg(long, default_value = crate::agent::reconcile::TARGET_ANNOTATION)]
    pub annotation: String,
    /// Restart containerd after apply with this command (e.g. `systemctl restart containerd`,
    /// or `nsenter -t 1 -m -- systemctl restart containerd` from a pod with host PID), and again
    /// after a rollback that restored a record.
    #[arg(long, value_name = "COMMAND")]
    pub restart_containerd: Option<String>,
    /// How long --restart-containerd may take before it is killed (the agent then fails).
    #[arg(long, value_name = "SECONDS", default_value_t = 120)]
    pub restart_timeout_seconds: u64,
    /// /healthz answers 503 when the agent's loop has not turned for this long.
    #[arg(long, value_name = "SECONDS", default_value_t = 300)]
    pub stuck_seconds: u64,
    /// Seconds after verifying the new kubelet to audit the upgrade: which containers that ran
    /// before apply still run, restarted or were recreated, against the plan (Event
    /// KubehashAudited, `audit-<T>.json` in the state directory). The same after a rollback,
    /// without the plan (`audit-<T>-rolled-back.json`).
    #[arg(long, value_name = "SECONDS", default_value_t = 60)]
    pub audit_after_seconds: u64,
    /// Publish what would be done; write nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Address for /metrics and /healthz.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:9808")]
    pub listen: String,
    /// Log format on stderr.
    #[arg(long, value_enum, default_value_t = LogFormat::Json)]
    pub log_format: LogFormat,
}

#[derive(clap::Args)]
pub struct ShimArgs {
    /// Where the kubelet connects.
    #[arg(
        long,
        value_name = "ENDPOINT",
        default_value = "unix:///run/kubehash/cri.sock"
    )]
    pub listen: String,
    /// The real runtime's CRI endpoint.
    #[arg(long, value_name = "ENDPOINT", default_value = DEFAULT_ENDPOINT)]
    pub runtime_endpoint: String,
    /// The new kubelet's version (needed to make the state; checked against an existing one).
    #[arg(long, value_name = "VERSION")]
    pub to: Option<String>,
    /// The kubelet version that created the containers.
    #[arg(long, value_name = "VERSION")]
    pub from: Option<String>,
    /// Where to plan from (only when there is no state file yet).
    #[command(flatten)]
    pub source: PodSource,
    /// The shim's decisions (container id + stored hash → translated hash). Beside it, when it
    /// plans before serving, what runs and the plan, for `kubehash audit compare --shim-state`.
    #[arg(
        long,
        value_name = "PATH",
        default_value = "/var/lib/kubehash/shim-state.json"
    )]
    pub state: PathBuf,
    /// Mode of the listening socket, in octal.
    #[arg(long, value_name = "OCTAL", default_value = "600")]
    pub socket_mode: String,
    /// Kubelet connections served at once.
    #[arg(long, value_name = "N", default_value_t = 64)]
    pub max_connections: usize,
    /// Close a connection that has not finished the HTTP/2 handshake after this long.
    #[arg(long, value_name = "SECONDS", default_value_t = 10)]
    pub handshake_timeout_seconds: u64,
    /// Close a connection with no call for this long (the kubelet reconnects).
    #[arg(long, value_name = "SECONDS", default_value_t = 600)]
    pub idle_timeout_seconds: u64,
    /// Without a plan yet, try to make one this often (serving pass-through meanwhile).
    #[arg(long, value_name = "SECONDS", default_value_t = 5)]
    pub plan_retry_seconds: u64,
    /// The kubelet's healthz URL. Something answering there when the shim first plans, with no
    /// kubelet process in sight to say which it is, may be the new kubelet (in a PID namespace
    /// the shim does not see): the shim then records nothing for the audit.
    #[arg(
        long,
        value_name = "URL",
        default_value = "http://127.0.0.1:10248/healthz"
    )]
    pub kubelet_healthz: String,
    /// Report how many translated containers are still running, and exit.
    #[arg(long)]
    pub status: bool,
    /// Log format on stderr.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
}

#[derive(Subcommand)]
pub enum NodeCommand {
    /// Read-only: this node's containers over CRI, joined to their pods, a verdict each.
    ///
    /// Exit codes: 0 every container has a verdict; 1 unusable input or flags, or the runtime or
    /// API server unreachable; 2 some container's spec does not decode (verdict `error`).
    Plan(NodePlanArgs),
    /// Rewrite the stored hash of every `rewrite` container in containerd (kubelet stopped).
    ///
    /// Journals every old and new value first (fsync), validates every new value, reads every
    /// record back, and is safe to run again. Then restart containerd and run `node verify`
    /// (`--restart-containerd` does both).
    ///
    /// Exit codes: 0 done; 1 unusable input or flags, or an error that stopped the run (what was
    /// written is in the journal; with --restart-containerd, also a restart that failed or a
    /// runtime that did not answer after it); 2 some container not written, or writing stopped
    /// because the evidence went (each listed), or after --restart-containerd CRI does not
    /// report every new hash.
    Apply(NodeApplyArgs),
    /// Check a journal's containers: record as written, and CRI reporting the new hash. After a
    /// rollback: record holding its original, and CRI reporting the original hash.
    ///
    /// Exit codes: 0 every container verified; 1 unusable input (a journal that does not
    /// validate, the runtime unreachable); 2 some container not as written, or after a rollback
    /// not as it was (each listed).
    Verify(NodeJournalArgs),
    /// Restore the original values from a journal (only records still holding kubehash's value).
    ///
    /// With the pods (`-i` or `--cluster`, as for apply), each original is also proved against its
    /// container's spec: kubelet TO's hash of it is the written hash, kubelet FROM's the original's.
    /// Then restart containerd and run `node verify`, so that CRI reports them
    /// (`--restart-containerd` does both).
    ///
    /// Exit codes: 0 every record restored or already original; 1 unusable input (a journal that
    /// does not validate, the runtime unreachable), or containerd's restart failed or the runtime
    /// did not answer after it (what was restored is journaled); 2 some record left as written
    /// (each listed, with why), or after --restart-containerd CRI does not report every original
    /// hash.
    Rollback(NodeRollbackArgs),
    /// Read-only: every other reason kubelet TO would kill or recreate this node's pods (cgroups,
    /// admission, sandboxes, resize, checkpoints, refusing to start, volumes it cannot mount,
    /// eviction), one check each.
    ///
    /// Exit codes: 0 no check at or above --fail-on; 1 unusable input; 3 a check at or above it.
    Preflight(NodePreflightArgs),
}

#[derive(Subcommand)]
pub enum AuditCommand {
    /// Record this node's running containers (id, pod, restart count, start time) over CRI.
    Snapshot(AuditSnapshotArgs),
    /// Compare this node's running containers with a snapshot: yours, the one `node apply`
    /// recorded beside the upgrade's journal, or the one the shim recorded beside its state.
    Compare(AuditCompareArgs),
}

#[derive(clap::Args)]
pub struct AuditSnapshotArgs {
    /// CRI endpoint.
    #[arg(long, value_name = "ENDPOINT", default_value = DEFAULT_ENDPOINT)]
    pub cri: String,
    /// Where to write the snapshot.
    #[arg(long, value_name = "PATH")]
    pub out: PathBuf,
}

#[derive(clap::Args)]
pub struct AuditCompareArgs {
    /// CRI endpoint.
    #[arg(long, value_name = "ENDPOINT", default_value = DEFAULT_ENDPOINT)]
    pub cri: String,
    /// The snapshot taken before the upgrade (default: the one `node apply` recorded beside the
    /// upgrade's journal, with its plan).
    #[arg(long, value_name = "PATH", conflicts_with = "journal")]
    pub snapshot: Option<PathBuf>,
    /// The node plan made before the upgrade (`kubehash node plan -o json`), to check each
    /// container against what kubehash predicted (default with a journal: apply's plan).
    #[arg(long, value_name = "PATH")]
    pub plan: Option<PathBuf>,
    /// The upgrade's journal, beside which `node apply` recorded the snapshot and the plan
    /// (default: in JOURNAL_DIR, the one whose last apply began last).
    #[arg(long, value_name = "PATH")]
    pub journal: Option<PathBuf>,
    /// Where journals live.
    #[arg(long, value_name = "DIR", default_value = crate::rewrite::journal::DEFAULT_DIR)]
    pub journal_dir: PathBuf,
    /// For an upgrade made through `kubehash shim`: its state file (`--state`), beside which the
    /// shim recorded the snapshot and its plan when it planned, before serving.
    #[arg(long, value_name = "PATH", conflicts_with_all = ["journal", "snapshot"])]
    pub shim_state: Option<PathBuf>,
    /// Output format.
    #[arg(short, long, value_enum, default_value_t = Format::Table)]
    pub output: Format,
}

/// Where preflight reads the node's own files.
#[derive(clap::Args)]
pub struct HostArgs {
    /// The cgroup mount.
    #[arg(long, value_name = "DIR", default_value = "/sys/fs/cgroup")]
    pub cgroup_root: PathBuf,
    /// The kubelet's root directory (its checkpoints).
    #[arg(long, value_name = "DIR", default_value = "/var/lib/kubelet")]
    pub kubelet_root: PathBuf,
    /// The kubelet's config file.
    #[arg(
        long,
        value_name = "PATH",
        default_value = "/var/lib/kubelet/config.yaml"
    )]
    pub kubelet_config: PathBuf,
    /// A file of kubelet flags (`VAR="…"` lines: kubeadm's `KUBELET_KUBEADM_ARGS`, the
    /// packages' `KUBELET_EXTRA_ARGS`, kubespray's `kubelet.env`), again for each file, in the order the kubelet's unit
    /// passes them (a later flag overrides); files that do not exist are skipped.
    #[arg(
        long,
        value_name = "PATH",
        default_values = crate::source::host::KUBELET_FLAG_FILES
    )]
    pub kubelet_flags: Vec<PathBuf>,
}

impl PodSource {
    /// Whether pods come from the API server (`--cluster`, or a kubeconfig or context given).
    pub fn from_cluster(&self) -> bool {
        self.cluster || self.kubeconfig.is_some() || self.context.is_some()
    }
}

impl HostArgs {
    pub fn paths(&self) -> crate::source::host::HostPaths {
        crate::source::host::HostPaths {
            cgroup_root: self.cgroup_root.clone(),
            kubelet_root: self.kubelet_root.clone(),
            kubelet_config: self.kubelet_config.clone(),
            kubelet_flags: self.kubelet_flags.clone(),
        }
    }
}

/// The lowest check result that makes `preflight` exit 3.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum FailOn {
    Fail,
    Warn,
    Unknown,
}

#[derive(clap::Args)]
pub struct NodePreflightArgs {
    /// Target kubelet version.
    #[arg(long, value_name = "VERSION")]
    pub to: String,
    /// The kubelet version running now (default with --cluster: the Node's kubeletVersion).
    #[arg(long, value_name = "VERSION")]
    pub from: Option<String>,
    /// CRI endpoint.
    #[arg(long, value_name = "ENDPOINT", default_value = DEFAULT_ENDPOINT)]
    pub cri: String,
    /// This node's pods and Node object: optional; checks that need them say `unknown` without.
    #[command(flatten)]
    pub source: PodSource,
    #[command(flatten)]
    pub host: HostArgs,
    /// Exit 3 when a check is at least this bad.
    #[arg(long, value_enum, default_value_t = FailOn::Fail)]
    pub fail_on: FailOn,
    /// Output format.
    #[arg(short, long, value_enum, default_value_t = Format::Table)]
    pub output: Format,
}

#[derive(clap::Args)]
pub struct PodSource {
    /// Pods: a PodList/List or Pod file (JSON or YAML), a directory of them, or `-` for stdin
    /// (`scan` keeps it while it is read, past its first 4 MiB in a temporary file in $TMPDIR).
    #[arg(
        short = 'i',
        long = "pods",
        value_name = "PATH",
        conflicts_with = "cluster"
    )]
    pub pods: Option<PathBuf>,
    /// Read pods from the API server instead (with --cri and node commands only this node's; for
    /// a cluster-wide scan without --from or --nodes, node versions too).
    #[arg(long)]
    pub cluster: bool,
    /// PersistentVolumes and PersistentVolumeClaims (`kubectl get pv,pvc -A -o json`), so that
    /// the volumes check (scan with --nodes, node plan, node preflight) judges the volume behind
    /// each claim of the pods read from --pods (with --cluster they are read from the API server).
    #[arg(
        long,
        value_name = "PATH",
        conflicts_with_all = ["cluster", "kubeconfig", "context"]
    )]
    pub claims: Option<PathBuf>,
    /// Kubeconfig (default: $KUBECONFIG, ~/.kube/config, or in-cluster); implies --cluster.
    #[arg(long, value_name = "PATH", conflicts_with = "pods")]
    pub kubeconfig: Option<PathBuf>,
    /// Kubeconfig context; implies --cluster.
    #[arg(long, value_name = "NAME", conflicts_with = "pods")]
    pub context: Option<String>,
    /// With --cri and node commands: this node's name, to list only its pods (default: the
    /// hostname; either lower-cased, as the kubelet makes its node name).
    #[arg(long, value_name = "NAME")]
    pub node_name: Option<String>,
    /// The static pod manifests: node commands pin the UID of each static pod they run (apply
    /// writes `metadata.uid` and, in block YAML, a comment beside it saying why; nothing else)
    /// and prove its containers against its manifest, as the shim does; scan counts a static pod
    /// whose manifest here pins its UID like any other pod (others are recreated by a new
    /// kubelet).
    #[arg(long, value_name = "DIR", default_value = crate::source::manifests::DEFAULT_DIR)]
    pub manifests: PathBuf,
}

#[derive(clap::Args)]
#[command(group(clap::ArgGroup::new("pod-source").args(["pods", "cluster", "kubeconfig", "context"]).required(true).multiple(true)))]
pub struct NodePlanArgs {
    /// Target kubelet version.
    #[arg(long, value_name = "VERSION")]
    pub to: String,
    /// The kubelet version running now (default with --cluster: the Node's kubeletVersion).
    /// Without it nothing is provable: every container whose hash changes is `unprovable`.
    #[arg(long, value_name = "VERSION")]
    pub from: Option<String>,
    /// CRI endpoint.
    #[arg(long, value_name = "ENDPOINT", default_value = DEFAULT_ENDPOINT)]
    pub cri: String,
    #[command(flatten)]
    pub source: PodSource,
    /// Where the preflight checks in the plan read the node's files.
    #[command(flatten)]
    pub host: HostArgs,
    /// Output format.
    #[arg(short, long, value_enum, default_value_t = Format::Table)]
    pub output: Format,
}

#[derive(clap::Args)]
pub struct NodeApplyArgs {
    #[command(flatten)]
    pub plan: NodePlanArgs,
    /// containerd's own API endpoint (usually the same socket as CRI).
    #[arg(long, value_name = "ENDPOINT", default_value = DEFAULT_ENDPOINT)]
    pub containerd: String,
    /// Journal file (default: JOURNAL_DIR/FROM-to-TO.jsonl, one per upgrade, continued by
    /// every run).
    #[arg(long, value_name = "PATH")]
    pub journal: Option<PathBuf>,
    /// Where journals live.
    #[arg(long, value_name = "DIR", default_value = crate::rewrite::journal::DEFAULT_DIR)]
    pub journal_dir: PathBuf,
    #[command(flatten)]
    pub kubelet: KubeletArgs,
    /// Restart containerd afterwards, then check that CRI reports every new hash (exit 2 if
    /// not: do not start the new kubelet yet). Alone, through systemd (`systemctl restart
    /// containerd`); `--restart-containerd=COMMAND` runs `sh -c COMMAND` instead (e.g.
    /// `--restart-containerd='rc-service containerd restart'`).
    #[arg(long, value_name = "COMMAND", num_args = 0..=1, require_equals = true, conflicts_with = "pins_only")]
    pub restart_containerd: Option<Option<String>>,
    /// Only pin static pods' UIDs in their manifests; rewrite no hash. Harmless to a running
    /// kubelet (it derives the very UID pinned), so it runs while the kubelet does.
    #[arg(long)]
    pub pins_only: bool,
    /// Log format on stderr.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
}

/// How node commands that write make sure no kubelet runs.
#[derive(clap::Args)]
pub struct KubeletArgs {
    /// Go on even though a kubelet is running.
    #[arg(long)]
    pub force: bool,
    /// The kubelet's healthz URL: anything answering there counts as a running kubelet.
    #[arg(
        long,
        value_name = "URL",
        default_value = "http://127.0.0.1:10248/healthz"
    )]
    pub kubelet_healthz: String,
}

impl KubeletArgs {
    /// The guard; a healthz URL it could not read is refused, never taken for "no kubelet".
    pub fn guard(&self) -> anyhow::Result<KubeletGuard> {
        crate::cli::support::healthz_flag(&self.kubelet_healthz)?;
        Ok(KubeletGuard {
            healthz: Some(self.kubelet_healthz.clone()),
            force: self.force,
            forced_past: None,
        })
    }
}

#[derive(clap::Args)]
pub struct NodeJournalArgs {
    /// The journal of the upgrade (default: in JOURNAL_DIR, the one whose last apply began last;
    /// it holds every write of that upgrade).
    #[arg(long, value_name = "PATH")]
    pub journal: Option<PathBuf>,
    /// Where journals live.
    #[arg(long, value_name = "DIR", default_value = crate::rewrite::journal::DEFAULT_DIR)]
    pub journal_dir: PathBuf,
    #[command(flatten)]
    pub kubelet: KubeletArgs,
    /// CRI endpoint.
    #[arg(long, value_name = "ENDPOINT", default_value = DEFAULT_ENDPOINT)]
    pub cri: String,
    /// containerd's own API endpoint.
    #[arg(long, value_name = "ENDPOINT", default_value = DEFAULT_ENDPOINT)]
    pub containerd: String,
    /// Output format.
    #[arg(short, long, value_enum, default_value_t = Format::Table)]
    pub output: Format,
    /// Log format on stderr.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
}

#[derive(clap::Args)]
pub struct NodeRollbackArgs {
    #[command(flatten)]
    pub journal: NodeJournalArgs,
    /// The pods, to prove each original against its container's spec as it is now (optional;
    /// without them, against the spec apply journaled with the write, and a write journaled
    /// without one is not restored).
    #[command(flatten)]
    pub source: PodSource,
    /// When a record was restored, restart containerd so that CRI reports the original hashes
    /// again, then check that it does (exit 2 if not: do not start the old kubelet yet). Alone,
    /// through systemd (`systemctl restart containerd`); `--restart-containerd=COMMAND` runs
    /// `sh -c COMMAND` instead.
    #[arg(long, value_name = "COMMAND", num_args = 0..=1, require_equals = true)]
    pub restart_containerd: Option<Option<String>>,
}

impl PodSource {
    /// Whether pods were given (a file, or the API server).
    pub fn given(&self) -> bool {
        self.pods.is_some() || self.cluster || self.kubeconfig.is_some() || self.context.is_some()
    }
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

pub const DEFAULT_ENDPOINT: &str = "unix:///run/containerd/containerd.sock";

#[derive(clap::Args)]
#[command(group(clap::ArgGroup::new("pod-source").args(["pods", "cluster", "kubeconfig", "context"]).required(true).multiple(true)))]
pub struct ScanArgs {
    /// Target kubelet version.
    #[arg(long, value_name = "VERSION")]
    pub to: String,

    /// Source kubelet version for every node (instead of --nodes).
    #[arg(long, value_name = "VERSION", conflicts_with = "nodes")]
    pub from: Option<String>,

    #[command(flatten)]
    pub source: PodSource,

    /// Nodes (kubectl get nodes -o json), for each node's kubelet version.
    #[arg(long, value_name = "PATH")]
    pub nodes: Option<PathBuf>,

    /// Node-local mode: read this node's containers from the CRI runtime at this endpoint
    /// (e.g. unix:///run/containerd/containerd.sock), join them to the pods, and give each one
    /// a verdict: unchanged, rewrite, will-restart, no-pod or error. It reports the whole node,
    /// as `node plan` does: the cluster scan's filters and table options do not apply.
    #[arg(
        long,
        value_name = "ENDPOINT",
        conflicts_with_all = ["namespace", "selector", "only", "sort_by", "nodes"]
    )]
    pub cri: Option<String>,

    /// Output format.
    #[arg(short, long, value_enum, default_value_t = Format::Table)]
    pub output: Format,

    /// Exit with status 3 if any container would be restarted, or recreated with its static
    /// pod, or killed with it. With --cri, any that would be even after `node apply`: a
    /// `will-restart`, `unprovable`, `recreated` or `killed` verdict.
    #[arg(long)]
    pub fail_on_restart: bool,
    #[command(flatten)]
    pub narrow: Narrowing,
    /// List only containers with these verdicts in the table (restart, will-restart,
    /// unprovable, recreated, not-running, kept, error).
    #[arg(
        long,
        value_name = "VERDICT,…",
        value_delimiter = ',',
        ignore_case = true,
        value_parser = ["restart", "will-restart", "unprovable", "recreated", "not-running", "kept", "error"]
    )]
    pub only: Vec<String>,
    /// Sort the container table.
    #[arg(long, value_enum, default_value_t = crate::cli::output::SortBy::Verdict)]
    pub sort_by: crate::cli::output::SortBy,
}

#[derive(clap::Args)]
#[command(group(clap::ArgGroup::new("pod-source").args(["pods", "cluster", "kubeconfig", "context"]).required(true).multiple(true)))]
pub struct MatrixArgs {
    /// Pods: a PodList/List or Pod file (JSON or YAML), a directory of them, or `-` for stdin.
    #[arg(
        short = 'i',
        long = "pods",
        value_name = "PATH",
        conflicts_with = "cluster"
    )]
    pub pods: Option<PathBuf>,
    /// Read pods from the API server instead (listed in pages; -n and -l are applied by it).
    #[arg(long)]
    pub cluster: bool,
    /// Kubeconfig (default: $KUBECONFIG, ~/.kube/config, or in-cluster); implies --cluster.
    #[arg(long, value_name = "PATH", conflicts_with = "pods")]
    pub kubeconfig: Option<PathBuf>,
    /// Kubeconfig context; implies --cluster.
    #[arg(long, value_name = "NAME", conflicts_with = "pods")]
    pub context: Option<String>,

    /// Versions to compare: `all`, a list, or a range.
    #[arg(long, default_value = "all", value_name = "SPEC")]
    pub versions: String,

    /// Output format.
    #[arg(short, long, value_enum, default_value_t = Format::Table)]
    pub output: Format,

    #[command(flatten)]
    pub narrow: Narrowing,
}

/// `-n`, `-A` and `-l`: which pods `scan` and `matrix` read.
#[derive(clap::Args)]
pub struct Narrowing {
    /// Only pods in this namespace (asked of the API server with scan --cluster).
    #[arg(short = 'n', long, value_name = "NAMESPACE")]
    pub namespace: Option<String>,
    /// Pods in every namespace (the default; for kubectl habits).
    #[arg(short = 'A', long, conflicts_with = "namespace")]
    pub all_namespaces: bool,
    /// Only pods whose labels match, as kubectl's `-l` (`app=web,tier!=db,canary`,
    /// `env in (prod,stage)`; asked of the API server with scan --cluster).
    #[arg(short = 'l', long, value_name = "SELECTOR")]
    pub selector: Option<String>,
}

#[derive(clap::Args)]
pub struct HashArgs {
    /// Input file, or a directory of `.json`/`.yaml`/`.yml` files read in name order; `-` or
    /// nothing reads stdin (kept while it is read, past its first 4 MiB in a temporary file in
    /// $TMPDIR).
    #[arg(short, long, value_name = "FILE")]
    pub input: Option<PathBuf>,

    /// Kubelet versions: `all`, a list (`1.12,1.31`), a range (`1.16..1.30`), or a mix.
    #[arg(long, default_value = "all", value_name = "SPEC")]
    pub versions: String,

    /// Output format.
    #[arg(short, long, value_enum, default_value_t = Format::Table)]
    pub output: Format,

    /// Print the exact text kubelet VERSION feeds to FNV-1a for each container, instead of the
    /// hash table (one version, as text: `--versions` and `-o` do not apply).
    #[arg(long, value_name = "VERSION", conflicts_with_all = ["versions", "output"])]
    pub explain: Option<String>,
}
