//! Partial trees: the part of a tree some keys touch, with everything else replaced by its hash.
//! Enough to read those keys' values (or prove them absent) and to recompute the root after
//! writes to them, without the rest of the state: a block witness, and the multi-key proof that
//! shares its siblings.
//!
//! A [`PartialTree`] comes from [`Trie::witness`](crate::Trie::witness) (pruned to a key set:
//! the *multiproof*), from stored blobs ([`PartialTree::from_blobs`], the grouped-blob witness
//! as geth stores it) or from its own encoding ([`PartialTree::decode`]).
//!
//! # The multiproof encoding
//!
//! The tree in pre-order, one tag byte per node:
//!
//! ```text
//! node  := 0x00                       an empty subtree
//!        | 0x01 hash(32)              a subtree not in the witness: only its hash
//!        | 0x02 node node             an internal node: left, then right
//!        | 0x03 stem(31) leaves       a stem node: its stem and its 256-leaf subtree
//! leaves := 0x00                      a subtree of absent leaves (its hash is zero)
//!        | 0x01 hash(32)              leaves not in the witness: only their subtree's hash
//!        | 0x02 leaves leaves         an inner node of the 8-level subtree
//!        | 0x04 value(32)             a present leaf (only at the 8th level)
//! ```
//!
//! The leaves of a stem split by the bits of the sub-index, highest bit first (leaf `i` sits at
//! position `i` of the bottom level). A stem is only valid on its own path, an internal node
//! only above depth 248, an inner leaf node only above the leaf level; trailing bytes are
//! refused. The encoding carries no root: a decoded tree is checked with
//! [`PartialTree::verify`], which hashes it (SPEC §3: a present leaf is `H(value)`, two zero
//! hashes fold to zero, a stem is `H(stem ‖ 0x00 ‖ subtree root)`, an internal node
//! `H(left ‖ right)`) and compares.

use crate::hex;
use bintrie_keys::{STEM_LEN, Stem, TreeKey};
use bintrie_node::{
    Hash32, MAX_DEPTH, Path, Sha256Hasher, StemValues, TreeHasher, ZERO_HASH, deeper, fold_pair,
    stem_node_hash,
};
use std::marker::PhantomData;

const TAG_EMPTY: u8 = 0x00;
const TAG_OPAQUE: u8 = 0x01;
const TAG_INTERNAL: u8 = 0x02;
const TAG_STEM: u8 = 0x03;
const TAG_VALUE: u8 = 0x04;
/// Levels of a stem's leaf subtree.
const LEAF_LEVELS: usize = 8;

/// Why a partial tree cannot answer, or cannot be built.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum WitnessError {
    /// A walk reached a subtree the witness holds only the hash of.
    #[error("witness incomplete at path {path}")]
    Incomplete {
        /// Where the walk stopped.
        path: Path,
    },
    /// The walk reached the key's stem, but the witness holds only a hash over its leaf.
    #[error("witness incomplete at path {path}: leaf {index} of stem 0x{} is not in it", hex(.stem))]
    IncompleteLeaf {
        /// The stem's path.
        path: Path,
        /// The stem.
        stem: Stem,
        /// The sub-index whose leaf is missing.
        index: u8,
    },
    /// The bytes are not a partial tree (the message says where and why).
    #[error("malformed witness: {0}")]
    Malformed(String),
    /// The tree is well formed but hashes to another root.
    #[error("the witness hashes to 0x{} but the root is 0x{}", hex(.computed), hex(.root))]
    RootMismatch {
        /// What the tree hashes to.
        computed: Hash32,
        /// The root it was checked against.
        root: Hash32,
    },
}

/// A node of the partial tree.
#[derive(Clone, Debug)]
pub(crate) enum PNode {
    Empty,
    /// Not in the witness: only the hash is known.
    Opaque(Hash32),
    Internal(Box<PInternal>),
    Stem(Box<PStem>),
}

#[derive(Clone, Debug)]
pub(crate) struct PInternal {
    pub(crate) left: PNode,
    pub(crate) right: PNode,
    /// Cached; `None` after a change below.
    pub(crate) hash: Option<Hash32>,
}

#[derive(Clone, Debug)]
pub(crate) struct PStem {
    pub(crate) stem: Stem,
    pub(crate) leaves: Leaf,
    /// Cached stem-node hash; `None` after a change.
    pub(crate) hash: Option<Hash32>,
}

/// A node of a stem's 8-level leaf subtree.
#[derive(Clone, Debug)]
pub(crate) enum Leaf {
    /// Every leaf below is absent.
    Zero,
    /// Not in the witness: only the subtree's hash is known.
    Opaque(Hash32),
    /// A present leaf (at the bottom level only).
    Value([u8; 32]),
    Inner(Box<[Leaf; 2]>),
}

impl PNode {
    /// `Opaque(h)`, or `Empty` for the zero hash (only an empty subtree hashes to zero).
    pub(crate) fn opaque(h: Hash32) -> PNode {
        if h == ZERO_HASH {
            PNode::Empty
        } else {
            PNode::Opaque(h)
        }
    }
}

