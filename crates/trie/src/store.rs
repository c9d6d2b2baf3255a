//! The storage boundary of the engine: fetch a blob by path, apply a commit.

use crate::CommitSet;
use bintrie_node::PathKey;
use std::collections::HashMap;

/// What a store's trie prefetch hands each blob it reads to, `(key, blob)`, so a trie can
/// decode it ([`crate::Trie::decode_ahead`]) elsewhere while the other reads are in flight.
/// It is called from the threads keeping the reads in flight, so it must be quick: hand the
/// blob on, do not decode it there.
pub type BlobSink<'a> = &'a (dyn Fn(&PathKey, &[u8]) + Sync);

/// Removes `dir`, an on-disk store's directory that a failed command made, when it holds
/// nothing worth keeping: nothing at all (one `rmdir`, which fails if anything is there), or
/// only files `own` accepts, for a store `unused` finds empty. Both are checked while the
/// store's writer lock is held (`lock`: `None` when a writer holds it, which keeps the
/// directory), the listing also before the lock is taken (its file would otherwise be added to
/// any directory). The directory is renamed to a hidden sibling (`.NAME.removing-PID`) before
/// it is removed, so a writer that comes to it by its path meanwhile finds nothing there,
/// never a directory emptied under it. `Ok(true)`: removed; `Ok(false)`: kept; an error when
/// it cannot be renamed (it stays whole) or the renamed directory cannot be removed (the
/// error names it; `dir` is gone).
pub fn remove_store_dir_if<L>(
    dir: &std::path::Path,
    own: impl Fn(&std::fs::DirEntry) -> bool,
    lock: impl FnOnce() -> Option<L>,
    unused: impl FnOnce() -> bool,
) -> std::io::Result<bool> {
    if std::fs::remove_dir(dir).is_ok() {
        return Ok(true);
    }
    let only_own = || std::fs::read_dir(dir).is_ok_and(|d| d.flatten().all(|e| own(&e)));
    if !only_own() {
        return Ok(false);
    }
    let Some(_lock) = lock() else {
        return Ok(false);
    };
    if !(only_own() && unused()) {
        return Ok(false);
    }
    remove_dir_aside(dir).map(|()| true)
}

/// Renames `dir` to a hidden sibling and removes that ([`remove_store_dir_if`]).
fn remove_dir_aside(dir: &std::path::Path) -> std::io::Result<()> {
    let Some(name) = dir.file_name() else {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{}: no directory name to move aside", dir.display()),
        ));
    };
    let mut aside = std::ffi::OsString::from(".");
    aside.push(name);
    aside.push(format!(".removing-{}", std::process::id()));
    let aside = dir.with_file_name(aside);
    std::fs::rename(dir, &aside)?;
    std::fs::remove_dir_all(&aside)
        .map_err(|e| std::io::Error::new(e.kind(), format!("{}: {e}", aside.display())))
}

/// Where the trie's nodes live.
///
/// Contract: `get_node` returns exactly the bytes last written for that key by an applied
/// [`CommitSet`] (or `None` if none was, or it was removed); `apply` makes a whole commit visible
/// at once or returns an error having changed nothing. `get_node` may be called from several
/// threads at once (the engine loads nodes in parallel), hence `Sync`.
pub trait NodeStore: Sync {
    /// The store's error type.
    type Error: std::error::Error + Send + Sync + 'static;

    /// The blob stored at `key`, if any.
    fn get_node(&self, key: &PathKey) -> Result<Option<Vec<u8>>, Self::Error>;

    /// Writes every blob of `commit` and deletes its removed paths, atomically.
    fn apply(&mut self, commit: &CommitSet) -> Result<(), Self::Error>;

    /// Called only when a loaded blob does not fit the tree (missing, or hashing to something
    /// other than what its parent holds): a store that can tell a cause other than damage (for
    /// instance, another writer committed since this handle's view) returns it as an error, and
    /// the trie reports that instead of the mismatch. `None` (the default): no other cause.
    fn explain_mismatch(&self) -> Option<Self::Error> {
        None
    }
}

/// A `NodeStore` in a hash map: for tests, tools and benchmarks.
#[derive(Clone, Debug, Default)]
pub struct MemoryStore {
    nodes: HashMap<PathKey, Vec<u8>>,
    root: Option<[u8; 32]>,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of stored blobs.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// True when nothing is stored.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Total bytes of all stored blobs.
    pub fn total_bytes(&self) -> usize {
        self.nodes.values().map(Vec::len).sum()
    }

    /// The root of the last applied commit (`None` before the first).
    pub fn root(&self) -> Option<[u8; 32]> {
        self.root
    }

    /// Stores `blob` at `key` directly, bypassing the engine (to build or damage a store by hand
    /// in tests and tools).
    pub fn insert_raw(&mut self, key: PathKey, blob: Vec<u8>) {
        self.nodes.insert(key, blob);
    }

    /// Iterates over every stored `(key, blob)`, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (&PathKey, &Vec<u8>)> {
        self.nodes.iter()
    }
}

impl NodeStore for MemoryStore {
    type Error = std::convert::Infallible;

    fn get_node(&self, key: &PathKey) -> Result<Option<Vec<u8>>, Self::Error> {
        Ok(self.nodes.get(key).cloned())
    }

    fn apply(&mut self, commit: &CommitSet) -> Result<(), Self::Error> {
        for key in commit.removed() {
            self.nodes.remove(key);
        }
        self.nodes.reserve(commit.len());
        for (key, blob) in commit.nodes() {
            self.nodes.insert(*key, blob.to_vec());
        }
        self.root = Some(commit.root);
        Ok(())
    }
}
