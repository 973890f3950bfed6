use apiagg_apis::strong_etag;

use crate::merge::{merge_aggregated, GroupVersionEntry, Priority};
use crate::negotiate::AggregatedVersion;
use crate::order::{legacy_group_list, ApiServiceRecord};
use crate::render::*;

fn docs(fetch_ok: bool) -> AggregatedDocs {
    let e = GroupVersionEntry::remote("m.io", "v1", Priority::default(), None, fetch_ok);
    render_aggregated(&merge_aggregated(&[e])).expect("renders")
}

#[test]
fn etag_is_quoted_uppercase_sha512_hex() {
    let d = docs(true);
    let etag = &d.v2.etag;
    assert_eq!(etag.len(), 130);
    assert!(etag.starts_with('"') && etag.ends_with('"'));
    assert!(etag[1..129]
        .chars()
        .all(|c| c.is_ascii_digit() || ('A'..='F').contains(&c)));
    assert_eq!(*etag, strong_etag(&d.v2.bytes), "the hash of the v2 bytes");
}

#[test]
fn etag_is_stable_and_tracks_content() {
    assert_eq!(docs(true), docs(true));
    assert_ne!(docs(true).v2.etag, docs(false).v2.etag);
}

#[test]
fn exact_body_and_headers() {
    let d = docs(false);
    assert_eq!(
        &d.v2.bytes[..],
        br#"{"kind":"APIGroupDiscoveryList","apiVersion":"apidiscovery.k8s.io/v2","metadata":{},"items":[{"metadata":{"name":"m.io"},"versions":[{"version":"v1","freshness":"Stale"}]}]}"#
    );
    assert_eq!(
        d.v2.content_type,
        "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
    );
    assert_eq!(
        d.v2beta1.content_type,
        "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList"
    );
    assert_eq!(d.get(AggregatedVersion::V2), &d.v2);
    assert_eq!(d.get(AggregatedVersion::V2Beta1), &d.v2beta1);
}

#[test]
fn if_none_match_is_an_exact_string_compare() {
    let d = docs(true);
    let etag = d.v2.etag.clone();
    assert!(d.v2.not_modified(Some(&etag)));
    assert!(d.v2beta1.not_modified(Some(&etag)), "same ETag for v2beta1");
    assert!(!d.v2.not_modified(None));
    assert!(!d.v2.not_modified(Some(&format!("W/{etag}"))));
    assert!(!d.v2.not_modified(Some(&format!("{etag}, \"other\""))));
    assert!(!d.v2.not_modified(Some(&format!(" {etag}"))));
    assert!(!d.v2.not_modified(Some("*")));
    assert!(!d.v2.not_modified(Some(etag.trim_matches('"'))));
    assert!(!d.v2.not_modified(Some(&etag.to_lowercase())));
}

#[test]
fn legacy_rendering_is_plain_json() {
    let records = [ApiServiceRecord {
        name: "v1.x.io",
        group: "x.io",
        version: "v1",
        group_priority_minimum: 1000,
        version_priority: 15,
    }];
    let doc = render_legacy(&legacy_group_list(&records)).expect("renders");
    assert_eq!(doc.content_type, "application/json");
    assert!(doc
        .bytes
        .starts_with(br#"{"kind":"APIGroupList","apiVersion":"v1","groups":["#));
}
