//! Trie engine benchmarks, side by side with the `ubt` crate (0.5.1).
//!
//! - `bulk/1M`: 1M random stems (one value each, random sub-index) into an empty trie, then the
//!   root. The keys are generated once; the clone fed to `update` is made outside the timing.
//! - `ubt/bulk/1M`: the same keys through `UnifiedBinaryTree::insert_batch` + `root_hash`.
//! - `incremental/1000`: on a 1M-stem tree whose root is computed, 1,000 updates (500 new random
//!   keys, 500 overwrites of base keys) + root. Batch `n` carries the counter `n` in every value,
//!   so each iteration changes every key it touches and nothing can be served from a cache.
//! - `ubt/incremental/1000`: the same batches, in the same order, on a 1M-stem `ubt` tree in its
//!   incremental mode (`enable_incremental_mode`). It takes over a minute per batch, so it is
//!   opt-in (see [`bench_ubt_incremental`]); by default only ubt's default mode is timed, by hand,
//!   on one batch.
//! - `commit/g1`..`commit/g8`: `prepare_commit` of a freshly built 1M-stem tree at each group
//!   depth; the blob count and bytes are printed once per depth.
//! - `reopen/update/g1`..`g8`: the 1M-stem tree committed to a `MemoryStore` at each group
//!   depth; each iteration opens it afresh from its root (nothing loaded), applies one
//!   `incremental` batch (1,000 writes), computes the root and prepares the commit: the block
//!   path over a cold tree (load, verify, rehash, serialize). Batches cycle over 16 fixed ones.
//! - `reopen/one_walk/g1`..`g8`: the same as `reopen/update`, without the separate root:
//!   `prepare_commit` rehashes and serializes in one walk (what a block's commit does).
//! - `reopen/collect/g1`..`g8`: the same as `reopen/update`, but only `prepare_commit` is timed
//!   (the open, the batch and the root are set-up): the commit's serialization of the groups the batch
//!   loaded and changed.
//! - `reopen/get/g1`..`g8`: the same reopened tree, 1,000 `get`s of the keys of one batch (half
//!   present, half absent): the read path, which loads (and verifies) but never rehashes.
//!   Per depth, the nodes loaded and the hash calls of one iteration of each are printed.
//!
//! - `resident/block/g4`, `resident/block/g5`: the block path with the whole tree in memory: on
//!   the 1M-stem tree, committed (so clean), each iteration applies one block's writes (645
//!   brand-new stems with one value each, as an `erc20_approve` block writes at study scale),
//!   then prepares and ends the commit (rehash and serialization; the write itself is left
//!   out). After the timings, the hash floor of 50 more blocks is printed: the update's own
//!   work with no wait for a device, against its hashing.
//! - `proof/prove` and `proof/verify`: on the 1M-stem tree (in memory, hashed), 1,000 single-key
//!   proofs of one `incremental` batch's keys (half present, half absent): making them, and
//!   checking them against the root (one core; the goal is ≥ 100,000 verified proofs
//!   per second, i.e. ≤ 10 ms per iteration).
//!
//! Outside the timings, each run also prints (to stderr, lines starting with `[bench]`):
//! whether `ubt` and this trie agree on the roots, and the "hash floor" of bulk and incremental:
//! `wall / (hash calls × cost of one hash64)`, with the hash cost measured in this process.
//!
//! `ubt` hasher: `ubt::Sha256Hasher` (its default is `Blake3Hasher`). Both trees then hash with
//! SHA-256 and the same EIP-7864 rules, so the roots must be equal: `ubt` maps a zero leaf value
//! to deletion (and `hash32(0) = 0`) where this trie keeps a present zero leaf, so every value
//! used here is non-zero.
//!
//! The incremental benchmarks insert 500 new stems per iteration, so the tree grows slowly
//! during measurement (by a few hundred thousand stems over a full run of ours, far less for
//! `ubt`, which runs fewer iterations); at ~20 levels that changes the cost by a few percent.
//!
//! Run: `cargo bench -p bintrie-trie --bench trie` (3.5 minutes on an idle 2-core machine, 5-6
//! with a build running beside it; most of it is criterion's minimum of 11 runs for
//! `ubt/bulk/1M` and each `commit/g*`). Without `ubt`:
//! `cargo bench -p bintrie-trie --bench trie -- '^(bulk|incremental|commit|reopen)/'`; the
//! loading benchmarks alone (about 2 minutes): `cargo bench -p bintrie-trie --bench trie --
//! '^reopen/'`.

