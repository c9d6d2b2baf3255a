//! The hasher of the index's tables whose keys are hashes themselves (stems, code hashes).

use std::hash::{BuildHasher, Hasher};

/// Builds [`PrefixHasher`]s: foldhash, seeded at random per table as foldhash's own
/// `RandomState` is, fed only the first 16 bytes of each key that has that many.
///
/// The keys of the stem and code tables are SHA-256 and Keccak-256 outputs: their first 16
/// bytes already tell any two apart but with negligible chance, and two keys that agree there
/// only share a bucket (the table still compares whole keys), so hashing the rest adds
/// nothing but time. The random seed keeps the bucket of a key unpredictable from outside,
/// as with foldhash on the whole key.
#[derive(Clone, Default)]
pub(crate) struct PrefixState(foldhash::fast::RandomState);

/// The hasher [`PrefixState`] builds.
pub(crate) struct PrefixHasher(foldhash::fast::FoldHasher<'static>);

impl BuildHasher for PrefixState {
    type Hasher = PrefixHasher;

    fn build_hasher(&self) -> PrefixHasher {
        PrefixHasher(self.0.build_hasher())
    }
}

impl Hasher for PrefixHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        match bytes.first_chunk::<16>() {
            Some(head) => self.0.write_u128(u128::from_le_bytes(*head)),
            None => self.0.write(bytes),
        }
    }

    #[inline]
    fn write_usize(&mut self, i: usize) {
        self.0.write_usize(i);
    }

    #[inline]
    fn finish(&self) -> u64 {
        self.0.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_that_differ_in_their_first_16_bytes_hash_apart_and_the_rest_is_not_read() {
        let state = PrefixState::default();
        let a = [7u8; 31];
        let mut b = a;
        b[15] ^= 1;
        let mut c = a;
        c[30] ^= 1;
        assert_ne!(state.hash_one(a), state.hash_one(b));
        // Past the 16th byte nothing is hashed: these two share a bucket, told apart by the
        // table's comparison of whole keys.
        assert_eq!(state.hash_one(a), state.hash_one(c));
        let mut map: std::collections::HashMap<[u8; 31], u32, PrefixState> =
            std::collections::HashMap::with_hasher(state.clone());
        map.insert(a, 1);
        map.insert(c, 2);
        assert_eq!((map[&a], map[&c], map.len()), (1, 2, 2));
        // Short keys are hashed whole.
        assert_ne!(state.hash_one([1u8, 2]), state.hash_one([1u8, 3]));
    }

    #[test]
    fn two_tables_seed_apart() {
        let key = [9u8; 32];
        let hashes: std::collections::HashSet<u64> = (0..8)
            .map(|_| PrefixState::default().hash_one(key))
            .collect();
        assert!(hashes.len() > 1, "every table hashed the key alike");
    }
}
