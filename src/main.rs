//! The `kubehash` command line: a thin layer over the library.

use std::io::{self, IsTerminal, Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand, ValueEnum};

/// Scans parse pods on one thread and free them on another; glibc's malloc serialises such
/// cross-thread frees on an arena lock (a fifth of scan time in futex wake-ups). mimalloc does not.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

use kubehash::analysis::matrix::RestartMatrix;
use kubehash::analysis::plan::{plan, PodIndex, Verdict};
use kubehash::analysis::scan::{scan_path, scan_source, FromVersions};
use kubehash::cli::output::{plan_counts, write_plan_table};
use kubehash::cli::output::{
    write_json, write_jsonl, write_matrix_table, write_scan_table, write_table, HashRow,
};
use kubehash::kubelet::hash::{hash_container, hashed_text, marshalled_json, Annotation};
use kubehash::kubelet::sink::format_hash;
use kubehash::kubelet::version::{parse_version_set, KubeletVersion};
use kubehash::runtime::cri::Cri;
use kubehash::shim::proxy::ShimState;
use kubehash::source::cluster::Cluster;
use kubehash::source::input::{for_each_item, read_items, Item};
use kubehash::source::pods::{for_each_object_in_path, pod_containers, NodeVersions};

#[derive(Parser)]
#[command(
    name = "kubehash",
    version,
    args_override_self = true,
    about = "Exact kubelet container hashes, and in-place kubelet upgrades without container restarts"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Compute the io.kubernetes.container.hash (and hashWithoutResources) that kubelet versions
    /// store for each container.
    ///
    /// Reads a Pod, a PodList (kubectl get pods -o json), a container object, or JSON Lines of
    /// {"id":…,"container":{…}} records.
    Hash(HashArgs),

    /// Report which containers a kubelet upgrade would restart, per node and workload.
    ///
    /// Pod specs come from saved JSON (kubectl get pods -A -o json, single pods, or a directory
    /// of .json files). The source version is --from, or each node's kubeletVersion from --nodes
    /// (kubectl get nodes -o json).
    ///
    /// Exit codes: 0 done; 1 unusable input or flags; 2 some containers could not be assessed;
    /// 3 with --fail-on-restart, some container would restart.
    Scan(ScanArgs),

    /// The restart table for every upgrade step between the given versions, for a set of pods.
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

    /// Run as a DaemonSet pod: plan when the Node gets the target-version annotation, apply while
    /// the kubelet is down, verify when it is back. See deploy/.
    Agent(AgentArgs),
}

#[derive(clap::Args)]
struct AgentArgs {
    /// This node's name (the downward API's spec.nodeName, in NODE_NAME).
    #[arg(long, env = "NODE_NAME", value_name = "NAME")]
    node_name: String,
    /// Kubeconfig (default: in-cluster service account, or the usual kubeconfig).
    #[arg(long, value_name = "PATH")]
    kubeconfig: Option<PathBuf>,
    /// CRI endpoint.
    #[arg(long, value_name = "ENDPOINT", default_value = DEFAULT_ENDPOINT)]
    cri: String,
    /// containerd's own API endpoint.
    #[arg(long, value_name = "ENDPOINT", default_value = DEFAULT_ENDPOINT)]
    containerd: String,
    /// Where plans, pod specs, journals and the agent's state live.
    #[arg(long, value_name = "DIR", default_value = "/var/lib/kubehash")]
    state_dir: PathBuf,
    /// The kubelet's healthz URL.
    #[arg(
        long,
        value_name = "URL",
        default_value = "http://127.0.0.1:10248/healthz"
    )]
    kubelet_healthz: String,
    /// The kubelet binary on the host (mount it read-only): apply waits until it reports the
    /// target version.
    #[arg(long, value_name = "PATH", default_value = "/usr/bin/kubelet")]
    kubelet_binary: PathBuf,
    /// The static pod manifests (mount read-only): static pods are rewritten only where the
    /// manifest pins the UID they run under.
    #[arg(long, value_name = "DIR", default_value = kubehash::source::manifests::DEFAULT_DIR)]
    manifests: PathBuf,
    /// How long the kubelet must be down before apply runs.
    #[arg(long, value_name = "SECONDS", default_value_t = 15)]
    grace_seconds: u64,
    /// How often to look at the Node and the kubelet.
    #[arg(long, value_name = "MILLISECONDS", default_value_t = 2000)]
    poll_ms: u64,
    /// The Node annotation that carries the target kubelet version.
    #[arg(long, default_value = kubehash::agent::reconcile::TARGET_ANNOTATION)]
    annotation: String,
    /// Restart containerd after apply with this command (e.g. `systemctl restart containerd`,
    /// or `nsenter -t 1 -m -- systemctl restart containerd` from a pod with host PID).
    #[arg(long, value_name = "COMMAND")]
    restart_containerd: Option<String>,
    /// How long --restart-containerd may take before it is killed (the agent then fails).
    #[arg(long, value_name = "SECONDS", default_value_t = 120)]
    restart_timeout_seconds: u64,
    /// /healthz answers 503 when the agent's loop has not turned for this long.
    #[arg(long, value_name = "SECONDS", default_value_t = 300)]
    stuck_seconds: u64,
    /// Publish what would be done; write nothing.
    #[arg(long)]
    dry_run: bool,
    /// Address for /metrics and /healthz.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:9808")]
    listen: String,
    /// Log format on stderr.
    #[arg(long, value_enum, default_value_t = LogFormat::Json)]
    log_format: LogFormat,
}

