//! Project automation, run as `cargo xtask <command>`.
//!
//! It drives cargo and the built binaries; it depends on none of the project's crates, so it
//! builds on a machine that lacks the system packages the crates need, and installs them.

#![forbid(unsafe_code)]

use anyhow::{Context, Result, bail};
use std::process::Command;

const HELP: &str = "\
cargo xtask <command>

Commands:
  run ARGS   build bintrie (release) and run `bintrie ARGS`, e.g.
             cargo xtask run root --alloc testdata/genesis-sample.json
  test       what .ci/run calls: cargo fmt --check, clippy --all-targets -D warnings (also
             bintrie-revm without MDBX), cargo doc with warnings denied (broken doc links),
             then cargo test --workspace (`ci` is the same)
  unit       cargo test --workspace alone
  deps       install the system packages the build needs (libclang-dev for MDBX's bindings)
  exec-bench [--runs N] [--fixtures DIR] [--base-stems N] [--layout mdbx|log]
             the recorded mainnet blocks, cold (page cache evicted before each run), in four
             modes: no cache, cache, cache + prefetch read first (--no-stream), cache + prefetch
             streamed into execution (the same on MDBX); medians over N runs (default 5) of the
             state-read time (and its speed-up over no cache), the block total and the read
             amplification; beside them the drive's floor for the reads (measured with
             `bintrie probe-disk` before each block) and the speed-up it allows; --base-stems
             puts each pre-state on N random stems (built once in target/exec-bench/base-N;
             with --layout log its log copy is kept in base-N/log)
  witness [--runs N] [--fixtures DIR] [--base-stems N]
             every recorded mainnet block's witness at group depths 1..8 (both encodings:
             stored blobs, multiproof), then at GD-5 the block executed statelessly from each
             against the warm stateful run (medians of N runs, default 5); witnesses are kept
             in target/witness; --base-stems as exec-bench (bases in target/exec-bench)
  ef-tests [PATH...] [bintrie blockchain-test options]
             Ethereum's blockchain tests (all 2,648 files, ~1 minute on 2 cores) on the
             binary-trie state: `bintrie blockchain-test` in a release build; PATH defaults to
             $BINTRIE_ETHEREUM_TESTS or ../shared/fixtures/ethereum-tests (the default test suite
             runs a fixed sample of them)
  crash-test the long crash tests (release): kill -9 a buffered study write run at random
             instants, BINTRIE_CRASH_ROUNDS times (default 20), and check the database it leaves
             verifies and never goes back (the import version runs in `test`)
  bench [--scale smoke|small|study] [--group-depths 1-8] [--workloads ...] [--runs N] ...
             the whole-system group-depth study: `bintrie bench` in a release build (see
             `cargo xtask bench --help`); the report goes to target/bench/<timestamp>/. The
             criterion micro-benchmarks stay in the crates: `cargo bench -p bintrie-trie` etc.

