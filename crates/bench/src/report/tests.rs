use std::fs;
use std::path::Path;

use super::write_report;
use crate::model::{
    ConfigKey, DatabaseInfo, Durability, Machine, Metric, ReadPath, Results, RunRow,
    SCHEMA_VERSION, Scale, StudyConfig, Workload,
};
use crate::stats;

/// The shape of a synthetic study.
struct Shape<'a> {
    gds: &'a [u8],
    workloads: &'a [Workload],
    read_paths: &'a [ReadPath],
    prefetch: &'a [bool],
    kept_runs: u32,
}

/// A synthetic run: state read is `100 + 25 (gd - 3)^2` ms (x3 on the trie path, x2 without
/// prefetch), so GD-3 is the best everywhere; runs add a small jitter.
fn run_row(key: ConfigKey, run: u32) -> RunRow {
    let gd = f64::from(key.group_depth);
    let jitter = f64::from(run) * 0.1;
    let path = if key.read_path == ReadPath::TrieWalk {
        3.0
    } else {
        1.0
    };
    let prefetch = if key.prefetch { 1.0 } else { 2.0 };
    let state_read_ms = (100.0 + 25.0 * (gd - 3.0).powi(2)) * path * prefetch + jitter;
    let writes = key.workload.writes();
    let trie_update_ms = if writes { 20.0 + 5.0 * gd } else { 0.0 };
    let commit_ms = if writes { 5.0 + gd } else { 0.0 };
    let execution_ms = 10.0;
    let total_ms = state_read_ms + execution_ms + trie_update_ms + commit_ms;
    let gas = 10_000_000u64;
    let cold_reads = 1_000u64;
    let slots_written = if writes { 100 } else { 0 };
    RunRow {
        key,
        run,
        kept: run > 0,
        gas,
        total_ms,
        state_read_ms,
        execution_ms,
        trie_update_ms,
        commit_ms,
        writeback_ms: 0.0,
        block_in_run: 0,
        mgas_s: gas as f64 / (total_ms * 1e3),
        store_reads: cold_reads,
        bytes_read: cold_reads * 100,
        nodes_loaded: if writes { 50 } else { 0 },
        hashes: if writes { 1_000 } else { 0 },
        bytes_written: if writes { 10_000 } else { 0 },
        device_reads: Some(9_000),
        cpu_ms: Some(90.0),
        minor_faults: Some(400),
        steal_ms: Some(0.0),
        cold_reads,
        slots_written,
        slots_read: cold_reads,
        trie_warm_ms: 0.0,
        trie_wait_ms: writes.then_some(15.0),
        ms_per_cold_read: Some(state_read_ms / cold_reads as f64),
        ms_per_written_slot: writes.then(|| total_ms / slots_written as f64),
        hash_floor: writes.then(|| trie_update_ms / (1_000.0 * 60e-6)),
        hash64_ns: None,
        witness_keys: None,
        witness_multiproof_bytes: None,
        witness_blobs_bytes: None,
    }
}

/// A small synthetic study (GD-4 and GD-5, erc20_approve, flat + prefetch, two kept runs),
/// for other modules' tests.
pub(crate) fn sample_results() -> Results {
    synthetic(&Shape {
        gds: &[4, 5],
        workloads: &[Workload::Erc20Approve],
        read_paths: &[ReadPath::Flat],
        prefetch: &[true],
        kept_runs: 2,
    })
}