#[derive(clap::Args)]
struct ShimArgs {
    /// Where the kubelet connects.
    #[arg(
        long,
        value_name = "ENDPOINT",
        default_value = "unix:///run/kubehash/cri.sock"
    )]
    listen: String,
    /// The real runtime's CRI endpoint.
    #[arg(long, value_name = "ENDPOINT", default_value = DEFAULT_ENDPOINT)]
    runtime_endpoint: String,
    /// The new kubelet's version (needed to make the state; checked against an existing one).
    #[arg(long, value_name = "VERSION")]
    to: Option<String>,
    /// The kubelet version that created the containers.
    #[arg(long, value_name = "VERSION")]
    from: Option<String>,
    /// Where to plan from (only when there is no state file yet).
    #[command(flatten)]
    source: PodSource,
    /// The shim's decisions (container id + stored hash → translated hash).
    #[arg(
        long,
        value_name = "PATH",
        default_value = "/var/lib/kubehash/shim-state.json"
    )]
    state: PathBuf,
    /// Mode of the listening socket, in octal.
    #[arg(long, value_name = "OCTAL", default_value = "600")]
    socket_mode: String,
    /// Kubelet connections served at once.
    #[arg(long, value_name = "N", default_value_t = 64)]
    max_connections: usize,
    /// Close a connection that has not finished the HTTP/2 handshake after this long.
    #[arg(long, value_name = "SECONDS", default_value_t = 10)]
    handshake_timeout_seconds: u64,
    /// Close a connection with no call for this long (the kubelet reconnects).
    #[arg(long, value_name = "SECONDS", default_value_t = 600)]
    idle_timeout_seconds: u64,
    /// Without a plan yet, try to make one this often (serving pass-through meanwhile).
    #[arg(long, value_name = "SECONDS", default_value_t = 5)]
    plan_retry_seconds: u64,
    /// Report how many translated containers are still running, and exit.
    #[arg(long)]
    status: bool,
    /// Log format on stderr.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
}

#[derive(Subcommand)]
enum NodeCommand {
    /// Read-only: this node's containers over CRI, joined to their pods, a verdict each.
    Plan(NodePlanArgs),
    /// Rewrite the stored hash of every `rewrite` container in containerd (kubelet stopped).
    ///
    /// Journals every old and new value first (fsync), validates every new value, reads every
    /// record back, and is safe to run again. Then restart containerd and run `node verify`.
    Apply(NodeApplyArgs),
    /// Check a journal's containers: record as written, and CRI reporting the new hash.
    Verify(NodeJournalArgs),
    /// Restore the original values from a journal (only records still holding kubehash's value).
    Rollback(NodeJournalArgs),
}

#[derive(clap::Args)]
struct PodSource {
    /// Pods: a PodList/List or Pod file (JSON or YAML), a directory of them, or `-` for stdin.
    #[arg(
        short = 'i',
        long = "pods",
        value_name = "PATH",
        conflicts_with = "cluster"
    )]
    pods: Option<PathBuf>,
    /// Read pods from the API server instead (with --cri and node commands only this node's; for
    /// a cluster-wide scan without --from or --nodes, node versions too).
    #[arg(long)]
    cluster: bool,
    /// Kubeconfig for --cluster (default: $KUBECONFIG, ~/.kube/config, or in-cluster).
    #[arg(long, value_name = "PATH", requires = "cluster")]
    kubeconfig: Option<PathBuf>,
    /// Kubeconfig context for --cluster.
    #[arg(long, value_name = "NAME", requires = "cluster")]
    context: Option<String>,
    /// With --cri and node commands: this node's name, to list only its pods (default: the
    /// hostname).
    #[arg(long, value_name = "NAME")]
    node_name: Option<String>,
    /// With --cri and node commands: the static pod manifests, to know which static pods keep
    /// their UID (a manifest that sets metadata.uid); the others are recreated by a new kubelet.
    #[arg(long, value_name = "DIR", default_value = kubehash::source::manifests::DEFAULT_DIR)]
    manifests: PathBuf,
}

#[derive(clap::Args)]
#[command(group(clap::ArgGroup::new("pod-source").args(["pods", "cluster"]).required(true)))]
struct NodePlanArgs {
    /// Target kubelet version.
    #[arg(long, value_name = "VERSION")]
    to: String,
    /// The kubelet version running now (default with --cluster: the Node's kubeletVersion).
    /// Without it nothing is provable: every container whose hash changes is `unprovable`.
    #[arg(long, value_name = "VERSION")]
    from: Option<String>,
    /// CRI endpoint.
    #[arg(long, value_name = "ENDPOINT", default_value = DEFAULT_ENDPOINT)]
    cri: String,
    #[command(flatten)]
    source: PodSource,
    /// Output format.
    #[arg(short, long, value_enum, default_value_t = ScanFormat::Table)]
    output: ScanFormat,
}

#[derive(clap::Args)]
struct NodeApplyArgs {
    #[command(flatten)]
    plan: NodePlanArgs,
    /// containerd's own API endpoint (usually the same socket as CRI).
    #[arg(long, value_name = "ENDPOINT", default_value = DEFAULT_ENDPOINT)]
    containerd: String,
    /// Journal file (default: JOURNAL_DIR/FROM-to-TO.jsonl, one per upgrade, continued by
    /// every run).
    #[arg(long, value_name = "PATH")]
    journal: Option<PathBuf>,
    /// Where journals live.
    #[arg(long, value_name = "DIR", default_value = kubehash::rewrite::journal::DEFAULT_DIR)]
    journal_dir: PathBuf,
    #[command(flatten)]
    kubelet: KubeletArgs,
    /// Restart containerd afterwards through systemd (`systemctl restart containerd`).
    #[arg(long)]
    restart_containerd: bool,
    /// Log format on stderr.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
}

