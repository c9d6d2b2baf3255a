//! What compaction costs a long run of approve-like blocks on the log layout.
//!
//! `cargo run --release -p bintrie-logstore --example compaction -- [BASE_STEMS] [BLOCKS]
//! [SEGMENT_MIB] [SHARE] [DIR] [cold] [IDLE_MS]` (defaults 2000000, 1500, 64, log:0.5,
//! target/compaction-example, warm, 0; `cold`: the log's pages are evicted before every block
//! too, as the study does, outside the blocks' time; IDLE_MS: a pause after every block,
//! outside its time, as a node has between blocks)
//! builds a log of BASE_STEMS random stems at group depth 5 (blocks of 100,000; 0: the log
//! already in DIR, to run two versions from copies of one log; DIR is removed first, so it
//! must be new, empty or a log: anything else is refused), then commits
//! BLOCKS blocks of 641 new random stems each (an approve block's new slots; the base's own
//! garbage compacted first, apart), each through a
//! trie opened on the log's root (nothing kept across blocks). The log is compacted as
//! `LogOptions::compact_garbage` does it inside the block (SHARE `log:S`: after every block
//! that leaves more than S of the log garbage, `LogStore::compact_to(S)`; a plain `S`: each
//! time a block fills a segment, `LogStore::compact(S)`), but called here so that its time
//! and counts are reported apart (SHARE `auto:S`: the option itself, inside the blocks'
//! writes, its time inside the blocks', for the blocks' mean and worst beside a run without
//! it; `bg:S`: the option on its own thread, `LogOptions::compact_background`); the
//! segments' pages are evicted from the page cache first, so the compaction reads them from
//! the device as a node's would. Prints one line per compaction and a summary: compaction
//! milliseconds per block and per written slot (amortized over every block), bytes copied per
//! block beside the bytes a block writes, and the log's bytes against its live bytes at the end.

use bintrie_keys::TreeKey;
use bintrie_logstore::{Durability, LogOptions, LogStore};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::time::Instant;

type Trie = bintrie_trie::Trie<LogStore, bintrie_node::Sha256Hasher>;

const GROUP_DEPTH: u8 = 5;
const SLOTS: usize = 641;

fn stems(rng: &mut StdRng, n: usize) -> Vec<(TreeKey, [u8; 32])> {
    (0..n)
        .map(|_| {
            let mut stem = [0u8; 31];
            rng.fill(&mut stem[..]);
            (TreeKey::new(stem, 0), rng.random())
        })
        .collect()
}

/// `text`, argument `name`, parsed; an error that names it and the text given when it does
/// not parse.
fn parse<T: std::str::FromStr>(text: &str, name: &str) -> Result<T, String>
where
    T::Err: std::fmt::Display,
{
    text.parse()
        .map_err(|e| format!("{name} must be a number, not {text:?} ({e})"))
}

