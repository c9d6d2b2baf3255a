//! How long one block's index update takes when a table of the log's index has to grow, and
//! with the room `LogStore::open` now reserves (an eighth more than the entries).
//!
//! `cargo run --release -p bintrie-logstore --example index_growth grow|reserved [ENTRIES]`
//! fills a table (path key to location, as the index's) to just below the point where a table
//! of about ENTRIES entries (default 14.5M; the GD-5 index at 16M stems holds about 17M nodes)
//! must grow; `reserved` then reserves room for an eighth more, untimed, as the open does.
//! Then it times 60 blocks of an approve block's index changes (3,500 writes, 1,300 of them
//! new, and 130 removals), by which an unreserved table has grown, and prints the median and
//! the worst block. Run the two in separate processes (each its own heap).

use bintrie_node::{Path, PathKey};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::HashMap;
use std::time::Instant;

type Table = HashMap<PathKey, u64, foldhash::fast::RandomState>;

fn key(rng: &mut StdRng) -> PathKey {
    let mut stem = [0u8; 31];
    rng.fill(&mut stem[..]);
    Path::from_stem_prefix(&stem, 64 + (stem[30] % 8) as usize).to_key()
}

fn run(name: &str, reserve: bool, fill: usize, blocks: usize) {
    let mut map = Table::default();
    let mut rng = StdRng::seed_from_u64(7);
    let mut keys = Vec::with_capacity(fill);
    for i in 0..fill {
        let k = key(&mut rng);
        map.insert(k, i as u64);
        keys.push(k);
    }
    if reserve {
        map.reserve(map.len() / 8);
    }
    let mut times = Vec::with_capacity(blocks);
    for b in 0..blocks {
        let batch: Vec<(PathKey, bool)> = (0..3_500)
            .map(|i| {
                if i < 1_300 {
                    (key(&mut rng), false)
                } else {
                    (keys[rng.random_range(0..keys.len())], i >= 3_370)
                }
            })
            .collect();
        let t = Instant::now();
        for (k, remove) in &batch {
            if *remove {
                map.remove(k);
            } else {
                map.insert(*k, b as u64);
            }
        }
        times.push(t.elapsed().as_secs_f64() * 1e3);
    }
    let mut sorted = times.clone();
    sorted.sort_by(|a, b| a.total_cmp(b));
    println!(
        "{name}: {} entries, {blocks} blocks: median {:.2} ms, worst {:.1} ms, blocks over 20 ms: {}",
        map.len(),
        sorted[sorted.len() / 2],
        sorted[sorted.len() - 1],
        times.iter().filter(|&&t| t > 20.0).count()
    );
}

fn main() {
    let mut args = std::env::args().skip(1);
    let which = args.next().unwrap_or_default();
    let usage = |why: &str| -> ! {
        eprintln!(
            "{why}\nusage: index_growth grow|reserved [ENTRIES] (ENTRIES from 100000 to 500000000)"
        );
        std::process::exit(2);
    };
    let entries: usize = match args.next() {
        None => 14_500_000,
        Some(a) => match a.parse() {
            // Below that the fill point (40,000 under a growth) is not above zero; above it
            // the table alone outgrows most machines.
            Ok(n) if (100_000..=500_000_000).contains(&n) => n,
            _ => usage(&format!(
                "ENTRIES must be a whole number from 100000 to 500000000, not {a:?}"
            )),
        },
    };
    // A table holds 7/8 of its power-of-two buckets before it grows.
    let buckets = (entries * 8 / 7).next_power_of_two();
    let fill = buckets / 8 * 7 - 40_000;
    match which.as_str() {
        "grow" => run("one table", false, fill, 60),
        "reserved" => run("room reserved", true, fill, 60),
        other => usage(&format!("unknown mode {other:?}")),
    }
}