/// How node commands that write make sure no kubelet runs.
#[derive(clap::Args)]
struct KubeletArgs {
    /// Go on even though a kubelet is running.
    #[arg(long)]
    force: bool,
    /// The kubelet's healthz URL: anything answering there counts as a running kubelet.
    #[arg(
        long,
        value_name = "URL",
        default_value = "http://127.0.0.1:10248/healthz"
    )]
    kubelet_healthz: String,
}

impl KubeletArgs {
    fn guard(&self) -> kubehash::rewrite::node::KubeletGuard {
        kubehash::rewrite::node::KubeletGuard {
            healthz: Some(self.kubelet_healthz.clone()),
            force: self.force,
        }
    }
}

#[derive(clap::Args)]
struct NodeJournalArgs {
    /// The journal of the upgrade (default: in JOURNAL_DIR, the one whose last apply began last;
    /// it holds every write of that upgrade).
    #[arg(long, value_name = "PATH")]
    journal: Option<PathBuf>,
    /// Where journals live.
    #[arg(long, value_name = "DIR", default_value = kubehash::rewrite::journal::DEFAULT_DIR)]
    journal_dir: PathBuf,
    #[command(flatten)]
    kubelet: KubeletArgs,
    /// CRI endpoint.
    #[arg(long, value_name = "ENDPOINT", default_value = DEFAULT_ENDPOINT)]
    cri: String,
    /// containerd's own API endpoint.
    #[arg(long, value_name = "ENDPOINT", default_value = DEFAULT_ENDPOINT)]
    containerd: String,
    /// Output format.
    #[arg(short, long, value_enum, default_value_t = ScanFormat::Table)]
    output: ScanFormat,
    /// Log format on stderr.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
}

#[derive(Clone, Copy, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

const DEFAULT_ENDPOINT: &str = "unix:///run/containerd/containerd.sock";

#[derive(clap::Args)]
#[command(group(clap::ArgGroup::new("pod-source").args(["pods", "cluster"]).required(true)))]
struct ScanArgs {
    /// Target kubelet version.
    #[arg(long, value_name = "VERSION")]
    to: String,

    /// Source kubelet version for every node (instead of --nodes).
    #[arg(long, value_name = "VERSION")]
    from: Option<String>,

    #[command(flatten)]
    source: PodSource,

    /// Nodes (kubectl get nodes -o json), for each node's kubelet version.
    #[arg(long, value_name = "PATH")]
    nodes: Option<PathBuf>,

    /// Node-local mode: read this node's containers from the CRI runtime at this endpoint
    /// (e.g. unix:///run/containerd/containerd.sock), join them to the pods, and give each one
    /// a verdict: unchanged, rewrite, will-restart, no-pod or error.
    #[arg(long, value_name = "ENDPOINT")]
    cri: Option<String>,

    /// Output format.
    #[arg(short, long, value_enum, default_value_t = ScanFormat::Table)]
    output: ScanFormat,

    /// Exit with status 3 if any container would be restarted.
    #[arg(long)]
    fail_on_restart: bool,
}

#[derive(Clone, Copy, ValueEnum)]
enum ScanFormat {
    Table,
    Json,
}

#[derive(clap::Args)]
struct MatrixArgs {
    /// Pods: a PodList/List or Pod JSON file, a directory of .json files, or `-` for stdin.
    #[arg(short = 'i', long = "pods", value_name = "PATH")]
    pods: PathBuf,

    /// Versions to compare: `all`, a list, or a range.
    #[arg(long, default_value = "all", value_name = "SPEC")]
    versions: String,

    /// Output format.
    #[arg(short, long, value_enum, default_value_t = ScanFormat::Table)]
    output: ScanFormat,
}

#[derive(clap::Args)]
struct HashArgs {
    /// Input file; `-` or nothing reads stdin.
    #[arg(short, long, value_name = "FILE")]
    input: Option<PathBuf>,

    /// Kubelet versions: `all`, a list (`1.12,1.31`), a range (`1.16..1.30`), or a mix.
    #[arg(long, default_value = "all", value_name = "SPEC")]
    versions: String,

    /// Output format.
    #[arg(short, long, value_enum, default_value_t = Format::Table)]
    output: Format,

    /// Print the exact text kubelet VERSION feeds to FNV-1a for each container, instead of the
    /// hash table.
    #[arg(long, value_name = "VERSION")]
    explain: Option<String>,
}

#[derive(Clone, Copy, ValueEnum)]
enum Format {
    Table,
    Json,
    Jsonl,
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return usage_error(e),
    };
    let result = match cli.command {
        Command::Hash(args) => run_hash(args),
        Command::Scan(args) => run_scan(args),
        Command::Matrix(args) => run_matrix(args),
        Command::Node { command } => run_node(command),
        Command::Shim(args) => run_shim(args),
        Command::Agent(args) => run_agent(args),
    };
    match result {
        Ok(code) => code,
        // `kubehash hash … | head` closing the pipe is not an error worth reporting.
        Err(e)
            if e.downcast_ref::<io::Error>()
                .is_some_and(|e| e.kind() == io::ErrorKind::BrokenPipe) =>
        {
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("kubehash: {}", one_line(&e));
            ExitCode::from(1)
        }
    }
}

