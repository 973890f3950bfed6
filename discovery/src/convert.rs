//! Legacy `APIResourceList` → aggregated `APIVersionDiscovery` (k8s.io/apiserver's
//! `ConvertGroupVersionIntoToDiscovery` in `pkg/endpoints/installer.go`), and the
//! normalisation the aggregator applies to documents it downloads.

use std::collections::HashMap;

use crate::types::{
    APIGroupDiscoveryList, APIResource, APIResourceDiscovery, APIResourceList,
    APISubresourceDiscovery, APIVersionDiscovery, GroupVersionKind, Scope,
};

/// Why a legacy resource list cannot be converted; the caller marks the group-version `Stale`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConvertError {
    /// A subresource's scope differs from its parent's. Not retryable with the same document:
    /// the backend must serve a consistent list.
    #[error(
        "parent {parent} (scope: {parent_scope:?}) and subresource {subresource} (scope: {subresource_scope:?}) scope do not match"
    )]
    ScopeMismatch {
        /// Parent resource name.
        parent: String,
        /// Scope of the parent.
        parent_scope: Scope,
        /// Subresource name.
        subresource: String,
        /// Scope of the subresource entry.
        subresource_scope: Scope,
    },
}

/// The result of a conversion.
type Result<T, E = ConvertError> = std::result::Result<T, E>;

/// Converts the resources of one legacy group-version into aggregated resources.
///
/// Plain entries become resources in list order; `parent/sub` entries become subresources of
/// `parent` (a missing parent is appended with the subresource's scope and an empty
/// `responseKind`). `responseKind` group/version stay empty unless the legacy entry set them.
pub fn convert_resources(list: &[APIResource]) -> Result<Vec<APIResourceDiscovery>> {
    let mut out: Vec<APIResourceDiscovery> = Vec::with_capacity(list.len());
    let mut index: HashMap<&str, usize> = HashMap::with_capacity(list.len());

    for r in list.iter().filter(|r| !r.name.contains('/')) {
        out.push(APIResourceDiscovery {
            resource: r.name.clone(),
            response_kind: Some(gvk_of(r)),
            scope: Scope::from_namespaced(r.namespaced),
            singular_resource: r.singular_name.clone(),
            verbs: r.verbs.clone(),
            short_names: r.short_names.clone(),
            categories: r.categories.clone(),
            ..APIResourceDiscovery::default()
        });
        index.insert(r.name.as_str(), out.len() - 1);
    }

    for r in list {
        let Some((parent, sub)) = r.name.split_once('/') else {
            continue;
        };
        let scope = Scope::from_namespaced(r.namespaced);
        let at = match index.get(parent) {
            Some(&at) => at,
            None => {
                out.push(APIResourceDiscovery {
                    resource: parent.to_owned(),
                    response_kind: Some(GroupVersionKind::default()),
                    scope,
                    ..APIResourceDiscovery::default()
                });
                index.insert(parent, out.len() - 1);
                out.len() - 1
            }
        };
        let Some(parent_entry) = out.get_mut(at) else {
            continue;
        };
        if parent_entry.scope != scope {
            return Err(ConvertError::ScopeMismatch {
                parent: parent.to_owned(),
                parent_scope: parent_entry.scope,
                subresource: sub.to_owned(),
                subresource_scope: scope,
            });
        }
        let response_kind = if r.kind.is_empty() {
            GroupVersionKind::default()
        } else {
            gvk_of(r)
        };
        parent_entry.subresources.push(APISubresourceDiscovery {
            subresource: sub.to_owned(),
            response_kind: Some(response_kind),
            verbs: r.verbs.clone(),
            ..APISubresourceDiscovery::default()
        });
    }
    Ok(out)
}

/// Converts a legacy `APIResourceList` into the aggregated entry for `version` (no freshness
/// set; the caller decides).
pub fn convert_resource_list(version: &str, list: &APIResourceList) -> Result<APIVersionDiscovery> {
    Ok(APIVersionDiscovery {
        resources: convert_resources(&list.resources)?,
        ..APIVersionDiscovery::empty(version)
    })
}

/// Replaces missing `responseKind`s with an empty one, as the aggregator does with documents it
/// downloads (old client-go versions crash on `null`).
pub fn fill_missing_response_kinds(version: &mut APIVersionDiscovery) {
    for r in &mut version.resources {
        r.response_kind
            .get_or_insert_with(GroupVersionKind::default);
        for s in &mut r.subresources {
            s.response_kind
                .get_or_insert_with(GroupVersionKind::default);
        }
    }
}

/// Splits an aggregated document into `(group, version entry)` pairs, filling missing
/// `responseKind`s. Use it to index a backend's document by group-version.
pub fn split_group_versions(list: APIGroupDiscoveryList) -> Vec<(String, APIVersionDiscovery)> {
    let mut out = Vec::new();
    for group in list.items {
        let name = group.metadata.name;
        for mut version in group.versions {
            fill_missing_response_kinds(&mut version);
            out.push((name.clone(), version));
        }
    }
    out
}

fn gvk_of(r: &APIResource) -> GroupVersionKind {
    GroupVersionKind {
        group: r.group.clone(),
        version: r.version.clone(),
        kind: r.kind.clone(),
    }
}
