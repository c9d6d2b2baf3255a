//! The report: results.json, report.md, SVG charts and index.html.
//!
//! [`write_report`] renders a [`Results`] as it is: the tables show `results.summaries` and
//! `results.comparisons` (the runner fills them with [`crate::stats::summarize`] and
//! [`crate::stats::compare`]); the findings additionally test best against runner-up group
//! depth on the kept runs in `results.runs`. Any subset of group depths, workloads, read paths,
//! prefetch settings and page sizes renders; what was not measured is left out.

pub mod anchor;
mod charts;
mod compare;
mod doc;
mod findings;
mod format;
mod recommend;
mod view;
mod witness;

use std::fs;
use std::path::Path;

use anyhow::Context as _;

use self::charts::{Chart, ChartKind};
pub use self::compare::compare_markdown;
use self::doc::{Block, NONE, Table};
use self::format::{bytes, count, duration, num, opt, page, pct};
use self::view::{Combo, View};
use crate::model::{ComparisonKind, ConfigKey, Metric, Results, Workload};

/// File name of the serialized [`Results`] inside the report directory.
pub const RESULTS_FILE: &str = "results.json";
/// File name of the Markdown report inside the report directory.
pub const MARKDOWN_FILE: &str = "report.md";
/// File name of the HTML page inside the report directory.
pub const HTML_FILE: &str = "index.html";

/// Whether `name` is a file [`write_report`] may write into its directory: [`RESULTS_FILE`],
/// [`MARKDOWN_FILE`], [`HTML_FILE`] or one of its charts (`mgas_by_gd_<workload>.svg`, ...).
pub fn is_report_file(name: &str) -> bool {
    [RESULTS_FILE, MARKDOWN_FILE, HTML_FILE].contains(&name) || charts::is_chart_name(name)
}

/// Writes the whole report for `results` into directory `out` (created if missing):
///
/// - `results.json`: `results`, pretty-printed, written first, through a temporary file renamed
///   over the old one (a failure later leaves it whole);
/// - SVG charts, each only when its data is present: `mgas_by_gd_<workload>.svg` (median Mgas/s
///   by group depth, one line per read path / prefetch / page size combination),
///   `breakdown_<workload>.svg` (stacked median stage times for flat + prefetch, else the first
///   combination), `read_paths.svg` (state read, trie vs flat) and `prefetch.svg` (state read,
///   prefetch off vs on);
/// - `report.md`: command, machine, configuration, database builds, per workload and
///   combination a table by group depth (and the anchor's figures beside ours for
///   erc20_balanceof, erc20_approve and mixed), the charts, and findings computed from the data;
/// - `index.html`: the same content as a self-contained page embedding the charts.
///
/// Existing files of the same names are overwritten; other files in `out` are left alone.
pub fn write_report(results: &Results, out: &Path) -> anyhow::Result<()> {
    fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    // First, and whole or not at all: the measurements survive a report that fails later, and
    // a report re-rendered into its own directory never tears the only copy.
    crate::runner::write_json_replacing(&out.join(RESULTS_FILE), results)?;
    let view = View::new(results);
    let charts = charts::write_charts(&view, out).context("writing the SVG charts")?;
    let blocks = document(&view, &charts);
    // Each file whole or not at all (a full disk left torn ones beside a whole results.json).
    crate::runner::write_replacing(
        &out.join(MARKDOWN_FILE),
        doc::to_markdown(&blocks).as_bytes(),
    )?;
    let title = title(&results.config);
    crate::runner::write_replacing(
        &out.join(HTML_FILE),
        doc::to_html(&title, &blocks).as_bytes(),
    )?;
    Ok(())
}

/// The report's title: the preset and the state size measured (a preset's name alone said
/// `smoke` of a study whose `--stems` made it 16M).
fn title(c: &crate::model::StudyConfig) -> String {
    let sizes = c.sizes();
    let stems = match (sizes.first(), sizes.last()) {
        (Some(a), Some(b)) if a != b => format!("{} to {} stems", count(*a), count(*b)),
        _ => format!("{} stems", count(c.stems)),
    };
    format!("bintrie group-depth study ({}, {stems})", c.scale.name())
}

