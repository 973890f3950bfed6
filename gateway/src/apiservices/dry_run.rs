//! `?dryRun=All`: a write goes through every step (decoding, defaulting, validation, field
//! ownership, the checks of owned groups and of the stored object's version) and answers what
//! it would have stored, but the store is not written (kube-apiserver's `DryRunnableStorage`).
//! Any other value is refused, as kube-apiserver's options validation refuses it.

use apiagg_apis::Reason;
use std::sync::Arc;

use apiagg_store::{revision_of, StoreError};
use serde_json::{json, Value};

use super::answers::status;
use super::{Answer, Api};

/// Whether a write is a dry run: `Ok(true)` for `All`, `Ok(false)` without the parameter,
/// the 422 of kube-apiserver's options validation for another value. `options`: the kind of
/// the write's options (`CreateOptions`, `UpdateOptions`, `PatchOptions`, `DeleteOptions`).
pub fn dry_run(value: Option<&str>, options: &str) -> Result<bool, Answer> {
    match value {
        None => Ok(false),
        Some("All") => Ok(true),
        Some(other) => {
            let why = format!("Unsupported value: [{other:?}]: supported values: \"All\"");
            let message = format!("{options}.meta.k8s.io \"\" is invalid: dryRun: {why}");
            let causes =
                json!([{"reason": "FieldValueNotSupported", "message": why, "field": "dryRun"}]);
            let details = json!({"group": "meta.k8s.io", "kind": options, "causes": causes});
            Err(status(Reason::Invalid, &message, Some(details)))
        }
    }
}

impl Api<'_> {
    /// Stores `object` as `name`, or, in a dry run, answers what would be stored (no
    /// `resourceVersion` yet) unless the name is taken.
    pub(super) async fn commit_create(
        &self,
        name: &str,
        mut object: Value,
        dry: bool,
    ) -> Result<Arc<Value>, StoreError> {
        if !dry {
            return self.store.create(name, object).await;
        }
        if self.store.get(name).is_some() {
            return Err(StoreError::AlreadyExists(name.into()));
        }
        if let Some(meta) = object["metadata"].as_object_mut() {
            meta.remove("resourceVersion");
        }
        Ok(Arc::new(object))
    }

    /// Replaces `name` by `object` if it is still at `expected`, or, in a dry run, answers
    /// what would be stored (the current `resourceVersion`) when that holds.
    pub(super) async fn commit_update(
        &self,
        name: &str,
        mut object: Value,
        expected: Option<u64>,
        dry: bool,
    ) -> Result<Arc<Value>, StoreError> {
        if !dry {
            return self.store.update(name, object, expected).await;
        }
        let current = self.current(name, expected)?;
        object["metadata"]["resourceVersion"] = json!(revision_of(&current).to_string());
        Ok(Arc::new(object))
    }

    /// Deletes `name` if it is still at `expected`, or, in a dry run, answers the object that
    /// would be deleted when that holds.
    pub(super) async fn commit_delete(
        &self,
        name: &str,
        expected: Option<u64>,
        dry: bool,
    ) -> Result<Arc<Value>, StoreError> {
        if !dry {
            return self.store.delete(name, expected).await;
        }
        self.current(name, expected)
    }

    /// The stored `name`, if it is at `expected` (any version when `None`).
    fn current(&self, name: &str, expected: Option<u64>) -> Result<Arc<Value>, StoreError> {
        let current = (self.store.get(name)).ok_or_else(|| StoreError::NotFound(name.into()))?;
        match expected {
            Some(revision) if revision != revision_of(&current) => {
                Err(StoreError::Conflict(name.into()))
            }
            _ => Ok(current),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_all_is_a_dry_run_and_other_values_are_refused_by_name() {
        assert!(matches!(dry_run(None, "CreateOptions"), Ok(false)));
        assert!(matches!(dry_run(Some("All"), "CreateOptions"), Ok(true)));
        assert!(dry_run(Some("Some"), "PatchOptions").is_err());
    }
}
