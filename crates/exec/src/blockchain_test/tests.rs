//! The runner against real tests (from `$BINTRIE_ETHEREUM_TESTS` or
//! `../shared/fixtures/ethereum-tests`), and against the same tests tampered with: every kind
//! of check must be able to fail.

use super::*;
use serde_json::Value;

use crate::testing::ethereum_tests_dir as tests_dir;

/// The one test of a file under `BlockchainTests/`.
fn one(rel: &str) -> BlockchainTest {
    let path = tests_dir().join("BlockchainTests").join(rel);
    let mut tests = load_file(&path).unwrap();
    assert_eq!(tests.len(), 1, "{rel}");
    tests.pop().unwrap().1.unwrap()
}

fn run(t: &BlockchainTest) -> TestOutcome {
    run_test(t, &TestOptions::default())
}

fn failed_with(outcome: &TestOutcome, needle: &str) {
    assert_eq!(outcome.status, Status::Failed, "{outcome:?}");
    let reason = outcome.reason.as_deref().unwrap_or("");
    assert!(reason.contains(needle), "{needle:?} not in {reason:?}");
}

const VALID: &str = "ValidBlocks/bcStateTests/simpleSuicide.json.gz";
const MULTI_BLOCK: &str = "ValidBlocks/bcValidBlockTest/SimpleTx3LowS.json.gz";
const INVALID: &str = "InvalidBlocks/bcInvalidHeaderTest/wrongTimestamp.json.gz";

#[test]
fn real_tests_pass_at_every_group_depth() {
    for rel in [VALID, MULTI_BLOCK, INVALID] {
        let t = one(rel);
        for g in [1, 5, 8] {
            let outcome = run_test(&t, &TestOptions::default().with_group_depth(g));
            assert_eq!(outcome, TestOutcome::passed(), "{rel} at group depth {g}");
        }
    }
}

#[test]
fn a_wrong_post_value_fails() {
    let mut t = one(VALID);
    let post = t.post.as_mut().unwrap();
    let (a, acct) = post.iter_mut().find(|(_, a)| !a.balance.is_zero()).unwrap();
    let a = *a;
    acct.balance += U256::from(1);
    failed_with(&run(&t), &format!("account {a}: balance"));

    // A slot the test does not list must read as zero: listing it with a value fails.
    let mut t = one(VALID);
    let post = t.post.as_mut().unwrap();
    let acct = post.values_mut().next().unwrap();
    acct.storage.push((U256::from(0xdead), U256::from(1)));
    failed_with(&run(&t), "slot 0xdead");

    // An account the test does not list must be absent.
    let mut t = one(VALID);
    let post = t.post.as_mut().unwrap();
    let (a, _) = post
        .iter()
        .find(|(_, s)| !s.balance.is_zero())
        .map(|(a, s)| (*a, s.clone()))
        .unwrap();
    post.remove(&a);
    failed_with(&run(&t), &format!("account {a} must be absent"));
}

#[test]
fn a_valid_block_marked_invalid_and_an_invalid_block_unmarked_fail() {
    let mut t = one(VALID);
    t.blocks[0].expect_exception = Some("TransactionException.X".into());
    failed_with(&run(&t), "was accepted but must be rejected");

    let mut t = one(INVALID);
    let i = t
        .blocks
        .iter()
        .position(|b| b.expect_exception.is_some())
        .unwrap();
    t.blocks[i].expect_exception = None;
    failed_with(&run(&t), &format!("blocks[{i}] was rejected: timestamp"));
}

#[test]
fn a_wrong_head_or_a_damaged_block_fails() {
    let mut t = one(MULTI_BLOCK);
    t.last_block_hash = B256::repeat_byte(7);
    failed_with(&run(&t), "the head is");

    let mut t = one(VALID);
    let n = t.blocks[0].rlp.len();
    t.blocks[0].rlp.truncate(n - 1);
    failed_with(&run(&t), "blocks[0]: bad RLP");
}

