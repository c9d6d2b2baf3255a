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
//! study's build today). Both print the root, which must be equal. DIR is removed first, so it
//! must be new, empty or a database (`mdbx.dat`): anything else is refused, as is a bad
//! argument (an error, never a panic).

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
    if let Err(e) = run() {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [mode, n, g, dir] = args.as_slice() else {
        return Err("usage: build sorted|bulk STEMS GROUP_DEPTH DIR".into());
    };
    if mode != "sorted" && mode != "bulk" {
        return Err(format!("the mode is `sorted` or `bulk`, not {mode:?}").into());
    }
    let n: u64 = n
        .parse()
        .map_err(|e| format!("STEMS must be a whole number, not {n:?} ({e})"))?;
    let g: u8 = g
        .parse()
        .ok()
        .filter(|g| (1..=8).contains(g))
        .ok_or_else(|| format!("GROUP_DEPTH must be from 1 to 8, not {g:?}"))?;
    // DIR is built afresh: removed first, but only when it is a database of this project (or
    // empty), never a directory of something else.
    let path = std::path::Path::new(dir);
    if path.exists() {
        let is_db = path.join("mdbx.dat").is_file();
        if !is_db && std::fs::read_dir(path)?.next().is_some() {
            return Err(format!(
                "{dir} exists and holds no database: give a new or empty DIR to build in"
            )
            .into());
        }
        std::fs::remove_dir_all(path)?;
    }
    let store = StateStore::open(
        dir,
        &StoreOptions {
            group_depth: Some(g),
            durability: Durability::Relaxed,
            ..Default::default()
        },
    )
    .map_err(|e| format!("open: {e}"))?;
    let t = Instant::now();
    let root = match mode.as_str() {
        "sorted" => {
            let mut store = store;
            let stems = (0..BUCKETS).flat_map(|b| bucket(n, b)).map(Ok);
            store
                .build_sorted(stems, &[], 1, 64 << 20, &mut |_| {})
                .map_err(|e| format!("sorted build: {e}"))?
        }
        "bulk" => {
            let mut trie: Trie<StateStore> =
                Trie::new(store, g).map_err(|e| format!("trie: {e}"))?;
            let writes: Vec<(TreeKey, [u8; 32])> = (0..BUCKETS)
                .flat_map(|b| bucket(n, b))
                .flat_map(|(s, v)| {
                    v.iter()
                        .map(|(i, x)| (TreeKey::new(s, i), *x))
                        .collect::<Vec<_>>()
                })
                .collect();
            trie.update(writes).map_err(|e| format!("update: {e}"))?;
            trie.commit_with(|s, set| s.bulk_load(set, 1, &[]))
                .map_err(|e| format!("bulk load: {e}"))?
                .root
        }
        _ => unreachable!("the mode was checked above"),
    };
    let secs = t.elapsed().as_secs_f64();
    println!(
        "{mode} {n} stems g{g}: {secs:.1} s ({:.2} us/stem), root 0x{}",
        secs * 1e6 / n as f64,
        root.iter().map(|b| format!("{b:02x}")).collect::<String>()
    );
    Ok(())
}
