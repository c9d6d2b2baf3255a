//! The tree engine: the in-memory tree and the public [`Trie`] API. The stages live in
//! submodules: [`load`] (loading and checking blobs, preloading a batch), [`update`] (applying a
//! batch), [`hash`] (rehashing, verifying), [`collect`] (serializing a commit).

use crate::{CommitSet, NodeStore, TrieError};
use bintrie_keys::{Stem, TreeKey};
use bintrie_node::{
    GroupBlob, GroupEntry, Hash32, MAX_DEPTH, MAX_GROUP_DEPTH, MIN_GROUP_DEPTH, NodeBlob, Path,
    PathKey, Sha256Hasher, StemValues, TreeHasher, ZERO_HASH, deeper,
};
use std::collections::HashMap;
use std::marker::PhantomData;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

mod collect;
mod hash;
mod load;
mod update;
mod witness;

use collect::hash_collect_all;
use hash::{hash_node, verify_node};
use load::{Ahead, load, load_top, preload};
use update::apply;

/// Batches at least this large are split across rayon tasks (above [`PAR_DEPTH`]).
const PAR_BATCH: usize = 256;
/// Walks split a node's two halves across rayon tasks only above this depth: 2^8 tasks are
/// plenty, and it bounds rayon's nested joins (each a dozen frames on a worker's stack, and a
/// worker waiting in a join runs other tasks on top of them) however deep the tree is. Split
/// at every level of a 248-deep path, a debug build overflowed a worker's 2 MB stack.
const PAR_DEPTH: usize = 8;

/// Runs the two halves of a walk over a node, one level deeper: on two rayon tasks if
/// `parallel` (callers pass `depth < PAR_DEPTH`, and a large enough batch for updates), one
/// after the other otherwise. Each half runs through [`deeper`], so the walk cannot overflow
/// the stack however deep the tree is.
fn join_halves<A, B, RA, RB>(parallel: bool, a: A, b: B) -> (RA, RB)
where
    A: FnOnce() -> RA + Send,
    B: FnOnce() -> RB + Send,
    RA: Send,
    RB: Send,
{
    if parallel {
        rayon::join(|| deeper(a), || deeper(b))
    } else {
        (deeper(a), deeper(b))
    }
}

/// A sorted batch of writes, or part of one.
type Writes<'b> = &'b [(TreeKey, [u8; 32])];
/// A child's path and the part of a batch that goes under it.
type Half<'b> = (Path, Writes<'b>);

/// Splits a sorted batch under the internal node at `path` by the next bit: each half with
/// its child's path, and whether the halves run on rayon tasks (a large batch with work on
/// both sides, above [`PAR_DEPTH`]). [`TrieError::TooDeep`] at depth 248, where a stem has no
/// next bit: checked before any bit is read.
fn split_batch<'b, E: std::error::Error>(
    path: &Path,
    batch: Writes<'b>,
) -> Result<(bool, [Half<'b>; 2]), TrieError<E>> {
    let lp = path.child(0).ok_or(TrieError::TooDeep)?;
    let rp = path.child(1).ok_or(TrieError::TooDeep)?;
    let depth = path.len();
    let split = batch.partition_point(|(k, _)| stem_bit(&k.stem, depth) == 0);
    let (lb, rb) = batch.split_at(split);
    let parallel =
        depth < PAR_DEPTH && batch.len() >= PAR_BATCH && !lb.is_empty() && !rb.is_empty();
    Ok((parallel, [(lp, lb), (rp, rb)]))
}

#[cfg(test)]
mod split_tests {
    use super::*;

    /// At depth 248 the split is an error before any bit of a stem is read (bit 248 does not
    /// exist: reading it would index past the stem); above, it splits by the next bit.
    #[test]
    fn split_batch_refuses_depth_248_and_splits_above() {
        let stem = [0xff; 31];
        let batch = [
            (TreeKey::new([0; 31], 0), [1; 32]),
            (TreeKey::new(stem, 0), [2; 32]),
        ];
        let deepest = Path::from_stem_prefix(&stem, MAX_DEPTH);
        let err = split_batch::<std::convert::Infallible>(&deepest, &batch[1..]).unwrap_err();
        assert!(matches!(err, TrieError::TooDeep), "{err}");
        let (parallel, [(lp, lb), (rp, rb)]) =
            split_batch::<std::convert::Infallible>(&Path::ROOT, &batch).unwrap();
        assert!(!parallel, "two writes stay on one task");
        assert_eq!((lp.len(), rp.len()), (1, 1));
        assert_eq!((lb, rb), (&batch[..1], &batch[1..]));
    }
}

/// A node of the in-memory tree.
#[derive(Debug)]
enum Node {
    Empty,
    Internal(Slot<Internal>),
    Stem(Slot<StemNode>),
    /// Not loaded: its hash is known and its blob is in the store at this node's path. Loading
    /// checks the blob against this hash.
    Hashed(Hash32),
}

/// A loaded node: its box, with its hash and the epoch it last changed in kept beside the
/// pointer, in the parent's memory. A walk that needs only a child's hash or whether it
/// changed (the commit's listing of a group's bottom hashes, a clean sibling's hash, the
/// dirty check before descending) reads them without following the pointer: on a tree far
/// larger than the cache, each pointer followed is a miss.
#[derive(Debug)]
struct Slot<T> {
    /// Cached hash; `None` after a change below. The inner nodes of a loaded group get theirs
    /// when the group is verified on load (a group blob stores only its bottom hashes, SPEC §5).
    hash: Option<Hash32>,
    /// The commit epoch in which it last changed ([`CLEAN`] if never since it was loaded):
    /// dirty while that is the trie's current epoch, clean once a commit ends the epoch.
    dirty: u32,
    body: Box<T>,
}

impl<T> Slot<T> {
    fn new(body: T, hash: Option<Hash32>, dirty: u32) -> Self {
        Slot {
            hash,
            dirty,
            body: Box::new(body),
        }
    }
}

impl<T> std::ops::Deref for Slot<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.body
    }
}

