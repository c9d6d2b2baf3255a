//! Commit collection: the dirty nodes serialized as group and stem blobs.

use super::*;

/// Serializes the dirty nodes of the tree into `set`. Requires hashes to be computed.
///
/// The nodes above depth [`PAR_DEPTH`] are written here; the dirty subtrees below are
/// serialized in parallel into their own sets and appended once (one copy of the bytes).
pub(super) fn collect_all(root: &Node, g: u8, set: &mut CommitSet) {
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
/// [`PAR_DEPTH`] and hands the dirty nodes there to the caller instead.
pub(super) fn collect<'a>(
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
        && path.len() >= PAR_DEPTH
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
                deeper(|| collect(&n.left, lp, g, set, frontier.as_deref_mut()));
                deeper(|| collect(&n.right, rp, g, set, frontier));
            }
        }
        _ => {}
    }
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

/// Clears the dirty flags written by a commit and records where stems now live. The two
/// halves of each node above [`PAR_DEPTH`] are marked in parallel, as they are hashed:
/// the walk is pointer chasing through thousands of nodes per block.
pub(super) fn mark_committed(node: &mut Node, depth: usize) {
    match node {
        Node::Stem(s) if s.dirty => {
            s.dirty = false;
            s.stored_depth = Some(depth as u8);
        }
        Node::Internal(n) if n.dirty => {
            n.dirty = false;
            let Internal { left, right, .. } = &mut **n;
            join_halves(
                depth < PAR_DEPTH,
                || mark_committed(left, depth + 1),
                || mark_committed(right, depth + 1),
            );
        }
        _ => {}
    }
}
