//! The study pipeline end to end on a tiny state: the contracts behave as the runner assumes,
//! and every workload produces the work it claims.

use alloy_primitives::{Address, U256};
use bintrie_bench::contracts::{self, DRIVER, SENDER, TOKEN};
use bintrie_bench::model::{ReadPath, RunRow, Scale, StudyConfig, Workload};
use bintrie_bench::runner::{StudyOptions, run_study, workload_accounts};
use bintrie_revm::{BinTrieState, BlockDbOptions};
use bintrie_store::StoreOptions;
use revm::context::result::{ExecutionResult, Output};
use revm::context::{Context, TxEnv};
use revm::primitives::hardfork::SpecId;
use revm::{ExecuteEvm, MainBuilder, MainContext};

fn call(state: &BinTrieState, to: Address, data: alloy_primitives::Bytes) -> U256 {
    let mut db = state.block_db(BlockDbOptions::default()).unwrap();
    let mut evm = Context::mainnet()
        .modify_cfg_chained(|c| c.set_spec_and_mainnet_gas_params(SpecId::PRAGUE))
        .modify_block_chained(|b| b.basefee = 0)
        .with_db(&mut db)
        .build_mainnet();
    let tx = TxEnv::builder()
        .caller(SENDER)
        .to(to)
        .data(data)
        .gas_limit(1_000_000)
        .gas_price(0)
        .build()
        .unwrap();
    match evm.transact(tx).unwrap().result {
        ExecutionResult::Success {
            output: Output::Call(out),
            ..
        } => U256::from_be_slice(&out[..32]),
        other => panic!("call failed: {other:?}"),
    }
}

#[test]
fn token_storage_layout_matches_the_compiled_contract() {
    let dir = tempfile::tempdir().unwrap();
    let mut state = BinTrieState::open(dir.path(), &StoreOptions::default()).unwrap();
    let accounts = workload_accounts(3);
    state
        .import_accounts(accounts.iter().map(|(a, s)| (a, s)), 1)
        .unwrap();
    let one = U256::from(1_000_000_000_000_000_000u128);
    let holder = contracts::counter_address(U256::from(1u64 << 32));
    assert_eq!(call(&state, TOKEN, contracts::balance_of(holder)), one);
    let third = contracts::counter_address(U256::from((1u64 << 32) + 2));
    assert_eq!(call(&state, TOKEN, contracts::balance_of(third)), one);
    let absent = contracts::counter_address(U256::from((1u64 << 32) + 3));
    assert_eq!(
        call(&state, TOKEN, contracts::balance_of(absent)),
        U256::ZERO
    );
    assert_eq!(
        call(&state, TOKEN, contracts::total_supply()),
        one * U256::from(3)
    );
    // The driver reads its own pre-populated slots 0..n (values i + 1): 1 + 2 + 3 + 4.
    let sum = call(&state, DRIVER, contracts::sload_loop(0, 4));
    assert_eq!(sum, U256::from(10));
    assert_eq!(
        call(&state, TOKEN, contracts::allowance(DRIVER, holder)),
        U256::ZERO
    );
}

fn rows(rows: &[RunRow], w: Workload) -> impl Iterator<Item = &RunRow> {
    rows.iter().filter(move |r| r.key.workload == w)
}