use bintrie_keys::TreeKey;
use bintrie_node::{PathKey, STEM_TAG, Sha256Hasher, TreeHasher};
use bintrie_trie::{CommitSet, MemoryStore, NodeStore, Trie};
use criterion::{BatchSize, Criterion, SamplingMode, criterion_group, criterion_main};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::hint::black_box;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// mimalloc, as the `bintrie` binary uses: glibc's allocator made repeated 1M-node builds
/// 50% slower than the first one (fragmented per-thread arenas after the previous tree's free).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Stems in the base tree.
const N_STEMS: usize = 1_000_000;
/// Writes per incremental batch (half new keys, half overwrites).
const N_UPDATES: usize = 1_000;
const SEED: u64 = 0x7864_b17e;
/// Group depth of the bulk and incremental tries. It only matters to commits.
const G: u8 = 4;
/// Incremental batch numbers: 0 is the root check, the benchmarks use 1.., the hash-floor
/// measurement uses `FLOOR_BATCHES..`.
const FLOOR_BATCHES: u64 = 1 << 32;

type Entry = (TreeKey, [u8; 32]);
type Ours = Trie<MemoryStore>;
type UbtTree = ubt::UnifiedBinaryTree<ubt::Sha256Hasher>;
type UbtEntry = (ubt::TreeKey, ubt::B256);

/// The 1M base entries: random stems, random sub-index, random non-zero value.
fn base_keys() -> &'static [Entry] {
    static KEYS: OnceLock<Vec<Entry>> = OnceLock::new();
    KEYS.get_or_init(|| {
        let mut rng = StdRng::seed_from_u64(SEED);
        (0..N_STEMS)
            .map(|_| {
                let mut value: [u8; 32] = rng.random();
                value[0] |= 1;
                (TreeKey::from_bytes(rng.random()), value)
            })
            .collect()
    })
}