impl<T> std::ops::DerefMut for Slot<T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.body
    }
}

#[derive(Debug)]
struct Internal {
    left: Node,
    right: Node,
}

#[derive(Debug)]
struct StemNode {
    stem: Stem,
    values: StemValues,
    /// Depth at which the store holds this stem's blob, if it does, as of a commit before the
    /// one in `written`.
    stored_depth: Option<u8>,
    /// The epoch and depth of the last commit that serialized this stem: it holds the blob
    /// there once that epoch is over (the commit succeeded), see [`StemNode::stored_at`].
    written: Option<(u32, u8)>,
}

/// [`Slot::dirty`] of a node loaded from the store (no epoch is 0).
const CLEAN: u32 = 0;

impl StemNode {
    /// The depth at which the store holds this stem's blob, if it does, while `epoch` is the
    /// trie's current epoch.
    fn stored_at(&self, epoch: u32) -> Option<u8> {
        match self.written {
            Some((e, d)) if e != epoch => Some(d),
            _ => self.stored_depth,
        }
    }

    /// Notes that the commit of `epoch` serializes this stem at `depth` (in effect once that
    /// epoch is over); a write of an earlier, committed epoch becomes the stored depth.
    fn note_written(&mut self, epoch: u32, depth: u8) {
        if let Some((e, d)) = self.written
            && e != epoch
        {
            self.stored_depth = Some(d);
        }
        self.written = Some((epoch, depth));
    }
}

impl Node {
    /// A new internal node, changed in `epoch`.
    fn new_internal(left: Node, right: Node, epoch: u32) -> Node {
        Node::Internal(Slot::new(Internal { left, right }, None, epoch))
    }

    /// The tree whose root hash is `root`, nothing loaded: empty for the zero hash.
    fn unloaded(root: Hash32) -> Node {
        if root == ZERO_HASH {
            Node::Empty
        } else {
            Node::Hashed(root)
        }
    }

    /// The cached hash. Only valid after the tree has been hashed (`Trie::root`).
    fn cached_hash(&self) -> Option<Hash32> {
        match self {
            Node::Empty => Some(ZERO_HASH),
            Node::Hashed(h) => Some(*h),
            Node::Internal(n) => n.hash,
            Node::Stem(s) => s.hash,
        }
    }

    /// Changed in `epoch`, the trie's current epoch: since the last commit.
    fn is_dirty(&self, epoch: u32) -> bool {
        match self {
            Node::Internal(n) => n.dirty == epoch,
            Node::Stem(s) => s.dirty == epoch,
            _ => false,
        }
    }
}

#[inline]
fn stem_bit(stem: &Stem, depth: usize) -> u8 {
    (stem[depth / 8] >> (7 - (depth % 8))) & 1
}

/// Cumulative work counters of a [`Trie`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TrieStats {
    /// Blobs fetched from the store and decoded.
    pub nodes_loaded: u64,
    /// Bytes of those blobs.
    pub bytes_loaded: u64,
    /// Hash-function calls made while computing roots, verifying loaded blobs (a stem blob's
    /// stem hash, a group blob's inner nodes) and in [`Trie::verify`].
    pub hashes: u64,
    /// Blobs written by commits.
    pub blobs_written: u64,
    /// Bytes of those blobs.
    pub bytes_written: u64,
    /// Paths deleted by commits.
    pub paths_removed: u64,
}

