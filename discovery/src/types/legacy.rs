//! Legacy discovery (`meta/v1`): `/api`, `/apis`, `/apis/<group>` and `/apis/<group>/<version>`.

use serde::{Deserialize, Serialize};

use super::{null_as_default, Extra};

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
