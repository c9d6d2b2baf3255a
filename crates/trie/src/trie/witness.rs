//! Witnesses out of the engine: the tree pruned to a key set (the multiproof), the stored blobs
//! a set of walks reads (the grouped-blob witness), and a partial tree rebuilt from such blobs.

use super::*;
use crate::witness::{Leaf, PInternal, PNode, PStem, PartialTree, WitnessBlobs, WitnessError};
use bintrie_node::PathKey;

impl<S: NodeStore, H: TreeHasher> Trie<S, H> {
    /// Loads (and verifies) every node on the walks of the sorted, distinct `keys` (as an
    /// update of them would) and hashes the tree, so every node has its hash cached.
    fn load_walks(&mut self, keys: &[TreeKey]) -> Result<(), TrieError<S::Error>> {
        if !keys.is_empty() {
            let batch: Vec<(TreeKey, [u8; 32])> = keys.iter().map(|k| (*k, [0; 32])).collect();
            let vacated = Mutex::new(Vec::new());
            let mut root = std::mem::replace(&mut self.root, Node::Empty);
            let ctx = self.ctx(&vacated);
            let loaded = preload::<S, H>(&ctx, &mut root, Path::ROOT, &batch)
                .and_then(|()| load_stem_halves::<S, H>(&ctx, &mut root, keys, Path::ROOT));
            self.root = root;
            loaded?;
        }
        self.root();
        Ok(())
    }

    /// The multi-key proof of `keys` against [`Trie::root`] (uncommitted changes included): the
    /// tree pruned to the keys' walks, each sibling subtree replaced by its hash, shared
    /// siblings once. Inside a stem only the keys' leaves are kept, the other leaf subtrees by
    /// hash. It answers for every key of the set (its value, or its absence), and takes writes
    /// to them: see [`PartialTree`]. Loads what the walks need; errors as [`Trie::get`] does.
    pub fn witness(&mut self, keys: &[TreeKey]) -> Result<PartialTree<H>, TrieError<S::Error>> {
        let mut keys = keys.to_vec();
        keys.sort_unstable();
        keys.dedup();
        self.load_walks(&keys)?;
        Ok(PartialTree::from_node(prune::<H>(&self.root, &keys, 0)))
    }

    /// The stored blobs the walks to `stems` read, as the store holds them (path key, blob):
    /// every group blob they cross and the stem blob where each ends (the key's own stem or
    /// another one on its path): geth's witness, which depends on the group depth, plus the
    /// blob of any left child a walk turns right past that could be a stem's first half there
    /// (about 2^-(8 + depth) of nodes; see [`PartialTree`]'s writes), which geth's lacks. Walks that
    /// end in an empty subtree add nothing below their last group. In path-key order. The tree
    /// must be committed ([`TrieError::Uncommitted`] otherwise): the blobs are the store's.
    pub fn witness_blobs(&mut self, stems: &[Stem]) -> Result<WitnessBlobs, TrieError<S::Error>> {
        if self.root.is_dirty(self.epoch) {
            return Err(TrieError::Uncommitted);
        }
        let mut keys: Vec<TreeKey> = stems
            .iter()
            .map(|s| TreeKey {
                stem: *s,
                sub_index: 0,
            })
            .collect();
        keys.sort_unstable();
        keys.dedup();
        self.load_walks(&keys)?;
        let mut paths = Vec::new();
        stored_paths(&self.root, &keys, Path::ROOT, self.group_depth, &mut paths)?;
        let mut out = Vec::with_capacity(paths.len());
        for path in paths {
            let key = path.to_key();
            let blob = self
                .store
                .get_node(&key)
                .map_err(TrieError::Store)?
                .ok_or(TrieError::MissingNode { path })?;
            out.push((key, blob));
        }
        out.sort_unstable_by_key(|(key, _)| *key);
        Ok(out)
    }
}

/// Whether the walks of `keys` (sorted, all through `n` at `depth`; the first `split` turn
/// left) turn right at `n` and none left, past a left child that could be the first half of a stem node there
/// ([`crate::proof::could_be_stem_half`]): a witness must open that child one level.
fn stem_half_left(n: &Internal, keys: &[TreeKey], split: usize, depth: usize) -> bool {
    split == 0
        && !keys.is_empty()
        && n.left
            .cached_hash()
            .is_some_and(|h| crate::proof::could_be_stem_half(&h, &keys[0].stem, depth))
}