#[derive(Default)]
struct Counters {
    nodes_loaded: AtomicU64,
    bytes_loaded: AtomicU64,
    hashes: AtomicU64,
    blobs_written: AtomicU64,
    bytes_written: AtomicU64,
    paths_removed: AtomicU64,
}

/// What one commit wrote.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CommitStats {
    /// The root after the commit.
    pub root: Hash32,
    /// Blobs written (groups and stems).
    pub blobs: usize,
    /// Bytes written.
    pub bytes: usize,
    /// Paths deleted.
    pub removed: usize,
}

/// Shared, read-only state of one parallel operation.
struct Ctx<'a, S: NodeStore> {
    store: &'a S,
    group_depth: u8,
    counters: &'a Counters,
    /// Stored stem paths vacated by splits in this operation.
    vacated: &'a Mutex<Vec<Path>>,
    /// Blobs decoded ahead of their loads.
    ahead: &'a Ahead,
    /// The trie's resident depth ([`Trie::keep_resident`]), if any.
    resident: Option<usize>,
    /// The trie's current commit epoch: what a change stamps on the nodes it dirties.
    epoch: u32,
    /// Where to note the prefixes, at the resident depth, of what is loaded or written below
    /// it (for [`Trie::trim`]).
    below: &'a Mutex<Vec<Path>>,
}

impl<S: NodeStore> Ctx<'_, S> {
    /// Notes that something at or below `path` (of any length) is now in memory: its prefix
    /// at the resident depth, when the trie has one and `path` reaches it.
    fn note_below(&self, path: &Path) {
        if let Some(d) = self.resident.filter(|&d| path.len() >= d) {
            let prefix = Path::from_stem_prefix(path.bits(), d);
            self.below
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(prefix);
        }
    }
}

/// An EIP-7864 binary trie over a [`NodeStore`], generic over the hash function.
///
/// Nodes are loaded lazily by path, and every blob loaded is checked against the hash its parent
/// holds for it (the root blob against the root given to [`Trie::open`]): a stem blob by its
/// stem hash, a group blob by hashing its entries up through its inner nodes. A mismatch is
/// [`TrieError::HashMismatch`], so a damaged store is never read or built upon. The inner hashes
/// computed by that check are kept, so a later change inside a loaded group rehashes only the
/// changed path (the check costs up to 2^g - 1 hashes per group loaded, once). Updates are
/// applied as sorted batches; hashing is cached per node and runs in parallel over independent
/// subtrees. [`Trie::commit`] writes the dirty group and stem blobs at the trie's group depth,
/// plus the paths vacated by stems that a split pushed deeper.
///
/// Invariants: the root never depends on the group depth or the order of insertion; nothing is
/// ever removed from the tree (a zero value is a present leaf, SPEC §4); every loaded node is
/// consistent with the root the trie was opened at; an operation that fails changes nothing
/// (nodes verified before the failure may stay loaded).
pub struct Trie<S: NodeStore, H: TreeHasher = Sha256Hasher> {
    root: Node,
    store: S,
    group_depth: u8,
    counters: Counters,
    vacated: Vec<Path>,
    /// The root the store holds for this tree: the one opened at, then each commit's.
    committed: Hash32,
    /// The commit epoch: nodes changed since the last commit carry it (`dirty`), and a
    /// commit ends it, which leaves every node clean without visiting one. Never [`CLEAN`].
    epoch: u32,
    /// Blobs decoded ahead of their loads ([`Trie::decode_ahead`]); emptied by every commit,
    /// discard and unload.
    ahead: Ahead,
    /// Nodes above this depth stay loaded across [`Trie::trim`] ([`Trie::keep_resident`]).
    resident: Option<usize>,
    /// The prefixes, at the resident depth, under which nodes were loaded or written since the
    /// last trim: where [`Trie::trim`] looks (so it never walks the whole resident top).
    below: Mutex<Vec<Path>>,
    _hasher: PhantomData<H>,
}

impl<S: NodeStore, H: TreeHasher> std::fmt::Debug for Trie<S, H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Trie")
            .field("group_depth", &self.group_depth)
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

fn check_group_depth<E: std::error::Error>(g: u8) -> Result<(), TrieError<E>> {
    if (MIN_GROUP_DEPTH..=MAX_GROUP_DEPTH).contains(&g) {
        Ok(())
    } else {
        Err(TrieError::BadGroupDepth(g))
    }
}

impl<S: NodeStore, H: TreeHasher> Trie<S, H> {
    /// An empty tree that will commit into `store` at `group_depth` (1..=8).
    pub fn new(store: S, group_depth: u8) -> Result<Self, TrieError<S::Error>> {
        Self::open(store, group_depth, ZERO_HASH)
    }

