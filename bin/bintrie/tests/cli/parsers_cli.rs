//! The input parsers through the binary: bad input (an endless line, non-ASCII or `+` in hex,
//! an address or slot spelled twice, a block-0 fixture) and a closed or full stdout give an
//! error and exit status 1, never a panic (status 101) or an endless read; arbitrary input to
//! `root` never panics.
//!
//! The block-0 and output tests edit the mainnet fixtures into a temporary directory; they are
//! found like in `exec.rs` (`$BINTRIE_FIXTURES` or `../shared/fixtures/mainnet`).

use crate::common::*;

use proptest::prelude::*;
use serde_json::json;
use std::path::Path;
use std::process::{Child, Output, Stdio};
use std::time::{Duration, Instant};

/// Waits for `child` at most `limit`, killing it (and failing) when it runs longer.
fn wait(mut child: Child, limit: Duration, what: &str) -> Output {
    let start = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            return child.wait_with_output().unwrap();
        }
        if start.elapsed() > limit {
            child.kill().unwrap();
            child.wait().unwrap();
            panic!("{what}: still running after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Asserts that `out` is a clean failure (status 1, no panic) whose stderr contains `needle`.
fn assert_error(out: &Output, needle: &str) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(1), "expected exit 1:\n{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(stderr.contains(needle), "expected {needle:?} in:\n{stderr}");
    stderr
}

fn root_on_file(contents: &[u8]) -> Output {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("in.txt");
    std::fs::write(&f, contents).unwrap();
    bin().arg("root").arg("-i").arg(&f).output().unwrap()
}

fn root_on_alloc(text: &str) -> Output {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("alloc.json");
    std::fs::write(&f, text).unwrap();
    bin().arg("root").arg("--alloc").arg(&f).output().unwrap()
}

fn word(n: u8) -> String {
    format!("{n:064x}")
}

/// `bintrie ARGS` on an endless input, given a minute to stop.
fn on_endless_input(args: &[&str]) -> Output {
    let child = bin()
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait(child, Duration::from_secs(60), &args.join(" "))
}

#[test]
fn root_refuses_an_endless_line() {
    let out = on_endless_input(&["root", "-i", "/dev/zero"]);
    assert_error(&out, "/dev/zero:1: line longer than 4096 bytes");
}

/// An alloc is read whole, so it is capped: `/dev/zero` used to grow without end (10 GB in 20 s).
#[test]
fn root_refuses_an_endless_alloc() {
    let out = on_endless_input(&["root", "--alloc", "/dev/zero"]);
    assert_error(&out, "/dev/zero: larger than 67108864 bytes");
}

#[test]
fn root_refuses_invalid_utf8() {
    let mut text = format!("{} {}\n", word(1), word(2)).into_bytes();
    text.extend_from_slice(b"\xff\xfe\n");
    assert_error(&root_on_file(&text), ":2: not UTF-8");
}

/// A 2-byte character at an odd byte index of a 64-byte word panicked ("not a char boundary").
#[test]
fn root_refuses_non_ascii_hex() {
    let key = format!("0é{}", "0".repeat(61));
    assert_eq!(key.len(), 64);
    let out = root_on_file(format!("{key} {}\n", word(1)).as_bytes());
    assert_error(&out, ":1: bad key");
    let out = root_on_file(format!("{} 0x{key}\n", word(1)).as_bytes());
    assert_error(&out, ":1: bad value");
}

/// `u8::from_str_radix("+1", 16)` is `Ok(1)`: `+1000…` was read as `0x01000…`.
#[test]
fn root_refuses_plus_in_hex() {
    let out = root_on_file(format!("+1{} {}\n", "0".repeat(62), word(1)).as_bytes());
    assert_error(&out, ":1: bad key");
}

#[test]
fn root_alloc_refuses_an_address_or_slot_spelled_twice() {
    let a = "00000000000000000000000000000000000000aa";
    let text = json!({ "alloc": { format!("0x{a}"): {"balance": "1"}, a: {"balance": "1"} } });
    let stderr = assert_error(&root_on_alloc(&text.to_string()), "same address");
    assert!(stderr.contains(&format!("\"0x{a}\"")) && stderr.contains(&format!("\"{a}\"")));
    let text = json!({ a: {"balance": "1", "storage": {"0x1": "0x2", "0x01": "0x2"}} });
    assert_error(&root_on_alloc(&text.to_string()), "same slot");
    // Code with a non-ASCII character at an odd byte index.
    let text = json!({ a: {"balance": "1", "code": "0x0é0"} });
    assert_error(&root_on_alloc(&text.to_string()), ".code: not hex");
    let text = json!({ a: {"balance": "1_000"} });
    assert_error(
        &root_on_alloc(&text.to_string()),
        ".balance: \"1_000\" is not a number",
    );
}

// ---------------------------------------------------------------------------------------------
// exec on edited mainnet fixtures

fn exec(fixture: &Path, extra: &[&str]) -> Output {
    bin()
        .arg("exec")
        .arg("--fixture")
        .arg(fixture)
        .arg("--relaxed")
        .args(extra)
        .output()
        .unwrap()
}

/// Block 0 reached `number - 1` (an overflow panic in debug builds, block u64::MAX in release).
#[test]
fn exec_refuses_block_zero_in_every_format() {
    const MSG: &str = "block 0 (genesis) cannot be executed from a fixture";
    let dir = tempfile::tempdir().unwrap();
    let z = edited(dir.path(), "22188088-cancun.zkpi.json", |j| {
        j["blocks"][0]["header"]["number"] = json!("0x0");
    });
    assert_error(&exec(&z, &[]), MSG);

    let b = edited(dir.path(), "19426587-cancun.block.json", |j| {
        let block = if j.get("result").is_some() {
            &mut j["result"]
        } else {
            j
        };
        block["number"] = json!("0x0");
    });
    let pre = fixture("19426587-cancun.pre_state.json");
    let pre = pre.to_str().unwrap();
    assert_error(&exec(&b, &["--pre-state", pre]), MSG);

    let r = edited(dir.path(), "21230867-cancun.rpccache.json.gz", |j| {
        let blocks = j["full_blocks"].as_array_mut().unwrap();
        let last = blocks
            .iter()
            .max_by_key(|e| e[0]["block_no"].as_u64().unwrap())
            .unwrap()
            .clone();
        let mut only = last;
        only[0]["block_no"] = json!(0);
        only[1]["number"] = json!("0x0");
        *blocks = vec![only];
    });
    assert_error(&exec(&r, &[]), MSG);
}

/// `bintrie ARGS` run by `sh -c 'exec bintrie ARGS'`, so that ARGS may end in redirections of
/// the process's own descriptors (`>&-`, `<&-`).
#[cfg(target_os = "linux")]
fn through_sh(args: &str) -> std::process::Output {
    std::process::Command::new("sh")
        .arg("-c")
        .arg(format!("exec \"$0\" {args}"))
        .arg(env!("CARGO_BIN_EXE_bintrie"))
        .output()
        .unwrap()
}

/// A standard output closed at the start (`>&-`) is an error before anything runs: the
/// standard library put /dev/null in its place, so the output vanished with status 0. A
/// `>/dev/null` the user asked for is no error.
#[test]
#[cfg(target_os = "linux")]
fn a_stdout_closed_at_the_start_is_an_error() {
    let run = |redirect: &str| through_sh(&format!("--version {redirect}"));
    let closed = run(">&-");
    assert_eq!(closed.status.code(), Some(1), "{}", stderr(&closed));
    assert!(
        stderr(&closed).contains("standard output is closed"),
        "{}",
        stderr(&closed)
    );
    let discarded = run(">/dev/null");
    assert_eq!(discarded.status.code(), Some(0), "{}", stderr(&discarded));
    let piped = run("");
    assert!(String::from_utf8_lossy(&piped.stdout).starts_with("bintrie "));
}

/// A standard input closed at the start (`<&-`) is no input to read: `root`, `import` and
/// `verify-proof --proof -` reading it are refused (they took it for an empty input, printing the empty tree's root or
/// making an empty database); an empty input given as one (`</dev/null`) is no error.
#[test]
#[cfg(target_os = "linux")]
fn a_stdin_closed_at_the_start_is_no_empty_input() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let run = |args: &str, redirect: &str| through_sh(&format!("{args} {redirect}"));
    let import = format!("import --db {}", db.display());
    for args in ["root", import.as_str(), "verify-proof --proof -"] {
        let closed = run(args, "<&-");
        assert_eq!(closed.status.code(), Some(1), "{args}: {}", stderr(&closed));
        assert!(
            stderr(&closed).contains("standard input is closed"),
            "{args}: {}",
            stderr(&closed)
        );
        assert!(!db.exists(), "{args}: a database was made");
    }
    let empty = run("root", "</dev/null");
    assert_eq!(empty.status.code(), Some(0), "{}", stderr(&empty));
}