/// Loads (verified) every left child the walks of `keys` (sorted) pass that a witness must
/// open ([`stem_half_left`]) and that is not loaded yet.
fn load_stem_halves<S: NodeStore, H: TreeHasher>(
    ctx: &Ctx<'_, S>,
    node: &mut Node,
    keys: &[TreeKey],
    path: Path,
) -> Result<(), TrieError<S::Error>> {
    let Node::Internal(n) = node else {
        return Ok(());
    };
    if keys.is_empty() {
        return Ok(());
    }
    let depth = path.len();
    let lp = path.child(0).ok_or(TrieError::TooDeep)?;
    let rp = path.child(1).ok_or(TrieError::TooDeep)?;
    let split = keys.partition_point(|k| stem_bit(&k.stem, depth) == 0);
    if stem_half_left(n, keys, split, depth)
        && let Node::Hashed(h) = n.left
    {
        n.left = load::<S, H>(ctx, &lp, h)?;
    }
    let (lk, rk) = keys.split_at(split);
    deeper(|| load_stem_halves::<S, H>(ctx, &mut n.left, lk, lp))?;
    deeper(|| load_stem_halves::<S, H>(ctx, &mut n.right, rk, rp))
}

/// `node`, loaded, opened one level: an internal node with its children's hashes, or a stem
/// with its first present leaf (as a stem of a witness must open one).
fn open_one<H: TreeHasher>(node: &Node, depth: usize) -> PNode {
    match node {
        Node::Internal(m) => PNode::Internal(Box::new(PInternal {
            left: PNode::opaque(m.left.cached_hash().unwrap_or(ZERO_HASH)),
            right: PNode::opaque(m.right.cached_hash().unwrap_or(ZERO_HASH)),
            hash: m.hash,
        })),
        Node::Stem(s) => match s.values.iter().next() {
            Some((index, _)) => prune::<H>(
                node,
                &[TreeKey {
                    stem: s.stem,
                    sub_index: index,
                }],
                depth,
            ),
            None => PNode::opaque(s.hash.unwrap_or(ZERO_HASH)),
        },
        Node::Empty => PNode::Empty,
        Node::Hashed(h) => PNode::opaque(*h),
    }
}

/// The paths of the stored blobs the walks of `keys` (sorted) cross below `node` at `path`,
/// and of the left children they must open ([`stem_half_left`]) where those are blobs of their
/// own (a group at a group boundary, or a stem; one inside a group is opened by the group).
fn stored_paths<E: std::error::Error>(
    node: &Node,
    keys: &[TreeKey],
    path: Path,
    g: u8,
    out: &mut Vec<Path>,
) -> Result<(), TrieError<E>> {
    match node {
        Node::Internal(n) => {
            if path.len().is_multiple_of(g as usize) {
                out.push(path);
            }
            let depth = path.len();
            let split = keys.partition_point(|k| stem_bit(&k.stem, depth) == 0);
            if stem_half_left(n, keys, split, depth) {
                let lp = path.child(0).ok_or(TrieError::TooDeep)?;
                match &n.left {
                    Node::Stem(_) => out.push(lp),
                    Node::Internal(_) if lp.len().is_multiple_of(g as usize) => out.push(lp),
                    _ => {}
                }
            }
            let (lk, rk) = keys.split_at(split);
            if !lk.is_empty() {
                let lp = path.child(0).ok_or(TrieError::TooDeep)?;
                deeper(|| stored_paths(&n.left, lk, lp, g, out))?;
            }
            if !rk.is_empty() {
                let rp = path.child(1).ok_or(TrieError::TooDeep)?;
                deeper(|| stored_paths(&n.right, rk, rp, g, out))?;
            }
        }
        Node::Stem(_) => out.push(path),
        Node::Empty | Node::Hashed(_) => {}
    }
    Ok(())
}

/// `node` pruned to the walks of `keys` (sorted, distinct), at `depth`. Expects every node on
/// the walks loaded and every node hashed.
fn prune<H: TreeHasher>(node: &Node, keys: &[TreeKey], depth: usize) -> PNode {
    if keys.is_empty() {
        return PNode::opaque(node.cached_hash().unwrap_or(ZERO_HASH));
    }
    match node {
        Node::Empty => PNode::Empty,
        Node::Hashed(h) => PNode::opaque(*h),
        Node::Internal(n) => {
            let split = keys.partition_point(|k| stem_bit(&k.stem, depth) == 0);
            let left = if stem_half_left(n, keys, split, depth) {
                open_one::<H>(&n.left, depth + 1)
            } else {
                deeper(|| prune::<H>(&n.left, &keys[..split], depth + 1))
            };
            PNode::Internal(Box::new(PInternal {
                left,
                right: deeper(|| prune::<H>(&n.right, &keys[split..], depth + 1)),
                hash: n.hash,
            }))
        }
        Node::Stem(s) => {
            let mut subs: Vec<u8> = keys
                .iter()
                .filter(|k| k.stem == s.stem)
                .map(|k| k.sub_index)
                .collect();
            // Every stem opens one present leaf (see `PartialTree::verify`): the first, when
            // none of the keys' leaves is present.
            if !subs.iter().any(|&i| s.values.get(i).is_some())
                && let Some((first, _)) = s.values.iter().next()
            {
                let at = subs.partition_point(|&i| i < first);
                subs.insert(at, first);
            }
            let leaves = Leaf::pruned::<H>(&s.values, &subs);
            PNode::Stem(Box::new(PStem {
                stem: s.stem,
                leaves,
                hash: s.hash,
            }))
        }
    }
}