    /// A tree whose root, with hash `root`, is stored in `store` at group depth `group_depth`.
    /// Nothing is read until a lookup or update needs it. A zero `root` is the empty tree.
    pub fn open(store: S, group_depth: u8, root: Hash32) -> Result<Self, TrieError<S::Error>> {
        check_group_depth(group_depth)?;
        Ok(Trie {
            root: Node::unloaded(root),
            store,
            group_depth,
            counters: Counters::default(),
            vacated: Vec::new(),
            committed: root,
            epoch: 1,
            ahead: Ahead::default(),
            resident: None,
            below: Mutex::new(Vec::new()),
            _hasher: PhantomData,
        })
    }

    /// The group depth commits are written at.
    pub fn group_depth(&self) -> u8 {
        self.group_depth
    }

    /// The store.
    pub fn store(&self) -> &S {
        &self.store
    }

    /// The store, mutably (the engine's view of it must not be changed behind its back).
    pub fn store_mut(&mut self) -> &mut S {
        &mut self.store
    }

    /// Consumes the tree and returns its store.
    pub fn into_store(self) -> S {
        self.store
    }

    /// The work counters since creation (or the last [`Trie::reset_stats`]).
    pub fn stats(&self) -> TrieStats {
        let c = &self.counters;
        TrieStats {
            nodes_loaded: c.nodes_loaded.load(Ordering::Relaxed),
            bytes_loaded: c.bytes_loaded.load(Ordering::Relaxed),
            hashes: c.hashes.load(Ordering::Relaxed),
            blobs_written: c.blobs_written.load(Ordering::Relaxed),
            bytes_written: c.bytes_written.load(Ordering::Relaxed),
            paths_removed: c.paths_removed.load(Ordering::Relaxed),
        }
    }

    /// Zeroes the work counters.
    pub fn reset_stats(&mut self) {
        self.counters = Counters::default();
    }

    /// Drops every node in memory, uncommitted changes included, and starts again from the
    /// root of the last commit (or the one [`Trie::open`] was given), as a fresh open there
    /// would: what a state does after a commit that failed, so that the failed block's
    /// changes can never reach a later commit.
    pub fn discard(&mut self) {
        self.root = Node::unloaded(self.committed);
        self.vacated.clear();
        self.ahead.clear();
        self.below_mut().clear();
    }

    /// Drops every loaded node and keeps only the root hash, as after [`Trie::open`]. Fails if
    /// there are uncommitted changes (they would be lost).
    pub fn unload(&mut self) -> Result<(), TrieError<S::Error>> {
        if self.root.is_dirty(self.epoch) {
            return Err(TrieError::Uncommitted);
        }
        let root = self.root.cached_hash().ok_or(TrieError::Uncommitted)?;
        self.root = Node::unloaded(root);
        self.ahead.clear();
        self.below_mut().clear();
        Ok(())
    }

    fn below_mut(&mut self) -> &mut Vec<Path> {
        self.below.get_mut().unwrap_or_else(|e| e.into_inner())
    }

    /// Keeps the nodes above `depth` loaded across [`Trie::trim`]: the top of the tree held in
    /// memory between blocks, decoded and hashed, as a node keeps it, so a block neither reads
    /// nor re-hashes it. `depth` must be at most 248 and a multiple of the group depth (every
    /// node there is a group root or a stem, whose blob is stored at its path), or 248 (only
    /// stems live there); 0 keeps nothing (as before the call). Errors with
    /// [`TrieError::BadResidentDepth`] otherwise. Everything loaded is dropped first (as by
    /// [`Trie::unload`], so it fails with [`TrieError::Uncommitted`] if there are uncommitted
    /// changes): what a trim must drop is noted from here on. It loads nothing by itself:
    /// [`Trie::load_resident`] loads the top at once, or the blocks load it as they need it.
    pub fn keep_resident(&mut self, depth: usize) -> Result<(), TrieError<S::Error>> {
        if depth > MAX_DEPTH
            || !(depth.is_multiple_of(self.group_depth.into()) || depth == MAX_DEPTH)
        {
            return Err(TrieError::BadResidentDepth {
                depth,
                group_depth: self.group_depth,
            });
        }
        self.unload()?;
        self.resident = (depth > 0).then_some(depth);
        Ok(())
    }

    /// Whether the root is loaded: false after [`Trie::open`], [`Trie::unload`] and
    /// [`Trie::discard`] (and for an empty tree) until something loads it.
    pub fn is_loaded(&self) -> bool {
        matches!(self.root, Node::Internal(_) | Node::Stem(_))
    }

    /// The depth set by [`Trie::keep_resident`].
    pub fn resident_depth(&self) -> Option<usize> {
        self.resident
    }

