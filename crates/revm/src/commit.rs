//! The trie half of a block's commit, shared by the states over a store (MDBX and the log).

use crate::StateError;
use bintrie_keys::TreeKey;
use bintrie_trie::{CommitSet, CommitStats, NodeStore, Trie, TrieError};
use std::time::{Duration, Instant};

/// What [`update_and_commit`] did.
pub(crate) struct Committed {
    /// What the commit wrote, and the root after the block.
    pub(crate) stats: CommitStats,
    /// The update and the rehash.
    pub(crate) trie_update: Duration,
    /// The whole commit: the collection and the store's write.
    pub(crate) commit: Duration,
}

/// Applies `writes` to `trie`, rehashes, and commits through `write` (the store's own write
/// of the set), timed; the trie's counters start from zero, and a debug line splits the
/// commit's time into the trie's collection of the dirty blobs and the store's write. On any
/// error nothing is committed and the trie drops the block's changes ([`Trie::discard`],
/// back to its last commit): it already holds them, and the next block would otherwise
/// commit them too.
pub(crate) fn update_and_commit<S: NodeStore>(
    trie: &mut Trie<S>,
    writes: Vec<(TreeKey, [u8; 32])>,
    write: impl FnOnce(&mut S, &CommitSet) -> Result<(), S::Error>,
) -> Result<Committed, StateError>
where
    StateError: From<TrieError<S::Error>>,
{
    trie.reset_stats();
    let t = Instant::now();
    // The rehash is timed here, with the update; the commit finds the hashes cached.
    let updated = trie.update(writes).map(|()| trie.root());
    let trie_update = t.elapsed();
    let t = Instant::now();
    let mut collect = Duration::ZERO;
    let committed = updated.and_then(|_| {
        trie.commit_with(|store, set| {
            collect = t.elapsed();
            write(store, set)
        })
    });
    match committed {
        Ok(stats) => {
            let commit = t.elapsed();
            tracing::debug!(
                collect_ms = collect.as_secs_f64() * 1e3,
                commit_ms = commit.as_secs_f64() * 1e3,
                "state committed"
            );
            Ok(Committed {
                stats,
                trie_update,
                commit,
            })
        }
        Err(e) => {
            trie.discard();
            Err(e.into())
        }
    }
}
