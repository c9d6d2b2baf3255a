//! `bintrie bench --scale smoke`: the whole study pipeline (every workload and group depth, both
//! read paths, prefetch off and on, 3 runs each) produces a complete, readable report.

use crate::common::send_signal;
use std::process::Command;

#[test]
fn smoke_study_writes_a_complete_report() {
    let out = tempfile::tempdir().unwrap();
    let run = Command::new(env!("CARGO_BIN_EXE_bintrie"))
        .args([
            "bench",
            "--scale",
            "smoke",
            "--no-progress",
            "--json",
            "--out",
        ])
        .arg(out.path())
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "bintrie bench failed: {}",
        String::from_utf8_lossy(&run.stderr)
    );
    let printed: serde_json::Value = serde_json::from_slice(&run.stdout).unwrap();
    let file: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.path().join("results.json")).unwrap())
            .unwrap();
    assert_eq!(printed, file, "--json prints results.json");

    // 8 group depths x 5 workloads x 2 read paths x 2 prefetch settings x 3 runs.
    let runs = file["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 8 * 5 * 2 * 2 * 3);
    assert_eq!(
        runs.iter().filter(|r| r["kept"] == true).count(),
        8 * 5 * 2 * 2 * 2
    );
    assert_eq!(file["summaries"].as_array().unwrap().len(), 8 * 5 * 2 * 2);
    assert!(!file["comparisons"].as_array().unwrap().is_empty());
    assert_eq!(file["databases"].as_array().unwrap().len(), 8);
    assert!(file["machine"]["hash64_ns"].as_f64().unwrap() > 0.0);
    // Every database is deleted when its group depth is done, and the default directory
    // that held them with it.
    assert!(
        !out.path().join("databases").exists(),
        "databases left behind: {:?}",
        std::fs::read_dir(out.path().join("databases")).map(|d| d.count())
    );

    let md = std::fs::read_to_string(out.path().join("report.md")).unwrap();
    for w in [
        "erc20_balanceof",
        "erc20_approve",
        "mixed",
        "sload_benchmark",
        "sstore_variants",
    ] {
        assert!(md.contains(&format!("### {w}")), "report.md lacks {w}");
        assert!(out.path().join(format!("mgas_by_gd_{w}.svg")).is_file());
    }
    let html = std::fs::read_to_string(out.path().join("index.html")).unwrap();
    assert!(html.contains("mgas_by_gd_erc20_approve.svg"));

    compare_reads_the_study_it_wrote(out.path(), &file);
}

