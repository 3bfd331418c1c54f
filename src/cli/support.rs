//! What every subcommand needs around its work: the async runtime, logs, signals, standard
//! output, and upgrade warnings.

use std::io::{self, BufWriter, IsTerminal, StdoutLock, Write};

use anyhow::{Context, Result};

use crate::cli::args::{LogFormat, PodSource};
use crate::cli::output::{emit, Format, Render};
use crate::kubelet::version::KubeletVersion;

/// A single-threaded async runtime: commands other than the agent make a few calls in turn.
pub fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}

/// How many failures or objects not read are repeated on stderr when all are in the output.
pub const SHOWN_ON_STDERR: usize = 10;

/// Buffered standard output, whose write errors say they are standard output's ("standard
/// output: No space left on device"; a closed pipe keeps its kind, which is no error here).
pub fn stdout() -> BufWriter<Stdout> {
    BufWriter::new(Stdout(io::stdout().lock()))
}

/// Standard output, its errors named.
pub struct Stdout(StdoutLock<'static>);

impl Stdout {
    fn named(e: io::Error) -> io::Error {
        io::Error::new(e.kind(), format!("standard output: {e}"))
    }
}

impl Write for Stdout {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.write(buf).map_err(Stdout::named)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.0.flush().map_err(Stdout::named)
    }
}

/// Prints a report on standard output.
pub fn print(format: Format, report: &dyn Render) -> Result<()> {
    emit(format, report, &mut stdout())?;
    Ok(())
}

/// Logs on stderr, `RUST_LOG` filtered (default `info`).
pub fn init_logs(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // Colours only for a person at a terminal: journald, `kubectl logs` and files get plain text.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(io::stderr().is_terminal())
        // A log line stderr cannot take is dropped: tracing would report it on stderr itself,
        // with a print that panics when stderr is a closed pipe.
        .log_internal_errors(false)
        .with_writer(io::stderr);
    let _ = match format {
        LogFormat::Json => builder.json().try_init(),
        LogFormat::Text => builder.try_init(),
    };
}

/// Resolves on SIGTERM or Ctrl-C: when a long-running command (shim, agent) should stop
/// gracefully. Never resolves if SIGTERM cannot be watched and Ctrl-C never comes.
pub async fn stop_requested() {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(t) => t,
        // Without a SIGTERM handler, Ctrl-C still stops it.
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}

/// Warnings about the upgrade itself (a downgrade, a jump beyond the version-skew policy), on
/// stderr.
pub fn warn_upgrade(from: KubeletVersion, to: KubeletVersion) {
    for w in crate::kubelet::version::upgrade_warnings(from, to) {
        say!("kubehash: warning: {w}");
    }
}

/// A `--to`/`--from`-style flag's version, with the flag named in the error.
pub fn version_flag(flag: &str, value: &str) -> Result<KubeletVersion> {
    value.parse().with_context(|| flag.to_string())
}

/// Refuses `--claims` for `command`, which does not run the volumes check: a flag that would do
/// nothing is refused, not ignored.
pub fn no_claims(source: &PodSource, command: &str) -> Result<()> {
    if source.claims.is_some() {
        anyhow::bail!(
            "--claims is read by the volumes check (scan, node plan, node preflight); {command} does not run it"
        );
    }
    Ok(())
}

/// The `--claims` file, if given; refused when it and `--pods` would both read stdin.
pub fn claims_file(source: &PodSource) -> Result<Option<&std::path::Path>> {
    let stdin = |p: Option<&std::path::PathBuf>| p.is_some_and(|p| p.as_os_str() == "-");
    if stdin(source.claims.as_ref()) && stdin(source.pods.as_ref()) {
        anyhow::bail!("--claims - and --pods - cannot both read stdin: give one of them a file");
    }
    Ok(source.claims.as_deref())
}

/// An optional version flag.
pub fn optional_version(flag: &str, value: Option<&str>) -> Result<Option<KubeletVersion>> {
    value.map(|v| version_flag(flag, v)).transpose()
}

/// `--kubelet-healthz`, checked: a URL the running-kubelet check could not read is refused,
/// never taken for "nothing answers there".
pub fn healthz_flag(url: &str) -> anyhow::Result<()> {
    crate::agent::kubelet_health::healthz_url(url)
        .map(|_| ())
        .map_err(|why| anyhow::anyhow!("--kubelet-healthz {url:?}: {why}"))
}

/// The error for an input in which no pod was found, with how many of its objects were left out
/// (`left`: "scanned", "counted") and the first of them: one message for scan and matrix.
pub fn no_pods_found(
    source: &str,
    problems: &crate::analysis::spill::Spill<String>,
    left: &str,
    filter: &PodsWanted,
) -> anyhow::Error {
    let first = problems.iter().next().transpose();
    let why = match first {
        Err(e) => {
            return anyhow::Error::new(e)
                .context(format!("cannot read back the objects not {left}"))
        }
        Ok(Some(p)) if problems.len() == 1 => format!(" (1 object not {left}: {p})"),
        Ok(Some(p)) => format!(" ({} objects not {left}, the first: {p})", problems.len()),
        Ok(None) => String::new(),
    };
    anyhow::anyhow!("no pods found in {source}{}{why}", filter.said())
}

/// `-n` and `-l` as given: which pods are wanted (of a file's, or as the API server was asked).
#[derive(Debug, Clone, Default)]
pub struct PodsWanted {
    pub namespace: Option<String>,
    pub selector: Option<String>,
    parsed: crate::source::selector::Selector,
}

impl PodsWanted {
    /// The namespace and the selector checked as the API server checks them, before anything
    /// is read.
    pub fn checked(narrow: &crate::cli::args::Narrowing) -> Result<PodsWanted> {
        let (namespace, selector) = (narrow.namespace.as_deref(), narrow.selector.as_deref());
        let parsed = crate::source::selector::Selector::parse(selector.unwrap_or(""))?;
        if let Some(ns) = namespace {
            if let Err(why) = crate::source::names::namespace_name(ns) {
                anyhow::bail!("--namespace {ns:?} names no namespace: {why}");
            }
        }
        Ok(PodsWanted {
            namespace: namespace.map(str::to_string),
            selector: selector.map(str::to_string),
            parsed,
        })
    }

    /// The filter, `None` when every pod is wanted.
    pub fn filter(&self) -> Option<crate::analysis::scan::PodFilter> {
        if self.namespace.is_none() && self.selector.is_none() {
            return None;
        }
        let (selector, namespace) = (self.parsed.clone(), self.namespace.clone());
        Some(Box::new(move |pod: &serde_json::Value| {
            selector.matches(pod)
                && namespace.as_deref().is_none_or(|ns| {
                    pod.pointer("/metadata/namespace").and_then(|n| n.as_str()) == Some(ns)
                })
        }))
    }

    /// What narrowed the pods, for a message: ` in namespace "shop" matching "app=web"`.
    fn said(&self) -> String {
        let mut out = String::new();
        if let Some(ns) = &self.namespace {
            out += &format!(" in namespace {ns:?}");
        }
        if let Some(sel) = &self.selector {
            out += &format!(" matching {sel:?}");
        }
        out
    }
}