/// Incremental batch `n`: even positions are new random keys, odd positions overwrite a random
/// base key. Every value starts with the counter `n` (non-zero for n ≥ 1, and `value[8] |= 1`
/// keeps batch 0 non-zero too).
fn update_batch(n: u64) -> Vec<Entry> {
    let base = base_keys();
    let mut rng =
        StdRng::seed_from_u64(SEED ^ n.wrapping_add(1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
    (0..N_UPDATES)
        .map(|i| {
            let mut value: [u8; 32] = rng.random();
            value[..8].copy_from_slice(&n.to_be_bytes());
            value[8] |= 1;
            let key = if i % 2 == 0 {
                TreeKey::from_bytes(rng.random())
            } else {
                base[rng.random_range(0..base.len())].0
            };
            (key, value)
        })
        .collect()
}

fn to_ubt(batch: &[Entry]) -> Vec<UbtEntry> {
    batch
        .iter()
        .map(|(k, v)| {
            (
                ubt::TreeKey::new(ubt::Stem::new(k.stem), k.sub_index),
                ubt::B256::from(*v),
            )
        })
        .collect()
}

/// A trie at group depth `g` holding the base entries, root computed.
fn build_ours(g: u8) -> Ours {
    let mut trie = Ours::new(MemoryStore::new(), g).expect("group depth in 1..=8");
    trie.update(base_keys().to_vec()).expect("memory store");
    trie.root();
    trie
}

fn check_roots(what: &str, ours: [u8; 32], theirs: ubt::B256) {
    if ours == theirs.0 {
        eprintln!(
            "[bench] {what}: roots match (ours = ubt::Sha256Hasher = {})",
            hex::encode(ours)
        );
    } else {
        // Not a failure of the benchmark: report it and go on.
        eprintln!(
            "[bench] {what}: ROOTS DIFFER: ours {} ubt {}",
            hex::encode(ours),
            hex::encode(theirs.0)
        );
    }
}

/// Nanoseconds per `Sha256Hasher::hash64` call on one thread: the best of a few rounds of 1M
/// independent calls (what the trie does: sibling subtrees do not depend on each other).
fn hash64_ns() -> f64 {
    static NS: OnceLock<f64> = OnceLock::new();
    *NS.get_or_init(|| {
        const CALLS: u64 = 1 << 20;
        let mut buf = [0u8; 64];
        for (i, b) in buf.iter_mut().enumerate() {
            *b = i as u8 ^ 0x5a;
        }
        let mut best = f64::INFINITY;
        for _ in 0..5 {
            let mut acc = 0u8;
            let start = Instant::now();
            for i in 0..CALLS {
                buf[..8].copy_from_slice(&i.to_le_bytes());
                acc ^= Sha256Hasher::hash64(black_box(&buf))[0];
            }
            let ns = start.elapsed().as_nanos() as f64 / CALLS as f64;
            black_box(acc);
            best = best.min(ns);
        }
        eprintln!(
            "[bench] hash64 cost: {best:.1} ns/call on one thread ({:.2} M/s); rayon threads: {}",
            1e3 / best,
            rayon::current_num_threads()
        );
        best
    })
}

/// Prints `wall / (hashes × hash64 cost)`: 1.0 means the time is all hashing on one core; with
/// `t` threads the ideal is `1/t`, so the ratio to the `t`-thread floor is printed too. Leaf
/// hashes (`hash32`, one compression instead of two) are counted like `hash64`, so the floor is
/// slightly overstated.
fn print_floor(what: &str, wall: Duration, hashes: u64) {
    let ns = hash64_ns();
    let threads = rayon::current_num_threads() as f64;
    let floor = hashes as f64 * ns * 1e-9;
    let wall_s = wall.as_secs_f64();
    eprintln!(
        "[bench] hash floor {what}: wall {:.3} ms, {hashes} hashes × {ns:.1} ns = {:.3} ms \
         serial floor; wall/floor = {:.2} (vs the {threads}-thread floor: {:.2}); {:.1} M hashes/s",
        wall_s * 1e3,
        floor * 1e3,
        wall_s / floor,
        wall_s / (floor / threads),
        hashes as f64 / wall_s * 1e-6,
    );
}

/// What the tree benchmarks pass on to each other (they run in order, in one process).
#[derive(Default)]
struct Shared {
    /// Our roots of: the base tree, base + batch 0, base + batches 0 and 1.
    roots: [Option<[u8; 32]>; 3],
    /// The last tree `ubt/bulk/1M` built, to start the `ubt` incremental benchmarks from.
    ubt_base: Option<UbtTree>,
}

impl Shared {
    /// Our root of the base tree plus batches `0..n` (n ≤ 2), computed if not yet known.
    fn our_root(&mut self, n: usize) -> [u8; 32] {
        if let Some(root) = self.roots[n] {
            return root;
        }
        let mut trie = build_ours(G);
        self.roots[0] = Some(trie.root());
        for i in 0..n {
            trie.update(update_batch(i as u64)).expect("memory store");
            self.roots[i + 1] = Some(trie.root());
        }
        self.roots[n].expect("just computed")
    }
}

fn bench_trees(c: &mut Criterion) {
    let mut shared = Shared::default();
    bench_bulk(c, &mut shared);
    bench_incremental(c, &mut shared);
}

fn bench_bulk(c: &mut Criterion, shared: &mut Shared) {
    let mut ran = false;
    let mut group = c.benchmark_group("bulk");
    group
        .sample_size(10)
        .sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(15));
    group.bench_function("1M", |b| {
        ran = true;
        let keys = base_keys();
        b.iter_batched(
            || keys.to_vec(),
            |batch| {
                let mut trie = Ours::new(MemoryStore::new(), G).expect("group depth");
                trie.update(batch).expect("memory store");
                black_box(trie.root());
                // Returned, so criterion drops the tree outside the timing.
                trie
            },
            BatchSize::PerIteration,
        )
    });
    group.finish();

    if ran {
        // Hash floor: the same work, timed by hand, with the trie's hash counter.
        let mut walls = Vec::new();
        let mut hashes = 0;
        for _ in 0..3 {
            let batch = base_keys().to_vec();
            let mut trie = Ours::new(MemoryStore::new(), G).expect("group depth");
            let start = Instant::now();
            trie.update(batch).expect("memory store");
            let root = trie.root();
            walls.push(start.elapsed());
            hashes = trie.stats().hashes;
            shared.roots[0] = Some(root);
        }
        eprintln!("[bench] bulk/1M timed by hand, 3 builds: {walls:.3?}");
        walls.sort();
        print_floor("bulk/1M (median of 3 builds)", walls[1], hashes);
    }

    let mut last: Option<UbtTree> = None;
    let mut group = c.benchmark_group("ubt/bulk");
    group
        .sample_size(10)
        .sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(60));
    group.bench_function("1M", |b| {
        let keys = base_keys();
        b.iter_batched(
            // Pre-sized outside the timing, as ubt's README advises for bulk loads.
            || (UbtTree::with_capacity(N_STEMS), to_ubt(keys)),
            |(mut tree, batch)| {
                tree.insert_batch(batch).expect("ubt insert_batch");
                black_box(tree.root_hash().expect("ubt root_hash"));
                // Keep this tree; criterion drops the previous one outside the timing.
                last.replace(tree)
            },
            BatchSize::PerIteration,
        )
    });
    group.finish();

    if let Some(mut tree) = last {
        let theirs = tree.root_hash().expect("ubt root_hash");
        check_roots("bulk/1M", shared.our_root(0), theirs);
        shared.ubt_base = Some(tree);
    }
}

