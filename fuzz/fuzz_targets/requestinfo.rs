//! Client request targets through what the request path does with them before anything else
//! (`gateway/src/request/phases.rs`): the canonical-path check (`non_canonical`), the one parse
//! (`apiagg_requestinfo::RequestInfo::new`: segments, verb, namespace, resource, name, and the
//! query read once), the route of the path (`classify`), and the authorization attributes
//! (`apiagg_authz::request::attributes`: decoded segments, field and label selectors).
//!
//! Input: one byte choosing the method, then the request target as a client sends it (parsed
//! as `http::Uri`, as the server does; targets that do not parse never reach the path).
//!
//! Checked beyond "no panic": an accepted path has no empty, `.` or `..` segment, no control
//! character or backslash, and no escape a backend would decode into a separator or an
//! unreserved character; the parse's segments are the path's; every attribute an authorizer
//! or a backend sees (decoded) holds no `/` and is neither `.` nor `..`; the route key is the
//! path's group and version.
#![no_main]

use apiagg_gateway::fuzzing::{classify, non_canonical, Route};
use apiagg_requestinfo::{decode_segment, RequestInfo, KEPT_SEGMENTS};
use libfuzzer_sys::fuzz_target;

const METHODS: [&str; 8] = [
    "GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "PROPFIND",
];

/// Whether a decoded attribute could name another object than the one routed.
fn escapes(value: &str) -> bool {
    value.contains('/') || value == "." || value == ".."
}

fuzz_target!(|data: &[u8]| {
    let Some((&method, target)) = data.split_first() else {
        return;
    };
    let method = METHODS[usize::from(method) % METHODS.len()];
    let Ok(uri) = http::Uri::try_from(target) else {
        return;
    };
    let path = uri.path();
    if non_canonical(path).is_some() {
        return;
    }
    // What the check promises.
    assert!(path.starts_with('/'), "{path:?}");
    let inner = path[1..].strip_suffix('/').unwrap_or(&path[1..]);
    if !inner.is_empty() {
        for segment in inner.split('/') {
            assert!(!segment.is_empty(), "empty segment accepted in {path:?}");
            assert!(
                !escapes(&decode_segment(segment)),
                "{segment:?} accepted in {path:?}"
            );
        }
    }
    assert!(
        !path.bytes().any(|b| b < 0x20 || b == 0x7f || b == b'\\'),
        "{path:?}"
    );

    let Ok(info) = RequestInfo::new(method, path, uri.query()) else {
        return;
    };
    let segments: Vec<&str> = if inner.is_empty() {
        Vec::new()
    } else {
        inner.split('/').collect()
    };
    assert_eq!(info.total_segments(), segments.len(), "{path:?}");
    for (i, segment) in segments.iter().enumerate().take(KEPT_SEGMENTS) {
        assert_eq!(info.segment(i), *segment, "segment {i} of {path:?}");
        assert!(info.after(i).starts_with(segment), "after({i}) of {path:?}");
    }
    assert!(path.ends_with(info.parts) || path.trim_end_matches('/').ends_with(info.parts));
    if info.resource_request {
        assert!(matches!(info.api_prefix, "api" | "apis"), "{path:?}");
        assert!(
            !info.version.is_empty() && !info.resource.is_empty(),
            "{path:?}"
        );
    }
    let _ = (info.is_long_running(), info.is_write());

    match classify(&info) {
        Route::GroupVersion(key) => {
            let want = match info.segment(0) {
                "api" => "/v1".to_string(),
                _ => format!("{}/{}", info.segment(1), info.segment(2)),
            };
            assert_eq!(key, want, "route key of {path:?}");
        }
        Route::Group(group) => assert_eq!(group, info.segment(1)),
        _ => {}
    }

    let attributes = apiagg_authz::request::attributes(&info);
    if attributes.resource_request {
        for (what, value) in [
            ("namespace", &attributes.namespace),
            ("group", &attributes.group),
            ("version", &attributes.version),
            ("resource", &attributes.resource),
            ("subresource", &attributes.subresource),
            ("name", &attributes.name),
        ] {
            assert!(!escapes(value), "{what} {value:?} of {path:?}");
        }
        for requirements in [&attributes.field_selector, &attributes.label_selector]
            .into_iter()
            .flatten()
        {
            assert!(
                !requirements.is_empty(),
                "a selector kept with no requirement"
            );
        }
    }
});