    /// Loads (and verifies, as every load does) every node above the resident depth, in
    /// parallel: the whole top of the tree at once, instead of as the blocks reach it. Returns
    /// the blobs loaded. Nothing without a resident depth. Errors as a load does; what was
    /// verified before an error stays loaded.
    pub fn load_resident(&mut self) -> Result<u64, TrieError<S::Error>> {
        let Some(depth) = self.resident else {
            return Ok(0);
        };
        let before = self.counters.nodes_loaded.load(Ordering::Relaxed);
        let vacated = Mutex::new(Vec::new());
        let mut root = std::mem::replace(&mut self.root, Node::Empty);
        let result = load_top::<S, H>(&self.ctx(&vacated), &mut root, Path::ROOT, depth);
        self.root = root;
        result?;
        Ok(self.counters.nodes_loaded.load(Ordering::Relaxed) - before)
    }

    /// Drops every node at or below the resident depth that was loaded or written since the
    /// last trim (each replaced by its hash, as before it was loaded), keeping the top loaded
    /// and hashed: what a state does between blocks instead of [`Trie::unload`]. Its cost is
    /// one walk per such prefix, not a walk of the top. Without a resident depth it is
    /// [`Trie::unload`]. Fails with [`TrieError::Uncommitted`] (changing nothing) if there are
    /// uncommitted changes.
    pub fn trim(&mut self) -> Result<(), TrieError<S::Error>> {
        let Some(depth) = self.resident else {
            return self.unload();
        };
        if self.root.is_dirty(self.epoch) || self.root.cached_hash().is_none() {
            return Err(TrieError::Uncommitted);
        }
        let mut below = std::mem::take(self.below_mut());
        below.sort_unstable();
        below.dedup();
        for prefix in &below {
            let mut node = &mut self.root;
            let mut reached = 0;
            while reached < depth {
                let Node::Internal(n) = node else { break };
                node = if prefix.bit(reached) == 0 {
                    &mut n.left
                } else {
                    &mut n.right
                };
                reached += 1;
            }
            // Above the resident depth (a stem or an empty subtree ended the walk): kept.
            if reached < depth {
                continue;
            }
            // A clean tree (checked above: a change marks every node above it dirty) whose
            // hashes are all cached (the commit hashed it).
            if let Node::Internal(_) | Node::Stem(_) = node
                && let Some(h) = node.cached_hash()
                && !node.is_dirty(self.epoch)
            {
                *node = Node::Hashed(h);
            }
        }
        self.ahead.clear();
        Ok(())
    }

    /// Whether [`Trie::holds`] can be true for a blob a prefetch hands on at `path`: unless the
    /// path lies at or below the resident depth and nothing was loaded or written below that
    /// depth since the last trim (the notes [`Trie::trim`] keeps are empty). There, everything
    /// is unloaded, and a path that would end above it (at a stem or an empty subtree of the
    /// resident top) has no blob at or below it for a store to hand on. This spares the walk
    /// through the resident top for each of the ~1,200 blobs of a cold approve block, on the
    /// thread the update waits for.
    fn may_hold(&self, path: &Path) -> bool {
        match self.resident {
            Some(d) if path.len() >= d => !self
                .below
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .is_empty(),
            _ => true,
        }
    }

    /// Whether the node at `path` is already in memory (loaded, or the walk to it ends above
    /// it at a stem or an empty subtree, so no load will ever read a blob there).
    fn holds(&self, path: &Path) -> bool {
        let mut node = &self.root;
        for i in 0..path.len() {
            match node {
                Node::Internal(n) => node = if path.bit(i) == 0 { &n.left } else { &n.right },
                Node::Hashed(_) => return false,
                Node::Empty | Node::Stem(_) => return true,
            }
        }
        !matches!(node, Node::Hashed(_))
    }

    /// Decodes and hashes `blob`, the store's blob at `key`, ahead of the load that will need
    /// it: meant for another thread, while the blobs are still arriving and before the update
    /// that needs them starts (the trie prefetch of a block). That load then only compares
    /// the hash with the one the parent holds, so every node is still checked against the
    /// root before it is used: a blob decoded here that does not hash to what its parent
    /// holds (stale, or damaged) is dropped there and the store is read instead, as if
    /// nothing had been decoded; one that does not decode at all is not kept (the load
    /// reports it). Returns whether the blob was kept. Everything decoded ahead is dropped at
    /// the next commit, [`Trie::discard`] or [`Trie::unload`]; its hash calls count as the
    /// load's.
    pub fn decode_ahead(&self, key: &PathKey, blob: &[u8]) -> bool {
        let Ok(path) = Path::from_key(key.as_bytes()) else {
            return false;
        };
        // The resident top (or a node loaded earlier) is never loaded again.
        if self.may_hold(&path) && self.holds(&path) {
            return false;
        }
        self.ahead.decode::<H>(key, &path, blob, self.group_depth)
    }

    /// How many blobs decoded ahead are still waiting for their loads.
    pub fn decoded_ahead(&self) -> usize {
        self.ahead.len()
    }

