//! The trie half of a block's commit, shared by the states over a store (MDBX and the log).

use crate::StateError;
use bintrie_keys::TreeKey;
use bintrie_trie::{CommitSet, CommitStats, NodeStore, Trie, TrieError};
use std::time::{Duration, Instant};

/// What [`update_and_commit`] did.
pub(crate) struct Committed {
    /// What the commit wrote, and the root after the block.
    pub(crate) stats: CommitStats,
    /// The update, the rehash and the changed blobs' serialization.
    pub(crate) trie_update: Duration,
    /// The store's write of the set, and the trie's bookkeeping after it.
    pub(crate) commit: Duration,
}

/// Applies `writes` to `trie`, rehashes, and commits through `write` (the store's own write
/// of the set), timed; the trie's counters start from zero. The rehash serializes the changed
/// blobs in the same walk ([`Trie::prepare_commit`]), so it is timed with the update, and the
/// commit is the store's write and the trie's bookkeeping after it (a debug line gives both).
/// On any error nothing is committed and the trie drops the block's changes
/// ([`Trie::discard`], back to its last commit): it already holds them, and the next block
/// would otherwise commit them too.
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
    let updated = trie.update(writes);
    let applied = t.elapsed();
    let prepared = updated.map(|()| trie.prepare_commit());
    let trie_update = t.elapsed();
    let t = Instant::now();
    // When the store's write started and ended, for the debug line's split.
    let mut write_span = (t, t);
    let committed = prepared.and_then(|set| {
        trie.commit_prepared(set, |store, set| {
            let start = Instant::now();
            let written = write(store, set);
            write_span = (start, Instant::now());
            written
        })
    });
    match committed {
        Ok(stats) => {
            let commit = t.elapsed();
            let ms = |d: Duration| d.as_secs_f64() * 1e3;
            tracing::debug!(
                update_ms = ms(trie_update),
                apply_ms = ms(applied),
                before_write_ms = ms(write_span.0 - t),
                write_ms = ms(write_span.1 - write_span.0),
                after_write_ms = ms(commit.saturating_sub(write_span.1 - t)),
                commit_ms = ms(commit),
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
