//! `bintrie exec` end to end on the mainnet fixtures: every block validates (gas, receipts root,
//! logs bloom, requests hash, and every post value the fixture records), the JSON report has its
//! keys, the modes agree on the root, read amplification is exactly 1 with the cache and above 1
//! without, and malformed or tampered fixtures fail naming the problem.

use crate::common::*;

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const ZKPI_PRAGUE: &str = "22615247-prague.zkpi.json";
const ZKPI_CANCUN: &str = "22188088-cancun.zkpi.json";
const BLOCK: &str = "19426587-cancun.block.json";
const PRE_STATE: &str = "19426587-cancun.pre_state.json";
const RPCCACHE: &str = "21230867-cancun.rpccache.json.gz";

fn exec(fixture: &Path, extra: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_bintrie"))
        .arg("exec")
        .arg("--fixture")
        .arg(fixture)
        .arg("--relaxed")
        .args(extra)
        .output()
        .unwrap()
}

/// Runs `exec --json`, asserts success, and returns the report.
fn exec_json(fixture: &Path, extra: &[&str]) -> Value {
    let mut args = vec!["--json"];
    args.extend_from_slice(extra);
    let out = exec(fixture, &args);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "exec {} {extra:?} failed:\nstdout: {stdout}\nstderr: {}",
        fixture.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}"))
}

/// Runs `exec`, asserts failure, and returns stdout + stderr.
fn exec_fails(fixture: &Path, extra: &[&str]) -> String {
    let out = exec(fixture, extra);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        !out.status.success(),
        "exec {} {extra:?} should fail:\n{text}",
        fixture.display()
    );
    text
}

fn assert_report(j: &Value, block: u64, gas: u64, transactions: u64, post_values: bool) {
    for key in [
        "block",
        "gas_used",
        "valid",
        "mgas_per_s",
        "read_amplification",
        "keys_read",
        "keys_written",
        "timings_ms",
        "root",
        "transactions",
        "store_reads",
        "errors",
    ] {
        assert!(j.get(key).is_some(), "report lacks `{key}`: {j}");
    }
    for key in ["state_read", "execution", "trie_update", "commit"] {
        assert!(
            j["timings_ms"][key].as_f64().is_some_and(|t| t >= 0.0),
            "timings_ms.{key}: {j}"
        );
    }
    assert_eq!(j["valid"], true, "{j}");
    assert_eq!(j["block"], block);
    assert_eq!(j["gas_used"], gas);
    assert_eq!(j["transactions"], transactions);
    for check in ["gas_used", "receipts_root", "logs_bloom", "fixture"] {
        assert_eq!(j["checks"][check], true, "check {check}: {j}");
    }
    if post_values {
        assert_eq!(j["checks"]["post_state"], true, "{j}");
        assert!(j["post_accounts_checked"].as_u64().unwrap() > 0, "{j}");
        assert!(j["post_slots_checked"].as_u64().unwrap() > 0, "{j}");
    } else {
        assert!(j["checks"].get("post_state").is_none(), "{j}");
    }
    assert!(j["keys_read"].as_u64().unwrap() > 0);
    assert!(j["keys_written"].as_u64().unwrap() > 0);
    assert!(j["mgas_per_s"].as_f64().unwrap() > 0.0);
    let root = j["root"].as_str().unwrap();
    assert!(root.starts_with("0x") && root.len() == 66, "{root}");
    // With the per-block cache every key is read from the store exactly once.
    assert_eq!(j["read_amplification"].as_f64().unwrap(), 1.0, "{j}");
}

#[test]
fn prague_zkpi_block_validates_with_requests_hash_and_post_state() {
    let j = exec_json(&fixture(ZKPI_PRAGUE), &[]);
    assert_report(&j, 22_615_247, 1_331_413, 26, true);
    assert_eq!(j["spec"], "PRAGUE");
    assert_eq!(j["checks"]["requests_hash"], true, "{j}");
    assert_eq!(j["checks"]["blob_gas_used"], true, "{j}");
}

