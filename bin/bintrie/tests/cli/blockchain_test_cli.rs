//! `bintrie blockchain-test` on a fixed sample of Ethereum's blockchain tests: every file of
//! `ValidBlocks`, `InvalidBlocks` and `TransitionTests`, and the first file (by name) of each
//! `GeneralStateTests` directory but `stTimeConsuming`. The whole set is `cargo xtask ef-tests` (release, about a
//! minute). The sample runs with `--stateless`: every accepted block also runs from its witness
//! (both encodings) to the same root. Also the command off the happy path: a bad filter, a missing path, a tampered test,
//! a closed stdout.

use crate::common::*;

use serde_json::Value;
use std::path::PathBuf;
use std::process::Stdio;

/// The sample's paths.
fn sample() -> Vec<PathBuf> {
    let root = ethereum_tests_dir().join("BlockchainTests");
    let mut paths: Vec<PathBuf> = ["ValidBlocks", "InvalidBlocks", "TransitionTests"]
        .iter()
        .map(|d| root.join(d))
        .collect();
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(root.join("GeneralStateTests"))
        .unwrap()
        .map(|e| e.unwrap().path())
        // `stTimeConsuming` (BLAKE2f at its maximum rounds) takes ~50 s in a debug build: it runs
        // in `cargo xtask ef-tests`.
        .filter(|p| p.is_dir() && !p.ends_with("stTimeConsuming"))
        .collect();
    dirs.sort();
    for d in dirs {
        let mut files: Vec<PathBuf> = std::fs::read_dir(&d)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        files.sort();
        paths.extend(files.into_iter().next());
    }
    paths
}

/// The skip reasons the README documents; any other skip is a failure of this test.
const DOCUMENTED_SKIPS: [&str; 4] = [
    "before the Merge",
    "16-byte balance",
    "Merkle-Patricia state root",
    "EIP-7610",
];

#[test]
fn the_sample_passes_and_every_skip_is_documented() {
    let out = bin()
        .arg("blockchain-test")
        .args(sample())
        .args(["--json", "--no-progress", "--jobs", "2", "--stateless"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let j: Value = serde_json::from_slice(&out.stdout).unwrap();
    let results = j["results"].as_array().unwrap();
    let count = |s: &str| results.iter().filter(|r| r["status"] == s).count() as u64;
    assert_eq!(j["failed"], 0);
    assert_eq!(j["passed"].as_u64().unwrap(), count("passed"));
    assert_eq!(j["skipped"].as_u64().unwrap(), count("skipped"));
    assert!(count("passed") > 600, "{} passed", count("passed"));
    for r in results.iter().filter(|r| r["status"] == "skipped") {
        let reason = r["reason"].as_str().unwrap();
        assert!(
            DOCUMENTED_SKIPS.iter().any(|d| reason.contains(d)),
            "{}: undocumented skip: {reason}",
            r["name"]
        );
    }
    for r in results {
        assert!(r["file"].is_string() && r["name"].is_string(), "{r}");
    }
}

/// `bintrie blockchain-test ARGS PATH`, run to its end.
fn blockchain_test(args: &[&str], path: &std::path::Path) -> std::process::Output {
    bin()
        .arg("blockchain-test")
        .args(args)
        .arg(path)
        .output()
        .unwrap()
}

#[test]
fn filter_selects_by_name_and_bad_input_is_an_error() {
    let valid = ethereum_tests_dir().join("BlockchainTests/ValidBlocks");
    let out = blockchain_test(
        &["--json", "--no-progress", "--filter", "^simpleSuicide"],
        &valid,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let j: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(j["results"].as_array().unwrap().len(), 1, "{j}");

    let out = blockchain_test(&["--filter", "("], &valid);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("--filter"), "{}", stderr(&out));

    let dir = tempfile::tempdir().unwrap();
    let out = blockchain_test(&[], &dir.path().join("missing"));
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("missing"), "{}", stderr(&out));
    let out = blockchain_test(&[], dir.path());
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("no .json"), "{}", stderr(&out));
    // Nothing ran: a filter that matches no test, a file that holds none.
    let out = blockchain_test(&["--no-progress", "--filter", "zzzz-no-such-test"], &valid);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("--filter matched no test"),
        "{}",
        stderr(&out)
    );
    let empty = dir.path().join("empty.json");
    std::fs::write(&empty, "{}").unwrap();
    let out = blockchain_test(&["--no-progress"], &empty);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stderr(&out).contains("hold no test"), "{}", stderr(&out));
}

#[test]
fn a_tampered_test_fails_with_its_reason() {
    let src =
        ethereum_tests_dir().join("BlockchainTests/ValidBlocks/bcStateTests/simpleSuicide.json.gz");
    let mut j = read_json(&src);
    let test = j.as_object_mut().unwrap().values_mut().next().unwrap();
    let post = test["postState"].as_object_mut().unwrap();
    let acct = post.values_mut().find(|a| a["balance"] != "0x00").unwrap();
    acct["balance"] = Value::from("0x01");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tampered.json");
    std::fs::write(&file, serde_json::to_vec(&j).unwrap()).unwrap();
    let out = blockchain_test(&["--no-progress"], &file);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.contains("Failed") && text.contains("balance"),
        "{text}"
    );
    assert!(text.contains("0 passed, 1 failed"), "{text}");
    assert!(
        stderr(&out).contains("1 of 1 tests failed"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_closed_stdout_is_an_error_not_a_panic() {
    let valid = ethereum_tests_dir().join("BlockchainTests/ValidBlocks/bcExample");
    let mut child = bin()
        .args(["blockchain-test", "--json", "--no-progress"])
        .arg(&valid)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stderr(&out).contains("writing output"), "{}", stderr(&out));
}
