//! apiagg: a Kubernetes API aggregation gateway. The binary `apiagg` (`main.rs`, the command line
//! only) runs [`app::serve`].
//!
//! The crate is organised by concern in numbered layers; a room imports only rooms of lower
//! layers (and the library crates), rooms of one layer never import each other:
//!
//! | layer | rooms | may import |
//! |---|---|---|
//! | L4 | `app` (composition, listener, shutdown) | everything below |
//! | L3 | `request` (the pingora request path), `controllers` (background loops) | L2, L1, L0 |
//! | L2 | `state` (published snapshots, options), `auth` (who the caller is), `apiservices` (the `apiregistration.k8s.io/v1` REST API), `flowcontrol` (API Priority and Fairness), `audit` (policy, events, log and webhook backends) | L1, L0 |
//! | L1 | `backends` (route table, upstreams, health and in-flight caps, TLS, host names, the controllers' HTTP clients), `store` (APIServices registered through the API: embedded or etcd) | L0 |
//! | L0 | `observe` (metrics, lifecycle, health checks) | nothing |
//!
//! The `rooms_import_only_lower_layers` test below checks every `use crate::` line against
//! this table.

mod apiservices;
pub mod app;
mod audit;
mod auth;
mod backends;
mod controllers;
mod flowcontrol;
mod observe;
mod request;
mod state;
mod store;

pub use auth::{AuthError, InvalidIdentity, TokenCache, User};
pub use state::{Options, ProbeOptions};

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    /// Every room with the rooms it may import (the table above).
    const ROOMS: [(&str, &[&str]); 11] = [
        (
            "app",
            &[
                "request",
                "controllers",
                "state",
                "auth",
                "apiservices",
                "flowcontrol",
                "audit",
                "backends",
                "store",
                "observe",
            ],
        ),
        (
            "request",
            &[
                "state",
                "auth",
                "apiservices",
                "flowcontrol",
                "audit",
                "backends",
                "store",
                "observe",
            ],
        ),
        (
            "controllers",
            &[
                "state",
                "auth",
                "apiservices",
                "flowcontrol",
                "audit",
                "backends",
                "store",
                "observe",
            ],
        ),
        ("state", &["backends", "store", "observe"]),
        ("auth", &["backends", "store", "observe"]),
        ("apiservices", &["backends", "store", "observe"]),
        ("flowcontrol", &["backends", "store", "observe"]),
        ("audit", &["backends", "store", "observe"]),
        ("backends", &["observe"]),
        ("store", &["observe"]),
        ("observe", &[]),
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

    /// The rooms named by `crate::<room>` in `source` (test modules included: they obey too).
    fn imported_rooms(source: &str) -> Vec<String> {
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
    fn rooms_import_only_lower_layers() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut violations = Vec::new();
        let mut checked = 0;
        for (room, allowed) in ROOMS {
            let mut files = Vec::new();
            rust_files(&src.join(room), &mut files);
            assert!(!files.is_empty(), "room {room} has no files");
            for file in files {
                let source = std::fs::read_to_string(&file).expect("read source");
                for target in imported_rooms(&source) {
                    checked += 1;
                    if target != room && !allowed.contains(&target.as_str()) {
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
    fn every_room_is_in_the_table() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        for entry in std::fs::read_dir(&src).expect("src").flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let room = name.trim_end_matches(".rs");
            // The binary's own files: `main.rs` and its command line (`cli/`).
            if room == "lib" || room == "main" || room == "cli" {
                continue;
            }
            assert!(
                ROOMS.iter().any(|(r, _)| *r == room),
                "{room} is not in the layer table"
            );
        }
    }

    #[test]
    fn the_scan_sees_imports() {
        let rooms = imported_rooms("use crate::backends::X;\nlet a = crate::observe::y();");
        assert_eq!(rooms, ["backends", "observe"]);
    }
}