/// One line describing `workload`.
fn describe(workload: Workload, results: &Results) -> String {
    match workload {
        Workload::Erc20Balanceof => {
            "Read: `balanceOf(counter)` in a loop on a real ERC-20; random, mostly absent slots."
                .to_string()
        }
        Workload::Erc20Approve => {
            "Write: `approve(spender = counter, amount)` in a loop; every write a brand-new slot."
                .to_string()
        }
        Workload::Mixed => format!(
            "Mixed: a balanceOf loop then an approve loop, {}% of the gas on reads.",
            results.config.mixed_read_pct
        ),
        Workload::SloadBenchmark => {
            "Synthetic read: sequential storage slots of one account (256 slots share a stem)."
                .to_string()
        }
        Workload::SstoreVariants => {
            "Synthetic write: sequential slots of one account through the four sstore transitions."
                .to_string()
        }
    }
}

/// The whole report as blocks.
fn document(view: &View, charts: &[Chart]) -> Vec<Block> {
    let r = view.results;
    let c = &r.config;
    let mut b = vec![Block::Heading(1, title(c))];
    b.push(Block::Para(format!(
        "Started {}; the study took {}. `results.json` schema version {}. Figures are medians \
         over the kept runs of each configuration (run 0 is a dropped warm-up); see the notes at \
         the end.",
        r.started,
        duration(r.elapsed_s),
        r.schema_version
    )));
    if let Some(why) = &r.incomplete {
        b.push(Block::Para(format!(
            "**Incomplete.** The study stopped before measuring every configuration: {why}. \
             The tables hold only the blocks measured before that."
        )));
    }

    b.push(Block::Heading(2, "Command".to_string()));
    b.push(Block::Code(r.command.clone()));

    b.push(Block::Heading(2, "Machine".to_string()));
    let m = &r.machine;
    b.push(Block::List(vec![
        format!("CPUs: {}", m.cpus),
        format!("CPU model: {}", m.cpu_model.as_deref().unwrap_or("unknown")),
        format!(
            "memory: {}",
            m.memory_bytes.map_or("unknown".to_string(), bytes)
        ),
        format!("kernel: {}", m.kernel.as_deref().unwrap_or("unknown")),
        format!("one 64-byte SHA-256 node hash: {} ns", num(m.hash64_ns)),
    ]));
    b.extend(disk_blocks(m.disk.as_ref()));

    b.push(Block::Heading(2, "Configuration".to_string()));
    let list = |v: Vec<String>| {
        if v.is_empty() {
            NONE.to_string()
        } else {
            v.join(", ")
        }
    };
    let mut config = vec![
        format!("scale: {}", c.scale.name()),
        format!("random stems per database: {}", count(c.stems)),
        format!("ERC-20 holders: {}", count(c.holders)),
        format!(
            "group depths: {}",
            list(c.group_depths.iter().map(u8::to_string).collect())
        ),
        format!(
            "workloads: {}",
            list(c.workloads.iter().map(|w| w.name().to_string()).collect())
        ),
        format!(
            "read paths: {}",
            list(c.read_paths.iter().map(|p| p.name().to_string()).collect())
        ),
        format!(
            "prefetch: {}",
            list(
                c.prefetch
                    .iter()
                    .map(|&p| if p { "on" } else { "off" }.to_string())
                    .collect()
            )
        ),
        format!(
            "MDBX page sizes: {}",
            list(c.page_sizes.iter().map(|&s| page(s)).collect())
        ),
        format!(
            "runs per configuration: {} (run 0 dropped as warm-up)",
            c.runs
        ),
        format!("block gas limit: {}", count(c.block_gas_limit)),
        format!("transaction gas limit: {}", count(c.tx_gas_limit)),
        format!("mixed workload: {}% of gas on reads", c.mixed_read_pct),
        format!("prefetch workers: {}", c.prefetch_workers),
        format!("commit durability: {}", c.durability.name()),
        format!("seed: {}", c.seed),
    ];
    if c.log_pinned_mib > 0 {
        config.push(format!(
            "log layout: the tree's upper levels kept in memory, up to {} MiB",
            c.log_pinned_mib
        ));
    }
    if c.warm_branches {
        config.push(
            "MDBX layout: the stem and node tables' branch pages cached before each block \
             (--warm-branches), their leaves cold"
                .to_string(),
        );
    }
    b.push(Block::List(config));

    b.push(Block::Heading(2, "Databases".to_string()));
    if r.databases.is_empty() {
        b.push(Block::Para("No database build was recorded.".to_string()));
    } else {
        let mut t = Table::new([
            "page size",
            "GD",
            "build",
            "file size",
            "node blobs",
            "flat stems",
        ]);
        let mut dbs: Vec<_> = r.databases.iter().collect();
        dbs.sort_by_key(|d| (d.page_size, d.group_depth));
        for d in dbs {
            t.rows.push(vec![
                page(d.page_size),
                d.group_depth.to_string(),
                duration(d.build_s),
                bytes(d.file_bytes),
                count(d.nodes),
                count(d.stems),
            ]);
        }
        b.push(Block::Table(t));
    }

    b.push(Block::Heading(2, "Recommendation".to_string()));
    b.extend(recommend::recommendation(view));

    b.push(Block::Heading(2, "Results by workload".to_string()));
    let workloads = view.workloads();
    if workloads.is_empty() {
        b.push(Block::Para("No kept runs were summarised.".to_string()));
    }
    for w in workloads {
        b.push(Block::Heading(3, w.name().to_string()));
        b.push(Block::Para(describe(w, r)));
        for chart in charts
            .iter()
            .filter(|ch| ch.workload == Some(w) && ch.kind != ChartKind::Witness)
        {
            b.push(image(chart));
        }
        for combo in view.combos(w) {
            b.push(Block::Heading(
                4,
                format!(
                    "{}: {}",
                    w.name(),
                    combo.label_with(true, view.multi_size())
                ),
            ));
            b.push(Block::Table(main_table(view, w, combo)));
            if let Some(t) = anchor_table(view, w, combo) {
                b.push(Block::Para(
                    "Beside the anchor (geth, part 1; its per-slot figures are state read / 6,141 \
                     cold reads and total / 681 written slots):"
                        .to_string(),
                ));
                b.push(Block::Table(t));
            }
        }
    }

    let cross: Vec<&Chart> = charts
        .iter()
        .filter(|ch| matches!(ch.kind, ChartKind::ReadPaths | ChartKind::Prefetch))
        .collect();
    if !cross.is_empty() {
        b.push(Block::Heading(2, "Read paths and prefetch".to_string()));
        for chart in cross {
            b.push(image(chart));
        }
    }

    b.extend(witness::witness_blocks(view, charts));

    b.push(Block::Heading(2, "Findings".to_string()));
    b.extend(findings::findings(view));

    b.push(Block::Heading(2, "Notes".to_string()));
    b.push(Block::List(vec![
        "Each figure is the median over the kept runs; stage medians are taken separately, so \
         they need not add up to the median total."
            .to_string(),
        "CV% is the sample standard deviation over the mean of the kept runs' total block time."
            .to_string(),
        format!(
            "\"vs prev GD\" and \"vs GD-1\" give the change of the median total block time and the \
             two-sided Mann-Whitney U p-value of the kept runs; * marks p < {}.",
            findings::ALPHA
        ),
        "ms/cold read is state read time over the storage slots the EVM read from the state \
         (one transaction per block, so each is a distinct cold slot read); \
         ms/written slot is total block time over the slots written; the hash floor is trie \
         update time over (hash calls x the cost of one hash, probed just before each block)."
            .to_string(),
        "write floor is trie update + commit over what one core and the drive need at least: \
         hash calls x one hash (the blocks' median probe), plus the bytes written at the \
         drive's sequential write bandwidth, plus one fdatasync (all measured in this run); \
         w/o read wait leaves out the update's wait for the trie prefetch's device reads \
         (trie_wait_ms), which the floor does not count."
            .to_string(),
        "device reads are the process's major page faults during the block (MDBX is opened \
         without read-ahead: one fault, one 4 KB page read); device eff. is device reads x the \
         drive's QD16 time per read over the state read time: 1.0 means the block's pages \
         arrived as fast as the drive serves 16 reads in flight. Write workloads also count the \
         trie prefetch's and the commit's pages, which overlap the state read."
            .to_string(),
        format!(
            "The anchor (STUDY.md) is go-ethereum on ~{:.0} M state entries in Pebble on other \
             hardware; this study wrote {} random stems per database. Compare shapes and \
             per-slot costs rather than absolute block times; the anchor's gas followed EIP-4762.",
            anchor::STATE_ENTRIES / 1e6,
            count(c.stems)
        ),
    ]));
    b
}