fn synthetic(shape: &Shape) -> Results {
    let mut runs = Vec::new();
    for &gd in shape.gds {
        for &workload in shape.workloads {
            for &read_path in shape.read_paths {
                for &prefetch in shape.prefetch {
                    let key = ConfigKey {
                        stems: 1_000_000,
                        page_size: 4096,
                        group_depth: gd,
                        workload,
                        read_path,
                        prefetch,
                        layout: Default::default(),
                    };
                    for run in 0..=shape.kept_runs {
                        runs.push(run_row(key, run));
                    }
                }
            }
        }
    }
    let summaries = stats::summarize(&runs);
    let comparisons = stats::compare(
        &runs,
        &[Metric::TotalMs, Metric::MgasS, Metric::StateReadMs],
    );
    Results {
        schema_version: SCHEMA_VERSION,
        started: "2026-01-01T00:00:00Z".to_string(),
        elapsed_s: 3723.0,
        command: "cargo xtask bench --scale smoke".to_string(),
        machine: Machine {
            cpus: 2,
            cpu_model: Some("Test CPU".to_string()),
            memory_bytes: Some(8 << 30),
            kernel: None,
            hash64_ns: 60.0,
            disk: Some(crate::device::Disk {
                dir: "/db".to_string(),
                filesystem: Some("ext4".to_string()),
                method: "test".to_string(),
                file_bytes: 1 << 30,
                read_qd1_us: 56.0,
                read_qd16_us: 11.9,
                saturation_depth: 32,
                max_read_iops: 89_000.0,
                read_curve: vec![],
                blocking_read_curve: vec![],
                write_iops_qd16: 75_000.0,
                fsync_us: 72.0,
                seq_write_mb_s: 1600.0,
            }),
        },
        config: StudyConfig {
            state_sizes: Vec::new(),
            blocks_per_run: 1,
            buffer_blocks: 0,
            witness: false,
            layouts: vec![Default::default()],
            log_pinned_mib: 0,
            warm_branches: false,
            scale: Scale::Smoke,
            stems: 1_000_000,
            holders: 10_000,
            group_depths: shape.gds.to_vec(),
            workloads: shape.workloads.to_vec(),
            read_paths: shape.read_paths.to_vec(),
            prefetch: shape.prefetch.to_vec(),
            page_sizes: vec![4096],
            runs: shape.kept_runs + 1,
            block_gas_limit: 100_000_000,
            tx_gas_limit: 30_000_000,
            mixed_read_pct: 50,
            prefetch_workers: 2,
            durability: Durability::Durable,
            seed: 42,
        },
        databases: shape
            .gds
            .iter()
            .map(|&gd| DatabaseInfo {
                random_stems: 1_000_000,
                page_size: 4096,
                group_depth: gd,
                build_s: 12.5,
                file_bytes: 300 << 20,
                nodes: 123_456,
                stems: 1_000_000,
                layout: Default::default(),
                index_bytes: None,
            })
            .collect(),
        runs,
        summaries,
        comparisons,
        incomplete: None,
    }
}

const BOTH_PATHS: [ReadPath; 2] = [ReadPath::TrieWalk, ReadPath::Flat];

/// Equal JSON trees, numbers to a relative 1e-12.
fn json_close(a: &serde_json::Value, b: &serde_json::Value) -> bool {
    use serde_json::Value;
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            let (x, y) = (x.as_f64().unwrap(), y.as_f64().unwrap());
            (x - y).abs() <= 1e-12 * x.abs().max(y.abs())
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(x, y)| json_close(x, y))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| json_close(v, w)))
        }
        _ => a == b,
    }
}

/// True when `svg` has a `<text>` element reading `label` (plotters writes the text on its
/// own line).
fn has_text(svg: &str, label: &str) -> bool {
    svg.contains(&format!(">\n{label}\n</text>")) || svg.contains(&format!(">{label}</text>"))
}

fn read(dir: &Path, file: &str) -> String {
    fs::read_to_string(dir.join(file)).unwrap_or_else(|e| panic!("{file}: {e}"))
}

fn svg_files(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".svg"))
        .collect();
    v.sort();
    v
}

/// results.json keeps its names (metrics, comparison kinds, configuration) and a `Results`
/// round-trips through it byte for byte.
#[test]
fn results_json_round_trips_with_its_names() {
    let results = synthetic(&Shape {
        gds: &[1, 2, 3],
        workloads: &[Workload::Erc20Approve],
        read_paths: &[ReadPath::Flat],
        prefetch: &[true],
        kept_runs: 3,
    });
    let json = serde_json::to_string_pretty(&results).unwrap();
    let back: Results = serde_json::from_str(&json).unwrap();
    assert_eq!(back, results);
    assert_eq!(serde_json::to_string_pretty(&back).unwrap(), json);

    let value: serde_json::Value = serde_json::from_str(&json).unwrap();
    let metrics = value["summaries"][0]["metrics"].as_object().unwrap();
    assert_eq!(metrics["total_ms"]["n"], 3);
    assert!(metrics.contains_key("ms_per_written_slot"));
    let mut names: Vec<&String> = metrics.keys().collect();
    names.sort();
    assert_eq!(
        metrics.keys().collect::<Vec<_>>(),
        names,
        "metrics in name order"
    );
    let kinds: Vec<&str> = value["comparisons"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["kind"].as_str().unwrap())
        .collect();
    assert!(kinds.contains(&"adjacent") && kinds.contains(&"vs_gd1"));
    assert_eq!(value["comparisons"][0]["metric"], "total_ms");
    assert_eq!(value["config"]["scale"], "smoke");
    assert_eq!(value["config"]["durability"], "durable");
}