#[test]
fn gas_and_receipts_are_checked_before_the_commit() {
    // Rewriting a header field changes the block hash, so the block is re-encoded: the
    // consensus checks still pass, the result checks must not.
    let mut t = one(VALID);
    let mut block = decode_exact::<Block<TxEnvelope>>(&t.blocks[0].rlp).unwrap();
    block.header.gas_used += 1;
    t.blocks[0].rlp = alloy_rlp::encode(&block);
    t.last_block_hash = block.header.hash_slow();
    failed_with(&run(&t), "gas used: header");

    let mut t = one(VALID);
    let mut block = decode_exact::<Block<TxEnvelope>>(&t.blocks[0].rlp).unwrap();
    block.header.receipts_root = B256::repeat_byte(1);
    t.blocks[0].rlp = alloy_rlp::encode(&block);
    t.last_block_hash = block.header.hash_slow();
    failed_with(&run(&t), "receipts root: header");
}

#[test]
fn unsupported_and_unrepresentable_tests_are_skipped_with_the_reason() {
    let mut t = one(VALID);
    t.network = "London".into();
    let o = run(&t);
    assert_eq!(o.status, Status::Skipped);
    assert!(o.reason.unwrap().contains("proof-of-work"));
    // A network no test names is the test's fault, not a schedule left out.
    t.network = "Foo".into();
    failed_with(&run(&t), "network `Foo` is not a fork schedule");

    let mut t = one(VALID);
    let acct = t.pre.values_mut().next().unwrap();
    acct.balance = U256::from(1) << 128;
    let o = run(&t);
    assert_eq!(o.status, Status::Skipped);
    assert!(o.reason.unwrap().contains("16-byte balance"));
}

#[test]
fn malformed_tests_are_errors_not_panics() {
    let good: Value = {
        let path = tests_dir().join("BlockchainTests").join(VALID);
        let raw = std::fs::read(&path).unwrap();
        let j: Value =
            serde_json::from_reader(flate2::read::GzDecoder::new(raw.as_slice())).unwrap();
        j.as_object().unwrap().values().next().unwrap().clone()
    };
    assert!(parse_test("t", &good).is_ok());
    for (field, bad) in [
        ("network", Value::from(5)),
        ("genesisRLP", Value::from("0xzz")),
        ("genesisRLP", Value::from("0x01")),
        ("blocks", Value::from("x")),
        ("pre", Value::from(1)),
        ("postState", Value::from(1)),
        ("lastblockhash", Value::from("0x12")),
    ] {
        let mut t = good.clone();
        t[field] = bad;
        let e = format!("{:#}", parse_test("t", &t).unwrap_err());
        assert!(e.contains(field), "{field}: {e}");
    }
    let mut t = good.clone();
    t.as_object_mut().unwrap().remove("pre");
    assert!(format!("{:#}", parse_test("t", &t).unwrap_err()).contains("`pre` is missing"));
    // A test that states no result at all would pass on any state.
    let mut t = good.clone();
    t.as_object_mut().unwrap().remove("postState");
    let e = format!("{:#}", parse_test("t", &t).unwrap_err());
    assert!(e.contains("neither `postState` nor `postStateHash`"), "{e}");
    // `null`, `[]` or a string that is no hash states no result either.
    for bad in [
        Value::Null,
        Value::Array(vec![]),
        Value::from("garbage"),
        Value::from("0x11"),
    ] {
        t["postStateHash"] = bad;
        let e = format!("{:#}", parse_test("t", &t).unwrap_err());
        assert!(e.contains("`postStateHash` is not a 32-byte hash"), "{e}");
    }
    t["postStateHash"] = Value::from(format!("0x{}", "11".repeat(32)));
    assert!(parse_test("t", &t).unwrap().post.is_none());
    let mut t = good;
    let acct = t["pre"]
        .as_object_mut()
        .unwrap()
        .values_mut()
        .next()
        .unwrap();
    acct["nonce"] = Value::from("0x10000000000000000");
    assert!(format!("{:#}", parse_test("t", &t).unwrap_err()).contains("nonce"));
}