/// The drive's measured limits, or a sentence saying they were not measured.
fn disk_blocks(disk: Option<&crate::device::Disk>) -> Vec<Block> {
    let Some(d) = disk else {
        return vec![Block::Para(
            "The drive was not measured (`--no-disk-probe`, or the probe failed): no device \
             efficiency below."
                .to_string(),
        )];
    };
    let blocking = d
        .blocking_read_curve
        .iter()
        .find(|p| p.depth == crate::device::QD_REFERENCE)
        .map_or(String::new(), |p| {
            format!(
                "; with one blocking thread per request (as page faults are) {} µs per read at \
                 QD16",
                num(1e6 / p.iops)
            )
        });
    vec![
        Block::Para(format!(
            "The drive under the databases (`{}`, {}), measured before the study{}:",
            d.dir,
            d.filesystem.as_deref().unwrap_or("filesystem unknown"),
            if d.in_memory() {
                " (in memory: these are not a drive's figures)"
            } else {
                ""
            }
        )),
        Block::List(vec![
            format!(
                "random 4 KB reads: {} µs at QD1, {} µs per read at QD16 ({}x), {} IOPS at \
                 saturation (QD{}){blocking}",
                num(d.read_qd1_us),
                num(d.read_qd16_us),
                num(d.queue_gain()),
                count(d.max_read_iops.round() as u64),
                d.saturation_depth
            ),
            format!(
                "random 4 KB writes: {} IOPS at QD16; fdatasync {} µs; sequential writes {} MB/s",
                count(d.write_iops_qd16.round() as u64),
                num(d.fsync_us),
                num(d.seq_write_mb_s)
            ),
            format!("method: {}", d.method),
        ]),
    ]
}