#[test]
fn full_study_report() {
    let results = synthetic(&Shape {
        gds: &[1, 2, 3, 4],
        workloads: &[Workload::Erc20Balanceof, Workload::Erc20Approve],
        read_paths: &BOTH_PATHS,
        prefetch: &[false, true],
        kept_runs: 3,
    });
    let dir = tempfile::tempdir().unwrap();
    write_report(&results, dir.path()).unwrap();

    // results.json round-trips (floats to within serde_json's default parsing precision).
    let back: serde_json::Value = serde_json::from_str(&read(dir.path(), "results.json")).unwrap();
    assert!(json_close(&back, &serde_json::to_value(&results).unwrap()));
    let back: Results = serde_json::from_value(back).unwrap();
    assert_eq!(back.runs.len(), results.runs.len());
    assert_eq!(back.config, results.config);

    // Every expected chart, and nothing else.
    assert_eq!(
        svg_files(dir.path()),
        vec![
            "breakdown_erc20_approve.svg",
            "breakdown_erc20_balanceof.svg",
            "cold_read_erc20_balanceof.svg",
            "mgas_by_gd_erc20_approve.svg",
            "mgas_by_gd_erc20_balanceof.svg",
            "prefetch.svg",
            "read_paths.svg",
        ]
    );
    for file in svg_files(dir.path()) {
        assert!(
            super::is_report_file(&file),
            "{file} is not named as a chart"
        );
        let svg = read(dir.path(), &file);
        assert!(svg.trim_start().starts_with("<svg"), "{file}");
        assert!(svg.trim_end().ends_with("</svg>"), "{file}");
        assert!(
            has_text(&svg, "group depth"),
            "{file} lacks the x axis label"
        );
        // Tick labels for the group depths.
        for gd in 1..=4 {
            assert!(has_text(&svg, &gd.to_string()), "{file} lacks tick {gd}");
        }
    }
    let mgas = read(dir.path(), "mgas_by_gd_erc20_balanceof.svg");
    assert!(has_text(&mgas, "Mgas/s (median)"));
    assert!(has_text(&mgas, "flat + prefetch"));
    assert!(has_text(&mgas, "trie, no prefetch"));
    let breakdown = read(dir.path(), "breakdown_erc20_approve.svg");
    for stage in [
        "state read",
        "execution",
        "trie update: waiting for reads",
        "trie update: own work",
        "commit",
    ] {
        assert!(has_text(&breakdown, stage), "{stage}");
    }
    assert!(breakdown.contains("flat + prefetch"));
    let paths = read(dir.path(), "read_paths.svg");
    assert!(has_text(&paths, "erc20_balanceof, trie, no prefetch"));
    assert!(has_text(&paths, "erc20_balanceof, flat, no prefetch"));
    assert!(has_text(&paths, "state read ms (median)"));
    let cold = read(dir.path(), "cold_read_erc20_balanceof.svg");
    assert!(has_text(&cold, "flat + prefetch: device at QD16"));
    assert!(has_text(&cold, "ms per cold slot read (median)"));
    let prefetch = read(dir.path(), "prefetch.svg");
    assert!(has_text(&prefetch, "erc20_approve, flat + prefetch"));

    let md = read(dir.path(), "report.md");
    for needle in [
        "# bintrie group-depth study (smoke, 1,000,000 stems)",
        "cargo xtask bench --scale smoke",
        "| page size | GD | build | file size | node blobs | flat stems |",
        "| 4 KB | 3 | 12.5 s | 300.0 MiB | 123,456 | 1,000,000 |",
        "#### erc20_balanceof: flat + prefetch, 4 KB pages",
        "#### erc20_approve: trie, no prefetch, 4 KB pages",
        "| GD | runs | total ms | state read ms | execution ms | trie update ms | commit ms | Mgas/s | CV% total | total vs prev GD | total vs GD-1 | ms/cold read | device reads | device eff. |\n",
        "| GD | runs | total ms | state read ms | execution ms | trie update ms | commit ms | Mgas/s | CV% total | total vs prev GD | total vs GD-1 | ms/cold read | device reads | device eff. | ms/written slot | hash floor | write floor | w/o read wait |",
        // GD-3 approve, flat + prefetch: update 35 + commit 8 = 43 ms over 1,000 x 60 ns +
        // 10,000 B at 1,600 MB/s + 72 µs = 0.138 ms; without the 15 ms wait for the reads,
        // 28 ms over the same.
        "| 583.3× | 311.0× | 202.5× |",
        // 9,000 device reads x 11.9 µs / 100.2 ms of state read at GD-3, flat + prefetch.
        "| 0.100 | 9000 | 1.07 |",
        "The drive under the databases (`/db`, ext4), measured before the study:",
        "random 4 KB reads: 56.00 µs at QD1, 11.90 µs per read at QD16 (4.71x), 89,000 IOPS at saturation (QD32)",
        "| state read ms (ours) | state read ms (anchor) |",
        "| 3 | 100.2 | 2866 | 110.2 | 3213 | 90.74 | 5.20 | 0.100 | 0.467 |",
        "## Recommendation",
        // GD-3 is the best group depth of every workload in the synthetic data.
        "For flat + prefetch (the setup this project runs blocks with), the data supports **GD-3**",
        "significantly slower than the best in 0 of 2 workloads",
        "the read workload is fastest at GD-3 and the write workload at GD-3",
        "## Findings",
        "Best by median Mgas/s: **GD-3**",
        "The same group depth has the best median total block time (110.2 ms; GD-2: 135.2 ms, +22.7%, p = 0.100).",
        // 3 kept runs a side cannot reach p < 0.05 (exact minimum 0.1): the wording says so.
        "not significant (p = 0.100 ≥ 0.05): GD-3 and GD-2 cannot be told apart",
        "the flat path reads state 3.0× faster compared with the trie path (prefetch off) over GD-1..GD-4",
        "prefetching makes state reads 2.0× faster compared with no prefetch (flat path)",
        // 2.0 / (56 / 11.9).
        "the drive's own QD1/QD16 ratio is 4.7×, so the prefetch captures at best 42% of it",
        // 0.405 / 0.1002 ms per cold read.
        "against the anchor's 0.405 ms (geth GD-5, part 2): **4.0× better**",
        "![erc20_balanceof: throughput by group depth](mgas_by_gd_erc20_balanceof.svg)",
    ] {
        assert!(md.contains(needle), "report.md lacks {needle:?}\n{md}");
    }
    // GD-1 has nothing to compare against; GD-2's adjacent and vs-GD-1 cells agree.
    assert!(md.contains("| 1 | 3 | "));
    // State read share at the best group depth: 100.2 / 110.2.
    assert!(md.contains("State read is 91% of block time at GD-3"));

    let html = read(dir.path(), "index.html");
    assert!(html.starts_with("<!DOCTYPE html>"));
    assert!(html.contains("<table>"));
    assert!(html.contains("<strong>GD-3</strong>"));
    assert!(!html.contains("<link") && !html.contains("<script"));
    for file in svg_files(dir.path()) {
        assert!(html.contains(&format!("<img src=\"{file}\"")), "{file}");
    }
}

