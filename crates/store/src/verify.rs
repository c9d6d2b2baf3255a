//! `StateStore::verify`: a full integrity check of a database, streaming (memory stays
//! proportional to the tree's depth, not its size) and parallel over the upper subtrees.

use crate::{Reader, StateStore, StoreError, T_CODE, T_NODES, T_STEMS, hex};
use bintrie_node::{GroupEntry, Hash32, NodeBlob, Path, Sha256Hasher, ZERO_HASH, deeper};
use rayon::prelude::*;
use std::sync::atomic::{AtomicU64, Ordering};

/// Subtrees whose root lies above this depth are checked in parallel.
const PAR_DEPTH: usize = 8;

/// What [`StateStore::verify`] checked: every count is of items found consistent.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VerifyReport {
    /// The root every blob was checked against (the meta root).
    pub root: Hash32,
    /// The block the meta records.
    pub block: u64,
    /// Node blobs reachable from the root, each re-hashed against its parent.
    pub nodes: u64,
    /// Of those, group blobs.
    pub groups: u64,
    /// Of those, stem blobs; each equals its flat-table entry.
    pub stems: u64,
    /// Code entries, each hashing (keccak256) to its key.
    pub code: u64,
}

#[derive(Default)]
struct Counts {
    nodes: AtomicU64,
    groups: AtomicU64,
    stems: AtomicU64,
}

/// A verification failure: the reason, and a sort key (the failing path's bits) so that the
/// error reported is the first in key order whatever order the threads finished in.
type Failure = (Vec<u8>, StoreError);

impl StateStore {
    /// Checks the whole database against its meta root, and returns what it checked:
    ///
    /// - every node blob reachable from the root decodes, lies at a valid position, and
    ///   re-hashes (stem values, group entries) to the hash its parent holds; the root blob to
    ///   the meta root;
    /// - no node blob is unreachable, and the flat stem table holds exactly the tree's stems,
    ///   each with the same values as its stem blob;
    /// - every code entry hashes (keccak256) to its key.
    ///
    /// The first problem in key order is returned as [`StoreError::Corrupt`] naming the path,
    /// stem or code hash. `progress` is called with the number of stems checked so far, from
    /// several threads. The check reads a consistent snapshot; a writer committing meanwhile
    /// makes it fail with [`StoreError::Conflict`] (run it again).
    pub fn verify(&self, progress: &(dyn Fn(u64) + Sync)) -> Result<VerifyReport, StoreError> {
        // Every check reads one snapshot: one reader per thread plus this one, all opened at
        // the same block (retried while a writer commits in between).
        let mut pool = self.reader_pool(rayon::current_num_threads() + 1)?;
        let reader = pool
            .pop()
            .ok_or_else(|| StoreError::Corrupt("no reader".into()))?;
        let (root, block) = (reader.root()?, reader.block()?);
        let counts = Counts::default();
        if root != ZERO_HASH {
            let ctx = Ctx {
                store: self,
                pool: std::sync::Mutex::new(pool),
                returned: std::sync::Condvar::new(),
                counts: &counts,
                progress,
            };
            ctx.subtree(None, Path::ROOT, root, false)
                .map_err(|(_, e)| e)?;
        }
        let (nodes, stems, code) = reader.counts()?;
        let report = VerifyReport {
            root,
            block,
            nodes: counts.nodes.load(Ordering::Relaxed),
            groups: counts.groups.load(Ordering::Relaxed),
            stems: counts.stems.load(Ordering::Relaxed),
            code: 0,
        };
        if nodes != report.nodes {
            let first = first_unreachable_node(&reader)?;
            return Err(StoreError::Corrupt(format!(
                "the node table holds {nodes} blobs but {} are reachable from the root{}",
                report.nodes,
                first.map_or(String::new(), |k| format!(
                    "; the first unreachable is at path key {}",
                    hex(&k)
                ))
            )));
        }
        if stems != report.stems {
            let first = first_stray_stem(&reader)?;
            return Err(StoreError::Corrupt(format!(
                "the flat stem table holds {stems} stems but the tree {}{}",
                report.stems,
                first.map_or(String::new(), |s| format!(
                    "; the first not in the tree is stem {}",
                    hex(&s)
                ))
            )));
        }
        let code_checked = check_code(&reader)?;
        debug_assert_eq!(code_checked, code);
        Ok(VerifyReport {
            code: code_checked,
            ..report
        })
    }
}