#[test]
fn cancun_zkpi_block_validates_with_post_state() {
    let j = exec_json(&fixture(ZKPI_CANCUN), &[]);
    assert_report(&j, 22_188_088, 1_290_555, 28, true);
    assert_eq!(j["spec"], "CANCUN");
    assert!(j["checks"].get("requests_hash").is_none(), "{j}");
}

/// This snapshot lacks the beacon-roots contract and the withdrawal recipients, and records no
/// post values: it validates the transactions (gas, receipts root, logs bloom) only.
#[test]
fn rpc_block_with_pre_state_validates_its_transactions() {
    let j = exec_json(
        &fixture(BLOCK),
        &["--pre-state", fixture(PRE_STATE).to_str().unwrap()],
    );
    assert_report(&j, 19_426_587, 2_633_933, 37, false);
    // The pre-state file next to the block is found without --pre-state.
    let j2 = exec_json(&fixture(BLOCK), &[]);
    assert_eq!(j2["root"], j["root"]);
}

#[test]
fn rpccache_block_validates_with_proofs_at_the_block() {
    let j = exec_json(&fixture(RPCCACHE), &[]);
    assert_report(&j, 21_230_867, 3_657_314, 67, true);
    assert_eq!(j["post_accounts_checked"], 187);
}

/// Without the cache every access goes to the store: read amplification rises above 1 on every
/// block (the default is exactly 1.00, asserted above), and the result does not change.
#[test]
fn no_cache_amplifies_reads_and_modes_agree_on_the_root() {
    let mut amplified = Vec::new();
    for name in [ZKPI_PRAGUE, RPCCACHE] {
        let f = fixture(name);
        let base = exec_json(&f, &[]);
        let no_cache = exec_json(&f, &["--no-cache"]);
        assert_eq!(no_cache["valid"], true);
        assert_eq!(no_cache["root"], base["root"], "{name}: --no-cache root");
        let amp = no_cache["read_amplification"].as_f64().unwrap();
        assert!(
            no_cache["store_reads"].as_u64() > base["store_reads"].as_u64(),
            "{name}: {no_cache}"
        );
        amplified.push((name, amp));
        for mode in [
            &["--no-prefetch"][..],
            &["--no-block-access-list"],
            &["--read-path", "trie", "-g", "3"],
        ] {
            let j = exec_json(&f, mode);
            assert_eq!(j["root"], base["root"], "{name} {mode:?}");
            assert_eq!(j["read_amplification"].as_f64().unwrap(), 1.0, "{j}");
        }
    }
    println!("read amplification without the cache: {amplified:?}");
    assert!(amplified.iter().all(|(_, a)| *a > 1.0), "{amplified:?}");
}

#[test]
fn cold_run_evicts_and_validates_into_a_kept_database() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let j = exec_json(
        &fixture(ZKPI_CANCUN),
        &["--cold", "--db", db.to_str().unwrap()],
    );
    assert_eq!(j["valid"], true);
    assert_eq!(j["mode"]["cold"], true);
    let base = exec_json(&fixture(ZKPI_CANCUN), &[]);
    assert_eq!(j["root"], base["root"]);
    assert!(db.join("mdbx.dat").is_file());
    // The database now holds the block: a second exec into it is refused before the fixture
    // is read, and so is a directory of other files.
    let text = exec_fails(&fixture(ZKPI_CANCUN), &["--db", db.to_str().unwrap()]);
    assert!(
        text.contains("already holds a database (MDBX): `exec --db` imports the pre-state"),
        "{text}"
    );
    let other = dir.path().join("notes");
    std::fs::create_dir(&other).unwrap();
    std::fs::write(other.join("notes.txt"), "mine").unwrap();
    let text = exec_fails(&fixture(ZKPI_CANCUN), &["--db", other.to_str().unwrap()]);
    assert!(
        text.contains("is not empty, and holds no database"),
        "{text}"
    );
    assert_eq!(std::fs::read_dir(&other).unwrap().count(), 1);
}