#[test]
fn clearly_separated_best_is_significant() {
    let results = synthetic(&Shape {
        gds: &[2, 3, 4],
        workloads: &[Workload::Erc20Balanceof],
        read_paths: &[ReadPath::Flat],
        prefetch: &[true],
        kept_runs: 9,
    });
    let dir = tempfile::tempdir().unwrap();
    write_report(&results, dir.path()).unwrap();
    let md = read(dir.path(), "report.md");
    assert!(
        md.contains("Best by median Mgas/s: **GD-3**")
            && md.contains("the difference is significant (Mann-Whitney p < 0.001)"),
        "{md}"
    );
    // p-values in the table are marked significant.
    assert!(md.contains(")*"));
    // Only one read path and one prefetch setting: no cross charts.
    assert_eq!(
        svg_files(dir.path()),
        vec![
            "breakdown_erc20_balanceof.svg",
            "cold_read_erc20_balanceof.svg",
            "mgas_by_gd_erc20_balanceof.svg"
        ]
    );
}

/// An approve study at GD-3 and GD-4 (flat + prefetch, 2 kept runs) whose rows `change`
/// alters before the statistics, reported into a new directory: the directory and report.md.
fn approve_report(change: impl Fn(&mut RunRow)) -> (tempfile::TempDir, String) {
    let mut results = synthetic(&Shape {
        gds: &[3, 4],
        workloads: &[Workload::Erc20Approve],
        read_paths: &[ReadPath::Flat],
        prefetch: &[true],
        kept_runs: 2,
    });
    results.runs.iter_mut().for_each(change);
    stats::analyze(&mut results);
    let dir = tempfile::tempdir().unwrap();
    write_report(&results, dir.path()).unwrap();
    let md = read(dir.path(), "report.md");
    (dir, md)
}

