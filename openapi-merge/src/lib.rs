//! OpenAPI v2 merge, v3 index building, and the documents apiagg publishes with their gnostic
//! protobuf encoding (no I/O).
//!
//! * [`merge_v2`] merges the delegate's documents and one document per remote APIService into
//!   the `/openapi/v2` document (as kube-aggregator's
//!   `pkg/controllers/openapi/aggregator/aggregator.go`), rendered once to bytes with a strong
//!   ETag.
//! * [`build_v3_index`] builds the `/openapi/v3` index from per-group-version documents
//!   (kube-aggregator's `pkg/controllers/openapiv3/aggregator/aggregator.go`), with
//!   kube-openapi's content hashes.
//! * [`render_v2`] and [`render_v3`] turn the current inputs into what is served
//!   ([`OpenApiDocs`]), and [`encode_document`] writes `/openapi/v2` as gnostic protobuf for kubectl ≤ 1.27.
//!
//! Use: turn each document into a [`SourceDoc`] once when it is downloaded and prepare it for
//! each input ([`PreparedV2::local_source`] / [`PreparedV2::remote_source`]; an unusable
//! document yields a [`SpecError`] and the caller keeps its last good `PreparedV2`), then call
//! [`merge_v2`] on every change.
//!
//! Where this differs from kube-openapi/kube-aggregator, on purpose:
//! * Same-group APIServices merge by `versionPriority` desc, then kube-aware version (upstream
//!   compares an entry with itself); a group's APIServices stay together in the order.
//! * A document whose kept part has a `$ref` to a missing definition or parameter, or a
//!   non-list `x-kubernetes-group-version-kind`, is rejected when prepared (upstream merges it and
//!   may serve dangling references or fail the merge later).
//! * Definitions no path used are kept as upstream, together with what they reference (upstream
//!   can prune a definition that only such a never-used definition still references).
//! * Any `"$ref": "<string>"` is rewritten on rename, wherever it sits; upstream rewrites only
//!   the schema, parameter, items and response positions its walker visits.
//! * `/openapi/v3` duplicate keys: the first source wins (upstream: Go map order).
//!
//! As upstream: definitions are compared before renaming (so two `_vN` twins can end up equal
//! once their own references are renamed); only the first usable document's `responses`,
//! `securityDefinitions`, `info`, … are kept; `paths`, `definitions`, `parameters` are written
//! sorted by key (as Go's encoder does); the v2 ETag is the quoted uppercase hex SHA-512.

mod error;
mod protobuf;
mod published;
mod v2;
mod v3;

pub use error::SpecError;
pub use protobuf::encode_document;
pub use published::{
    render_v2, render_v3, v3_key, without_remote_keys, OpenApiDocs, V2Inputs, V2Served, V3Input,
    V3Output, V3Served, GZIP_THRESHOLD,
};
pub use v2::{
    merge_order, merge_v2, LocalSpec, MergedV2, OrderKey, PreparedV2, RemoteSpec, SourceDoc,
};
pub use v3::{build_v3_index, V3Document, V3Index, V3Source};
