//! The database commands off the happy path, as a hostile user would drive them: two writers
//! at once, readers beside a writer, read-only and truncated files, flipped bytes, a closed or
//! full stdout, a failed import, and a full disk.

use crate::common::*;

use rand::{Rng, SeedableRng, rngs::StdRng};
use std::path::Path;
use std::process::{Command, Output, Stdio};

fn import(db: &Path, file: &Path, batch: &str, extra: &[&str]) -> Output {
    bin()
        .args(["import", "--db"])
        .arg(db)
        .arg("-i")
        .arg(file)
        .args(["--batch", batch])
        .args(extra)
        .output()
        .unwrap()
}

/// A temporary directory with `lines` random input lines (`seed`) in `in.txt`, imported in
/// batches of `batch` (with `extra` arguments) into `db` there: the directory, the input and
/// the database.
fn imported(
    lines: usize,
    seed: u64,
    batch: &str,
    extra: &[&str],
) -> (tempfile::TempDir, std::path::PathBuf, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("in.txt");
    std::fs::write(&file, input(lines, seed)).unwrap();
    let db = dir.path().join("db");
    let o = import(&db, &file, batch, extra);
    assert!(o.status.success(), "{}", stderr(&o));
    (dir, file, db)
}

fn last_root(o: &Output) -> String {
    roots_printed(&String::from_utf8_lossy(&o.stdout))
        .pop()
        .unwrap_or_default()
}

fn verify(db: &Path) -> Output {
    bin()
        .args(["verify", "--no-progress", "--db"])
        .arg(db)
        .output()
        .unwrap()
}