/// The write floor divides by the hash cost probed beside the blocks (`hash64_ns`, median
/// over the kept blocks) when the rows have it, not by the run's one probe: at twice the
/// synthetic machine's 60 ns, GD-3's floor is 1,000 x 120 ns + 10,000 B at 1,600 MB/s + 72 µs
/// = 0.198 ms.
#[test]
fn the_write_floor_uses_the_hash_cost_probed_beside_the_blocks() {
    let (_dir, md) = approve_report(|r| r.hash64_ns = Some(120.0));
    // Update 35 + commit 8 = 43 ms and 28 ms without the wait, over 0.198 ms; the hash floor
    // column is the rows' own.
    assert!(md.contains("| 583.3× | 216.9× | 141.2× |"), "{md}");
}

/// The write path against the drive: the trie prefetch's 9,000 pages in 100 ms are 90,000
/// a second, 1.01x the synthetic drive's 89,000; GD-3's update (35 ms) waited 15 ms, 250x
/// its 1,000 hashes of 60 ns, and worked 20 ms, 333x. Read more slowly, the same pages are
/// below the drive's limit; without a prefetch time or a disk, no such finding.
#[test]
fn the_write_path_is_set_against_the_drive() {
    let (_dir, md) = approve_report(|r| r.trie_warm_ms = 100.0);
    assert!(md.contains("### The write path against the drive"), "{md}");
    let gd3 = md
        .lines()
        .find(|l| l.contains("**erc20_approve** (flat + prefetch) at GD-3: the trie prefetch"))
        .unwrap_or_else(|| panic!("{md}"));
    for part in [
        "read 9000 pages in 100.0 ms",
        "1.01× the drive's most (89,000 reads of 4 KB per second, at QD",
        "at the drive's limit",
        "waited 15.00 ms for it, 250.00× the block's 0.0600 ms of hashing",
        "its own work, 20.00 ms, is 333.33×",
        "the write floor is",
    ] {
        assert!(gd3.contains(part), "{part:?} not in {gd3}");
    }
    let (_dir, slow) = approve_report(|r| r.trie_warm_ms = 200.0);
    assert!(slow.contains("0.51× the drive's most"), "{slow}");
    assert!(slow.contains("below the drive's limit"), "{slow}");
    assert!(!slow.contains("at the drive's limit"), "{slow}");
    let (_dir, none) = approve_report(|_| ());
    assert!(!none.contains("against the drive"), "{none}");
    let mut results = synthetic(&Shape {
        gds: &[3],
        workloads: &[Workload::Erc20Approve],
        read_paths: &[ReadPath::Flat],
        prefetch: &[true],
        kept_runs: 2,
    });
    results.machine.disk = None;
    results.runs.iter_mut().for_each(|r| r.trie_warm_ms = 100.0);
    stats::analyze(&mut results);
    let dir = tempfile::tempdir().unwrap();
    write_report(&results, dir.path()).unwrap();
    assert!(!read(dir.path(), "report.md").contains("against the drive"));
}

