//! A string-keyed map split into shards, each behind an `Arc`: a copy of the map shares every
//! shard, and a change copies only the shard it touches (keys are `Arc<str>`, so copying a
//! shard copies pointers, not strings). A map starts with one shard and doubles its shard count
//! as it grows, keeping a shard near [`TARGET_PER_SHARD`] entries.
//!
//! Shards and their tables hash with `foldhash` (hashbrown's default hasher), keyed randomly
//! per map; a shard is picked by bits of the hash its table does not use for buckets.

use std::collections::HashMap;
use std::sync::Arc;

use std::hash::BuildHasher;

use foldhash::fast::RandomState as SeededState;

/// Entries per shard before the map doubles its shard count.
const TARGET_PER_SHARD: usize = 128;
/// The most shards a map splits into.
const MAX_SHARDS: usize = 4096;

type Shard<V> = HashMap<Arc<str>, V, SeededState>;

/// See the module documentation.
#[derive(Debug, Clone)]
pub(crate) struct ShardedMap<V> {
    state: SeededState,
    shards: Vec<Arc<Shard<V>>>,
    len: usize,
}

impl<V> Default for ShardedMap<V> {
    fn default() -> Self {
        let state = SeededState::default();
        ShardedMap {
            shards: vec![Arc::new(HashMap::with_hasher(state.clone()))],
            state,
            len: 0,
        }
    }
}

/// The bits of a hash that pick a shard (above those a table of fewer than 2^32 buckets reads,
/// below the seven it keeps as tags).
fn shard_bits(hash: u64) -> usize {
    (hash >> 32) as usize
}

impl<V: Clone> ShardedMap<V> {
    fn shard_of(&self, key: &str) -> usize {
        if self.shards.len() == 1 {
            0
        } else {
            // The shard count is a power of two.
            shard_bits(self.state.hash_one(key)) & (self.shards.len() - 1)
        }
    }

    /// The value under `key`.
    pub(crate) fn get(&self, key: &str) -> Option<&V> {
        self.shards[self.shard_of(key)].get(key)
    }

    /// How many entries the map holds.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Whether the map holds no entry.
    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Every entry, in no particular order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&Arc<str>, &V)> {
        self.shards.iter().flat_map(|shard| shard.iter())
    }

    /// Inserts or replaces; returns the value replaced.
    pub(crate) fn insert(&mut self, key: Arc<str>, value: V) -> Option<V> {
        let index = self.shard_of(&key);
        let replaced = Arc::make_mut(&mut self.shards[index]).insert(key, value);
        if replaced.is_none() {
            self.len += 1;
            self.grow_if_crowded();
        }
        replaced
    }

    /// Removes `key`; a shard is copied only when the key is there.
    pub(crate) fn remove(&mut self, key: &str) -> Option<V> {
        let index = self.shard_of(key);
        if !self.shards[index].contains_key(key) {
            return None;
        }
        let removed = Arc::make_mut(&mut self.shards[index]).remove(key);
        if removed.is_some() {
            self.len -= 1;
        }
        removed
    }

    /// The value under `key` to change in place (its shard is copied first when shared).
    pub(crate) fn get_mut(&mut self, key: &str) -> Option<&mut V> {
        let index = self.shard_of(key);
        if !self.shards[index].contains_key(key) {
            return None;
        }
        Arc::make_mut(&mut self.shards[index]).get_mut(key)
    }

    /// The value under `key`, inserting `V::default()` first when absent.
    pub(crate) fn get_or_insert_default(&mut self, key: &str) -> &mut V
    where
        V: Default,
    {
        if self.get(key).is_none() {
            self.insert(Arc::from(key), V::default());
        }
        let index = self.shard_of(key);
        Arc::make_mut(&mut self.shards[index])
            .get_mut(key)
            .expect("inserted just above")
    }

    fn grow_if_crowded(&mut self) {
        let count = self.shards.len();
        if self.len <= count * TARGET_PER_SHARD || count >= MAX_SHARDS {
            return;
        }
        let doubled = count * 2;
        let mut fresh: Vec<Shard<V>> = (0..doubled)
            .map(|_| HashMap::with_hasher(self.state.clone()))
            .collect();
        for (key, value) in self.iter() {
            let index = shard_bits(self.state.hash_one(key)) & (doubled - 1);
            fresh[index].insert(key.clone(), value.clone());
        }
        self.shards = fresh.into_iter().map(Arc::new).collect();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_and_keeps_every_entry() {
        let mut map = ShardedMap::default();
        for i in 0..10_000 {
            map.insert(Arc::from(format!("k{i}")), i);
        }
        assert_eq!(map.len(), 10_000);
        assert!(map.shards.len() > 64, "{} shards", map.shards.len());
        for i in (0..10_000).step_by(7) {
            assert_eq!(map.get(&format!("k{i}")), Some(&i));
        }
        assert_eq!(map.remove("k3"), Some(3));
        assert_eq!(map.remove("k3"), None);
        assert_eq!(map.len(), 9_999);
        assert_eq!(map.iter().count(), 9_999);
    }

    #[test]
    fn shards_fill_evenly() {
        let mut map = ShardedMap::default();
        for i in 0..20_000 {
            map.insert(
                Arc::from(format!("system:serviceaccount:ns-{i}:default")),
                i,
            );
        }
        let sizes: Vec<usize> = map.shards.iter().map(|s| s.len()).collect();
        let mean = 20_000 / sizes.len();
        assert!(
            sizes.iter().all(|&n| n > mean / 2 && n < mean * 2),
            "{sizes:?}"
        );
    }

    #[test]
    fn a_copy_shares_untouched_shards() {
        let mut map = ShardedMap::default();
        for i in 0..1_000 {
            map.insert(Arc::from(format!("k{i}")), i);
        }
        let copy = map.clone();
        *map.get_mut("k1").expect("present") = -1;
        let shared = map
            .shards
            .iter()
            .zip(&copy.shards)
            .filter(|(a, b)| Arc::ptr_eq(a, b))
            .count();
        assert_eq!(shared, map.shards.len() - 1);
        assert_eq!(copy.get("k1"), Some(&1));
        assert_eq!(map.get("k1"), Some(&-1));
    }
}
