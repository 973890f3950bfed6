//! Content hashes and ETags, as kube-openapi computes them (the config crate holds the one
//! implementation the discovery documents use too).

pub use apiagg_config::content_hash::{sha512_upper_hex, strong_etag};
