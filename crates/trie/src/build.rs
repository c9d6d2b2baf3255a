//! Building a whole tree from its stems in sorted order, bottom-up, in bounded memory.
//!
//! With stems in strictly increasing order, a stem's depth is one more than the longest prefix
//! it shares with either neighbour, so it is placed as soon as the next stem is known; every
//! internal node and group blob is final as soon as the walk leaves its subtree. [`SortedBuild`]
//! holds only the open path — at most one pending subtree per depth, each with the entries it
//! contributes to its group (at most 2^g) — never the tree, and hands each blob to the caller as
//! it is finished. The blobs and the root are exactly what [`crate::Trie::commit`] writes for
//! the same stems (tested at every group depth).

use crate::TrieError;
use crate::hex;
use bintrie_keys::Stem;
use bintrie_node::{
    GroupBlob, GroupEntry, Hash32, MAX_DEPTH, MAX_GROUP_DEPTH, MIN_GROUP_DEPTH, Path, PathKey,
    Sha256Hasher, StemValues, TreeHasher, ZERO_HASH,
};
use std::marker::PhantomData;

/// Why a sorted build refused its input.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BuildError {
    /// Group depth outside 1..8.
    #[error("group depth {0} outside 1..8")]
    BadGroupDepth(u8),
    /// A stem was not greater than the one before it (the input must be sorted, without
    /// duplicates).
    #[error("stems must be strictly increasing: {} after {}", hex(.stem), hex(.previous))]
    Unsorted {
        /// The stem pushed.
        stem: Stem,
        /// The stem before it.
        previous: Stem,
    },
    /// A stem without any value (the tree never holds one).
    #[error("stem {} has no values", hex(.0))]
    EmptyStem(Stem),
}

impl<E: std::error::Error + 'static> From<BuildError> for TrieError<E> {
    fn from(e: BuildError) -> Self {
        match e {
            BuildError::BadGroupDepth(g) => TrieError::BadGroupDepth(g),
            BuildError::Unsorted { .. } => TrieError::UnsortedBatch,
            BuildError::EmptyStem(s) => TrieError::Corrupt {
                path: Path::from_stem_prefix(&s, MAX_DEPTH),
                reason: "a stem without values".into(),
            },
        }
    }
}

/// A finished subtree whose parent is not finished yet.
#[derive(Debug)]
struct Pending {
    /// Depth of the subtree's root.
    depth: usize,
    /// Its hash.
    hash: Hash32,
    /// A stem inside it: the subtree's path is this stem's first `depth` bits.
    stem: Stem,
    /// What it contributes to the group blob of the group containing it, in bitmap order.
    entries: Vec<GroupEntry>,
}

/// Builds a tree from stems pushed in strictly increasing order; see the module docs.
///
/// `push` each stem with its values, then `finish`; both hand every finished blob to `emit` as
/// `(path key, blob)`, children before parents. The same set of blobs a one-shot
/// [`crate::Trie::commit`] of the same stems writes is emitted, each once.
pub struct SortedBuild<H: TreeHasher = Sha256Hasher> {
    g: u8,
    /// The last stem pushed, not placed yet (its depth needs the next stem), and the longest
    /// prefix it shares with the stem before it (`None` for the first).
    pending: Option<(Stem, StemValues, Option<usize>)>,
    /// Finished subtrees along the open path, depths increasing (two equal at most: siblings).
    stack: Vec<Pending>,
    /// Stems placed so far.
    stems: u64,
    buf: Vec<u8>,
    _hasher: PhantomData<H>,
}

impl<H: TreeHasher> std::fmt::Debug for SortedBuild<H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SortedBuild")
            .field("group_depth", &self.g)
            .field("stems", &self.stems)
            .field("open", &self.stack.len())
            .finish_non_exhaustive()
    }
}

/// Bits two different stems share from the start.
fn common_bits(a: &Stem, b: &Stem) -> usize {
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        let d = x ^ y;
        if d != 0 {
            return i * 8 + d.leading_zeros() as usize;
        }
    }
    MAX_DEPTH
}

