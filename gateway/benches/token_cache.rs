//! The TokenReview cache hit: what a request with a bearer token the delegate already vouched
//! for costs apiagg (goal: ≤ 1 µs), for a service-account-sized JWT among 10,000 cached tokens.

use std::sync::Arc;
use std::time::Duration;

use apiagg_gateway::{TokenCache, User};
use criterion::{black_box, criterion_group, criterion_main, Criterion};

/// A token of the size of a projected service-account JWT (about 950 bytes).
fn token(i: usize) -> String {
    format!("eyJhbGciOiJSUzI1NiIsImtpZCI6I{i:08}{}", "x".repeat(920))
}

fn cache_hit(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let cache = TokenCache::new(Duration::from_secs(120), Duration::from_secs(10));
    runtime.block_on(async {
        for i in 0..10_000 {
            let user = User::new(
                format!("system:serviceaccount:ns-{i}:app"),
                format!("uid-{i}"),
                vec!["system:serviceaccounts".into()],
                Vec::new(),
            )
            .expect("user");
            cache.accept(&token(i), Arc::new(user)).await;
        }
    });
    let hit = token(4_321);
    c.bench_function("token_review_cache_hit", |b| {
        b.iter(|| black_box(runtime.block_on(cache.get(black_box(&hit)))))
    });
    let miss = token(20_000);
    c.bench_function("token_review_cache_miss", |b| {
        b.iter(|| black_box(runtime.block_on(cache.get(black_box(&miss)))))
    });
}

criterion_group!(benches, cache_hit);
criterion_main!(benches);
