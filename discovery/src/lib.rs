//! Kubernetes discovery documents: types, legacy → aggregated conversion, merging, Accept
//! negotiation and rendering. Pure library: no I/O, no async.
//!
//! Typical gateway flow:
//! 1. decode backend documents into [`types`]; index aggregated ones with
//!    [`convert::split_group_versions`], convert legacy ones with
//!    [`convert::convert_resource_list`];
//! 2. keep one [`merge::GroupVersionEntry`] per group-version and call
//!    [`merge::merge_aggregated`] and [`order::legacy_group_list`] when something changes;
//! 3. [`render::render_merged`] (or [`render::render_aggregated`]) and
//!    [`render::render_legacy`] once, publish the result;
//! 4. per request, [`negotiate::negotiate`] and [`render::RenderedDoc::not_modified`].

pub mod accept;
pub mod convert;
pub mod merge;
pub mod negotiate;
pub mod order;
pub mod render;
pub mod types;

pub use convert::{convert_resource_list, convert_resources, ConvertError};
pub use merge::{merge_aggregated, GroupVersionEntry, Priority, Source};
pub use negotiate::{
    negotiate, AggregatedVersion, Endpoint, NegotiateOptions, Negotiated, NotAcceptable,
};
pub use order::{legacy_group, legacy_group_list, ApiServiceRecord};
pub use render::{render_aggregated, render_legacy, render_merged, AggregatedDocs, RenderedDoc};
pub use types::*;

#[cfg(test)]
mod tests;