fn bench_incremental(c: &mut Criterion, shared: &mut Shared) {
    let mut state: Option<Ours> = None;
    let mut next = 0u64;
    let mut group = c.benchmark_group("incremental");
    group
        .sample_size(20)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4));
    group.bench_function("1000", |b| {
        let trie = state.get_or_insert_with(|| {
            let mut trie = build_ours(G);
            shared.roots[0] = Some(trie.root());
            trie.update(update_batch(0)).expect("memory store");
            shared.roots[1] = Some(trie.root());
            trie
        });
        b.iter_batched(
            || {
                next += 1;
                update_batch(next)
            },
            |batch| {
                trie.update(batch).expect("memory store");
                let root = trie.root();
                shared.roots[2].get_or_insert(root);
                root
            },
            BatchSize::SmallInput,
        )
    });
    group.finish();

    if let Some(trie) = state.as_mut() {
        let mut walls = Vec::new();
        trie.reset_stats();
        const ROUNDS: u64 = 50;
        for i in 0..ROUNDS {
            let batch = update_batch(FLOOR_BATCHES + i);
            let start = Instant::now();
            trie.update(batch).expect("memory store");
            black_box(trie.root());
            walls.push(start.elapsed());
        }
        let total: Duration = walls.iter().sum();
        walls.sort();
        eprintln!(
            "[bench] incremental/1000: criterion applied {next} batches; by hand: median {:.3} ms \
             per batch over {ROUNDS} more",
            walls[walls.len() / 2].as_secs_f64() * 1e3
        );
        print_floor(
            &format!("incremental/1000 (all {ROUNDS} batches)"),
            total,
            trie.stats().hashes,
        );
    }
    drop(state);

    bench_ubt_incremental(c, shared);
}