/// `bintrie compare` on the smoke study's results (so the suite runs the study once).
fn compare_reads_the_study_it_wrote(dir: &std::path::Path, file: &serde_json::Value) {
    let compare = |args: &[&std::ffi::OsStr]| {
        Command::new(env!("CARGO_BIN_EXE_bintrie"))
            .arg("compare")
            .args(args)
            .output()
            .unwrap()
    };
    let results = dir.join("results.json");
    // The same study on both sides, a directory on one and the file on the other: every
    // configuration pairs with itself, with no change and one round in which after is not lower.
    let run = compare(&[
        "--before".as_ref(),
        dir.as_os_str(),
        "--after".as_ref(),
        results.as_os_str(),
        "--metrics".as_ref(),
        "total_ms,commit_ms".as_ref(),
        "--json".as_ref(),
    ]);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let rows: Vec<serde_json::Value> = serde_json::from_slice(&run.stdout).unwrap();
    let configurations = file["summaries"].as_array().unwrap().len();
    assert_eq!(
        rows.len(),
        2 * configurations,
        "two metrics per configuration"
    );
    for r in &rows {
        assert_eq!(r["change_pct"], 0.0, "{r}");
        assert_eq!(
            r["rounds"],
            serde_json::json!({"lower": 0, "higher": 0, "paired": 1}),
            "{r}"
        );
        assert_eq!(r["p_rounds"], serde_json::Value::Null, "{r}");
        assert_eq!(r["invocations"], serde_json::json!([1, 1]), "{r}");
        assert_eq!(r["blocks"][0], r["blocks"][1], "{r}");
    }
    let table = compare(&[
        "--before".as_ref(),
        dir.as_os_str(),
        "--after".as_ref(),
        dir.as_os_str(),
    ]);
    assert!(table.status.success());
    let text = String::from_utf8_lossy(&table.stdout);
    assert!(text.starts_with("| configuration | metric |"), "{text}");
    assert!(
        text.contains("| GD-5 erc20_approve, flat + prefetch, 4 KB pages,"),
        "{text}"
    );

    // Bad input: each a clear error, never a panic.
    let scratch = tempfile::tempdir().unwrap();
    let not_results = scratch.path().join("other.json");
    std::fs::write(&not_results, "{\"runs\": []}").unwrap();
    // Two studies that measured different group depths share no configuration.
    let only = |gd: u64, name: &str| {
        let mut f = file.clone();
        f["runs"]
            .as_array_mut()
            .unwrap()
            .retain(|r| r["group_depth"] == gd);
        let path = scratch.path().join(name);
        std::fs::write(&path, serde_json::to_vec(&f).unwrap()).unwrap();
        path
    };
    let (gd1, gd2) = (only(1, "gd1.json"), only(2, "gd2.json"));
    // Rows no run could have measured.
    let edited = |name: &str, edit: &dyn Fn(&mut Vec<serde_json::Value>)| {
        let mut f = file.clone();
        edit(f["runs"].as_array_mut().unwrap());
        let path = scratch.path().join(name);
        std::fs::write(&path, serde_json::to_vec(&f).unwrap()).unwrap();
        path
    };
    let negative = edited("negative.json", &|runs| runs[3]["total_ms"] = (-5.0).into());
    let huge = edited("huge.json", &|runs| runs[0]["commit_ms"] = 1e300.into());
    let doubled = edited("doubled.json", &|runs| runs.extend(runs.clone()));
    let empty = edited("empty.json", &|runs| runs.clear());
    let missing = scratch.path().join("nowhere");
    for (args, says) in [
        (
            vec![
                "--before".as_ref(),
                dir.as_os_str(),
                "--after".as_ref(),
                dir.as_os_str(),
                "--metrics".as_ref(),
                "latency".as_ref(),
            ],
            "invalid value 'latency' for '--metrics",
        ),
        (
            vec![
                "--before".as_ref(),
                missing.as_os_str(),
                "--after".as_ref(),
                dir.as_os_str(),
            ],
            "nowhere",
        ),
        (
            vec![
                "--before".as_ref(),
                dir.as_os_str(),
                "--after".as_ref(),
                not_results.as_os_str(),
            ],
            "not a results.json",
        ),
        (
            vec![
                "--before".as_ref(),
                gd1.as_os_str(),
                "--after".as_ref(),
                gd2.as_os_str(),
            ],
            "share no configuration",
        ),
        (vec!["--before".as_ref(), dir.as_os_str()], "--after"),
        (
            vec![
                "--before".as_ref(),
                negative.as_os_str(),
                "--after".as_ref(),
                dir.as_os_str(),
            ],
            "runs[3].total_ms is -5: not a measurement",
        ),
        (
            vec![
                "--before".as_ref(),
                dir.as_os_str(),
                "--after".as_ref(),
                huge.as_os_str(),
            ],
            "runs[0].commit_ms is 1e300: not a measurement",
        ),
        (
            vec![
                "--before".as_ref(),
                doubled.as_os_str(),
                "--after".as_ref(),
                dir.as_os_str(),
            ],
            "would count twice",
        ),
        (
            vec![
                "--before".as_ref(),
                empty.as_os_str(),
                "--after".as_ref(),
                dir.as_os_str(),
            ],
            "holds no measured blocks",
        ),
        // One invocation twice on a side (as its directory and as its file) is not two samples.
        (
            vec![
                "--before".as_ref(),
                dir.as_os_str(),
                results.as_os_str(),
                "--after".as_ref(),
                dir.as_os_str(),
            ],
            "hold the same invocation",
        ),
    ] {
        let run = compare(&args);
        let err = String::from_utf8_lossy(&run.stderr);
        assert!(!run.status.success(), "{args:?} was accepted");
        assert!(err.contains(says), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
    // The same invocation under another name (a copy) on one side is caught by what it
    // records, not only by its path.
    let copy = scratch.path().join("copy.json");
    std::fs::copy(&results, &copy).unwrap();
    let run = compare(&[
        "--before".as_ref(),
        dir.as_os_str(),
        copy.as_os_str(),
        "--after".as_ref(),
        dir.as_os_str(),
    ]);
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(!run.status.success());
    assert!(err.contains("hold the same invocation"), "{err}");
    // Another invocation with another durability: compared, with the difference said (on
    // stderr, and above the table), since the change may be the setting's.
    let mut relaxed = file.clone();
    relaxed["config"]["durability"] = "relaxed".into();
    relaxed["started"] = "2000-01-01T00:00:00Z".into();
    let relaxed_file = scratch.path().join("relaxed.json");
    std::fs::write(&relaxed_file, serde_json::to_vec(&relaxed).unwrap()).unwrap();
    let run = compare(&[
        "--before".as_ref(),
        dir.as_os_str(),
        "--after".as_ref(),
        relaxed_file.as_os_str(),
    ]);
    let (out, err) = (
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr),
    );
    assert!(run.status.success(), "{err}");
    assert!(
        err.contains("durability: before durable, after relaxed"),
        "{err}"
    );
    assert!(
        out.starts_with("**Warning:** the invocations differ"),
        "{out}"
    );
    // A metric asked twice is one row per configuration.
    let run = compare(&[
        "--before".as_ref(),
        dir.as_os_str(),
        "--after".as_ref(),
        dir.as_os_str(),
        "--metrics".as_ref(),
        "total_ms,total_ms".as_ref(),
        "--json".as_ref(),
    ]);
    let rows: Vec<serde_json::Value> = serde_json::from_slice(&run.stdout).unwrap();
    assert_eq!(rows.len(), file["summaries"].as_array().unwrap().len());
}

#[test]
fn bad_arguments_are_refused_with_a_message() {
    for args in [
        &["bench", "--scale", "huge"][..],
        &["bench", "--group-depths", "0-9"],
        &["bench", "--workloads", "erc20_transfer"],
        &["bench", "--workloads", "erc20_balanceof,nope"],
        &["bench", "--workloads", "erc20-balanceof"],
        &["bench", "--read-paths", "mpt"],
        &["bench", "--read-paths", "trie_walk"],
        &["bench", "--prefetch", "yes"],
        &["bench", "--durability", "fsync"],
        &["bench", "--page-sizes", "4k"],
        &["bench", "--runs", "1", "--scale", "smoke"],
        &["bench", "--page-sizes", "3000", "--scale", "smoke"],
        &["bench", "--holders", "10000000000", "--scale", "smoke"],
    ] {
        let out = tempfile::tempdir().unwrap();
        let run = Command::new(env!("CARGO_BIN_EXE_bintrie"))
            .args(args)
            .arg("--out")
            .arg(out.path())
            .output()
            .unwrap();
        assert!(!run.status.success(), "{args:?} was accepted");
        let err = String::from_utf8_lossy(&run.stderr);
        assert!(err.contains("error"), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
}

/// `bintrie bench --from-results FROM --out OUT`, which must succeed.
fn rerender(from: &std::path::Path, out: &std::path::Path) {
    let o = Command::new(env!("CARGO_BIN_EXE_bintrie"))
        .args(["bench", "--from-results"])
        .arg(from)
        .arg("--out")
        .arg(out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// `bintrie bench` of one small cell (GD-5, erc20_balanceof, flat, no prefetch, no disk probe)
/// at `stems` and `runs`, for --out and --db-dir to be added.
fn small_study(stems: &str, runs: &str) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_bintrie"));
    c.args([
        "bench",
        "--stems",
        stems,
        "--runs",
        runs,
        "--group-depths",
        "5",
    ])
    .args(["--workloads", "erc20_balanceof", "--read-paths", "flat"])
    .args(["--prefetch", "off", "--no-disk-probe", "--no-progress"]);
    c
}

/// [`small_study`] with its databases in `db_dir` and its report in `out`, run to its end.
fn small_study_at(db_dir: &std::path::Path, out: &std::path::Path) -> std::process::Output {
    small_study("2k", "2")
        .arg("--db-dir")
        .arg(db_dir)
        .arg("--out")
        .arg(out)
        .output()
        .unwrap()
}

/// `bench` deletes and rebuilds its databases under --db-dir: a directory bearing a
/// database's name that holds anything else is refused before any build, and kept. An --out
/// that takes no file is refused before measuring, not after (which lost the run's results).
#[test]
fn bench_leaves_alone_what_it_did_not_make_and_checks_out_first() {
    let dir = tempfile::tempdir().unwrap();
    let db_dir = dir.path().join("dbs");
    let mine = db_dir.join("db-p4096-g5-log");
    std::fs::create_dir_all(&mine).unwrap();
    std::fs::write(mine.join("notes.txt"), "mine").unwrap();
    let bench = |out: &std::path::Path| small_study_at(&db_dir, out);
    // A run that fails (exit 1) saying `why`.
    let refused = |o: std::process::Output, why: &str| {
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{err}");
        assert!(err.contains(why), "{why}: {err}");
    };
    refused(
        bench(&dir.path().join("out")),
        "holds \"notes.txt\", which a bench database does not",
    );
    assert_eq!(std::fs::read(mine.join("notes.txt")).unwrap(), b"mine");
    assert!(!db_dir.join("db-p4096-g5").exists(), "a database was built");
    std::fs::remove_dir_all(&mine).unwrap();
    // A user's database that only bears a name the study uses (no record of the study's in
    // it): refused, kept whole. (It used to be deleted, the study exiting 0.)
    let theirs = db_dir.join("db-p4096-g5");
    let imported = Command::new(env!("CARGO_BIN_EXE_bintrie"))
        .args(["import", "--db"])
        .arg(&theirs)
        .args(["-i", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write as _;
            let line = format!("{:064x} {:064x}\n", 5, 7);
            c.stdin.take().unwrap().write_all(line.as_bytes())?;
            c.wait()
        })
        .unwrap();
    assert!(imported.success());
    let data = std::fs::read(theirs.join("mdbx.dat")).unwrap();
    refused(
        bench(&dir.path().join("out")),
        "holds a database this study did not make",
    );
    assert_eq!(std::fs::read(theirs.join("mdbx.dat")).unwrap(), data);
    std::fs::remove_dir_all(&theirs).unwrap();
    // An --out holding a file the report writes, but no report: someone else's, refused.
    let notes = dir.path().join("notes");
    std::fs::create_dir(&notes).unwrap();
    std::fs::write(notes.join("report.md"), "mine").unwrap();
    refused(
        bench(&notes),
        "holds report.md, and no results.json beside it: it is not a bench report",
    );
    assert_eq!(std::fs::read(notes.join("report.md")).unwrap(), b"mine");
    // A file given as --out or --db-dir is said to be one ("File exists" before).
    let file = notes.join("report.md");
    refused(bench(&file), "is not a directory");
    refused(
        small_study_at(&file, &dir.path().join("out")),
        &format!("--db-dir {} is not a directory", file.display()),
    );
    assert!(!dir.path().join("out").exists());
    assert_eq!(std::fs::read(&file).unwrap(), b"mine");
    // Without them, the study runs (and deletes its own databases); a file of the user's in
    // --out whose name no report writes stays beside the report.
    let out = dir.path().join("out");
    std::fs::create_dir(&out).unwrap();
    std::fs::write(out.join("logo.svg"), "<svg/>").unwrap();
    let o = bench(&out);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(!db_dir.join("db-p4096-g5").exists());
    assert_eq!(std::fs::read(out.join("logo.svg")).unwrap(), b"<svg/>");
    // A second study into the same --out would replace its report: refused before measuring;
    // re-rendering that report in place is not.
    let results = std::fs::read(out.join("results.json")).unwrap();
    let o = bench(&out);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("already holds a report"), "{err}");
    assert_eq!(std::fs::read(out.join("results.json")).unwrap(), results);
    for from in [out.clone(), out.join("results.json")] {
        rerender(&from, &out);
    }
    assert!(!out.join("results.json.tmp").exists());
    // A link planted at the write check's name is not written through.
    let victim = dir.path().join("victim");
    std::fs::write(&victim, "precious").unwrap();
    let fresh = dir.path().join("fresh");
    std::fs::create_dir(&fresh).unwrap();
    let o = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "ln -s {} {}/.bintrie-write-check-$$ && exec {} bench --from-results {} --out {}",
            victim.display(),
            fresh.display(),
            env!("CARGO_BIN_EXE_bintrie"),
            out.display(),
            fresh.display()
        ))
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(String::from_utf8_lossy(&o.stderr).contains("cannot write there"));
    assert_eq!(std::fs::read(&victim).unwrap(), b"precious");

    // A read-only --out (a read-only tmpfs; needs root to mount).
    let ro = dir.path().join("ro");
    std::fs::create_dir(&ro).unwrap();
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "ro,size=1m", "tmpfs"])
        .arg(&ro)
        .status()
        .is_ok_and(|s| s.success());
    if !mounted {
        eprintln!("SKIPPED the read-only --out case: needs root to mount a tmpfs");
        return;
    }
    let o = bench(&ro);
    let _ = Command::new("umount").arg(&ro).status();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("cannot write there"), "{err}");
}

