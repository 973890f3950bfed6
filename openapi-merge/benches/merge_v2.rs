//! Criterion benchmarks of the OpenAPI v2 merge (merge + serialise to JSON bytes + ETag).
//!
//! * `realistic`: kube-apiserver v1.32 plus oauth/user, metrics-server, kubevirt, six CRD products,
//!   eight Config Connector CRDs and the definitions-only OpenShift document (`$APIAGG_FIXTURES`).
//! * `kube_openapi_testdata`: the work of kube-openapi's
//!   `BenchmarkMergeSpecsIgnorePathConflictsWithKubeSpec` (openapi-1 and openapi-2 merged into
//!   openapi-0, then serialised; the Go op also converts to protobuf, which we do not do here).
//!   Reads `$KUBE_OPENAPI_TESTDATA` (default: the Debian `golang-k8s-kube-openapi-dev` path) and
//!   is skipped with a message when absent.
//!
//! `*_with_prepare` variants include [`apiagg_openapi_merge::PreparedV2`] for every input (the
//! per-download work), i.e. a full rebuild from parsed documents.

#[path = "support/inputs.rs"]
mod inputs;

use apiagg_openapi_merge::{merge_v2, LocalSpec, PreparedV2, RemoteSpec};
use criterion::{criterion_group, criterion_main, Criterion};
use inputs::{fixtures, kube_openapi_inputs, realistic_inputs, reprepare};

fn bench_realistic(c: &mut Criterion) {
    let (locals, remotes) = match realistic_inputs(&fixtures()) {
        Ok(inputs) => inputs,
        Err(missing) => panic!(
            "missing fixture {} (set APIAGG_FIXTURES)",
            missing.display()
        ),
    };
    c.bench_function("merge_v2/realistic", |b| {
        b.iter(|| merge_v2(&locals, &remotes).map(|m| m.json.len()))
    });
    c.bench_function("merge_v2/realistic_with_prepare", |b| {
        b.iter(|| {
            let (locals, remotes) = reprepare(&locals, &remotes);
            merge_v2(&locals, &remotes).map(|m| m.json.len())
        })
    });
}

fn bench_kube_openapi_testdata(c: &mut Criterion) {
    let locals = match kube_openapi_inputs() {
        Ok(locals) => locals,
        Err(dir) => {
            eprintln!(
                "skipping merge_v2/kube_openapi_testdata: openapi-{{0,1,2}}.json not found in {} \
                 (install golang-k8s-kube-openapi-dev or set KUBE_OPENAPI_TESTDATA)",
                dir.display()
            );
            return;
        }
    };
    c.bench_function("merge_v2/kube_openapi_testdata", |b| {
        b.iter(|| merge_v2(&locals, &[]).map(|m| m.json.len()))
    });
    c.bench_function("merge_v2/kube_openapi_testdata_with_prepare", |b| {
        b.iter(|| {
            let (locals, _) = reprepare(&locals, &[]);
            merge_v2(&locals, &[]).map(|m| m.json.len())
        })
    });
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(30);
    targets = bench_realistic, bench_kube_openapi_testdata
}
criterion_main!(benches);