/// `--base-stems`: the block validates on top of a random base; a kept base is reused (copied,
/// same root as a base built in place), and a base of other parameters, or a database that is
/// not a base, is refused by name.
#[test]
fn a_block_validates_on_a_random_base_which_is_kept_and_reused() {
    let dir = tempfile::tempdir().unwrap();
    let keep = dir.path().join("base");
    let keep_s = keep.to_str().unwrap();
    let f = fixture(ZKPI_CANCUN);
    let plain = exec_json(&f, &[]);
    let built = exec_json(
        &f,
        &["--base-stems", "20000", "--base-db", keep_s, "--cold"],
    );
    assert_eq!(built["valid"], true, "{built}");
    assert_eq!(built["base_stems"], 20000);
    assert!(built["base"]["reused_from"].is_null(), "{built}");
    assert!(built["base"]["build_s"].as_f64().unwrap() > 0.0);
    // The base's stems are in the tree: another root than the block's alone.
    assert_ne!(built["root"], plain["root"]);
    assert!(keep.join("base.json").is_file() && keep.join("mdbx.dat").is_file());

    let reused = exec_json(&f, &["--base-stems", "20000", "--base-db", keep_s]);
    assert_eq!(reused["base"]["reused_from"], keep_s);
    assert_eq!(reused["root"], built["root"]);
    let in_place = exec_json(&f, &["--base-stems", "20000"]);
    assert_eq!(in_place["root"], built["root"]);
    assert_eq!(in_place["base"]["root"], built["base"]["root"]);
    assert_eq!(plain["base_stems"], 0);
    // A kept base and a new --db, both given: two directories, the copy goes to --db.
    let db2 = dir.path().join("db2");
    let db2_s = db2.to_str().unwrap();
    let copied = exec_json(
        &f,
        &["--base-stems", "20000", "--base-db", keep_s, "--db", db2_s],
    );
    assert_eq!(copied["root"], built["root"]);
    assert!(db2.join("mdbx.dat").is_file());
    // The same directory twice is refused, whatever the stems (with 0, no base is built, and
    // it used to write into the kept base's directory) and the layout.
    for extra in [
        &["--base-stems", "20000"][..],
        &["--base-stems", "0"],
        &["--base-stems", "20000", "--layout", "log"],
    ] {
        let text = exec_fails(
            &f,
            &[extra, &["--base-db", keep_s, "--db", keep_s]].concat(),
        );
        assert!(
            text.contains("must be different directories"),
            "{extra:?}: {text}"
        );
    }

    // A kept base of no stems is refused, not ignored.
    let text = exec_fails(&f, &["--base-stems", "0", "--base-db", keep_s]);
    assert!(text.contains("--base-stems 0 asks for none"), "{text}");

    // Refused: a --db the run made is removed again; one given empty is left alone (empty).
    let db3 = dir.path().join("db3");
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    for new_db in [&db3, &empty] {
        let text = exec_fails(
            &f,
            &[
                "--base-stems",
                "20000",
                "--base-seed",
                "1",
                "--base-db",
                keep_s,
                "--db",
                new_db.to_str().unwrap(),
            ],
        );
        assert!(
            text.contains("holds a base of 20000 stems (seed 7864"),
            "{text}"
        );
    }
    assert!(!db3.exists());
    assert_eq!(std::fs::read_dir(&empty).unwrap().count(), 0);
    // A database that exec did not make as a base.
    let db = dir.path().join("db");
    exec_json(&f, &["--db", db.to_str().unwrap()]);
    let text = exec_fails(
        &f,
        &["--base-stems", "20000", "--base-db", db.to_str().unwrap()],
    );
    assert!(text.contains("not a base made by"), "{text}");
    // Refused before anything is written there: no lock file left beside the database.
    assert!(!db.join("base.lock").exists());
    // A log state, and a directory of the user's files: refused, and left as they were (a
    // base used to be built beside them, and the log then read as two states in one place).
    let log = dir.path().join("log");
    exec_json(&f, &["--db", log.to_str().unwrap(), "--layout", "log"]);
    let user = dir.path().join("user");
    std::fs::create_dir(&user).unwrap();
    std::fs::write(user.join("notes"), b"mine").unwrap();
    for (kept, says) in [
        (&log, "a state of the log layout"),
        (&user, "files (notes) but no base"),
    ] {
        let listing = || {
            let mut names: Vec<_> = std::fs::read_dir(kept)
                .unwrap()
                .map(|e| e.unwrap().file_name())
                .collect();
            names.sort();
            names
        };
        let before = listing();
        for layout in ["mdbx", "log"] {
            let text = exec_fails(
                &f,
                &[
                    "--base-stems",
                    "20000",
                    "--layout",
                    layout,
                    "--base-db",
                    kept.to_str().unwrap(),
                ],
            );
            assert!(text.contains(says), "{layout}: {text}");
            assert_eq!(listing(), before, "{layout}");
        }
    }
    let file = dir.path().join("file");
    std::fs::write(&file, b"x").unwrap();
    let text = exec_fails(
        &f,
        &["--base-stems", "20000", "--base-db", file.to_str().unwrap()],
    );
    assert!(text.contains("is not a directory"), "{text}");
}