/// Times `f` once.
fn timed<T>(f: impl FnOnce() -> T) -> (T, Duration) {
    let start = Instant::now();
    let out = f();
    (out, start.elapsed())
}

/// `ubt` on the same batches as `incremental/1000`, from the same base plus batch 0 (roots
/// checked against ours), in its incremental mode (`ubt/incremental/1000`) and, for reference,
/// in its default mode, where every root is rebuilt from the cached stem hashes
/// (`ubt/incremental/1000-default-mode`).
///
/// In its incremental mode ubt takes over a minute per batch here: every changed stem ends in a
/// single-stem subtree, where `incremental_hash_update` prunes the intermediate-hash cache with
/// a `retain` over the whole cache (~2M entries), so one batch scans the cache ~1,000 times.
/// Criterion needs at least 11 runs (10 samples and a warm-up): over 15 minutes. So, after
/// `ubt/bulk/1M` has run in this process (its last tree is the base), and depending on
/// `BINTRIE_BENCH_UBT_INCREMENTAL`:
///
/// - unset: the default mode is timed by hand on batch 0 (~3 s), the incremental mode is not run;
/// - `1`: the incremental mode is also timed by hand, on batch 1 (~90 s more with its setup);
/// - `criterion`: both modes run as criterion benchmarks, with or without `ubt/bulk/1M` (~20 min).
fn bench_ubt_incremental(c: &mut Criterion, shared: &mut Shared) {
    /// The base plus batch 0, in default mode; the time of batch 0.
    fn base(shared: &mut Shared) -> (UbtTree, Duration) {
        let mut tree = shared.ubt_base.take().unwrap_or_else(|| {
            let mut tree = UbtTree::with_capacity(N_STEMS);
            tree.insert_batch(to_ubt(base_keys()))
                .expect("ubt insert_batch");
            tree
        });
        let batch = to_ubt(&update_batch(0));
        let (root, wall) = timed(|| {
            tree.insert_batch(batch).expect("ubt insert_batch");
            tree.root_hash().expect("ubt root_hash")
        });
        check_roots("incremental base + batch 0", shared.our_root(1), root);
        (tree, wall)
    }

    /// Switches `tree` to incremental mode and fills its cache (a full rebuild, untimed).
    fn make_incremental(tree: &mut UbtTree) {
        let before = tree.root_hash().expect("ubt root_hash");
        tree.enable_incremental_mode();
        let (after, wall) = timed(|| tree.root_hash().expect("ubt root_hash"));
        assert_eq!(before, after, "ubt's two modes disagree");
        eprintln!(
            "[bench] ubt: enable_incremental_mode + first root_hash (untimed setup): {:.3} s",
            wall.as_secs_f64()
        );
    }

    let mode = std::env::var("BINTRIE_BENCH_UBT_INCREMENTAL").unwrap_or_default();
    if mode != "criterion" {
        if shared.ubt_base.is_none() {
            return;
        }
        let (mut tree, wall) = base(shared);
        eprintln!(
            "[bench] ubt/incremental/1000-default-mode, by hand (batch 0, 1 run): {:.3} s",
            wall.as_secs_f64()
        );
        if mode != "1" {
            eprintln!(
                "[bench] ubt/incremental/1000 (incremental mode) skipped: about 90 s per run; \
                 BINTRIE_BENCH_UBT_INCREMENTAL=1 times one batch, =criterion runs criterion"
            );
            return;
        }
        make_incremental(&mut tree);
        let batch = to_ubt(&update_batch(1));
        let (root, wall) = timed(|| {
            tree.insert_batch(batch).expect("ubt insert_batch");
            tree.root_hash().expect("ubt root_hash")
        });
        eprintln!(
            "[bench] ubt/incremental/1000, by hand (incremental mode, batch 1, 1 run): {:.3} s",
            wall.as_secs_f64()
        );
        check_roots("incremental base + batches 0, 1", shared.our_root(2), root);
        return;
    }

    let mut trees: Option<(UbtTree, UbtTree)> = None;
    let mut init = || {
        let (plain, _) = base(shared);
        let mut incremental = plain.clone();
        make_incremental(&mut incremental);
        (plain, incremental)
    };
    let mut group = c.benchmark_group("ubt/incremental");
    group
        .sample_size(10)
        .sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(900));
    for (name, incremental_mode) in [("1000", true), ("1000-default-mode", false)] {
        let mut next = 0u64;
        group.bench_function(name, |b| {
            let (plain, incremental) = trees.get_or_insert_with(&mut init);
            let tree = if incremental_mode { incremental } else { plain };
            b.iter_batched(
                || {
                    next += 1;
                    to_ubt(&update_batch(next))
                },
                |batch| {
                    tree.insert_batch(batch).expect("ubt insert_batch");
                    tree.root_hash().expect("ubt root_hash")
                },
                BatchSize::SmallInput,
            )
        });
    }
    group.finish();
}