impl Leaf {
    /// `Opaque(h)`, or `Zero` for the zero hash.
    pub(crate) fn opaque(h: Hash32) -> Leaf {
        if h == ZERO_HASH {
            Leaf::Zero
        } else {
            Leaf::Opaque(h)
        }
    }

    /// All 256 leaves of `values`: present ones as values, absent runs as `Zero`.
    pub(crate) fn full(values: &StemValues) -> Leaf {
        let present: Vec<(u8, [u8; 32])> = values.iter().map(|(i, v)| (i, *v)).collect();
        Leaf::build_full(&present, 0)
    }

    fn build_full(present: &[(u8, [u8; 32])], depth: usize) -> Leaf {
        match present {
            [] => Leaf::Zero,
            [(_, v)] if depth == LEAF_LEVELS => Leaf::Value(*v),
            _ => {
                let bit = 7 - depth;
                let split = present.partition_point(|(i, _)| (i >> bit) & 1 == 0);
                Leaf::Inner(Box::new([
                    Leaf::build_full(&present[..split], depth + 1),
                    Leaf::build_full(&present[split..], depth + 1),
                ]))
            }
        }
    }

    /// The leaves of `values` pruned to the sorted, distinct sub-indices `wanted`: every other
    /// subtree is its hash (zero hashes as `Zero`).
    pub(crate) fn pruned<H: TreeHasher>(values: &StemValues, wanted: &[u8]) -> Leaf {
        // levels[d] holds the 2^d node hashes at depth d of the subtree (levels[8]: leaves).
        let mut levels: Vec<Vec<Hash32>> = vec![Vec::new(); LEAF_LEVELS + 1];
        let mut bottom = vec![ZERO_HASH; 256];
        for (i, v) in values.iter() {
            bottom[usize::from(i)] = H::hash32(v);
        }
        levels[LEAF_LEVELS] = bottom;
        for d in (0..LEAF_LEVELS).rev() {
            levels[d] = levels[d + 1]
                .chunks_exact(2)
                .map(|p| fold_pair::<H>(&p[0], &p[1]))
                .collect();
        }
        fn build(
            levels: &[Vec<Hash32>],
            values: &StemValues,
            wanted: &[u8],
            depth: usize,
            pos: usize,
        ) -> Leaf {
            let h = levels[depth][pos];
            if h == ZERO_HASH {
                return Leaf::Zero;
            }
            if wanted.is_empty() {
                return Leaf::Opaque(h);
            }
            if depth == LEAF_LEVELS {
                // A non-zero leaf hash: the value is present.
                return values
                    .get(pos as u8)
                    .map_or(Leaf::Zero, |v| Leaf::Value(*v));
            }
            let bit = 7 - depth;
            let split = wanted.partition_point(|i| (i >> bit) & 1 == 0);
            Leaf::Inner(Box::new([
                build(levels, values, &wanted[..split], depth + 1, 2 * pos),
                build(levels, values, &wanted[split..], depth + 1, 2 * pos + 1),
            ]))
        }
        build(&levels, values, wanted, 0, 0)
    }

    fn hash<H: TreeHasher>(&self) -> Hash32 {
        match self {
            Leaf::Zero => ZERO_HASH,
            Leaf::Opaque(h) => *h,
            Leaf::Value(v) => H::hash32(v),
            Leaf::Inner(c) => fold_pair::<H>(&c[0].hash::<H>(), &c[1].hash::<H>()),
        }
    }

    /// The leaf at `index`: `Ok(None)` when proven absent, `Err(())` when not in the witness.
    fn get(&self, index: u8) -> Result<Option<&[u8; 32]>, ()> {
        let mut node = self;
        let mut depth = 0;
        loop {
            match node {
                Leaf::Zero => return Ok(None),
                Leaf::Opaque(_) => return Err(()),
                Leaf::Value(v) => return Ok(Some(v)),
                Leaf::Inner(c) => {
                    node = &c[usize::from((index >> (7 - depth)) & 1)];
                    depth += 1;
                }
            }
        }
    }

    /// Whether `index` can be written: its leaf, or an absent subtree above it, is known.
    fn writable(&self, index: u8) -> bool {
        self.get(index).is_ok()
    }

    /// Sets the leaf at `index`; the caller checked [`Leaf::writable`].
    fn set(&mut self, index: u8, value: [u8; 32], depth: usize) {
        if depth == LEAF_LEVELS {
            *self = Leaf::Value(value);
            return;
        }
        if let Leaf::Zero = self {
            *self = Leaf::Inner(Box::new([Leaf::Zero, Leaf::Zero]));
        }
        if let Leaf::Inner(c) = self {
            c[usize::from((index >> (7 - depth)) & 1)].set(index, value, depth + 1);
        }
    }

    /// The present values the witness holds, in sub-index order.
    fn collect(&self, pos: usize, out: &mut StemValues) {
        match self {
            Leaf::Value(v) => {
                out.set(pos as u8, *v);
            }
            Leaf::Inner(c) => {
                c[0].collect(2 * pos, out);
                c[1].collect(2 * pos + 1, out);
            }
            Leaf::Zero | Leaf::Opaque(_) => {}
        }
    }
}

