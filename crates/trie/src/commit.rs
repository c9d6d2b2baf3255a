//! What a commit writes: dirty blobs at their paths, and paths that no longer hold a node.

use bintrie_node::{Hash32, PathKey};
use std::collections::HashSet;
use std::ops::Range;

/// The result of [`Trie::commit`](crate::Trie::commit): every group and stem blob that changed
/// since the last commit, at its path key, and the paths whose stem moved away (a split pushed
/// it deeper) and that nothing else overwrites.
///
/// Invariant: no key appears twice, and no removed key is also written. Blobs are kept in a
/// few buffers (one per part of a parallel collection) to avoid an allocation per node, and
/// parts are joined by moving their buffers, not copying their bytes.
#[derive(Clone, Debug, Default)]
pub struct CommitSet {
    /// The root after the commit.
    pub root: Hash32,
    /// The group depth the blobs were written at.
    pub group_depth: u8,
    /// Each blob's key, buffer (index into `data`) and range in that buffer.
    keys: Vec<(PathKey, u32, Range<usize>)>,
    /// The buffers; `push_with` writes into the last one.
    data: Vec<Vec<u8>>,
    removed: Vec<PathKey>,
}

impl CommitSet {
    pub(crate) fn new(root: Hash32, group_depth: u8) -> Self {
        CommitSet {
            root,
            group_depth,
            ..Default::default()
        }
    }

    /// Adds a blob, written by `write` at the end of the last buffer (made if there is none).
    pub(crate) fn push_with(&mut self, key: PathKey, write: impl FnOnce(&mut Vec<u8>)) {
        if self.data.is_empty() {
            self.data.push(Vec::new());
        }
        let last = self.data.len() - 1;
        let buf = &mut self.data[last];
        let start = buf.len();
        write(buf);
        self.keys.push((key, last as u32, start..buf.len()));
    }

    pub(crate) fn push_removed(&mut self, key: PathKey) {
        self.removed.push(key);
    }

    /// Appends other sets' blobs and removals (parallel collection), moving their buffers:
    /// copying their bytes into one buffer (about 1.8 MB for an approve block, on one thread
    /// after the parallel walk) was 7-10% of preparing a 641-stem commit.
    pub(crate) fn append_all(&mut self, parts: Vec<CommitSet>) {
        self.keys.reserve(parts.iter().map(|p| p.keys.len()).sum());
        for part in parts {
            let base = self.data.len() as u32;
            self.data.extend(part.data);
            self.keys
                .extend(part.keys.into_iter().map(|(k, buf, r)| (k, buf + base, r)));
            self.removed.extend(part.removed);
        }
    }

    /// Drops removals of keys that this set also writes; the removals that stay are sorted.
    /// The removals are few (a path is vacated where a split pushes a stem down) and the
    /// written keys thousands, so the written keys are looked up among the removals, in a hash
    /// table (a binary search of 33-byte keys for each written key, on one thread after the
    /// parallel walk, was about 6% of preparing a 641-stem commit).
    pub(crate) fn finish(&mut self) {
        if self.removed.is_empty() {
            return;
        }
        self.removed.sort_unstable();
        self.removed.dedup();
        let mut unwritten: HashSet<PathKey, foldhash::fast::RandomState> =
            self.removed.iter().copied().collect();
        for (key, _, _) in &self.keys {
            unwritten.remove(key);
        }
        self.removed.retain(|k| unwritten.contains(k));
    }

    /// The written blobs: `(path key, blob)`.
    pub fn nodes(&self) -> impl ExactSizeIterator<Item = (&PathKey, &[u8])> + '_ {
        self.keys
            .iter()
            .map(|(k, buf, r)| (k, &self.data[*buf as usize][r.clone()]))
    }

    /// Number of written blobs.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// True when nothing is written or removed.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty() && self.removed.is_empty()
    }

    /// Total bytes of the written blobs.
    pub fn bytes(&self) -> usize {
        self.data.iter().map(Vec::len).sum()
    }

    /// Path keys that must be deleted.
    pub fn removed(&self) -> &[PathKey] {
        &self.removed
    }

    /// Sorts the blobs by key (what an ordered store wants for sequential inserts).
    pub fn sort_by_key(&mut self) {
        self.keys.sort_unstable_by_key(|a| a.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bintrie_node::Path;

    fn key(first: u8, bits: usize) -> PathKey {
        let mut stem = [0u8; 31];
        stem[0] = first;
        Path::from_stem_prefix(&stem, bits).to_key()
    }

    /// Parts joined by moving their buffers list every blob with its own bytes, in order, and
    /// count the bytes of all of them.
    #[test]
    fn appended_parts_keep_each_blob_and_the_byte_count() {
        let mut set = CommitSet::new([0; 32], 4);
        set.push_with(key(0x80, 3), |buf| buf.extend_from_slice(b"one"));
        let mut parts = Vec::new();
        for (first, blob) in [(0x40, &b"two"[..]), (0x20, b"three"), (0x10, b"")] {
            let mut part = CommitSet::new([0; 32], 4);
            part.push_with(key(first, 8), |buf| buf.extend_from_slice(blob));
            part.push_removed(key(first, 9));
            parts.push(part);
        }
        set.append_all(parts);
        set.push_with(key(0x08, 5), |buf| buf.extend_from_slice(b"four"));
        let got: Vec<(PathKey, &[u8])> = set.nodes().map(|(k, b)| (*k, b)).collect();
        let want: Vec<(PathKey, &[u8])> = vec![
            (key(0x80, 3), b"one"),
            (key(0x40, 8), b"two"),
            (key(0x20, 8), b"three"),
            (key(0x10, 8), b""),
            (key(0x08, 5), b"four"),
        ];
        assert_eq!(got, want);
        assert_eq!((set.len(), set.bytes()), (5, 15));
        assert_eq!(set.removed().len(), 3);
    }

    #[test]
    fn finish_drops_removals_the_set_rewrites_and_repeats() {
        let mut set = CommitSet::new([0; 32], 4);
        for (first, bits) in [(0x80, 3), (0x40, 8), (0x20, 12), (0x10, 16)] {
            set.push_with(key(first, bits), |buf| buf.push(first));
        }
        for (first, bits) in [(0x40, 8), (0xf0, 9), (0x10, 16), (0xf0, 9), (0x08, 5)] {
            set.push_removed(key(first, bits));
        }
        set.finish();
        let mut want = [key(0xf0, 9), key(0x08, 5)];
        want.sort_unstable();
        assert_eq!(set.removed(), &want[..]);
        assert_eq!(set.len(), 4);
    }
}
