//! Why a write is refused: one error for the whole write path (decode, strategy, patch, apply,
//! options), because each variant is one Kubernetes Status reason the API answers with.

use apiagg_apis::{go_quote, ValidationErrors};

use crate::managed_fields::{ApplyError, Conflicts};
use crate::writes::OptionsError;

/// Why a write is refused; each variant maps to a Kubernetes Status reason. None succeeds when
/// the same request is sent again.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// The object breaks a validation rule (`Invalid`, 422). Not retryable: the object must
    /// change.
    #[error(transparent)]
    Invalid(#[from] ValidationErrors),
    /// A patched object has fields an APIService does not have and `fieldValidation=Strict`
    /// (`Invalid` on the field `patch`, 422, quoting the patched object, as kube-apiserver
    /// refuses it). Not retryable: the patch must change.
    #[error(" \"\" is invalid: patch: Invalid value: {}: {why}", go_quote(.object))]
    StrictPatch {
        /// The patched object, as JSON.
        object: String,
        /// `strict decoding error: unknown field "…"`.
        why: String,
    },
    /// The body is not an APIService, or the patch does not apply (`BadRequest`, 400). Not
    /// retryable: the body must change.
    #[error("{0}")]
    BadRequest(String),
    /// The patch content type is not one of the four kubectl uses (`UnsupportedMediaType`,
    /// 415). Not retryable.
    #[error("the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml, application/strategic-merge-patch+json")]
    UnsupportedPatch,
    /// An apply would change fields other managers own (`Conflict`, 409). Not retryable as is:
    /// retry with `force=true`, or drop the fields from the configuration.
    #[error("{0}")]
    Conflict(Conflicts),
    /// The patch or its result exceeds a limit (`RequestEntityTooLarge`, 413): too many JSON
    /// Patch operations, copies or alias expansion beyond the body limit. Not retryable.
    #[error("{0}")]
    TooLarge(String),
    /// The request options are refused (`Invalid` on `*Options.meta.k8s.io`, 422). Not
    /// retryable: the query must change.
    #[error(transparent)]
    Options(#[from] OptionsError),
}

impl From<ApplyError> for WriteError {
    fn from(e: ApplyError) -> WriteError {
        match e {
            ApplyError::Conflicts(c) => WriteError::Conflict(c),
            ApplyError::BadRequest(m) => WriteError::BadRequest(m),
        }
    }
}

/// The result of a write step.
pub(crate) type Result<T, E = WriteError> = std::result::Result<T, E>;