/// An error and its causes on one line, each said once: a cause whose text ends the line already
/// (an I/O error that its wrapper quotes) is not repeated.
fn one_line(e: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if line.ends_with(&text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&text);
    }
    line
}

/// `--help` and `--version` print as clap prints them; a usage error is one line on stderr and
/// exit 1 (unusable input or flags), never clap's exit 2, which means "some containers could not
/// be assessed" here.
fn usage_error(e: clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
        let _ = e.print();
        return ExitCode::SUCCESS;
    }
    let text = e.render().to_string();
    let mut lines = text.lines().map(str::trim).skip_while(|l| l.is_empty());
    let mut first = match e.kind() {
        ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => "a subcommand is missing".into(),
        _ => lines
            .next()
            .unwrap_or("bad arguments")
            .trim_start_matches("error: ")
            .to_string(),
    };
    if first.ends_with(':') {
        // "the following required arguments were not provided:" and the list below it.
        let list: Vec<&str> = lines.take_while(|l| !l.is_empty()).collect();
        first = format!("{first} {}", list.join(", "));
    }
    eprintln!("kubehash: {first} (see kubehash --help)");
    ExitCode::from(1)
}

fn read_input(path: &Option<PathBuf>) -> Result<(Vec<u8>, String)> {
    match path {
        None => read_stdin(),
        Some(p) if p.as_os_str() == "-" => read_stdin(),
        Some(p) => {
            let name = p.display().to_string();
            let bytes = std::fs::read(p).with_context(|| format!("cannot read {name}"))?;
            Ok((bytes, name))
        }
    }
}

fn read_stdin() -> Result<(Vec<u8>, String)> {
    let mut bytes = Vec::new();
    io::stdin()
        .read_to_end(&mut bytes)
        .context("cannot read stdin")?;
    Ok((bytes, "stdin".to_string()))
}

fn run_hash(args: HashArgs) -> Result<ExitCode> {
    let versions = parse_version_set(&args.versions)?;
    let explain: Option<KubeletVersion> = args
        .explain
        .as_deref()
        .map(str::parse)
        .transpose()
        .context("--explain")?;
    let (bytes, source) = read_input(&args.input)?;

    let mut out = io::BufWriter::new(io::stdout().lock());
    if let Some(v) = explain {
        let items = read_items(&bytes, &source)?;
        return explain_items(&items, v, &mut out);
    }

    // Items are parsed one at a time and dropped once hashed; only the small rows are kept.
    let mut rows: Vec<HashRow> = Vec::new();
    for_each_item(&bytes, &source, |item| {
        rows.push(match item {
            Item::Container { id, path, json } => HashRow {
                result: hash_container(&json, &versions, &path).map_err(|e| e.to_string()),
                id,
            },
            Item::Invalid { id, error } => HashRow {
                id,
                result: Err(error),
            },
        })
    })?;
    match args.output {
        Format::Table => write_table(&rows, &mut out)?,
        Format::Json => write_json(&rows, &mut out)?,
        Format::Jsonl => write_jsonl(&rows, &mut out)?,
    }
    out.flush()?;
    let failed: Vec<&String> = rows
        .iter()
        .filter_map(|r| r.result.as_ref().err())
        .collect();
    if failed.is_empty() {
        return Ok(ExitCode::SUCCESS);
    }
    const SHOWN: usize = 10;
    for e in failed.iter().take(SHOWN) {
        eprintln!("kubehash: {e}");
    }
    if failed.len() > SHOWN {
        eprintln!(
            "kubehash: … and {} more (all are in the output)",
            failed.len() - SHOWN
        );
    }
    eprintln!(
        "kubehash: {} of {} containers could not be hashed",
        failed.len(),
        rows.len()
    );
    Ok(ExitCode::from(1))
}

fn explain_items(items: &[Item], v: KubeletVersion, out: &mut impl Write) -> Result<ExitCode> {
    let mut annotations = vec![(Annotation::Hash, "io.kubernetes.container.hash")];
    if v.has_hash_without_resources() {
        annotations.push((
            Annotation::HashWithoutResources,
            "io.kubernetes.container.hashWithoutResources",
        ));
    }
    let mut failed = 0;
    for item in items {
        let (id, path, json) = match item {
            Item::Container { id, path, json } => (id, path, json),
            Item::Invalid { error, .. } => {
                eprintln!("kubehash: {error}");
                failed += 1;
                continue;
            }
        };
        for (a, key) in &annotations {
            let text = match hashed_text(json, v, *a, path) {
                Ok(t) => t,
                Err(e) => {
                    eprintln!("kubehash: {e}");
                    failed += 1;
                    break;
                }
            };
            let h = kubehash::kubelet::sink::Fnv32a::hash(&text);
            writeln!(out, "# {id}: kubelet {v} {key} = {}", format_hash(h))?;
            if let Some(j) = marshalled_json(json, v, *a, path)? {
                writeln!(out, "# json.Marshal: {j}")?;
            }
            out.write_all(&text)?;
            out.write_all(b"\n")?;
        }
    }
    out.flush()?;
    if failed > 0 {
        bail!("{failed} containers could not be explained");
    }
    Ok(ExitCode::SUCCESS)
}