#[test]
fn files_are_found_recursively_and_bad_files_are_named() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("sub")).unwrap();
    std::fs::write(dir.path().join("sub/a.json"), "{}").unwrap();
    std::fs::write(dir.path().join("b.json.gz"), "not gzip").unwrap();
    std::fs::write(dir.path().join("c.txt"), "").unwrap();
    let files = test_files(&[dir.path().to_path_buf()]).unwrap();
    assert_eq!(files.len(), 2, "{files:?}");
    assert!(
        load_file(&dir.path().join("sub/a.json"))
            .unwrap()
            .is_empty()
    );
    let e = format!(
        "{:#}",
        load_file(&dir.path().join("b.json.gz")).unwrap_err()
    );
    assert!(e.contains("b.json.gz"), "{e}");
    assert!(test_files(&[dir.path().join("missing")]).is_err());
    let results = run_files(&files, &TestOptions::default(), 2, &|_| true, &|_| {});
    assert_eq!(Summary::of(&results).failed, 1, "{results:?}");
}

/// Links that lead back up (one loop repeated a file 41 times, two never ended) and a FIFO
/// named like a test (reading it blocked the run) are walked once and left out.
#[test]
fn a_walk_takes_each_file_once_through_links_and_only_regular_files() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().join("l/d");
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(d.join("t.json"), "{}").unwrap();
    std::os::unix::fs::symlink("..", d.join("up")).unwrap();
    std::os::unix::fs::symlink("..", d.join("up2")).unwrap();
    std::os::unix::fs::symlink("t.json", d.join("same.json")).unwrap();
    std::os::unix::fs::symlink("nowhere.json", d.join("dangling.json")).unwrap();
    let fifo = d.join("fifo.json");
    crate::testing::make_fifo(&fifo);
    let files = test_files(&[dir.path().join("l")]).unwrap();
    assert_eq!(files.len(), 1, "{files:?}");
    assert!(files[0].ends_with("t.json") || files[0].ends_with("same.json"));
    // A test file that cannot be looked at (a link to itself) is counted, and fails naming it.
    std::os::unix::fs::symlink("self.json", d.join("self.json")).unwrap();
    let files = test_files(&[dir.path().join("l")]).unwrap();
    assert_eq!(files.len(), 2, "{files:?}");
    let e = format!("{:#}", load_file(&d.join("self.json")).unwrap_err());
    assert!(e.contains("self.json"), "{e}");
    // A file given twice under two spellings, or given and found in a directory given, counts
    // once (it counted twice).
    let t = d.join("t.json");
    let again = dir.path().join("l/d/../d/t.json");
    assert_eq!(test_files(&[t.clone(), again.clone()]).unwrap().len(), 1);
    assert_eq!(test_files(&[t, dir.path().join("l")]).unwrap().len(), 2);
}

/// A key given twice in a test file (a test's name, an account, a slot) is refused: a plain
/// parse kept the last, so a failing test listed before a passing one of the same name was
/// never run, and a wrong post value before the right one was never compared.
#[test]
fn a_key_given_twice_in_a_test_file_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = tests_dir().join("BlockchainTests").join(VALID);
    let text = String::from_utf8(
        crate::input::gunzip_at_most(&std::fs::read(&path).unwrap(), "t", 1 << 30)
            .unwrap()
            .into_owned(),
    )
    .unwrap();
    let body = text
        .trim()
        .strip_prefix('{')
        .unwrap()
        .strip_suffix('}')
        .unwrap();
    let twice = dir.path().join("twice.json");
    std::fs::write(&twice, format!("{{{body}, {body}}}")).unwrap();
    let e = format!("{:#}", load_file(&twice).unwrap_err());
    assert!(e.contains("is given twice in one object"), "{e}");
    // An address given twice under one spelling in postState.
    let json: Value = serde_json::from_str(&text).unwrap();
    let (name, test) = json.as_object().unwrap().iter().next().unwrap();
    let (address, account) = test["postState"]
        .as_object()
        .unwrap()
        .iter()
        .next()
        .unwrap();
    let one = serde_json::to_string(test).unwrap();
    let entry = format!("{}:{}", serde_json::to_string(address).unwrap(), account);
    let doubled = one.replacen(&entry, &format!("{entry},{entry}"), 1);
    assert_ne!(doubled, one, "the entry was found");
    let path = dir.path().join("address.json");
    std::fs::write(
        &path,
        format!("{{{}: {doubled}}}", serde_json::to_string(name).unwrap()),
    )
    .unwrap();
    let e = format!("{:#}", load_file(&path).unwrap_err());
    assert!(e.contains("is given twice in one object"), "{e}");
}

