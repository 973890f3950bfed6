//! A bounded, sharded map from request-supplied names (group, resource, scope) to small `Copy`
//! values: the estimator's list statistics and watch counts.
//!
//! Why not `DashMap` or an `ArcSwap` snapshot: the read path (every list and write) must not
//! allocate, so keys are looked up by a 64-bit hash of the borrowed names (keyed per process,
//! so nobody can aim collisions) and checked against the stored names; the bound must hold
//! per shard so that eviction is a scan of one small shard under its own lock, never a flush
//! and never a global count. A snapshot would copy the whole map on every list answer. Each
//! shard is an `RwLock`: readers only bump its reader count, and writers (a list answer, a
//! watch opening or closing) hold it for one hash-map operation.

use std::collections::HashMap;
use std::hash::{BuildHasher, BuildHasherDefault, Hasher, RandomState};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

/// Shards of a table (a power of two).
const SHARDS: usize = 64;
/// Longest names kept (a DNS subdomain); longer ones are not learned, so the memory of a table
/// stays bounded by its key count.
const MAX_NAME: usize = 253;

/// A borrowed key: `(group, resource, scope)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Key<'a> {
    group: &'a str,
    resource: &'a str,
    scope: &'a str,
}

impl<'a> Key<'a> {
    /// A key; `scope` is a namespace, or a marker of one.
    pub fn new(group: &'a str, resource: &'a str, scope: &'a str) -> Key<'a> {
        Key {
            group,
            resource,
            scope,
        }
    }

    fn storable(&self) -> bool {
        !self.resource.is_empty()
            && [self.group, self.resource, self.scope]
                .iter()
                .all(|n| n.len() <= MAX_NAME)
    }
}

struct Slot<V> {
    group: Box<str>,
    resource: Box<str>,
    scope: Box<str>,
    value: V,
    /// When it was last written (the table's tick).
    touched: u64,
}

impl<V> Slot<V> {
    fn is(&self, key: &Key<'_>) -> bool {
        *self.group == *key.group && *self.resource == *key.resource && *self.scope == *key.scope
    }
}

/// One shard: slots by key hash. The hashes are already keyed (per process) and spread, so a
/// shard's map uses them as they are instead of hashing them a second time.
type Shard<V> = RwLock<ShardMap<V>>;
type ShardMap<V> = HashMap<u64, Slot<V>, BuildHasherDefault<Prehashed>>;

/// The hasher of a shard's map: a key hash passes as it is.
#[derive(Default)]
struct Prehashed(u64);

impl Hasher for Prehashed {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only `u64` keys are hashed here; other input is folded in all the same.
        for &b in bytes {
            self.0 = (self.0.rotate_left(8)) ^ u64::from(b);
        }
    }

    fn write_u64(&mut self, hash: u64) {
        self.0 = hash;
    }
}

/// The table.
pub struct Table<V> {
    hasher: RandomState,
    shards: Box<[Shard<V>]>,
    per_shard: usize,
    tick: AtomicU64,
}

impl<V: Copy> Table<V> {
    /// A table of at most `max_keys` keys (rounded up to a multiple of the shard count).
    pub fn new(max_keys: usize) -> Table<V> {
        Table {
            hasher: RandomState::new(),
            shards: (0..SHARDS).map(|_| RwLock::default()).collect(),
            per_shard: max_keys.div_ceil(SHARDS).max(1),
            tick: AtomicU64::new(0),
        }
    }

    fn locate(&self, key: &Key<'_>) -> (u64, &Shard<V>) {
        let hash = self.hasher.hash_one(key);
        // The shard by middle bits: a shard's map indexes by the low ones and tags by the top.
        (hash, &self.shards[((hash >> 32) as usize) % SHARDS])
    }

