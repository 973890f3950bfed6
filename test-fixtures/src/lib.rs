//! The one locator of the real documents the tests and benchmarks use (see
//! `../shared/fixtures/README.md`): `$APIAGG_FIXTURES` when set, otherwise `shared/fixtures`
//! beside the checkout. Found from any working directory; a missing fixture panics with the
//! path looked at and how to point elsewhere. Only tests and benchmarks depend on this crate.

use std::path::{Path, PathBuf};

/// The fixture folder, whether it exists or not.
fn root() -> PathBuf {
    match std::env::var_os("APIAGG_FIXTURES") {
        Some(dir) => PathBuf::from(dir),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures"),
    }
}

/// The fixture folder, which must exist.
pub fn existing_root() -> PathBuf {
    let root = root();
    assert!(
        root.is_dir(),
        "fixtures not found at {} (set APIAGG_FIXTURES to the fixture folder)",
        root.display()
    );
    root
}

/// The path of the fixture `rel` (relative to the folder), which must exist.
pub fn path(rel: &str) -> PathBuf {
    let path = root().join(rel);
    assert!(
        path.exists(),
        "fixture {rel} not found at {} (set APIAGG_FIXTURES to the fixture folder)",
        path.display()
    );
    path
}

/// The bytes of the fixture `rel`.
pub fn read(rel: &str) -> Vec<u8> {
    let path = path(rel);
    std::fs::read(&path).unwrap_or_else(|e| panic!("fixture {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_missing_fixture_says_where_it_looked() {
        let panic = std::panic::catch_unwind(|| super::path("no/such.json")).expect_err("missing");
        let message = panic.downcast_ref::<String>().expect("message");
        assert!(message.contains("no/such.json"), "{message}");
        assert!(message.contains("APIAGG_FIXTURES"), "{message}");
    }
}
