//! Project automation, run as `cargo xtask <command>`.
//!
//! It drives cargo and the built binaries; it depends on none of the project's crates.

use anyhow::{Result, bail};
use std::process::Command;

const HELP: &str = "\
cargo xtask <command>

Commands:
  ci      the checks CI and reviewers expect: cargo fmt --check, clippy -D warnings, the tests
  bench   the whole-system group-depth study (not built yet: see the tracker's `cargo xtask
          bench` issue); the criterion micro-benchmarks run with `cargo bench -p bintrie-trie`
          and `cargo bench -p bintrie-node`
";

fn cargo(args: &[&str]) -> Result<()> {
    eprintln!("$ cargo {}", args.join(" "));
    let status = Command::new(env!("CARGO")).args(args).status()?;
    if !status.success() {
        bail!("cargo {} failed ({status})", args.join(" "));
    }
    Ok(())
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("ci") => {
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