#[test]
fn tiny_study_measures_every_cell_with_the_work_each_workload_claims() {
    let dir = tempfile::tempdir().unwrap();
    let config = StudyConfig {
        stems: 2_000,
        holders: 200,
        group_depths: vec![1, 6],
        runs: 2,
        ..StudyConfig::for_scale(Scale::Smoke)
    };
    let mut opts = StudyOptions::new(config, dir.path().join("dbs"));
    opts.progress = false;
    let results = run_study(&opts).unwrap();
    // 2 group depths x 5 workloads x 2 read paths x 2 prefetch x 2 runs.
    assert_eq!(results.runs.len(), 2 * 5 * 2 * 2 * 2);
    assert_eq!(results.databases.len(), 2);
    assert!(
        !dir.path().join("dbs/db-p4096-g1").exists(),
        "databases are deleted when done"
    );
    for r in &results.runs {
        assert!(r.gas > 1_000_000 && r.gas <= 1 << 24, "{r:?}");
        assert!(r.total_ms > 0.0 && r.mgas_s > 0.0);
        assert_eq!(r.kept, r.run > 0);
        assert!(r.state_read_ms <= r.total_ms);
    }
    // Reads: thousands of distinct balance slots, nothing written but the sender's nonce.
    for r in rows(&results.runs, Workload::Erc20Balanceof) {
        assert!(r.cold_reads > 1_000, "{r:?}");
        assert_eq!(r.slots_written, 0);
    }
    // Every block's witness: each read and written key, multiproof smaller than the blobs;
    // the multiproof is the same tree at every group depth (same seed, same blocks).
    for r in &results.runs {
        let keys = r.witness_keys.unwrap();
        assert!(keys >= r.slots_written, "{r:?}");
        let (m, b) = (
            r.witness_multiproof_bytes.unwrap(),
            r.witness_blobs_bytes.unwrap(),
        );
        assert!(m > 32 * r.slots_written && m < b, "{r:?}");
    }
    let multiproof = |g: u8| {
        rows(&results.runs, Workload::Erc20Approve)
            .filter(|r| r.key.group_depth == g && r.run == 1)
            .map(|r| r.witness_multiproof_bytes)
            .collect::<Vec<_>>()
    };
    assert_eq!(multiproof(1), multiproof(6));
    // Approve: hundreds of brand-new slots per block.
    for r in rows(&results.runs, Workload::Erc20Approve) {
        assert!(r.slots_written > 300, "{r:?}");
        assert!(r.hashes > 0 && r.hash_floor.is_some());
    }
    for r in rows(&results.runs, Workload::Mixed) {
        assert!(r.slots_written > 100 && r.cold_reads > 500, "{r:?}");
    }
    // Sequential slots: 256 share a stem, so few keys cover thousands of reads.
    for r in rows(&results.runs, Workload::SloadBenchmark) {
        assert!(r.cold_reads < 100, "{r:?}");
    }
    // zero->nonzero, nonzero->other change; nonzero->same and zero->zero do not.
    for r in rows(&results.runs, Workload::SstoreVariants) {
        assert!(r.slots_written > 100, "{r:?}");
    }
    // The flat path reads one blob per key; the trie walk reads several at group depth 1.
    let per_key = |rp, g| {
        let v: Vec<f64> = rows(&results.runs, Workload::Erc20Balanceof)
            .filter(|r| r.key.read_path == rp && r.key.group_depth == g)
            .map(|r| r.store_reads as f64 / r.cold_reads as f64)
            .collect();
        v.iter().sum::<f64>() / v.len() as f64
    };
    assert!(per_key(ReadPath::Flat, 1) < 1.1);
    assert!(per_key(ReadPath::TrieWalk, 1) > 3.0 * per_key(ReadPath::TrieWalk, 6));
}

#[test]
fn the_log_layout_runs_the_same_blocks_as_mdbx() {
    use bintrie_bench::model::Layout;
    let dir = tempfile::tempdir().unwrap();
    let config = StudyConfig {
        stems: 2_000,
        holders: 200,
        group_depths: vec![4],
        workloads: vec![Workload::Erc20Approve, Workload::Erc20Balanceof],
        read_paths: vec![ReadPath::Flat],
        prefetch: vec![true],
        runs: 2,
        blocks_per_run: 2,
        witness: false,
        layouts: vec![Layout::Log, Layout::Mdbx],
        // The log keeps its upper levels (all of this small tree) in memory: a stale one
        // would fail the trie's hash checks.
        log_pinned_mib: 1,
        ..StudyConfig::for_scale(Scale::Smoke)
    };
    let mut opts = StudyOptions::new(config.clone(), dir.path().join("dbs"));
    opts.progress = false;
    let results = run_study(&opts).unwrap();
    // 2 layouts x 2 workloads x 2 runs x 2 blocks.
    assert_eq!(results.runs.len(), 2 * 2 * 2 * 2);
    let log: Vec<&RunRow> = results
        .runs
        .iter()
        .filter(|r| r.key.layout == Layout::Log)
        .collect();
    let mdbx: Vec<&RunRow> = results
        .runs
        .iter()
        .filter(|r| r.key.layout == Layout::Mdbx)
        .collect();
    assert_eq!(log.len(), mdbx.len());
    // Same blocks on the same state: the same gas, reads and writes, block by block.
    for (a, b) in log.iter().zip(&mdbx) {
        assert_eq!(
            (a.key.workload, a.run, a.block_in_run),
            (b.key.workload, b.run, b.block_in_run)
        );
        assert_eq!(
            (a.gas, a.slots_read, a.slots_written),
            (b.gas, b.slots_read, b.slots_written),
            "{a:?}\n{b:?}"
        );
        assert!(a.bytes_written > 0 && a.device_reads.is_some(), "{a:?}");
        // The block's CPU time: something was computed, and no more than every core for
        // the whole block (plus a scheduler tick of slack).
        for row in [a, b] {
            let cpu = row.cpu_ms.expect("recorded");
            let cpus = results.machine.cpus as f64;
            assert!(cpu > 0.0 && cpu <= cpus * row.total_ms + 10.0, "{row:?}");
        }
    }
    let info = results
        .databases
        .iter()
        .find(|d| d.layout == Layout::Log)
        .unwrap();
    assert!(
        info.index_bytes.unwrap() > 0 && info.stems > 2_000,
        "{info:?}"
    );
    assert!(
        !dir.path().join("dbs/db-p4096-g4-log").exists(),
        "deleted when done"
    );

    // Keeping the log's upper levels needs the log layout.
    let bad = StudyConfig {
        layouts: vec![Layout::Mdbx],
        ..config.clone()
    };
    let err = bad.validate().unwrap_err().to_string();
    assert!(
        err.contains("--log-pinned-mib applies to the log layout"),
        "{err}"
    );

    // Keeping the stem table's branch pages needs the MDBX layout.
    let bad = StudyConfig {
        layouts: vec![Layout::Log],
        warm_branches: true,
        ..config.clone()
    };
    let err = bad.validate().unwrap_err().to_string();
    assert!(
        err.contains("--warm-branches applies to the MDBX layout"),
        "{err}"
    );

    // The log layout has no trie-walk read path.
    let bad = StudyConfig {
        read_paths: vec![ReadPath::TrieWalk, ReadPath::Flat],
        ..config
    };
    let err = bad.validate().unwrap_err().to_string();
    assert!(err.contains("--read-paths flat"), "{err}");
}

