//! The library's error type. Every variant names what failed and where, so that the CLI can print
//! it on one line and a user can act on it without a debugger.

use thiserror::Error;

/// Errors from the kubehash library.
#[derive(Debug, Error)]
pub enum Error {
    /// A kubelet version string that is not one kubehash knows (`schema/1.N.json`), in any
    /// accepted spelling.
    #[error("unsupported kubelet version {given:?}: kubehash knows kubelet {range} (e.g. 1.30, v1.30.2, 1.30.0-gke.1)", range = crate::kubelet::version::KubeletVersion::supported_range())]
    UnsupportedVersion { given: String },

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

/// Shorthand for results in this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
