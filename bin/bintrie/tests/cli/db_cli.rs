//! `bintrie import`/`info`/`get` end to end, and crash safety under kill -9.

use crate::common::*;

use rand::{Rng, SeedableRng, rngs::StdRng};
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn run_ok(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn import_matches_root_and_reads_back() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("in.txt");
    std::fs::write(&file, input(3000, 1)).unwrap();
    let db = dir.path().join("db");
    let f = file.to_str().unwrap();
    let d = db.to_str().unwrap();
    for g in ["2", "7"] {
        let db = dir.path().join(format!("db{g}"));
        let out = run_ok(bin().args([
            "import",
            "--db",
            db.to_str().unwrap(),
            "-g",
            g,
            "-i",
            f,
            "--batch",
            "1000",
            "--relaxed",
        ]));
        let roots = roots_printed(&out);
        assert_eq!(roots.len(), 3);
        let want = run_ok(bin().args(["root", "-i", f, "-g", g]));
        assert_eq!(roots[2], want.trim());
    }
    // Import in two runs: reopen and continue.
    let text = std::fs::read_to_string(&file).unwrap();
    let (a, b): (Vec<_>, Vec<_>) = text.lines().enumerate().partition(|(i, _)| *i < 1700);
    let fa = dir.path().join("a.txt");
    let fb = dir.path().join("b.txt");
    std::fs::write(
        &fa,
        a.iter().map(|(_, l)| format!("{l}\n")).collect::<String>(),
    )
    .unwrap();
    std::fs::write(
        &fb,
        b.iter().map(|(_, l)| format!("{l}\n")).collect::<String>(),
    )
    .unwrap();
    run_ok(bin().args(["import", "--db", d, "-i", fa.to_str().unwrap()]));
    let out = run_ok(bin().args(["import", "--db", d, "-i", fb.to_str().unwrap()]));
    let want = run_ok(bin().args(["root", "-i", f]));
    assert_eq!(roots_printed(&out).last().unwrap(), want.trim());
    let info: serde_json::Value =
        serde_json::from_str(&run_ok(bin().args(["info", "--db", d, "--json"]))).unwrap();
    assert_eq!(info["root"].as_str().unwrap(), want.trim());
    assert_eq!(info["block"], 2);
    assert_eq!(info["group_depth"], 5);
    assert_eq!(info["stems"], 3000);
    assert!(info["page_size"].as_u64().unwrap() >= 4096);
    // Both read paths return the value; an absent key prints nothing.
    let first = text.lines().next().unwrap();
    let (k, v) = first.split_once(' ').unwrap();
    for rp in ["trie", "flat"] {
        assert_eq!(
            run_ok(bin().args(["get", "--db", d, k, "--read-path", rp])).trim(),
            format!("0x{v}")
        );
        assert_eq!(
            run_ok(bin().args(["get", "--db", d, &"ab".repeat(32), "--read-path", rp])),
            ""
        );
    }
    // Errors: group-depth mismatch, missing database, bad line; the database stays intact.
    let out = bin()
        .args(["import", "--db", d, "-g", "6", "-i", f])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("group depth 5"));
    let out = bin()
        .args(["info", "--db", dir.path().join("none").to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let bad = dir.path().join("bad.txt");
    std::fs::write(&bad, format!("{first}\nnot a line\n")).unwrap();
    let out = bin()
        .args(["import", "--db", d, "-i", bad.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("bad.txt:2"));
    let info2: serde_json::Value =
        serde_json::from_str(&run_ok(bin().args(["info", "--db", d, "--json"]))).unwrap();
    assert_eq!(info2["root"], info["root"]);
}

/// kill -9 an import at random moments (20 times); each time the database opens at one of the
/// roots the uninterrupted run committed (the one for its block number), and finishing the
/// import gives the uninterrupted final root.
#[test]
fn crash_safety_under_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("in.txt");
    std::fs::write(&file, input(20_000, 2)).unwrap();
    let f = file.to_str().unwrap();
    let reference_db = dir.path().join("reference");
    let started = Instant::now();
    let out = run_ok(bin().args([
        "import",
        "--db",
        reference_db.to_str().unwrap(),
        "-i",
        f,
        "--batch",
        "500",
    ]));
    let full_time = started.elapsed();
    let reference = roots_printed(&out);
    assert_eq!(reference.len(), 40);
    let mut rng = StdRng::seed_from_u64(3);
    let mut mid_run_kills = 0;
    for round in 0..20 {
        let db = dir.path().join(format!("db{round}"));
        let d = db.to_str().unwrap();
        let mut child = bin()
            .args(["import", "--db", d, "-i", f, "--batch", "500"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let lines = std::thread::spawn(move || {
            BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
                .collect::<Vec<_>>()
        });
        let delay = rng.random_range(0..full_time.as_millis().max(20) as u64);
        std::thread::sleep(Duration::from_millis(delay));
        child.kill().unwrap(); // SIGKILL
        let status = child.wait().unwrap();
        let printed = roots_printed(&lines.join().unwrap().join("\n"));
        if !status.success() {
            mid_run_kills += 1;
        }
        // Every root printed before the kill is the reference root of its block.
        assert_eq!(printed[..], reference[..printed.len()]);
        if !db.join("mdbx.dat").exists() {
            continue; // killed before the database was created
        }
        // A writer killed between its MDBX syncs leaves a database that a reader may not
        // open until a writer has marked it synced (it says so): the documented step.
        let first = bin().args(["info", "--db", d, "--json"]).output().unwrap();
        let info: serde_json::Value = if first.status.success() {
            serde_json::from_slice(&first.stdout).unwrap()
        } else {
            let err = String::from_utf8_lossy(&first.stderr);
            assert!(err.contains("open it for writing once"), "{err}");
            run_ok(bin().args(["import", "--db", d, "-i", "/dev/null"]));
            serde_json::from_str(&run_ok(bin().args(["info", "--db", d, "--json"]))).unwrap()
        };
        let block = info["block"].as_u64().unwrap() as usize;
        let root = info["root"].as_str().unwrap();
        if block == 0 {
            assert_eq!(root, format!("0x{}", "0".repeat(64)));
        } else {
            assert_eq!(root, reference[block - 1], "round {round}: block {block}");
            assert!(block >= printed.len(), "a printed block was lost");
        }
        // Finish the import: the same final root.
        let out = run_ok(bin().args(["import", "--db", d, "-i", f, "--batch", "500"]));
        assert_eq!(
            roots_printed(&out).last().unwrap(),
            reference.last().unwrap()
        );
    }
    assert!(
        mid_run_kills >= 10,
        "only {mid_run_kills} kills landed mid-run"
    );
}

/// `import --bulk` (external sort in the smallest budget, so runs spill, then the streaming
/// build) gives the root `root` computes, a later line for a key winning; it refuses a
/// database that already holds blocks and leaves only the database's files behind.
#[test]
fn bulk_import_sorts_in_a_budget_and_matches_root() {
    let dir = tempfile::tempdir().unwrap();
    // 300,000 lines (> one 16 MiB run of ~216k writes), the last 1,000 rewriting earlier keys.
    let mut text = input(299_000, 9);
    let rewrites: String = text
        .lines()
        .take(1000)
        .map(|l| format!("{} {}\n", &l[..64], "11".repeat(32)))
        .collect();
    text.push_str(&rewrites);
    let file = dir.path().join("in.txt");
    std::fs::write(&file, &text).unwrap();
    let f = file.to_str().unwrap();
    let db = dir.path().join("db");
    let d = db.to_str().unwrap();
    let out = run_ok(bin().args([
        "import",
        "--db",
        d,
        "-i",
        f,
        "--bulk",
        "--memory-budget",
        "16",
        "-g",
        "4",
    ]));
    let want = run_ok(bin().args(["root", "-i", f]));
    assert_eq!(
        out.trim(),
        format!("committed block 1 entries 300000 root {}", want.trim())
    );
    let verify = run_ok(bin().args(["verify", "--db", d, "--no-progress"]));
    assert!(verify.contains(want.trim()), "{verify}");
    assert_eq!(
        std::fs::read_dir(&db)
            .unwrap()
            .filter(|e| e.as_ref().unwrap().file_name() != "journal")
            .count(),
        2,
        "sort runs left behind"
    );

    let again = bin()
        .args(["import", "--db", d, "-i", f, "--bulk"])
        .output()
        .unwrap();
    assert_eq!(again.status.code(), Some(1));
    let err = String::from_utf8_lossy(&again.stderr);
    assert!(err.contains("empty database"), "{err}");
    let budget_alone = bin()
        .args(["import", "--db", d, "-i", f, "--memory-budget", "64"])
        .output()
        .unwrap();
    assert_eq!(budget_alone.status.code(), Some(2), "clap refuses it");
    // A bulk build is one block: the write buffer's options are refused, not ignored.
    for buffer in [["--buffer-blocks", "4"], ["--buffer-mib", "4"]] {
        let o = bin()
            .args(["import", "--db", d, "-i", f, "--bulk"])
            .args(buffer)
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2), "{buffer:?}");
    }
    // A budget that would overflow when turned into bytes is refused, never wrapped.
    let huge = bin()
        .args([
            "import",
            "--db",
            d,
            "-i",
            f,
            "--bulk",
            "--memory-budget",
            "18446744073709551615",
        ])
        .output()
        .unwrap();
    assert_eq!(huge.status.code(), Some(2));

    // No lines: no block, as a plain import (a block 1 holding nothing made a later --bulk
    // into the same database refused as "not empty").
    let empty_in = dir.path().join("empty.txt");
    std::fs::write(&empty_in, "# nothing\n").unwrap();
    let e = dir.path().join("e");
    for _ in 0..2 {
        let o = bin()
            .args(["import", "--bulk", "--db", e.to_str().unwrap()])
            .args(["-i", empty_in.to_str().unwrap()])
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        assert!(
            o.stdout.is_empty(),
            "{}",
            String::from_utf8_lossy(&o.stdout)
        );
    }
    let o = bin()
        .args(["import", "--bulk", "--db", e.to_str().unwrap(), "-i", f])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stdout).starts_with("committed block 1 "));
    // Into a database that holds blocks, no lines are refused as any input is.
    let o = bin()
        .args(["import", "--bulk", "--db", e.to_str().unwrap()])
        .args(["-i", empty_in.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("empty database"));
}