/// What each block of a study did, as far as it follows from the state it ran on (gas, slots
/// read and written, bytes written, hashes, blobs loaded).
fn block_facts(results: &bintrie_bench::model::Results) -> Vec<(u64, u64, u64, u64, u64, u64)> {
    results
        .runs
        .iter()
        .map(|r| {
            (
                r.gas,
                r.slots_read,
                r.slots_written,
                r.bytes_written,
                r.hashes,
                r.nodes_loaded,
            )
        })
        .collect()
}

/// With the stem table's branch pages put back before each block (`warm_branches`), a study
/// on MDBX runs exactly the blocks it runs with every page evicted (the warm-up only reads),
/// and says so in its results.
#[test]
fn warming_the_branch_pages_changes_no_block() {
    use bintrie_bench::model::Layout;
    let blocks = |warm: bool| {
        let dir = tempfile::tempdir().unwrap();
        let mut opts = tiny_approve_study(dir.path().join("dbs"), 2, Layout::Mdbx);
        opts.config.warm_branches = warm;
        let results = run_study(&opts).unwrap();
        assert_eq!(results.config.warm_branches, warm);
        block_facts(&results)
    };
    let evicted = blocks(false);
    assert_eq!(evicted.len(), 2 * 2);
    assert_eq!(blocks(true), evicted);
}

/// A study of two runs of `blocks_per_run` approve blocks on a 2,000-stem state at GD-4, in
/// `layout`, with its databases in `dbs`: no progress bars, no probe of the drive.
fn tiny_approve_study(
    dbs: std::path::PathBuf,
    blocks_per_run: u32,
    layout: bintrie_bench::model::Layout,
) -> StudyOptions {
    let config = StudyConfig {
        stems: 2_000,
        holders: 200,
        group_depths: vec![4],
        workloads: vec![Workload::Erc20Approve],
        read_paths: vec![ReadPath::Flat],
        prefetch: vec![true],
        runs: 2,
        blocks_per_run,
        witness: false,
        layouts: vec![layout],
        ..StudyConfig::for_scale(Scale::Smoke)
    };
    let mut opts = StudyOptions::new(config, dbs);
    opts.progress = false;
    opts.probe_disk = false;
    opts
}

