//! Builds a database of N random stems (one random value each) two ways, for measuring time and
//! peak memory side by side (run each under `/usr/bin/time -v`):
//!
//! ```sh
//! cargo run --release -p bintrie-store --example build -- sorted 2000000 5 /tmp/db-sorted
//! cargo run --release -p bintrie-store --example build -- bulk   2000000 5 /tmp/db-bulk
//! ```
//!
//! `sorted`: `StateStore::build_sorted` fed by a generator that makes the stems in sorted order
//! (65,536 buckets by the first two bytes, each sorted on its own), so nothing holds them all.
//! `bulk`: the same stems into an in-memory trie, committed with `StateStore::bulk_load` (the
//! study's build today). Both print the root, which must be equal.

use bintrie_keys::{Stem, TreeKey};
use bintrie_node::StemValues;
use bintrie_store::{Durability, StateStore, StoreOptions};
use bintrie_trie::Trie;
use rand::{Rng, SeedableRng, rngs::StdRng};
use std::time::Instant;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const BUCKETS: u64 = 1 << 16;

/// The stems of bucket `b` (first two bytes = b), sorted, each with one random value.
fn bucket(n: u64, b: u64) -> Vec<(Stem, StemValues)> {
    let count = n / BUCKETS + u64::from(b < n % BUCKETS);
    let mut rng = StdRng::seed_from_u64(0x5eed ^ b);
    let mut stems: Vec<(Stem, StemValues)> = (0..count)
        .map(|_| {
            let mut stem: Stem = rng.random();
            stem[0] = (b >> 8) as u8;
            stem[1] = b as u8;
            let mut v = StemValues::new();
            let mut value: [u8; 32] = rng.random();
            value[0] |= 1;
            v.set(rng.random(), value);
            (stem, v)
        })
        .collect();
    stems.sort_unstable_by_key(|(s, _)| *s);
    stems.dedup_by_key(|(s, _)| *s);
    stems
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [mode, n, g, dir] = args.as_slice() else {
        eprintln!("usage: build sorted|bulk STEMS GROUP_DEPTH DIR");
        std::process::exit(2);
    };
    let n: u64 = n.parse().expect("STEMS: a number");
    let g: u8 = g.parse().expect("GROUP_DEPTH: 1..8");
    let _ = std::fs::remove_dir_all(dir);
    let store = StateStore::open(
        dir,
        &StoreOptions {
            group_depth: Some(g),
            durability: Durability::Relaxed,
            ..Default::default()
        },
    )
    .expect("open");
    let t = Instant::now();
    let root = match mode.as_str() {
        "sorted" => {
            let mut store = store;
            let stems = (0..BUCKETS).flat_map(|b| bucket(n, b)).map(Ok);
            store
                .build_sorted(stems, &[], 1, 64 << 20, &mut |_| {})
                .expect("sorted build")
        }
        "bulk" => {
            let mut trie: Trie<StateStore> = Trie::new(store, g).expect("trie");
            let writes: Vec<(TreeKey, [u8; 32])> = (0..BUCKETS)
                .flat_map(|b| bucket(n, b))
                .flat_map(|(s, v)| {
                    v.iter()
                        .map(|(i, x)| (TreeKey::new(s, i), *x))
                        .collect::<Vec<_>>()
                })
                .collect();
            trie.update(writes).expect("update");
            trie.commit_with(|s, set| s.bulk_load(set, 1, &[]))
                .expect("bulk load")
                .root
        }
        other => panic!("mode {other:?}: sorted or bulk"),
    };
    let secs = t.elapsed().as_secs_f64();
    println!(
        "{mode} {n} stems g{g}: {secs:.1} s ({:.2} us/stem), root 0x{}",
        secs * 1e6 / n as f64,
        root.iter().map(|b| format!("{b:02x}")).collect::<String>()
    );
}