/// `import --layout log`: the same blocks and roots as MDBX, `info`, `get` and `prove` on the
/// log, the other layout refused by name, and a bad line leaves the blocks before it.
#[test]
fn import_into_the_log_layout_matches_mdbx() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("in.txt");
    std::fs::write(&file, input(2500, 3)).unwrap();
    let f = file.to_str().unwrap();
    let (m, l) = (dir.path().join("m"), dir.path().join("l"));
    let roots = |out: &str| -> Vec<String> {
        out.lines()
            .filter_map(|l| l.split(" root ").nth(1))
            .map(|r| r.split(';').next().unwrap().to_owned())
            .collect()
    };
    let import = |db: &std::path::Path, extra: &[&str]| {
        run_ok(
            bin()
                .args([
                    "import",
                    "--db",
                    db.to_str().unwrap(),
                    "-i",
                    f,
                    "--batch",
                    "1000",
                ])
                .args(extra),
        )
    };
    let mdbx = import(&m, &[]);
    let log = import(&l, &["--layout", "log"]);
    assert_eq!(roots(&log).len(), 3, "{log}");
    assert_eq!(roots(&log), roots(&mdbx));
    assert!(log.contains("durable through block 3"), "{log}");
    let info = run_ok(bin().args(["info", "--db", l.to_str().unwrap(), "--json"]));
    let j: serde_json::Value = serde_json::from_str(info.trim()).unwrap();
    assert_eq!(j["layout"], "log");
    assert_eq!(j["block"], 3);
    assert_eq!(format!("{}", j["root"]).trim_matches('"'), roots(&log)[2]);
    assert_eq!(j["stems"], 2500);
    // `verify` re-hashes the whole log; a flipped byte fails it.
    let v = run_ok(bin().args([
        "verify",
        "--db",
        l.to_str().unwrap(),
        "--json",
        "--no-progress",
    ]));
    let v: serde_json::Value = serde_json::from_str(v.trim()).unwrap();
    assert_eq!(
        (v["ok"].clone(), v["layout"].clone(), v["stems"].clone()),
        (true.into(), "log".into(), 2500.into())
    );
    // `get` and `prove` read the log as they read MDBX: the same values on every read path,
    // nothing for an absent key, and the same proofs, byte for byte.
    let text = std::fs::read_to_string(&file).unwrap();
    let lines: Vec<(&str, &str)> = text.lines().map(|l| l.split_once(' ').unwrap()).collect();
    let absent = format!("0x{}", "11".repeat(32));
    for path in ["flat", "trie", "verified"] {
        let get = |db: &std::path::Path, key: &str| {
            run_ok(bin().args([
                "get",
                "--db",
                db.to_str().unwrap(),
                key,
                "--read-path",
                path,
            ]))
        };
        for i in [0, 1, 1234, 2499] {
            let (k, v) = lines[i];
            let on_log = get(&l, k);
            assert_eq!(on_log.trim(), format!("0x{v}"), "line {i}, {path}");
            assert_eq!(on_log, get(&m, k), "line {i}, {path}");
        }
        assert_eq!(get(&l, &absent), "", "{path}");
    }
    let prove = |db: &std::path::Path| {
        run_ok(
            bin()
                .args(["prove", "--db", db.to_str().unwrap(), &absent])
                .args(lines.iter().step_by(97).map(|(k, _)| *k)),
        )
    };
    let proofs = prove(&l);
    assert_eq!(
        proofs.lines().count(),
        1 + 2500usize.div_ceil(97),
        "{proofs}"
    );
    assert_eq!(proofs, prove(&m));
    let flipped = dir.path().join("flipped");
    std::fs::create_dir(&flipped).unwrap();
    let mut bytes = std::fs::read(l.join("log.000001")).unwrap();
    let at = bytes.len() / 2;
    bytes[at] ^= 0x04;
    std::fs::write(flipped.join("log.000001"), &bytes).unwrap();
    let out = bin()
        .args(["verify", "--db", flipped.to_str().unwrap(), "--no-progress"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("corrupt log"),
        "{out:?}"
    );
    // The other layout is refused by name.
    let fails = |args: &[&str]| {
        let out = bin().args(args).output().unwrap();
        assert!(!out.status.success(), "{args:?}");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let key = absent;
    let e = fails(&["import", "--db", l.to_str().unwrap(), "-i", f]);
    assert!(e.contains("add --layout log"), "{e}");
    let e = fails(&[
        "import",
        "--db",
        m.to_str().unwrap(),
        "-i",
        f,
        "--layout",
        "log",
    ]);
    assert!(e.contains("holds an MDBX database"), "{e}");
    // A directory holding both is refused by every command, not read as one of them.
    let both = dir.path().join("both");
    std::fs::create_dir(&both).unwrap();
    for src in [&m, &l] {
        for entry in std::fs::read_dir(src).unwrap() {
            let entry = entry.unwrap();
            std::fs::copy(entry.path(), both.join(entry.file_name())).unwrap();
        }
    }
    let b = both.to_str().unwrap();
    for args in [
        vec!["info", "--db", b],
        vec!["verify", "--db", b],
        vec!["get", "--db", b, &key],
        vec!["prove", "--db", b, &key],
        vec!["compact", "--db", b],
        vec!["import", "--db", b, "-i", f],
        vec!["import", "--db", b, "-i", f, "--layout", "log"],
    ] {
        let e = fails(&args);
        assert!(e.contains("holds both an MDBX database"), "{args:?}: {e}");
    }
    // A file is refused as one, not taken for an empty directory ("no database here").
    let plain = dir.path().join("plain");
    std::fs::write(&plain, "x").unwrap();
    let p = plain.to_str().unwrap();
    for args in [
        vec!["info", "--db", p],
        vec!["verify", "--db", p],
        vec!["get", "--db", p, &key],
        vec!["compact", "--db", p],
        vec!["import", "--db", p, "-i", f, "--layout", "log"],
    ] {
        let e = fails(&args);
        assert!(
            e.contains("is a file: a database is a directory"),
            "{args:?}: {e}"
        );
    }
    // --bulk and --page-size are MDBX's: refused with the log layout (nothing made), taken
    // with `--layout mdbx` spelled out (which clap used to refuse as well).
    let fresh = dir.path().join("fresh");
    let fr = fresh.to_str().unwrap();
    for flags in [&["--bulk"][..], &["--page-size", "4096"]] {
        let mut args = vec!["import", "--db", fr, "-i", f, "--layout", "log"];
        args.extend_from_slice(flags);
        let e = fails(&args);
        assert!(
            e.contains(&format!("{} applies to the MDBX layout only", flags[0])),
            "{args:?}: {e}"
        );
        assert!(!fresh.exists(), "{args:?}");
        args[6] = "mdbx";
        run_ok(bin().args(&args));
        std::fs::remove_dir_all(&fresh).unwrap();
    }
    // An existing database keeps its page size: another is refused, not ignored; a value that
    // is no page size is a usage error (exit status 2).
    run_ok(bin().args(["import", "--db", fr, "-i", f, "--page-size", "8192"]));
    let e = fails(&["import", "--db", fr, "-i", f, "--page-size", "16384"]);
    assert!(e.contains("page size is 8192 bytes"), "{e}");
    let o = bin()
        .args(["import", "--db", fr, "-i", f, "--page-size", "3000"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    std::fs::remove_dir_all(&fresh).unwrap();
    // A bad line in the second batch: block 1 stays committed.
    let bad = dir.path().join("bad.txt");
    std::fs::write(&bad, input(1200, 3) + "zz 00\n").unwrap();
    let b = dir.path().join("b");
    let out = bin()
        .args(["import", "--db", b.to_str().unwrap(), "--layout", "log"])
        .args(["-i", bad.to_str().unwrap(), "--batch", "1000"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains(":1201:"));
    let info = run_ok(bin().args(["info", "--db", b.to_str().unwrap(), "--json"]));
    assert!(info.contains("\"block\":1"), "{info}");
}

/// `compact` on a log whose early segments are mostly superseded: it drops segments and
/// prints what it did, the state (root, block) is the same and verifies whole, `info` still
/// finds the log (its first segment gone) and `import` goes on over it; bad shares, an MDBX
/// database, a directory without a log and a log another process writes are refused by name.
#[test]
fn compact_drops_superseded_segments_and_the_state_goes_on() {
    use bintrie_logstore::{LogOptions, LogStore};
    type Trie = bintrie_trie::Trie<LogStore, bintrie_node::Sha256Hasher>;
    let dir = tempfile::tempdir().unwrap();
    let l = dir.path().join("log");
    let d = l.to_str().unwrap();
    {
        // Small segments, no compaction of its own, blocks that rewrite earlier keys.
        let options = LogOptions {
            group_depth: Some(5),
            segment_bytes: 32 << 10,
            compact_garbage: None,
            ..Default::default()
        };
        let mut trie = Trie::new(LogStore::open(&l, &options).unwrap(), 5).unwrap();
        let mut rng = StdRng::seed_from_u64(3);
        let keys: Vec<bintrie_keys::TreeKey> = (0..300)
            .map(|_| bintrie_keys::TreeKey::from_bytes(rng.random()))
            .collect();
        for block in 1..=40u64 {
            let writes: Vec<_> = (0..60)
                .map(|_| (keys[rng.random_range(0..keys.len())], rng.random()))
                .collect();
            trie.update(writes).unwrap();
            trie.commit_with(|s, set| s.write_block(set, block, &[]))
                .unwrap();
        }
    }
    let info = |d: &str| -> serde_json::Value {
        serde_json::from_str(run_ok(bin().args(["info", "--db", d, "--json"])).trim()).unwrap()
    };
    let before = info(d);
    let saved = dir.path().join("saved");
    std::fs::create_dir(&saved).unwrap();
    for e in std::fs::read_dir(&l).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), saved.join(e.file_name())).unwrap();
    }
    let out = run_ok(bin().args(["compact", "--db", d, "--json"]));
    let c: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert!(!c["dropped"].as_array().unwrap().is_empty(), "{c}");
    assert_eq!(c["finished_at_open"], serde_json::json!([]), "{c}");
    assert_eq!(
        (&c["root"], &c["block"]),
        (&before["root"], &before["block"])
    );
    assert!(
        c["log_bytes"].as_u64() < before["log_bytes"].as_u64(),
        "{c}"
    );
    assert!(!l.join("log.000001").exists());
    let after = info(d);
    assert_eq!(after["layout"], "log");
    assert_eq!(
        (&after["root"], &after["block"]),
        (&before["root"], &before["block"])
    );
    assert_eq!(after["live_bytes"], before["live_bytes"]);
    assert!(after["garbage_bytes"].as_u64() < before["garbage_bytes"].as_u64());
    let v = run_ok(bin().args(["verify", "--db", d, "--json", "--no-progress"]));
    let v: serde_json::Value = serde_json::from_str(v.trim()).unwrap();
    assert_eq!(v["ok"], true, "{v}");
    // A crash after the compaction's last block, before it removed its newest dropped segment
    // (they go oldest first): the next writer's open removes it, and `compact` says so.
    let newest = c["dropped"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .as_u64()
        .unwrap();
    let name = format!("log.{newest:06}");
    let restore = || std::fs::copy(saved.join(&name), l.join(&name)).unwrap();
    restore();
    // A reader leaves it to the next writer, and says so; it is not counted as the log's.
    let pending = info(d);
    assert_eq!(
        pending["pending_drops"],
        serde_json::json!([newest]),
        "{pending}"
    );
    assert_eq!(
        (&pending["segments"], &pending["log_bytes"]),
        (&after["segments"], &after["log_bytes"])
    );
    let text = run_ok(bin().args(["info", "--db", d]));
    assert!(
        text.contains(&format!(
            "pending      {name} left by an interrupted compaction"
        )),
        "{text}"
    );
    let out = run_ok(bin().args(["compact", "--db", d, "--json", "--min-garbage", "1"]));
    let j: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(j["finished_at_open"], serde_json::json!([newest]), "{j}");
    assert!(!l.join(&name).exists());
    restore();
    let text = run_ok(bin().args(["compact", "--db", d, "--min-garbage", "1"]));
    assert!(
        text.contains(&format!(
            "finished     an interrupted compaction: removed 1 segment it had dropped ({name})"
        )),
        "{text}"
    );
    assert_eq!(info(d)["root"], before["root"]);
    // The text form says the state did not change.
    let text = run_ok(bin().args(["compact", "--db", d, "--min-garbage", "0"]));
    assert!(
        text.contains("(unchanged)") && text.contains("dropped"),
        "{text}"
    );
    // The state goes on: an import of new lines commits blocks after it.
    let file = dir.path().join("in.txt");
    std::fs::write(&file, input(500, 9)).unwrap();
    let imported = run_ok(bin().args([
        "import",
        "--db",
        d,
        "--layout",
        "log",
        "-i",
        file.to_str().unwrap(),
        "--batch",
        "250",
    ]));
    assert!(imported.contains("committed block 42"), "{imported}");
    let v = run_ok(bin().args(["verify", "--db", d, "--json", "--no-progress"]));
    assert!(v.contains("\"ok\":true"), "{v}");
    // Refused, by name.
    let fails = |args: &[&str]| {
        let out = bin().args(args).output().unwrap();
        assert!(!out.status.success(), "{args:?}");
        stderr(&out)
    };
    for bad in ["1.5", "-0.1", "NaN", "half", "０.5"] {
        let e = fails(&["compact", "--db", d, "--min-garbage", bad]);
        assert!(e.contains("--min-garbage"), "{bad}: {e}");
    }
    let m = dir.path().join("mdbx");
    run_ok(bin().args([
        "import",
        "--db",
        m.to_str().unwrap(),
        "-i",
        file.to_str().unwrap(),
    ]));
    let e = fails(&["compact", "--db", m.to_str().unwrap()]);
    assert!(e.contains("MDBX"), "{e}");
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let e = fails(&["compact", "--db", empty.to_str().unwrap()]);
    assert!(e.contains("no state in the log layout"), "{e}");
    // A log with one segment has nothing sealed to compact, and says so (not "no sealed
    // segment is 0 superseded": every sealed segment is at least that). -0 is 0.
    let one = dir.path().join("one");
    run_ok(bin().args([
        "import",
        "--db",
        one.to_str().unwrap(),
        "--layout",
        "log",
        "-i",
        file.to_str().unwrap(),
    ]));
    for share in ["0.5", "0", "-0"] {
        let one = one.to_str().unwrap();
        let text = run_ok(bin().args(["compact", "--db", one, "--min-garbage", share]));
        assert!(
            text.contains("dropped      0 segments (0 bytes): there is no sealed segment yet")
                && text.contains("waits until it is full"),
            "{share}: {text}"
        );
    }
    let writer = LogStore::open(&l, &LogOptions::default()).unwrap();
    let e = fails(&["compact", "--db", d]);
    assert!(e.contains("LOCK is held"), "{e}");
    drop(writer);
}

/// Rewrites a log segment's last node record holding `from` (a value of a stem blob) to hold
/// `to` instead, its CRC and its block's body CRC recomputed, so that nothing a record check
/// sees is wrong: damage only hashing finds. Record format: `crates/logstore/src/record.rs`.
fn forge_log_value(segment: &std::path::Path, from: &[u8; 32], to: &[u8; 32]) {
    const HEADER: usize = 10;
    let mut b = std::fs::read(segment).unwrap();
    let u32_at = |b: &[u8], i: usize| u32::from_le_bytes(b[i..i + 4].try_into().unwrap());
    // (offset, kind, key length, record length) of every record, page tails skipped.
    let mut records = Vec::new();
    let mut pos = 0;
    while pos < b.len() {
        let room = 4096 - pos % 4096;
        if room < HEADER {
            pos += room;
            continue;
        }
        let (kind, key_len, value_len) = (b[pos + 4], b[pos + 5] as usize, u32_at(&b, pos + 6));
        let len = HEADER + key_len + value_len as usize;
        assert_eq!(crc32fast::hash(&b[pos + 4..pos + len]), u32_at(&b, pos));
        records.push((pos, kind, key_len, len));
        pos += len;
    }
    let &(at, _, _, len) = records
        .iter()
        .rev()
        .find(|r| r.1 == 1 && b[r.0..r.0 + r.3].windows(32).any(|w| w == from))
        .expect("a node record holding the value");
    let i = at + b[at..at + len].windows(32).position(|w| w == from).unwrap();
    b[i..i + 32].copy_from_slice(to);
    let crc = crc32fast::hash(&b[at + 4..at + len]);
    b[at..at + 4].copy_from_slice(&crc.to_le_bytes());
    // The commit record that ends the block: its body CRC (value bytes 53..57) covers the
    // block's records from its first byte (value bytes 57..65), then its own CRC.
    let &(cp, _, key_len, clen) = records
        .iter()
        .find(|r| r.1 == 5 && r.0 > at)
        .expect("the block's commit record");
    let v = cp + HEADER + key_len;
    let start = u64::from_le_bytes(b[v + 57..v + 65].try_into().unwrap()) as usize;
    let body = crc32fast::hash(&b[start..cp]);
    b[v + 53..v + 57].copy_from_slice(&body.to_le_bytes());
    let crc = crc32fast::hash(&b[cp + 4..cp + clen]);
    b[cp..cp + 4].copy_from_slice(&crc.to_le_bytes());
    std::fs::write(segment, b).unwrap();
}

/// On a log, `get --read-path trie` is the verified walk, as documented: a value forged in a
/// stem record with every checksum recomputed is what `flat` returns (it trusts the record,
/// as MDBX's flat read trusts the stem table), while `trie`, `verified` and `prove` refuse it
/// naming the node whose hash does not match.
#[test]
fn a_forged_log_record_is_read_by_flat_and_refused_by_the_trie_walk() {
    let dir = tempfile::tempdir().unwrap();
    let (value, forged) = ([0x5au8; 32], [0xa5u8; 32]);
    let key = format!("{:064x}", 7);
    let mut text = input(300, 11);
    text.push_str(&format!("{key} {}\n", hex::encode(value)));
    let file = dir.path().join("in.txt");
    std::fs::write(&file, text).unwrap();
    let l = dir.path().join("l");
    run_ok(
        bin()
            .args(["import", "--layout", "log", "--db", l.to_str().unwrap()])
            .args(["-i", file.to_str().unwrap()]),
    );
    let get = |path: &str| {
        bin()
            .args([
                "get",
                "--db",
                l.to_str().unwrap(),
                &key,
                "--read-path",
                path,
            ])
            .output()
            .unwrap()
    };
    for path in ["flat", "trie", "verified"] {
        let o = get(path);
        assert!(o.status.success(), "{path}: {}", stderr(&o));
        assert_eq!(
            String::from_utf8_lossy(&o.stdout).trim(),
            format!("0x{}", hex::encode(value))
        );
    }
    forge_log_value(&l.join("log.000001"), &value, &forged);
    let o = get("flat");
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).trim(),
        format!("0x{}", hex::encode(forged))
    );
    let prove = bin()
        .args(["prove", "--db", l.to_str().unwrap(), &key])
        .output()
        .unwrap();
    for (what, o) in [
        ("trie", get("trie")),
        ("verified", get("verified")),
        ("prove", prove),
    ] {
        assert_eq!(o.status.code(), Some(1), "{what}: {o:?}");
        assert!(o.stdout.is_empty(), "{what}");
        assert!(stderr(&o).contains("hash"), "{what}: {}", stderr(&o));
    }
}

