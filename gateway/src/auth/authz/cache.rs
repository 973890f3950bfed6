//! A webhook's decision cache: outcomes by the SHA-256 of the review, allowed ones and the
//! others in separate bounded caches (a flood of denials cannot evict allowed decisions), each
//! entry until its cache's TTL, least used evicted first; concurrent reviews of one key merged
//! into one call. Failures are never cached.

use std::future::Future;
use std::time::Duration;

use moka::future::Cache;

use super::webhook::Outcome;

/// Most decisions remembered in each cache (allowed, not allowed).
const CACHE_LIMIT: u64 = 16_384;

/// A review that did not allow: not an error for callers, but kept out of the allowed cache.
enum Loaded<E> {
    NotAllowed(Outcome),
    Failed(E),
}

/// Decisions by the hash of their review.
pub(super) struct DecisionCache {
    allowed: Option<Cache<[u8; 32], Outcome>>,
    denied: Option<Cache<[u8; 32], Outcome>>,
}

/// A bounded cache whose entries live `ttl`; none without a TTL (nothing is kept).
fn bounded(ttl: Option<Duration>) -> Option<Cache<[u8; 32], Outcome>> {
    let ttl = ttl.filter(|t| !t.is_zero())?;
    Some(
        Cache::builder()
            .max_capacity(CACHE_LIMIT)
            .time_to_live(ttl)
            .build(),
    )
}

impl DecisionCache {
    /// Allowed decisions kept `allowed`, the others `denied` (`None`: not cached).
    pub(super) fn new(allowed: Option<Duration>, denied: Option<Duration>) -> DecisionCache {
        DecisionCache {
            allowed: bounded(allowed),
            denied: bounded(denied),
        }
    }

    /// The cached outcome for `key`.
    pub(super) async fn get(&self, key: &[u8; 32]) -> Option<Outcome> {
        if let Some(allowed) = &self.allowed {
            if let Some(d) = allowed.get(key).await {
                return Some(d);
            }
        }
        self.denied.as_ref()?.get(key).await
    }

    /// The outcome `review` gives for `key`, asked once for all concurrent callers; outcomes
    /// are remembered, failures are not.
    pub(super) async fn load<E: Clone + Send + Sync + 'static>(
        &self,
        key: [u8; 32],
        review: impl Future<Output = Result<Outcome, E>>,
    ) -> Result<Outcome, E> {
        let review = async {
            match review.await {
                Ok(d) if d.0.allowed() => Ok(d),
                Ok(d) => {
                    if let Some(denied) = &self.denied {
                        denied.insert(key, d.clone()).await;
                    }
                    Err(Loaded::NotAllowed(d))
                }
                Err(e) => Err(Loaded::Failed(e)),
            }
        };
        let loaded = match &self.allowed {
            Some(allowed) => allowed
                .try_get_with(key, review)
                .await
                .map_err(|e| match &*e {
                    Loaded::NotAllowed(d) => Loaded::NotAllowed(d.clone()),
                    Loaded::Failed(e) => Loaded::Failed(e.clone()),
                }),
            None => review.await,
        };
        match loaded {
            Ok(d) | Err(Loaded::NotAllowed(d)) => Ok(d),
            Err(Loaded::Failed(e)) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use apiagg_authz::Decision;

    use super::*;

    fn outcome(allowed: bool) -> Outcome {
        let decision = if allowed {
            Decision::Allow(String::new())
        } else {
            Decision::NoOpinion(String::new())
        };
        (decision, None)
    }

    fn numbered(i: u64) -> [u8; 32] {
        let mut key = [0u8; 32];
        key[..8].copy_from_slice(&i.to_le_bytes());
        key
    }

    const MINUTE: Option<Duration> = Some(Duration::from_secs(60));

    #[tokio::test]
    async fn denials_are_kept_apart_and_failures_not_at_all() {
        let cache = DecisionCache::new(MINUTE, MINUTE);
        let ok = |d: Outcome| async move { Ok::<_, String>(d) };
        assert_eq!(
            cache.load([1; 32], ok(outcome(true))).await,
            Ok(outcome(true))
        );
        assert_eq!(cache.get(&[1; 32]).await, Some(outcome(true)));
        assert_eq!(
            cache.load([9; 32], ok(outcome(false))).await,
            Ok(outcome(false))
        );
        assert_eq!(cache.get(&[9; 32]).await, Some(outcome(false)));
        // A flood of distinct denials (more than either cache holds) leaves the allowed one.
        for i in 0..CACHE_LIMIT + 500 {
            let got = cache.load(numbered(i + 10), ok(outcome(false))).await;
            assert_eq!(got, Ok(outcome(false)));
        }
        if let Some(denied) = &cache.denied {
            denied.run_pending_tasks().await;
            assert!(denied.entry_count() <= CACHE_LIMIT);
        }
        assert_eq!(cache.get(&[1; 32]).await, Some(outcome(true)));
        // A failure is not remembered: the next look-up asks again.
        let failed = cache
            .load([2; 32], async { Err::<Outcome, _>("down") })
            .await;
        assert_eq!(failed, Err("down"));
        assert_eq!(cache.get(&[2; 32]).await, None);
        // No TTL keeps nothing.
        let none = DecisionCache::new(None, None);
        assert_eq!(
            none.load([3; 32], ok(outcome(true))).await,
            Ok(outcome(true))
        );
        assert_eq!(none.get(&[3; 32]).await, None);
    }

    #[tokio::test]
    async fn concurrent_reviews_of_one_key_are_asked_once() {
        let cache = DecisionCache::new(MINUTE, MINUTE);
        for allowed in [true, false] {
            let key = [u8::from(allowed); 32];
            let asked = std::sync::atomic::AtomicUsize::new(0);
            let (release, released) = tokio::sync::watch::channel(false);
            let look_ups = (0..20).map(|_| {
                let mut released = released.clone();
                let asked = &asked;
                cache.load(key, async move {
                    asked.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    // Held until every look-up has started (the join polls them all first).
                    let _ = released.wait_for(|r| *r).await;
                    Ok::<_, String>(outcome(allowed))
                })
            });
            let all = futures_util::future::join_all(look_ups);
            let release = async {
                tokio::task::yield_now().await;
                let _ = release.send(true);
            };
            let (outcomes, ()) = tokio::join!(all, release);
            assert!(outcomes.iter().all(|d| *d == Ok(outcome(allowed))));
            assert_eq!(
                asked.load(std::sync::atomic::Ordering::SeqCst),
                1,
                "{allowed}"
            );
        }
    }
}