/// Results written before `trie_wait_ms` existed: the update is one stage of the breakdown
/// (no wait drawn as zero), and the table has no write floor without the wait.
#[test]
fn results_without_the_trie_wait_keep_the_update_whole() {
    let (dir, md) = approve_report(|r| r.trie_wait_ms = None);
    let svg = read(dir.path(), "breakdown_erc20_approve.svg");
    assert!(has_text(&svg, "trie update"));
    assert!(!svg.contains("waiting for reads"));
    assert!(!svg.contains("own work"));
    assert!(md.contains("| hash floor | write floor |\n"), "{md}");
    assert!(!md.contains("w/o read wait |"));
}

#[test]
fn single_group_depth_and_workload() {
    let results = synthetic(&Shape {
        gds: &[5],
        workloads: &[Workload::Mixed],
        read_paths: &[ReadPath::TrieWalk],
        prefetch: &[false],
        kept_runs: 1,
    });
    assert!(results.comparisons.is_empty());
    let dir = tempfile::tempdir().unwrap();
    write_report(&results, dir.path()).unwrap();
    let md = read(dir.path(), "report.md");
    assert!(md.contains("Only GD-5 was measured"), "{md}");
    assert!(md.contains("#### mixed: trie, no prefetch, 4 KB pages"));
    // No comparison columns when nothing was compared.
    assert!(!md.contains("total vs prev GD |"));
    // The anchor's mixed row beside ours.
    assert!(md.contains(
        "| GD | total ms (ours) | total ms (anchor) | Mgas/s (ours) | Mgas/s (anchor) |"
    ));
    assert!(md.contains("| 1910 |"));
    let svg = read(dir.path(), "mgas_by_gd_mixed.svg");
    assert!(has_text(&svg, "5") && has_text(&svg, "group depth"));
    assert!(!dir.path().join("read_paths.svg").exists());
    assert!(!dir.path().join("prefetch.svg").exists());
    assert!(dir.path().join("index.html").exists());
}

#[test]
fn empty_results_still_render() {
    let mut results = synthetic(&Shape {
        gds: &[],
        workloads: &[],
        read_paths: &[],
        prefetch: &[],
        kept_runs: 0,
    });
    results.databases.clear();
    let dir = tempfile::tempdir().unwrap();
    write_report(&results, &dir.path().join("nested/out")).unwrap();
    let md = read(&dir.path().join("nested/out"), "report.md");
    assert!(md.contains("No kept runs"));
    assert!(svg_files(&dir.path().join("nested/out")).is_empty());
}

/// Two state sizes: the per-slot charts by state size are drawn, headings and labels name the
/// size, and the findings fit and extrapolate the per-slot cost.
#[test]
fn state_sizes_get_charts_and_an_extrapolation() {
    let mut results = synthetic(&Shape {
        gds: &[5],
        workloads: &[Workload::Erc20Balanceof, Workload::Erc20Approve],
        read_paths: &[ReadPath::Flat],
        prefetch: &[true],
        kept_runs: 3,
    });
    // 16x the state: every state read takes half as long again.
    let bigger: Vec<RunRow> = results
        .runs
        .iter()
        .map(|r| {
            let mut r = r.clone();
            r.key.stems = 16_000_000;
            let extra = r.state_read_ms / 2.0;
            r.state_read_ms += extra;
            r.total_ms += extra;
            r.ms_per_cold_read = Some(r.state_read_ms / r.slots_read as f64);
            r.ms_per_written_slot =
                (r.slots_written > 0).then(|| r.total_ms / r.slots_written as f64);
            r
        })
        .collect();
    results.runs.extend(bigger);
    results.config.state_sizes = vec![1_000_000, 16_000_000];
    stats::analyze(&mut results);
    let dir = tempfile::tempdir().unwrap();
    write_report(&results, dir.path()).unwrap();
    let svgs = svg_files(dir.path());
    for f in ["state_size_reads.svg", "state_size_writes.svg"] {
        assert!(svgs.contains(&f.to_string()), "{svgs:?}");
    }
    let reads = read(dir.path(), "state_size_reads.svg");
    assert!(has_text(&reads, "erc20_balanceof, GD-5"));
    assert!(has_text(&reads, "state size, stems (log scale)"));
    let md = read(dir.path(), "report.md");
    for needle in [
        "#### erc20_balanceof: flat + prefetch, 4 KB pages, 1M stems",
        "#### erc20_balanceof: flat + prefetch, 4 KB pages, 16M stems",
        "### State size",
        // 0.2002 ms at 1M, 0.3003 at 16M: +0.025 per doubling.
        "**erc20_balanceof** (flat + prefetch), GD-5: 0.200 ms of state read per cold slot at 1M stems, 0.300 at 16M (+0.0250 per doubling of the state",
        "at mainnet's ~1.5G stems.",
        "The extrapolations assume: mainnet holds about 1.5 billion stems",
    ] {
        assert!(md.contains(needle), "report.md lacks {needle:?}\n{md}");
    }
}

