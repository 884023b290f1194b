//! The `streamtask` application: the built-in demo job, the comparison report and its plot, and
//! the measurement harness behind `streamtask bench`.
//!
//! This crate is the application, not the library a job depends on: it pulls SQLite, plotters,
//! clap, indicatif and the rest, none of which a job built on the `streamtask` job library needs.
//! Its modules are public for the binary, the examples, the benches and the tests that drive the
//! demo job.
//!
//! | module | what it holds |
//! |---|---|
//! | [`demo`] | the demo job: generated orders, keyed running totals, async enrichment, exactly-once file sink |
//! | [`report`] | the side-by-side table `compare` prints, and its JSON |
//! | [`plot`] | the SVG plot of a comparison |
//! | [`exporter`] | the metrics endpoint and file of `--metrics-addr` and `--metrics-file` |
//! | [`inspect`](mod@inspect) | what a checkpoint or savepoint holds, for `streamtask inspect` |
//! | [`bench`](mod@bench) | the rows of `streamtask bench` and the harnesses the benches share |

#![forbid(unsafe_code)]

#[cfg(not(loom))]
pub mod bench;
pub mod demo;
pub mod exporter;
pub mod inspect;
pub mod plot;
pub mod report;