/// A log directory with no whole commit record (a creation cut short, or a short file that is
/// not a log) is refused by the commands that read it, not shown as a committed empty state.
#[test]
fn a_log_without_a_committed_block_is_refused_by_readers() {
    let dir = tempfile::tempdir().unwrap();
    let g = dir.path().join("g");
    std::fs::create_dir(&g).unwrap();
    let key = format!("0x{}", "11".repeat(32));
    for (bytes, says) in [
        (&b""[..], "holds no committed block"),
        (b"hello world this is not a log\n", "not a state log"),
    ] {
        std::fs::write(g.join("log.000001"), bytes).unwrap();
        for args in [
            vec!["get", "--db", g.to_str().unwrap(), &key],
            vec!["prove", "--db", g.to_str().unwrap(), &key],
            vec!["verify", "--db", g.to_str().unwrap(), "--no-progress"],
            vec!["info", "--db", g.to_str().unwrap()],
        ] {
            let o = bin().args(&args).output().unwrap();
            assert_eq!(o.status.code(), Some(1), "{args:?}: {o:?}");
            assert!(stderr(&o).contains(says), "{args:?}: {}", stderr(&o));
            assert!(o.stdout.is_empty(), "{args:?}");
        }
    }
    // A log created by a writer with nothing in it holds the empty state's commit: read.
    let e = dir.path().join("e");
    run_ok(bin().args([
        "import",
        "--layout",
        "log",
        "--db",
        e.to_str().unwrap(),
        "-i",
        "/dev/null",
    ]));
    assert_eq!(
        run_ok(bin().args(["get", "--db", e.to_str().unwrap(), &key])),
        ""
    );
}

/// Warnings written to a pipe or a file are plain text (the colour codes were written whatever
/// stderr was, into every log file).
#[test]
fn warnings_to_a_pipe_carry_no_colour_codes() {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let file = dir.path().join("in.txt");
    std::fs::write(&file, input(50, 3)).unwrap();
    let o = bin()
        .args(["import", "--layout", "log", "--db"])
        .arg(&db)
        .arg("-i")
        .arg(&file)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    // Bytes past the last commit: a reader warns that it reads up to the last whole block.
    std::fs::OpenOptions::new()
        .append(true)
        .open(db.join("log.000001"))
        .unwrap()
        .write_all(&[0xab; 7])
        .unwrap();
    let o = bin()
        .env_remove("NO_COLOR")
        .args(["info", "--db"])
        .arg(&db)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stderr(&o);
    assert!(
        text.contains("WARN") && text.contains("incomplete"),
        "{text}"
    );
    assert!(!text.contains('\x1b'), "{text:?}");
}