/// Several `exec`s started together on one new --base-db: one builds the base while the others
/// wait for it (each holds `base.lock` there), then copy it; none finds it half built (which it
/// would take for an interrupted build, and refuse) or rebuilds the kept log copy under
/// another's copy.
#[test]
fn execs_started_together_on_a_new_base_wait_for_the_one_building_it() {
    let dir = tempfile::tempdir().unwrap();
    let keep = dir.path().join("base");
    let keep_s = keep.to_str().unwrap();
    let f = fixture(ZKPI_CANCUN);
    let runs: Vec<Value> = std::thread::scope(|s| {
        let runs: Vec<_> = ["log", "mdbx", "log", "log"]
            .into_iter()
            .map(|layout| {
                let f = &f;
                s.spawn(move || {
                    let args = ["--base-stems", "30000", "--base-db", keep_s];
                    exec_json(f, &[&args[..], &["--layout", layout]].concat())
                })
            })
            .collect();
        runs.into_iter().map(|r| r.join().unwrap()).collect()
    });
    let built: Vec<_> = runs
        .iter()
        .filter(|j| j["base"]["reused_from"].is_null())
        .collect();
    assert_eq!(
        built.len(),
        1,
        "one built the base, the others reused it: {runs:?}"
    );
    for j in &runs {
        assert_eq!(j["valid"], true, "{j}");
        assert_eq!(j["root"], runs[0]["root"], "{j}");
    }
}

/// One `exec` at a time on a log layout's --db: a run finding the directory held by another
/// (building its base, before the database exists) is refused at once and leaves it alone;
/// once free, the same run goes through.
#[test]
fn a_log_exec_on_a_db_another_exec_holds_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    std::fs::create_dir(&db).unwrap();
    let db_s = db.to_str().unwrap();
    let f = fixture(ZKPI_CANCUN);
    let args = ["--layout", "log", "--base-stems", "20000", "--db", db_s];
    let held = std::fs::File::open(&db).unwrap();
    held.try_lock().unwrap();
    let text = exec_fails(&f, &args);
    assert!(text.contains("another `bintrie exec` is using"), "{text}");
    assert_eq!(std::fs::read_dir(&db).unwrap().count(), 0, "left alone");
    drop(held);
    assert_eq!(exec_json(&f, &args)["valid"], true);
}

// ---------------------------------------------------------------------------------------------
// Malformed and tampered fixtures