fn image(chart: &Chart) -> Block {
    Block::Image {
        src: chart.file.clone(),
        alt: chart.title.clone(),
    }
}

/// "+4.1% (p 0.021)*" for the comparison of total_ms of `kind` at `key`, or [`NONE`].
fn comparison_cell(view: &View, key: &ConfigKey, kind: ComparisonKind) -> String {
    match view.comparison(key, kind, Metric::TotalMs) {
        None => NONE.to_string(),
        Some(c) => {
            let star = if c.p_value.is_some_and(|p| p < findings::ALPHA) {
                "*"
            } else {
                ""
            };
            format!("{} (p {}){star}", pct(c.pct_diff), format::p(c.p_value))
        }
    }
}

/// The table by group depth of one workload and combination.
fn main_table(view: &View, workload: Workload, combo: Combo) -> Table {
    let mut header = vec![
        "GD",
        "runs",
        "total ms",
        "state read ms",
        "execution ms",
        "trie update ms",
        "commit ms",
        "Mgas/s",
        "CV% total",
        "total vs prev GD",
        "total vs GD-1",
        "ms/cold read",
        "device reads",
        "device eff.",
        "ms/written slot",
    ];
    if workload.writes() {
        header.push("hash floor");
        header.push("write floor");
        header.push("w/o read wait");
    }
    let mut t = Table::new(header);
    for gd in view.group_depths(workload, combo) {
        let key = combo.key(workload, gd);
        let med = |m: Metric| opt(view.median(&key, m));
        let total = view.metric(&key, Metric::TotalMs);
        let mut row = vec![
            gd.to_string(),
            total.map_or(NONE.to_string(), |s| s.n.to_string()),
            med(Metric::TotalMs),
            med(Metric::StateReadMs),
            med(Metric::ExecutionMs),
            med(Metric::TrieUpdateMs),
            med(Metric::CommitMs),
            med(Metric::MgasS),
            total.map_or(NONE.to_string(), |s| format!("{:.1}", s.cv_pct)),
            comparison_cell(view, &key, ComparisonKind::Adjacent),
            comparison_cell(view, &key, ComparisonKind::VsGd1),
            med(Metric::MsPerColdRead),
            med(Metric::DeviceReads),
            view.device_efficiency(&key)
                .map_or(NONE.to_string(), |e| format!("{:.2}", e)),
            med(Metric::MsPerWrittenSlot),
        ];
        if workload.writes() {
            row.push(
                view.median(&key, Metric::HashFloor)
                    .map_or(NONE.to_string(), |h| format!("{}×", num(h))),
            );
            for ratio in [
                view.write_floor_ratio(&key),
                view.write_floor_ratio_after_reads(&key),
            ] {
                row.push(ratio.map_or(NONE.to_string(), |r| format!("{}×", num(r))));
            }
        }
        t.rows.push(row);
    }
    t.drop_empty_columns();
    t
}