    fn ctx<'a>(&'a self, vacated: &'a Mutex<Vec<Path>>) -> Ctx<'a, S> {
        Ctx {
            store: &self.store,
            group_depth: self.group_depth,
            counters: &self.counters,
            vacated,
            ahead: &self.ahead,
            resident: self.resident,
            epoch: self.epoch,
            below: &self.below,
        }
    }

    /// The value at `key`, loading (and verifying) nodes on the way as needed. `Ok(None)` when
    /// the key is absent. Errors when the store fails, or when a blob on the way is missing,
    /// malformed, or does not hash to what its parent holds, or when the walk would turn right
    /// past a left child equal to the key's stem and 0x00 (its own stem's node, read as an
    /// internal one by a crafted store, [`crate::Proof`]; the zero stem's node, read as an
    /// internal node with an empty left child, is not caught here).
    pub fn get(&mut self, key: &TreeKey) -> Result<Option<[u8; 32]>, TrieError<S::Error>> {
        Ok(self
            .get_stem(&key.stem)?
            .and_then(|v| v.get(key.sub_index).copied()))
    }

    /// All present values of `stem` (one walk for all 256 sub-indices); `Ok(None)` when the stem
    /// is absent. Errors as [`Trie::get`] does; never panics on a corrupt store (a path that
    /// would pass depth 248 is [`TrieError::TooDeep`] or [`TrieError::Corrupt`]).
    pub fn get_stem(&mut self, stem: &Stem) -> Result<Option<&StemValues>, TrieError<S::Error>> {
        Ok(match self.walk(stem, |_| {})? {
            Node::Stem(s) if s.stem == *stem => Some(&s.values),
            _ => None,
        })
    }

    /// Walks from the root along `stem`'s bits, loading (and verifying) nodes as needed, to
    /// where the walk ends: an empty subtree or a stem (the stem may be another one).
    /// `sibling` gets the hash of the other child of each internal node passed, root level
    /// first (`None` for a node not hashed since it changed).
    fn walk(
        &mut self,
        stem: &Stem,
        mut sibling: impl FnMut(Option<Hash32>),
    ) -> Result<&Node, TrieError<S::Error>> {
        let vacated = Mutex::new(Vec::new());
        let Trie {
            root,
            store,
            group_depth,
            counters,
            ahead,
            resident,
            epoch,
            below,
            ..
        } = self;
        let ctx = Ctx {
            store: &*store,
            group_depth: *group_depth,
            counters: &*counters,
            vacated: &vacated,
            ahead: &*ahead,
            resident: *resident,
            epoch: *epoch,
            below: &*below,
        };
        let mut node = root;
        let mut path = Path::ROOT;
        loop {
            if let Node::Hashed(h) = node {
                let h = *h;
                *node = load::<S, H>(&ctx, &path, h)?;
            }
            match node {
                Node::Internal(n) => {
                    if path.len() >= MAX_DEPTH {
                        return Err(TrieError::TooDeep);
                    }
                    let bit = stem_bit(stem, path.len());
                    // A node whose left child is this stem followed by 0x00 hashes alike as
                    // the stem's own node: a crafted store could hide the stem's keys below it
                    // (see `Proof`). No honest tree turns right past one.
                    if bit == 1
                        && n.left
                            .cached_hash()
                            .is_some_and(|h| crate::proof::poses_as_own_stem(stem, &h))
                    {
                        return Err(TrieError::Corrupt {
                            path,
                            reason: format!(
                                "an internal node whose left child hashes as stem 0x{}'s own \
                                 node's left half: it may be that stem's node read as an \
                                 internal one, so the walk does not pass it (a store crafted \
                                 to hide the stem's keys, or a tree whose keys were chosen to \
                                 match a hash: README, \"A gap in the tree's hash\")",
                                crate::hex(stem.as_slice())
                            ),
                        });
                    }
                    path = path.child(bit).ok_or(TrieError::TooDeep)?;
                    let Internal { left, right } = &mut **n;
                    let (next, other) = if bit == 0 {
                        (left, &*right)
                    } else {
                        (right, &*left)
                    };
                    sibling(other.cached_hash());
                    node = next;
                }
                end => return Ok(end),
            }
        }
    }

    /// Sets one value (a zero value is written as a present zero leaf).
    pub fn insert(&mut self, key: TreeKey, value: [u8; 32]) -> Result<(), TrieError<S::Error>> {
        self.apply_sorted(&[(key, value)])
    }

    /// Applies a batch of writes. The batch is sorted by key here; for equal keys the later
    /// entry wins, as if the writes were applied one by one in order. Atomic: on an error
    /// (see [`Trie::apply_sorted`]) nothing is applied.
    pub fn update(
        &mut self,
        mut batch: Vec<(TreeKey, [u8; 32])>,
    ) -> Result<(), TrieError<S::Error>> {
        sort_dedup_last(&mut batch);
        self.apply_sorted(&batch)
    }

