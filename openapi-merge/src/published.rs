//! What `/openapi/v2` and `/openapi/v3` serve, built once per change: the merged v2 document
//! (JSON and gnostic protobuf, each gzip-compressed when large) and the v3 index with the winning
//! document of every key.

use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::sync::Arc;

use bytes::Bytes;
use flate2::write::GzEncoder;
use flate2::Compression;

use crate::protobuf::encode_json;
use crate::{build_v3_index, merge_v2, LocalSpec, RemoteSpec, V3Document, V3Source};

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

/// Bodies at least this large are sent gzip-compressed to clients that accept it (kube-openapi's
/// `pkg/handler/handler.go`).
pub const GZIP_THRESHOLD: usize = 1400;

/// The inputs of one v2 merge. Two input sets are the same when they hold the same prepared
/// documents (by identity) with the same names and priorities: then the merge is not redone.
#[derive(Clone, Default)]
pub struct V2Inputs {
    /// Delegate documents, in chain order.
    pub locals: Vec<LocalSpec>,
    /// One per remote APIService that has a document.
    pub remotes: Vec<RemoteSpec>,
}

impl V2Inputs {
    /// Whether merging `self` would give the same document as merging `other`.
    pub fn same_as(&self, other: &V2Inputs) -> bool {
        let local_eq =
            |a: &LocalSpec, b: &LocalSpec| a.name == b.name && Arc::ptr_eq(&a.spec, &b.spec);
        let remote_eq = |a: &RemoteSpec, b: &RemoteSpec| {
            a.apiservice == b.apiservice
                && a.group == b.group
                && a.version == b.version
                && a.group_priority_minimum == b.group_priority_minimum
                && a.version_priority == b.version_priority
                && Arc::ptr_eq(&a.spec, &b.spec)
        };
        self.locals.len() == other.locals.len()
            && self.remotes.len() == other.remotes.len()
            && self
                .locals
                .iter()
                .zip(&other.locals)
                .all(|(a, b)| local_eq(a, b))
            && self
                .remotes
                .iter()
                .zip(&other.remotes)
                .all(|(a, b)| remote_eq(a, b))
    }
}

fn gzip(bytes: &[u8]) -> Option<Bytes> {
    let mut encoder = GzEncoder::new(Vec::with_capacity(bytes.len() / 8), Compression::default());
    encoder.write_all(bytes).ok()?;
    encoder.finish().ok().map(Bytes::from)
}

/// Merges the inputs and compresses the result (CPU work: call off the async workers).
/// `None` when no input has a usable document.
pub fn render_v2(inputs: &V2Inputs) -> Option<V2Served> {
    let merged = merge_v2(&inputs.locals, &inputs.remotes)?;
    let compress = |bytes: &[u8]| {
        if bytes.len() >= GZIP_THRESHOLD {
            gzip(bytes)
        } else {
            None
        }
    };
    // The merge output is valid JSON by construction; it is re-read entry by entry to encode the
    // protobuf form (never parsed whole).
    let proto = encode_json(&merged.json)
        .map(Bytes::from)
        .unwrap_or_default();
    Some(V2Served {
        gzip: compress(&merged.json),
        proto_gzip: compress(&proto),
        json: merged.json,
        proto,
        etag: merged.etag,
    })
}

/// The documents of one v3 source, in priority order.
pub struct V3Input {
    /// Source name (logs).
    pub name: String,
    /// Its documents.
    pub docs: Vec<Arc<V3Served>>,
}

/// The rendered `/openapi/v3` index, its ETag and the winning document of every key.
pub struct V3Output {
    /// Index JSON.
    pub index: Bytes,
    /// Its ETag.
    pub etag: String,
    /// Winning documents.
    pub docs: HashMap<String, Arc<V3Served>>,
}

