//! The whole-system group-depth study behind `cargo xtask bench`.
//!
//! Layers: [`model`] (the data), `stats` (medians, CV%, Mann-Whitney U), `report` (results.json,
//! report.md, SVG charts, index.html), and the runner (state building, workload blocks, cold
//! measurement).

#![forbid(unsafe_code)]

pub mod contracts;
pub mod model;
pub mod report;
pub mod runner;
pub mod stats;
