//! `bintrie exec --witness-out` and `--stateless` on the mainnet fixtures: every block's
//! witness (either encoding) runs the block with no database and without the fixture's
//! pre-state (removed from the copy the stateless run reads), valid and to the stateful root;
//! damaged, truncated, foreign or missing witnesses fail with a clear error, never a panic.

use crate::common::*;

use serde_json::Value;
use std::path::{Path, PathBuf};

const FIXTURES: [&str; 4] = [
    "22615247-prague.zkpi.json",
    "22188088-cancun.zkpi.json",
    "19426587-cancun.block.json",
    "21230867-cancun.rpccache.json.gz",
];

fn run(args: &[&std::ffi::OsStr]) -> std::process::Output {
    bin().arg("exec").args(args).output().unwrap()
}

fn json_of(o: &std::process::Output) -> Value {
    assert!(o.status.success(), "{}\n{}", stdout(o), stderr(o));
    serde_json::from_str(&stdout(o)).unwrap()
}

/// `exec --json --witness-out W --witness-encoding E` on `fixture`.
fn with_witness(fixture: &Path, w: &Path, encoding: &str) -> Value {
    json_of(&run(&[
        "--relaxed".as_ref(),
        "--json".as_ref(),
        "--fixture".as_ref(),
        fixture.as_os_str(),
        "--witness-out".as_ref(),
        w.as_os_str(),
        "--witness-encoding".as_ref(),
        encoding.as_ref(),
    ]))
}

fn stateless(fixture: &Path, w: &Path) -> std::process::Output {
    run(&[
        "--json".as_ref(),
        "--fixture".as_ref(),
        fixture.as_os_str(),
        "--stateless".as_ref(),
        w.as_os_str(),
    ])
}

/// A copy of `name` in `dir` that has no pre-state: a zkpi fixture without `extra.preState`,
/// an rpccache without its answers at the parent, a block file alone (no sibling pre-state).
fn without_pre_state(dir: &Path, name: &str) -> PathBuf {
    edited(dir, name, |j| {
        if let Some(extra) = j.get_mut("extra") {
            extra["preState"] = Value::Null;
        }
        for table in ["balance", "transaction_count", "code", "storage"] {
            if j.get(table).is_some() {
                j[table] = Value::Null;
            }
        }
    })
}

#[test]
fn every_fixture_runs_stateless_from_its_witness() {
    let dir = tempfile::tempdir().unwrap();
    for (i, name) in FIXTURES.iter().enumerate() {
        // One fixture in the grouped-blob encoding, the rest as multiproofs.
        let encoding = if i == 0 { "blobs" } else { "multiproof" };
        let w = dir.path().join(format!("{i}.witness"));
        let full = with_witness(&fixture(name), &w, encoding);
        assert_eq!(full["valid"], true, "{name}");
        let report = &full["witness"];
        assert_eq!(report["encoding"], encoding);
        let on_disk = std::fs::metadata(&w).unwrap().len();
        assert_eq!(full["witness_bytes"].as_u64(), Some(on_disk), "{name}");
        let (m, b) = (&report["multiproof"], &report["blobs"]);
        for part in [m, b] {
            let sum: u64 = ["nodes", "values", "code"]
                .iter()
                .map(|k| part[k].as_u64().unwrap())
                .sum();
            assert!(sum < part["total"].as_u64().unwrap(), "{name}: {part}");
        }
        assert!(
            m["total"].as_u64() < b["total"].as_u64(),
            "{name}: {report}"
        );
        assert_eq!(m["code"], b["code"]);

        let bare = without_pre_state(dir.path(), name);
        let out = stateless(&bare, &w);
        let s = json_of(&out);
        assert_eq!(s["valid"], true, "{name}: {s}");
        assert_eq!(s["root"], full["root"], "{name}");
        assert_eq!(s["stateless"], true);
        assert_eq!(s["witness"]["encoding"], encoding);
        assert_eq!(s["witness_bytes"].as_u64(), Some(on_disk));
        assert_eq!(s["pre_root"], full["pre_state"]["root"], "{name}");
    }
}