fn bench_commit(c: &mut Criterion) {
    let mut group = c.benchmark_group("commit");
    group
        .sample_size(10)
        .sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    for g in 1..=8u8 {
        let mut state: Option<Ours> = None;
        group.bench_function(format!("g{g}"), |b| {
            let trie = state.get_or_insert_with(|| {
                let mut trie = build_ours(g);
                let set = trie.prepare_commit();
                let stems = set.nodes().filter(|(_, blob)| blob[0] == STEM_TAG).count();
                eprintln!(
                    "[bench] commit g{g}: {} blobs ({stems} stems + {} groups), {} bytes \
                     ({:.1} MiB, {:.1} bytes/blob)",
                    set.len(),
                    set.len() - stems,
                    set.bytes(),
                    set.bytes() as f64 / (1 << 20) as f64,
                    set.bytes() as f64 / set.len() as f64,
                );
                trie
            });
            // A fresh tree: everything is dirty, and prepare_commit marks nothing committed,
            // so every iteration serializes the whole tree.
            b.iter_with_large_drop(|| trie.prepare_commit())
        });
    }
    group.finish();
}

/// A read-only view of a committed `MemoryStore`, so every iteration can reopen the same tree
/// without copying the store. `apply` is never called (the benchmarks only prepare commits).
struct View<'a>(&'a MemoryStore);

impl NodeStore for View<'_> {
    type Error = std::convert::Infallible;

    fn get_node(&self, key: &PathKey) -> Result<Option<Vec<u8>>, Self::Error> {
        self.0.get_node(key)
    }

    fn apply(&mut self, _: &CommitSet) -> Result<(), Self::Error> {
        unreachable!("the reopen benchmarks never commit")
    }
}

/// The tree at `root` reopened over `store` (nothing loaded), with `batch` applied and the
/// root computed: what the reopen benchmarks time, or start from.
fn reopened_with<'a>(
    store: &'a MemoryStore,
    g: u8,
    root: [u8; 32],
    batch: Vec<Entry>,
) -> Trie<View<'a>> {
    let mut t = reopened_unhashed(store, g, root, batch);
    black_box(t.root());
    t
}

/// A way to reopen the stored tree and apply a batch ([`reopened_with`] or
/// [`reopened_unhashed`]).
type Reopen = for<'a> fn(&'a MemoryStore, u8, [u8; 32], Vec<Entry>) -> Trie<View<'a>>;

