//! apiagg: a Kubernetes API aggregation gateway. The binary `apiagg` (`main.rs`, the command line
//! only) runs [`app::serve`].
//!
//! The leaves are crates of their own, so Cargo keeps them apart (docs/README.md lists them
//! all): among them `apiagg-observe` (metrics, lifecycle, health, tracing export),
//! `apiagg-store` (the APIService stores), `apiagg-flowcontrol` (API Priority and Fairness),
//! `apiagg-audit` (policy, events and backends), `apiagg-authn` and `apiagg-authz`
//! (authentication and authorization configuration, JWT, CEL, RBAC), `apiagg-strategy` (the
//! APIService API's writes) and `apiagg-requestinfo` (the one parse of a request). This crate keeps what composes them, organised by concern in numbered layers; a
//! module imports only modules of lower layers (and the crates), modules of one layer never
//! import each other:
//!
//! | layer | modules | may import |
//! |---|---|---|
//! | L4 | `app` (composition, listener, shutdown) | everything below |
//! | L3 | `request` (the request path), `controllers` (background loops) | L2, L1 |
//! | L2 | `state` (published snapshots, options), `auth` (who the caller is and what they may do), `apiservices` (the `apiregistration.k8s.io/v1` REST API) | L1 |
//! | L1 | `backends` (route table, upstreams, health and in-flight caps, TLS, host names, the controllers' HTTP clients), `deadlines` (client connections' head and idle deadlines) | nothing |
//!
//! The `modules_import_only_lower_layers` test below checks every `use crate::` line against
//! this table.

mod apiservices;
pub mod app;
mod auth;
mod backends;
mod controllers;
mod deadlines;
mod request;
mod state;

pub use auth::{AuthError, InvalidIdentity, TokenCache, User};
pub use state::{OpenApiV2, Options, ProbeOptions};

/// What the fuzz targets of `fuzz/` drive and nothing else reaches from outside: the backends'
/// HTTP/1.1 client (its answer parser and body framing, over any `AsyncRead + AsyncWrite`), and
/// the request path's canonical-path check and route of a path. Only with the cargo feature
/// `fuzzing`, which no build of the product enables.
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing {
    pub use crate::backends::H1Client;
    pub use crate::request::{classify, non_canonical, FuzzRoute as Route};
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    /// Every module with the modules it may import (the table above).
    const MODULES: [(&str, &[&str]); 8] = [
        (
            "app",
            &[
                "request",
                "controllers",
                "state",
                "auth",
                "apiservices",
                "backends",
                "deadlines",
            ],
        ),
        (
            "request",
            &["state", "auth", "apiservices", "backends", "deadlines"],
        ),
        ("controllers", &["state", "auth", "apiservices", "backends"]),
        ("state", &["backends"]),
        ("auth", &["backends"]),
        ("apiservices", &["backends"]),
        ("backends", &[]),
        ("deadlines", &[]),
    ];

    fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
        let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                rust_files(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }

    /// The modules named by `crate::<module>` in `source` (test modules included: they obey too).
    fn imported_modules(source: &str) -> Vec<String> {
        source
            .match_indices("crate::")
            .filter(|(at, _)| !source[..*at].ends_with(char::is_alphanumeric))
            .map(|(at, _)| {
                source[at + 7..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect()
            })
            .collect()
    }

    #[test]
    fn modules_import_only_lower_layers() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut violations = Vec::new();
        let mut checked = 0;
        for (module, allowed) in MODULES {
            let mut files = Vec::new();
            let single = src.join(format!("{module}.rs"));
            if single.is_file() {
                files.push(single);
            } else {
                rust_files(&src.join(module), &mut files);
            }
            assert!(!files.is_empty(), "module {module} has no files");
            for file in files {
                let source = std::fs::read_to_string(&file).expect("read source");
                for target in imported_modules(&source) {
                    checked += 1;
                    if target != module && !allowed.contains(&target.as_str()) {
                        violations.push(format!("{} imports crate::{target}", file.display()));
                    }
                }
            }
        }
        assert!(
            checked > 20,
            "only {checked} imports found: is the scan broken?"
        );
        assert!(violations.is_empty(), "{}", violations.join("\n"));
    }

    #[test]
    fn every_module_is_in_the_table() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        for entry in std::fs::read_dir(&src).expect("src").flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let module = name.trim_end_matches(".rs");
            // The binary's own files: `main.rs` and its command line (`cli/`).
            if module == "lib" || module == "main" || module == "cli" {
                continue;
            }
            assert!(
                MODULES.iter().any(|(m, _)| *m == module),
                "{module} is not in the layer table"
            );
        }
    }

    #[test]
    fn the_scan_sees_imports() {
        let modules = imported_modules("use crate::backends::X;\nlet a = crate::state::y();");
        assert_eq!(modules, ["backends", "state"]);
    }
}
