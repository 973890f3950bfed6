//! Kubernetes discovery documents: types, legacy → aggregated conversion, merging, Accept
//! negotiation and rendering. Pure library: no I/O, no async.
//!
//! Typical gateway flow:
//! 1. decode backend documents into the document types ([`APIGroupDiscoveryList`],
//!    [`APIResourceList`], …); index aggregated ones with [`split_group_versions`], convert
//!    legacy ones with [`convert_resource_list`];
//! 2. keep one [`GroupVersionEntry`] per group-version and call [`merge_aggregated`] and
//!    [`legacy_group_list`] when something changes;
//! 3. [`render_merged`] (or [`render_aggregated`]) and [`render_legacy`] once, publish the
//!    result;
//! 4. per request, [`negotiate()`], [`RenderedDoc::not_modified`] and [`RenderedDoc::body`] in
//!    the negotiated [`Format`] (JSON or CBOR); [`status_format`] for the errors it answers.
//!
//! Version order and the ETag hash come from `apiagg-apis`, the only apiagg crate this one
//! depends on. Modules are private; every item has one path, at the crate root.

mod accept;
mod convert;
mod merge;
mod negotiate;
mod order;
mod render;
mod types;

pub use accept::{accepts_coding, media_ranges, Clause};
pub use convert::{
    convert_resource_list, convert_resources, fill_missing_response_kinds, split_group_versions,
    ConvertError,
};
pub use merge::{
    merge_aggregated, merge_plan, GroupVersionEntry, MergedGroup, Priority, Source,
    APIREGISTRATION_PRIORITY,
};
pub use negotiate::{
    negotiate, status_format, AggregatedVersion, Endpoint, Format, NegotiateOptions, Negotiated,
    NotAcceptable, CONTENT_TYPE_V2, CONTENT_TYPE_V2BETA1, CONTENT_TYPE_V2BETA1_CBOR,
    CONTENT_TYPE_V2_CBOR, JSON,
};
pub use order::{
    apiregistration_group, legacy_group, legacy_group_list, legacy_group_order, ApiServiceRecord,
    APIREGISTRATION_GROUP,
};
pub use render::{
    if_none_match_matches, render_aggregated, render_legacy, render_merged, AggregatedDocs,
    RenderError, RenderedDoc,
};
pub use types::{
    APIGroup, APIGroupDiscovery, APIGroupDiscoveryList, APIGroupList, APIResource,
    APIResourceDiscovery, APIResourceList, APISubresourceDiscovery, APIVersionDiscovery,
    APIVersions, Extra, Freshness, GroupMeta, GroupVersionForDiscovery, GroupVersionKind, Scope,
    ServerAddressByClientCIDR, APIDISCOVERY_GROUP, APIDISCOVERY_V2, APIDISCOVERY_V2BETA1,
    APIGROUP_DISCOVERY_LIST_KIND, LEGACY_API_VERSION,
};

#[cfg(test)]
mod tests;
