//! OpenAPI v2 aggregation (kube-aggregator's `pkg/controllers/openapi/aggregator/`).
//!
//! Inputs are documents turned once, when downloaded, into a compact [`SourceDoc`] (compact JSON
//! text per entry, references resolved) shared by every APIService they serve; the merge borrows
//! them (see [`PreparedV2`]), keeps every field it does not have to change (vendor extensions, `info`, `security`, …),
//! renames conflicting definitions and parameters only in the documents that need it (while
//! serialising, without cloning), and writes the result once to bytes.

mod merge;
mod order;
mod prepare;
mod refs;
mod render;
mod source;
mod view;

pub use order::{merge_order, OrderKey};
pub use prepare::PreparedV2;
pub use source::SourceDoc;

use std::sync::Arc;

use apiagg_apis::strong_etag;
use bytes::Bytes;

/// A document of the delegate chain (kube-apiserver, apiextensions, …), merged first and
/// unfiltered, in the order given.
#[derive(Debug, Clone)]
pub struct LocalSpec {
    /// Name used in errors, e.g. `k8s_internal_local_delegation_chain_0000000001`.
    pub name: String,
    /// The document, prepared with [`PreparedV2::local`].
    pub spec: Arc<PreparedV2>,
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
    /// The document, prepared with [`PreparedV2::remote`] for this group and version.
    pub spec: Arc<PreparedV2>,
}

/// The merged `/openapi/v2` JSON and its strong ETag (`"<uppercase hex SHA-512>"`, as upstream).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MergedV2 {
    /// The JSON document.
    pub json: Bytes,
    /// Quoted ETag header value.
    pub etag: String,
}

/// Merges `locals` (in chain order) and `remotes` (any order; sorted here) into one document;
/// `None` when there is no input. Inputs were checked when prepared ([`PreparedV2`] reports
/// unusable documents with a [`crate::SpecError`]), so the merge itself cannot fail.
///
/// Rules (kube-aggregator's `pkg/controllers/openapi/aggregator/aggregator.go` with
/// kube-openapi's `pkg/aggregator/aggregator.go`): remote documents keep only paths under
/// `/apis/<group>/<version>/`; the first document to claim a path keeps it; a document losing
/// paths also loses the definitions and parameters only those paths used (ones no path ever used
/// stay); a definition equal to an existing one (ignoring `x-kubernetes-group-version-kind`,
/// whose lists are unioned) is shared; a different one is renamed `<name>_v2`, `_v3`, …
/// (reusing an equal twin) with its document's `$ref`s rewritten; shared parameters likewise.
/// The first usable document provides every other top-level field (`swagger`, `info`,
/// `securityDefinitions`, `security`, `responses`, …).
/// A document with no paths (`paths` missing or null, or all filtered) contributes nothing.
pub fn merge_v2(locals: &[LocalSpec], remotes: &[RemoteSpec]) -> Option<MergedV2> {
    let mut merger = merge::Merger::default();
    for local in locals {
        merger.add(&local.spec);
    }
    for index in order::remote_order(remotes) {
        merger.add(&remotes[index].spec);
    }
    merger.base?;
    // Serialising `Value` trees into a Vec cannot fail (string keys, finite numbers).
    let json = render::render(&merger).unwrap_or_default();
    let etag = strong_etag(&json);
    Some(MergedV2 {
        json: Bytes::from(json),
        etag,
    })
}

#[cfg(test)]
mod tests;