/// [`reopened_with`] without the root: the batch applied, nothing rehashed.
fn reopened_unhashed<'a>(
    store: &'a MemoryStore,
    g: u8,
    root: [u8; 32],
    batch: Vec<Entry>,
) -> Trie<View<'a>> {
    let mut t: Trie<View<'_>> = Trie::open(View(store), g, root).expect("g");
    t.update(batch).expect("memory store");
    t
}

/// Batches the reopen benchmarks cycle over.
const REOPEN_BATCHES: u64 = 16;

fn bench_reopen(c: &mut Criterion) {
    let mut group = c.benchmark_group("reopen");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    let batches: Vec<Vec<Entry>> = (1..=REOPEN_BATCHES).map(update_batch).collect();
    for g in 1..=8u8 {
        // Built lazily, so a filter that skips this depth skips the build too.
        let mut state: Option<(MemoryStore, [u8; 32])> = None;
        let setup = |state: &mut Option<(MemoryStore, [u8; 32])>| {
            if state.is_none() {
                let mut trie = build_ours(g);
                let root = trie.commit().expect("memory store").root;
                let store = trie.into_store();
                // One iteration of each kind, for the counters.
                let mut t: Trie<View<'_>> = Trie::open(View(&store), g, root).expect("g");
                t.update(batches[0].clone()).expect("memory store");
                t.root();
                let set = t.prepare_commit();
                let s = t.stats();
                let mut r: Trie<View<'_>> = Trie::open(View(&store), g, root).expect("g");
                for (k, _) in &batches[0] {
                    black_box(r.get(k).expect("memory store"));
                }
                let rs = r.stats();
                eprintln!(
                    "[bench] reopen g{g}: update: {} nodes loaded ({} bytes), {} hashes, {} \
                     blobs prepared; get: {} nodes loaded, {} hashes",
                    s.nodes_loaded,
                    s.bytes_loaded,
                    s.hashes,
                    set.len(),
                    rs.nodes_loaded,
                    rs.hashes
                );
                drop((t, r));
                *state = Some((store, root));
            }
        };
        let mut next = 0usize;
        // `update` hashes in one walk (the root) and serializes in a second (the prepare);
        // `one_walk` leaves the rehash to `prepare_commit`, which then hashes and serializes
        // in one walk (the block path since the thirteenth session).
        let reopens: [(&str, Reopen); 2] =
            [("update", reopened_with), ("one_walk", reopened_unhashed)];
        for (name, reopen) in reopens {
            group.bench_function(format!("{name}/g{g}"), |b| {
                setup(&mut state);
                let (store, root) = state.as_ref().expect("set up");
                b.iter_batched(
                    || {
                        next += 1;
                        batches[next % batches.len()].clone()
                    },
                    |batch| {
                        let mut t = reopen(store, g, *root, batch);
                        let set = t.prepare_commit();
                        // Returned, so criterion drops them outside the timing.
                        (t, set)
                    },
                    BatchSize::SmallInput,
                )
            });
        }
        // The commit's collection alone, after a reopened tree took a batch (most groups it
        // writes were loaded for the batch).
        group.bench_function(format!("collect/g{g}"), |b| {
            setup(&mut state);
            let (store, root) = state.as_ref().expect("set up");
            b.iter_batched(
                || {
                    next += 1;
                    reopened_with(store, g, *root, batches[next % batches.len()].clone())
                },
                |mut t| {
                    let set = t.prepare_commit();
                    (t, set)
                },
                BatchSize::SmallInput,
            )
        });
        group.bench_function(format!("get/g{g}"), |b| {
            setup(&mut state);
            let (store, root) = state.as_ref().expect("set up");
            b.iter_batched(
                || {
                    next += 1;
                    &batches[next % batches.len()]
                },
                |batch| {
                    let mut t: Trie<View<'_>> = Trie::open(View(store), g, *root).expect("g");
                    for (k, _) in batch {
                        black_box(t.get(k).expect("memory store"));
                    }
                    t
                },
                BatchSize::SmallInput,
            )
        });
    }
    group.finish();
}