/// Stored blobs by path key, as [`Trie::witness_blobs`](crate::Trie::witness_blobs) returns
/// them: a grouped-blob witness.
pub type WitnessBlobs = Vec<(bintrie_node::PathKey, Vec<u8>)>;

/// What a partial tree holds, by encoded bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WitnessSize {
    /// Bytes of structure and hashes: tags, stems, sibling hashes.
    pub nodes: u64,
    /// Bytes of leaf values (32 per present leaf).
    pub values: u64,
}

impl WitnessSize {
    /// Nodes plus values.
    pub fn total(&self) -> u64 {
        self.nodes + self.values
    }
}

/// A binary tree of which only some paths are known; every other subtree is its hash. Reading a
/// key or writing one whose walk meets such a hash is [`WitnessError::Incomplete`] (or
/// [`WitnessError::IncompleteLeaf`] inside a stem), never a guess.
///
/// Invariant: the tree hashes (by SPEC §3) to the root of the full tree it was cut from, so once
/// [`PartialTree::verify`] has compared that root, every value it answers with is proven (for a
/// tree whose stems no one chose to match a hash, as [`crate::Proof`] says). Writes
/// change it exactly as they change the full tree: [`PartialTree::root`] after
/// [`PartialTree::update`] is the full tree's root after the same writes.
#[derive(Clone, Debug)]
pub struct PartialTree<H: TreeHasher = Sha256Hasher> {
    root: PNode,
    _hasher: PhantomData<H>,
}

fn bit(stem: &Stem, depth: usize) -> u8 {
    (stem[depth / 8] >> (7 - depth % 8)) & 1
}

impl<H: TreeHasher> PartialTree<H> {
    pub(crate) fn from_node(root: PNode) -> Self {
        PartialTree {
            root,
            _hasher: PhantomData,
        }
    }

    /// Walks to where `stem`'s walk ends: its stem node and depth, `None` for an empty subtree
    /// or another stem, or the path of a hash-only subtree met on the way.
    fn find(&self, stem: &Stem) -> Result<Option<(&PStem, usize)>, WitnessError> {
        self.find_for(stem, false)
    }

    /// [`PartialTree::find`]; for a write (`write`), also the path of a hash-only left child
    /// the walk turns right past that could be the first half of a stem node there
    /// ([`crate::proof::could_be_stem_half`]): the node may be that stem's, read as an internal
    /// one, and a new stem written below it would land among its values. A witness opens such
    /// a child one level; one that does not is incomplete there.
    fn find_for(&self, stem: &Stem, write: bool) -> Result<Option<(&PStem, usize)>, WitnessError> {
        let mut node = &self.root;
        let mut depth = 0;
        loop {
            match node {
                PNode::Empty => return Ok(None),
                PNode::Opaque(_) => {
                    return Err(WitnessError::Incomplete {
                        path: Path::from_stem_prefix(stem, depth),
                    });
                }
                PNode::Stem(s) => return Ok((s.stem == *stem).then_some((&**s, depth))),
                PNode::Internal(n) => {
                    if depth >= MAX_DEPTH {
                        return Err(WitnessError::Malformed("a path deeper than 248".into()));
                    }
                    let right = bit(stem, depth) == 1;
                    // This node may be the stem's own node read as an internal one (see
                    // `Proof`): believed, it would hide the stem's values.
                    let posing = match &n.left {
                        PNode::Opaque(h) => right && crate::proof::poses_as_own_stem(stem, h),
                        PNode::Empty => !right && crate::proof::poses_as_own_stem(stem, &ZERO_HASH),
                        _ => false,
                    };
                    if posing {
                        return Err(WitnessError::Malformed(format!(
                            "at path {}, the walk of stem 0x{} passes through a node that \
                             hashes alike as that stem's own node: the witness cannot show its \
                             keys absent there",
                            Path::from_stem_prefix(stem, depth),
                            hex(stem)
                        )));
                    }
                    // After the own-stem check: a forgery is malformed, not merely short.
                    if write
                        && right
                        && let PNode::Opaque(h) = &n.left
                        && crate::proof::could_be_stem_half(h, stem, depth)
                    {
                        return Err(WitnessError::Incomplete {
                            path: Path::from_stem_prefix(stem, depth)
                                .child(0)
                                .expect("above depth 248"),
                        });
                    }
                    node = if right { &n.right } else { &n.left };
                    depth += 1;
                }
            }
        }
    }

    /// The value at `key`: `Ok(None)` when the witness proves it absent, an error when the
    /// witness does not reach it.
    pub fn get(&self, key: &TreeKey) -> Result<Option<[u8; 32]>, WitnessError> {
        let Some((s, depth)) = self.find(&key.stem)? else {
            return Ok(None);
        };
        s.leaves
            .get(key.sub_index)
            .map(|v| v.copied())
            .map_err(|()| leaf_missing(s, depth, key.sub_index))
    }