/// Bit `i` of a stem, most significant first.
fn bit(stem: &Stem, i: usize) -> u8 {
    (stem[i / 8] >> (7 - i % 8)) & 1
}

impl<H: TreeHasher> SortedBuild<H> {
    /// An empty build at group depth `group_depth` (1..=8).
    pub fn new(group_depth: u8) -> Result<Self, BuildError> {
        if !(MIN_GROUP_DEPTH..=MAX_GROUP_DEPTH).contains(&group_depth) {
            return Err(BuildError::BadGroupDepth(group_depth));
        }
        Ok(SortedBuild {
            g: group_depth,
            pending: None,
            stack: Vec::new(),
            stems: 0,
            buf: Vec::new(),
            _hasher: PhantomData,
        })
    }

    /// Stems placed so far (the last one pushed is placed by the next `push` or `finish`).
    pub fn stems(&self) -> u64 {
        self.stems
    }

    /// Adds the next stem (greater than every stem before it) with its values; emits the
    /// blobs this finishes.
    pub fn push(
        &mut self,
        stem: Stem,
        values: StemValues,
        emit: &mut impl FnMut(PathKey, &[u8]),
    ) -> Result<(), BuildError> {
        if values.is_empty() {
            return Err(BuildError::EmptyStem(stem));
        }
        if let Some((prev, prev_values, prev_shared)) = self.pending.take() {
            if stem <= prev {
                let previous = prev;
                self.pending = Some((prev, prev_values, prev_shared));
                return Err(BuildError::Unsorted { stem, previous });
            }
            let shared = common_bits(&prev, &stem);
            let depth = prev_shared.map_or(shared, |p| p.max(shared)) + 1;
            self.place(prev, &prev_values, depth, emit);
            // The split between the two stems is at depth `shared`: everything left of it is
            // finished up to its child at `shared + 1`.
            self.close(shared + 1, emit);
            self.pending = Some((stem, values, Some(shared)));
        } else {
            self.pending = Some((stem, values, None));
        }
        Ok(())
    }

    /// Places the last stem, finishes every open node and returns the root (the zero hash for
    /// no stems).
    pub fn finish(mut self, emit: &mut impl FnMut(PathKey, &[u8])) -> Hash32 {
        if let Some((stem, values, shared)) = self.pending.take() {
            // The last stem sits one below what it shares with the one before it; a lone stem
            // is the root.
            let depth = shared.map_or(0, |s| s + 1);
            self.place(stem, &values, depth, emit);
        }
        self.close(0, emit);
        self.stack.first().map_or(ZERO_HASH, |root| root.hash)
    }

    /// The group entry of a node at `depth` (> 0) on the path of `stem`, in the group above it.
    fn entry(&self, stem: &Stem, depth: usize, hash: Hash32) -> GroupEntry {
        let g = self.g as usize;
        let group = (depth - 1) / g * g;
        let rel = depth - group;
        let mut index = 0u16;
        for i in group..depth {
            index = (index << 1) | u16::from(bit(stem, i));
        }
        GroupEntry {
            index: index << (g - rel),
            depth: rel as u8,
            hash,
        }
    }

    /// Emits `stem`'s blob at `depth` and pushes it as a finished subtree.
    fn place(
        &mut self,
        stem: Stem,
        values: &StemValues,
        depth: usize,
        emit: &mut impl FnMut(PathKey, &[u8]),
    ) {
        self.buf.clear();
        values.encode_blob(&stem, &mut self.buf);
        emit(Path::from_stem_prefix(&stem, depth).to_key(), &self.buf);
        let (hash, _) = values.stem_hash::<H>(&stem);
        let entries = if depth > 0 {
            vec![self.entry(&stem, depth, hash)]
        } else {
            Vec::new()
        };
        self.stems += 1;
        self.stack.push(Pending {
            depth,
            hash,
            stem,
            entries,
        });
    }

