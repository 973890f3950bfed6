//! Merge + render of aggregated discovery for 200 remote backends plus the kube-apiserver
//! document as the local delegate. Rendering writes JSON and CBOR; `cbor_of_aggregated` is the
//! CBOR share of it (one of the two transcodings `render_merged` does).

use std::sync::Arc;

use apiagg_discovery::{
    legacy_group_list, merge_aggregated, render_aggregated, render_legacy, render_merged,
    split_group_versions, APIGroupDiscoveryList, ApiServiceRecord, GroupVersionEntry, Priority,
    Source,
};
use criterion::{black_box, criterion_group, criterion_main, Criterion};

const BACKENDS: usize = 200;

fn fixture(rel: &str) -> APIGroupDiscoveryList {
    let bytes = apiagg_test_fixtures::read(rel);
    serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("bad fixture {rel}: {e}"))
}

fn entries() -> Vec<GroupVersionEntry> {
    let kube = fixture("kubernetes/discovery/aggregated_v2.json");
    let mut out = GroupVersionEntry::from_local_document(&kube, Source::Local, |_, _| Priority {
        group: 17000,
        version: 15,
    });
    let oauth = split_group_versions(fixture(
        "extension-apiservers/oauth-apiserver/discovery/aggregated_v2.json",
    ));
    for i in 0..BACKENDS {
        for (group, version) in &oauth {
            let group = format!("b{i:03}.{group}");
            let priority = Priority {
                group: 1000 + (i as i32 % 7),
                version: 15,
            };
            let cached = Some(Arc::new(version.clone()));
            // Every tenth backend is down: half of those with a cached document.
            let fetch_ok = i % 10 != 0;
            let cached = if fetch_ok || i % 20 == 0 {
                cached
            } else {
                None
            };
            out.push(GroupVersionEntry::remote(
                &group,
                &version.version,
                priority,
                cached,
                fetch_ok,
            ));
        }
    }
    out
}

fn bench(c: &mut Criterion) {
    let entries = entries();
    let bytes = render_aggregated(&merge_aggregated(&entries))
        .map(|d| d.v2.bytes.len())
        .unwrap_or(0);
    eprintln!(
        "{} group-versions, aggregated v2 document {} bytes",
        entries.len(),
        bytes
    );

    c.bench_function("merge_200_backends", |b| {
        b.iter(|| black_box(merge_aggregated(black_box(&entries))))
    });
    c.bench_function("merge_and_render_200_backends", |b| {
        b.iter(|| {
            let merged = merge_aggregated(black_box(&entries));
            black_box(render_aggregated(&merged).map(|d| d.v2.etag.len()))
        })
    });

    c.bench_function("render_merged_200_backends", |b| {
        b.iter(|| black_box(render_merged(black_box(&entries)).map(|d| d.v2.etag.len())))
    });
    let json = render_merged(&entries)
        .map(|d| d.v2.bytes)
        .unwrap_or_default();
    c.bench_function("cbor_of_aggregated_200_backends", |b| {
        b.iter(|| black_box(apiagg_apis::json_to_cbor(black_box(&json)).map(|c| c.len())))
    });

    let names: Vec<String> = entries
        .iter()
        .map(|e| format!("{}.{}", e.discovery.version, e.group))
        .collect();
    c.bench_function("legacy_apis_200_backends", |b| {
        b.iter(|| {
            let records: Vec<ApiServiceRecord<'_>> = entries
                .iter()
                .zip(&names)
                .map(|(e, name)| ApiServiceRecord {
                    name,
                    group: &e.group,
                    version: &e.discovery.version,
                    group_priority_minimum: e.priority.group,
                    version_priority: e.priority.version,
                })
                .collect();
            black_box(render_legacy(&legacy_group_list(&records)).map(|d| d.bytes.len()))
        })
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
