//! One process of a timely run of the sample job (`streamtask_timely::sample`).
//!
//! ```text
//! streamtask-timely-worker --inputs DIR --out DIR --checkpoints DIR
//!     [--workers W] [--process I --hostfile FILE] [--interval-ms N] [--max-epoch-records N]
//! ```
//!
//! Every process gets the same arguments but its own `--process`; the hostfile lists one
//! `host:port` per process. Exit status 0 when the run committed everything, 1 on a failure
//! (the next run restores the last complete checkpoint), 2 on bad arguments.

fn main() -> std::process::ExitCode {
    streamtask_timely::sample::worker_main(std::env::args().skip(1).collect())
}
