//! OpenAPI v2 merge and v3 index building (no I/O).
//!
//! * [`v2::merge_v2`] merges the delegate's documents and one document per remote APIService into
//!   the `/openapi/v2` document (spec §7.3), rendered once to bytes with a strong ETag.
//! * [`v3::build_v3_index`] builds the `/openapi/v3` index from per-group-version documents
//!   (spec §8), with kube-openapi's content hashes.

pub mod error;
pub mod hash;
pub mod v2;
pub mod v3;

pub use error::SpecError;
pub use v2::{merge_v2, LocalSpec, MergedV2, PreparedV2, RemoteSpec};
pub use v3::{build_v3_index, V3Document, V3Index, V3Source};