struct Ctx<'a> {
    store: &'a StateStore,
    /// Readers on the verification's snapshot, one per thread, lent to the parallel tasks.
    pool: std::sync::Mutex<Vec<Reader<'a>>>,
    /// Signalled when a reader goes back to the pool.
    returned: std::sync::Condvar,
    counts: &'a Counts,
    progress: &'a (dyn Fn(u64) + Sync),
}

impl StateStore {
    /// `n` readers that all read the same snapshot (the same block): a writer committing
    /// while they open makes it try again.
    fn reader_pool(&self, n: usize) -> Result<Vec<Reader<'_>>, StoreError> {
        // A writer committing between two opens splits the pool; a writer committing
        // continuously could do so every time, so give up after a while.
        const ATTEMPTS: usize = 100;
        let mut last = ((ZERO_HASH, 0), (ZERO_HASH, 0));
        for _ in 0..ATTEMPTS {
            let pool = (0..n.max(1))
                .map(|_| self.reader())
                .collect::<Result<Vec<_>, _>>()?;
            let first = (pool[0].root()?, pool[0].block()?);
            let mut other = None;
            for r in &pool[1..] {
                let at = (r.root()?, r.block()?);
                if at != first {
                    other = Some(at);
                }
            }
            match other {
                None => return Ok(pool),
                Some(at) => last = (first, at),
            }
        }
        let ((r0, b0), (r1, b1)) = last;
        Err(StoreError::Conflict {
            stored_block: b1,
            stored_root: hex(r1),
            expected_block: b0,
            expected_root: hex(r0),
        })
    }
}

