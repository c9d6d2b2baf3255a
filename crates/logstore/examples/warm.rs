//! Times the trie prefetch of a log on its own: `cargo run --release -p bintrie-logstore
//! --example warm -- DIR [STEMS] [ROUNDS]` opens the log read-only, and for each round evicts
//! it from the page cache and preloads the paths of STEMS random stems (default 641), first
//! through io_uring, then with 32 blocking threads, printing the time and reads of each.

use bintrie_logstore::{LogOptions, LogStore, evict_page_cache};
use std::sync::atomic::AtomicBool;
use std::time::Instant;

/// The argument `name`, or `default` when it is not given; an error that names it when it
/// is not a whole number.
fn number(arg: Option<String>, name: &str, default: u64) -> Result<u64, String> {
    arg.map_or(Ok(default), |text| {
        text.parse()
            .map_err(|e| format!("{name} must be a whole number, not {text:?} ({e})"))
    })
}

fn main() {
    if let Err(e) = run() {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let dir = args.next().ok_or("usage: warm DIR [STEMS] [ROUNDS]")?;
    let n = number(args.next(), "STEMS", 641)? as usize;
    let rounds = number(args.next(), "ROUNDS", 3)?;
    let options = LogOptions {
        read_only: true,
        ..Default::default()
    };
    let t = Instant::now();
    let uring = LogStore::open(&dir, &options).map_err(|e| format!("open: {e}"))?;
    println!(
        "open {:.1} s, {:?}",
        t.elapsed().as_secs_f64(),
        uring.info()
    );
    let blocking_store = LogStore::open(
        &dir,
        &LogOptions {
            io_uring: false,
            ..options
        },
    )
    .map_err(|e| format!("open: {e}"))?;
    let stop = AtomicBool::new(false);
    for round in 0..rounds {
        for blocking in [false, true] {
            let mut x = round.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
            let stems: Vec<[u8; 31]> = (0..n)
                .map(|_| {
                    let mut s = [0u8; 31];
                    for b in &mut s {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        *b = x as u8;
                    }
                    s
                })
                .collect();
            let store = if blocking { &blocking_store } else { &uring };
            store.clear_warm();
            evict_page_cache(dir.as_ref()).map_err(|e| format!("evict: {e}"))?;
            let t = Instant::now();
            let r = store
                .warm_trie_paths(&stems, 32, &stop)
                .map_err(|e| format!("warm: {e}"))?;
            println!(
                "round {round} {}: {:.1} ms, {} reads, {:.0} reads/s",
                if blocking { "blocking x32" } else { "io_uring" },
                t.elapsed().as_secs_f64() * 1e3,
                r.reads,
                r.reads as f64 / t.elapsed().as_secs_f64()
            );
        }
    }
    Ok(())
}