/// The root of `file` alone, from `bintrie root`.
fn root_of(file: &Path) -> String {
    let o = bin().arg("root").arg("-i").arg(file).output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

/// `import --relaxed --db DB -i INPUT ARGS` started, its stdout and stderr piped.
fn spawn_import(db: &Path, input: &Path, args: &[&str]) -> std::process::Child {
    bin()
        .args(["import", "--relaxed", "--db"])
        .arg(db)
        .arg("-i")
        .arg(input)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

#[test]
fn two_racing_importers_never_lose_an_update() {
    let dir = tempfile::tempdir().unwrap();
    let (fa, fb) = (dir.path().join("a.txt"), dir.path().join("b.txt"));
    let (lines_a, lines_b) = (input(4000, 1), input(4000, 2));
    std::fs::write(&fa, &lines_a).unwrap();
    std::fs::write(&fb, &lines_b).unwrap();
    // The first `n` lines of an input.
    let head =
        |s: &str, n: usize| -> String { s.lines().take(n).map(|l| l.to_string() + "\n").collect() };
    for trial in 0..3 {
        let db = dir.path().join(format!("race{trial}"));
        let spawn = |f: &Path| spawn_import(&db, f, &["--batch", "100"]);
        let (a, b) = (spawn(&fa), spawn(&fb));
        let (a, b) = (a.wait_with_output().unwrap(), b.wait_with_output().unwrap());
        let v = verify(&db);
        assert!(v.status.success(), "trial {trial}: {}", stderr(&v));
        let root = info_json(&db)["root"].as_str().unwrap().to_string();
        // No lost update: every block a writer reported committed is in the database, and
        // nothing else is. A writer that lost the race says so and stops; the blocks it had
        // committed before stay (they were durable when it printed them).
        let committed = |o: &Output| 100 * roots_printed(&String::from_utf8_lossy(&o.stdout)).len();
        for o in [&a, &b] {
            assert!(
                o.status.success()
                    || stderr(o).contains("changed under this writer")
                    || stderr(o).contains("being written by another writer"),
                "trial {trial}: {}",
                stderr(o)
            );
        }
        assert!(
            a.status.success() || b.status.success(),
            "trial {trial}: both failed"
        );
        let both = dir.path().join(format!("committed{trial}.txt"));
        std::fs::write(
            &both,
            head(&lines_a, committed(&a)) + &head(&lines_b, committed(&b)),
        )
        .unwrap();
        assert_eq!(root, root_of(&both), "trial {trial}");
        // The root is the one the writer that committed last printed.
        assert!(
            root == last_root(&a) || root == last_root(&b),
            "trial {trial}"
        );
    }
}

/// Two importers of different layouts started at once on one new directory: at most one
/// succeeds, the other is refused saying why, and the directory is then usable (never both
/// layouts in it, which every command refuses).
#[test]
fn two_importers_of_different_layouts_never_both_make_a_state() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("in.txt");
    std::fs::write(&file, input(2000, 5)).unwrap();
    for trial in 0..6 {
        let db = dir.path().join(format!("mix{trial}"));
        let spawn = |layout: &str| spawn_import(&db, &file, &["--layout", layout]);
        let (a, b) = (spawn("mdbx"), spawn("log"));
        let (a, b) = (a.wait_with_output().unwrap(), b.wait_with_output().unwrap());
        assert!(
            !(a.status.success() && b.status.success()),
            "trial {trial}: both made a state"
        );
        assert!(
            a.status.success() || b.status.success(),
            "trial {trial}: neither did: {} / {}",
            stderr(&a),
            stderr(&b)
        );
        let loser = if a.status.success() { &b } else { &a };
        let said = stderr(loser);
        // Refused for the other layout's state, or while the other writer held the lock.
        assert!(
            said.contains("log layout")
                || said.contains("MDBX database")
                || said.contains("another `bintrie import` is using"),
            "trial {trial}: {said}"
        );
        let info = bin().args(["info", "--db"]).arg(&db).output().unwrap();
        assert!(info.status.success(), "trial {trial}: {}", stderr(&info));
    }
}

#[test]
fn readers_never_write_and_coexist_with_a_relaxed_writer() {
    let (dir, _file, db) = imported(3000, 3, "1000", &[]);
    let data = db.join("mdbx.dat");
    let before = std::fs::read(&data).unwrap();
    let key = &input(1, 3)[..64];
    for _ in 0..2 {
        info_json(&db);
        let o = bin()
            .args(["get", "--db"])
            .arg(&db)
            .arg(key)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
        assert!(verify(&db).status.success());
    }
    assert!(
        std::fs::read(&data).unwrap() == before,
        "a read command changed the file"
    );

    // Read-only data file: every read command still works.
    let mut perm = std::fs::metadata(&data).unwrap().permissions();
    perm.set_readonly(true);
    std::fs::set_permissions(&data, perm).unwrap();
    info_json(&db);
    assert!(verify(&db).status.success());
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o644)).unwrap();
    }

    // Beside a running relaxed writer.
    let big = dir.path().join("big.txt");
    std::fs::write(&big, input(40_000, 4)).unwrap();
    let mut writer = bin()
        .args(["import", "--relaxed", "--batch", "200", "--db"])
        .arg(&db)
        .arg("-i")
        .arg(&big)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut reads = 0;
    while writer.try_wait().unwrap().is_none() && reads < 20 {
        info_json(&db);
        let v = verify(&db);
        assert!(v.status.success(), "{}", stderr(&v));
        reads += 1;
    }
    let w = writer.wait_with_output().unwrap();
    assert!(w.status.success(), "{}", stderr(&w));
    assert!(reads > 0, "the writer finished before any read ran");
}

