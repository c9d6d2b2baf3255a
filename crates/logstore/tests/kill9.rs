//! kill -9 of a writer at 20 random instants: the log always reopens at a block whose root the
//! writer printed (or the one whose commit had returned just before the kill), and writing on
//! from there converges to the root of the uninterrupted run. The writer's segments are small
//! and compacted as they fill, so compactions run throughout and a kill can land in one.
//!
//! The writer is this test binary run again with `BINTRIE_LOG_KILL9_CHILD` set: it opens the
//! log, commits blocks from the stored one onward and prints `committed BLOCK ROOT` after each.

use bintrie_keys::TreeKey;
use bintrie_logstore::{LogOptions, LogStore};
use bintrie_trie::MemoryStore;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::io::Write as _;
use std::process::{Command, Stdio};
use std::time::Duration;

type Trie<S> = bintrie_trie::Trie<S, bintrie_node::Sha256Hasher>;

const CHILD: &str = "BINTRIE_LOG_KILL9_CHILD";
const BLOCKS: u64 = 600;
const GROUP_DEPTH: u8 = 5;

/// The writes of block `block`: the same in every run.
fn block_writes(block: u64) -> Vec<(TreeKey, [u8; 32])> {
    let mut rng = StdRng::seed_from_u64(block);
    (0..300)
        .map(|_| {
            let mut stem = [0u8; 31];
            rng.fill(&mut stem[..]);
            (TreeKey::new(stem, rng.random()), rng.random())
        })
        .collect()
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The writer: commits blocks after the stored one up to [`BLOCKS`], printing each root.
fn child(dir: &str) {
    let store = LogStore::open(
        dir,
        &LogOptions {
            group_depth: Some(GROUP_DEPTH),
            // Small segments, so that blocks fill them often and compact (the kills land
            // in compactions too).
            segment_bytes: 1 << 20,
            compact_garbage: Some(0.5),
            // A slice a block: a compaction spans blocks, and kills land inside them.
            compact_slice_bytes: 64 << 10,
            ..Default::default()
        },
    )
    .unwrap();
    let meta = store.meta();
    let mut trie = Trie::open(store, GROUP_DEPTH, meta.root).unwrap();
    let mut out = std::io::stdout().lock();
    for block in meta.block + 1..=BLOCKS {
        trie.update(block_writes(block)).unwrap();
        trie.commit_with(|s, set| s.write_block(set, block, &[]))
            .unwrap();
        writeln!(out, "committed {block} {}", hex(&trie.root())).unwrap();
        out.flush().unwrap();
    }
}

#[test]
fn kill_9_at_random_instants_reopens_at_a_printed_block_and_converges() {
    if let Ok(dir) = std::env::var(CHILD) {
        child(&dir);
        return;
    }
    // The root after every block, from a tree in memory.
    let mut reference = Trie::new(MemoryStore::new(), GROUP_DEPTH).unwrap();
    let mut roots = vec![[0u8; 32]];
    for block in 1..=BLOCKS {
        reference.update(block_writes(block)).unwrap();
        roots.push(reference.root());
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_str().unwrap().to_owned();
    let run = |kill_after: Option<Duration>| -> Vec<(u64, String)> {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "kill_9_at_random_instants_reopens_at_a_printed_block_and_converges",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD, &path)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        if let Some(after) = kill_after {
            std::thread::sleep(after);
            let _ = child.kill(); // SIGKILL; it may have finished already
        }
        let out = child.wait_with_output().unwrap();
        String::from_utf8_lossy(&out.stdout)
            .lines()
            // Not only at a line's start: libtest prints `test NAME ... ` without a newline
            // before the test runs, so the writer's first line follows it.
            .filter_map(|l| l.split_once("committed ").map(|(_, rest)| rest))
            .map(|l| {
                let (b, r) = l.split_once(' ').unwrap();
                (b.parse().unwrap(), r.to_owned())
            })
            .collect()
    };
    let mut rng = StdRng::seed_from_u64(99);
    let mut last_printed = 0u64;
    let mut kills_mid_run = 0;
    for i in 0..20 {
        let printed = run(Some(Duration::from_millis(rng.random_range(20..400))));
        for (block, root) in &printed {
            assert_eq!(
                root,
                &hex(&roots[*block as usize]),
                "kill {i}: printed root"
            );
        }
        if let Some(&(b, _)) = printed.last() {
            last_printed = b;
        }
        let meta = LogStore::open(&path, &LogOptions::default())
            .unwrap()
            .meta();
        // A commit may return and the kill come before its line is printed: one block more.
        assert!(
            meta.block == last_printed || meta.block == last_printed + 1,
            "kill {i}: reopened at block {} after block {last_printed} was printed",
            meta.block
        );
        assert_eq!(
            meta.root, roots[meta.block as usize],
            "kill {i}: root of the block"
        );
        last_printed = meta.block;
        if meta.block < BLOCKS {
            kills_mid_run += 1;
        }
    }
    assert!(
        kills_mid_run >= 5,
        "only {kills_mid_run} kills landed mid-run"
    );
    run(None);
    let meta = LogStore::open(&path, &LogOptions::default())
        .unwrap()
        .meta();
    assert_eq!(
        (meta.block, meta.root),
        (BLOCKS, roots[BLOCKS as usize]),
        "converged to the uninterrupted root"
    );
    assert!(
        !dir.path().join("log.000001").exists(),
        "no compaction dropped the first segment"
    );
}
