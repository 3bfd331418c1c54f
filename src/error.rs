//! The library's error type. Every variant names what failed and where, so that the CLI can print
//! it on one line and a user can act on it without a debugger.

use thiserror::Error;

/// Errors from the kubehash library.
#[derive(Debug, Error)]
pub enum Error {
    /// A kubelet version string that is not one kubehash knows (`schema/1.N.json`), in any
    /// accepted spelling.
    #[error("unsupported kubelet version {given:?}: kubehash knows kubelet {known} (e.g. 1.30, v1.30.2, 1.30.0-gke.1)")]
    UnsupportedVersion {
        given: String,
        /// The versions kubehash knows, as `KubeletVersion::supported_range` says them.
        known: String,
    },

    /// A `--versions` list or range that is empty or backwards.
    #[error(
        "bad version list {given:?}: use all, a list like 1.12,1.31 or a range like 1.16..1.30"
    )]
    BadVersionRange { given: String },

    /// A JSON value whose type does not fit the Go field it decodes into.
    #[error("{path}: expected {expected}, got {got}")]
    Type {
        path: String,
        expected: String,
        got: String,
    },

    /// A `resource.Quantity` string that apimachinery's `ParseQuantity` rejects.
    #[error("{path}: invalid quantity {value:?}: {reason}")]
    Quantity {
        path: String,
        value: String,
        reason: String,
    },

    /// The embedded schema data is inconsistent (a bug in kubehash, not in the input).
    #[error("schema for kubelet {version}: {reason}")]
    Schema { version: String, reason: String },

    /// Input that is not JSON, or not one of the shapes kubehash reads.
    #[error("{source_name}: {reason}")]
    Input { source_name: String, reason: String },

    /// The API server could not be reached or refused a request.
    #[error("API server {url}: {reason}")]
    Cluster { url: String, reason: String },

    /// containerd's own API could not be reached, refused a call, or holds a record kubehash
    /// will not touch.
    #[error("containerd {endpoint}: {reason}")]
    Containerd { endpoint: String, reason: String },

    /// A runtime's record of a container that kubehash will not read or write as it stands.
    #[error("container {id}: {reason}")]
    Record { id: String, reason: String },

    /// Writing is not safe at this moment (a kubelet runs, or the evidence that made it safe is
    /// gone); nothing further is written.
    #[error("{what}: {reason}")]
    Unsafe { what: String, reason: String },

    /// The command that restarts the runtime could not run, failed or timed out.
    #[error("restarting the runtime with `{command}`: {reason}")]
    Restart { command: String, reason: String },

    /// A CRI runtime could not be reached or refused a call.
    #[error("CRI endpoint {endpoint}: {reason}")]
    Cri { endpoint: String, reason: String },

    /// A journal that is not one, or whose lines do not decode or validate: rollback writes what
    /// a journal says, so it is read strictly.
    #[error("journal {path}: {reason}")]
    Journal { path: String, reason: String },

    /// Reading a file or stream failed.
    #[error("{source_name}: {source}")]
    Io {
        source_name: String,
        #[source]
        source: std::io::Error,
    },
}

/// Why one item (a pod, a node, a manifest, a container) could not be used, as a sentence that
/// names it. Unlike [`enum@Error`], a problem does not stop the run: it is reported beside the
/// results.
#[derive(Debug, Clone, PartialEq, Eq, Error, serde::Serialize)]
#[error("{0}")]
#[serde(transparent)]
pub struct Problem(pub String);

impl From<String> for Problem {
    fn from(s: String) -> Self {
        Problem(s)
    }
}

impl From<&str> for Problem {
    fn from(s: &str) -> Self {
        Problem(s.to_string())
    }
}

impl Problem {
    /// This problem of the `n`th object (from 1) of the input `source`, said with where it is
    /// (`pods/b.json: object 2: …`), as `hash` names an object that is not a container.
    pub fn at(self, source: &str, n: usize) -> Problem {
        Problem(format!("{source}: object {n}: {}", self.0))
    }
}

impl std::ops::Deref for Problem {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl From<Error> for Problem {
    fn from(e: Error) -> Self {
        Problem(e.to_string())
    }
}

impl Error {
    /// Container `id`'s record is not one kubehash will read or write, because of `why`.
    pub fn record(id: &str, why: Problem) -> Error {
        Error::Record {
            id: id.to_string(),
            reason: why.0,
        }
    }
}

/// An error and its causes on one line, each said once: a cause whose text is already in the
/// line (hyper and tonic errors, and wrappers that quote an I/O error, repeat their source) is
/// left out, and of a cause written over several lines only the first is kept (a YAML parser's
/// error draws the offending line and a caret below its message, which gives line and column).
pub fn causes(e: &dyn std::error::Error) -> String {
    let mut line = String::new();
    let mut cur = Some(e);
    while let Some(c) = cur {
        let text = c.to_string();
        let text = text
            .lines()
            .map(str::trim_end)
            .find(|l| !l.trim().is_empty())
            .unwrap_or_default();
        if !line.contains(text) {
            if !line.is_empty() {
                line.push_str(": ");
            }
            line.push_str(text);
        }
        cur = c.source();
    }
    line
}

/// Shorthand for results in this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
