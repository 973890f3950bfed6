//! The errors of the flow-control crate.

use std::fmt;
use std::path::PathBuf;

/// One field of a FlowSchema or PriorityLevelConfiguration that fails validation, worded as
/// upstream's `field.Error` (`<path>: Required value`, `<path>: Invalid value: <value>: <why>`,
/// …). Not retryable: the object must change.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FieldError {
    /// The field is missing or empty. Not retryable.
    #[error("{field}: Required value{}", Detail(*.detail))]
    Required {
        /// The field's path (`spec.limited`).
        field: String,
        /// Why it is required, when that is not obvious.
        detail: Option<&'static str>,
    },
    /// The field's value is out of range or malformed. Not retryable.
    #[error("{field}: Invalid value: {value}: {detail}")]
    Invalid {
        /// The field's path.
        field: String,
        /// The value as upstream shows it (numbers bare, strings quoted).
        value: String,
        /// What is wrong with it.
        detail: String,
    },
    /// The value is none of the supported ones. Not retryable.
    #[error("{field}: Unsupported value: {value:?}: supported values: {}", Quoted(.supported))]
    Unsupported {
        /// The field's path.
        field: String,
        /// The value given.
        value: String,
        /// The values upstream supports.
        supported: &'static [&'static str],
    },
    /// The field must not be set here. Not retryable.
    #[error("{field}: Forbidden: {detail}")]
    Forbidden {
        /// The field's path.
        field: String,
        /// Why not.
        detail: &'static str,
    },
    /// `*` is given with other values in a list where it must stand alone. Not retryable.
    #[error("{field}: if '*' is present, must not specify other values")]
    StarNotAlone {
        /// The field's path.
        field: String,
    },
}

impl FieldError {
    /// `field` is missing.
    pub(super) fn required(field: impl Into<String>) -> FieldError {
        FieldError::Required {
            field: field.into(),
            detail: None,
        }
    }

    /// `field` is missing, which matters because of `detail`.
    pub(super) fn required_because(field: impl Into<String>, detail: &'static str) -> FieldError {
        FieldError::Required {
            field: field.into(),
            detail: Some(detail),
        }
    }

    /// `field` may not hold `value` (shown as Rust's `Debug` shows it: numbers bare, strings
    /// quoted, as upstream's `%#v`).
    pub(super) fn invalid(
        field: impl Into<String>,
        value: impl fmt::Debug,
        detail: impl Into<String>,
    ) -> FieldError {
        FieldError::Invalid {
            field: field.into(),
            value: format!("{value:?}"),
            detail: detail.into(),
        }
    }

    /// `field` holds `value`, none of `supported`.
    pub(super) fn unsupported(
        field: impl Into<String>,
        value: &str,
        supported: &'static [&'static str],
    ) -> FieldError {
        FieldError::Unsupported {
            field: field.into(),
            value: value.to_string(),
            supported,
        }
    }

    /// `field` must not be set, because of `detail`.
    pub(super) fn forbidden(field: impl Into<String>, detail: &'static str) -> FieldError {
        FieldError::Forbidden {
            field: field.into(),
            detail,
        }
    }

    /// The same error, its path under `parent` (`spec.rules[0]`).
    pub(super) fn under(mut self, parent: &str) -> FieldError {
        let (FieldError::Required { field, .. }
        | FieldError::Invalid { field, .. }
        | FieldError::Unsupported { field, .. }
        | FieldError::Forbidden { field, .. }
        | FieldError::StarNotAlone { field }) = &mut self;
        *field = format!("{parent}.{field}");
        self
    }
}

/// `: <detail>` when there is one.
struct Detail(Option<&'static str>);

impl fmt::Display for Detail {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(detail) => write!(f, ": {detail}"),
            None => Ok(()),
        }
    }
}

/// `"a", "b"`.
struct Quoted<'a>(&'a [&'a str]);

impl fmt::Display for Quoted<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, value) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{value:?}")?;
        }
        Ok(())
    }
}

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
    /// An object fails validation (the field is named, as upstream's validation names it).
    #[error("{kind} {name:?}: {error}")]
    Invalid {
        /// `FlowSchema` or `PriorityLevelConfiguration`.
        kind: &'static str,
        /// `metadata.name`.
        name: String,
        /// The field and what is wrong with it (in the message, not a `source()`).
        error: FieldError,
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