Every command first checks for libclang (needed by libmdbx's bindgen) and installs
libclang-dev with apt-get when running as root; otherwise it prints the command to run.
";

fn cargo(args: &[&str]) -> Result<()> {
    cargo_with_env(args, &[])
}

/// `cargo ARGS` with the environment variables `env` set, failing when it fails.
fn cargo_with_env(args: &[&str], env: &[(&str, &str)]) -> Result<()> {
    let shown: String = env.iter().map(|(k, v)| format!("{k}='{v}' ")).collect();
    eprintln!("$ {shown}cargo {}", args.join(" "));
    let status = Command::new(env!("CARGO"))
        .args(args)
        .envs(env.iter().copied())
        .status()?;
    if !status.success() {
        bail!("cargo {} failed ({status})", args.join(" "));
    }
    Ok(())
}

/// Fails with the command that installs them when a toolchain component (`rustfmt`, `clippy`)
/// is missing: a minimal rustup profile ships without them.
fn ensure_components(components: &[&str]) -> Result<()> {
    let missing: Vec<&str> = components
        .iter()
        .copied()
        .filter(|c| {
            let sub = if *c == "rustfmt" { "fmt" } else { *c };
            !Command::new(env!("CARGO"))
                .args([sub, "--version"])
                .output()
                .is_ok_and(|o| o.status.success())
        })
        .collect();
    if !missing.is_empty() {
        bail!(
            "the tests check formatting and lints, and this toolchain lacks {}; install with:\n  \
             rustup component add {}",
            missing.join(" and "),
            missing.join(" ")
        );
    }
    Ok(())
}

/// True when `name` is a file name that bindgen (through clang-sys) loads as libclang:
/// `libclang.so`, `libclang-N.so`, `libclang.so.N` or `libclang-N.so.N`. `libclang-cpp.so.N`
/// (the C++ interface, which some images ship without libclang itself) does not count.
fn is_bindgen_libclang(name: &str) -> bool {
    let Some(rest) = name.strip_prefix("libclang") else {
        return false;
    };
    let version_ok = |v: &str| {
        !v.is_empty()
            && v.split('.')
                .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
    };
    if rest == ".so" {
        return true;
    }
    if let Some(v) = rest.strip_prefix(".so.") {
        return version_ok(v);
    }
    if let Some(r) = rest.strip_prefix('-') {
        // libclang-N.so or libclang-N.so.M, where N is a version (never "cpp").
        let (ver, tail) = match r.find(".so") {
            Some(i) => (&r[..i], &r[i..]),
            None => return false,
        };
        return version_ok(ver)
            && (tail == ".so" || tail.strip_prefix(".so.").is_some_and(version_ok));
    }
    false
}

/// The first directory of `dirs` that holds a libclang bindgen can load.
fn libclang_in(dirs: &[std::path::PathBuf]) -> Option<std::path::PathBuf> {
    dirs.iter()
        .find(|dir| {
            std::fs::read_dir(dir).is_ok_and(|rd| {
                rd.flatten()
                    .any(|e| is_bindgen_libclang(&e.file_name().to_string_lossy()))
            })
        })
        .cloned()
}

/// The directories bindgen searches for libclang, in its order: `LIBCLANG_PATH` (a directory
/// or the library itself), `llvm-config --libdir`, then the system's library directories and
/// every `/usr/lib/llvm-*/lib`.
fn libclang_search_dirs() -> Vec<std::path::PathBuf> {
    use std::path::PathBuf;
    let mut dirs = Vec::new();
    if let Ok(p) = std::env::var("LIBCLANG_PATH") {
        let p = PathBuf::from(p);
        if p.is_file() {
            if let Some(parent) = p.parent() {
                dirs.push(parent.to_path_buf());
            }
        } else {
            dirs.push(p);
        }
    }
    if let Ok(out) = Command::new("llvm-config").arg("--libdir").output()
        && out.status.success()
    {
        dirs.push(PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()));
    }
    for d in [
        "/usr/lib",
        "/usr/lib64",
        "/usr/local/lib",
        "/usr/lib/x86_64-linux-gnu",
        "/usr/lib/aarch64-linux-gnu",
    ] {
        dirs.push(PathBuf::from(d));
    }
    if let Ok(rd) = std::fs::read_dir("/usr/lib") {
        let mut llvm: Vec<PathBuf> = rd
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with("llvm-"))
            .map(|e| e.path().join("lib"))
            .collect();
        llvm.sort();
        dirs.extend(llvm);
    }
    dirs
}

