//! The string hash of the policy's maps: a keyed folded multiply (the construction of the
//! `foldhash` and `ahash` fallback hashers), about ten times cheaper than std's SipHash-1-3 on
//! the short names RBAC looks up (a decision makes some twenty lookups).
//!
//! Its keys are random per map, so colliding names cannot be chosen without them; it is not a
//! cryptographic MAC. Only cluster objects insert keys (a request only looks up), and their
//! authors already need RBAC write permission.

use std::hash::{BuildHasher, Hasher, RandomState};

const MIX: u64 = 0x9e37_79b9_7f4a_7c15;

/// Builds [`FoldHasher`]s with random keys chosen at construction.
#[derive(Debug, Clone)]
pub(crate) struct SeededState {
    seed: u64,
    secret: u64,
}

impl SeededState {
    /// Fresh random keys.
    pub(crate) fn new() -> Self {
        let random = RandomState::new();
        SeededState {
            seed: random.hash_one(0x5eed_u64),
            // Odd, so that it never multiplies a word by zero.
            secret: random.hash_one(0x5ec2e7_u64) | 1,
        }
    }

    /// A second hash of `key` from other keys (to pick a shard without disturbing the bits the
    /// shard's own table uses).
    pub(crate) fn shard_hash(&self, key: &str) -> u64 {
        let mut hasher = FoldHasher {
            acc: self.secret.rotate_left(32),
            secret: self.seed | 1,
        };
        hasher.write(key.as_bytes());
        hasher.finish()
    }
}

impl BuildHasher for SeededState {
    type Hasher = FoldHasher;

    fn build_hasher(&self) -> FoldHasher {
        FoldHasher {
            acc: self.seed,
            secret: self.secret,
        }
    }
}

/// See the module documentation.
pub(crate) struct FoldHasher {
    acc: u64,
    secret: u64,
}

/// The 128-bit product of `x` and `y`, its halves xored.
fn folded_multiply(x: u64, y: u64) -> u64 {
    let product = u128::from(x) * u128::from(y);
    (product as u64) ^ ((product >> 64) as u64)
}

fn word(bytes: &[u8]) -> u64 {
    let mut buffer = [0u8; 8];
    buffer[..bytes.len()].copy_from_slice(bytes);
    u64::from_le_bytes(buffer)
}

impl Hasher for FoldHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(16);
        for chunk in &mut chunks {
            let (low, high) = chunk.split_at(8);
            self.acc = folded_multiply(word(low) ^ self.acc, word(high) ^ self.secret);
        }
        let rest = chunks.remainder();
        let (low, high) = rest.split_at(rest.len().min(8));
        let length = (bytes.len() as u64).wrapping_mul(MIX);
        self.acc = folded_multiply(word(low) ^ self.acc ^ length, word(high) ^ self.secret);
    }

    fn write_u8(&mut self, byte: u8) {
        self.acc = folded_multiply(self.acc ^ u64::from(byte), self.secret ^ MIX);
    }

    fn finish(&self) -> u64 {
        folded_multiply(self.acc, self.secret.rotate_left(17) | 1)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;

    #[test]
    fn distinct_names_hash_apart() {
        let state = SeededState::new();
        let names: Vec<String> = (0..50_000)
            .flat_map(|i| {
                [
                    format!("system:serviceaccount:ns-{i}:default"),
                    format!("u{i}"),
                    "x".repeat(i % 40),
                ]
            })
            .collect();
        let distinct: HashSet<&String> = names.iter().collect();
        let hashes: HashSet<u64> = distinct
            .iter()
            .map(|n| state.hash_one(n.as_str()))
            .collect();
        assert_eq!(hashes.len(), distinct.len());
        // The low 7 and high 7 bits (what a hash table uses) spread evenly.
        let mut low = [0usize; 128];
        let mut high = [0usize; 128];
        for hash in &hashes {
            low[(*hash & 127) as usize] += 1;
            high[(*hash >> 57) as usize] += 1;
        }
        let mean = hashes.len() / 128;
        for bucket in low.iter().chain(&high) {
            assert!(
                *bucket > mean * 3 / 4 && *bucket < mean * 5 / 4,
                "{bucket} vs {mean}"
            );
        }
    }

    #[test]
    fn keys_differ_between_states() {
        let (a, b) = (SeededState::new(), SeededState::new());
        assert_ne!(
            a.hash_one("system:authenticated"),
            b.hash_one("system:authenticated")
        );
        assert_ne!(a.hash_one("x"), a.shard_hash("x"));
    }
}
