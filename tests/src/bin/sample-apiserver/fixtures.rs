//! Fixture documents, read once at start and kept in memory.
//!
//! A request path maps to a file name by dropping the leading `/` and writing
//! `/` as `__`: `/apis/oauth.openshift.io/v1` → `apis__oauth.openshift.io__v1.json`.

use std::collections::HashMap;
use std::fs;
use std::path::Path;

use anyhow::{Context, Result};
use bytes::Bytes;
use serde_json::Value;

/// Files in the fixture folder that are not served under their own path.
const AGGREGATED: &str = "aggregated_v2.json";
const V3_INDEX: &str = "v3-discovery.json";
const V2_SPEC: &str = "openapi-v2.json";

#[derive(Default)]
pub struct Fixtures {
    /// Request path → document.
    docs: HashMap<String, Bytes>,
    /// `aggregated_v2.json`, parsed.
    pub aggregated: Option<Value>,
    /// `/openapi/v2` document.
    pub openapi_v2: Option<Bytes>,
    /// `/openapi/v3` index.
    pub openapi_v3_index: Option<Bytes>,
    /// `/openapi/v3/<path>` documents, keyed by `<path>` (e.g. `apis/oauth.openshift.io/v1`).
    openapi_v3: HashMap<String, Bytes>,
}

impl Fixtures {
    /// Loads `dir`; a missing folder or an invalid JSON file is an error.
    pub fn load(dir: &Path) -> Result<Self> {
        let mut fixtures = Fixtures::default();
        for (stem, bytes) in json_files(dir)? {
            match format!("{stem}.json").as_str() {
                AGGREGATED => {
                    fixtures.aggregated =
                        Some(serde_json::from_slice(&bytes).with_context(|| {
                            format!("parsing {}", dir.join(AGGREGATED).display())
                        })?);
                }
                V3_INDEX => fixtures.openapi_v3_index = Some(bytes),
                V2_SPEC => fixtures.openapi_v2 = Some(bytes),
                _ => {
                    fixtures
                        .docs
                        .insert(format!("/{}", stem.replace("__", "/")), bytes);
                }
            }
        }
        let parent = dir.parent().unwrap_or(dir);
        let swagger = parent.join("openapi-v2").join("swagger.json");
        if fixtures.openapi_v2.is_none() && swagger.is_file() {
            let bytes =
                fs::read(&swagger).with_context(|| format!("reading {}", swagger.display()))?;
            fixtures.openapi_v2 = Some(bytes.into());
        }
        let v3_dir = parent.join("openapi-v3");
        if v3_dir.is_dir() {
            for (stem, bytes) in json_files(&v3_dir)? {
                if let Some(path) = stem.strip_suffix("_openapi") {
                    fixtures.openapi_v3.insert(path.replace("__", "/"), bytes);
                }
            }
        }
        tracing::info!(
            dir = %dir.display(),
            documents = fixtures.docs.len(),
            aggregated = fixtures.aggregated.is_some(),
            openapi_v2 = fixtures.openapi_v2.is_some(),
            openapi_v3 = fixtures.openapi_v3.len(),
            "loaded fixtures"
        );
        Ok(fixtures)
    }

    /// The document for a request path.
    pub fn get(&self, path: &str) -> Option<Bytes> {
        self.docs.get(path).cloned()
    }

    /// The document for a request path, parsed.
    pub fn legacy_json(&self, path: &str) -> Option<Value> {
        self.docs
            .get(path)
            .and_then(|b| serde_json::from_slice(b).ok())
    }

    /// An OpenAPI v3 document by its path below `/openapi/v3/`.
    pub fn openapi_v3(&self, path: &str) -> Option<Bytes> {
        self.openapi_v3.get(path).cloned()
    }
}

/// `(file stem, contents)` of every `*.json` file in `dir`, each checked to be JSON.
fn json_files(dir: &Path) -> Result<Vec<(String, Bytes)>> {
    let mut out = Vec::new();
    let entries =
        fs::read_dir(dir).with_context(|| format!("reading fixture dir {}", dir.display()))?;
    for entry in entries {
        let path = entry?.path();
        let Some(stem) = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_suffix(".json"))
        else {
            continue;
        };
        let bytes = fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
        serde_json::from_slice::<serde::de::IgnoredAny>(&bytes)
            .with_context(|| format!("{} is not JSON", path.display()))?;
        out.push((stem.to_string(), Bytes::from(bytes)));
    }
    Ok(out)
}