/// With databases kept and reused, the log layout's copy is cut back to the state it was
/// copied at (the blocks the previous invocation ran on it dropped) instead of copied again,
/// and runs exactly the blocks a fresh copy runs; a record of that state that does not hold
/// is not trusted: the database is copied again.
#[test]
fn a_reused_log_copy_is_cut_back_and_runs_the_blocks_a_fresh_copy_runs() {
    use bintrie_bench::model::Layout;
    let dir = tempfile::tempdir().unwrap();
    let mut opts = tiny_approve_study(dir.path().join("dbs"), 3, Layout::Log);
    opts.keep_databases = true;
    opts.reuse_databases = true;
    let log_dir = dir.path().join("dbs/db-p4096-g4-log");
    // A file in the log's directory that tells whether it was copied again (a copy starts
    // from an empty directory): named as a bench database's file (the study deletes no
    // directory holding anything else), one a log copy never makes.
    let marker = log_dir.join("journal");
    let blocks = |opts: &StudyOptions| block_facts(&run_study(opts).unwrap());
    let fresh = blocks(&opts);
    assert_eq!(fresh.len(), 2 * 3);
    assert!(log_dir.join("bench-base.json").exists());
    std::fs::write(&marker, b"").unwrap();
    // While another handle has the copy open for writing (another study on the same
    // --db-dir), the invocation fails and leaves the copy alone.
    {
        let other = bintrie_logstore::LogStore::open(&log_dir, &Default::default()).unwrap();
        let err = run_study(&opts).unwrap_err();
        assert!(format!("{err:#}").contains("another process"), "{err:#}");
        assert!(marker.exists(), "not deleted under the other handle");
        drop(other);
    }
    // Reused: cut back, not copied again, and the same blocks.
    assert_eq!(blocks(&opts), fresh);
    assert!(marker.exists(), "the log was not copied again");
    // A record that does not hold is not trusted: one that names another state, and one
    // whose end cuts the copy short (the log then opens at another state, or not at all):
    // copied again, and still the same blocks.
    let record = log_dir.join("bench-base.json");
    // Hostile records too: a root that is not hex, a negative offset.
    for (field, value) in [
        ("block", serde_json::json!(7)),
        ("offset", serde_json::json!(100)),
        ("root", serde_json::json!("0xé")),
        ("offset", serde_json::json!(-1)),
    ] {
        let mut base: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&record).unwrap()).unwrap();
        base[field] = value;
        std::fs::write(&record, base.to_string()).unwrap();
        std::fs::write(&marker, b"").unwrap();
        assert_eq!(blocks(&opts), fresh, "{field}");
        assert!(!marker.exists(), "{field}: copied again");
    }
    // The MDBX database is reused only for the state it was built from: another seed or size
    // is refused by name (it used to be measured and reported as the state asked for), and
    // so is a database that records nothing.
    let built_from = dir.path().join("dbs/db-p4096-g4/bench-built-from.json");
    assert!(built_from.exists());
    for change in [
        (|o: &mut StudyOptions| o.config.seed += 1) as fn(&mut StudyOptions),
        |o| o.config.stems += 1,
    ] {
        let mut other = tiny_approve_study(dir.path().join("dbs"), 3, Layout::Log);
        other.keep_databases = true;
        other.reuse_databases = true;
        change(&mut other);
        let err = format!("{:#}", run_study(&other).unwrap_err());
        assert!(err.contains("was built from"), "{err}");
    }
    std::fs::remove_file(&built_from).unwrap();
    let err = format!("{:#}", run_study(&opts).unwrap_err());
    assert!(
        err.contains("does not record what it was built from"),
        "{err}"
    );
}

/// Two studies on one `--db-dir` would delete each other's databases (a study removes a
/// stale database before it builds, and a log copy before it copies): the second fails at
/// once and touches nothing there; once the first has ended, it runs.
#[test]
fn a_second_study_on_the_same_database_directory_is_refused_and_deletes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let dbs = dir.path().join("dbs");
    let opts = tiny_approve_study(dbs.clone(), 1, bintrie_bench::model::Layout::Mdbx);
    // What the second study would delete first: a database it takes for stale, an earlier
    // study's (its mark, `bench-database`: the study deletes no directory without one of its
    // records). Its other file is named as a bench database's file (the study deletes no
    // directory holding anything else), one an MDBX database never holds.
    let stale = dbs.join("db-p4096-g4");
    std::fs::create_dir_all(&stale).unwrap();
    std::fs::write(stale.join("bench-database"), b"").unwrap();
    std::fs::write(stale.join("index-sizes"), b"").unwrap();
    // The first study, as another process holds it.
    let lock = bintrie_bench::runner::lock_db_dir(&dbs).unwrap();
    let err = run_study(&opts).unwrap_err();
    assert!(
        format!("{err:#}").contains("another `bintrie bench` is using"),
        "{err:#}"
    );
    assert!(stale.join("index-sizes").exists(), "nothing deleted");
    drop(lock);
    // The first has ended: this one runs (and replaces the stale database), twice over, as
    // each study lets go of the lock when it ends.
    for _ in 0..2 {
        assert_eq!(run_study(&opts).unwrap().runs.len(), 2);
    }
    assert!(!stale.join("index-sizes").exists());
}