/// Files that are not databases (a truncated copy, garbage) are refused by readers and writers
/// and left as they are. An empty data file, what a writer killed while creating the database
/// leaves, is refused by readers saying what it is and how to finish it, and `import` makes
/// the database in it.
#[test]
fn files_that_are_not_databases_are_refused_and_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("in.txt");
    std::fs::write(&file, input(5000, 5)).unwrap();
    let good = dir.path().join("good");
    assert!(
        import(&good, &file, "5000", &["--relaxed"])
            .status
            .success()
    );
    let real = std::fs::read(good.join("mdbx.dat")).unwrap();
    let mut rng = StdRng::seed_from_u64(6);
    let garbage: Vec<u8> = (0..8192).map(|_| rng.random()).collect();
    for (name, content) in [("truncated", real[..8192].to_vec()), ("garbage", garbage)] {
        let db = dir.path().join(name);
        std::fs::create_dir(&db).unwrap();
        std::fs::write(db.join("mdbx.dat"), &content).unwrap();
        for args in [
            vec!["info", "--db"],
            vec!["get", "--db"],
            vec!["verify", "--db"],
        ] {
            let mut cmd = bin();
            cmd.args(&args).arg(&db);
            if args[0] == "get" {
                cmd.arg("00".repeat(32));
            }
            let o = cmd.output().unwrap();
            assert!(!o.status.success(), "{name} {args:?}");
            assert!(
                stderr(&o).contains("is not a bintrie database"),
                "{name}: {}",
                stderr(&o)
            );
        }
        let o = import(&db, &file, "100", &[]);
        assert!(!o.status.success(), "{name}: import");
        assert!(
            stderr(&o).contains("is not a bintrie database"),
            "{name}: {}",
            stderr(&o)
        );
        assert_eq!(
            std::fs::read(db.join("mdbx.dat")).unwrap(),
            content,
            "{name}"
        );
    }
    let db = dir.path().join("empty");
    std::fs::create_dir(&db).unwrap();
    std::fs::write(db.join("mdbx.dat"), b"").unwrap();
    for args in [["info", "--db"], ["verify", "--db"]] {
        let o = bin().args(args).arg(&db).output().unwrap();
        assert_eq!(o.status.code(), Some(1), "{args:?}");
        for said in ["creation was cut short", "open it for writing once"] {
            assert!(stderr(&o).contains(said), "{args:?}: {}", stderr(&o));
        }
    }
    let o = import(&db, &file, "5000", &["--relaxed"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(info_json(&db)["root"], info_json(&good)["root"]);
}

#[test]
fn verify_names_a_flipped_byte_and_get_verified_refuses_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut lines = input(2000, 7);
    // A marked value, unlikely to occur anywhere else in the file.
    let key = "ab".repeat(31) + "05";
    lines.push_str(&format!("{key} {}\n", "a5".repeat(32)));
    let file = dir.path().join("in.txt");
    std::fs::write(&file, lines).unwrap();
    let db = dir.path().join("db");
    assert!(
        import(&db, &file, "100000", &["--relaxed"])
            .status
            .success()
    );
    let ok = verify(&db);
    assert!(ok.status.success(), "{}", stderr(&ok));
    // Flip the last byte of the marked value in the stem blob (tag 0x01, stem, bitmap, value).
    let mut blob = vec![0x01];
    blob.extend(hex::decode("ab".repeat(31)).unwrap());
    let mut bitmap = [0u8; 32];
    bitmap[0] = 0x80 >> 5;
    blob.extend(bitmap);
    blob.extend([0xa5; 32]);
    let data = db.join("mdbx.dat");
    let mut bytes = std::fs::read(&data).unwrap();
    let mut flipped = 0;
    for i in 0..bytes.len() - blob.len() {
        if bytes[i..i + blob.len()] == blob[..] {
            bytes[i + blob.len() - 1] ^= 1;
            flipped += 1;
        }
    }
    assert!(flipped >= 1);
    std::fs::write(&data, bytes).unwrap();
    let bad = verify(&db);
    assert_eq!(bad.status.code(), Some(1));
    let err = stderr(&bad);
    assert!(
        err.contains("node at path key") && err.contains("hashes to"),
        "{err}"
    );
    let json = bin()
        .args(["verify", "--json", "--no-progress", "--db"])
        .arg(&db)
        .output()
        .unwrap();
    assert_eq!(json.status.code(), Some(1));
    let j: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(j["ok"], false);
    let get = bin()
        .args(["get", "--read-path", "verified", "--db"])
        .arg(&db)
        .arg(&key)
        .output()
        .unwrap();
    assert!(!get.status.success());
    assert!(stderr(&get).contains("hashes to"), "{}", stderr(&get));
    // An import on top refuses to build on the corrupt blob.
    let more = dir.path().join("more.txt");
    std::fs::write(&more, format!("{key} {}\n", "11".repeat(32))).unwrap();
    let o = import(&db, &more, "10", &["--relaxed"]);
    assert!(!o.status.success(), "an import built on a corrupt blob");
    assert_eq!(info_json(&db)["block"], 1);
}

