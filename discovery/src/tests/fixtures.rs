//! Fixture loading; a missing fixture fails the test with its path.

use std::path::PathBuf;

use serde::de::DeserializeOwned;

/// Root of the shared fixtures.
pub fn root() -> PathBuf {
    apiagg_test_fixtures::existing_root()
}

/// Path of a fixture relative to the root.
pub fn path(rel: &str) -> PathBuf {
    root().join(rel)
}

/// Reads a fixture as text.
pub fn text(rel: &str) -> String {
    let p = path(rel);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("missing fixture {}: {e}", p.display()))
}

/// Decodes a fixture.
pub fn load<T: DeserializeOwned>(rel: &str) -> T {
    serde_json::from_str(&text(rel))
        .unwrap_or_else(|e| panic!("cannot decode fixture {}: {e}", path(rel).display()))
}

/// The `*.json` files of a fixture directory, sorted.
pub fn json_files(rel_dir: &str) -> Vec<PathBuf> {
    let dir = path(rel_dir);
    let entries = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("missing fixture directory {}: {e}", dir.display()));
    let mut files: Vec<PathBuf> = entries
        .map(|e| e.expect("readable directory entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no fixtures in {}", dir.display());
    files
}

pub const KUBE: &str = "kubernetes/discovery";
pub const OAUTH: &str = "extension-apiservers/oauth-apiserver/discovery";
