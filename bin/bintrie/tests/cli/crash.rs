//! The long crash tests, behind an explicit command (`cargo xtask crash-test`, or
//! `cargo test --release -p bintrie --test cli crash:: -- --ignored`): kill -9 a buffered study's
//! write run at random instants and check that the database it leaves always opens at a
//! verified state, never behind a state an earlier round verified. (The import version, with
//! printed roots, runs in the default suite: `db_cli::crash_safety_under_kill_9`.)

use crate::common::*;
use rand::{Rng, SeedableRng, rngs::StdRng};
use std::os::unix::process::ExitStatusExt as _;
use std::process::Stdio;
use std::time::{Duration, Instant};

/// Rounds to run: `BINTRIE_CRASH_ROUNDS`, default 20.
fn rounds() -> usize {
    std::env::var("BINTRIE_CRASH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20)
}

fn bench_args(db_dir: &std::path::Path, out: &std::path::Path) -> Vec<String> {
    [
        "bench",
        "--scale",
        "smoke",
        "--group-depths",
        "5",
        "--workloads",
        "erc20_approve",
        "--read-paths",
        "flat",
        "--prefetch",
        "on",
        "--runs",
        "6",
        "--blocks-per-run",
        "4",
        "--no-progress",
        "--keep-databases",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain([
        "--db-dir".into(),
        db_dir.display().to_string(),
        "--out".into(),
        out.display().to_string(),
    ])
    .collect()
}

#[test]
#[ignore = "long: cargo xtask crash-test"]
fn a_buffered_study_killed_mid_run_leaves_a_verified_database() {
    let dir = tempfile::tempdir().unwrap();
    let db_dir = dir.path().join("dbs");
    let out = dir.path().join("out");
    // Build the database and time one whole write run (6 runs of 4 blocks).
    let started = Instant::now();
    let o = bin().args(bench_args(&db_dir, &out)).output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let db = db_dir.join("db-p4096-g5");
    let mut block = info_json(&db)["block"].as_u64().unwrap();
    let run_time = started.elapsed();
    let mut rng = StdRng::seed_from_u64(13);
    let mut killed = 0;
    for round in 0..rounds() {
        // A fresh --out each round: one holding the first run's report refuses the study at
        // once (and the kill then hit a process that had already exited).
        let mut args = bench_args(&db_dir, &dir.path().join(format!("out-{round}")));
        args.push("--reuse-databases".into());
        let mut child = bin()
            .args(&args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let delay = rng.random_range(0..run_time.as_millis().max(50) as u64);
        std::thread::sleep(Duration::from_millis(delay));
        child.kill().unwrap(); // SIGKILL
        // Counted only when the kill ended it: a study that had failed on its own exits 1.
        let status = child.wait().unwrap();
        assert!(
            status.success() || status.signal() == Some(9),
            "round {round}: the study failed on its own ({status})"
        );
        if status.signal() == Some(9) {
            killed += 1;
        }
        // A writer's open syncs (or replays) what the killed one left, then readers may look.
        for args in [
            &["import", "-i", "/dev/null", "--db"][..],
            &["verify", "--no-progress", "--json", "--db"][..],
        ] {
            let o = bin().args(args).arg(&db).output().unwrap();
            assert!(o.status.success(), "round {round}: {}", stderr(&o));
        }
        let now = info_json(&db)["block"].as_u64().unwrap();
        assert!(
            now >= block,
            "round {round}: back at block {now} after {block}"
        );
        block = now;
    }
    assert!(killed * 2 >= rounds(), "only {killed} kills landed mid-run");
}
