//! Where a state prefetch hands on what it reads ([`Arrivals`]), and the hand-over of a
//! prefetch streamed into execution ([`Streamed`], used by
//! [`crate::BlockDb::prefetch_streaming`]).
//!
//! Streamed, execution starts with the first read in flight: a stem or code it asks for
//! that the prefetch lists is taken from what has arrived, waiting while its read is in
//! flight; anything else is read on demand as without a prefetch. The only wait is for the
//! keys execution needs next, not for the whole list.
//!
//! The reads run on one long-lived thread ([`reading_thread`]) that warms its heap when it
//! starts, not on a new thread per block: a new thread's first allocations opened memory the
//! process had never touched, and faulting it in sat on the block's path (on this project's
//! VM about 6 ms per fresh 2 MB page). A long-lived thread without the warm-up was no better
//! in a one-block process (docs/study/reads.md, "Why the streamed prefetch read slowly").

use alloy_primitives::map::{HashMap, HashSet};
use alloy_primitives::{B256, Bytes};
use bintrie_keys::{EMPTY_CODE_HASH, Stem};
use bintrie_node::StemValues;
use revm::bytecode::Bytecode;
use std::sync::{Condvar, Mutex, MutexGuard, OnceLock};
use std::time::Instant;

/// Bytes the reading thread allocates, writes and frees when it starts ([`reading_thread`]):
/// more than one block's batch allocates on it (the reads' buffers, the stems decoded, the
/// code rebuilt).
const WARM_BYTES: usize = 4 << 20;

/// The thread a streamed prefetch reads on ([`crate::BlockDb::prefetch_streaming`]): one for
/// the process, started on first use (a [`crate::LogState`] starts it when it opens), which
/// first allocates and frees [`WARM_BYTES`] ([`warm_up`]), so that the reads of even the
/// first block do not wait for fresh memory (measured as their state read,
/// docs/study/reads.md). Only readers run on it, and a reader waits for nothing but its
/// reads, so a prefetch that finds it busy (another block's, on another thread) waits only
/// for that one to end. `None` when the thread cannot be started (the prefetch is then read
/// first).
pub(crate) fn reading_thread() -> Option<&'static rayon::ThreadPool> {
    static THREAD: OnceLock<Option<rayon::ThreadPool>> = OnceLock::new();
    THREAD
        .get_or_init(|| {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(1)
                .thread_name(|_| "bintrie-stream".into())
                .build()
                .inspect_err(
                    |e| tracing::warn!(error = %e, "no thread for a streamed prefetch: read first"),
                )
                .ok()?;
            pool.spawn(warm_up);
            Some(pool)
        })
        .as_ref()
}

/// Allocates and writes [`WARM_BYTES`] in blocks of 16 B to 8 KiB (the sizes a batch
/// allocates), then frees them, so that the thread's heap holds pages before its first
/// block.
fn warm_up() {
    let t = Instant::now();
    let mut held = Vec::new();
    let mut total = 0;
    for size in (0..10).map(|i| 16usize << i).cycle() {
        if total >= WARM_BYTES {
            break;
        }
        // Non-zero: written, so faulted in, whatever the allocator knows of fresh pages.
        held.push(vec![1u8; size]);
        total += size;
    }
    drop(std::hint::black_box(held));
    tracing::debug!(
        ms = t.elapsed().as_secs_f64() * 1e3,
        "the streamed prefetch's reading thread warmed"
    );
}

/// Where a prefetch hands on what it reads, as it reads it (from any of its threads).
pub(crate) trait Arrivals: Sync {
    /// Claims `hash` for the prefetch: true the first time (the prefetch is to read it), false
    /// when it is claimed already (by the prefetch, or by execution reading it on demand).
    fn claim(&self, hash: &B256) -> bool;

    /// A listed stem arrived with `values` (`None`: absent). Default: nothing.
    fn stem(&self, _stem: &Stem, _values: Option<&StemValues>) {}

