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
             bintrie-revm without MDBX), then cargo test --workspace (`ci` is the same)
  unit       cargo test --workspace alone
  deps       install the system packages the build needs (libclang-dev for MDBX's bindings)
  exec-bench [--runs N] [--fixtures DIR] [--base-stems N]
             the recorded mainnet blocks, cold (page cache evicted before each run), in three
             modes: no cache, cache, cache + prefetch; medians over N runs (default 5) of the
             state-read time (and its speed-up over no cache), the block total and the read
             amplification; --base-stems puts each pre-state on N random stems (built once in
             target/exec-bench/base-N)
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
    eprintln!("$ cargo {}", args.join(" "));
    let status = Command::new(env!("CARGO")).args(args).status()?;
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
            cargo(&["test", "--workspace"])
        }
        Some("unit") => {
            ensure_system_deps()?;
            cargo(&["test", "--workspace"])
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
                "crash",
                "--",
                "--ignored",
                "--nocapture",
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

/// `cargo xtask exec-bench`: every fixture block, cold, with and without the cache and prefetch.
fn exec_bench(args: &[String]) -> Result<()> {
    let mut runs = 5usize;
    let mut base_stems: Option<u64> = None;
    let mut dir =
        std::env::var("BINTRIE_FIXTURES").unwrap_or_else(|_| "../shared/fixtures/mainnet".into());
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--runs" => runs = it.next().context("--runs N")?.parse().context("--runs N")?,
            "--fixtures" => dir = it.next().context("--fixtures DIR")?.clone(),
            "--base-stems" => {
                base_stems = Some(
                    it.next()
                        .context("--base-stems N")?
                        .parse()
                        .context("--base-stems N")?,
                )
            }
            other => bail!("exec-bench: unknown argument {other:?}"),
        }
    }
    let dir = std::path::PathBuf::from(dir);
    if !dir.is_dir() {
        bail!(
            "no fixtures at {} (set BINTRIE_FIXTURES or pass --fixtures DIR)",
            dir.display()
        );
    }
    cargo(&["build", "--release", "--quiet", "-p", "bintrie"])?;
    let bin = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/release/bintrie");
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
    let modes: [(&str, &[&str]); 3] = [
        ("no cache", &["--no-cache", "--no-prefetch"]),
        ("cache", &["--no-prefetch"]),
        ("cache + prefetch", &[]),
    ];
    let base_args: Vec<String> = match base_stems {
        Some(n) => {
            let keep = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join(format!("../target/exec-bench/base-{n}"));
            vec![
                "--base-stems".into(),
                n.to_string(),
                "--base-db".into(),
                keep.display().to_string(),
            ]
        }
        None => Vec::new(),
    };
    println!(
        "# recorded mainnet blocks, cold, median of {runs} runs{}\n",
        base_stems.map_or(String::new(), |n| format!(
            ", on a base of {n} random stems"
        ))
    );
    println!(
        "| block | mode | state read ms | vs no cache | total ms | Mgas/s | store reads | read amplification | valid |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for f in &fixtures {
        let mut no_cache_read = None;
        for (name, flags) in modes {
            let (mut read, mut total, mut mgas) = (Vec::new(), Vec::new(), Vec::new());
            let mut last = serde_json::Value::Null;
            for _ in 0..runs {
                let out = Command::new(&bin)
                    .args(["exec", "--json", "--cold", "--fixture"])
                    .arg(f)
                    .args(flags)
                    .args(&base_args)
                    .output()?;
                let j: serde_json::Value =
                    serde_json::from_slice(&out.stdout).with_context(|| {
                        format!("{}: {}", f.display(), String::from_utf8_lossy(&out.stderr))
                    })?;
                let t = &j["timings_ms"];
                let ms = |k: &str| t[k].as_f64().unwrap_or(0.0);
                read.push(ms("state_read"));
                total.push(ms("state_read") + ms("execution") + ms("trie_update") + ms("commit"));
                mgas.push(j["mgas_per_s"].as_f64().unwrap_or(0.0));
                last = j;
            }
            let read = median(&mut read);
            let base = *no_cache_read.get_or_insert(read);
            println!(
                "| {} | {name} | {read:.2} | {:.2}x | {:.2} | {:.1} | {} | {:.2} | {} |",
                last["block"],
                base / read,
                median(&mut total),
                median(&mut mgas),
                last["store_reads"],
                last["read_amplification"].as_f64().unwrap_or(0.0),
                last["valid"]
            );
        }
    }
    Ok(())
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
