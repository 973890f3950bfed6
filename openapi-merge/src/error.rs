//! Why an input document cannot be used; the caller keeps its last good version of that input.

/// Why one input document cannot be used. None is retryable with the same bytes: the backend
/// must serve a different document (the next download is checked again).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    /// The bytes are not JSON (serde_json's message). Not retryable with the same bytes.
    #[error("{0}")]
    NotJson(String),
    /// The document is not a JSON object. Not retryable with the same document.
    #[error("OpenAPI document is not a JSON object")]
    NotAnObject,
    /// A top-level section (`paths`, `definitions`, `parameters`) is neither an object nor null.
    /// Not retryable with the same document.
    #[error("`{section}` is not an object")]
    SectionNotObject {
        /// The section name.
        section: &'static str,
    },
    /// An entry of a section (a path item, a definition, a parameter) is not an object. Not
    /// retryable with the same document.
    #[error("{section} entry {name:?} is not an object")]
    EntryNotObject {
        /// The section name.
        section: &'static str,
        /// The entry's key.
        name: String,
    },
    /// A `$ref` in the kept part of the document points to a definition or parameter it lacks.
    /// Not retryable with the same document.
    #[error("`$ref` {reference:?} points to nothing in the document")]
    DanglingRef {
        /// The reference as written.
        reference: String,
    },
    /// An `x-kubernetes-group-version-kind` that must be merged is not a list of objects. Not
    /// retryable with the same document.
    #[error("x-kubernetes-group-version-kind of definition {name:?} is not a list of objects")]
    MalformedGvk {
        /// The definition name.
        name: String,
    },
    /// A v3 index document lacks a `paths` object or an entry lacks a string `serverRelativeURL`.
    /// Not retryable with the same index.
    #[error("malformed OpenAPI v3 index: {detail}")]
    MalformedV3Index {
        /// What is wrong.
        detail: String,
    },
}

/// The result of reading or preparing an input document.
pub(crate) type Result<T, E = SpecError> = std::result::Result<T, E>;
