//! OpenAPI v3 as `gateway/src/controllers/openapi/` reads it: a backend's `/openapi/v3` index
//! (`V3Source::from_index`), the per-key documents it lists (`V3Served::new`, hashed as sent),
//! and the published index built from the delegate's and the backends' sources (`render_v3`,
//! `build_v3_index`, `without_remote_keys`, `v3_key`).
//!
//! Input: one JSON document, read both as an index and as a group-version document.
#![no_main]

use std::collections::HashSet;
use std::sync::Arc;

use apiagg_openapi_merge::{
    build_v3_index, render_v3, v3_key, without_remote_keys, V3Document, V3Input, V3Served, V3Source,
};
use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

fuzz_target!(|data: &[u8]| {
    let Ok(value) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    let body = Bytes::copy_from_slice(data);

    // As a document: what the delegate and a backend serve at `/openapi/v3/<key>`.
    let own = Arc::new(V3Served::new(
        "apis/apiregistration.k8s.io/v1",
        Bytes::from_static(b"{}"),
    ));
    let doc = Arc::new(V3Served::new("apis/x.io/v1", body.clone()));
    let _ = V3Document::from_value("apis/x.io/v1", &value);

    // As an index: every key it lists, each served with the same body.
    let index = V3Source::from_index("backend", &value);
    let listed: Vec<Arc<V3Served>> = index
        .as_ref()
        .map(|source| {
            source
                .paths
                .iter()
                .take(16)
                .filter(|(_, url)| url.starts_with('/'))
                .map(|(key, _)| Arc::new(V3Served::new(key.as_str(), body.clone())))
                .collect()
        })
        .unwrap_or_default();

    let remote_keys: HashSet<String> = [v3_key("x.io", "v1"), v3_key("", "v1")].into();
    let delegate_docs = without_remote_keys(listed.clone(), &remote_keys);
    let out = render_v3(&[
        V3Input {
            name: "delegate".into(),
            docs: delegate_docs,
        },
        V3Input {
            name: "apiagg".into(),
            docs: vec![own],
        },
        V3Input {
            name: "v1.x.io".into(),
            docs: vec![doc],
        },
        V3Input {
            name: "backend".into(),
            docs: listed,
        },
    ]);
    // The index is served as JSON: it must read back, listing every owned key.
    let parsed: Value = serde_json::from_slice(&out.index).expect("index JSON parses");
    let paths = parsed
        .get("paths")
        .and_then(Value::as_object)
        .map_or(0, |p| p.len());
    assert_eq!(paths, out.docs.len());

    let mut sources = vec![V3Source::from_documents(
        "local",
        [&V3Document::new("api/v1", body)],
    )];
    sources.extend(index);
    let built = build_v3_index(&sources);
    assert_eq!(
        built.owners.len(),
        serde_json::from_slice::<Value>(&built.json)
            .ok()
            .and_then(|v| v.get("paths").and_then(Value::as_object).map(|p| p.len()))
            .unwrap_or(0)
    );
});