/// A damaged write journal (which every writer refuses) is reported by `info` and fails
/// `verify`, where `info` used to say "journal empty" and `verify` "ok".
#[test]
fn a_damaged_journal_is_reported_not_taken_for_an_empty_one() {
    let (_dir, file, db) = imported(50, 8, "10", &[]);
    assert_eq!(info_json(&db)["journal_error"], serde_json::Value::Null);
    std::fs::write(db.join("journal"), [0x55u8; 100]).unwrap();
    let info = info_json(&db);
    assert!(
        info["journal_error"]
            .as_str()
            .is_some_and(|e| e.contains("journal is damaged")),
        "{info}"
    );
    let text = bin().args(["info", "--db"]).arg(&db).output().unwrap();
    assert!(String::from_utf8_lossy(&text.stdout).contains("journal      damaged"));
    let v = bin()
        .args(["verify", "--json", "--no-progress", "--db"])
        .arg(&db)
        .output()
        .unwrap();
    assert_eq!(v.status.code(), Some(1), "{}", stderr(&v));
    let j: serde_json::Value = serde_json::from_slice(&v.stdout).unwrap();
    assert_eq!(j["ok"], false, "{j}");
    // And a writer refuses it, as before.
    assert!(!import(&db, &file, "10", &[]).status.success());
}

/// `verify --json` keeps its promise of one JSON object when the database cannot even be
/// opened: a missing directory, a log whose segment is gone, an MDBX file that is not one.
#[test]
fn verify_json_answers_even_when_the_open_fails() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("in.txt");
    std::fs::write(&file, input(50, 8)).unwrap();
    let log = dir.path().join("log");
    let o = bin()
        .args(["import", "--layout", "log", "--batch", "10", "--db"])
        .arg(&log)
        .arg("-i")
        .arg(&file)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    std::fs::copy(log.join("log.000001"), log.join("log.000003")).unwrap();
    let mdbx = dir.path().join("mdbx");
    std::fs::create_dir(&mdbx).unwrap();
    std::fs::write(mdbx.join("mdbx.dat"), b"not a database").unwrap();
    for db in [dir.path().join("missing"), log, mdbx] {
        let o = bin()
            .args(["verify", "--json", "--no-progress", "--db"])
            .arg(&db)
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(1), "{}: {}", db.display(), stderr(&o));
        let j: serde_json::Value = serde_json::from_slice(&o.stdout)
            .unwrap_or_else(|e| panic!("{}: {e}: {:?}", db.display(), o.stdout));
        assert_eq!(j["ok"], false, "{j}");
        assert!(!j["error"].as_str().unwrap().is_empty(), "{j}");
    }
}

#[test]
fn a_closed_or_full_stdout_is_an_error_not_a_panic() {
    let (dir, file, db) = imported(50, 8, "10", &["--relaxed"]);
    let results = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../docs/study/writes-2026-12-04-s12/round4-after/results.json");
    let out = dir.path().join("report");
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap();
    // The study's report re-rendered from a results.json kept in docs/study: its one line (or
    // its JSON) goes to stdout after the report is written.
    let rerender = [
        "bench",
        "--from-results",
        results.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ];
    for args in [
        vec!["info", "--db", db.to_str().unwrap()],
        vec!["verify", "--db", db.to_str().unwrap()],
        vec!["root", "-i", file.to_str().unwrap()],
        rerender.to_vec(),
        [&rerender[..], &["--json"]].concat(),
        // clap prints help and version itself, and exited 0 when they could not be written.
        vec!["--help"],
        vec!["import", "--help"],
        vec!["-h"],
        vec!["--version"],
    ] {
        let o = bin()
            .args(&args)
            .stdout(full.try_clone().unwrap())
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(1), "{args:?}: {}", stderr(&o));
        assert!(
            stderr(&o).contains("writing output"),
            "{args:?}: {}",
            stderr(&o)
        );
        assert!(!stderr(&o).contains("panicked"));
    }
    // A pipe whose reader is gone: `bintrie import … | head -0`.
    let mut child = bin()
        .args(["import", "--relaxed", "--batch", "1", "--db"])
        .arg(dir.path().join("db2"))
        .arg("-i")
        .arg(&file)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("writing output"), "{}", stderr(&o));
    assert!(!stderr(&o).contains("panicked"));
    // It names the block it committed, whose line was lost: the state holds that block.
    let info = info_json(&dir.path().join("db2"));
    let said = format!(
        "block {} is committed, root {}",
        info["block"],
        info["root"].as_str().unwrap()
    );
    assert!(stderr(&o).contains(&said), "{said}: {}", stderr(&o));
}

