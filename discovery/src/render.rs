//! Rendering documents to bytes with a strong ETag, and If-None-Match matching (k8s.io/apiserver's
//! `pkg/endpoints/discovery/aggregated/etag.go`).

use apiagg_apis::strong_etag;
use bytes::Bytes;
use serde::Serialize;

use crate::merge::{merge_plan, GroupVersionEntry};
use crate::negotiate::{AggregatedVersion, CONTENT_TYPE_V2, CONTENT_TYPE_V2BETA1, JSON};
use crate::types::{
    APIGroupDiscoveryList, APIResourceDiscovery, Extra, Freshness, APIDISCOVERY_V2,
    APIDISCOVERY_V2BETA1,
};

/// A document ready to serve: body, quoted ETag and Content-Type. Cheap to clone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RenderedDoc {
    /// Compact JSON body.
    pub bytes: Bytes,
    /// Quoted strong ETag, e.g. `"3F2A…"`.
    pub etag: String,
    /// Exact Content-Type header value.
    pub content_type: &'static str,
}

impl RenderedDoc {
    /// Whether the request's `If-None-Match` value means "304 Not Modified".
    pub fn not_modified(&self, if_none_match: Option<&str>) -> bool {
        if_none_match_matches(if_none_match, &self.etag)
    }
}

/// Serialisation failed (only possible for documents with non-string map keys). Not retryable:
/// the same document fails again.
#[derive(Debug, thiserror::Error)]
#[error("cannot render discovery document: {0}")]
pub struct RenderError(#[from] serde_json::Error);

/// The result of rendering.
type Result<T, E = RenderError> = std::result::Result<T, E>;

/// The aggregated document in both versions. Both carry the same ETag: upstream hashes the v2
/// JSON and uses that ETag for every representation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AggregatedDocs {
    /// `apidiscovery.k8s.io/v2`.
    pub v2: RenderedDoc,
    /// `apidiscovery.k8s.io/v2beta1` (same items, only `apiVersion` differs).
    pub v2beta1: RenderedDoc,
}

impl AggregatedDocs {
    /// The rendering for a negotiated aggregated version.
    pub fn get(&self, version: AggregatedVersion) -> &RenderedDoc {
        match version {
            AggregatedVersion::V2 => &self.v2,
            AggregatedVersion::V2Beta1 => &self.v2beta1,
        }
    }
}

/// Upstream If-None-Match rule: a byte-for-byte match of the whole header with the quoted
/// ETag. Weak tags, lists and `*` never match.
pub fn if_none_match_matches(if_none_match: Option<&str>, etag: &str) -> bool {
    if_none_match.is_some_and(|v| v == etag)
}

/// Renders any document as compact JSON with a strong ETag.
pub fn render_json<T: Serialize>(doc: &T, content_type: &'static str) -> Result<RenderedDoc> {
    let bytes = serde_json::to_vec(doc)?;
    let etag = strong_etag(&bytes);
    Ok(RenderedDoc {
        bytes: Bytes::from(bytes),
        etag,
        content_type,
    })
}

/// Renders a legacy document (`APIGroupList`, `APIGroup`, …) as `application/json`.
pub fn render_legacy<T: Serialize>(doc: &T) -> Result<RenderedDoc> {
    render_json(doc, JSON)
}

/// Renders the aggregated list as v2 and v2beta1. `kind`/`apiVersion` are written by this
/// function (whatever `list` carries); the items are serialised once and shared.
pub fn render_aggregated(list: &APIGroupDiscoveryList) -> Result<AggregatedDocs> {
    let metadata = serde_json::to_vec(&list.metadata)?;
    let items = serde_json::to_vec(&list.items)?;
    Ok(finish(&metadata, &items))
}

/// Merges and renders in one step without copying documents: the same bytes and ETag as
/// `render_aggregated(&merge_aggregated(entries))`, several times faster.
pub fn render_merged(entries: &[GroupVersionEntry]) -> Result<AggregatedDocs> {
    let items: Vec<GroupOut<'_>> = merge_plan(entries)
        .into_iter()
        .map(|(name, versions)| GroupOut {
            metadata: NameOut { name },
            versions: versions
                .into_iter()
                .map(|e| VersionOut {
                    version: &e.discovery.version,
                    resources: &e.discovery.resources,
                    freshness: e.freshness,
                    extra: &e.discovery.extra,
                })
                .collect(),
        })
        .collect();
    let items = serde_json::to_vec(&items)?;
    Ok(finish(b"{}", &items))
}

/// Borrowed mirror of `APIGroupDiscovery` (same field order, so the same bytes).
#[derive(Serialize)]
struct GroupOut<'a> {
    metadata: NameOut<'a>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    versions: Vec<VersionOut<'a>>,
}

#[derive(Serialize)]
struct NameOut<'a> {
    #[serde(skip_serializing_if = "str::is_empty")]
    name: &'a str,
}

/// Borrowed mirror of `APIVersionDiscovery` with the entry's freshness.
#[derive(Serialize)]
struct VersionOut<'a> {
    version: &'a str,
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    resources: &'a [APIResourceDiscovery],
    freshness: Freshness,
    #[serde(flatten)]
    extra: &'a Extra,
}

fn finish(metadata: &[u8], items: &[u8]) -> AggregatedDocs {
    let v2 = assemble(APIDISCOVERY_V2, metadata, items);
    let v2beta1 = assemble(APIDISCOVERY_V2BETA1, metadata, items);
    let etag = strong_etag(&v2);
    AggregatedDocs {
        v2: RenderedDoc {
            bytes: Bytes::from(v2),
            etag: etag.clone(),
            content_type: CONTENT_TYPE_V2,
        },
        v2beta1: RenderedDoc {
            bytes: Bytes::from(v2beta1),
            etag,
            content_type: CONTENT_TYPE_V2BETA1,
        },
    }
}

fn assemble(api_version: &str, metadata: &[u8], items: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(items.len() + metadata.len() + 96);
    out.extend_from_slice(b"{\"kind\":\"APIGroupDiscoveryList\",\"apiVersion\":\"");
    out.extend_from_slice(api_version.as_bytes());
    out.extend_from_slice(b"\",\"metadata\":");
    out.extend_from_slice(metadata);
    out.extend_from_slice(b",\"items\":");
    out.extend_from_slice(items);
    out.push(b'}');
    out
}
