//! Hashing: the cached, parallel rehash of changed nodes, and `verify`'s full recomputation.

use super::*;

/// Loads everything under `node` and recomputes its hash, comparing with any claimed hash.
/// A stem loaded here was already checked by [`load`], so its hash is not computed twice.
pub(super) fn verify_node<S: NodeStore, H: TreeHasher>(
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
            let (l, r) = join_halves(
                path.len() < PAR_DEPTH,
                || verify_node::<S, H>(ctx, left, lp),
                || verify_node::<S, H>(ctx, right, rp),
            );
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
pub(super) fn hash_node<H: TreeHasher>(node: &mut Node, depth: usize) -> (Hash32, u64) {
    match node {
        Node::Empty => (ZERO_HASH, 0),
        Node::Hashed(h) => (*h, 0),
        Node::Stem(s) => s.hash_cached::<H>(),
        Node::Internal(n) => {
            if let Some(h) = n.hash {
                return (h, 0);
            }
            let Internal { left, right, .. } = &mut **n;
            let ((lh, ln), (rh, rn)) = join_halves(
                depth < PAR_DEPTH,
                || hash_node::<H>(left, depth + 1),
                || hash_node::<H>(right, depth + 1),
            );
            let (h, own) = n.hash_from::<H>(&lh, &rh);
            (h, ln + rn + own)
        }
    }
}

impl Slot<StemNode> {
    /// Its hash, computed and cached when missing, and the hash calls that took.
    pub(super) fn hash_cached<H: TreeHasher>(&mut self) -> (Hash32, u64) {
        if let Some(h) = self.hash {
            return (h, 0);
        }
        let (h, n) = self.values.stem_hash::<H>(&self.stem);
        self.hash = Some(h);
        (h, n as u64)
    }
}

impl Slot<Internal> {
    /// Its hash, from its children's `left` and `right` when not cached (then cached), and
    /// the hash calls that took (0 or 1).
    pub(super) fn hash_from<H: TreeHasher>(
        &mut self,
        left: &Hash32,
        right: &Hash32,
    ) -> (Hash32, u64) {
        if let Some(h) = self.hash {
            return (h, 0);
        }
        let h = H::hash_pair(left, right);
        self.hash = Some(h);
        (h, 1)
    }
}