#[test]
fn a_failed_import_leaves_no_new_database_behind() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bad.txt");
    let mut lines = input(5, 9);
    lines.push_str("not a line\n");
    std::fs::write(&file, lines).unwrap();
    let db = dir.path().join("new");
    let o = import(&db, &file, "100", &[]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains(":6:"), "{}", stderr(&o));
    assert!(
        !db.exists(),
        "the failed import left {} behind",
        db.display()
    );
    // An existing database is never removed by a failed import.
    let good = dir.path().join("good.txt");
    std::fs::write(&good, input(5, 10)).unwrap();
    assert!(import(&db, &good, "100", &[]).status.success());
    assert!(!import(&db, &file, "100", &[]).status.success());
    assert_eq!(info_json(&db)["block"], 1);
}

#[test]
fn error_messages_say_each_thing_once() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("in.txt");
    std::fs::write(&file, input(5, 11)).unwrap();
    // The database path is a file: the OS error must appear once.
    let not_dir = dir.path().join("plainfile");
    std::fs::write(&not_dir, b"x").unwrap();
    let o = import(&not_dir, &file, "10", &[]);
    assert!(!o.status.success());
    let err = stderr(&o);
    let msg = err.trim_start_matches("error: ");
    for part in msg.split(": ") {
        assert_eq!(msg.matches(part).count(), 1, "{part:?} repeated in {err}");
    }
}

/// Unmounts a test filesystem however the test ends.
struct Mounted(std::path::PathBuf);

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

/// An import that runs out of disk fails saying the disk is full, and the database stays at
/// the last block the import reported committed, whole (it verifies). Needs root to mount a
/// small tmpfs (CI runs as root); elsewhere it says it was skipped.
#[test]
fn a_full_disk_fails_the_block_and_keeps_the_last_one() {
    let root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0");
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().join("small");
    std::fs::create_dir(&mnt).unwrap();
    let mounted = root
        && Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=3m", "tmpfs"])
            .arg(&mnt)
            .status()
            .is_ok_and(|s| s.success());
    if !mounted {
        eprintln!(
            "SKIPPED a_full_disk_fails_the_block_and_keeps_the_last_one: needs root to mount a 3 MB tmpfs"
        );
        return;
    }
    let _guard = Mounted(mnt.clone());
    let file = dir.path().join("in.txt");
    std::fs::write(&file, input(60_000, 12)).unwrap();
    let db = mnt.join("db");
    let o = import(&db, &file, "2000", &[]);
    assert!(!o.status.success(), "60,000 entries fit in 3 MB?");
    let err = stderr(&o);
    assert!(err.contains("no space left"), "{err}");
    let committed = roots_printed(&String::from_utf8_lossy(&o.stdout)).len();
    assert!(committed > 0, "nothing fit before the disk filled: {err}");
    // The error names the block the database stays at, and that is what it holds.
    assert!(
        err.contains(&format!("stays at block {committed}")),
        "{err}"
    );
    // On the full disk a reader is refused before MDBX maps its lock file (a page it cannot
    // get would be a SIGBUS), and the failed import's cleanup left the database alone.
    let full = bin().args(["info", "--db"]).arg(&db).output().unwrap();
    assert_eq!(full.status.code(), Some(1), "{}", stderr(&full));
    assert!(
        stderr(&full).contains("bytes are free"),
        "{}",
        stderr(&full)
    );
    assert!(db.join("mdbx.dat").exists(), "the database was removed");
    // The failed import could not check the database it made, and said why it kept it.
    assert!(
        err.contains("is kept: with the disk full it cannot be opened to check"),
        "{err}"
    );
    // An import into a new directory on the full disk fails, and leaves no directory.
    let db2 = mnt.join("db2");
    let o2 = import(&db2, &file, "2000", &[]);
    assert!(!o2.status.success());
    assert!(!db2.exists(), "{}", stderr(&o2));
    // With room again, it holds the last block the import reported.
    assert!(
        Command::new("mount")
            .args(["-o", "remount,size=8m"])
            .arg(&mnt)
            .status()
            .is_ok_and(|s| s.success())
    );
    let info = info_json(&db);
    assert_eq!(info["block"], committed as u64);
    assert_eq!(info["root"].as_str().unwrap(), last_root(&o));
    let v = verify(&db);
    assert!(v.status.success(), "{}", stderr(&v));
}