/// True when a libclang shared library that bindgen can load is installed.
fn have_libclang() -> bool {
    libclang_in(&libclang_search_dirs()).is_some()
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

fn ensure_system_deps() -> Result<()> {
    if have_libclang() {
        return Ok(());
    }
    let cmd = "apt-get update && apt-get install -y libclang-dev";
    if !is_root() {
        bail!(
            "libclang is missing (libmdbx's bindings need it at build time). Run:\n\n    sudo sh -c '{cmd}'\n"
        );
    }
    eprintln!("libclang is missing: installing libclang-dev ({cmd})");
    let ok = Command::new("sh")
        .args([
            "-c",
            &format!("DEBIAN_FRONTEND=noninteractive {cmd} >/dev/null"),
        ])
        .status()
        .context("running apt-get")?
        .success();
    if !ok || !have_libclang() {
        bail!("installing libclang-dev failed; run `{cmd}` and retry");
    }
    Ok(())
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("deps") => ensure_system_deps(),
        Some("run") => {
            ensure_system_deps()?;
            run_bintrie(&[], &args[1..])
        }
        Some("test" | "ci") => {
            ensure_system_deps()?;
            ensure_components(&["rustfmt", "clippy"])?;
            cargo(&["fmt", "--all", "--", "--check"])?;
            cargo(&[
                "clippy",
                "--workspace",
                "--all-targets",
                "--",
                "-D",
                "warnings",
            ])?;
            // The revm adapter without MDBX: what tools that only want the adapter build.
            cargo(&[
                "clippy",
                "-p",
                "bintrie-revm",
                "--no-default-features",
                "--all-targets",
                "--",
                "-D",
                "warnings",
            ])?;
            // Doc comments state each public item's contract: a broken or private link in
            // them fails the run like a lint.
            cargo_with_env(
                &["doc", "--workspace", "--no-deps"],
                &[("RUSTDOCFLAGS", "-D warnings")],
            )?;
            cargo(&["test", "--workspace"])
        }
        Some("unit") => {
            ensure_system_deps()?;
            cargo(&["test", "--workspace"])
        }
        Some("witness") => {
            ensure_system_deps()?;
            witness_bench(&args[1..])
        }
        Some("exec-bench") => {
            ensure_system_deps()?;
            exec_bench(&args[1..])
        }
        Some("ef-tests") => {
            ensure_system_deps()?;
            let rest = &args[1..];
            // No test path among the arguments (only options and their values): the shared
            // copy of the tests.
            let default_dir = std::env::var("BINTRIE_ETHEREUM_TESTS")
                .unwrap_or_else(|_| "../shared/fixtures/ethereum-tests".to_string());
            let mut with_dir = rest.to_vec();
            if !rest.iter().any(|x| std::path::Path::new(x).exists()) {
                if !std::path::Path::new(&default_dir).is_dir() {
                    bail!(
                        "Ethereum's blockchain tests not found at {default_dir}: give a PATH or \
                         set BINTRIE_ETHEREUM_TESTS"
                    );
                }
                with_dir.push(default_dir);
            }
            run_bintrie(&["blockchain-test"], &with_dir)
        }
        Some("crash-test") => {
            ensure_system_deps()?;
            cargo(&[
                "test",
                "--release",
                "-p",
                "bintrie",
                "--test",
                "cli",
                "--",
                "--ignored",
                "--nocapture",
                "crash::",
            ])
        }
        Some("bench") => {
            ensure_system_deps()?;
            // The study is the binary's `bench` command, built with the release profile.
            run_bintrie(&["bench"], &args[1..])
        }
        Some("-h" | "--help" | "help") | None => {
            print!("{HELP}");
            Ok(())
        }
        Some(other) => bail!("unknown command {other:?}\n\n{HELP}"),
    }
}

