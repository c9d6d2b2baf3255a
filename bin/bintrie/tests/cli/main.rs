//! The `bintrie` binary's integration tests, one module per command family, linked into one
//! test binary: each of these links the whole dependency graph, so ten binaries cost ten
//! links of it (and the disk they take) for nothing.
//!
//! Run one family with a filter, e.g. `cargo test -p bintrie --test cli proof_cli::`.

mod common;

mod bench_cli;
mod blockchain_test_cli;
mod crash;
mod db_cli;
mod exec;
mod hardening_cli;
mod parsers_cli;
mod proof_cli;
mod root_cli;
mod stateless_cli;