/// A witness that cannot be written after the block was committed to `--db` says where the
/// block is: a rerun into that database is refused as not empty.
#[test]
fn a_witness_that_cannot_be_written_says_the_block_is_committed() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let o = run(&[
        "--relaxed".as_ref(),
        "--fixture".as_ref(),
        fixture(FIXTURES[0]).as_os_str(),
        "--db".as_ref(),
        db.as_os_str(),
        "--witness-out".as_ref(),
        "/dev/full".as_ref(),
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.contains("is committed to") && err.contains("witness could not be written"),
        "{err}"
    );
}

#[test]
fn bad_witnesses_fail_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let name = FIXTURES[1];
    let fx = fixture(name);
    let w = dir.path().join("w");
    let root = with_witness(&fx, &w, "multiproof")["root"].clone();
    let good = std::fs::read(&w).unwrap();
    let try_bytes = |bytes: &[u8]| {
        let p = dir.path().join("bad");
        std::fs::write(&p, bytes).unwrap();
        stateless(&fx, &p)
    };
    let fails = |bytes: &[u8], msg: &str| {
        let o = try_bytes(bytes);
        assert!(!o.status.success(), "{msg}: accepted");
        let e = stderr(&o);
        assert!(e.contains(msg), "expected `{msg}` in: {e}");
        assert!(!e.contains("panicked"), "{e}");
    };
    fails(&good[..good.len() / 2], "runs past the end");
    fails(&good[..5], "runs past the end");
    fails(b"{\"not\": \"a witness\"}", "not a bintrie witness");
    fails(&[good.as_slice(), b"x"].concat(), "1 trailing bytes");
    // The block number (header bytes 12..20): another block's witness.
    let mut other = good.clone();
    other[19] ^= 1;
    fails(&other, "is the witness of block");
    // The pre-state root (bytes 20..52): nothing proves against it.
    let mut root_changed = good.clone();
    root_changed[25] ^= 0x40;
    fails(&root_changed, "does not prove its pre-state");
    // The last byte of the last code (the codes end the file): that code is no longer the
    // one its account names, and the run says the witness lacks it (it said "not in the code
    // table", as of a store).
    let mut code_changed = good.clone();
    *code_changed.last_mut().unwrap() ^= 0x01;
    fails(&code_changed, "is not in the witness");
    // Flipped bytes across the file: refused, or (a byte that cannot matter) the same root.
    for i in (52..good.len()).step_by(good.len() / 37) {
        let mut bad = good.clone();
        bad[i] ^= 0x08;
        let o = try_bytes(&bad);
        let e = stderr(&o);
        assert!(!e.contains("panicked"), "byte {i}: {e}");
        if o.status.success() {
            assert_eq!(json_of(&o)["root"], root, "byte {i} changed the root");
        }
    }
    // A trusted pre-state root: the witness must be against it.
    let with_root = |r: &str| {
        run(&[
            "--json".as_ref(),
            "--fixture".as_ref(),
            fx.as_os_str(),
            "--stateless".as_ref(),
            w.as_os_str(),
            "--pre-root".as_ref(),
            r.as_ref(),
        ])
    };
    let own = json_of(&stateless(&fx, &w))["pre_root"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(json_of(&with_root(&own))["root"], root);
    let o = with_root(&format!("0x{}", "ab".repeat(32)));
    assert!(
        stderr(&o).contains("not the trusted --pre-root"),
        "{}",
        stderr(&o)
    );
    // A value that is no root is a usage error (exit status 2), as every bad value is.
    let o = with_root("0x12");
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("--pre-root"), "{}", stderr(&o));
    // Another block's witness.
    let w2 = dir.path().join("w2");
    with_witness(&fixture(FIXTURES[0]), &w2, "multiproof");
    let o = stateless(&fx, &w2);
    assert!(
        stderr(&o).contains("is the witness of block"),
        "{}",
        stderr(&o)
    );
    // Missing file, a directory, and flags that make no sense without a database.
    let o = stateless(&fx, &dir.path().join("missing"));
    assert!(stderr(&o).contains("reading"), "{}", stderr(&o));
    let o = stateless(&fx, dir.path());
    assert!(!o.status.success());
    let o = run(&[
        "--fixture".as_ref(),
        fx.as_os_str(),
        "--stateless".as_ref(),
        w.as_os_str(),
        "--db".as_ref(),
        dir.path().join("db").as_os_str(),
    ]);
    assert!(stderr(&o).contains("cannot be used with"), "{}", stderr(&o));
    let o = run(&[
        "--relaxed".as_ref(),
        "--fixture".as_ref(),
        fx.as_os_str(),
        "--witness-out".as_ref(),
        dir.path().as_os_str(),
    ]);
    assert!(stderr(&o).contains("is a directory"), "{}", stderr(&o));
}