fn run_scan(args: ScanArgs) -> Result<ExitCode> {
    let to: KubeletVersion = args.to.parse().context("--to")?;
    if let Some(endpoint) = &args.cri {
        return run_node_scan(&args, endpoint, to);
    }
    let show_progress = io::stderr().is_terminal();
    let progress = |n| {
        if show_progress {
            eprint!("\rkubehash: read {n} objects…");
        }
    };
    let fixed_from = args
        .from
        .as_deref()
        .map(str::parse::<KubeletVersion>)
        .transpose()
        .context("--from")?;
    // --from, else --nodes; without either, the cluster's Node objects (for --cluster).
    let given_from = match (fixed_from, &args.nodes) {
        (Some(f), _) => Some(FromVersions::Fixed(f)),
        (None, Some(path)) => Some(FromVersions::PerNode(NodeVersions::from_path(path)?)),
        (None, None) => None,
    };
    let report = if args.source.cluster {
        let rt = runtime()?;
        let cluster = rt.block_on(Cluster::connect(
            args.source.kubeconfig.as_deref(),
            args.source.context.as_deref(),
        ))?;
        let from = match given_from {
            Some(f) => f,
            None => FromVersions::PerNode(rt.block_on(cluster.node_versions())?),
        };
        scan_source(to, from, progress, cluster.url().to_string(), |each| {
            rt.block_on(cluster.for_each_pod(None, each)).map(|_| ())
        })?
    } else {
        let Some(from) = given_from else {
            bail!(
                "say which kubelet version the nodes run now: --from VERSION, or --nodes FILE \
                 (kubectl get nodes -o json)"
            );
        };
        let pods = args
            .source
            .pods
            .as_deref()
            .context("--pods PATH or --cluster is needed")?;
        scan_path(pods, to, from, progress)?
    };
    if show_progress {
        eprint!("\r\x1b[K");
    }
    if report.total.containers == 0 {
        let source = match (&args.source.pods, args.source.cluster) {
            (Some(p), _) if p.as_os_str() == "-" => "stdin".to_string(),
            (Some(p), _) => p.display().to_string(),
            (None, _) => "the cluster".to_string(),
        };
        let why = match report.problems.first() {
            Some(p) => format!(
                " ({} objects not scanned, the first: {p})",
                report.problems.len()
            ),
            None => String::new(),
        };
        bail!("no pods found in {source}{why}");
    }
    let mut out = io::BufWriter::new(io::stdout().lock());
    match args.output {
        ScanFormat::Table => write_scan_table(&report, &mut out)?,
        ScanFormat::Json => {
            write_json_line(&mut out, &report)?;
        }
    }
    out.flush()?;
    for p in &report.problems {
        eprintln!("kubehash: not scanned: {p}");
    }
    let froms: std::collections::BTreeSet<KubeletVersion> = report
        .nodes
        .values()
        .filter_map(|n| n.from.as_deref()?.parse().ok())
        .collect();
    for from in froms {
        warn_upgrade(from, to);
    }
    if args.fail_on_restart && report.total.restart > 0 {
        return Ok(ExitCode::from(3));
    }
    if report.total.error > 0 || !report.problems.is_empty() {
        return Ok(ExitCode::from(2));
    }
    Ok(ExitCode::SUCCESS)
}

fn run_matrix(args: MatrixArgs) -> Result<ExitCode> {
    let versions = parse_version_set(&args.versions)?;
    let mut m = RestartMatrix::new(&versions);
    let mut problems = Vec::new();
    for_each_object_in_path(&args.pods, |pod| match pod_containers(pod) {
        Ok(cs) => cs.iter().for_each(|c| m.add(&c.json)),
        Err(e) => problems.push(e),
    })?;
    let mut out = io::BufWriter::new(io::stdout().lock());
    match args.output {
        ScanFormat::Table => write_matrix_table(&m, &mut out)?,
        ScanFormat::Json => {
            write_json_line(&mut out, &m)?;
        }
    }
    out.flush()?;
    for p in &problems {
        eprintln!("kubehash: not counted: {p}");
    }
    Ok(if problems.is_empty() && m.errors == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(2)
    })
}

/// `scan --cri`: this node's containers, joined to their pods, with a verdict each.
fn run_node_scan(args: &ScanArgs, endpoint: &str, to: KubeletVersion) -> Result<ExitCode> {
    let from: Option<KubeletVersion> = args
        .from
        .as_deref()
        .map(str::parse)
        .transpose()
        .context("--from")?;
    print_node_plan(
        endpoint,
        to,
        from,
        &args.source,
        args.output,
        args.fail_on_restart,
    )
}

/// This node's pods, from a file or from the API server (filtered to this node), and with
/// `--cluster` the kubelet version the Node reports (the old kubelet's, before the swap).
fn node_pods(
    rt: &tokio::runtime::Runtime,
    source: &PodSource,
) -> Result<(PodIndex, Option<KubeletVersion>)> {
    let (pods, version) = rt.block_on(read_node_pods(source))?;
    for p in &pods.problems {
        eprintln!("kubehash: not a usable pod: {p}");
    }
    Ok((pods, version))
}

async fn read_node_pods(source: &PodSource) -> Result<(PodIndex, Option<KubeletVersion>)> {
    let mut pods = PodIndex::default();
    let mut node_version = None;
    match &source.pods {
        Some(path) => for_each_object_in_path(path, |p| pods.add_pod(p))?,
        None => {
            let node = match &source.node_name {
                Some(n) => n.clone(),
                None => hostname()?,
            };
            let cluster =
                Cluster::connect(source.kubeconfig.as_deref(), source.context.as_deref()).await?;
            let selector = format!("spec.nodeName={node}");
            cluster
                .for_each_pod(Some(&selector), &mut |p| pods.add_pod(p))
                .await?;
            let reported = cluster.node(&node).await?;
            node_version = match reported
                .pointer("/status/nodeInfo/kubeletVersion")
                .and_then(serde_json::Value::as_str)
            {
                Some(v) => Some(
                    v.parse()
                        .with_context(|| format!("Node {node}'s status.nodeInfo.kubeletVersion"))?,
                ),
                None => None,
            };
        }
    }
    Ok((pods, node_version))
}