    /// The present values of `stem` that the witness holds (`Ok(None)`: the stem is proven
    /// absent). Leaves the witness does not hold are left out: check a key with
    /// [`PartialTree::get`] (or [`PartialTree::check_leaf`]) before trusting its absence here.
    pub fn stem_values(&self, stem: &Stem) -> Result<Option<StemValues>, WitnessError> {
        Ok(self.find(stem)?.map(|(s, _)| {
            let mut out = StemValues::new();
            s.leaves.collect(0, &mut out);
            out
        }))
    }

    /// `Ok` when the witness can answer for `key` (its leaf, or the stem's absence, is known).
    pub fn check_leaf(&self, key: &TreeKey) -> Result<(), WitnessError> {
        self.get(key).map(|_| ())
    }

    /// Whether a write to `key` can be applied: its walk ends at an empty subtree, at another
    /// stem, or at its own stem with the leaf known.
    fn check_write(&self, key: &TreeKey) -> Result<(), WitnessError> {
        match self.find_for(&key.stem, true)? {
            Some((s, depth)) if !s.leaves.writable(key.sub_index) => {
                Err(leaf_missing(s, depth, key.sub_index))
            }
            _ => Ok(()),
        }
    }

    /// Applies the writes in order (a zero value is a present zero leaf, SPEC §4). Atomic: every
    /// write is checked first, and if one reaches a part of the tree the witness holds only the
    /// hash of, nothing is applied.
    pub fn update(&mut self, writes: &[(TreeKey, [u8; 32])]) -> Result<(), WitnessError> {
        for (k, _) in writes {
            self.check_write(k)?;
        }
        for (k, v) in writes {
            insert::<H>(&mut self.root, k, *v, 0);
        }
        Ok(())
    }

    /// The root hash; recomputes only what changed since it was last computed.
    pub fn root(&mut self) -> Hash32 {
        hash_pnode::<H>(&mut self.root)
    }

    /// Checks that the tree hashes to `root`, and that every stem node in it opens at least one
    /// present leaf: after this, every value it answers with is proven against `root`.
    ///
    /// Why the leaf: a stem node's preimage (stem, 0x00, subtree root) and an internal node's
    /// (two hashes) are both 64 bytes, so an internal node whose left child's hash ends in 0x00
    /// also hashes as a "stem" (the first 31 bytes of that hash) over the right child's hash,
    /// which would prove every other key below it absent. A real stem always holds a value
    /// (values are never removed), and a present leaf is the hash of 32 bytes: no such leaf
    /// can be found under a hash whose preimage is 64 bytes, so the forged stem cannot open one.
    pub fn verify(&mut self, root: &Hash32) -> Result<(), WitnessError> {
        if let Some(stem) = stem_without_value(&self.root) {
            return Err(WitnessError::Malformed(format!(
                "stem 0x{} opens no present leaf: every stem must show one of its values",
                hex(&stem)
            )));
        }
        let computed = self.root();
        if computed == *root {
            Ok(())
        } else {
            Err(WitnessError::RootMismatch {
                computed,
                root: *root,
            })
        }
    }

    /// The encoded size, split into structure (tags, stems, hashes) and leaf values.
    pub fn size(&self) -> WitnessSize {
        let mut size = WitnessSize::default();
        size_pnode(&self.root, &mut size);
        size
    }

    /// Appends the multiproof encoding (module docs) to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        encode_pnode(&self.root, out);
    }

    /// Decodes the multiproof encoding (module docs). Checks the structure (tags, lengths, each
    /// stem on its path, depths, no trailing bytes), not the hashes: call
    /// [`PartialTree::verify`] before trusting a value.
    pub fn decode(bytes: &[u8]) -> Result<Self, WitnessError> {
        let mut r = Decoder { bytes, at: 0 };
        let root = r.pnode(Path::ROOT)?;
        if r.at != bytes.len() {
            return Err(WitnessError::Malformed(format!(
                "{} trailing bytes after the tree",
                bytes.len() - r.at
            )));
        }
        Ok(Self::from_node(root))
    }

    /// Counts: (internal nodes, stems, hash-only subtrees) — for tests and reports.
    pub fn counts(&self) -> (usize, usize, usize) {
        fn walk(n: &PNode, c: &mut (usize, usize, usize)) {
            match n {
                PNode::Internal(i) => {
                    c.0 += 1;
                    deeper(|| walk(&i.left, c));
                    deeper(|| walk(&i.right, c));
                }
                PNode::Stem(_) => c.1 += 1,
                PNode::Opaque(_) => c.2 += 1,
                PNode::Empty => {}
            }
        }
        let mut c = (0, 0, 0);
        walk(&self.root, &mut c);
        c
    }
}

/// The error for leaf `index` of stem node `s` (at `depth`), which the witness holds by hash.
fn leaf_missing(s: &PStem, depth: usize, index: u8) -> WitnessError {
    WitnessError::IncompleteLeaf {
        path: Path::from_stem_prefix(&s.stem, depth),
        stem: s.stem,
        index,
    }
}