/// A reader that may not write MDBX's lock file (another user's database) gets a clear
/// permission error naming what it needs, not a bare "Permission denied". Needs root (to run
/// the reader as `nobody`); elsewhere it says it was skipped.
#[test]
fn a_reader_without_access_to_the_lock_file_is_told_what_it_needs() {
    let (dir, _file, db) = imported(10, 13, "10", &[]);
    let as_nobody = |args: &str| {
        Command::new("su")
            .args(["nobody", "-s", "/bin/sh", "-c"])
            .arg(format!(
                "{} {args} --db {}",
                env!("CARGO_BIN_EXE_bintrie"),
                db.display()
            ))
            .output()
    };
    // `nobody` must be able to reach the binary and the directory for the test to mean anything.
    let usable = as_nobody("--version").is_ok_and(|o| o.status.success())
        && std::fs::set_permissions(
            dir.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .is_ok();
    let root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0");
    if !(root && usable) {
        eprintln!("SKIPPED a_reader_without_access_to_the_lock_file: needs root and `su nobody`");
        return;
    }
    let o = as_nobody("info").unwrap();
    assert!(!o.status.success());
    let err = stderr(&o);
    assert!(err.contains("write access to mdbx.lck"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

/// A bus error (a damaged MDBX map read past the file's end, or a file cut short under a
/// reader) ends the process with a message and status 1, not silently with 135. Delivered
/// here by `kill -BUS` to a command waiting on its input; the store's own length check keeps
/// a damaged length from faulting (crates/store's hardening tests).
#[test]
fn a_bus_error_is_explained() {
    let mut child = bin()
        .args(["verify-proof", "--proof", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Long enough for `main` to install its handlers (nothing is read before stdin ends).
    std::thread::sleep(std::time::Duration::from_millis(500));
    send_signal(&child, "-BUS");
    // Closed before waiting: had the signal come before the handler, the command ends on
    // its empty input (and the test fails) rather than waiting for input forever.
    drop(child.stdin.take());
    let o = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("a memory-mapped database file ended under a read (SIGBUS)")
            && err.contains("the disk may have filled")
            && err.contains("bintrie verify --db DIR"),
        "{err}"
    );
}

/// SIGTERM (as Ctrl-C) during an import whose input has stalled: it stops between blocks,
/// syncs and closes the state, and says where it stopped; every reader then opens it (killed
/// by the signal, an MDBX state was refused by readers until a writer opened it). On both
/// layouts.
#[test]
fn a_signal_stops_an_import_between_blocks_and_closes_the_state() {
    use std::io::{BufRead, BufReader, Write};
    for layout in ["mdbx", "log"] {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("db");
        let mut child = bin()
            .args([
                "import", "--batch", "1", "--layout", layout, "-i", "-", "--db",
            ])
            .arg(&db)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(input(3, 5).as_bytes()).unwrap();
        stdin.flush().unwrap();
        // The three blocks committed; the input then stalls (stdin stays open).
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut last = String::new();
        for _ in 0..3 {
            last = lines.next().unwrap().unwrap();
        }
        assert!(last.starts_with("committed block 3 "), "{layout}: {last}");
        let pid = i32::try_from(child.id()).unwrap();
        // SAFETY: signals the child this test spawned and still waits for.
        #[allow(unsafe_code)]
        let sent = unsafe { libc::kill(pid, libc::SIGTERM) };
        assert_eq!(sent, 0);
        let o = child.wait_with_output().unwrap();
        drop(stdin);
        assert!(!o.status.success(), "{layout}");
        let text = stderr(&o);
        assert!(
            text.contains("stopped by a signal after block 3") && text.contains("durable through"),
            "{layout}: {text}"
        );
        let info = bin().args(["info", "--db"]).arg(&db).output().unwrap();
        assert!(info.status.success(), "{layout}: {}", stderr(&info));
        assert!(
            stdout(&info).contains("block        3"),
            "{layout}: {}",
            stdout(&info)
        );
        let verified = bin().args(["verify", "--db"]).arg(&db).output().unwrap();
        assert!(verified.status.success(), "{layout}: {}", stderr(&verified));
    }
}

/// A file-size limit (`ulimit -f`) reached mid-import is a write error naming the file, the
/// state left at the last committed block, not a kill by SIGXFSZ with no message.
#[test]
fn a_file_size_limit_is_an_error_not_a_kill() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("in.txt");
    std::fs::write(&file, input(20_000, 9)).unwrap();
    for layout in ["mdbx", "log"] {
        let db = dir.path().join(format!("db-{layout}"));
        let o = Command::new("sh")
            .arg("-c")
            .arg("ulimit -f 2000 && exec \"$@\"")
            .arg("sh")
            .arg(env!("CARGO_BIN_EXE_bintrie"))
            .args(["import", "--batch", "2000", "--layout", layout, "-i"])
            .arg(&file)
            .arg("--db")
            .arg(&db)
            .output()
            .unwrap();
        let text = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "{layout}: {text}");
        assert!(text.contains("File too large"), "{layout}: {text}");
        assert!(
            text.contains("the state stays at block"),
            "{layout}: {text}"
        );
    }
}

/// Every command with `--json` prints one JSON value whatever happens: its own object, or,
/// when it fails before writing it, `{"ok": false, "error": …}` (exit status 1; they printed
/// nothing, or `verify` alone printed it); a command that wrote its object and then fails
/// (tests that fail) adds nothing after it.
#[test]
fn a_failed_json_command_prints_one_error_object() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let missing = d.join("missing");
    let empty = d.join("empty");
    std::fs::create_dir(&empty).unwrap();
    let file = d.join("afile");
    std::fs::write(&file, "zz\n").unwrap();
    let other = d.join("other.json");
    std::fs::write(&other, r#"{"hello": 1}"#).unwrap();
    let path = |p: &Path| p.to_str().unwrap().to_string();
    let cases: Vec<Vec<String>> = [
        vec!["info", "--db", &path(&missing)],
        vec!["verify", "--no-progress", "--db", &path(&missing)],
        vec!["compact", "--db", &path(&empty)],
        vec!["root", "-i", &path(&file)],
        vec!["probe-disk", "--dir", &path(&file)],
        vec![
            "compare",
            "--before",
            &path(&missing),
            "--after",
            &path(&empty),
        ],
        vec!["exec", "--fixture", &path(&other)],
        vec![
            "bench",
            "--scale",
            "smoke",
            "--layouts",
            "log",
            "--out",
            &path(&d.join("o")),
        ],
    ]
    .into_iter()
    .map(|v| v.into_iter().map(String::from).collect())
    .collect();
    // Run with --json: exit status 1, one JSON value on stdout, and stderr.
    let failed_json = |args: &[String]| {
        let o = bin().args(args).arg("--json").output().unwrap();
        let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
        assert_eq!(o.status.code(), Some(1), "{args:?}: {stderr}");
        let stdout = String::from_utf8_lossy(&o.stdout).into_owned();
        let j: serde_json::Value =
            serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{args:?}: {e}: {stdout:?}"));
        (j, stderr)
    };
    for args in cases {
        let (j, stderr) = failed_json(&args);
        assert_eq!(j["ok"], false, "{args:?}: {j}");
        let error = j["error"].as_str().unwrap();
        assert!(
            !error.is_empty() && stderr.contains(error),
            "{args:?}: {j} / {stderr}"
        );
    }
    // Tests that fail: their report is the output, and nothing follows it.
    let tests = d.join("tests");
    std::fs::create_dir(&tests).unwrap();
    std::fs::write(
        tests.join("t.json"),
        r#"{"t": {"network": "Cancun", "blocks": []}}"#,
    )
    .unwrap();
    let (j, _) = failed_json(&["blockchain-test".to_string(), path(&tests)]);
    assert_eq!(j["failed"], 1, "{j}");
}