/// Warnings about the upgrade itself (a downgrade, a jump beyond the version-skew policy), on
/// stderr.
fn warn_upgrade(from: KubeletVersion, to: KubeletVersion) {
    for w in kubehash::kubelet::version::upgrade_warnings(from, to) {
        eprintln!("kubehash: warning: {w}");
    }
}

/// The old kubelet F of the proof rule: `--from`, else the version the Node reports.
fn old_kubelet(
    from: &Option<String>,
    node_version: Option<KubeletVersion>,
) -> Result<Option<KubeletVersion>> {
    match from {
        Some(f) => Ok(Some(f.parse().context("--from")?)),
        None => Ok(node_version),
    }
}

fn print_node_plan(
    endpoint: &str,
    to: KubeletVersion,
    from: Option<KubeletVersion>,
    source: &PodSource,
    output: ScanFormat,
    fail_on_restart: bool,
) -> Result<ExitCode> {
    let rt = runtime()?;
    let (pods, node_version) = node_pods(&rt, source)?;
    let from = from.or(node_version);
    if let Some(f) = from {
        warn_upgrade(f, to);
    }
    let (containers, runtime) = rt.block_on(async {
        let mut cri = Cri::connect(endpoint).await?;
        let containers = cri.list_containers().await?;
        Ok::<_, kubehash::Error>((containers, cri.runtime_version().clone()))
    })?;
    let manifests = read_manifests(source)?;
    let plans = plan(&containers, &pods, &manifests, to, from);
    let mut out = io::BufWriter::new(io::stdout().lock());
    match output {
        ScanFormat::Table => write_plan_table(
            &plans,
            &format!(
                "Plan for kubelet {to} on this node ({} {}, CRI {})",
                runtime.runtime_name, runtime.runtime_version, runtime.runtime_api_version
            ),
            &mut out,
        )?,
        ScanFormat::Json => {
            let counts: serde_json::Map<String, serde_json::Value> = plan_counts(&plans)
                .into_iter()
                .map(|(k, n)| (k.to_string(), n.into()))
                .collect();
            let doc = serde_json::json!({
                "to": to.to_string(),
                "from": from.map(|f| f.to_string()),
                "runtime": {"name": runtime.runtime_name, "version": runtime.runtime_version,
                            "api_version": runtime.runtime_api_version},
                "counts": counts,
                "containers": plans,
            });
            write_json_line(&mut out, &doc)?;
        }
    }
    out.flush()?;
    let restarts = plans.iter().any(|p| p.verdict == Verdict::WillRestart);
    if fail_on_restart && restarts {
        return Ok(ExitCode::from(3));
    }
    if plans.iter().any(|p| p.verdict == Verdict::Error) {
        return Ok(ExitCode::from(2));
    }
    Ok(ExitCode::SUCCESS)
}

fn init_logs(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(io::stderr);
    let _ = match format {
        LogFormat::Json => builder.json().try_init(),
        LogFormat::Text => builder.try_init(),
    };
}

fn run_node(command: NodeCommand) -> Result<ExitCode> {
    match command {
        NodeCommand::Plan(a) => {
            let to: KubeletVersion = a.to.parse().context("--to")?;
            let from = a
                .from
                .as_deref()
                .map(str::parse)
                .transpose()
                .context("--from")?;
            print_node_plan(&a.cri, to, from, &a.source, a.output, false)
        }
        NodeCommand::Apply(a) => run_node_apply(a),
        NodeCommand::Verify(a) => run_node_check(a, true),
        NodeCommand::Rollback(a) => run_node_check(a, false),
    }
}