/// The first stem of the tree (pre-order) whose leaves hold no present value.
fn stem_without_value(node: &PNode) -> Option<Stem> {
    fn has_value(l: &Leaf) -> bool {
        match l {
            Leaf::Value(_) => true,
            Leaf::Inner(c) => has_value(&c[0]) || has_value(&c[1]),
            Leaf::Zero | Leaf::Opaque(_) => false,
        }
    }
    match node {
        PNode::Internal(n) => deeper(|| stem_without_value(&n.left))
            .or_else(|| deeper(|| stem_without_value(&n.right))),
        PNode::Stem(s) => (!has_value(&s.leaves)).then_some(s.stem),
        PNode::Empty | PNode::Opaque(_) => None,
    }
}

fn insert<H: TreeHasher>(node: &mut PNode, key: &TreeKey, value: [u8; 32], depth: usize) {
    match node {
        PNode::Empty => {
            let mut leaves = Leaf::Zero;
            leaves.set(key.sub_index, value, 0);
            *node = PNode::Stem(Box::new(PStem {
                stem: key.stem,
                leaves,
                hash: None,
            }));
        }
        PNode::Internal(n) => {
            n.hash = None;
            let child = if bit(&key.stem, depth) == 0 {
                &mut n.left
            } else {
                &mut n.right
            };
            deeper(|| insert::<H>(child, key, value, depth + 1));
        }
        PNode::Stem(s) if s.stem == key.stem => {
            s.leaves.set(key.sub_index, value, 0);
            s.hash = None;
        }
        PNode::Stem(s) => {
            // Another stem: push it down one internal node per shared bit (no extension
            // nodes), then place the new stem beside it.
            let old_bit = bit(&s.stem, depth);
            let old = std::mem::replace(node, PNode::Empty);
            let (left, right) = if old_bit == bit(&key.stem, depth) {
                let mut below = old;
                deeper(|| insert::<H>(&mut below, key, value, depth + 1));
                if old_bit == 0 {
                    (below, PNode::Empty)
                } else {
                    (PNode::Empty, below)
                }
            } else {
                let mut new = PNode::Empty;
                deeper(|| insert::<H>(&mut new, key, value, depth + 1));
                if old_bit == 0 { (old, new) } else { (new, old) }
            };
            *node = PNode::Internal(Box::new(PInternal {
                left,
                right,
                hash: None,
            }));
        }
        // `update` checked every write first.
        PNode::Opaque(_) => {}
    }
}

fn hash_pnode<H: TreeHasher>(node: &mut PNode) -> Hash32 {
    match node {
        PNode::Empty => ZERO_HASH,
        PNode::Opaque(h) => *h,
        PNode::Internal(n) => {
            if let Some(h) = n.hash {
                return h;
            }
            let l = deeper(|| hash_pnode::<H>(&mut n.left));
            let r = deeper(|| hash_pnode::<H>(&mut n.right));
            let h = H::hash_pair(&l, &r);
            n.hash = Some(h);
            h
        }
        PNode::Stem(s) => {
            if let Some(h) = s.hash {
                return h;
            }
            let h = stem_node_hash::<H>(&s.stem, &s.leaves.hash::<H>());
            s.hash = Some(h);
            h
        }
    }
}

fn size_pnode(node: &PNode, size: &mut WitnessSize) {
    size.nodes += 1;
    match node {
        PNode::Empty => {}
        PNode::Opaque(_) => size.nodes += 32,
        PNode::Internal(n) => {
            deeper(|| size_pnode(&n.left, size));
            deeper(|| size_pnode(&n.right, size));
        }
        PNode::Stem(s) => {
            size.nodes += STEM_LEN as u64;
            size_leaf(&s.leaves, size);
        }
    }
}

fn size_leaf(leaf: &Leaf, size: &mut WitnessSize) {
    size.nodes += 1;
    match leaf {
        Leaf::Zero => {}
        Leaf::Opaque(_) => size.nodes += 32,
        Leaf::Value(_) => size.values += 32,
        Leaf::Inner(c) => {
            size_leaf(&c[0], size);
            size_leaf(&c[1], size);
        }
    }
}

fn encode_pnode(node: &PNode, out: &mut Vec<u8>) {
    match node {
        PNode::Empty => out.push(TAG_EMPTY),
        PNode::Opaque(h) => {
            out.push(TAG_OPAQUE);
            out.extend_from_slice(h);
        }
        PNode::Internal(n) => {
            out.push(TAG_INTERNAL);
            deeper(|| encode_pnode(&n.left, out));
            deeper(|| encode_pnode(&n.right, out));
        }
        PNode::Stem(s) => {
            out.push(TAG_STEM);
            out.extend_from_slice(&s.stem);
            encode_leaf(&s.leaves, out);
        }
    }
}