/// New stems per `resident/block` iteration (an `erc20_approve` block at study scale).
const BLOCK_STEMS: usize = 645;

/// Block `n` of `resident/block`: [`BLOCK_STEMS`] brand-new random stems, one value each.
fn block_batch(n: u64) -> Vec<Entry> {
    let mut rng = StdRng::seed_from_u64(SEED ^ 0xb10c ^ n.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let mut batch: Vec<Entry> = (0..BLOCK_STEMS)
        .map(|_| {
            let mut value: [u8; 32] = rng.random();
            value[0] |= 1;
            (TreeKey::from_bytes(rng.random()), value)
        })
        .collect();
    batch.sort_unstable_by_key(|e| e.0);
    batch
}

/// One block on a resident tree: the writes, the rehash and serialization, the commit's end
/// (nothing written). Returns the blobs the commit would write.
fn resident_block(trie: &mut Ours, batch: &[Entry]) -> usize {
    trie.apply_sorted(batch).expect("memory store");
    let set = trie.prepare_commit();
    let blobs = set.len();
    trie.commit_prepared(set, |_, _| Ok(()))
        .expect("a writer that writes nothing");
    blobs
}

fn bench_resident(c: &mut Criterion) {
    let mut group = c.benchmark_group("resident");
    group
        .sample_size(20)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4));
    for g in [4u8, 5] {
        let mut state: Option<Ours> = None;
        let mut next = 0u64;
        group.bench_function(format!("block/g{g}"), |b| {
            let trie = state.get_or_insert_with(|| {
                let mut trie = build_ours(g);
                trie.commit().expect("memory store");
                trie
            });
            b.iter_batched(
                || {
                    next += 1;
                    block_batch(next)
                },
                |batch| resident_block(trie, &batch),
                BatchSize::SmallInput,
            )
        });
        if let Some(trie) = state.as_mut() {
            const ROUNDS: u64 = 50;
            trie.reset_stats();
            let batches: Vec<Vec<Entry>> = (0..ROUNDS)
                .map(|i| block_batch(FLOOR_BATCHES + i))
                .collect();
            let start = Instant::now();
            let blobs: usize = batches.iter().map(|b| resident_block(trie, b)).sum();
            let wall = start.elapsed();
            eprintln!(
                "[bench] resident/block/g{g}: {:.0} blobs per block",
                blobs as f64 / ROUNDS as f64
            );
            print_floor(
                &format!("resident/block/g{g} ({ROUNDS} blocks)"),
                wall,
                trie.stats().hashes,
            );
        }
    }
    group.finish();
}

fn bench_proof(c: &mut Criterion) {
    let mut group = c.benchmark_group("proof");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    let mut trie = build_ours(G);
    let root = trie.root();
    let keys: Vec<TreeKey> = update_batch(1).into_iter().map(|(k, _)| k).collect();
    let proofs: Vec<bintrie_trie::Proof> = keys
        .iter()
        .map(|k| trie.prove(k).expect("memory store"))
        .collect();
    let depth: usize = proofs.iter().map(|p| p.siblings.len()).sum::<usize>() / proofs.len();
    eprintln!(
        "[bench] proof: mean depth {depth} over {} proofs",
        proofs.len()
    );
    group.bench_function("prove", |b| {
        b.iter(|| {
            for k in &keys {
                black_box(trie.prove(k).expect("memory store"));
            }
        })
    });
    group.bench_function("verify", |b| {
        b.iter(|| {
            for p in &proofs {
                black_box(p.verify::<Sha256Hasher>(&root).expect("valid proof"));
            }
        })
    });
    group.finish();
}

criterion_group! {
    name = benches;
    // Plots take seconds per benchmark; `target/criterion/*/new/estimates.json` has the numbers.
    config = Criterion::default().without_plots();
    targets = bench_trees, bench_commit, bench_reopen, bench_resident, bench_proof
}
criterion_main!(benches);