/// Ctrl-C (here SIGTERM, as `timeout` and CI send) stops a study before its next block and
/// deletes the databases it made (GBs at study scale were left in --out); the blocks measured
/// before it are saved, marked incomplete (they were lost), and render as a report.
#[test]
fn an_interrupted_study_deletes_its_databases_and_keeps_what_it_measured() {
    use std::io::BufRead as _;
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let db = out.join("databases/db-p4096-g5");
    // Started as `nohup` starts it, with SIGHUP ignored.
    let study = small_study("20k", "200");
    let mut child = Command::new("sh")
        .arg("-c")
        .arg("trap '' HUP; exec \"$0\" \"$@\"")
        .arg(study.get_program())
        .args(study.get_args())
        .arg("--out")
        .arg(&out)
        .env("RUST_LOG", "bintrie_bench=debug")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Stopped once a block is measured (its debug line), the rest of stderr kept.
    let (seen, measured) = std::sync::mpsc::channel();
    let stderr = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            if line.contains("block measured") {
                let _ = seen.send(());
            }
            text.push_str(&line);
            text.push('\n');
        }
        text
    });
    measured
        .recv_timeout(std::time::Duration::from_secs(300))
        .expect("no block measured within 5 minutes");
    // A second bench into the same --out (with its own --db-dir) would replace this one's
    // results when it ends: refused while this one runs.
    let second = small_study_at(&dir.path().join("other-dbs"), &out);
    let second_err = String::from_utf8_lossy(&second.stderr);
    assert_eq!(second.status.code(), Some(1), "{second_err}");
    assert!(
        second_err.contains("another `bintrie bench` is using")
            && second_err.contains("another --out"),
        "{second_err}"
    );
    // A hang-up the study was started ignoring does not stop it.
    send_signal(&child, "-HUP");
    std::thread::sleep(std::time::Duration::from_millis(1500));
    assert!(
        child.try_wait().unwrap().is_none(),
        "SIGHUP under nohup stopped the study"
    );
    send_signal(&child, "-TERM");
    let status = child.wait().unwrap();
    let err = reader.join().unwrap();
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(err.contains("interrupted"), "{err}");
    assert!(err.contains("blocks measured are saved in"), "{err}");
    assert!(!db.exists(), "the database was left behind");
    assert!(
        !out.join("databases").exists(),
        "the default --db-dir was left behind"
    );
    let saved: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("results.json")).unwrap()).unwrap();
    assert!(
        saved["incomplete"]
            .as_str()
            .unwrap()
            .contains("interrupted"),
        "{}",
        saved["incomplete"]
    );
    assert!(!saved["runs"].as_array().unwrap().is_empty());
    // Its report is rendered, and says so.
    let report = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(report.contains("**Incomplete.**"), "{report}");
    // And renders again in place.
    rerender(&out, &out);
}
