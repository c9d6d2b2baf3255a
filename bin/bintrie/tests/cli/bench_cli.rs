//! `bintrie bench --scale smoke`: the whole study pipeline (every workload and group depth, both
//! read paths, prefetch off and on, 3 runs each) produces a complete, readable report.

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
    // Every database is deleted when its group depth is done.
    let left: Vec<_> = std::fs::read_dir(out.path().join("databases"))
        .unwrap()
        .collect();
    assert!(left.is_empty(), "databases left behind: {left:?}");

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
