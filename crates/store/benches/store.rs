//! Store benchmark (a plain harness: each measurement is one large, single-shot operation).
//!
//! For each group depth: build a database of N random stems with the bulk load, and with the
//! external sort + streaming build (bounded memory), and compare both with building the same
//! tree in memory; then random point reads of existing stems, warm (page cache
//! hot) and cold (database evicted from the OS page cache, environment reopened), by the flat
//! table and by the trie walk: time, lookups and bytes per read.
//!
//! ```sh
//! cargo bench -p bintrie-store                                   # 1M stems, g = 1..8
//! BINTRIE_BENCH_STEMS=10000000 BINTRIE_BENCH_GROUPS=5 cargo bench -p bintrie-store
//! ```

use bintrie_keys::TreeKey;
use bintrie_store::{
    Durability, ExternalSort, ReadPath, StateStore, StoreOptions, evict_page_cache, stems_of,
};
use bintrie_trie::{MemoryStore, Trie};
use rand::{Rng, SeedableRng, rngs::StdRng};
use std::path::Path;
use std::time::{Duration, Instant};

/// The allocator the `bintrie` binary uses.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn keys(n: usize, seed: u64) -> Vec<(TreeKey, [u8; 32])> {
    let mut rng = StdRng::seed_from_u64(seed);
    (0..n)
        .map(|_| (TreeKey::new(rng.random(), rng.random()), rng.random()))
        .collect()
}

struct ReadResult {
    per_read: Duration,
    lookups: f64,
    bytes: f64,
}

fn read_pass(store: &StateStore, sample: &[TreeKey], path: ReadPath) -> ReadResult {
    let reader = store.reader().expect("reader");
    let start = Instant::now();
    let mut found = 0usize;
    for k in sample {
        if let Some(v) = reader.get_stem(&k.stem, path).expect("read") {
            found += v.get(k.sub_index).is_some() as usize;
        }
    }
    let elapsed = start.elapsed();
    assert_eq!(found, sample.len(), "every sampled key is present");
    let s = reader.stats();
    ReadResult {
        per_read: elapsed / sample.len() as u32,
        lookups: s.lookups as f64 / sample.len() as f64,
        bytes: s.bytes as f64 / sample.len() as f64,
    }
}

fn open(dir: &Path, g: u8) -> StateStore {
    StateStore::open(
        dir,
        &StoreOptions {
            group_depth: Some(g),
            durability: Durability::Relaxed,
            ..Default::default()
        },
    )
    .expect("open")
}

fn main() {
    // `cargo bench` passes `--bench`; nothing else to parse.
    let n: usize = env_or("BINTRIE_BENCH_STEMS", 1_000_000);
    let reads: usize = env_or("BINTRIE_BENCH_READS", 2_000);
    let groups: Vec<u8> = std::env::var("BINTRIE_BENCH_GROUPS")
        .ok()
        .map(|s| s.split(',').filter_map(|x| x.trim().parse().ok()).collect())
        .unwrap_or_else(|| (1..=8).collect());
    let base = Path::new(env!("CARGO_TARGET_TMPDIR")).join("store-bench");
    let entries = keys(n, 42);
    let mut rng = StdRng::seed_from_u64(7);
    let sample: Vec<TreeKey> = (0..reads)
        .map(|_| entries[rng.random_range(0..entries.len())].0)
        .collect();

    println!("# store benchmark: {n} random stems, {reads} random point reads\n");
    println!(
        "| g | build in memory (s) | build + bulk load to MDBX (s) | ratio | external sort + \
         streaming build (s) | ratio | blobs | MB |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    let mut read_rows = Vec::new();
    for &g in &groups {
        let t = Instant::now();
        let mut mem: Trie<MemoryStore> = Trie::new(MemoryStore::new(), g).unwrap();
        mem.update(entries.clone()).unwrap();
        let root = mem.root();
        let t_mem = t.elapsed();
        drop(mem);

        let dir = base.join(format!("g{g}"));
        let _ = std::fs::remove_dir_all(&dir);
        let t = Instant::now();
        let store = open(&dir, g);
        let mut trie: Trie<StateStore> = Trie::new(store, g).unwrap();
        trie.update(entries.clone()).unwrap();
        trie.root();
        let t_built = t.elapsed();
        let mut t_serialized = Duration::ZERO;
        let mut t_written = Duration::ZERO;
        let stats = trie
            .commit_with(|s, set| {
                t_serialized = t.elapsed();
                let r = s.bulk_load(set, 1, &[]);
                t_written = t.elapsed();
                r
            })
            .expect("bulk load");
        let t_db = t.elapsed();
        eprintln!(
            "g={g}: build {:.2}s, serialize {:.2}s, MDBX write {:.2}s, mark clean {:.2}s",
            t_built.as_secs_f64(),
            (t_serialized - t_built).as_secs_f64(),
            (t_written - t_serialized).as_secs_f64(),
            (t_db - t_written).as_secs_f64()
        );
        assert_eq!(stats.root, root);
        drop(trie);

        // The bounded-memory path: the same (unsorted) writes through the external sort
        // (256 MiB runs) into the streaming build.
        let dir_s = base.join(format!("g{g}-streamed"));
        let _ = std::fs::remove_dir_all(&dir_s);
        let t = Instant::now();
        let mut store = open(&dir_s, g);
        let mut sorter = ExternalSort::new(&dir_s, 256 << 20);
        for (k, v) in &entries {
            sorter.push(*k, *v).expect("sort");
        }
        let streamed = store
            .build_sorted(
                stems_of(sorter.finish().expect("merge")),
                &[],
                1,
                64 << 20,
                &mut |_| {},
            )
            .expect("streaming build");
        let t_stream = t.elapsed();
        assert_eq!(streamed, root);
        drop(store);
        let _ = std::fs::remove_dir_all(&dir_s);
        println!(
            "| {g} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {} | {:.0} |",
            t_mem.as_secs_f64(),
            t_db.as_secs_f64(),
            t_db.as_secs_f64() / t_mem.as_secs_f64(),
            t_stream.as_secs_f64(),
            t_stream.as_secs_f64() / t_mem.as_secs_f64(),
            stats.blobs,
            stats.bytes as f64 / 1e6
        );

        for path in [ReadPath::Flat, ReadPath::TrieWalk] {
            // Cold: evict with the environment closed, reopen, read.
            evict_page_cache(&dir).expect("evict");
            let store = open(&dir, g);
            let cold = read_pass(&store, &sample, path);
            // Warm: the same reads again with the pages now cached.
            let warm = read_pass(&store, &sample, path);
            read_rows.push((g, path, cold, warm));
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
    println!("\n| g | read path | cold µs/read | warm µs/read | lookups/read | bytes/read |");
    println!("|---|---|---|---|---|---|");
    for (g, path, cold, warm) in read_rows {
        println!(
            "| {g} | {path:?} | {:.1} | {:.2} | {:.2} | {:.0} |",
            cold.per_read.as_secs_f64() * 1e6,
            warm.per_read.as_secs_f64() * 1e6,
            cold.lookups,
            cold.bytes
        );
    }
}
