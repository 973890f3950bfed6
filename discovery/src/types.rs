//! Discovery document types with the JSON names Kubernetes uses.
//!
//! Every struct keeps fields it does not know in `extra`, so documents round-trip. Fields that
//! Kubernetes marks `omitempty` are skipped when empty; required ones are always written.

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value};

/// `apiVersion` of the legacy discovery documents.
pub const LEGACY_API_VERSION: &str = "v1";
/// Group of the aggregated discovery types.
pub const APIDISCOVERY_GROUP: &str = "apidiscovery.k8s.io";
/// `apiVersion` of aggregated discovery v2.
pub const APIDISCOVERY_V2: &str = "apidiscovery.k8s.io/v2";
/// `apiVersion` of aggregated discovery v2beta1.
pub const APIDISCOVERY_V2BETA1: &str = "apidiscovery.k8s.io/v2beta1";
/// Kind of the aggregated discovery list.
pub const APIGROUP_DISCOVERY_LIST_KIND: &str = "APIGroupDiscoveryList";

/// Unknown fields kept for round trips.
pub type Extra = Map<String, Value>;

/// Reads `null` as the type's default (Go writes nil slices as `null`).
fn null_as_default<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
}

// ---------------------------------------------------------------------------------------------
// Legacy discovery (meta/v1)
// ---------------------------------------------------------------------------------------------

/// `/api`: the legacy core versions (`kind: APIVersions`, normally without `apiVersion`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct APIVersions {
    /// `APIVersions`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Absent in what kube-apiserver serves.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    /// Served core versions, e.g. `["v1"]`.
    #[serde(default, deserialize_with = "null_as_default")]
    pub versions: Vec<String>,
    /// Always written, even when empty.
    #[serde(
        rename = "serverAddressByClientCIDRs",
        default,
        deserialize_with = "null_as_default"
    )]
    pub server_address_by_client_cidrs: Vec<ServerAddressByClientCIDR>,
    /// Unknown fields.
    #[serde(flatten)]
    pub extra: Extra,
}

/// One client CIDR → server address pair.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerAddressByClientCIDR {
    /// CIDR the client address must match.
    #[serde(rename = "clientCIDR", default)]
    pub client_cidr: String,
    /// `host:port` to use from that CIDR.
    #[serde(rename = "serverAddress", default)]
    pub server_address: String,
    /// Unknown fields.
    #[serde(flatten)]
    pub extra: Extra,
}

/// `/apis`: the legacy group list.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct APIGroupList {
    /// `APIGroupList`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// `v1`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    /// Groups in display order.
    #[serde(default, deserialize_with = "null_as_default")]
    pub groups: Vec<APIGroup>,
    /// Unknown fields.
    #[serde(flatten)]
    pub extra: Extra,
}

/// `/apis/<group>` and one entry of [`APIGroupList`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct APIGroup {
    /// `APIGroup` when served on its own; absent inside a list.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// `v1` when served on its own; absent inside a list.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    /// Group name.
    #[serde(default)]
    pub name: String,
    /// Versions, preferred first.
    #[serde(default, deserialize_with = "null_as_default")]
    pub versions: Vec<GroupVersionForDiscovery>,
    /// The preferred version (the first of `versions`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preferred_version: Option<GroupVersionForDiscovery>,
    /// Rarely set for groups; omitted when absent.
    #[serde(
        rename = "serverAddressByClientCIDRs",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub server_address_by_client_cidrs: Option<Vec<ServerAddressByClientCIDR>>,
    /// Unknown fields.
    #[serde(flatten)]
    pub extra: Extra,
}

/// A `group/version` pair as legacy discovery lists it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GroupVersionForDiscovery {
    /// `group/version` (just `version` for the core group).
    #[serde(default)]
    pub group_version: String,
    /// The version alone.
    #[serde(default)]
    pub version: String,
    /// Unknown fields.
    #[serde(flatten)]
    pub extra: Extra,
}

impl GroupVersionForDiscovery {
    /// Entry for `group`/`version` (`version` alone for the core group).
    pub fn new(group: &str, version: &str) -> Self {
        let group_version = if group.is_empty() {
            version.to_owned()
        } else {
            format!("{group}/{version}")
        };
        Self {
            group_version,
            version: version.to_owned(),
            extra: Extra::new(),
        }
    }
}

/// `/apis/<group>/<version>` (or `/api/v1`): the resources of one group-version.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct APIResourceList {
    /// `APIResourceList`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// `v1`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    /// `group/version`.
    #[serde(default)]
    pub group_version: String,
    /// Resources and `parent/sub` subresources, in server order.
    #[serde(default, deserialize_with = "null_as_default")]
    pub resources: Vec<APIResource>,
    /// Unknown fields.
    #[serde(flatten)]
    pub extra: Extra,
}

/// One legacy resource entry (`pods`, `pods/log`, …).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct APIResource {
    /// Plural name, or `parent/subresource`.
    #[serde(default)]
    pub name: String,
    /// Singular name (empty for subresources).
    #[serde(default)]
    pub singular_name: String,
    /// Whether the resource is namespaced.
    #[serde(default)]
    pub namespaced: bool,
    /// Group of the kind when it differs from the list's group.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub group: String,
    /// Version of the kind when it differs from the list's version.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub version: String,
    /// Kind returned by the endpoint.
    #[serde(default)]
    pub kind: String,
    /// Supported verbs.
    #[serde(default, deserialize_with = "null_as_default")]
    pub verbs: Vec<String>,
    /// Short names (`po`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub short_names: Vec<String>,
    /// Categories (`all`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub categories: Vec<String>,
    /// Opaque storage version hash.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub storage_version_hash: String,
    /// Unknown fields.
    #[serde(flatten)]
    pub extra: Extra,
}

// ---------------------------------------------------------------------------------------------
// Aggregated discovery (apidiscovery.k8s.io/v2 and v2beta1: identical fields)
// ---------------------------------------------------------------------------------------------

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
    /// [`crate::convert::fill_missing_response_kinds`]).
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