/// `--witness-out` replaces only a witness: a path among a database's files (the `--db` being
/// made, or another database), or a file that is not a witness (the fixture itself), is refused
/// before the block runs and left as it was; a witness is replaced whole; a block that does
/// not validate writes none. No temporary file is left beside the witness.
#[test]
fn a_witness_never_overwrites_what_is_not_a_witness() {
    let dir = tempfile::tempdir().unwrap();
    let fx = dir.path().join("fx.json");
    std::fs::copy(fixture(FIXTURES[0]), &fx).unwrap();
    let before = std::fs::read(&fx).unwrap();
    let db = dir.path().join("db");
    let exec_to = |w: &Path, extra: &[&std::ffi::OsStr]| {
        let mut args: Vec<&std::ffi::OsStr> = vec![
            "--relaxed".as_ref(),
            "--fixture".as_ref(),
            fx.as_os_str(),
            "--witness-out".as_ref(),
            w.as_os_str(),
        ];
        args.extend_from_slice(extra);
        run(&args)
    };
    // Into the --db being made: refused, and no database made.
    let o = exec_to(&db.join("mdbx.dat"), &["--db".as_ref(), db.as_os_str()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("inside --db"), "{}", stderr(&o));
    assert!(!db.exists());
    // Another database's file: refused, the database intact.
    let other = dir.path().join("other");
    let o = exec_to(
        dir.path().join("w").as_path(),
        &["--db".as_ref(), other.as_os_str()],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let data = std::fs::read(other.join("mdbx.dat")).unwrap();
    let o = exec_to(&other.join("mdbx.dat"), &[]);
    assert!(stderr(&o).contains("holds a database"), "{}", stderr(&o));
    assert_eq!(std::fs::read(other.join("mdbx.dat")).unwrap(), data);
    // The fixture itself: refused, unchanged.
    let o = exec_to(&fx, &[]);
    assert!(
        stderr(&o).contains("holds something other than a witness"),
        "{}",
        stderr(&o)
    );
    assert_eq!(std::fs::read(&fx).unwrap(), before);
    // A witness is replaced (here by the other encoding), whole.
    let w = dir.path().join("w");
    let first = std::fs::read(&w).unwrap();
    let o = exec_to(&w, &["--witness-encoding".as_ref(), "blobs".as_ref()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let second = std::fs::read(&w).unwrap();
    assert!(second.starts_with(b"BTWITNESS") && second != first);
    // With the mode a plain write gives (the same umask), not the temporary file's 0600.
    use std::os::unix::fs::PermissionsExt as _;
    let plain = dir.path().join("plain");
    std::fs::write(&plain, b"").unwrap();
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode();
    assert_eq!(mode(&w), mode(&plain));
    // Through a symbolic link (`/dev/stdout` is one): the link stays, its target is written.
    let link = dir.path().join("link");
    std::os::unix::fs::symlink(&w, &link).unwrap();
    let o = exec_to(&link, &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert_eq!(
        std::fs::read(&w).unwrap(),
        first,
        "the multiproof again, through the link"
    );
    // A block that does not validate (its recorded gas used changed) writes none.
    let bad = edited(dir.path(), FIXTURES[0], |j| {
        j["blocks"][0]["header"]["gasUsed"] = "0x1450d6".into();
    });
    let o = run(&[
        "--relaxed".as_ref(),
        "--fixture".as_ref(),
        bad.as_os_str(),
        "--witness-out".as_ref(),
        w.as_os_str(),
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stdout(&o).contains("not written to"), "{}", stdout(&o));
    assert_eq!(std::fs::read(&w).unwrap(), first);
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        !names.iter().any(|n| n.starts_with(".bintrie-witness")),
        "{names:?}"
    );
}
