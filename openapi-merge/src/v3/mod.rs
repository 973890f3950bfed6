//! OpenAPI v3 (kube-aggregator's `pkg/controllers/openapiv3/aggregator/aggregator.go`,
//! kube-openapi's `pkg/handler3/handler.go`): per group-version documents with kube-openapi's
//! content hash, and the `/openapi/v3` index merged from every source.

mod index;

pub use index::{build_v3_index, V3Document, V3Index, V3Source};
