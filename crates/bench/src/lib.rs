//! The whole-system group-depth study behind `cargo xtask bench`.
//!
//! Layers: [`device`] (the drive's own limits), [`model`] (the data), `stats` (medians, CV%, Mann-Whitney U), `report` (results.json,
//! report.md, SVG charts, index.html), and the runner (state building, workload blocks, cold
//! measurement).

// Denied, not forbidden: the disk probe's io_uring submission (device.rs) is the one allowed
// unsafe call.
#![deny(unsafe_code)]

pub mod contracts;
pub mod device;
pub mod model;
pub mod report;
pub mod runner;
pub mod stats;