    /// The code under a claimed `hash` is in, checked and decoded (`None`: it failed its check
    /// or is not stored; the read on demand reports that). Default: nothing.
    fn code(&self, _hash: &B256, _code: Option<&Bytecode>) {}

    /// The code under a claimed `hash` was rebuilt from its chunks as `raw`, and is queued to be
    /// checked. Default: nothing.
    fn rebuilt(&self, _hash: &B256, _raw: &Bytes) {}

    /// A checker takes the queued code under `hash`: true when it is to check it, false when
    /// execution took it first and checked it itself. Default: true.
    fn take_job(&self, _hash: &B256) -> bool {
        true
    }
}

/// The code hash of an account's header stem `values`, when it names code to read and the
/// prefetch claims it ([`Arrivals::claim`]); `None` for a storage stem (`header` false: its
/// sub-index 1 is an ordinary slot) or an account without code.
pub(crate) fn code_to_read(
    header: bool,
    values: &StemValues,
    arrivals: &dyn Arrivals,
) -> Option<B256> {
    let hash = B256::from(
        *values
            .get(bintrie_keys::CODE_HASH_LEAF_KEY)
            .filter(|_| header)?,
    );
    (hash != EMPTY_CODE_HASH && hash != B256::ZERO && arrivals.claim(&hash)).then_some(hash)
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding the lock left plain maps behind, still consistent.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A prefetch read before execution: only the claims matter (each code hash is read once).
#[derive(Debug, Default)]
pub(crate) struct Claims(Mutex<HashSet<B256>>);

impl Claims {
    /// Claims with `known` (codes the block has already) taken.
    pub(crate) fn new(known: HashSet<B256>) -> Self {
        Claims(Mutex::new(known))
    }
}

impl Arrivals for Claims {
    fn claim(&self, hash: &B256) -> bool {
        lock(&self.0).insert(*hash)
    }
}

/// What a streamed prefetch has read and what it still owes, shared by its reading threads and
/// execution.
#[derive(Debug, Default)]
struct Shelf {
    /// Listed stems that arrived and execution has not taken yet.
    stems: HashMap<Stem, Option<StemValues>>,
    /// Listed stems not arrived yet.
    pending: HashSet<Stem>,
    /// Claimed codes that arrived and execution has not taken (`None`: read on demand).
    codes: HashMap<B256, Option<Bytecode>>,
    /// Claimed codes rebuilt from their chunks, queued to be checked: execution waiting for
    /// one checks it itself instead of waiting for the queue.
    raw: HashMap<B256, Bytes>,
    /// Codes the prefetch claimed that have not arrived yet.
    pending_codes: HashSet<B256>,
    /// Every hash claimed, by the prefetch or by execution.
    claimed: HashSet<B256>,
    /// The prefetch ended (whether or not it read everything): nothing pending will arrive.
    finished: bool,
}

/// A prefetch streamed into execution: the reading threads hand each stem and code on as it
/// arrives ([`Arrivals`]); execution takes what it asks for ([`Streamed::take_stem`],
/// [`Streamed::take_code`]), waiting only while that key's read is in flight. Call
/// [`Streamed::finish`] when the prefetch ends, however it ends: whatever is still pending is
/// then read on demand.
#[derive(Debug, Default)]
pub(crate) struct Streamed {
    shelf: Mutex<Shelf>,
    arrived: Condvar,
}

impl Streamed {
    /// A stream of the `listed` stems, with the codes `known` to the block already claimed.
    pub(crate) fn new(listed: impl IntoIterator<Item = Stem>, known: HashSet<B256>) -> Self {
        Streamed {
            shelf: Mutex::new(Shelf {
                pending: listed.into_iter().collect(),
                claimed: known,
                ..Shelf::default()
            }),
            arrived: Condvar::new(),
        }
    }

    /// The prefetch has ended: whatever it did not hand on is read on demand; execution stops
    /// waiting.
    pub(crate) fn finish(&self) {
        let mut shelf = lock(&self.shelf);
        shelf.finished = true;
        shelf.pending.clear();
        shelf.pending_codes.clear();
        shelf.raw.clear();
        drop(shelf);
        self.arrived.notify_all();
    }

    /// The values of `stem`, taken from the prefetch: `Some` when it listed the stem and read
    /// it (waiting while its read is in flight), `None` when execution must read it itself
    /// (not listed, or the prefetch ended without it).
    pub(crate) fn take_stem(&self, stem: &Stem) -> Option<Option<StemValues>> {
        let mut shelf = lock(&self.shelf);
        loop {
            if let Some(v) = shelf.stems.remove(stem) {
                return Some(v);
            }
            if !shelf.pending.contains(stem) {
                return None;
            }
            shelf = self.arrived.wait(shelf).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// The code under `hash`, taken from the prefetch: `Some` when the prefetch claimed and
    /// read it (waiting while its read is in flight; code rebuilt from its chunks and still
    /// queued to be checked is checked here, on the caller's thread); `None` when execution
    /// must read it itself, in which case the hash is claimed for execution, so the prefetch
    /// does not read it too.
    pub(crate) fn take_code(&self, hash: &B256) -> Option<Bytecode> {
        let mut shelf = lock(&self.shelf);
        loop {
            if let Some(code) = shelf.codes.remove(hash) {
                return code;
            }
            if let Some(raw) = shelf.raw.remove(hash) {
                shelf.pending_codes.remove(hash);
                drop(shelf);
                // Failed: read on demand, which reports it (or finds the stored code whole).
                return crate::decode_code(hash, raw).ok();
            }
            if !shelf.pending_codes.contains(hash) {
                shelf.claimed.insert(*hash);
                return None;
            }
            shelf = self.arrived.wait(shelf).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// Calls [`Streamed::finish`] when dropped (a reading thread that fails or panics still
    /// ends the stream, so execution never waits for it forever).
    pub(crate) fn finish_on_drop(&self) -> FinishOnDrop<'_> {
        FinishOnDrop(self)
    }
}

impl Arrivals for Streamed {
    fn claim(&self, hash: &B256) -> bool {
        let mut shelf = lock(&self.shelf);
        let new = !shelf.finished && shelf.claimed.insert(*hash);
        if new {
            shelf.pending_codes.insert(*hash);
        }
        new
    }

    fn stem(&self, stem: &Stem, values: Option<&StemValues>) {
        let mut shelf = lock(&self.shelf);
        if shelf.pending.remove(stem) {
            shelf.stems.insert(*stem, values.cloned());
            drop(shelf);
            self.arrived.notify_all();
        }
    }

    fn code(&self, hash: &B256, code: Option<&Bytecode>) {
        let mut shelf = lock(&self.shelf);
        if shelf.pending_codes.remove(hash) {
            shelf.codes.insert(*hash, code.cloned());
            drop(shelf);
            self.arrived.notify_all();
        }
    }

    fn rebuilt(&self, hash: &B256, raw: &Bytes) {
        let mut shelf = lock(&self.shelf);
        if shelf.pending_codes.contains(hash) {
            shelf.raw.insert(*hash, raw.clone());
            drop(shelf);
            self.arrived.notify_all();
        }
    }

    fn take_job(&self, hash: &B256) -> bool {
        // Every claimed code is put on the shelf (`rebuilt`) before it is queued, and the
        // checkers are done before the stream ends: gone from the shelf means execution took
        // it.
        lock(&self.shelf).raw.remove(hash).is_some()
    }
}

/// Ends a [`Streamed`] when dropped ([`Streamed::finish_on_drop`]).
#[derive(Debug)]
pub(crate) struct FinishOnDrop<'a>(&'a Streamed);

impl Drop for FinishOnDrop<'_> {
    fn drop(&mut self) {
        self.0.finish();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn stem(b: u8) -> Stem {
        [b; 31]
    }

    #[test]
    fn the_reading_thread_is_one_thread_that_outlives_a_panicking_reader() {
        let pool = reading_thread().expect("a thread starts here");
        let name =
            |p: &rayon::ThreadPool| p.install(|| std::thread::current().name().map(String::from));
        let id = |p: &rayon::ThreadPool| p.install(|| std::thread::current().id());
        assert_eq!(pool.current_num_threads(), 1);
        assert_eq!(name(pool).as_deref(), Some("bintrie-stream"));
        let first = id(pool);
        assert!(
            std::ptr::eq(pool, reading_thread().unwrap()),
            "one for the process"
        );
        // A reader that panics: the caller gets the panic once its own work is done...
        let mut ran = false;
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            pool.in_place_scope(|scope| {
                scope.spawn(|_| panic!("a reader panics"));
                ran = true;
            })
        }));
        assert!(caught.is_err() && ran);
        // ...and the same thread reads the next block.
        assert_eq!(id(pool), first);
    }

    #[test]
    fn execution_waits_only_for_a_listed_stem_in_flight() {
        let s = Streamed::new([stem(1), stem(2), stem(3)], HashSet::default());
        // Not listed: read on demand at once.
        assert_eq!(s.take_stem(&stem(9)), None);
        s.stem(&stem(2), None);
        assert_eq!(s.take_stem(&stem(2)), Some(None), "arrived absent");
        // Taken once: a second ask reads on demand (the block's cache holds it by then).
        assert_eq!(s.take_stem(&stem(2)), None);
        let mut values = StemValues::default();
        values.set(7, [7; 32]);
        std::thread::scope(|scope| {
            let waiter = scope.spawn(|| s.take_stem(&stem(1)));
            std::thread::sleep(Duration::from_millis(20));
            assert!(!waiter.is_finished(), "waits while its read is in flight");
            s.stem(&stem(1), Some(&values));
            assert_eq!(waiter.join().unwrap(), Some(Some(values.clone())));
            // Ending the stream releases a waiter for a stem that never arrives.
            let waiter = scope.spawn(|| s.take_stem(&stem(3)));
            std::thread::sleep(Duration::from_millis(20));
            assert!(!waiter.is_finished());
            s.finish();
            assert_eq!(waiter.join().unwrap(), None);
        });
    }

    #[test]
    fn each_code_is_read_once_by_the_prefetch_or_by_execution() {
        let (a, b, c) = (
            B256::repeat_byte(1),
            B256::repeat_byte(2),
            B256::repeat_byte(3),
        );
        let s = Streamed::new([], [c].into_iter().collect());
        assert!(!s.claim(&c), "known to the block already");
        // Execution asks first: it reads the code, and the prefetch does not claim it.
        assert_eq!(s.take_code(&a), None);
        assert!(!s.claim(&a));
        // The prefetch claims first: execution waits for it.
        assert!(s.claim(&b));
        let code = Bytecode::new_raw(vec![0x60, 0x00].into());
        std::thread::scope(|scope| {
            let waiter = scope.spawn(|| s.take_code(&b));
            std::thread::sleep(Duration::from_millis(20));
            assert!(!waiter.is_finished(), "waits while its read is in flight");
            s.code(&b, Some(&code));
            assert_eq!(waiter.join().unwrap(), Some(code.clone()));
        });
        // Code that failed its check is read on demand (which reports it).
        let d = B256::repeat_byte(4);
        assert!(s.claim(&d));
        s.code(&d, None);
        assert_eq!(s.take_code(&d), None);
        // After the end nothing is claimed or waited for.
        s.finish();
        assert!(!s.claim(&B256::repeat_byte(5)));
        assert_eq!(s.take_code(&B256::repeat_byte(5)), None);
    }

    #[test]
    fn a_reading_thread_that_panics_still_ends_the_stream() {
        let s = Streamed::new([stem(1)], HashSet::default());
        std::thread::scope(|scope| {
            let reader = scope.spawn(|| {
                let _end = s.finish_on_drop();
                panic!("reader failed");
            });
            assert!(reader.join().is_err());
        });
        assert_eq!(s.take_stem(&stem(1)), None, "read on demand, no wait");
    }
}
