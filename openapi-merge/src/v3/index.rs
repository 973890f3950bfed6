//! The `/openapi/v3` index: `{"paths": {"<key>": {"serverRelativeURL": "/openapi/v3/<key>?hash=<H>"}}}`.

use std::collections::BTreeMap;

use bytes::Bytes;
use serde::Serialize;
use serde_json::Value;

use crate::error::{Result, SpecError};
use apiagg_apis::{sha512_upper_hex, strong_etag};

/// One group-version document served at `/openapi/v3/<key>` by us (a local or converted one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct V3Document {
    /// Index key without leading slash: `api/v1`, `apis/<group>/<version>`.
    pub key: String,
    /// The exact JSON bytes served.
    pub json: Bytes,
    /// Uppercase hex SHA-512 of `json` (128 characters), as kube-openapi's handler3 computes it;
    /// also the document's ETag (quoted).
    pub hash: String,
}

impl V3Document {
    /// Hashes the bytes that will be served.
    pub fn new(key: impl Into<String>, json: Bytes) -> Self {
        let hash = sha512_upper_hex(&json);
        Self {
            key: key.into(),
            json,
            hash,
        }
    }

    /// Serialises a parsed document once, then hashes it.
    pub fn from_value(key: impl Into<String>, doc: &Value) -> Result<Self, serde_json::Error> {
        Ok(Self::new(key, Bytes::from(serde_json::to_vec(doc)?)))
    }

    /// `/openapi/v3/<key>?hash=<hash>`.
    pub fn server_relative_url(&self) -> String {
        format!("/openapi/v3/{}?hash={}", self.key, self.hash)
    }

    /// Quoted ETag of the document.
    pub fn etag(&self) -> String {
        format!("\"{}\"", self.hash)
    }
}

/// The index entries contributed by one source (the delegate, a remote APIService, …).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct V3Source {
    /// Source name (for routing and logs).
    pub name: String,
    /// `(key, serverRelativeURL)` pairs.
    pub paths: Vec<(String, String)>,
}

impl V3Source {
    /// Entries for documents we hash and serve ourselves.
    pub fn from_documents<'a>(
        name: impl Into<String>,
        docs: impl IntoIterator<Item = &'a V3Document>,
    ) -> Self {
        Self {
            name: name.into(),
            paths: docs
                .into_iter()
                .map(|d| (d.key.clone(), d.server_relative_url()))
                .collect(),
        }
    }

    /// Entries from a backend's own `/openapi/v3` index, passed through unchanged (its hashes are
    /// never rewritten).
    pub fn from_index(name: impl Into<String>, index: &Value) -> Result<Self> {
        let malformed = |detail: String| SpecError::MalformedV3Index { detail };
        let paths = index
            .get("paths")
            .and_then(Value::as_object)
            .ok_or_else(|| malformed("no `paths` object".into()))?;
        let paths = paths
            .iter()
            .map(|(key, entry)| {
                entry
                    .get("serverRelativeURL")
                    .and_then(Value::as_str)
                    .map(|url| (key.clone(), url.to_owned()))
                    .ok_or_else(|| {
                        malformed(format!("entry {key:?} has no string serverRelativeURL"))
                    })
            })
            .collect::<Result<_, _>>()?;
        Ok(Self {
            name: name.into(),
            paths,
        })
    }
}

/// The rendered `/openapi/v3` index and who owns each key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct V3Index {
    /// `{"paths": {…}}` with keys sorted.
    pub json: Bytes,
    /// Quoted strong ETag (uppercase hex SHA-512 of `json`).
    pub etag: String,
    /// Key → index of the winning source in the input slice (route `/openapi/v3/<key>` there).
    pub owners: BTreeMap<String, usize>,
}

#[derive(Serialize)]
struct Entry<'a> {
    #[serde(rename = "serverRelativeURL")]
    server_relative_url: &'a str,
}

#[derive(Serialize)]
struct Index<'a> {
    paths: BTreeMap<&'a str, Entry<'a>>,
}