    fn read<'s>(shard: &'s Shard<V>) -> RwLockReadGuard<'s, ShardMap<V>> {
        shard.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write<'s>(shard: &'s Shard<V>) -> RwLockWriteGuard<'s, ShardMap<V>> {
        shard.write().unwrap_or_else(|e| e.into_inner())
    }

    /// Calls `visit(group, resource, scope, value)` for every key, one shard locked at a time
    /// (for scrapes: never on the request path).
    pub fn for_each(&self, mut visit: impl FnMut(&str, &str, &str, V)) {
        for shard in self.shards.iter() {
            for slot in Self::read(shard).values() {
                visit(&slot.group, &slot.resource, &slot.scope, slot.value);
            }
        }
    }

    /// The value of `key`.
    pub fn get(&self, key: &Key<'_>) -> Option<V> {
        let (hash, shard) = self.locate(key);
        let map = Self::read(shard);
        map.get(&hash).filter(|s| s.is(key)).map(|s| s.value)
    }

    /// Replaces the value of `key` by `change(current)`; `None` removes it. A new key in a
    /// full shard evicts the entry with the lowest `score` (the least recently written among
    /// equals). Keys with overlong names are never stored.
    pub fn update(
        &self,
        key: &Key<'_>,
        change: impl FnOnce(Option<V>) -> Option<V>,
        score: impl Fn(&V) -> u64,
    ) {
        let (hash, shard) = self.locate(key);
        let touched = self.tick.fetch_add(1, Relaxed);
        let mut map = Self::write(shard);
        let current = map.get(&hash).filter(|s| s.is(key)).map(|s| s.value);
        let Some(value) = change(current) else {
            if current.is_some() {
                map.remove(&hash);
            }
            return;
        };
        if let Some(slot) = map.get_mut(&hash).filter(|s| s.is(key)) {
            slot.value = value;
            slot.touched = touched;
            return;
        }
        if !key.storable() {
            return;
        }
        if !map.contains_key(&hash) && map.len() >= self.per_shard {
            let victim = map
                .iter()
                .min_by_key(|(_, s)| (score(&s.value), s.touched))
                .map(|(h, _)| *h);
            if let Some(victim) = victim {
                map.remove(&victim);
            }
        }
        // A (practically impossible) hash collision replaces the other key's slot.
        map.insert(
            hash,
            Slot {
                group: key.group.into(),
                resource: key.resource.into(),
                scope: key.scope.into(),
                value,
                touched,
            },
        );
    }

    /// Keys held.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| Self::read(s).len()).sum()
    }

    /// Most keys held.
    #[cfg(test)]
    pub fn capacity(&self) -> usize {
        self.per_shard * SHARDS
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_table_evicts_the_lowest_score_and_stays_bounded() {
        let table: Table<u64> = Table::new(128);
        let keep = Key::new("apps", "deployments", "");
        for _ in 0..5 {
            table.update(&keep, |v| Some(v.unwrap_or(0) + 1), |v| *v);
        }
        for i in 0..10_000 {
            let name = format!("invented{i}");
            table.update(&Key::new("evil.io", &name, ""), |_| Some(1), |v| *v);
        }
        assert!(table.len() <= table.capacity(), "{}", table.len());
        assert_eq!(table.capacity(), 128);
        assert_eq!(table.get(&keep), Some(5));
        // Removal and overlong names.
        table.update(&keep, |_| None, |v| *v);
        assert_eq!(table.get(&keep), None);
        let long = "x".repeat(300);
        table.update(&Key::new("", &long, ""), |_| Some(1), |v| *v);
        assert_eq!(table.get(&Key::new("", &long, "")), None);
    }

    #[test]
    fn keys_differ_by_every_part() {
        let table: Table<u64> = Table::new(64);
        table.update(&Key::new("a", "b", ""), |_| Some(1), |v| *v);
        assert_eq!(table.get(&Key::new("a", "b", "")), Some(1));
        assert_eq!(table.get(&Key::new("", "ab", "")), None);
        assert_eq!(table.get(&Key::new("a", "b", "*")), None);
    }
}
