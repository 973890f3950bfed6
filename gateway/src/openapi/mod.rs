//! OpenAPI v2 and v3 merged at runtime (spec §7, §8).
//!
//! * [`controller::OpenApiController`] downloads the delegate's and every backend Service's
//!   documents (ETag revalidation, last good document kept on failure), merges `/openapi/v2`
//!   with `apiagg-openapi-merge`, builds the `/openapi/v3` index and publishes one immutable
//!   [`OpenApiDocs`] snapshot.
//! * [`serve`] answers `/openapi/v2` (JSON or gnostic protobuf, each also gzip-compressed),
//!   `/openapi/v3` and `/openapi/v3/<key>` from that snapshot.
//!
//! Unlike kube-aggregator, per-group-version v3 documents of remote APIServices are downloaded
//! and served by apiagg itself (not proxied), with apiagg's SHA-512 hash of the bytes it serves,
//! so the hash redirect and immutable caching work the same for local and remote documents.

//! TEMPORARY: until these types move to `apiagg-openapi-merge`.
mod proto_v2;
mod publish;

pub use publish::*;

use std::collections::HashMap;
use std::sync::Arc;

use apiagg_openapi_merge::V3Document;
use bytes::Bytes;

/// The merged `/openapi/v2` document, ready to send.
pub struct V2Served {
    /// JSON bytes.
    pub json: Bytes,
    /// The same bytes gzip-compressed; `None` below the gzip threshold.
    pub gzip: Option<Bytes>,
    /// The document as gnostic protobuf (what kubectl ≤ 1.27 reads).
    pub proto: Bytes,
    /// `proto` gzip-compressed; `None` below the gzip threshold.
    pub proto_gzip: Option<Bytes>,
    /// Quoted strong ETag (uppercase hex SHA-512 of `json`).
    pub etag: String,
}

/// One `/openapi/v3/<key>` document, ready to send.
pub struct V3Served {
    /// Key, bytes and hash.
    pub doc: V3Document,
    /// Quoted ETag (the hash).
    pub etag: String,
}

impl V3Served {
    /// Hashes `json` once.
    pub fn new(key: &str, json: Bytes) -> V3Served {
        let doc = V3Document::new(key, json);
        let etag = doc.etag();
        V3Served { doc, etag }
    }
}

/// Everything the OpenAPI endpoints serve, published whole.
pub struct OpenApiDocs {
    /// `/openapi/v2`; `None` until some source provided a usable document.
    pub v2: Option<Arc<V2Served>>,
    /// `/openapi/v3` index JSON.
    pub v3_index: Bytes,
    /// Quoted ETag of the index.
    pub v3_index_etag: String,
    /// Per-key documents (the index's winners only).
    pub v3: HashMap<String, Arc<V3Served>>,
}

/// Bodies at least this large are sent gzip-compressed to clients that accept it (spec §7.4).
pub const GZIP_THRESHOLD: usize = 1400;