    /// Applies a batch already sorted by key with no duplicate keys (checked; an unsorted batch
    /// is an error and changes nothing).
    ///
    /// Atomic: a store error, a missing, malformed or too deep blob, or a blob that does not
    /// hash to what its parent holds is returned with the root and the next commit as if this
    /// call had not been made. With changes uncommitted before the call, every node the batch
    /// reaches is loaded and verified first (in parallel), then the writes are applied, so an
    /// error changes nothing. With none (the block path: one update per commit), one walk
    /// loads and applies (a second walk of the same paths was a fifth of the update's time),
    /// and an error part-way goes back to the last commit as [`Trie::discard`] does: the same
    /// state, with what was loaded (a resident top included) to be loaded again.
    pub fn apply_sorted(
        &mut self,
        batch: &[(TreeKey, [u8; 32])],
    ) -> Result<(), TrieError<S::Error>> {
        if batch.windows(2).any(|w| w[0].0 >= w[1].0) {
            return Err(TrieError::UnsortedBatch);
        }
        if batch.is_empty() {
            return Ok(());
        }
        let vacated = Mutex::new(Vec::new());
        let mut root = std::mem::replace(&mut self.root, Node::Empty);
        // With nothing uncommitted, the last commit is exactly the state before this call: one
        // walk loads and applies, and a failure part-way goes back there. Otherwise every
        // fallible load comes first (`preload`), so that a failure changes nothing.
        let one_walk = !root.is_dirty(self.epoch);
        let ctx = self.ctx(&vacated);
        let result = if one_walk {
            apply::<S, H>(&ctx, &mut root, Path::ROOT, batch)
        } else {
            preload::<S, H>(&ctx, &mut root, Path::ROOT, batch)
                .and_then(|()| apply::<S, H>(&ctx, &mut root, Path::ROOT, batch))
        };
        self.root = root;
        if result.is_err() && one_walk {
            self.discard();
        } else {
            self.vacated
                .extend(vacated.into_inner().unwrap_or_else(|e| e.into_inner()));
        }
        result.map(|_| ())
    }

    /// A proof of `key`'s value (or absence) against [`Trie::root`], loading what the walk
    /// needs. Uncommitted changes are included (the proof is against the current root).
    ///
    /// One shape has no proof that [`crate::Proof::verify`] accepts: a key whose stem is 31
    /// zero bytes (no account or storage key has it) whose walk ends in an empty subtree below
    /// the root, since the node above it hashes alike as the stem's own node. That is
    /// [`TrieError::Unprovable`], never a proof.
    pub fn prove(&mut self, key: &TreeKey) -> Result<crate::Proof, TrieError<S::Error>> {
        // Every loaded node's hash is cached after this, so every sibling has one.
        self.root();
        let mut siblings = Vec::new();
        let end = self.walk(&key.stem, |h| siblings.push(h.unwrap_or(ZERO_HASH)))?;
        let mut proof = crate::Proof {
            key: *key,
            value: None,
            siblings: Vec::new(),
            stem: None,
            stem_siblings: None,
            subtree_root: None,
            other_stem_leaf: None,
        };
        if let Node::Stem(s) = end {
            proof.stem = Some(s.stem);
            if s.stem == key.stem {
                proof.value = s.values.get(key.sub_index).copied();
                proof.stem_siblings = Some(s.values.leaf_siblings::<H>(key.sub_index));
            } else {
                // A stem holds at least one present value (nothing is ever removed). The subtree
                // root is folded from that leaf and its siblings: 9 hashes, not a second pass
                // over the 256 leaves.
                proof.other_stem_leaf =
                    s.values
                        .iter()
                        .next()
                        .map(|(index, value)| crate::StemLeaf {
                            index,
                            value: *value,
                            siblings: s.values.leaf_siblings::<H>(index),
                        });
                proof.subtree_root = Some(match &proof.other_stem_leaf {
                    Some(leaf) => leaf.subtree_root::<H>(),
                    None => s.values.subtree_root::<H>().0,
                });
            }
        }
        // The zero stem goes left at every level, so an empty subtree where its walk ends is
        // the left child of the node above it: that node poses as the stem's own (`Proof`).
        if matches!(end, Node::Empty) && !siblings.is_empty() && key.stem == [0; 31] {
            return Err(TrieError::Unprovable(*key));
        }
        proof.siblings = siblings;
        Ok(proof)
    }

    /// The root hash: rehashes whatever changed since it was last computed, in parallel.
    pub fn root(&mut self) -> Hash32 {
        let (h, n) = hash_node::<H>(&mut self.root, 0);
        self.counters.hashes.fetch_add(n, Ordering::Relaxed);
        h
    }

