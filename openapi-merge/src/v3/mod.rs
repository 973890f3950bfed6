//! OpenAPI v3 (spec §8): per group-version documents with kube-openapi's content hash, and the
//! `/openapi/v3` index merged from every source.

mod index;

pub use index::{build_v3_index, V3Document, V3Index, V3Source};