#[test]
fn missing_pieces_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();

    let f = edited(d, ZKPI_CANCUN, |j| {
        j["extra"].as_object_mut().unwrap().remove("preState");
    });
    let text = exec_fails(&f, &[]);
    assert!(text.contains("missing `extra.preState`"), "{text}");

    let f = edited(d, ZKPI_PRAGUE, |j| {
        j["blocks"][0]["header"]
            .as_object_mut()
            .unwrap()
            .remove("gasUsed");
    });
    let text = exec_fails(&f, &[]);
    assert!(
        text.contains("missing `blocks[0].header.gasUsed`"),
        "{text}"
    );

    let f = edited(d, ZKPI_PRAGUE, |j| {
        j["blocks"][0]["header"]
            .as_object_mut()
            .unwrap()
            .remove("requestsHash");
    });
    let text = exec_fails(&f, &[]);
    assert!(text.contains("missing `requestsHash`"), "{text}");

    let f = edited(d, RPCCACHE, |j| {
        j.as_object_mut().unwrap().remove("proofs");
    });
    let text = exec_fails(&f, &[]);
    assert!(text.contains("missing `proofs`"), "{text}");

    let f = edited(d, BLOCK, |j| {
        j["transactions"][3].as_object_mut().unwrap().remove("from");
    });
    let text = exec_fails(&f, &["--pre-state", fixture(PRE_STATE).to_str().unwrap()]);
    assert!(text.contains("missing `transactions[3].from`"), "{text}");

    // A block fixture without its pre-state (no sibling file in `d`).
    let text = exec_fails(&f, &[]);
    assert!(text.contains("--pre-state"), "{text}");

    let f = edited(d, PRE_STATE, |j| {
        let first = j.as_object_mut().unwrap().values_mut().next().unwrap();
        first.as_object_mut().unwrap().remove("basic");
    });
    let text = exec_fails(&fixture(BLOCK), &["--pre-state", f.to_str().unwrap()]);
    assert!(text.contains(".basic`"), "{text}");
    // An empty pre-state: the block fails ("nonce too high"), and the error says why first.
    let empty = d.join("empty.pre_state.json");
    std::fs::write(&empty, "{}").unwrap();
    let text = exec_fails(&fixture(BLOCK), &["--pre-state", empty.to_str().unwrap()]);
    assert!(
        text.contains("the pre-state holds no accounts") && text.contains("too high"),
        "{text}"
    );

    let f = d.join("unknown.json");
    std::fs::write(&f, "{\"hello\": 1}").unwrap();
    let text = exec_fails(&f, &[]);
    assert!(text.contains("not a known fixture"), "{text}");
}

/// EIP-7002 and EIP-7251: a Prague block is invalid when its withdrawal or consolidation
/// request contract has no code (absent, or its code removed), whatever its requests; with the
/// contracts in place the same block is valid (`every_fixture_validates`).
#[test]
fn a_prague_block_without_a_request_contract_is_invalid() {
    let dir = tempfile::tempdir().unwrap();
    for (eip, address) in [
        (7002, "0x00000961ef480eb55e80d19ad83579a64c007002"),
        (7251, "0x0000bbddc7ce488642fb579f8b00f3a590007251"),
    ] {
        for absent in [true, false] {
            let f = edited(dir.path(), ZKPI_PRAGUE, |j| {
                let pre = j["extra"]["preState"].as_object_mut().unwrap();
                let account = pre
                    .get_mut(address)
                    .expect("the fixture holds the contract");
                if absent {
                    *account = Value::Null;
                } else {
                    account["code"] = "0x".into();
                    account["codeHash"] = format!("{}", alloy_primitives::KECCAK256_EMPTY).into();
                }
            });
            let text = exec_fails(&f, &[]);
            assert!(
                text.contains(&format!("no code at the EIP-{eip}")),
                "{eip}, absent {absent}: {text}"
            );
        }
    }
}

/// A signal while `exec` still waits for its fixture (a FIFO no one writes) ends it at once,
/// as it would any reader, and nothing is made (one SIGTERM used to be taken as a stop to
/// honour at the next step, which never came: the run hung until a second signal). Once the
/// fixture is in, Ctrl-C (here SIGTERM) before the block ran stops `exec --db` at its next
/// step, with a message, and removes the database directory the run made (a rerun into it was
/// refused as "already holds a database"): here while the run builds its base.
#[test]
fn a_signal_before_the_block_stops_exec_and_removes_its_database() {
    use std::os::unix::process::ExitStatusExt as _;
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("fixture.json");
    bintrie_exec::testing::make_fifo(&fifo);
    let db = dir.path().join("db");
    let spawn = |fixture: &Path, extra: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_bintrie"))
            .args(["exec", "--relaxed", "--fixture"])
            .arg(fixture)
            .arg("--db")
            .arg(&db)
            .args(extra)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let child = spawn(&fifo, &[]);
    std::thread::sleep(std::time::Duration::from_millis(300));
    send_signal(&child, "-TERM");
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        out.status.signal(),
        Some(libc::SIGTERM),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!db.exists(), "a run that never read its fixture made --db");

    // Once the directory is made the fixture is in; the base takes a while to build.
    let child = spawn(&fixture(ZKPI_PRAGUE), &["--base-stems", "200000"]);
    let start = std::time::Instant::now();
    while !db.exists() {
        assert!(start.elapsed().as_secs() < 60, "exec never made --db");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    send_signal(&child, "-TERM");
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("stopping before the next step"), "{err}");
    assert!(
        err.contains("stopped by a signal before block 22615247 ran"),
        "{err}"
    );
    assert!(err.contains("the database this stopped run made"), "{err}");
    assert!(!db.exists(), "the stopped run's database was left behind");
}

