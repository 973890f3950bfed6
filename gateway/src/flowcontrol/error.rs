//! The errors of the flow-control room.

use std::path::PathBuf;

/// Why a set of FlowSchemas and PriorityLevelConfigurations cannot be used. None of them is
/// retryable as such: the input must change (the last good configuration stays in force).
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file cannot be read. Retryable once the file is there.
    #[error("{}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// What reading said.
        source: std::io::Error,
    },
    /// A YAML document cannot be parsed, or does not have the shape of its kind.
    #[error("{origin}document {index}: {message}")]
    Parse {
        /// `"<file>: "` when the text came from a file, else empty.
        origin: String,
        /// Index of the document (0-based) in the multi-document text.
        index: usize,
        /// What the parser said.
        message: String,
    },
    /// A document whose `apiVersion` is not `flowcontrol.apiserver.k8s.io/v1` or `/v1beta3`.
    #[error("{origin}document {index}: unsupported apiVersion {api_version:?} (want flowcontrol.apiserver.k8s.io/v1 or v1beta3)")]
    ApiVersion {
        /// `"<file>: "` or empty.
        origin: String,
        /// Index of the document.
        index: usize,
        /// The version found.
        api_version: String,
    },
    /// A document of another kind than FlowSchema or PriorityLevelConfiguration (or their
    /// lists).
    #[error("{origin}document {index}: unsupported kind {kind:?} (want FlowSchema or PriorityLevelConfiguration)")]
    Kind {
        /// `"<file>: "` or empty.
        origin: String,
        /// Index of the document.
        index: usize,
        /// The kind found.
        kind: String,
    },
    /// An object fails validation (the message names the field, as upstream's validation does).
    #[error("{kind} {name:?}: {message}")]
    Invalid {
        /// `FlowSchema` or `PriorityLevelConfiguration`.
        kind: &'static str,
        /// `metadata.name`.
        name: String,
        /// What is wrong.
        message: String,
    },
    /// Two objects of one kind share a name.
    #[error("{kind} {name:?} is given more than once")]
    Duplicate {
        /// `FlowSchema` or `PriorityLevelConfiguration`.
        kind: &'static str,
        /// The name.
        name: String,
    },
}

/// Why flow control cannot start.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The metrics cannot be registered (a name is taken in the registry). Not retryable.
    #[error("registering the flow-control metrics: {0}")]
    Metrics(#[from] prometheus::Error),
    /// The built-in configuration does not compile (a bug). Not retryable.
    #[error("the built-in flow-control configuration: {0}")]
    Config(#[from] ConfigError),
    /// `total_seats` is zero. Not retryable.
    #[error("flow control needs at least one seat (max-requests-inflight + max-mutating-requests-inflight)")]
    NoSeats,
}
