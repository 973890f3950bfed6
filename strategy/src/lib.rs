//! What the APIService API does to a write before it is stored (kube-aggregator's
//! `pkg/registry/apiservice/strategy.go`), as kube-apiserver does it: the strategy (create wipes
//! status and a local APIService is born `Available=True/Local`, update keeps the stored status,
//! a `/status` update keeps spec and metadata), the patch formats kubectl sends, the request
//! options (`fieldManager`, `force`, `fieldValidation`) and the writes as a whole ([`create`],
//! [`update`], [`apply`]) with field ownership in `metadata.managedFields` and unknown-field
//! warnings. Patches and applies are bounded as kube-apiserver bounds them
//! ([`MAX_OBJECT_BYTES`], [`MAX_JSON_PATCH_OPERATIONS`]).
//!
//! Pure: the caller supplies the time, the UID and the stored object; no I/O, no async. Every
//! refusal is a [`WriteError`], one variant per Kubernetes Status reason.
//!
//! Modules are private and every item has one path: the writes at the crate root, field
//! ownership in [`managed_fields`] (its `apply`, `update` and `decode` are the ownership halves of
//! the writes here, hence the separate namespace).

mod bounded;
mod error;
mod go_base64;
pub mod managed_fields;
mod patch;
mod prepare;
mod writes;

#[cfg(test)]
mod tests;

pub use bounded::{yaml_body, MAX_JSON_PATCH_OPERATIONS, MAX_OBJECT_BYTES};
pub use error::WriteError;
pub use patch::{apply_patch, PatchKind};
pub use prepare::{
    condition, decode, parse, prepare_create, prepare_status_update, prepare_update, unknown_fields,
};
pub use writes::{
    apply, create, update, update_patched, FieldValidation, OptionsError, Prepared, Verb,
    WriteOptions,
};