#[test]
fn wrong_values_are_reported() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();

    // A wrong gas used in the header: the execution's gas differs (and so does the header hash).
    let f = edited(d, ZKPI_PRAGUE, |j| {
        j["blocks"][0]["header"]["gasUsed"] = "0x1450d6".into();
    });
    let out = exec(&f, &["--json"]);
    assert!(!out.status.success());
    let j: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(j["valid"], false);
    assert_eq!(j["checks"]["gas_used"], false);
    assert_eq!(j["checks"]["receipts_root"], true);
    let errors = j["errors"].to_string();
    assert!(
        errors.contains("gas used: header 1331414, execution 1331413"),
        "{errors}"
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("does not validate"));

    // A wrong post value: the state after the block does not hold it.
    let f = edited(d, ZKPI_CANCUN, |j| {
        let diffs = j["extra"]["stateDiffs"].as_array_mut().unwrap();
        let with_storage = diffs
            .iter_mut()
            .find(|d| d.get("storage").is_some())
            .unwrap();
        with_storage["storage"][0]["postValue"] = "0x1234".into();
    });
    let text = exec_fails(&f, &[]);
    assert!(text.contains("post_state FAILED"), "{text}");
    assert!(
        text.contains("expected 0x") && text.contains("1234, state holds"),
        "{text}"
    );

    let f = edited(d, RPCCACHE, |j| {
        let proofs = j["proofs"].as_array_mut().unwrap();
        let at_block = proofs
            .iter_mut()
            .find(|p| p[0]["block_no"] == 21_230_867 && p[1]["balance"] != "0x0")
            .unwrap();
        at_block[1]["balance"] = "0x1".into();
    });
    let text = exec_fails(&f, &[]);
    assert!(text.contains("expected balance 1 nonce"), "{text}");

    // A transaction whose sender is not its signer.
    let f = edited(d, BLOCK, |j| {
        j["transactions"][0]["from"] = "0x000000000000000000000000000000000000dead".into();
    });
    let text = exec_fails(&f, &["--pre-state", fixture(PRE_STATE).to_str().unwrap()]);
    assert!(text.contains("transaction 0: `from` is 0x"), "{text}");
}

