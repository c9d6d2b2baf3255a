//! Project automation, run as `cargo xtask <command>`.
//!
//! It drives cargo and the built binaries; it depends on none of the project's crates, so it
//! builds on a machine that lacks the system packages the crates need, and installs them.

use anyhow::{Context, Result, bail};
use std::process::Command;

const HELP: &str = "\
cargo xtask <command>

Commands:
  run ARGS   build bintrie (release) and run `bintrie ARGS`, e.g.
             cargo xtask run root --alloc testdata/genesis-sample.json
  test       the test suite: cargo test --workspace (what .ci/run calls)
  ci         cargo fmt --check, clippy -D warnings, then the tests
  deps       install the system packages the build needs (libclang-dev for MDBX's bindings)
  bench      the whole-system group-depth study (not built yet: see the tracker); the criterion
             micro-benchmarks run with `cargo bench -p bintrie-trie` / `-p bintrie-node`

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

/// True when a libclang shared library is visible to bindgen.
fn have_libclang() -> bool {
    if let Ok(p) = std::env::var("LIBCLANG_PATH")
        && std::path::Path::new(&p).exists()
    {
        return true;
    }
    let dirs = [
        "/usr/lib",
        "/usr/lib64",
        "/usr/local/lib",
        "/usr/lib/x86_64-linux-gnu",
        "/usr/lib/aarch64-linux-gnu",
    ];
    let found_in = |dir: &std::path::Path| {
        std::fs::read_dir(dir).is_ok_and(|rd| {
            rd.flatten()
                .any(|e| e.file_name().to_string_lossy().starts_with("libclang"))
        })
    };
    dirs.iter().any(|d| found_in(std::path::Path::new(d)))
        || std::fs::read_dir("/usr/lib").is_ok_and(|rd| {
            rd.flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with("llvm-"))
                .any(|e| found_in(&e.path().join("lib")))
        })
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
            let mut a = vec!["run", "--release", "--quiet", "-p", "bintrie", "--"];
            a.extend(args[1..].iter().map(String::as_str));
            cargo(&a)
        }
        Some("test") => {
            ensure_system_deps()?;
            cargo(&["test", "--workspace"])
        }
        Some("ci") => {
            ensure_system_deps()?;
            cargo(&["fmt", "--all", "--", "--check"])?;
            cargo(&[
                "clippy",
                "--workspace",
                "--all-targets",
                "--",
                "-D",
                "warnings",
            ])?;
            cargo(&["test", "--workspace"])
        }
        Some("bench") => bail!(
            "the group-depth study is not implemented yet; micro-benchmarks: \
             `cargo bench -p bintrie-trie` and `cargo bench -p bintrie-node`"
        ),
        Some("-h" | "--help" | "help") | None => {
            print!("{HELP}");
            Ok(())
        }
        Some(other) => bail!("unknown command {other:?}\n\n{HELP}"),
    }
}