fn encode_leaf(leaf: &Leaf, out: &mut Vec<u8>) {
    match leaf {
        Leaf::Zero => out.push(TAG_EMPTY),
        Leaf::Opaque(h) => {
            out.push(TAG_OPAQUE);
            out.extend_from_slice(h);
        }
        Leaf::Value(v) => {
            out.push(TAG_VALUE);
            out.extend_from_slice(v);
        }
        Leaf::Inner(c) => {
            out.push(TAG_INTERNAL);
            encode_leaf(&c[0], out);
            encode_leaf(&c[1], out);
        }
    }
}

struct Decoder<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Decoder<'_> {
    fn take<const N: usize>(&mut self, what: &str) -> Result<[u8; N], WitnessError> {
        let end = self.at + N;
        let Some(slice) = self.bytes.get(self.at..end) else {
            return Err(WitnessError::Malformed(format!(
                "{what} at byte {} runs past the end ({} bytes)",
                self.at,
                self.bytes.len()
            )));
        };
        self.at = end;
        let mut out = [0u8; N];
        out.copy_from_slice(slice);
        Ok(out)
    }

    fn pnode(&mut self, path: Path) -> Result<PNode, WitnessError> {
        let at = self.at;
        let [tag] = self.take::<1>("a node tag")?;
        Ok(match tag {
            TAG_EMPTY => PNode::Empty,
            TAG_OPAQUE => PNode::opaque(self.take::<32>("a hash")?),
            TAG_INTERNAL => {
                let bad = || {
                    WitnessError::Malformed(format!(
                        "an internal node at depth {} (byte {at}): only stems sit at depth 248",
                        path.len()
                    ))
                };
                let lp = path.child(0).ok_or_else(bad)?;
                let rp = path.child(1).ok_or_else(bad)?;
                let left = deeper(|| self.pnode(lp))?;
                let right = deeper(|| self.pnode(rp))?;
                PNode::Internal(Box::new(PInternal {
                    left,
                    right,
                    hash: None,
                }))
            }
            TAG_STEM => {
                let stem = self.take::<STEM_LEN>("a stem")?;
                if !path.is_prefix_of(&stem) {
                    return Err(WitnessError::Malformed(format!(
                        "stem 0x{} at byte {at} is not on its path {path}",
                        hex(&stem)
                    )));
                }
                let leaves = self.leaf(0)?;
                PNode::Stem(Box::new(PStem {
                    stem,
                    leaves,
                    hash: None,
                }))
            }
            t => {
                return Err(WitnessError::Malformed(format!(
                    "unknown node tag 0x{t:02x} at byte {at}"
                )));
            }
        })
    }

    fn leaf(&mut self, depth: usize) -> Result<Leaf, WitnessError> {
        let at = self.at;
        let [tag] = self.take::<1>("a leaf tag")?;
        Ok(match tag {
            TAG_EMPTY => Leaf::Zero,
            TAG_OPAQUE => Leaf::opaque(self.take::<32>("a hash")?),
            TAG_INTERNAL if depth < LEAF_LEVELS => {
                let l = self.leaf(depth + 1)?;
                let r = self.leaf(depth + 1)?;
                Leaf::Inner(Box::new([l, r]))
            }
            TAG_VALUE if depth == LEAF_LEVELS => Leaf::Value(self.take::<32>("a value")?),
            TAG_INTERNAL | TAG_VALUE => {
                return Err(WitnessError::Malformed(format!(
                    "leaf tag 0x{tag:02x} at level {depth} of a stem's subtree (byte {at}): \
                     values sit at level 8, inner nodes above it"
                )));
            }
            t => {
                return Err(WitnessError::Malformed(format!(
                    "unknown leaf tag 0x{t:02x} at byte {at}"
                )));
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(stem_byte: u8, sub: u8) -> TreeKey {
        let mut k = [stem_byte; 32];
        k[31] = sub;
        TreeKey::from_bytes(k)
    }

    #[test]
    fn an_empty_tree_proves_everything_absent_and_takes_writes() {
        let mut t: PartialTree = PartialTree::from_node(PNode::Empty);
        t.verify(&ZERO_HASH).unwrap();
        assert_eq!(t.get(&key(1, 2)).unwrap(), None);
        t.update(&[(key(1, 2), [7; 32]), (key(0x81, 2), [8; 32])])
            .unwrap();
        assert_eq!(t.get(&key(1, 2)).unwrap(), Some([7; 32]));
        let mut bytes = Vec::new();
        t.encode(&mut bytes);
        let mut back: PartialTree = PartialTree::decode(&bytes).unwrap();
        let root = t.root();
        back.verify(&root).unwrap();
        assert_eq!(back.size().total() as usize, bytes.len());
    }

    #[test]
    fn hash_only_parts_refuse_reads_and_writes() {
        let opaque = PNode::Opaque([9; 32]);
        let t: PartialTree = PartialTree::from_node(opaque);
        let e = t.get(&key(1, 2)).unwrap_err();
        assert_eq!(e.to_string(), "witness incomplete at path root");
        let mut leaves = Leaf::Inner(Box::new([Leaf::Opaque([3; 32]), Leaf::Zero]));
        leaves.set(200, [1; 32], 0);
        let stem = PNode::Stem(Box::new(PStem {
            stem: [0x80; 31],
            leaves,
            hash: None,
        }));
        let mut t: PartialTree = PartialTree::from_node(PNode::Internal(Box::new(PInternal {
            left: PNode::Opaque([5; 32]),
            right: stem,
            hash: None,
        })));
        assert_eq!(t.get(&key(0x80, 200)).unwrap(), Some([1; 32]));
        assert_eq!(t.get(&key(0x80, 201)).unwrap(), None);
        let e = t.get(&key(0x80, 3)).unwrap_err();
        assert!(
            matches!(e, WitnessError::IncompleteLeaf { index: 3, .. }),
            "{e}"
        );
        assert!(
            e.to_string()
                .starts_with("witness incomplete at path 1: leaf 3")
        );
        assert!(matches!(
            t.get(&key(0x00, 0)).unwrap_err(),
            WitnessError::Incomplete { .. }
        ));
        // Atomic: the first write is fine, the second is not; nothing changes.
        let before = t.root();
        let e = t
            .update(&[(key(0x80, 201), [2; 32]), (key(0x80, 3), [2; 32])])
            .unwrap_err();
        assert!(matches!(e, WitnessError::IncompleteLeaf { .. }));
        assert_eq!(t.root(), before);
        assert_eq!(t.get(&key(0x80, 201)).unwrap(), None);
    }

    /// The stem/internal preimage ambiguity: an internal node whose left child's hash ends in
    /// 0x00 hashes exactly like a stem (those 31 bytes) over the right child's hash. Such a
    /// forged stem would prove every key under it absent; it opens no present leaf, so verify
    /// refuses it, while the honest tree verifies.
    #[test]
    fn a_stem_forged_from_an_internal_node_is_refused() {
        use bintrie_node::TreeHasher;
        let mut left = [0x42u8; 32];
        left[31] = 0x00;
        let right = [0x17u8; 32];
        let root = Sha256Hasher::hash_pair(&left, &right);
        let mut stem = [0u8; 31];
        stem.copy_from_slice(&left[..31]);
        assert_eq!(stem_node_hash::<Sha256Hasher>(&stem, &right), root);
        let mut honest: PartialTree =
            PartialTree::from_node(PNode::Internal(Box::new(PInternal {
                left: PNode::Opaque(left),
                right: PNode::Opaque(right),
                hash: None,
            })));
        honest.verify(&root).unwrap();
        let mut forged: PartialTree = PartialTree::from_node(PNode::Stem(Box::new(PStem {
            stem,
            leaves: Leaf::Opaque(right),
            hash: None,
        })));
        assert_eq!(forged.root(), root, "the forgery hashes right");
        let e = forged.verify(&root).unwrap_err();
        assert!(e.to_string().contains("opens no present leaf"), "{e}");
    }

    /// The other direction: a stem node hashes exactly like an internal node whose left child
    /// is `stem ‖ 0x00` over its subtree root, so a witness can put that internal node (and
    /// the halves of the stem's values below it) where the stem is, and a key of the stem that
    /// turns right there ends in an empty half: "absent", though present. The walk refuses to
    /// pass through it; so it does, for the zero stem, at an empty left child.
    #[test]
    fn a_stem_read_as_an_internal_node_does_not_hide_its_keys() {
        use bintrie_node::TreeHasher;
        type H = Sha256Hasher;
        // A stem at the root whose bits 0 and 1 are 1, holding values 0 and 1 only.
        let stem = [0xe0u8; 31];
        let mut values = StemValues::new();
        values.set(0, [1; 32]);
        values.set(1, [2; 32]);
        let (subtree_root, _) = values.subtree_root::<H>();
        let root = stem_node_hash::<H>(&stem, &subtree_root);
        // The lower half of its leaves (0..128), over the empty upper half.
        let lower = values.leaf_siblings::<H>(128)[7];
        assert_eq!(H::hash_pair(&lower, &ZERO_HASH), subtree_root);
        let mut stem_half = [0u8; 32];
        stem_half[..31].copy_from_slice(&stem);
        let mut forged: PartialTree =
            PartialTree::from_node(PNode::Internal(Box::new(PInternal {
                left: PNode::Opaque(stem_half),
                right: PNode::Internal(Box::new(PInternal {
                    left: PNode::Opaque(lower),
                    right: PNode::Empty,
                    hash: None,
                })),
                hash: None,
            })));
        forged.verify(&root).unwrap();
        let e = forged.get(&key(0xe0, 0)).unwrap_err();
        assert!(
            e.to_string()
                .contains("hashes alike as that stem's own node"),
            "{e}"
        );
        // Another stem's keys walk on: it is not theirs (the node is theirs to pass).
        assert_eq!(forged.get(&key(0xf0, 0)).unwrap(), None);

        // The zero stem: its node hashes like an internal node with an empty left child.
        let mut zero: PartialTree = PartialTree::from_node(PNode::Internal(Box::new(PInternal {
            left: PNode::Empty,
            right: PNode::Opaque(subtree_root),
            hash: None,
        })));
        let zroot = zero.root();
        assert_eq!(stem_node_hash::<H>(&[0; 31], &subtree_root), zroot);
        zero.verify(&zroot).unwrap();
        let e = zero.get(&key(0x00, 0)).unwrap_err();
        assert!(e.to_string().contains("hashes alike"), "{e}");
    }

    /// Another stem's node read as an internal one: its reads stay true (a walk into its values
    /// ends in an empty half, and the walking key is indeed absent), but a new stem written
    /// there would land among its values instead of splitting it, and the post-state root
    /// would be wrong (a soundness review's construction). A write refuses to pass a hash-only
    /// left child that could be a stem's first half there; the honest witness opens it.
    #[test]
    fn a_write_does_not_land_inside_another_stem_read_as_an_internal_node() {
        use bintrie_node::TreeHasher;
        type H = Sha256Hasher;
        let stem_of = |b: u8| [b; 31];
        let full = |stem: Stem, subs: &[u8]| {
            let mut values = StemValues::new();
            for &i in subs {
                values.set(i, [i + 1; 32]);
            }
            (stem, values)
        };
        // A (0x10..) on the left; S' (0x85.., path 10) and C (0xc0.., path 11) on the right.
        let (a, av) = full(stem_of(0x10), &[0, 1]);
        let (s1, sv) = full(stem_of(0x85), &[0, 1]);
        let (c, cv) = full(stem_of(0xc0), &[0]);
        let pstem = |stem: Stem, v: &StemValues| {
            PNode::Stem(Box::new(PStem {
                stem,
                leaves: Leaf::full(v),
                hash: None,
            }))
        };
        let internal = |left, right| {
            PNode::Internal(Box::new(PInternal {
                left,
                right,
                hash: None,
            }))
        };
        let mut honest: PartialTree = PartialTree::from_node(internal(
            pstem(a, &av),
            internal(pstem(s1, &sv), pstem(c, &cv)),
        ));
        let root = honest.root();
        // S' as an internal node: its stem half over its values' halves, the upper one empty.
        let (sr, _) = sv.subtree_root::<H>();
        let lower = sv.leaf_siblings::<H>(200)[7];
        assert_eq!(H::hash_pair(&lower, &ZERO_HASH), sr);
        let mut half = [0u8; 32];
        half[..31].copy_from_slice(&s1);
        let mut forged: PartialTree = PartialTree::from_node(internal(
            pstem(a, &av),
            internal(
                internal(
                    PNode::Opaque(half),
                    internal(PNode::Opaque(lower), PNode::Empty),
                ),
                pstem(c, &cv),
            ),
        ));
        forged.verify(&root).unwrap();
        // S2 = 0xb0.. (bits 1011): its real walk ends at S'.
        let write = [(key(0xb0, 7), [9; 32])];
        assert_eq!(forged.get(&write[0].0).unwrap(), None, "a true absence");
        let e = forged.update(&write).unwrap_err();
        assert!(
            matches!(&e, WitnessError::Incomplete { path } if path.len() == 3),
            "{e}"
        );
        assert_eq!(forged.root(), root, "nothing applied");
        // The honest witness splits S' and gives the real root.
        honest.update(&write).unwrap();
        let mut whole: PartialTree = PartialTree::from_node(internal(
            pstem(a, &av),
            internal(pstem(s1, &sv), pstem(c, &cv)),
        ));
        whole.update(&write).unwrap();
        assert_eq!(honest.root(), whole.root());
    }

    #[test]
    fn malformed_encodings_are_refused_by_name() {
        let cases: &[(&[u8], &str)] = &[
            (&[], "node tag at byte 0 runs past the end"),
            (&[0x07], "unknown node tag 0x07"),
            (&[0x01, 1, 2], "hash at byte 1 runs past the end"),
            (&[0x00, 0x00], "1 trailing bytes"),
            (&[0x02, 0x00], "node tag at byte 2 runs past the end"),
        ];
        for (bytes, msg) in cases {
            let e = PartialTree::<Sha256Hasher>::decode(bytes).unwrap_err();
            assert!(e.to_string().contains(msg), "{e} / {msg}");
        }
        // A stem off its path: under the left child (bit 0) with a stem starting with bit 1.
        let mut b = vec![0x02, 0x03];
        b.extend_from_slice(&[0x80; 31]);
        b.extend_from_slice(&[0x00, 0x00]);
        let e = PartialTree::<Sha256Hasher>::decode(&b).unwrap_err();
        assert!(e.to_string().contains("is not on its path 0"), "{e}");
        // A value above the leaf level.
        let mut b = vec![0x03];
        b.extend_from_slice(&[0x80; 31]);
        b.push(0x04);
        b.extend_from_slice(&[1; 32]);
        let e = PartialTree::<Sha256Hasher>::decode(&b).unwrap_err();
        assert!(e.to_string().contains("at level 0"), "{e}");
        // Internal nodes past depth 248.
        let b = vec![0x02; 300];
        let e = PartialTree::<Sha256Hasher>::decode(&b).unwrap_err();
        assert!(e.to_string().contains("depth 248"), "{e}");
    }
}