/// One slot under two spellings ("0x00" and "0x0") in an account's storage, pre or post, is
/// refused: the runner kept one of them, so a test whose expectation was changed under the
/// other spelling passed (a hostile pass found it). So is a zero value beside a non-zero one.
#[test]
fn a_slot_spelled_twice_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = tests_dir()
        .join("BlockchainTests")
        .join("ValidBlocks/bcStateTests/logRevert.json.gz");
    let text = String::from_utf8(
        crate::input::gunzip_at_most(&std::fs::read(&path).unwrap(), "t", 1 << 30)
            .unwrap()
            .into_owned(),
    )
    .unwrap();
    let json: Value = serde_json::from_str(&text).unwrap();
    let (name, test) = json.as_object().unwrap().iter().next().unwrap();
    for (part, value) in [("postState", "0x03"), ("pre", "0x00")] {
        let mut t = test.clone();
        let (_, acct) = t[part].as_object_mut().unwrap().iter_mut().next().unwrap();
        acct["storage"]["0x05"] = "0x02".into();
        acct["storage"]["0x0005"] = value.into();
        let file = dir.path().join(format!("{part}.json"));
        std::fs::write(&file, serde_json::json!({ name: t }).to_string()).unwrap();
        // The test is an error (the file's others would still run).
        let tests = load_file(&file).unwrap();
        let e = format!("{:#}", tests[0].1.as_ref().unwrap_err());
        assert!(
            e.contains(r#""0x0005" and "0x05" are the same slot, given twice"#),
            "{part}: {e}"
        );
    }
}

#[test]
fn empty_truncated_and_non_object_files_are_named_errors() {
    let dir = tempfile::tempdir().unwrap();
    let good = std::fs::read(tests_dir().join("BlockchainTests").join(VALID)).unwrap();
    for (name, bytes) in [
        ("empty.json", Vec::new()),
        ("truncated.json.gz", good[..good.len() / 2].to_vec()),
        ("array.json", b"[1, 2]".to_vec()),
        ("utf8.json", "{\"é\": ".as_bytes().to_vec()),
    ] {
        let path = dir.path().join(name);
        std::fs::write(&path, bytes).unwrap();
        let e = format!("{:#}", load_file(&path).unwrap_err());
        assert!(e.contains(name), "{name}: {e}");
    }
    // Another JSON object (a bench report's results): one error for the file, not one failed
    // test per key; a file with a test among other entries has them fail as tests, by name.
    let other = dir.path().join("results.json");
    std::fs::write(
        &other,
        br#"{"config": {"runs": 3}, "runs": [], "machine": null}"#,
    )
    .unwrap();
    let e = format!("{:#}", load_file(&other).unwrap_err());
    assert!(
        e.contains("not a blockchain test file") && e.contains("3 entries"),
        "{e}"
    );
    let mixed = dir.path().join("mixed.json");
    std::fs::write(&mixed, br#"{"t": {"network": "Cancun"}, "notes": 1}"#).unwrap();
    let tests = load_file(&mixed).unwrap();
    assert_eq!(tests.len(), 2);
    assert!(tests.iter().all(|(_, t)| t.is_err()));
    assert!(
        load_file(&{
            let empty = dir.path().join("no-tests.json");
            std::fs::write(&empty, b"{}").unwrap();
            empty
        })
        .unwrap()
        .is_empty()
    );
}