/// Builds the index from `inputs` (the first source listing a key wins). Every URL carries
/// apiagg's hash of the bytes it serves.
pub fn render_v3(inputs: &[V3Input]) -> V3Output {
    let sources: Vec<V3Source> = inputs
        .iter()
        .map(|i| V3Source::from_documents(i.name.clone(), i.docs.iter().map(|d| &d.doc)))
        .collect();
    let index = build_v3_index(&sources);
    let mut docs = HashMap::with_capacity(index.owners.len());
    for (key, &owner) in &index.owners {
        let found = inputs
            .get(owner)
            .and_then(|i| i.docs.iter().find(|d| &d.doc.key == key));
        if let Some(doc) = found {
            docs.insert(key.clone(), Arc::clone(doc));
        }
    }
    V3Output {
        index: index.json,
        etag: index.etag,
        docs,
    }
}

/// Index key of a group-version: `api/<v>` for the legacy group, else `apis/<g>/<v>`.
pub fn v3_key(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

/// Drops the delegate's documents for group-versions a remote APIService owns.
pub fn without_remote_keys(
    docs: Vec<Arc<V3Served>>,
    remote: &HashSet<String>,
) -> Vec<Arc<V3Served>> {
    docs.into_iter()
        .filter(|d| !remote.contains(&d.doc.key))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protobuf::encode_document;
    use crate::PreparedV2;

    fn doc(key: &str, body: &str) -> Arc<V3Served> {
        Arc::new(V3Served::new(key, Bytes::from(body.to_string())))
    }

    #[test]
    fn first_source_wins_and_urls_carry_our_hash() {
        let local = V3Input {
            name: "local".into(),
            docs: vec![doc("api/v1", "{\"a\":1}"), doc("apis/x.io/v1", "{\"b\":1}")],
        };
        let remote = V3Input {
            name: "remote".into(),
            docs: vec![doc("apis/x.io/v1", "{\"c\":1}")],
        };
        let out = render_v3(&[local, remote]);
        assert_eq!(&out.docs["apis/x.io/v1"].doc.json[..], b"{\"b\":1}");
        let index: serde_json::Value = serde_json::from_slice(&out.index).expect("json");
        let url = index["paths"]["api/v1"]["serverRelativeURL"]
            .as_str()
            .expect("url");
        assert_eq!(
            url,
            format!("/openapi/v3/api/v1?hash={}", out.docs["api/v1"].doc.hash)
        );
    }

    #[test]
    fn remote_keys_are_removed_from_the_delegate() {
        let remote: HashSet<String> = [v3_key("x.io", "v1")].into_iter().collect();
        let kept = without_remote_keys(
            vec![doc("api/v1", "{}"), doc("apis/x.io/v1", "{}")],
            &remote,
        );
        assert_eq!(kept.len(), 1);
        assert_eq!(v3_key("", "v1"), "api/v1");
    }

    #[test]
    fn large_documents_are_also_sent_gzipped() {
        let inputs = |title: &str| {
            let doc = serde_json::json!({"swagger": "2.0", "info": {"title": title}, "paths": {}});
            let spec = PreparedV2::local(&doc).expect("usable");
            V2Inputs {
                locals: vec![LocalSpec {
                    name: "delegate".into(),
                    spec: Arc::new(spec),
                }],
                remotes: Vec::new(),
            }
        };
        let gunzip = |bytes: &Option<Bytes>| {
            let mut out = Vec::new();
            let gz = bytes.as_deref().expect("gzipped");
            std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(gz), &mut out)
                .expect("gunzip");
            out
        };

        assert!(render_v2(&V2Inputs::default()).is_none());
        let small = render_v2(&inputs("t")).expect("a document");
        assert!(small.gzip.is_none() && small.proto_gzip.is_none());
        let parsed: serde_json::Value = serde_json::from_slice(&small.json).expect("JSON");
        assert_eq!(small.proto, encode_document(&parsed));

        let large = render_v2(&inputs(&"x".repeat(GZIP_THRESHOLD))).expect("a document");
        assert_eq!(gunzip(&large.gzip), large.json);
        assert_eq!(gunzip(&large.proto_gzip), large.proto);
    }
}
