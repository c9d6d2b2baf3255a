//! Commit collection: the dirty nodes serialized as group and stem blobs.

use super::*;

/// Rehashes what changed and serializes every node dirty in `epoch` into `set` in the same
/// walk; returns the root hash and the number of hash calls. Each stem serialized notes where
/// (in effect once the epoch's commit succeeds: nothing else needs marking then).
///
/// One walk instead of two: a group's blob lists the hashes at its bottom, so it is written
/// right after the group's hash, while the nodes it lists are still in the cache. A separate
/// walk after the hash went back through every changed group's nodes (thousands per block,
/// most of them cache misses): it was most of the commit's collection time. Clean nodes are
/// hashed as [`hash_node`] does (their cached hash). The halves of each node above
/// [`PAR_DEPTH`] run on two rayon tasks, each into its own parts, joined once at the end (one
/// copy of the bytes). The order of the blobs in `set` is unspecified.
pub(super) fn hash_collect_all<H: TreeHasher>(
    root: &mut Node,
    g: u8,
    epoch: u32,
    set: &mut CommitSet,
) -> (Hash32, u64) {
    let mut parts = Parts::default();
    let out = hash_collect::<H>(root, Path::ROOT, g, epoch, &mut parts);
    let Parts { cur, mut done } = parts;
    done.push(cur);
    set.append_all(done);
    out
}

/// The sets a parallel walk writes: the one being written, and those its other halves
/// finished.
#[derive(Default)]
struct Parts {
    cur: CommitSet,
    done: Vec<CommitSet>,
}

impl Parts {
    /// Takes the sets another half wrote (moved, not copied).
    fn absorb(&mut self, other: Parts) {
        if !other.cur.is_empty() {
            self.done.push(other.cur);
        }
        self.done.extend(other.done);
    }
}

/// [`hash_collect_all`] under `node`, at `path`: post-order, so the blobs below a group are
/// written before it.
fn hash_collect<H: TreeHasher>(
    node: &mut Node,
    path: Path,
    g: u8,
    epoch: u32,
    out: &mut Parts,
) -> (Hash32, u64) {
    if !node.is_dirty(epoch) {
        return hash_node::<H>(node, path.len());
    }
    let (hash, count) = match node {
        Node::Stem(s) => {
            let (h, n) = s.hash_cached::<H>();
            out.cur
                .push_with(path.to_key(), |buf| s.values.encode_blob(&s.stem, buf));
            // A stem sits at most at depth 248.
            s.note_written(epoch, path.len() as u8);
            return (h, n);
        }
        Node::Internal(n) => {
            let Internal { left, right, .. } = &mut **n;
            let ((lh, ln), (rh, rn)) = match (path.child(0), path.child(1)) {
                (Some(lp), Some(rp)) if path.len() < PAR_DEPTH => {
                    let mut other = Parts::default();
                    let halves = rayon::join(
                        || deeper(|| hash_collect::<H>(left, lp, g, epoch, out)),
                        || deeper(|| hash_collect::<H>(right, rp, g, epoch, &mut other)),
                    );
                    out.absorb(other);
                    halves
                }
                (Some(lp), Some(rp)) => {
                    // Both children are looked at before either is walked: the walk waits on
                    // memory, and so the two reads overlap instead of following each other.
                    let dirty = (left.is_dirty(epoch), right.is_dirty(epoch));
                    let mut half = |child: &mut Node, cp: Path, dirty: bool| {
                        if dirty {
                            deeper(|| hash_collect::<H>(child, cp, g, epoch, out))
                        } else {
                            hash_node::<H>(child, cp.len())
                        }
                    };
                    (half(left, lp, dirty.0), half(right, rp, dirty.1))
                }
                // No deeper path (depth 248, where no internal node can be): hashed, and
                // nothing below written, as before this walk.
                _ => (
                    hash_node::<H>(left, path.len() + 1),
                    hash_node::<H>(right, path.len() + 1),
                ),
            };
            let (h, own) = n.hash_from::<H>(&lh, &rh);
            (h, ln + rn + own)
        }
        // Never dirty.
        Node::Empty | Node::Hashed(_) => return hash_node::<H>(node, path.len()),
    };
    if path.len().is_multiple_of(g as usize) {
        let mut entries = Vec::new();
        group_entries(node, g, 0, 0, &mut entries);
        out.cur
            .push_with(path.to_key(), |buf| GroupBlob::encode(g, &entries, buf));
    }
    (hash, count)
}

/// The present entries of the group rooted at `node` (relative depth `rel`, relative path
/// `prefix`).
pub(super) fn group_entries(node: &Node, g: u8, rel: u8, prefix: u16, out: &mut Vec<GroupEntry>) {
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