/// Two page sizes: the findings name the fastest (page size, group depth) per workload and
/// test it against the best of the other page size.
#[test]
fn page_sizes_are_compared_with_p_values() {
    let mut results = synthetic(&Shape {
        gds: &[3, 4],
        workloads: &[Workload::Erc20Balanceof],
        read_paths: &[ReadPath::Flat],
        prefetch: &[true],
        kept_runs: 4,
    });
    // 8 KB pages: every block 30% slower, half as many device reads again.
    let larger: Vec<RunRow> = results
        .runs
        .iter()
        .map(|r| {
            let mut r = r.clone();
            r.key.page_size = 8192;
            r.total_ms *= 1.3;
            r.state_read_ms *= 1.3;
            r.device_reads = r.device_reads.map(|n| n + n / 2);
            r
        })
        .collect();
    results.runs.extend(larger);
    results.config.page_sizes = vec![4096, 8192];
    stats::analyze(&mut results);
    let dir = tempfile::tempdir().unwrap();
    write_report(&results, dir.path()).unwrap();
    let md = read(dir.path(), "report.md");
    for needle in [
        "### Page size",
        // GD-3: 100.2 + 10 = 110.2 ms; at 8 KB 143.3 ms (+30%), 4 kept runs a side: p = 0.029.
        "**erc20_balanceof** (flat + prefetch): fastest with 4 KB pages at GD-3, 110.2 ms median total, 9000 device reads; the best of each other page size: 8 KB pages at GD-3 143.3 ms (+30.0%, p = 0.029, 13500 device reads). All group depths pooled, against 4 KB pages (median total of every kept block): 8 KB pages +30.0% (p < 0.001, 8 blocks a side).",
    ] {
        assert!(md.contains(needle), "report.md lacks {needle:?}\n{md}");
    }
}

/// With several read paths, each (read path, prefetch) family gets one page-size sentence:
/// the families are not adjacent in the combinations' order, and must not repeat.
#[test]
fn each_family_gets_one_page_size_sentence() {
    let mut results = synthetic(&Shape {
        gds: &[3],
        workloads: &[Workload::Erc20Balanceof],
        read_paths: &BOTH_PATHS,
        prefetch: &[false, true],
        kept_runs: 2,
    });
    let larger: Vec<RunRow> = results
        .runs
        .iter()
        .map(|r| RunRow {
            key: ConfigKey {
                page_size: 16384,
                ..r.key
            },
            total_ms: r.total_ms * 2.0,
            ..r.clone()
        })
        .collect();
    results.runs.extend(larger);
    results.config.page_sizes = vec![4096, 16384];
    stats::analyze(&mut results);
    let dir = tempfile::tempdir().unwrap();
    write_report(&results, dir.path()).unwrap();
    let md = read(dir.path(), "report.md");
    let sentences: Vec<&str> = md
        .lines()
        .filter(|l| l.contains("fastest with 4 KB pages"))
        .collect();
    assert_eq!(sentences.len(), 4, "{sentences:#?}");
    for family in [
        "(trie, no prefetch)",
        "(trie + prefetch)",
        "(flat, no prefetch)",
        "(flat + prefetch)",
    ] {
        assert_eq!(
            sentences.iter().filter(|s| s.contains(family)).count(),
            1,
            "{family}: {sentences:#?}"
        );
    }
}

