//! Cold reads: a block's worth of random keys read serially on demand vs prefetched with N
//! parallel workers, each measurement after evicting the database from the OS page cache.
//!
//! ```sh
//! cargo bench -p bintrie-revm --bench prefetch                 # 2M-stem store, 20,000 keys
//! BINTRIE_BENCH_STEMS=8000000 BINTRIE_BENCH_KEYS=20000 cargo bench -p bintrie-revm --bench prefetch
//! ```
//! 20,000 keys stand for 5,000 transactions touching four stems each (sender, recipient and
//! two storage slots).

use alloy_primitives::{Address, U256};
use bintrie_keys::{TreeKey, basic_data_key};
use bintrie_revm::{BlockDbOptions, PrefetchList, TrieDb};
use bintrie_store::{Durability, ReadPath, StateStore, StoreOptions, evict_page_cache};
use bintrie_trie::Trie;
use rand::{Rng, SeedableRng, rngs::StdRng};
use std::path::Path;
use std::time::Instant;

/// The allocator the `bintrie` binary uses.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn open(dir: &Path) -> StateStore {
    StateStore::open(
        dir,
        &StoreOptions {
            group_depth: Some(5),
            durability: Durability::Relaxed,
            ..Default::default()
        },
    )
    .expect("open")
}

fn main() {
    let n = env_or("BINTRIE_BENCH_STEMS", 2_000_000);
    let keys = env_or("BINTRIE_BENCH_KEYS", 20_000);
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("prefetch-bench");
    let _ = std::fs::remove_dir_all(&dir);
    let mut rng = StdRng::seed_from_u64(1);
    // The store: n account header stems of random addresses.
    let addresses: Vec<Address> = (0..n)
        .map(|_| Address::from(rng.random::<[u8; 20]>()))
        .collect();
    let t = Instant::now();
    {
        let mut trie: Trie<StateStore> = Trie::new(open(&dir), 5).unwrap();
        let writes: Vec<(TreeKey, [u8; 32])> = addresses
            .iter()
            .map(|a| (basic_data_key(a), U256::from(1).to_be_bytes()))
            .collect();
        trie.update(writes).unwrap();
        trie.commit_with(|s, set| s.bulk_load(set, 1, &[])).unwrap();
    }
    let size = std::fs::metadata(dir.join("mdbx.dat")).unwrap().len();
    println!(
        "# cold reads: {n}-stem store ({:.0} MB, built in {:.1} s), {keys} random keys\n",
        size as f64 / 1e6,
        t.elapsed().as_secs_f64()
    );
    let sample: Vec<Address> = (0..keys)
        .map(|_| addresses[rng.random_range(0..n)])
        .collect();
    let mut list = PrefetchList::new();
    for a in &sample {
        list.account(*a);
    }
    let unique = list.stems().len();

    println!("| mode | workers | total ms | µs per cold key | speedup vs serial |");
    println!("|---|---|---|---|---|");
    evict_page_cache(&dir).unwrap();
    let store = open(&dir);
    let db = TrieDb::new(&store, ReadPath::Flat).unwrap();
    let t = Instant::now();
    for a in &sample {
        db.read_stem(&basic_data_key(a).stem)
            .unwrap()
            .expect("present");
    }
    let serial = t.elapsed();
    drop(db);
    drop(store);
    println!(
        "| serial on demand | 1 | {:.1} | {:.1} | 1.00 |",
        serial.as_secs_f64() * 1e3,
        serial.as_secs_f64() * 1e6 / keys as f64
    );
    for workers in [1, 2, 4, 8, 16, 32] {
        evict_page_cache(&dir).unwrap();
        let store = open(&dir);
        let mut block = bintrie_revm::BlockDb::new(&store, BlockDbOptions::default()).unwrap();
        let t = Instant::now();
        let reads = block.prefetch(&list, workers).unwrap();
        let el = t.elapsed();
        assert_eq!(reads as usize, unique);
        println!(
            "| prefetch (sorted, deduped) | {workers} | {:.1} | {:.1} | {:.2} |",
            el.as_secs_f64() * 1e3,
            el.as_secs_f64() * 1e6 / keys as f64,
            serial.as_secs_f64() / el.as_secs_f64()
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