impl<'a> Ctx<'a> {
    /// Runs `f` with a reader of the snapshot: `reader` when given, else one borrowed from the
    /// pool (a fresh one checked against the snapshot if the pool is empty).
    fn with_reader<T>(
        &self,
        reader: Option<&Reader<'a>>,
        f: impl FnOnce(&Reader<'a>) -> Result<T, Failure>,
    ) -> Result<T, Failure> {
        if let Some(r) = reader {
            return f(r);
        }
        // The pool holds a reader per thread, and a task holds at most one at a time without
        // waiting on other tasks, so one is always returned soon.
        let r = {
            let mut pool = self.pool.lock().unwrap_or_else(|e| e.into_inner());
            loop {
                match pool.pop() {
                    Some(r) => break r,
                    None => pool = self.returned.wait(pool).unwrap_or_else(|e| e.into_inner()),
                }
            }
        };
        let out = f(&r);
        self.pool.lock().unwrap_or_else(|e| e.into_inner()).push(r);
        self.returned.notify_one();
        out
    }

    /// Checks the subtree whose root blob is at `path` and must hash to `expected`. Above
    /// [`PAR_DEPTH`] the children are checked in parallel, each task with a reader from the
    /// pool; below it the whole subtree is checked with one reader.
    fn subtree(
        &self,
        reader: Option<&Reader<'a>>,
        path: Path,
        expected: Hash32,
        must_be_stem: bool,
    ) -> Result<(), Failure> {
        if reader.is_none() && path.len() >= PAR_DEPTH {
            return self.with_reader(None, |r| {
                self.subtree(Some(r), path, expected, must_be_stem)
            });
        }
        let key = path.to_key();
        let fail = |reason: String| {
            (
                key.as_bytes().to_vec(),
                StoreError::Corrupt(format!(
                    "node at path key {}: {reason}",
                    hex(key.as_bytes())
                )),
            )
        };
        let io = |e: StoreError| (key.as_bytes().to_vec(), e);
        let (blob, flat) = self.with_reader(reader, |r| {
            let blob = r
                .get_node(key.as_bytes())
                .map_err(io)?
                .ok_or_else(|| fail("missing, but its parent holds a hash for it".into()))?;
            // The flat entry of a stem blob, read with the same reader.
            let flat = match bintrie_node::split_stem_blob(&blob) {
                Some((stem, _)) => {
                    let stem: [u8; 31] = stem.try_into().unwrap_or([0; 31]);
                    r.get_flat_raw(&stem).map_err(io)?
                }
                None => None,
            };
            Ok((blob, flat))
        })?;
        self.counts.nodes.fetch_add(1, Ordering::Relaxed);
        match NodeBlob::decode(&blob).map_err(|e| fail(e.to_string()))? {
            NodeBlob::Stem(stem, values) => {
                if !path.is_prefix_of(&stem) {
                    return Err(fail(format!(
                        "stem {} does not lie under its path",
                        hex(stem)
                    )));
                }
                let (h, _) = values.stem_hash::<Sha256Hasher>(&stem);
                if h != expected {
                    return Err(fail(format!(
                        "stem {} hashes to {} but its parent holds {}",
                        hex(stem),
                        hex(h),
                        hex(expected)
                    )));
                }
                if flat.as_deref() != Some(&blob[1 + stem.len()..]) {
                    return Err(fail(format!(
                        "the flat stem table's entry for stem {} {}",
                        hex(stem),
                        if flat.is_some() {
                            "differs from its stem blob"
                        } else {
                            "is missing"
                        }
                    )));
                }
                let n = self.counts.stems.fetch_add(1, Ordering::Relaxed) + 1;
                if n.is_multiple_of(4096) {
                    (self.progress)(n);
                }
                Ok(())
            }
            NodeBlob::Group(group) => {
                if must_be_stem {
                    return Err(fail("a group blob where its parent holds a stem".into()));
                }
                let g = self.store.meta().group_depth;
                if group.group_depth != g {
                    return Err(fail(format!(
                        "a group blob of depth {} in a database of group depth {g}",
                        group.group_depth
                    )));
                }
                if !path.len().is_multiple_of(g as usize) {
                    return Err(fail(format!("a group blob at depth {}", path.len())));
                }
                let (h, _) = group.root_hash::<Sha256Hasher>();
                if h != expected {
                    return Err(fail(format!(
                        "the group hashes to {} but its parent holds {}",
                        hex(h),
                        hex(expected)
                    )));
                }
                self.counts.groups.fetch_add(1, Ordering::Relaxed);
                let children: Vec<(Path, GroupEntry)> = group
                    .entries
                    .iter()
                    .map(|e| child_path(&path, g, e).map(|p| (p, *e)))
                    .collect::<Option<_>>()
                    .ok_or_else(|| fail("an entry below depth 248".into()))?;
                if path.len() < PAR_DEPTH {
                    // In parallel; the first failure in key order wins.
                    let results: Vec<Result<(), Failure>> = children
                        .par_iter()
                        .map(|(p, e)| deeper(|| self.subtree(None, *p, e.hash, e.depth < g)))
                        .collect();
                    results.into_iter().collect()
                } else {
                    children.iter().try_for_each(|(p, e)| {
                        deeper(|| self.subtree(reader, *p, e.hash, e.depth < g))
                    })
                }
            }
        }
    }
}

/// The path of a group entry: the group's path extended by the entry's `depth` bits.
fn child_path(group: &Path, g: u8, e: &GroupEntry) -> Option<Path> {
    if e.depth == 0 || e.depth > g {
        return None;
    }
    let bits = e.index >> (g - e.depth);
    let mut p = *group;
    for i in (0..e.depth).rev() {
        p = p.child(((bits >> i) & 1) as u8)?;
    }
    Some(p)
}

/// The first node key (in key order) that a walk from the root does not reach.
fn first_unreachable_node(reader: &Reader<'_>) -> Result<Option<Vec<u8>>, StoreError> {
    let mut first = None;
    reader.for_each(T_NODES, |key, _| {
        if first.is_some() {
            return Ok(());
        }
        let reachable = match Path::from_key(key) {
            Ok(path) => reader.reaches(&path)?,
            Err(_) => false,
        };
        if !reachable {
            first = Some(key.to_vec());
        }
        Ok(())
    })?;
    Ok(first)
}

/// The first stem (in key order) of the flat table that the tree does not hold.
fn first_stray_stem(reader: &Reader<'_>) -> Result<Option<Vec<u8>>, StoreError> {
    let mut first = None;
    reader.for_each(T_STEMS, |key, _| {
        if first.is_some() {
            return Ok(());
        }
        let in_tree = match <[u8; 31]>::try_from(key) {
            Ok(stem) => reader.get_stem_walk(&stem)?.is_some(),
            Err(_) => false,
        };
        if !in_tree {
            first = Some(key.to_vec());
        }
        Ok(())
    })?;
    Ok(first)
}

/// Checks that every code entry hashes to its key; returns how many there are.
fn check_code(reader: &Reader<'_>) -> Result<u64, StoreError> {
    let mut n = 0u64;
    reader.for_each(T_CODE, |key, code| {
        let h = alloy_primitives::keccak256(code);
        if key != h.as_slice() {
            return Err(StoreError::Corrupt(format!(
                "code stored under hash {} hashes to {}",
                hex(key),
                hex(h.as_slice())
            )));
        }
        n += 1;
        Ok(())
    })?;
    Ok(n)
}