fn run_node_apply(a: NodeApplyArgs) -> Result<ExitCode> {
    init_logs(a.log_format);
    let to: KubeletVersion = a.plan.to.parse().context("--to")?;
    let rt = runtime()?;
    let (pods, node_version) = node_pods(&rt, &a.plan.source)?;
    let from = old_kubelet(&a.plan.from, node_version)?;
    if let Some(f) = from {
        warn_upgrade(f, to);
    }
    let journal = a.journal.clone().unwrap_or_else(|| {
        kubehash::rewrite::journal::path_for(
            &a.journal_dir,
            from.map(|f| f.to_string()).as_deref(),
            &to.to_string(),
        )
    });
    let manifests = read_manifests(&a.plan.source)?;
    let report = rt.block_on(kubehash::rewrite::node::apply(
        &a.plan.cri,
        &a.containerd,
        &pods,
        &manifests,
        to,
        from,
        &journal,
        &mut a.kubelet.guard(),
    ))?;
    let mut out = io::BufWriter::new(io::stdout().lock());
    match a.plan.output {
        ScanFormat::Json => {
            write_json_line(&mut out, &report)?;
        }
        ScanFormat::Table => {
            let mut rows = vec![vec![
                "CONTAINER".to_string(),
                "POD".into(),
                "NAME".into(),
                "VERDICT".into(),
                "RESULT".into(),
                "DETAIL".into(),
            ]];
            for o in &report.outcomes {
                rows.push(vec![
                    o.container_id.chars().take(13).collect(),
                    o.pod.clone(),
                    o.container.clone(),
                    o.verdict.as_str().into(),
                    o.result.clone(),
                    o.detail.clone(),
                ]);
            }
            kubehash::cli::output::write_columns(&rows, &mut out)?;
            writeln!(out)?;
            writeln!(
                out,
                "Summary: {} written, {} already rewritten, {} left alone, {} errors. Journal: {}",
                report.count("written"),
                report.count("already-rewritten"),
                report.count("left-alone"),
                report.count("error"),
                report.journal
            )?;
            if let Some(why) = &report.stopped {
                writeln!(
                    out,
                    "Stopped before {} planned writes: {why}",
                    report.count("stopped")
                )?;
            }
        }
    }
    out.flush()?;
    if a.restart_containerd {
        if Path::new("/run/systemd/system").exists() {
            let status = std::process::Command::new("systemctl")
                .args(["restart", "containerd"])
                .status()
                .context("cannot run systemctl")?;
            if !status.success() {
                bail!(
                    "systemctl restart containerd failed ({status}); journal {}",
                    report.journal
                );
            }
            eprintln!(
                "kubehash: containerd restarted; now run: kubehash node verify --journal {}",
                report.journal
            );
        } else {
            bail!("--restart-containerd needs systemd, which is not running here; restart containerd yourself, then run kubehash node verify --journal {}", report.journal);
        }
    } else if report.count("written") > 0 {
        eprintln!(
            "kubehash: next: restart containerd (e.g. systemctl restart containerd) so that CRI reports the new hashes, \
             run `kubehash node verify --journal {}`, then start kubelet {to}. To undo: kubehash node rollback --journal {}",
            report.journal, report.journal
        );
    }
    Ok(if report.count("error") > 0 || report.stopped.is_some() {
        ExitCode::from(2)
    } else {
        ExitCode::SUCCESS
    })
}

fn run_node_check(a: NodeJournalArgs, verify: bool) -> Result<ExitCode> {
    init_logs(a.log_format);
    let journal = match &a.journal {
        Some(j) => j.clone(),
        None => kubehash::rewrite::journal::latest(&a.journal_dir)?,
    };
    let rt = runtime()?;
    let results = if verify {
        rt.block_on(kubehash::rewrite::node::verify(
            &a.cri,
            &a.containerd,
            &journal,
        ))?
    } else {
        rt.block_on(kubehash::rewrite::node::rollback(
            &a.containerd,
            &journal,
            &a.kubelet.guard(),
        ))?
    };
    let mut out = io::BufWriter::new(io::stdout().lock());
    match a.output {
        ScanFormat::Json => {
            write_json_line(&mut out, &results)?;
        }
        ScanFormat::Table => {
            let mut rows = vec![vec![
                "CONTAINER".to_string(),
                "NAME".into(),
                "OK".into(),
                "DETAIL".into(),
            ]];
            for r in &results {
                rows.push(vec![
                    r.container_id.chars().take(13).collect(),
                    r.name.clone(),
                    if r.ok { "yes".into() } else { "NO".into() },
                    r.detail.clone(),
                ]);
            }
            kubehash::cli::output::write_columns(&rows, &mut out)?;
            writeln!(out)?;
            let bad = results.iter().filter(|r| !r.ok).count();
            writeln!(
                out,
                "Summary: {} of {} containers {}.",
                results.len() - bad,
                results.len(),
                if verify {
                    "verified"
                } else {
                    "restored or already original"
                }
            )?;
        }
    }
    out.flush()?;
    Ok(if results.iter().all(|r| r.ok) {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(2)
    })
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}

/// This machine's hostname (the kubelet's default node name).
fn hostname() -> Result<String> {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .context("cannot read the hostname; pass --node-name")?;
    Ok(name.trim().to_string())
}

/// Resolves on SIGTERM or Ctrl-C: when a long-running command (shim, agent) should stop
/// gracefully. Never resolves if SIGTERM cannot be watched and Ctrl-C never comes.
async fn stop_requested() {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(t) => t,
        Err(_) => return std::future::pending().await,
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}

