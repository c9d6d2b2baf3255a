//! The tree engine.

use crate::{CommitSet, NodeStore, TrieError};
use bintrie_keys::{Stem, TreeKey};
use bintrie_node::{
    GroupBlob, GroupEntry, Hash32, MAX_DEPTH, MAX_GROUP_DEPTH, MIN_GROUP_DEPTH, NodeBlob, Path,
    Sha256Hasher, StemValues, TreeHasher, ZERO_HASH,
};
use std::marker::PhantomData;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// Batches at least this large are split across rayon tasks.
const PAR_BATCH: usize = 256;
/// Subtrees above this depth are hashed in parallel.
const PAR_HASH_DEPTH: usize = 8;

/// A node of the in-memory tree.
#[derive(Debug)]
enum Node {
    Empty,
    Internal(Box<Internal>),
    Stem(Box<StemNode>),
    /// Not loaded: its hash is known and its blob is in the store at this node's path. Loading
    /// checks the blob against this hash.
    Hashed(Hash32),
}

#[derive(Debug)]
struct Internal {
    left: Node,
    right: Node,
    /// Cached hash; `None` after a change below. The inner nodes of a loaded group get theirs
    /// when the group is verified on load (a group blob stores only its bottom hashes, SPEC §5).
    hash: Option<Hash32>,
    /// Changed since the last commit.
    dirty: bool,
}

#[derive(Debug)]
struct StemNode {
    stem: Stem,
    values: StemValues,
    hash: Option<Hash32>,
    dirty: bool,
    /// Depth at which the store holds this stem's blob, if it does.
    stored_depth: Option<u8>,
}