/// `exec > /dev/full` and `exec | head -0` panicked in `println!`.
#[test]
fn exec_output_to_a_full_or_closed_stdout_is_an_error() {
    let block = fixture("19426587-cancun.block.json");
    for json in [false, true] {
        let args: &[&str] = if json { &["--json"] } else { &[] };
        let full = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .unwrap();
        let child = bin()
            .arg("exec")
            .arg("--fixture")
            .arg(&block)
            .arg("--relaxed")
            .args(args)
            .stdout(full)
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let out = wait(child, Duration::from_secs(300), "exec > /dev/full");
        assert_error(&out, "writing output to stdout: No space left on device");

        let mut child = bin()
            .arg("exec")
            .arg("--fixture")
            .arg(&block)
            .arg("--relaxed")
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        drop(child.stdout.take()); // the reader is gone before anything is written
        let out = wait(child, Duration::from_secs(300), "exec | head -0");
        assert_error(&out, "writing output to stdout: Broken pipe");
    }
}

// ---------------------------------------------------------------------------------------------
// Arbitrary input through the binary: an exit status of 0 or 1, never a panic.

fn assert_no_panic(out: &Output) -> Result<(), TestCaseError> {
    let stderr = String::from_utf8_lossy(&out.stderr);
    prop_assert!(matches!(out.status.code(), Some(0 | 1)), "{}", stderr);
    prop_assert!(!stderr.contains("panicked"), "{}", stderr);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 48,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn root_never_panics_on_arbitrary_lines(
        bytes in prop_oneof![
            prop::collection::vec(any::<u8>(), 0..5000),
            prop::collection::vec(
                "(0[xX])?[0-9a-fA-F+é ]{0,66}[ \t]{0,2}(0[xX])?[0-9a-fA-F+é]{0,66}(\r?\n)?",
                0..6,
            ).prop_map(|lines| lines.join("\n").into_bytes()),
        ],
    ) {
        assert_no_panic(&root_on_file(&bytes))?;
    }

    #[test]
    fn root_never_panics_on_arbitrary_allocs(
        text in prop_oneof![
            any::<String>(),
            (
                "(0[xX])?[0-9a-fA-F]{38,41}",
                "(0[xX])?[0-9a-fA-F_+\\- é]{0,6}",
                "(0[xX])?[0-9a-fA-Fé]{0,8}",
                "(0[xX])?[0-9]{0,3}",
            ).prop_map(|(a, v, code, slot)| {
                json!({ "alloc": { a: {"balance": v, "nonce": v, "code": code,
                                       "storage": { slot: v }} } })
                .to_string()
            }),
        ],
    ) {
        assert_no_panic(&root_on_alloc(&text))?;
    }
}
