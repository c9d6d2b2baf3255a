//! Medians, CV% and Mann-Whitney U tests over the kept runs.