/// `--layout log`: every fixture validates on the appending log with the root MDBX gives, cold
/// and on a random base copied in from a kept MDBX base.
#[test]
fn every_block_validates_on_the_log_layout_with_the_mdbx_root() {
    for name in [ZKPI_PRAGUE, ZKPI_CANCUN, RPCCACHE] {
        let f = fixture(name);
        let mdbx = exec_json(&f, &[]);
        let log = exec_json(&f, &["--layout", "log", "--cold"]);
        assert_eq!(log["valid"], true, "{name}: {log}");
        assert_eq!(log["mode"]["layout"], "log");
        assert_eq!(log["root"], mdbx["root"], "{name}: log root");
        assert_eq!(log["read_amplification"].as_f64().unwrap(), 1.0, "{log}");
        // The log streams its prefetch into execution by default; --no-stream reads it first.
        // The same keys are read, each once, to the same root; MDBX never streams.
        assert_eq!(log["mode"]["streamed"], true, "{log}");
        assert_eq!(mdbx["mode"]["streamed"], false, "{mdbx}");
        let first = exec_json(&f, &["--layout", "log", "--no-stream"]);
        assert_eq!(first["mode"]["streamed"], false, "{first}");
        assert_eq!(first["root"], log["root"], "{name}: --no-stream root");
        for count in ["store_reads", "prefetch_reads", "keys_read", "misses"] {
            assert_eq!(first[count], log[count], "{name}: {count}");
        }
        assert_eq!(first["timings_ms"]["prefetch_wait"], 0.0, "{first}");
    }
    let dir = tempfile::tempdir().unwrap();
    let keep = dir.path().join("base");
    let (db1, db2) = (dir.path().join("m"), dir.path().join("l"));
    let base = [
        "--base-stems",
        "3000",
        "--base-db",
        keep.to_str().unwrap(),
        "-g",
        "4",
    ];
    let f = fixture(ZKPI_CANCUN);
    let with = |db: &Path, layout: &str| {
        let mut args = base.to_vec();
        args.extend(["--db", db.to_str().unwrap(), "--layout", layout]);
        exec_json(&f, &args)
    };
    let m = with(&db1, "mdbx");
    let l = with(&db2, "log");
    assert_eq!(
        (l["valid"].clone(), l["base_stems"].clone()),
        (true.into(), 3000.into())
    );
    assert_eq!(l["root"], m["root"]);
    assert!(db2.join("log.000001").is_file() && !db2.join("mdbx.dat").exists());
    // With the base's upper levels kept in memory: the same block, the same root (a stale
    // kept blob would fail the trie's hash checks).
    let db3 = dir.path().join("p");
    let mut args = base.to_vec();
    args.extend(["--db", db3.to_str().unwrap(), "--layout", "log"]);
    args.extend(["--log-pinned-mib", "1"]);
    let p = exec_json(&f, &args);
    assert_eq!(
        (p["valid"].clone(), p["root"].clone()),
        (true.into(), m["root"].clone())
    );
    // MDBX has no such levels: the option is refused, not ignored.
    let text = exec_fails(&f, &["--log-pinned-mib", "1"]);
    assert!(
        text.contains("--log-pinned-mib applies to --layout log only"),
        "{text}"
    );
    // Nor has the log a write buffer.
    let text = exec_fails(&f, &["--layout", "log", "--buffer-blocks", "3"]);
    assert!(
        text.contains("--buffer-blocks applies to the MDBX layout only"),
        "{text}"
    );
    // The buffer's size neither (it was ignored), nor without a buffer (exec has none unless
    // --buffer-blocks gives one).
    let text = exec_fails(&f, &["--layout", "log", "--buffer-mib", "4"]);
    assert!(
        text.contains("--buffer-mib applies to the MDBX layout only"),
        "{text}"
    );
    let text = exec_fails(&f, &["--buffer-mib", "4"]);
    assert!(
        text.contains("--buffer-mib sizes the write buffer, which is off here"),
        "{text}"
    );
    // Refused before anything is read or made: no fixture is needed, no --db is created.
    let never = dir.path().join("never");
    let text = exec_fails(
        &dir.path().join("no-such-fixture.json"),
        &["--buffer-mib", "4", "--db", never.to_str().unwrap()],
    );
    assert!(
        text.contains("--buffer-mib sizes the write buffer"),
        "{text}"
    );
    assert!(!never.exists());
    // The log now holds the block: a second exec into it is refused, at any group depth.
    let again = ["--db", db2.to_str().unwrap(), "--layout", "log"];
    for extra in [&["-g", "4"][..], &[]] {
        let text = exec_fails(&f, &[&again[..], extra].concat());
        assert!(
            text.contains("already holds a database (log layout)"),
            "{text}"
        );
    }
}

