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
    let cache = TokenCache::default();
    for i in 0..10_000 {
        let user = User::new(
            format!("system:serviceaccount:ns-{i}:app"),
            format!("uid-{i}"),
            vec!["system:serviceaccounts".into()],
            Vec::new(),
        );
        cache.put(&token(i), Ok(Arc::new(user)), Duration::from_secs(120));
    }
    let hit = token(4_321);
    c.bench_function("token_review_cache_hit", |b| {
        b.iter(|| black_box(cache.get(black_box(&hit))))
    });
    let miss = token(20_000);
    c.bench_function("token_review_cache_miss", |b| {
        b.iter(|| black_box(cache.get(black_box(&miss))))
    });
}

criterion_group!(benches, cache_hit);
criterion_main!(benches);