/// Loads every node below `node` whose path is in `present` (the keys the store holds),
/// verifying each against its parent's hash, and takes its key out of `present` (what is left
/// afterwards is what nothing reached); the others stay unloaded.
fn load_present<S: NodeStore, H: TreeHasher>(
    ctx: &Ctx<'_, S>,
    present: &mut std::collections::HashSet<PathKey>,
    node: &mut Node,
    path: Path,
) -> Result<(), TrieError<S::Error>> {
    if let Node::Hashed(h) = node {
        let h = *h;
        if !present.remove(&path.to_key()) {
            return Ok(());
        }
        *node = load::<S, H>(ctx, &path, h)?;
    }
    if let Node::Internal(n) = node {
        let lp = path.child(0).ok_or(TrieError::TooDeep)?;
        let rp = path.child(1).ok_or(TrieError::TooDeep)?;
        deeper(|| load_present::<S, H>(ctx, present, &mut n.left, lp))?;
        deeper(|| load_present::<S, H>(ctx, present, &mut n.right, rp))?;
    }
    Ok(())
}

/// A blob's path for a message: as the trie prints paths, or its key's bytes if they are not
/// a path.
fn shown(key: &PathKey) -> String {
    Path::from_key(key.as_bytes()).map_or_else(|_| crate::hex(key.as_bytes()), |p| p.to_string())
}

/// The loaded part of a tree as a partial tree: unloaded nodes become hash-only subtrees,
/// loaded stems keep all their leaves.
fn to_partial(node: &Node) -> PNode {
    match node {
        Node::Empty => PNode::Empty,
        Node::Hashed(h) => PNode::opaque(*h),
        Node::Internal(n) => PNode::Internal(Box::new(PInternal {
            left: deeper(|| to_partial(&n.left)),
            right: deeper(|| to_partial(&n.right)),
            hash: n.hash,
        })),
        Node::Stem(s) => PNode::Stem(Box::new(PStem {
            stem: s.stem,
            leaves: Leaf::full(&s.values),
            hash: s.hash,
        })),
    }
}

impl<H: TreeHasher> PartialTree<H> {
    /// The partial tree that stored blobs (from [`Trie::witness_blobs`], at group depth
    /// `group_depth`) describe under `root`: every blob reachable from the root through the
    /// others is decoded and checked against the hash its parent holds (the root blob against
    /// `root`), exactly as a trie load checks it; subtrees whose blob is absent are hash-only.
    /// A blob that does not hash to what its parent holds, or is malformed, is refused
    /// ([`WitnessError::Malformed`] naming the path), and so are blobs that do not fit
    /// together: two at one path, or one that nothing reaches from the root through the others
    /// (what a damaged path key makes of a good blob; an honest witness holds only the blobs
    /// its walks crossed). The result needs no [`PartialTree::verify`]: it hashes to `root` by
    /// construction.
    pub fn from_blobs(
        root: Hash32,
        group_depth: u8,
        blobs: impl IntoIterator<Item = (PathKey, Vec<u8>)>,
    ) -> Result<Self, WitnessError> {
        let mut store = crate::MemoryStore::new();
        let mut present = std::collections::HashSet::new();
        for (key, blob) in blobs {
            if !present.insert(key) {
                return Err(WitnessError::Malformed(format!(
                    "two blobs at path {}",
                    shown(&key)
                )));
            }
            store.insert_raw(key, blob);
        }
        let bad = |e: TrieError<std::convert::Infallible>| WitnessError::Malformed(e.to_string());
        let mut trie: Trie<crate::MemoryStore, H> =
            Trie::open(store, group_depth, root).map_err(bad)?;
        let vacated = Mutex::new(Vec::new());
        let mut node = std::mem::replace(&mut trie.root, Node::Empty);
        load_present::<_, H>(&trie.ctx(&vacated), &mut present, &mut node, Path::ROOT)
            .map_err(bad)?;
        if let Some(key) = present.iter().min() {
            return Err(WitnessError::Malformed(format!(
                "{} blob(s) that nothing reaches from the root, the first at path {}",
                present.len(),
                shown(key)
            )));
        }
        Ok(PartialTree::from_node(to_partial(&node)))
    }
}