/// Builds the index from `sources` in priority order. Upstream lets Go map iteration pick the
/// winner of a duplicate key; here the **first source listing a key wins** (the caller passes
/// local sources first in chain order, then remote APIServices in v2 merge order), and within a
/// source the first occurrence wins. Keys are not filtered by APIService group-version (as
/// upstream). Keys are written sorted.
pub fn build_v3_index(sources: &[V3Source]) -> V3Index {
    let mut paths: BTreeMap<&str, Entry<'_>> = BTreeMap::new();
    let mut owners = BTreeMap::new();
    for (index, source) in sources.iter().enumerate() {
        for (key, url) in &source.paths {
            if paths.contains_key(key.as_str()) {
                continue;
            }
            paths.insert(
                key,
                Entry {
                    server_relative_url: url,
                },
            );
            owners.insert(key.clone(), index);
        }
    }
    // A map of strings always serialises.
    let json = serde_json::to_vec(&Index { paths }).unwrap_or_default();
    let etag = strong_etag(&json);
    V3Index {
        json: Bytes::from(json),
        etag,
        owners,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture_bytes(rel: &str) -> Bytes {
        Bytes::from(apiagg_test_fixtures::read(rel))
    }

    fn kube_documents() -> Vec<V3Document> {
        [
            (
                "apis/networking.k8s.io/v1alpha1",
                "apis__networking.k8s.io__v1alpha1_openapi.json",
            ),
            ("api/v1", "api__v1_openapi.json"),
            ("apis/apps/v1", "apis__apps__v1_openapi.json"),
            ("apis/batch/v1", "apis__batch__v1_openapi.json"),
            (
                "apis/discovery.k8s.io/v1",
                "apis__discovery.k8s.io__v1_openapi.json",
            ),
        ]
        .into_iter()
        .map(|(key, file)| {
            V3Document::new(key, fixture_bytes(&format!("kubernetes/openapi-v3/{file}")))
        })
        .collect()
    }

    fn parse(index: &V3Index) -> Value {
        serde_json::from_slice(&index.json).unwrap()
    }

    #[test]
    fn index_lists_sorted_keys_with_sha512_hashes() {
        let docs = kube_documents();
        let index = build_v3_index(&[V3Source::from_documents(
            "k8s_internal_local_delegation_chain_0000000001",
            &docs,
        )]);
        let value = parse(&index);
        let paths = value["paths"].as_object().unwrap();
        let keys: Vec<&str> = paths.keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            [
                "api/v1",
                "apis/apps/v1",
                "apis/batch/v1",
                "apis/discovery.k8s.io/v1",
                "apis/networking.k8s.io/v1alpha1"
            ]
        );
        let url = paths["apis/apps/v1"]["serverRelativeURL"].as_str().unwrap();
        let hash = url.strip_prefix("/openapi/v3/apis/apps/v1?hash=").unwrap();
        assert_eq!(hash.len(), 128);
        assert!(hash
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'A'..=b'F').contains(&b)));
        assert_eq!(hash, sha512_upper_hex(&docs[2].json));
        assert_eq!(docs[2].etag(), format!("\"{hash}\""));
        assert_eq!(index.etag, format!("\"{}\"", sha512_upper_hex(&index.json)));
        assert!(index.owners.values().all(|&o| o == 0));
    }

    #[test]
    fn a_changed_document_changes_its_hash_only() {
        let docs = kube_documents();
        let mut changed = docs.clone();
        let mut doc: Value = serde_json::from_slice(&changed[2].json).unwrap();
        doc["info"]["title"] = Value::String("changed".into());
        changed[2] = V3Document::from_value("apis/apps/v1", &doc).unwrap();
        let before = parse(&build_v3_index(&[V3Source::from_documents("a", &docs)]));
        let after_index = build_v3_index(&[V3Source::from_documents("a", &changed)]);
        let after = parse(&after_index);
        assert_ne!(
            before["paths"]["apis/apps/v1"],
            after["paths"]["apis/apps/v1"]
        );
        assert_eq!(before["paths"]["api/v1"], after["paths"]["api/v1"]);
        assert_ne!(
            build_v3_index(&[V3Source::from_documents("a", &docs)]).etag,
            after_index.etag
        );
    }

    #[test]
    fn duplicate_keys_go_to_the_first_source_and_backend_urls_pass_through() {
        let local = V3Source::from_documents("local", &kube_documents());
        let oauth_index: Value = serde_json::from_slice(&fixture_bytes(
            "extension-apiservers/oauth-apiserver/discovery/v3-discovery.json",
        ))
        .unwrap();
        let oauth = V3Source::from_index("v1.oauth.openshift.io", &oauth_index).unwrap();
        let shadow = V3Source {
            name: "shadow".into(),
            paths: vec![("api/v1".into(), "/openapi/v3/api/v1?hash=BAD".into())],
        };
        let index = build_v3_index(&[local, oauth, shadow]);
        let value = parse(&index);
        assert_eq!(index.owners["api/v1"], 0);
        assert_ne!(
            value["paths"]["api/v1"]["serverRelativeURL"],
            "/openapi/v3/api/v1?hash=BAD"
        );
        assert_eq!(index.owners["apis/oauth.openshift.io/v1"], 1);
        // The backend's URL (here without a hash) is kept as it sent it; its extra keys are listed.
        assert_eq!(
            value["paths"]["apis/oauth.openshift.io/v1"]["serverRelativeURL"],
            "/openapi/v3/apis/oauth.openshift.io/v1"
        );
        assert_eq!(index.owners["version"], 1);
        let keys: Vec<&String> = value["paths"].as_object().unwrap().keys().collect();
        let mut sorted = keys.clone();
        sorted.sort();
        assert_eq!(keys, sorted);
    }

    #[test]
    fn malformed_backend_index_is_an_error() {
        assert!(matches!(
            V3Source::from_index("x", &serde_json::json!({"paths": {"a": {}}})),
            Err(SpecError::MalformedV3Index { .. })
        ));
        assert!(V3Source::from_index("x", &serde_json::json!([])).is_err());
        let empty = build_v3_index(&[]);
        assert_eq!(&empty.json[..], br#"{"paths":{}}"#);
    }
}