/// `bintrie COMMAND… ARGS…` from a release build (`cargo run --release`).
fn run_bintrie(command: &[&str], args: &[String]) -> Result<()> {
    let mut a = vec!["run", "--release", "--quiet", "-p", "bintrie", "--"];
    a.extend_from_slice(command);
    a.extend(args.iter().map(String::as_str));
    cargo(&a)
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// `a / b` to two decimals followed by `unit`, or "—" when `b` is not positive (a run that
/// read nothing, or took no time).
fn ratio(a: f64, b: f64, unit: &str) -> String {
    if b > 0.0 {
        format!("{:.2}{unit}", a / b)
    } else {
        "—".to_string()
    }
}

/// The drive's read limits, as `bintrie probe-disk --json` measures them.
struct Device {
    /// Per-read latency of random 4 KB reads one at a time, µs.
    qd1_us: f64,
    /// The highest rate of random 4 KB reads at any depth, reads per second.
    max_iops: f64,
    /// The depth at which that rate was reached.
    saturation_depth: u64,
}

impl Device {
    /// Measures the drive under `dir` with `bin probe-disk` (a few seconds).
    fn probe(bin: &std::path::Path, dir: &std::path::Path) -> Result<Self> {
        let out = Command::new(bin)
            .args(["probe-disk", "--json", "--point-ms", "200", "--dir"])
            .arg(dir)
            .output()?;
        if !out.status.success() {
            bail!(
                "probe-disk failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        let j: serde_json::Value =
            serde_json::from_slice(&out.stdout).context("probe-disk --json output")?;
        let num = |k: &str| {
            j[k].as_f64()
                .filter(|v| v.is_finite() && *v > 0.0)
                .with_context(|| format!("probe-disk --json has no positive {k}"))
        };
        Ok(Device {
            qd1_us: num("read_qd1_us")?,
            max_iops: num("max_read_iops")?,
            saturation_depth: j["saturation_depth"].as_u64().unwrap_or(0),
        })
    }

    /// The least time `reads` device reads take: one at a time, or at the drive's highest
    /// rate when `in_flight` (a prefetch). Milliseconds.
    fn floor_ms(&self, reads: f64, in_flight: bool) -> f64 {
        if in_flight {
            reads / self.max_iops * 1e3
        } else {
            reads * self.qd1_us / 1e3
        }
    }
}

/// One mode's runs of one block in `exec-bench`: the state read, the block's total and Mgas/s
/// of each run, and the last run's JSON.
#[derive(Default)]
struct ModeRuns {
    read: Vec<f64>,
    total: Vec<f64>,
    mgas: Vec<f64>,
    last: serde_json::Value,
}

/// `cargo xtask exec-bench`: every fixture block, cold, with and without the cache and
/// prefetch, the modes taking turns run by run.
fn exec_bench(args: &[String]) -> Result<()> {
    let FixtureArgs {
        runs,
        base_stems,
        dir,
        layout,
    } = FixtureArgs::parse("exec-bench", args)?;
    let fixtures = fixture_files(&dir)?;
    let bin = release_bintrie()?;
    // The last two differ only on the log layout (MDBX always reads the prefetch first).
    let modes: [(&str, &[&str]); 4] = [
        ("no cache", &["--no-cache", "--no-prefetch"]),
        ("cache", &["--no-prefetch"]),
        ("cache + prefetch first", &["--no-stream"]),
        ("cache + prefetch streamed", &[]),
    ];
    let mut base_args = base_args(base_stems, None);
    if let Some(l) = &layout {
        base_args.extend(["--layout".to_string(), l.clone()]);
    }
    println!(
        "# recorded mainnet blocks, cold, median of {runs} runs (the modes taking turns){}{}\n",
        layout
            .as_ref()
            .map_or(String::new(), |l| format!(", layout {l}")),
        base_stems.map_or(String::new(), |n| format!(
            ", on a base of {n} random stems"
        ))
    );
    println!(
        "| block | mode | state read ms | vs no cache | device floor ms | of the floor | device ceiling | total ms | Mgas/s | store reads | read amplification | valid |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
    let probe_dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/exec-bench");
    std::fs::create_dir_all(&probe_dir)?;
    let mut devices = Vec::new();
    for f in &fixtures {
        // The drive's limits just before this block's runs (it drifts within the hour).
        let device = Device::probe(&bin, &probe_dir)?;
        let (mut no_cache_read, mut no_cache_floor) = (None, None);
        let mut block = serde_json::Value::Null;
        // One run of every mode per round, so that a slow phase of the machine (they last
        // seconds to minutes here) falls on every mode alike instead of on one mode's runs.
        let mut samples: Vec<ModeRuns> = modes.iter().map(|_| ModeRuns::default()).collect();
        for _ in 0..runs {
            for ((_, flags), mode) in modes.iter().zip(&mut samples) {
                let out = Command::new(&bin)
                    .args(["exec", "--json", "--cold", "--fixture"])
                    .arg(f)
                    .args(*flags)
                    .args(&base_args)
                    .output()?;
                let j: serde_json::Value =
                    serde_json::from_slice(&out.stdout).with_context(|| {
                        format!("{}: {}", f.display(), String::from_utf8_lossy(&out.stderr))
                    })?;
                let t = &j["timings_ms"];
                let ms = |k: &str| t[k].as_f64().unwrap_or(0.0);
                mode.read.push(ms("state_read"));
                mode.total
                    .push(ms("state_read") + ms("execution") + ms("trie_update") + ms("commit"));
                mode.mgas.push(j["mgas_per_s"].as_f64().unwrap_or(0.0));
                mode.last = j;
            }
        }
        for ((name, _), mode) in modes.iter().zip(samples) {
            let ModeRuns {
                mut read,
                mut total,
                mut mgas,
                last,
            } = mode;
            let read = median(&mut read);
            let base = *no_cache_read.get_or_insert(read);
            let reads = last["store_reads"].as_f64().unwrap_or(0.0);
            let amplification = last["read_amplification"].as_f64().unwrap_or(1.0).max(1.0);
            let prefetched = last["mode"]["prefetch"].as_bool().unwrap_or(false);
            let floor = device.floor_ms(reads / amplification, prefetched);
            let base_floor = *no_cache_floor.get_or_insert(floor);
            println!(
                "| {} | {name} | {read:.2} | {} | {floor:.2} | {} | {} | {:.2} | {:.1} | {} | {amplification:.2} | {} |",
                last["block"],
                ratio(base, read, "x"),
                ratio(floor, read, ""),
                ratio(base_floor, floor, "x"),
                median(&mut total),
                median(&mut mgas),
                last["store_reads"],
                last["valid"]
            );
            block = last["block"].clone();
        }
        devices.push((block, device));
    }
    println!(
        "\nThe device floor of a state read is one device read per distinct key read (store \
         reads / read amplification; repeats come from the page cache): one at a time at the \
         drive's QD1 latency without a prefetch, at its highest rate with one (reads / \
         IOPS). \"Of the floor\" is the floor over the measured state read (1.0: at the \
         drive's limit); the device ceiling is the no-cache floor over the mode's floor, the \
         most a prefetch could gain on this drive if reading were all a state read did. On \
         MDBX a key reads 1-2 B-tree pages: its floors are lower bounds. The drive, measured \
         (`bintrie probe-disk`) before each block's runs:\n"
    );
    for (block, d) in devices {
        println!(
            "- {block}: QD1 {:.1} µs per read, at most {:.0} reads/s (at {} in flight)",
            d.qd1_us, d.max_iops, d.saturation_depth
        );
    }
    Ok(())
}

/// The arguments `exec-bench` and `witness` share: `--runs N` (default 5), `--fixtures DIR`
/// (default $BINTRIE_FIXTURES or ../shared/fixtures/mainnet), `--base-stems N`.
struct FixtureArgs {
    runs: usize,
    base_stems: Option<u64>,
    dir: String,
    /// `exec --layout` (`mdbx` when absent).
    layout: Option<String>,
}

impl FixtureArgs {
    fn parse(command: &str, args: &[String]) -> Result<Self> {
        let mut out = FixtureArgs {
            runs: 5,
            base_stems: None,
            dir: std::env::var("BINTRIE_FIXTURES")
                .unwrap_or_else(|_| "../shared/fixtures/mainnet".into()),
            layout: None,
        };
        let mut it = args.iter();
        while let Some(a) = it.next() {
            let mut value = |what: &str| it.next().with_context(|| format!("{a} {what}")).cloned();
            match a.as_str() {
                "--runs" => out.runs = value("N")?.parse().context("--runs N")?,
                "--fixtures" => out.dir = value("DIR")?,
                "--layout" => out.layout = Some(value("mdbx|log")?),
                "--base-stems" => {
                    out.base_stems = Some(value("N")?.parse().context("--base-stems N")?)
                }
                other => bail!("{command}: unknown argument {other:?}"),
            }
        }
        Ok(out)
    }
}

/// The block fixtures in `dir` (zkpi, rpccache, `.block.json`), sorted.
fn fixture_files(dir: &str) -> Result<Vec<std::path::PathBuf>> {
    let dir = std::path::PathBuf::from(dir);
    if !dir.is_dir() {
        bail!(
            "no fixtures at {} (set BINTRIE_FIXTURES or pass --fixtures DIR)",
            dir.display()
        );
    }
    let mut fixtures: Vec<_> = std::fs::read_dir(&dir)?
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            let n = p
                .file_name()
                .unwrap_or_default()
                .to_string_lossy()
                .to_string();
            n.contains(".zkpi.") || n.contains(".rpccache.") || n.ends_with(".block.json")
        })
        .collect();
    fixtures.sort();
    Ok(fixtures)
}

/// Builds bintrie in release and returns its path.
fn release_bintrie() -> Result<std::path::PathBuf> {
    cargo(&["build", "--release", "--quiet", "-p", "bintrie"])?;
    Ok(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/release/bintrie"))
}

/// `exec`'s arguments for a base of `n` random stems kept in target/exec-bench (`base-N` at
/// the default group depth, `base-N-gG` at group depth G); none without a base.
fn base_args(base_stems: Option<u64>, group_depth: Option<u8>) -> Vec<String> {
    let Some(n) = base_stems else {
        return Vec::new();
    };
    let name = match group_depth {
        None => format!("base-{n}"),
        Some(g) => format!("base-{n}-g{g}"),
    };
    let keep = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../target/exec-bench")
        .join(name);
    vec![
        "--base-stems".into(),
        n.to_string(),
        "--base-db".into(),
        keep.display().to_string(),
    ]
}

/// Runs `bintrie ARGS` and returns its JSON output; fails with its stderr when it fails.
fn bintrie_json(bin: &std::path::Path, args: &[String]) -> Result<serde_json::Value> {
    let out = Command::new(bin).args(args).output()?;
    if !out.status.success() {
        bail!(
            "bintrie {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    serde_json::from_slice(&out.stdout).with_context(|| format!("bintrie {}", args.join(" ")))
}

/// `cargo xtask witness`: for every fixture, the block's witness at each group depth in both
/// encodings, and stateless execution from it against the warm stateful run.
fn witness_bench(args: &[String]) -> Result<()> {
    let FixtureArgs {
        runs,
        base_stems,
        dir,
        layout,
    } = FixtureArgs::parse("witness", args)?;
    if layout.is_some() {
        bail!("witness: --layout is exec-bench's (witnesses are built the same from either)");
    }
    let fixtures = fixture_files(&dir)?;
    let bin = release_bintrie()?;
    let out_dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/witness");
    std::fs::create_dir_all(&out_dir)?;
    let base_note = base_stems.map_or(String::new(), |n| {
        format!(", each pre-state on a base of {n} random stems")
    });
    let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { 0.0 };
    println!("# Block witness size by group depth{base_note}\n");
    println!(
        "bytes of the whole file (tree + code); blobs = the stored group and stem blobs the \
         block's walks cross (geth's witness); multiproof = sibling hashes only (the same at \
         every group depth)\n"
    );
    println!(
        "| block | keys | code | multiproof | multiproof tree | GD-1 | GD-2 | GD-3 | GD-4 | GD-5 | GD-6 | GD-7 | GD-8 | blobs / multiproof at GD-5 | tree only |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    let mut at_gd5 = Vec::new();
    for f in &fixtures {
        let (mut row, mut first) = (Vec::new(), serde_json::Value::Null);
        for g in 1..=8u8 {
            let w = out_dir.join(format!("{}-g{g}.witness", file_stem(f)));
            let mut a: Vec<String> = vec![
                "exec".into(),
                "--json".into(),
                "--relaxed".into(),
                "-g".into(),
                g.to_string(),
                "--witness-out".into(),
                w.display().to_string(),
                "--fixture".into(),
                f.display().to_string(),
            ];
            a.extend(base_args(base_stems, Some(g)));
            let j = bintrie_json(&bin, &a)?;
            if j["valid"] != true {
                bail!("{}: not valid at GD-{g}", f.display());
            }
            row.push(j["witness"]["blobs"].clone());
            if g == 1 {
                first = j["witness"].clone();
            }
            if g == 5 {
                at_gd5.push((f.clone(), w, j));
            }
        }
        let total = |v: &serde_json::Value| v["total"].as_f64().unwrap_or(0.0);
        let tree = |v: &serde_json::Value| {
            v["nodes"].as_f64().unwrap_or(0.0) + v["values"].as_f64().unwrap_or(0.0)
        };
        let m = &first["multiproof"];
        let cells: Vec<String> = row.iter().map(|b| kb(total(b))).collect();
        println!(
            "| {} | {} | {} | {} | {} | {} | {:.2}x | {:.2}x |",
            at_gd5
                .last()
                .map_or(serde_json::Value::Null, |x| x.2["block"].clone()),
            first["keys"],
            kb(m["code"].as_f64().unwrap_or(0.0)),
            kb(total(m)),
            kb(tree(m)),
            cells.join(" | "),
            ratio(total(&row[4]), total(m)),
            ratio(tree(&row[4]), tree(m)),
        );
    }
    println!("\n# Stateless execution at GD-5{base_note}: median of {runs} runs\n");
    println!(
        "stateful: a warm `exec` (pre-state imported, nothing evicted), execution + trie update; \
         stateless: `exec --stateless` from the witness alone, prove (hash the witness against \
         the pre-root) + state read + execution + trie update\n"
    );
    println!(
        "| block | stateful exec + update ms | stateless (multiproof) ms | ratio | stateless (blobs) ms | ratio | valid, same root |"
    );
    println!("|---|---|---|---|---|---|---|");
    for (f, w, stateful) in &at_gd5 {
        let mut warm = Vec::new();
        for _ in 0..runs {
            let mut a: Vec<String> = vec![
                "exec".into(),
                "--json".into(),
                "--relaxed".into(),
                "--fixture".into(),
                f.display().to_string(),
            ];
            a.extend(base_args(base_stems, Some(5)));
            let t = &bintrie_json(&bin, &a)?["timings_ms"];
            warm.push(
                t["execution"].as_f64().unwrap_or(0.0) + t["trie_update"].as_f64().unwrap_or(0.0),
            );
        }
        let warm = median(&mut warm);
        let blobs = out_dir.join(format!("{}-g5.blobs.witness", file_stem(f)));
        let mut a: Vec<String> = vec![
            "exec".into(),
            "--json".into(),
            "--relaxed".into(),
            "--witness-encoding".into(),
            "blobs".into(),
            "--witness-out".into(),
            blobs.display().to_string(),
            "--fixture".into(),
            f.display().to_string(),
        ];
        a.extend(base_args(base_stems, Some(5)));
        bintrie_json(&bin, &a)?;
        let mut cells = Vec::new();
        let mut ok = true;
        for witness in [w, &blobs] {
            let mut t = Vec::new();
            for _ in 0..runs {
                let j = bintrie_json(
                    &bin,
                    &[
                        "exec".into(),
                        "--json".into(),
                        "--fixture".into(),
                        f.display().to_string(),
                        "--stateless".into(),
                        witness.display().to_string(),
                    ],
                )?;
                ok &= j["valid"] == true && j["root"] == stateful["root"];
                t.push(j["timings_ms"]["total"].as_f64().unwrap_or(0.0));
            }
            let t = median(&mut t);
            cells.push(format!("{t:.2} | {:.2}x", ratio(t, warm)));
        }
        println!(
            "| {} | {warm:.2} | {} | {ok} |",
            stateful["block"],
            cells.join(" | ")
        );
    }
    Ok(())
}

/// A fixture's file name up to its first dot (`22188088-cancun`).
fn file_stem(f: &std::path::Path) -> String {
    let name = f.file_name().unwrap_or_default().to_string_lossy();
    name.split('.').next().unwrap_or_default().to_string()
}

/// Bytes as KB (1 KB = 1000 bytes), one decimal.
fn kb(bytes: f64) -> String {
    format!("{:.1} KB", bytes / 1e3)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn libclang_names_bindgen_loads() {
        for ok in [
            "libclang.so",
            "libclang.so.1",
            "libclang-14.so",
            "libclang-14.0.6.so",
            "libclang-14.so.1",
            "libclang.so.14.0.6",
        ] {
            assert!(is_bindgen_libclang(ok), "{ok} should count");
        }
        for no in [
            "libclang-cpp.so.14",
            "libclang-cpp.so",
            "libclangBasic.a",
            "libclang.a",
            "libclang-14.a",
            "libclang.so.",
            "libclang-.so",
            "libclang-14.so.x",
            "libclang",
        ] {
            assert!(!is_bindgen_libclang(no), "{no} should not count");
        }
    }

    #[test]
    fn a_directory_with_only_libclang_cpp_has_no_libclang() {
        let dir = std::env::temp_dir().join(format!("xtask-libclang-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("libclang-cpp.so.14"), b"").unwrap();
        let dirs = vec![dir.clone()];
        assert_eq!(libclang_in(&dirs), None);
        std::fs::write(dir.join("libclang-14.so.1"), b"").unwrap();
        assert_eq!(libclang_in(&dirs), Some(dir.clone()));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
