//! OpenAPI documents read from disk on every request (`--openapi-v2`, `--openapi-v3-dir`), sent
//! byte for byte, so a test can change a document while the server runs or serve garbage.

use std::path::{Path, PathBuf};

use bytes::Bytes;
use serde_json::{json, Map, Value};

/// The `--openapi-v2` file and the `--openapi-v3-dir` folder, when given.
pub struct OpenApiFiles {
    pub v2: Option<PathBuf>,
    pub v3_dir: Option<PathBuf>,
}

/// Answer for a path these flags own: `Some(None)` is a 404, `None` means "not configured".
pub type Lookup = Option<Option<Bytes>>;

const V3_INDEX: &str = "v3-discovery.json";
const V3_SUFFIX: &str = "_openapi.json";

impl OpenApiFiles {
    /// `/openapi/v2`.
    pub fn v2(&self) -> Lookup {
        self.v2.as_deref().map(read)
    }

    /// `/openapi/v3`: `v3-discovery.json`, or an index of the folder's documents with a hash of
    /// each one's bytes.
    pub fn v3_index(&self) -> Lookup {
        let dir = self.v3_dir.as_deref()?;
        let given = dir.join(V3_INDEX);
        if given.is_file() {
            return Some(read(&given));
        }
        let mut paths = Map::new();
        let entries = std::fs::read_dir(dir).ok().into_iter().flatten().flatten();
        let mut names: Vec<String> = entries
            .filter_map(|e| e.file_name().to_str().map(str::to_string))
            .collect();
        names.sort();
        for name in names {
            let Some(stem) = name.strip_suffix(V3_SUFFIX) else {
                continue;
            };
            let Some(bytes) = read(&dir.join(&name)) else {
                continue;
            };
            let key = stem.replace("__", "/");
            let url = format!("/openapi/v3/{key}?hash={:016X}", fnv1a(&bytes));
            paths.insert(key, json!({ "serverRelativeURL": url }));
        }
        let index = json!({ "paths": Value::Object(paths) });
        Some(Some(Bytes::from(
            serde_json::to_vec(&index).unwrap_or_default(),
        )))
    }

    /// `/openapi/v3/<key>`.
    pub fn v3(&self, key: &str) -> Lookup {
        let dir = self.v3_dir.as_deref()?;
        if key.contains("..") || key.contains('\\') {
            return Some(None);
        }
        Some(read(
            &dir.join(format!("{}{V3_SUFFIX}", key.replace('/', "__"))),
        ))
    }
}

fn read(path: &Path) -> Option<Bytes> {
    std::fs::read(path).ok().map(Bytes::from)
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}