impl Node {
    fn new_internal(left: Node, right: Node) -> Node {
        Node::Internal(Box::new(Internal {
            left,
            right,
            hash: None,
            dirty: true,
        }))
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

    fn is_dirty(&self) -> bool {
        match self {
            Node::Internal(n) => n.dirty,
            Node::Stem(s) => s.dirty,
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
            root: if root == ZERO_HASH {
                Node::Empty
            } else {
                Node::Hashed(root)
            },
            store,
            group_depth,
            counters: Counters::default(),
            vacated: Vec::new(),
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

    /// Drops every loaded node and keeps only the root hash, as after [`Trie::open`]. Fails if
    /// there are uncommitted changes (they would be lost).
    pub fn unload(&mut self) -> Result<(), TrieError<S::Error>> {
        if self.root.is_dirty() {
            return Err(TrieError::Uncommitted);
        }
        let root = self.root.cached_hash().ok_or(TrieError::Uncommitted)?;
        self.root = if root == ZERO_HASH {
            Node::Empty
        } else {
            Node::Hashed(root)
        };
        Ok(())
    }

    fn ctx<'a>(&'a self, vacated: &'a Mutex<Vec<Path>>) -> Ctx<'a, S> {
        Ctx {
            store: &self.store,
            group_depth: self.group_depth,
            counters: &self.counters,
            vacated,
        }
    }

    /// The value at `key`, loading (and verifying) nodes on the way as needed. `Ok(None)` when
    /// the key is absent. Errors when the store fails, or when a blob on the way is missing,
    /// malformed, or does not hash to what its parent holds.
    pub fn get(&mut self, key: &TreeKey) -> Result<Option<[u8; 32]>, TrieError<S::Error>> {
        Ok(self
            .get_stem(&key.stem)?
            .and_then(|v| v.get(key.sub_index).copied()))
    }

    /// All present values of `stem` (one walk for all 256 sub-indices); `Ok(None)` when the stem
    /// is absent. Errors as [`Trie::get`] does; never panics on a corrupt store (a path that
    /// would pass depth 248 is [`TrieError::TooDeep`] or [`TrieError::Corrupt`]).
    pub fn get_stem(&mut self, stem: &Stem) -> Result<Option<&StemValues>, TrieError<S::Error>> {
        let vacated = Mutex::new(Vec::new());
        let Trie {
            root,
            store,
            group_depth,
            counters,
            ..
        } = self;
        let ctx = Ctx {
            store: &*store,
            group_depth: *group_depth,
            counters: &*counters,
            vacated: &vacated,
        };
        let mut node = root;
        let mut path = Path::ROOT;
        loop {
            if let Node::Hashed(h) = node {
                let h = *h;
                *node = load::<S, H>(&ctx, &path, h)?;
            }
            match node {
                Node::Empty | Node::Hashed(_) => return Ok(None),
                Node::Stem(s) => {
                    return Ok((s.stem == *stem).then_some(&s.values));
                }
                Node::Internal(n) => {
                    if path.len() >= MAX_DEPTH {
                        return Err(TrieError::TooDeep);
                    }
                    let bit = stem_bit(stem, path.len());
                    path = path.child(bit).ok_or(TrieError::TooDeep)?;
                    node = if bit == 0 { &mut n.left } else { &mut n.right };
                }
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
    /// Atomic: first every node the batch reaches is loaded and verified (in parallel), then the
    /// writes are applied. So a store error, a missing, malformed or too deep blob, or a blob
    /// that does not hash to what its parent holds is returned before anything changes: the
    /// root and the next commit are as if this call had not been made.
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
        let ctx = self.ctx(&vacated);
        let result = preload::<S, H>(&ctx, &mut root, Path::ROOT, batch)
            .and_then(|()| apply::<S, H>(&ctx, &mut root, Path::ROOT, batch));
        self.root = root;
        self.vacated
            .extend(vacated.into_inner().unwrap_or_else(|e| e.into_inner()));
        result.map(|_| ())
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
        write(&mut self.store, &set).map_err(TrieError::Store)?;
        mark_committed(&mut self.root, 0);
        self.vacated.clear();
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

    /// The set of blobs a commit would write now, without marking anything committed.
    pub fn prepare_commit(&mut self) -> CommitSet {
        let root = self.root();
        let mut set = CommitSet::new(root, self.group_depth);
        collect_all(&self.root, self.group_depth, &mut set);
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

/// Loads the node at `path` whose hash is `hash` (held by its parent, or the trie's root), and
/// checks the blob against it: a stem blob by its stem hash, a group blob by hashing its entries
/// up through its inner nodes exactly as [`hash_node`] hashes the expanded subtree. The inner
/// nodes keep those hashes (nothing to recompute until something below them changes). Hash calls
/// are counted in `ctx.counters.hashes`.
fn load<S: NodeStore, H: TreeHasher>(
    ctx: &Ctx<'_, S>,
    path: &Path,
    hash: Hash32,
) -> Result<Node, TrieError<S::Error>> {
    let key = path.to_key();
    let blob = ctx
        .store
        .get_node(&key)
        .map_err(TrieError::Store)?
        .ok_or(TrieError::MissingNode { path: *path })?;
    ctx.counters.nodes_loaded.fetch_add(1, Ordering::Relaxed);
    ctx.counters
        .bytes_loaded
        .fetch_add(blob.len() as u64, Ordering::Relaxed);
    let corrupt = |reason: String| TrieError::Corrupt {
        path: *path,
        reason,
    };
    let check = |computed: Hash32, calls: u64| {
        ctx.counters.hashes.fetch_add(calls, Ordering::Relaxed);
        if computed == hash {
            Ok(())
        } else {
            Err(TrieError::HashMismatch {
                path: *path,
                claimed: hash,
                computed,
            })
        }
    };
    match NodeBlob::decode(&blob).map_err(|e| corrupt(e.to_string()))? {
        NodeBlob::Stem(stem, values) => {
            if !path.is_prefix_of(&stem) {
                return Err(corrupt("stem does not lie under its path".into()));
            }
            let (h, calls) = values.stem_hash::<H>(&stem);
            check(h, calls as u64)?;
            Ok(Node::Stem(Box::new(StemNode {
                stem,
                values,
                hash: Some(h),
                dirty: false,
                stored_depth: Some(path.len() as u8),
            })))
        }
        NodeBlob::Group(group) => {
            let g = group.group_depth;
            if g != ctx.group_depth {
                return Err(TrieError::GroupDepthMismatch {
                    stored: g,
                    expected: ctx.group_depth,
                });
            }
            if !path.len().is_multiple_of(g as usize) {
                return Err(corrupt(format!(
                    "group blob at depth {}, not a multiple of {g}",
                    path.len()
                )));
            }
            let (node, h, calls) =
                expand_group::<H>(&group.entries, g, 0, 0, path.len()).map_err(corrupt)?;
            if !matches!(node, Node::Internal(_)) {
                return Err(corrupt("group blob does not hold an internal node".into()));
            }
            check(h, calls)?;
            Ok(node)
        }
    }
}

/// Builds the binary subtree of a group at relative depth `rel`, relative path `prefix`, for a
/// group rooted at absolute depth `base`, and hashes it: an internal node is `H(left ‖ right)`,
/// an empty side zero, an entry its stored hash. Returns the node, its hash and the hash calls.
/// Errors (instead of building) when an internal node would sit at depth 248 or deeper, or an
/// entry below depth 248: no valid tree has either.
fn expand_group<H: TreeHasher>(
    entries: &[GroupEntry],
    g: u8,
    rel: u8,
    prefix: u16,
    base: usize,
) -> Result<(Node, Hash32, u64), String> {
    if entries.is_empty() {
        return Ok((Node::Empty, ZERO_HASH, 0));
    }
    let depth = base + rel as usize;
    let span = 1u16 << (g - rel);
    let start = prefix << (g - rel);
    if entries.len() == 1 && entries[0].depth == rel && entries[0].index == start {
        if depth > MAX_DEPTH {
            return Err(format!(
                "group entry at depth {depth}, past the deepest stem"
            ));
        }
        let h = entries[0].hash;
        return Ok((Node::Hashed(h), h, 0));
    }
    if rel == g {
        // Decoded groups never have two entries at one bottom position.
        return Err("two group entries at one position".into());
    }
    if depth >= MAX_DEPTH {
        return Err(format!(
            "group expands to an internal node at depth {depth}"
        ));
    }
    let mid = start + span / 2;
    let split = entries.partition_point(|e| e.index < mid);
    let (left, lh, ln) = expand_group::<H>(&entries[..split], g, rel + 1, prefix << 1, base)?;
    let (right, rh, rn) =
        expand_group::<H>(&entries[split..], g, rel + 1, (prefix << 1) | 1, base)?;
    let h = H::hash_pair(&lh, &rh);
    Ok((
        Node::Internal(Box::new(Internal {
            left,
            right,
            hash: Some(h),
            dirty: false,
        })),
        h,
        ln + rn + 1,
    ))
}

/// Loads and verifies every unloaded node that [`apply`] would reach with this sorted,
/// non-empty batch, without changing anything else: the fallible half of an update, so that
/// [`apply`] finds everything loaded and an error leaves the tree as it was.
fn preload<S: NodeStore, H: TreeHasher>(
    ctx: &Ctx<'_, S>,
    node: &mut Node,
    path: Path,
    batch: &[(TreeKey, [u8; 32])],
) -> Result<(), TrieError<S::Error>> {
    if let Node::Hashed(h) = node {
        let h = *h;
        *node = load::<S, H>(ctx, &path, h)?;
    }
    // An empty node or a stem: `apply` builds new nodes below and loads nothing.
    let Node::Internal(n) = node else {
        return Ok(());
    };
    let depth = path.len();
    if depth >= MAX_DEPTH {
        return Err(TrieError::TooDeep);
    }
    let split = batch.partition_point(|(k, _)| stem_bit(&k.stem, depth) == 0);
    let (lb, rb) = batch.split_at(split);
    let lp = path.child(0).ok_or(TrieError::TooDeep)?;
    let rp = path.child(1).ok_or(TrieError::TooDeep)?;
    let Internal { left, right, .. } = &mut **n;
    let (lr, rr) = if batch.len() >= PAR_BATCH && !lb.is_empty() && !rb.is_empty() {
        rayon::join(
            || preload::<S, H>(ctx, left, lp, lb),
            || preload::<S, H>(ctx, right, rp, rb),
        )
    } else {
        let lr = if lb.is_empty() {
            Ok(())
        } else {
            preload::<S, H>(ctx, left, lp, lb)
        };
        let rr = if rb.is_empty() {
            Ok(())
        } else {
            preload::<S, H>(ctx, right, rp, rb)
        };
        (lr, rr)
    };
    lr.and(rr)
}

/// Applies a sorted, deduplicated, non-empty batch under `node` at `path`. Returns whether
/// anything changed. After [`preload`] succeeded for the same batch it loads nothing and cannot
/// fail; it still loads (and checks depth) itself, so it is safe on its own.
fn apply<S: NodeStore, H: TreeHasher>(
    ctx: &Ctx<'_, S>,
    node: &mut Node,
    path: Path,
    batch: &[(TreeKey, [u8; 32])],
) -> Result<bool, TrieError<S::Error>> {
    let depth = path.len();
    if let Node::Hashed(h) = node {
        let h = *h;
        *node = load::<S, H>(ctx, &path, h)?;
    }
    let first = &batch[0].0.stem;
    let single_stem = batch[batch.len() - 1].0.stem == *first;
    match node {
        Node::Hashed(_) => unreachable!("replaced above"),
        Node::Empty => {
            if single_stem {
                let mut values = StemValues::new();
                for (k, v) in batch {
                    values.set(k.sub_index, *v);
                }
                *node = Node::Stem(Box::new(StemNode {
                    stem: *first,
                    values,
                    hash: None,
                    dirty: true,
                    stored_depth: None,
                }));
                return Ok(true);
            }
            *node = Node::new_internal(Node::Empty, Node::Empty);
        }
        Node::Stem(s) => {
            if single_stem && s.stem == *first {
                let mut changed = false;
                for (k, v) in batch {
                    changed |= s.values.set(k.sub_index, *v);
                }
                if changed {
                    s.hash = None;
                    s.dirty = true;
                }
                return Ok(changed);
            }
            // Another stem arrives: push this one down one level; the internal-node case below
            // keeps splitting until the stems part. (Two stems never share all 248 bits.)
            if depth >= MAX_DEPTH {
                return Err(TrieError::TooDeep);
            }
            let Node::Stem(mut s) = std::mem::replace(node, Node::Empty) else {
                unreachable!()
            };
            if s.stored_depth == Some(depth as u8) {
                ctx.vacated
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(path);
            }
            s.dirty = true;
            let bit = stem_bit(&s.stem, depth);
            let moved = Node::Stem(s);
            *node = if bit == 0 {
                Node::new_internal(moved, Node::Empty)
            } else {
                Node::new_internal(Node::Empty, moved)
            };
        }
        Node::Internal(_) => {}
    }
    let Node::Internal(n) = node else {
        unreachable!("every other case returned or became internal")
    };
    if depth >= MAX_DEPTH {
        return Err(TrieError::TooDeep);
    }
    let split = batch.partition_point(|(k, _)| stem_bit(&k.stem, depth) == 0);
    let (lb, rb) = batch.split_at(split);
    let lp = path.child(0).ok_or(TrieError::TooDeep)?;
    let rp = path.child(1).ok_or(TrieError::TooDeep)?;
    let Internal { left, right, .. } = &mut **n;
    let (lc, rc) = if batch.len() >= PAR_BATCH && !lb.is_empty() && !rb.is_empty() {
        rayon::join(
            || apply::<S, H>(ctx, left, lp, lb),
            || apply::<S, H>(ctx, right, rp, rb),
        )
    } else {
        let lc = if lb.is_empty() {
            Ok(false)
        } else {
            apply::<S, H>(ctx, left, lp, lb)
        };
        let rc = if rb.is_empty() {
            Ok(false)
        } else {
            apply::<S, H>(ctx, right, rp, rb)
        };
        (lc, rc)
    };
    let changed = lc? | rc?;
    if changed {
        n.hash = None;
        n.dirty = true;
    }
    Ok(changed)
}

/// Loads everything under `node` and recomputes its hash, comparing with any claimed hash.
/// A stem loaded here was already checked by [`load`], so its hash is not computed twice.
fn verify_node<S: NodeStore, H: TreeHasher>(
    ctx: &Ctx<'_, S>,
    node: &mut Node,
    path: Path,
) -> Result<(Hash32, u64), TrieError<S::Error>> {
    if let Node::Hashed(h) = node {
        let h = *h;
        *node = load::<S, H>(ctx, &path, h)?;
        if let Node::Stem(s) = node {
            return Ok((s.hash.unwrap_or(h), 0));
        }
    }
    let (claimed, computed, count) = match node {
        Node::Empty => return Ok((ZERO_HASH, 0)),
        Node::Hashed(_) => unreachable!("loaded above"),
        Node::Stem(s) => {
            let (h, n) = s.values.stem_hash::<H>(&s.stem);
            (s.hash.replace(h), h, n as u64)
        }
        Node::Internal(n) => {
            let (lp, rp) = match (path.child(0), path.child(1)) {
                (Some(l), Some(r)) => (l, r),
                _ => return Err(TrieError::TooDeep),
            };
            let Internal { left, right, .. } = &mut **n;
            let (l, r) = if path.len() < PAR_HASH_DEPTH {
                rayon::join(
                    || verify_node::<S, H>(ctx, left, lp),
                    || verify_node::<S, H>(ctx, right, rp),
                )
            } else {
                (
                    verify_node::<S, H>(ctx, left, lp),
                    verify_node::<S, H>(ctx, right, rp),
                )
            };
            let ((lh, ln), (rh, rn)) = (l?, r?);
            let h = H::hash_pair(&lh, &rh);
            (n.hash.replace(h), h, ln + rn + 1)
        }
    };
    match claimed {
        Some(claimed) if claimed != computed => Err(TrieError::HashMismatch {
            path,
            claimed,
            computed,
        }),
        _ => Ok((computed, count)),
    }
}

/// Computes (and caches) the hash of `node`; returns it and the number of hash calls.
fn hash_node<H: TreeHasher>(node: &mut Node, depth: usize) -> (Hash32, u64) {
    match node {
        Node::Empty => (ZERO_HASH, 0),
        Node::Hashed(h) => (*h, 0),
        Node::Stem(s) => {
            if let Some(h) = s.hash {
                return (h, 0);
            }
            let (h, n) = s.values.stem_hash::<H>(&s.stem);
            s.hash = Some(h);
            (h, n as u64)
        }
        Node::Internal(n) => {
            if let Some(h) = n.hash {
                return (h, 0);
            }
            let Internal { left, right, .. } = &mut **n;
            let ((lh, ln), (rh, rn)) = if depth < PAR_HASH_DEPTH {
                rayon::join(
                    || hash_node::<H>(left, depth + 1),
                    || hash_node::<H>(right, depth + 1),
                )
            } else {
                (
                    hash_node::<H>(left, depth + 1),
                    hash_node::<H>(right, depth + 1),
                )
            };
            let h = H::hash_pair(&lh, &rh);
            n.hash = Some(h);
            (h, ln + rn + 1)
        }
    }
}

/// Serializes the dirty nodes of the tree into `set`. Requires hashes to be computed.
///
/// The nodes above depth [`PAR_HASH_DEPTH`] are written here; the dirty subtrees below are
/// serialized in parallel into their own sets and appended once (one copy of the bytes).
fn collect_all(root: &Node, g: u8, set: &mut CommitSet) {
    use rayon::prelude::*;
    let mut frontier = Vec::new();
    collect(root, Path::ROOT, g, set, Some(&mut frontier));
    let parts: Vec<CommitSet> = frontier
        .par_iter()
        .map(|(node, path)| {
            let mut part = CommitSet::default();
            collect(node, *path, g, &mut part, None);
            part
        })
        .collect();
    set.append_all(parts);
}

/// Serializes the dirty nodes under `node`. With a `frontier`, stops at depth
/// [`PAR_HASH_DEPTH`] and hands the dirty nodes there to the caller instead.
fn collect<'a>(
    node: &'a Node,
    path: Path,
    g: u8,
    set: &mut CommitSet,
    mut frontier: Option<&mut Vec<(&'a Node, Path)>>,
) {
    if !node.is_dirty() {
        return;
    }
    if let Some(f) = frontier.as_deref_mut()
        && path.len() >= PAR_HASH_DEPTH
    {
        f.push((node, path));
        return;
    }
    match node {
        Node::Stem(s) => {
            set.push_with(path.to_key(), |buf| s.values.encode_blob(&s.stem, buf));
        }
        Node::Internal(n) => {
            if path.len().is_multiple_of(g as usize) {
                let mut entries = Vec::new();
                group_entries(node, g, 0, 0, &mut entries);
                set.push_with(path.to_key(), |buf| GroupBlob::encode(g, &entries, buf));
            }
            if let (Some(lp), Some(rp)) = (path.child(0), path.child(1)) {
                collect(&n.left, lp, g, set, frontier.as_deref_mut());
                collect(&n.right, rp, g, set, frontier);
            }
        }
        _ => {}
    }
}

/// The present entries of the group rooted at `node` (relative depth `rel`, relative path
/// `prefix`).
fn group_entries(node: &Node, g: u8, rel: u8, prefix: u16, out: &mut Vec<GroupEntry>) {
    let entry = |depth: u8| GroupEntry {
        index: prefix << (g - depth),
        depth,
        hash: node
            .cached_hash()
            .expect("commit hashes the tree before collecting"),
    };
    match node {
        Node::Empty => {}
        _ if rel == g => out.push(entry(g)),
        // A stem, or an unloaded node above the bottom layer (only stems sit there).
        Node::Stem(_) | Node::Hashed(_) => out.push(entry(rel)),
        Node::Internal(n) => {
            group_entries(&n.left, g, rel + 1, prefix << 1, out);
            group_entries(&n.right, g, rel + 1, (prefix << 1) | 1, out);
        }
    }
}

/// Clears the dirty flags written by a commit and records where stems now live.
fn mark_committed(node: &mut Node, depth: usize) {
    match node {
        Node::Stem(s) if s.dirty => {
            s.dirty = false;
            s.stored_depth = Some(depth as u8);
        }
        Node::Internal(n) if n.dirty => {
            n.dirty = false;
            mark_committed(&mut n.left, depth + 1);
            mark_committed(&mut n.right, depth + 1);
        }
        _ => {}
    }
}