    /// Merges the finished subtrees deeper than `target` into their parents, up to one subtree
    /// at `target` (if any was deeper), emitting the group blobs finished on the way.
    fn close(&mut self, target: usize, emit: &mut impl FnMut(PathKey, &[u8])) {
        while let Some(top) = self.stack.last()
            && top.depth > target
        {
            let Some(right) = self.stack.pop() else {
                break;
            };
            let depth = right.depth - 1;
            let sibling = self.stack.last().is_some_and(|s| s.depth == right.depth);
            let (hash, stem, mut entries) = if sibling {
                let Some(mut left) = self.stack.pop() else {
                    break;
                };
                left.entries.extend(right.entries);
                (
                    H::hash_pair(&left.hash, &right.hash),
                    left.stem,
                    left.entries,
                )
            } else if bit(&right.stem, depth) == 0 {
                (
                    H::hash_pair(&right.hash, &ZERO_HASH),
                    right.stem,
                    right.entries,
                )
            } else {
                (
                    H::hash_pair(&ZERO_HASH, &right.hash),
                    right.stem,
                    right.entries,
                )
            };
            if depth.is_multiple_of(self.g as usize) {
                // A group root: its blob is finished; it is one entry of the group above.
                self.buf.clear();
                GroupBlob::encode(self.g, &entries, &mut self.buf);
                emit(Path::from_stem_prefix(&stem, depth).to_key(), &self.buf);
                entries = if depth > 0 {
                    vec![self.entry(&stem, depth, hash)]
                } else {
                    Vec::new()
                };
            }
            self.stack.push(Pending {
                depth,
                hash,
                stem,
                entries,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{MemoryStore, Trie};
    use bintrie_keys::TreeKey;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    /// The blobs and root of building `stems` (sorted here) with [`SortedBuild`].
    fn sorted_build(
        g: u8,
        stems: &BTreeMap<Stem, StemValues>,
    ) -> (Hash32, BTreeMap<PathKey, Vec<u8>>) {
        let mut out = BTreeMap::new();
        let mut emit = |k: PathKey, b: &[u8]| {
            assert!(out.insert(k, b.to_vec()).is_none(), "{k:?} emitted twice");
        };
        let mut b: SortedBuild = SortedBuild::new(g).unwrap();
        for (s, v) in stems {
            b.push(*s, v.clone(), &mut emit).unwrap();
        }
        assert_eq!(b.stems() + u64::from(!stems.is_empty()), stems.len() as u64);
        let root = b.finish(&mut emit);
        (root, out)
    }

    /// The blobs and root a one-shot trie commit writes for the same stems. The commit hashes
    /// the tree itself (its rehash and serialization are one walk); a second trie, hashed by
    /// `root` before its commit, must write the same.
    fn trie_build(
        g: u8,
        stems: &BTreeMap<Stem, StemValues>,
    ) -> (Hash32, BTreeMap<PathKey, Vec<u8>>) {
        let writes: Vec<(TreeKey, [u8; 32])> = stems
            .iter()
            .flat_map(|(s, v)| v.iter().map(|(i, val)| (TreeKey::new(*s, i), *val)))
            .collect();
        let build = |hash_first: bool| {
            let mut trie: Trie<MemoryStore> = Trie::new(MemoryStore::new(), g).unwrap();
            trie.update(writes.clone()).unwrap();
            if hash_first {
                trie.root();
            }
            let root = trie.commit().unwrap().root;
            assert_eq!(root, trie.root());
            let blobs: BTreeMap<_, _> = trie.store().iter().map(|(k, v)| (*k, v.clone())).collect();
            (root, blobs)
        };
        let built = build(false);
        assert_eq!(
            built,
            build(true),
            "g={g}: the commit's own rehash wrote other blobs"
        );
        built
    }

    fn values(seed: u8, n: u8) -> StemValues {
        let mut v = StemValues::new();
        for i in 0..n.max(1) {
            v.set(i.wrapping_mul(37).wrapping_add(seed), [seed ^ i; 32]);
        }
        v
    }

    #[test]
    fn nothing_builds_the_empty_tree() {
        for g in 1..=8 {
            assert_eq!(
                sorted_build(g, &BTreeMap::new()),
                (ZERO_HASH, BTreeMap::new())
            );
        }
    }

    #[test]
    fn hand_made_shapes_match_the_trie_at_every_group_depth() {
        let mut shapes: Vec<Vec<Stem>> = vec![
            vec![[0u8; 31]],
            vec![[0u8; 31], [0xff; 31]],
            // Sharing 7 bits, then 247 bits (the deepest two stems can go).
            vec![[0u8; 31], [1u8; 31]],
            {
                let mut a = [0u8; 31];
                let mut b = [0u8; 31];
                a[30] = 0b10;
                b[30] = 0b11;
                vec![a, b]
            },
        ];
        // A full level: every first byte.
        shapes.push((0..=255u8).map(|x| [x; 31]).collect());
        for stems in shapes {
            let map: BTreeMap<Stem, StemValues> =
                stems.iter().map(|s| (*s, values(s[0], 3))).collect();
            for g in 1..=8 {
                assert_eq!(
                    sorted_build(g, &map),
                    trie_build(g, &map),
                    "g={g} {stems:02x?}"
                );
            }
        }
    }

    #[test]
    fn unsorted_duplicate_and_empty_input_is_refused() {
        let mut b: SortedBuild = SortedBuild::new(4).unwrap();
        let mut emit = |_: PathKey, _: &[u8]| {};
        b.push([5; 31], values(1, 1), &mut emit).unwrap();
        assert!(matches!(
            b.push([4; 31], values(1, 1), &mut emit),
            Err(BuildError::Unsorted { .. })
        ));
        assert!(matches!(
            b.push([5; 31], values(1, 1), &mut emit),
            Err(BuildError::Unsorted { .. })
        ));
        assert_eq!(
            b.push([6; 31], StemValues::new(), &mut emit),
            Err(BuildError::EmptyStem([6; 31]))
        );
        // The refused pushes changed nothing: the build goes on.
        b.push([6; 31], values(2, 1), &mut emit).unwrap();
        assert_ne!(b.finish(&mut emit), ZERO_HASH);
        assert_eq!(
            SortedBuild::<Sha256Hasher>::new(0).unwrap_err(),
            BuildError::BadGroupDepth(0)
        );
        assert_eq!(
            SortedBuild::<Sha256Hasher>::new(9).unwrap_err(),
            BuildError::BadGroupDepth(9)
        );
    }

    /// Stems clustered under a few random prefixes, so that long shared prefixes, lone stems
    /// and full subtrees all occur.
    fn arb_stems() -> impl Strategy<Value = BTreeMap<Stem, StemValues>> {
        (
            prop::collection::vec(any::<[u8; 31]>(), 1..4),
            prop::collection::vec((0usize..3, 0usize..248, any::<[u8; 31]>(), 1u8..4), 0..60),
        )
            .prop_map(|(bases, picks)| {
                picks
                    .into_iter()
                    .map(|(b, keep, noise, n)| {
                        // The base's first `keep` bits, then noise.
                        let base = bases[b % bases.len()];
                        let p = Path::from_stem_prefix(&base, keep);
                        let mut s = noise;
                        for i in 0..keep {
                            let mask = 0x80u8 >> (i % 8);
                            if p.bit(i) == 1 {
                                s[i / 8] |= mask;
                            } else {
                                s[i / 8] &= !mask;
                            }
                        }
                        (s, values(noise[0], n))
                    })
                    .collect()
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, failure_persistence: None, ..ProptestConfig::default() })]

        #[test]
        fn random_states_match_the_trie_at_every_group_depth(stems in arb_stems()) {
            for g in 1..=8 {
                prop_assert_eq!(sorted_build(g, &stems), trie_build(g, &stems), "g={}", g);
            }
        }
    }
}