/// A results.json from before the state-size dimension (no `stems` on its rows, no
/// `random_stems`) reads with the configuration's size; in a file with several sizes a size of
/// 0 stays 0.
#[test]
fn old_results_read_with_the_configured_state_size() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("results.json");
    let mut results = synthetic(&Shape {
        gds: &[3, 4],
        workloads: &[Workload::Erc20Balanceof],
        read_paths: &[ReadPath::Flat],
        prefetch: &[true],
        kept_runs: 2,
    });
    stats::analyze(&mut results);
    let mut old = serde_json::to_value(&results).unwrap();
    for (list, field) in [
        ("runs", "stems"),
        ("summaries", "stems"),
        ("comparisons", "stems"),
        ("databases", "random_stems"),
    ] {
        for item in old[list].as_array_mut().unwrap() {
            assert!(item.as_object_mut().unwrap().remove(field).is_some());
        }
    }
    std::fs::write(&path, old.to_string()).unwrap();
    let back = Results::read(&path).unwrap();
    assert_eq!(back.runs, results.runs);
    assert_eq!(back.summaries, results.summaries);
    assert_eq!(back.comparisons, results.comparisons);
    assert_eq!(back.databases, results.databases);

    results.config.state_sizes = vec![0, results.config.stems];
    results.runs[0].key.stems = 0;
    std::fs::write(&path, serde_json::to_string(&results).unwrap()).unwrap();
    assert_eq!(Results::read(&path).unwrap().runs[0].key.stems, 0);
    // The report directory reads as the results.json inside it; one without is an error
    // naming the file it looked for.
    assert_eq!(
        Results::read(dir.path()).unwrap().runs,
        Results::read(&path).unwrap().runs
    );
    let empty = tempfile::tempdir().unwrap();
    let err = Results::read(empty.path()).unwrap_err().to_string();
    assert!(err.contains("results.json"), "{err}");
}

/// Witness sizes get their own section: a table by group depth with both encodings per block
/// and per key, the ratio, a chart per workload, and the MPT comparison; without them, none.
#[test]
fn witness_sizes_get_a_section_and_a_chart() {
    let shape = Shape {
        gds: &[1, 2, 3, 4],
        workloads: &[Workload::Erc20Approve],
        read_paths: &[ReadPath::Flat],
        prefetch: &[true],
        kept_runs: 3,
    };
    let dir = tempfile::tempdir().unwrap();
    write_report(&synthetic(&shape), dir.path()).unwrap();
    assert!(!read(dir.path(), "report.md").contains("Witness size"));

    let mut results = synthetic(&shape);
    for r in &mut results.runs {
        let gd = u64::from(r.key.group_depth);
        r.witness_keys = Some(1_000);
        r.witness_multiproof_bytes = Some(100_000);
        r.witness_blobs_bytes = Some(100_000 + 50_000 * gd);
    }
    results.summaries = crate::stats::summarize(&results.runs);
    let dir = tempfile::tempdir().unwrap();
    write_report(&results, dir.path()).unwrap();
    let md = read(dir.path(), "report.md");
    let section = &md[md.find("## Witness size").expect("no witness section")..];
    assert!(
        section.contains("| 2 | 1,000 | 97.66 KiB | 195.3 KiB | 100.0 | 200.0 | 2.00x |"),
        "{section}"
    );
    assert!(
        section.contains("smallest at GD-1 and largest at GD-4"),
        "{section}"
    );
    assert!(section.contains("3.8 KB (38.00x"), "{section}");
    assert!(section.contains("witness_erc20_approve.svg"));
    let svg = read(dir.path(), "witness_erc20_approve.svg");
    assert!(has_text(&svg, "multiproof") && svg.contains("stored blobs (geth"));
    // The chart is in the witness section only, not repeated under the workload.
    assert_eq!(md.matches("witness_erc20_approve.svg").count(), 1);
}
