//! OpenAPI v2 aggregation (spec §7, §2.4).
//!
//! Inputs are documents parsed once when downloaded and shared as `Arc<Value>`; the merge borrows
//! them, keeps every field it does not have to change (vendor extensions, `info`, `security`, …),
//! renames conflicting definitions and parameters only in the documents that need it (while
//! serialising, without cloning), and writes the result once to bytes.

mod merge;
mod order;
mod refs;
mod render;
mod view;

use std::sync::Arc;

use bytes::Bytes;
use serde_json::Value;

use crate::error::{InputError, SpecError};
use crate::hash::strong_etag;

/// A document of the delegate chain (kube-apiserver, apiextensions, …), merged first and
/// unfiltered, in the order given.
#[derive(Debug, Clone)]
pub struct LocalSpec {
    /// Name used in errors, e.g. `k8s_internal_local_delegation_chain_0000000001`.
    pub name: String,
    /// The parsed `/openapi/v2` document.
    pub doc: Arc<Value>,
}

/// The `/openapi/v2` document of one remote APIService.
#[derive(Debug, Clone)]
pub struct RemoteSpec {
    /// APIService name (`<version>.<group>`); the tie-break in the merge order.
    pub apiservice: String,
    /// `spec.group`.
    pub group: String,
    /// `spec.version`.
    pub version: String,
    /// `spec.groupPriorityMinimum`.
    pub group_priority_minimum: i32,
    /// `spec.versionPriority`.
    pub version_priority: i32,
    /// The parsed document as downloaded (it is filtered to `/apis/<group>/<version>/` here).
    pub doc: Arc<Value>,
}

/// The merged `/openapi/v2` JSON and its strong ETag (`"<uppercase hex SHA-512>"`, as upstream).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MergedV2 {
    /// The JSON document.
    pub json: Bytes,
    /// Quoted ETag header value.
    pub etag: String,
}

/// Result of [`merge_v2`]: the merged document (absent only when no input was usable) and one
/// error per skipped input. The caller keeps the last good version of a skipped input.
#[derive(Debug, Clone)]
pub struct MergeOutcome {
    /// The merged document, unless every input failed.
    pub merged: Option<MergedV2>,
    /// Inputs that were skipped, in merge order.
    pub errors: Vec<InputError>,
}

/// Merges `locals` (in chain order) and `remotes` (any order; sorted here) into one document.
///
/// Rules (spec §7.3): remote documents keep only paths under `/apis/<group>/<version>/`; the
/// first document to claim a path keeps it; a document losing paths also loses the definitions
/// and parameters only those paths used (ones no path ever used stay); a definition equal to an
/// existing one (ignoring `x-kubernetes-group-version-kind`, whose lists are unioned) is shared;
/// a different one is renamed `<name>_v2`, `_v3`, … (reusing an equal twin) with its document's
/// `$ref`s rewritten; shared parameters likewise. The first usable document provides every other
/// top-level field (`swagger`, `info`, `securityDefinitions`, `security`, `responses`, …).
/// A document with no paths (`paths` missing or null, or all filtered) contributes nothing.
pub fn merge_v2(locals: &[LocalSpec], remotes: &[RemoteSpec]) -> MergeOutcome {
    let mut merger = merge::Merger::default();
    let mut errors = Vec::new();
    let mut record = |input: &str, result: Result<(), SpecError>| {
        if let Err(error) = result {
            errors.push(InputError {
                input: input.to_owned(),
                error,
            });
        }
    };
    for local in locals {
        record(&local.name, merger.add(&local.doc, None));
    }
    for index in order::remote_order(remotes) {
        let remote = &remotes[index];
        let prefix = format!("/apis/{}/{}/", remote.group, remote.version);
        record(&remote.apiservice, merger.add(&remote.doc, Some(&prefix)));
    }
    let merged = merger.base.is_some().then(|| {
        // Serialising a `Value` tree into a Vec cannot fail (string keys, finite numbers).
        let json = render::render(&merger).unwrap_or_default();
        let etag = strong_etag(&json);
        MergedV2 {
            json: Bytes::from(json),
            etag,
        }
    });
    MergeOutcome { merged, errors }
}

#[cfg(test)]
mod tests;