/// The log copy a --base-db keeps for `--layout log` is checked where the run opens its own
/// copy: one that holds another state (here another run's database, a later block) or is
/// damaged (cut short) is rebuilt from the base, with a warning, and the block validates with
/// the root of a run on a good copy; a good copy is used as it is, sealed, its segments but the
/// empty last one shared with the runs' databases by hard links.
#[test]
fn a_kept_log_copy_that_does_not_hold_the_base_is_rebuilt() {
    let dir = tempfile::tempdir().unwrap();
    let keep = dir.path().join("base");
    let kept = keep.join("log");
    let f = fixture(ZKPI_CANCUN);
    let run = |db: &str| {
        let db = dir.path().join(db);
        let args = [
            "--json",
            "--base-stems",
            "3000",
            "--base-db",
            keep.to_str().unwrap(),
            "--db",
            db.to_str().unwrap(),
            "--layout",
            "log",
        ];
        let out = exec(&f, &args);
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout).to_string(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        );
        assert!(out.status.success(), "{stdout}\n{stderr}");
        let j: Value = serde_json::from_str(stdout.trim()).unwrap();
        assert_eq!(j["valid"], true, "{j}");
        (j["root"].clone(), stderr, db)
    };
    let segments = |d: &Path| -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> = std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with("log."))
            .collect();
        v.sort();
        v
    };
    const REBUILT: &str = "does not hold the base: rebuilding it";
    let (root, stderr, first_db) = run("a");
    assert!(!stderr.contains(REBUILT), "{stderr}");
    let kept_bytes: Vec<Vec<u8>> = segments(&kept)
        .iter()
        .rev()
        .skip(1)
        .rev()
        .map(|p| std::fs::read(p).unwrap())
        .collect();
    let (again, stderr, second_db) = run("b");
    assert_eq!(again, root);
    assert!(!stderr.contains(REBUILT), "a good copy is used: {stderr}");
    // The kept log is sealed (its last segment empty); the runs share its other segments
    // (hard links) and copied the last.
    use std::os::unix::fs::MetadataExt;
    let ino = |p: &Path| std::fs::metadata(p).unwrap().ino();
    let (last, shared) = {
        let mut k = segments(&kept);
        let last = k.pop().unwrap();
        (last, k)
    };
    assert_eq!(std::fs::metadata(&last).unwrap().len(), 0);
    assert!(!shared.is_empty());
    // What the second run wrote into its database left the shared files as they were.
    assert_eq!(
        shared
            .iter()
            .map(|p| std::fs::read(p).unwrap())
            .collect::<Vec<_>>(),
        kept_bytes
    );
    for db in [&first_db, &second_db] {
        for p in &shared {
            assert_eq!(
                ino(p),
                ino(&db.join(p.file_name().unwrap())),
                "{}",
                p.display()
            );
        }
        assert_ne!(ino(&last), ino(&db.join(last.file_name().unwrap())));
    }
    // Another state where the kept copy was: the first run's database (base + block).
    for p in segments(&kept) {
        std::fs::remove_file(p).unwrap();
    }
    for p in segments(&first_db) {
        std::fs::copy(&p, kept.join(p.file_name().unwrap())).unwrap();
    }
    let (other, stderr, _) = run("c");
    assert_eq!(other, root);
    assert!(stderr.contains(REBUILT), "{stderr}");
    // A damaged one: its segment cut to half.
    let seg = segments(&kept).remove(0);
    let len = std::fs::metadata(&seg).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&seg)
        .unwrap()
        .set_len(len / 2)
        .unwrap();
    let (cut, stderr, _) = run("d");
    assert_eq!(cut, root);
    assert!(stderr.contains(REBUILT), "{stderr}");
    // One kept before seals existed (its last segment holds the base): sealed where it is,
    // not rebuilt.
    let mut k = segments(&kept);
    let empty = k.pop().unwrap();
    assert_eq!(std::fs::metadata(&empty).unwrap().len(), 0);
    std::fs::remove_file(&empty).unwrap();
    let unsealed = segments(&kept);
    let (old, stderr, _) = run("e");
    assert_eq!(old, root);
    assert!(!stderr.contains(REBUILT), "{stderr}");
    let now = segments(&kept);
    assert_eq!(now.len(), unsealed.len() + 1, "{now:?}");
    assert_eq!(std::fs::metadata(now.last().unwrap()).unwrap().len(), 0);
}
