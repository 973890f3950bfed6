//! Aggregated discovery (`apidiscovery.k8s.io/v2` and `v2beta1`: identical fields).

use serde::{Deserialize, Serialize};

use super::{null_as_default, Extra, APIDISCOVERY_V2, APIGROUP_DISCOVERY_LIST_KIND};

/// `/apis` with the aggregated Accept: every group with all versions and resources.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct APIGroupDiscoveryList {
    /// `APIGroupDiscoveryList`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// `apidiscovery.k8s.io/v2` or `…/v2beta1`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    /// ListMeta; serialises as `{}`.
    #[serde(default)]
    pub metadata: Extra,
    /// Groups in priority order.
    #[serde(default, deserialize_with = "null_as_default")]
    pub items: Vec<APIGroupDiscovery>,
    /// Unknown fields.
    #[serde(flatten)]
    pub extra: Extra,
}

impl APIGroupDiscoveryList {
    /// A v2 list holding `items`.
    pub fn v2(items: Vec<APIGroupDiscovery>) -> Self {
        Self {
            kind: Some(APIGROUP_DISCOVERY_LIST_KIND.to_owned()),
            api_version: Some(APIDISCOVERY_V2.to_owned()),
            metadata: Extra::new(),
            items,
            extra: Extra::new(),
        }
    }
}

/// One group with its versions, preferred first.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct APIGroupDiscovery {
    /// Normally absent on items.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Normally absent on items.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    /// Only `name` is meaningful.
    #[serde(default)]
    pub metadata: GroupMeta,
    /// Versions, preferred first.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub versions: Vec<APIVersionDiscovery>,
    /// Unknown fields.
    #[serde(flatten)]
    pub extra: Extra,
}

impl APIGroupDiscovery {
    /// The group name (`""` for core).
    pub fn name(&self) -> &str {
        &self.metadata.name
    }
}

/// ObjectMeta of an [`APIGroupDiscovery`]: the group name plus whatever else the server sent
/// (for example `creationTimestamp: null` from 1.32 servers).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GroupMeta {
    /// Group name; omitted when empty (core group).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// Unknown fields.
    #[serde(flatten)]
    pub extra: Extra,
}

impl GroupMeta {
    /// Metadata carrying only `name`.
    pub fn named(name: &str) -> Self {
        Self {
            name: name.to_owned(),
            extra: Extra::new(),
        }
    }
}

/// Whether a version's resources are up to date.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Freshness {
    /// Fetched recently.
    Current,
    /// The last fetch failed; resources may be old or missing.
    Stale,
}

/// One version of a group with its resources.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct APIVersionDiscovery {
    /// Version name.
    #[serde(default)]
    pub version: String,
    /// Resources; omitted when empty.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub resources: Vec<APIResourceDiscovery>,
    /// `Current` or `Stale`; omitted when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub freshness: Option<Freshness>,
    /// Unknown fields.
    #[serde(flatten)]
    pub extra: Extra,
}

impl APIVersionDiscovery {
    /// A version entry without resources.
    pub fn empty(version: &str) -> Self {
        Self {
            version: version.to_owned(),
            ..Self::default()
        }
    }
}

/// Resource scope.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub enum Scope {
    /// Cluster-wide.
    #[default]
    Cluster,
    /// Namespaced.
    Namespaced,
}

impl Scope {
    /// `Namespaced` when `namespaced`, else `Cluster`.
    pub fn from_namespaced(namespaced: bool) -> Self {
        if namespaced {
            Scope::Namespaced
        } else {
            Scope::Cluster
        }
    }
}

/// A group/version/kind; all three fields are always written (an empty one is
/// `{"group":"","version":"","kind":""}`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct GroupVersionKind {
    /// Group (empty = the enclosing group).
    #[serde(default)]
    pub group: String,
    /// Version (empty = the enclosing version).
    #[serde(default)]
    pub version: String,
    /// Kind.
    #[serde(default)]
    pub kind: String,
}

/// One resource in aggregated discovery.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct APIResourceDiscovery {
    /// Plural name.
    #[serde(default)]
    pub resource: String,
    /// Kind returned; `None` is omitted (the aggregator fills `{}` in, see
    /// [`crate::fill_missing_response_kinds`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_kind: Option<GroupVersionKind>,
    /// Scope.
    #[serde(default)]
    pub scope: Scope,
    /// Singular name (always written).
    #[serde(default)]
    pub singular_resource: String,
    /// Verbs (always written).
    #[serde(default, deserialize_with = "null_as_default")]
    pub verbs: Vec<String>,
    /// Short names.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub short_names: Vec<String>,
    /// Categories.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub categories: Vec<String>,
    /// Subresources.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub subresources: Vec<APISubresourceDiscovery>,
    /// Unknown fields.
    #[serde(flatten)]
    pub extra: Extra,
}

/// One subresource of an [`APIResourceDiscovery`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct APISubresourceDiscovery {
    /// Subresource name (`status`, `log`, …).
    #[serde(default)]
    pub subresource: String,
    /// Kind returned; `None` is omitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_kind: Option<GroupVersionKind>,
    /// Kinds accepted by the endpoint.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub accepted_types: Vec<GroupVersionKind>,
    /// Verbs (always written).
    #[serde(default, deserialize_with = "null_as_default")]
    pub verbs: Vec<String>,
    /// Unknown fields.
    #[serde(flatten)]
    pub extra: Extra,
}