    /// Loads the whole tree from the store and recomputes every hash from the stem values up,
    /// checking each against the hash its parent (or [`Trie::open`]) claimed. Returns the
    /// recomputed root; a mismatch is [`TrieError::HashMismatch`] (a malformed blob
    /// [`TrieError::Corrupt`]). This reads every blob: a full integrity check, for tools and
    /// tests, not for the block path (which verifies only the blobs it loads).
    pub fn verify(&mut self) -> Result<Hash32, TrieError<S::Error>> {
        let vacated = Mutex::new(Vec::new());
        let mut root = std::mem::replace(&mut self.root, Node::Empty);
        let result = verify_node::<S, H>(&self.ctx(&vacated), &mut root, Path::ROOT);
        self.root = root;
        let (h, n) = result?;
        self.counters.hashes.fetch_add(n, Ordering::Relaxed);
        Ok(h)
    }

    /// Writes every changed group and stem blob at the trie's group depth, and deletes vacated
    /// paths, through [`NodeStore::apply`]. On error nothing is marked committed, so the same
    /// changes are written again by the next commit.
    pub fn commit(&mut self) -> Result<CommitStats, TrieError<S::Error>> {
        self.commit_with(|store, set| store.apply(set))
    }

    /// Like [`Trie::commit`], but `write` persists the set: a store that writes more than the
    /// trie's nodes in the same transaction (flat state, metadata) uses this.
    pub fn commit_with<F>(&mut self, write: F) -> Result<CommitStats, TrieError<S::Error>>
    where
        F: FnOnce(&mut S, &CommitSet) -> Result<(), S::Error>,
    {
        let set = self.prepare_commit();
        self.commit_prepared(set, write)
    }

    /// Like [`Trie::commit_with`], for a set [`Trie::prepare_commit`] made: a caller that
    /// times the rehash apart from the write prepares first (the rehash and the blobs'
    /// serialization are one walk), then commits. Contract: no change to the trie since the
    /// set was prepared; a set whose root is not the tree's root now is prepared again.
    pub fn commit_prepared<F>(
        &mut self,
        set: CommitSet,
        write: F,
    ) -> Result<CommitStats, TrieError<S::Error>>
    where
        F: FnOnce(&mut S, &CommitSet) -> Result<(), S::Error>,
    {
        let set = if set.root == self.root() && set.group_depth == self.group_depth {
            set
        } else {
            self.prepare_commit()
        };
        // The store changes: what was decoded for the old one goes (the load's hash check
        // would refuse it anyway).
        self.ahead.clear();
        write(&mut self.store, &set).map_err(TrieError::Store)?;
        // Ends the epoch: every node it dirtied is clean now, and each stem it serialized is
        // stored where the set put it. (Wrapping after 2^32 - 1 commits skips CLEAN.)
        self.epoch = match self.epoch.wrapping_add(1) {
            CLEAN => 1,
            e => e,
        };
        self.vacated.clear();
        self.committed = set.root;
        let c = &self.counters;
        c.blobs_written
            .fetch_add(set.len() as u64, Ordering::Relaxed);
        c.bytes_written
            .fetch_add(set.bytes() as u64, Ordering::Relaxed);
        c.paths_removed
            .fetch_add(set.removed().len() as u64, Ordering::Relaxed);
        Ok(CommitStats {
            root: set.root,
            blobs: set.len(),
            bytes: set.bytes(),
            removed: set.removed().len(),
        })
    }

    /// The set of blobs a commit would write now, without marking anything committed. Rehashes
    /// what changed first (as [`Trie::root`] would), in the same walk.
    pub fn prepare_commit(&mut self) -> CommitSet {
        let mut set = CommitSet::new(ZERO_HASH, self.group_depth);
        let (root, hashes) =
            hash_collect_all::<H>(&mut self.root, self.group_depth, self.epoch, &mut set);
        self.counters.hashes.fetch_add(hashes, Ordering::Relaxed);
        set.root = root;
        for p in &self.vacated {
            set.push_removed(p.to_key());
        }
        set.finish();
        set
    }
}

/// Sorts by key (stable) and keeps the last entry of each run of equal keys.
pub fn sort_dedup_last(batch: &mut Vec<(TreeKey, [u8; 32])>) {
    use rayon::slice::ParallelSliceMut;
    batch.par_sort_by(|a, b| a.0.cmp(&b.0));
    // Keep the last of each run: walk backwards.
    let mut out = batch.len();
    for i in (0..batch.len()).rev() {
        if out < batch.len() && batch[out].0 == batch[i].0 {
            continue;
        }
        out -= 1;
        batch.swap(out, i);
    }
    batch.drain(..out);
}