fn main() {
    if let Err(e) = run() {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize, default: &str| args.get(i).cloned().unwrap_or(default.to_string());
    let base: usize = parse(&arg(0, "2000000"), "BASE_STEMS")?;
    let blocks: u64 = parse(&arg(1, "1500"), "BLOCKS")?;
    let segment_mib: u64 = parse(&arg(2, "64"), "SEGMENT_MIB")?;
    if blocks == 0 || !(1..=1 << 20).contains(&segment_mib) {
        return Err("BLOCKS must be at least 1 and SEGMENT_MIB from 1 to 1048576".into());
    }
    // `0.5`: each sealed segment with at least that share of garbage (`LogStore::compact`);
    // `log:0.5`: the emptiest segments first while the log's garbage is above that share
    // (`LogStore::compact_to`, what `LogOptions::compact_garbage` runs).
    // `auto:0.5`: the option itself, inside each block's write (its time is in the blocks').
    let share_arg = arg(3, "log:0.5");
    let background = share_arg.starts_with("bg:");
    let auto = share_arg.starts_with("auto:") || background;
    let (greedy, share) = match share_arg
        .strip_prefix("log:")
        .or_else(|| share_arg.strip_prefix("auto:"))
        .or_else(|| share_arg.strip_prefix("bg:"))
    {
        Some(v) => (true, v),
        None => (false, share_arg.as_str()),
    };
    let share: f64 = parse(share, "SHARE")?;
    if !(0.0..=1.0).contains(&share) {
        return Err(format!("SHARE must be from 0 to 1, not {share}").into());
    }
    let compact = |store: &mut LogStore| {
        if greedy {
            store.compact_to(share)
        } else {
            store.compact(share)
        }
    };
    let dir = std::path::PathBuf::from(arg(4, "target/compaction-example"));
    let cold = match arg(5, "warm").as_str() {
        "cold" => true,
        "warm" => false,
        other => {
            return Err(format!("the sixth argument is `cold` or `warm`, not {other:?}").into());
        }
    };
    let idle = std::time::Duration::from_millis(parse(&arg(6, "0"), "IDLE_MS")?);
    // BASE_STEMS 0: go on from the log already in DIR (to run two versions from copies of
    // one log). Otherwise DIR is built afresh: removed first, but only when it is a log (or
    // empty), never a directory of something else.
    if base > 0 && dir.exists() {
        let is_log = bintrie_logstore::segment_bytes(&dir)? > 0;
        if !is_log && std::fs::read_dir(&dir)?.next().is_some() {
            return Err(format!(
                "{} exists and holds no log: give a new or empty DIR to build a log in",
                dir.display()
            )
            .into());
        }
        std::fs::remove_dir_all(&dir)?;
    }
    let options = LogOptions {
        group_depth: Some(GROUP_DEPTH),
        segment_bytes: segment_mib << 20,
        compact_garbage: None,
        durability: Durability::Durable,
        ..Default::default()
    };
    let t = Instant::now();
    let mut store = LogStore::open(&dir, &options).map_err(|e| format!("open: {e}"))?;
    let mut block = store.meta().block;
    // Stems a log in DIR does not hold yet (a new log: seed 17).
    let mut rng = StdRng::seed_from_u64(17 + block);
    let mut left = base;
    while left > 0 {
        let n = left.min(100_000);
        left -= n;
        block += 1;
        let meta = store.meta();
        let mut trie =
            Trie::open(store, GROUP_DEPTH, meta.root).map_err(|e| format!("trie: {e}"))?;
        trie.update(stems(&mut rng, n))
            .map_err(|e| format!("update: {e}"))?;
        trie.commit_with(|s, set| s.write_block(set, block, &[]))
            .map_err(|e| format!("commit: {e}"))?;
        store = trie.store().clone();
    }
    let built = store.info();
    // The base's own garbage (its blocks rewrote the upper groups) is compacted first, apart:
    // the blocks below then start from a compacted log, as a node that has been compacting.
    let first = compact(&mut store).map_err(|e| format!("compact the base: {e}"))?;
    let start = store.info();
    println!(
        "base: {base} stems in {block} blocks, {:.1} s; log {} MB, live {} MB; compacted to \
         {} MB in {:.1} s; {} segments",
        t.elapsed().as_secs_f64(),
        built.log_bytes >> 20,
        start.live_bytes >> 20,
        start.log_bytes >> 20,
        first.seconds,
        start.segments
    );
    if auto {
        drop(store);
        let auto_options = LogOptions {
            compact_garbage: Some(share),
            compact_background: background,
            ..options.clone()
        };
        store = LogStore::open(&dir, &auto_options)
            .map_err(|e| format!("reopen with the option: {e}"))?;
    }
    let (mut compact_ms, mut copied, mut dropped, mut written) = (0.0, 0u64, 0u64, 0u64);
    let mut compactions = 0;
    let mut block_ms = Vec::with_capacity(blocks as usize);
    // The time between blocks that is not idle: the evictions of `cold` (a compaction thread
    // works through them too).
    let mut evict_ms = 0.0;
    for _ in 0..blocks {
        block += 1;
        let before = store.info();
        let meta = store.meta();
        if cold {
            let t = Instant::now();
            bintrie_logstore::evict_page_cache(&dir).map_err(|e| format!("evict: {e}"))?;
            evict_ms += t.elapsed().as_secs_f64() * 1e3;
        }
        let t = Instant::now();
        let mut trie =
            Trie::open(store, GROUP_DEPTH, meta.root).map_err(|e| format!("trie: {e}"))?;
        trie.update(stems(&mut rng, SLOTS))
            .map_err(|e| format!("update: {e}"))?;
        trie.commit_with(|s, set| s.write_block(set, block, &[]))
            .map_err(|e| format!("commit: {e}"))?;
        block_ms.push(t.elapsed().as_secs_f64() * 1e3);
        store = trie.store().clone();
        drop(trie);
        if !idle.is_zero() {
            std::thread::sleep(idle);
        }
        let after = store.info();
        written += after.log_bytes.saturating_sub(before.log_bytes);
        // As the option does: after every block whose log is more than the share garbage
        // (`log:`), or each time a block fills a segment (a plain share).
        let over = after.garbage_bytes() as f64 > share * after.log_bytes as f64;
        if !auto && ((greedy && over) || (!greedy && after.segments > before.segments)) {
            bintrie_logstore::evict_page_cache(&dir).map_err(|e| format!("evict: {e}"))?;
            let c = compact(&mut store).map_err(|e| format!("compact: {e}"))?;
            compact_ms += c.seconds * 1e3;
            copied += c.copied_bytes;
            dropped += c.dropped_bytes;
            if !c.dropped.is_empty() {
                compactions += 1;
            }
            if c.dropped.is_empty() {
                continue;
            }
            println!(
                "block {block}: compaction dropped {} segments ({} MB), copied {} records ({} MB) in {:.1} ms; log {} MB, live {} MB",
                c.dropped.len(),
                c.dropped_bytes >> 20,
                c.copied_records,
                c.copied_bytes >> 20,
                c.seconds * 1e3,
                store.info().log_bytes >> 20,
                store.info().live_bytes >> 20
            );
        }
    }
    let t = Instant::now();
    store.wait_for_compaction();
    let waited = t.elapsed().as_secs_f64() * 1e3;
    let block_sum: f64 = block_ms.iter().sum();
    block_ms.sort_by(|a, b| a.total_cmp(b));
    println!(
        "blocks: mean {:.2} ms, p99 {:.2} ms, max {:.2} ms (with `auto:`, the compaction is inside them; \
         with `bg:`, {waited:.1} ms more for its last steps); evictions {:.2} ms per block",
        block_sum / blocks as f64,
        block_ms[block_ms.len() * 99 / 100],
        block_ms[block_ms.len() - 1],
        evict_ms / blocks as f64
    );
    let end = store.info();
    let n = blocks as f64;
    println!(
        "{blocks} blocks of {SLOTS} new stems, segments {segment_mib} MiB, share {share_arg}: \
         block median {:.2} ms; {compactions} compactions, {:.1} ms in all = {:.3} ms per block, \
         {:.5} ms per written slot; copied {:.2} MB per block beside {:.2} MB written by the \
         blocks; dropped {} MB; log {} MB for {} MB live ({:.2}x), {} segments",
        block_ms[block_ms.len() / 2],
        compact_ms,
        compact_ms / n,
        compact_ms / (n * SLOTS as f64),
        copied as f64 / n / 1e6,
        written as f64 / n / 1e6,
        dropped >> 20,
        end.log_bytes >> 20,
        end.live_bytes >> 20,
        end.log_bytes as f64 / end.live_bytes.max(1) as f64,
        end.segments
    );
    Ok(())
}
