//! The `/openapi/v3` index: `{"paths": {"<key>": {"serverRelativeURL": "/openapi/v3/<key>?hash=<H>"}}}`.

use std::collections::BTreeMap;

use bytes::Bytes;
use serde::Serialize;
use serde_json::Value;

use crate::error::SpecError;
use crate::hash::{sha512_upper_hex, strong_etag};

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
    pub fn from_index(name: impl Into<String>, index: &Value) -> Result<Self, SpecError> {
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