fn run_shim(a: ShimArgs) -> Result<ExitCode> {
    init_logs(a.log_format);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let existing = ShimState::load(&a.state)?;
    if a.status {
        let state = existing.with_context(|| format!("no shim state at {}", a.state.display()))?;
        let listed = rt.block_on(async {
            let mut cri = Cri::connect(&a.runtime_endpoint).await?;
            cri.list_containers().await
        })?;
        let live = state
            .translations
            .iter()
            .filter(|(id, t)| {
                listed.iter().any(|c| {
                    &c.id == *id
                        && c.annotations.get(kubehash::runtime::cri::keys::HASH)
                            == Some(&t.stored_hash)
                })
            })
            .count();
        println!(
            "{live} of {} translated containers are still there (target kubelet {}); the shim can be removed when this is 0 or after `kubehash node apply`.",
            state.translations.len(),
            state.to
        );
        return Ok(ExitCode::SUCCESS);
    }
    let to: Option<KubeletVersion> =
        a.to.as_deref()
            .map(str::parse)
            .transpose()
            .context("--to")?;
    let mode = u32::from_str_radix(&a.socket_mode, 8)
        .context("--socket-mode takes an octal mode such as 600")?;
    let limits = kubehash::shim::proxy::Limits {
        max_connections: a.max_connections,
        handshake_timeout: std::time::Duration::from_secs(a.handshake_timeout_seconds),
        idle_timeout: std::time::Duration::from_secs(a.idle_timeout_seconds),
    };
    let existing = match existing {
        Some(mut s) => {
            if let Some(t) = to {
                if s.to != t.to_string() {
                    bail!(
                        "the shim state {} was made for kubelet {}, not {t}; remove it to plan again",
                        a.state.display(),
                        s.to
                    );
                }
            }
            // A saved plan is proven again under today's rule; what fails is passed through.
            for (id, why) in s.recheck() {
                eprintln!("kubehash: shim state: not translating container {id}: {why}");
            }
            Some(s)
        }
        None => {
            let to = to.context("--to VERSION is needed to plan (there is no shim state yet)")?;
            if a.source.pods.is_none() && !a.source.cluster {
                bail!("to plan, give --pods PATH or --cluster");
            }
            // Plan before serving when that works, so the kubelet never sees an untranslated
            // moment; otherwise serve pass-through and keep trying (below).
            match rt.block_on(plan_shim(&a, to)) {
                Ok(state) => {
                    state.save(&a.state)?;
                    Some(state)
                }
                Err(e) => {
                    eprintln!("kubehash: no shim plan yet (passing everything through): {e:#}");
                    None
                }
            }
        }
    };
    let planned = existing;
    let shown = kubehash::shim::proxy::ShownPlan::new(planned.as_ref());
    // Without a plan yet (first start), serve pure pass-through and plan until it works: the
    // kubelet must never be left without a runtime because the API server or the runtime is
    // not reachable yet.
    let planner = {
        let shown = shown.clone();
        let a = &a;
        async move {
            let Some(to) = to.filter(|_| planned.is_none()) else {
                return std::future::pending::<()>().await;
            };
            loop {
                tokio::time::sleep(std::time::Duration::from_secs(a.plan_retry_seconds)).await;
                match plan_shim(a, to).await {
                    Ok(state) => {
                        match state.save(&a.state) {
                            Ok(()) => {}
                            Err(e) => eprintln!("kubehash: cannot save the shim state: {e}"),
                        }
                        eprintln!(
                            "kubehash: shim plan made: {} containers translated for kubelet {to}",
                            state.translations.len()
                        );
                        shown.set(&state);
                        return std::future::pending::<()>().await;
                    }
                    Err(e) => {
                        eprintln!("kubehash: no shim plan yet (passing everything through): {e:#}");
                    }
                }
            }
        }
    };
    rt.block_on(async {
        tokio::select! {
            r = kubehash::shim::proxy::serve(&a.listen, &a.runtime_endpoint, shown.clone(), mode, limits, stop_requested()) => r,
            () = planner => Ok(()),
        }
    })?;
    Ok(ExitCode::SUCCESS)
}

/// This node's static pod manifests (`--manifests`); files that are not pods are said on stderr.
fn read_manifests(source: &PodSource) -> Result<kubehash::source::manifests::Manifests> {
    let m = kubehash::source::manifests::Manifests::read(&source.manifests)?;
    for p in &m.problems {
        eprintln!("kubehash: not a static pod manifest: {p}");
    }
    Ok(m)
}

/// The shim's plan: this node's containers and pods, proven for `from` → `to`.
async fn plan_shim(a: &ShimArgs, to: KubeletVersion) -> Result<ShimState> {
    let (pods, node_version) = read_node_pods(&a.source).await?;
    let from = old_kubelet(&a.from, node_version)?;
    let mut cri = Cri::connect(&a.runtime_endpoint).await?;
    let containers = cri.list_containers().await?;
    let manifests = read_manifests(&a.source)?;
    let plans = plan(&containers, &pods, &manifests, to, from);
    Ok(ShimState::from_plans(&plans, &pods, to, from))
}

fn run_agent(a: AgentArgs) -> Result<ExitCode> {
    init_logs(a.log_format);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let cfg = kubehash::agent::reconcile::AgentConfig {
        node_name: a.node_name,
        kubeconfig: a.kubeconfig,
        cri: a.cri,
        containerd: a.containerd,
        state_dir: a.state_dir,
        kubelet_healthz: a.kubelet_healthz,
        kubelet_binary: a.kubelet_binary,
        manifests: a.manifests,
        restart_timeout: std::time::Duration::from_secs(a.restart_timeout_seconds),
        stuck_after: std::time::Duration::from_secs(a.stuck_seconds),
        grace: std::time::Duration::from_secs(a.grace_seconds),
        poll: std::time::Duration::from_millis(a.poll_ms),
        annotation: a.annotation,
        restart_containerd: a.restart_containerd,
        dry_run: a.dry_run,
    };
    rt.block_on(async move {
        let metrics = kubehash::agent::reconcile::Metrics::default();
        // A metrics address that cannot be bound is an error, not a silent agent without health.
        let agent = kubehash::agent::reconcile::Agent::new(cfg, metrics.clone()).await?;
        let bound = kubehash::agent::reconcile::bind_metrics(&a.listen).await?;
        let listener = tokio::spawn(kubehash::agent::reconcile::serve_metrics(bound, metrics));
        agent.run(stop_requested()).await?;
        listener.abort();
        Ok::<_, anyhow::Error>(())
    })?;
    Ok(ExitCode::SUCCESS)
}

/// Pretty JSON and a final newline, for `-o json`.
fn write_json_line(out: &mut impl Write, value: &impl serde::Serialize) -> Result<()> {
    serde_json::to_writer_pretty(&mut *out, value)?;
    out.write_all(b"\n")?;
    Ok(())
}
