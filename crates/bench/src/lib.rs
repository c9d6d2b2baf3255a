//! The whole-system group-depth study behind `cargo xtask bench`.
//!
//! Layers: [`device`] (the drive's own limits), [`model`] (the data), `stats` (medians, CV%, Mann-Whitney U), `report` (results.json,
//! report.md, SVG charts, index.html), the runner (state building, workload blocks, cold
//! measurement), and [`ab`] (two versions of the code compared from their results, invocation
//! by invocation: `bintrie compare`).

// Denied, not forbidden: the disk probe's io_uring submission (device.rs) is the one allowed
// unsafe call.
#![deny(unsafe_code)]

pub mod ab;
pub mod contracts;
pub mod device;
pub mod model;
pub mod report;
pub mod runner;
pub mod stats;
