//! The automatic compaction on a thread of its own ([`crate::LogOptions::compact_background`]).
//!
//! Each committed block asks for one step (the slice [`LogStore::compact_step`] would read
//! inside the block's write otherwise); the thread runs it after the block's write has
//! returned, under the writer's lock, so a block's write waits only for a step already under
//! way, and the steps keep the pace of the blocks (one per block, as inside them), which keeps
//! the log's bound. The thread is stopped and joined when the last handle of the log drops:
//! a step under way finishes (each is a complete, crash-safe unit), the steps not yet begun
//! are left (a compaction half done starts over at the next open), and the directory's lock
//! is free once the drop has returned.

use crate::{Inner, LogStore};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};

/// The compaction thread of one writer handle (shared by its clones).
pub(crate) struct Compactor {
    shared: Arc<Shared>,
    thread: Option<std::thread::JoinHandle<()>>,
}

#[derive(Default)]
struct Shared {
    state: Mutex<State>,
    changed: Condvar,
}

#[derive(Default)]
struct State {
    /// Steps asked for (one per committed block).
    asked: u64,
    /// Steps run (or given up) so far.
    done: u64,
    stop: bool,
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Compactor {
    /// Starts the thread for the log behind `inner`, compacting down to `share` of garbage.
    pub(crate) fn start(inner: Weak<Inner>, share: f64) -> std::io::Result<Compactor> {
        let shared = Arc::new(Shared::default());
        let theirs = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("log-compactor".into())
            .spawn(move || run(&theirs, &inner, share))?;
        Ok(Compactor {
            shared,
            thread: Some(thread),
        })
    }

    /// Asks for one step (a block was committed).
    pub(crate) fn ask(&self) {
        self.shared.state().asked += 1;
        self.shared.changed.notify_all();
    }

    /// Returns once every step asked for so far has run.
    pub(crate) fn wait(&self) {
        let mut s = self.shared.state();
        while s.done < s.asked && !s.stop {
            s = self
                .shared
                .changed
                .wait(s)
                .unwrap_or_else(|e| e.into_inner());
        }
    }
}

impl Drop for Compactor {
    fn drop(&mut self) {
        self.shared.state().stop = true;
        self.shared.changed.notify_all();
        if let Some(thread) = self.thread.take() {
            // A panic in a step was caught and logged there; a join error cannot carry one.
            let _ = thread.join();
        }
    }
}

fn run(shared: &Shared, inner: &Weak<Inner>, share: f64) {
    loop {
        let asked = {
            let mut s = shared.state();
            while s.asked == s.done && !s.stop {
                s = shared.changed.wait(s).unwrap_or_else(|e| e.into_inner());
            }
            if s.stop {
                return;
            }
            s.asked
        };
        // The handles hold the log while they hold this thread (they join it when the last
        // one drops), so the upgrade fails only while that drop is under way.
        let Some(inner) = inner.upgrade() else {
            return;
        };
        let from = shared.state().done;
        for _ in from..asked {
            if shared.state().stop {
                return;
            }
            step(&inner, share);
            shared.state().done += 1;
            shared.changed.notify_all();
        }
    }
}

/// One step under the writer's lock; a failure is logged (the blocks are committed already),
/// a panic too (the thread goes on; the compaction stops until a reopen).
fn step(inner: &Arc<Inner>, share: f64) {
    let mut guard = inner.writer.lock().unwrap_or_else(|e| e.into_inner());
    let Some(w) = guard.as_mut() else {
        return;
    };
    if w.poisoned {
        return;
    }
    let store = LogStore::internal(Arc::clone(inner));
    let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        store.compact_step(w, share)
    }));
    match ran {
        Ok(Ok(())) => {}
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "compacting the log failed; the blocks are committed");
        }
        Err(_) => {
            w.halted = true;
            w.cursor = None;
            tracing::error!("a compaction step panicked: compaction stops until a reopen");
        }
    }
}