/// Ours beside the anchor's part-1 medians, for the workloads the anchor measured; `None` for
/// other workloads or when no measured group depth is in 1..=8.
fn anchor_table(view: &View, workload: Workload, combo: Combo) -> Option<Table> {
    type Ours = Metric;
    type Theirs = fn(&anchor::AnchorRow) -> f64;
    let columns: Vec<(&str, Ours, Theirs)> = match workload {
        Workload::Erc20Balanceof => vec![
            ("state read ms", Metric::StateReadMs, |a| {
                a.read_state_read_ms
            }),
            ("total ms", Metric::TotalMs, |a| a.read_total_ms),
            ("Mgas/s", Metric::MgasS, |a| a.read_mgas_s),
            ("ms/cold read", Metric::MsPerColdRead, |a| {
                a.ms_per_cold_read()
            }),
        ],
        Workload::Erc20Approve => vec![
            ("state read ms", Metric::StateReadMs, |a| a.write_read_ms),
            ("trie update ms", Metric::TrieUpdateMs, |a| {
                a.write_trie_update_ms
            }),
            ("commit ms", Metric::CommitMs, |a| a.write_commit_ms),
            ("total ms", Metric::TotalMs, |a| a.write_total_ms),
            ("Mgas/s", Metric::MgasS, |a| a.write_mgas_s),
            ("ms/written slot", Metric::MsPerWrittenSlot, |a| {
                a.ms_per_written_slot()
            }),
        ],
        Workload::Mixed => vec![
            ("total ms", Metric::TotalMs, |a| a.mixed_total_ms),
            ("Mgas/s", Metric::MgasS, |a| a.mixed_mgas_s),
        ],
        Workload::SloadBenchmark | Workload::SstoreVariants => return None,
    };
    let mut header = vec!["GD".to_string()];
    for (name, _, _) in &columns {
        header.push(format!("{name} (ours)"));
        header.push(format!("{name} (anchor)"));
    }
    let mut t = Table::new(header);
    for gd in view.group_depths(workload, combo) {
        let Some(a) = anchor::at(gd) else {
            continue;
        };
        let key = combo.key(workload, gd);
        let mut row = vec![gd.to_string()];
        for (_, ours, theirs) in &columns {
            row.push(opt(view.median(&key, *ours)));
            row.push(num(theirs(a)));
        }
        t.rows.push(row);
    }
    (!t.rows.is_empty()).then_some(t)
}

#[cfg(test)]
pub(crate) mod tests;
