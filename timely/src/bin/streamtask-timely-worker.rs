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

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use streamtask_timely::sample::timely_job;
use streamtask_timely::{TimelyConfig, run};

fn main() -> ExitCode {
    match parse(std::env::args().skip(1).collect()) {
        Ok((inputs, out, config)) => match run(timely_job(inputs, &out), &config) {
            Ok(summary) => {
                println!(
                    "read {} records, last checkpoint {:?}, restored from {:?}",
                    summary.records_read, summary.last_checkpoint, summary.restored_from
                );
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("streamtask-timely-worker: {e}");
                ExitCode::from(1)
            }
        },
        Err(message) => {
            eprintln!("streamtask-timely-worker: {message}");
            ExitCode::from(2)
        }
    }
}

fn parse(args: Vec<String>) -> Result<(Vec<PathBuf>, PathBuf, TimelyConfig), String> {
    let value = |name: &str| -> Option<String> {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1).cloned())
    };
    let need = |v: Option<String>, name: &str| v.ok_or(format!("give {name}"));
    let number = |v: Option<String>, name: &str, default: u64| -> Result<u64, String> {
        v.map_or(Ok(default), |s| {
            s.parse()
                .map_err(|_| format!("{name} takes a number, not {s:?}"))
        })
    };
    let input_dir = PathBuf::from(need(value("--inputs"), "--inputs DIR")?);
    let out = PathBuf::from(need(value("--out"), "--out DIR")?);
    let checkpoints = PathBuf::from(need(value("--checkpoints"), "--checkpoints DIR")?);
    let workers = number(value("--workers"), "--workers", 1)? as usize;
    let process = number(value("--process"), "--process", 0)? as usize;
    let interval = number(value("--interval-ms"), "--interval-ms", 20)?;
    let max_epoch = number(value("--max-epoch-records"), "--max-epoch-records", 10_000)?;
    let mut inputs: Vec<PathBuf> = std::fs::read_dir(&input_dir)
        .map_err(|e| format!("read --inputs {}: {e}", input_dir.display()))?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "csv"))
        .collect();
    inputs.sort();
    let mut config = TimelyConfig::new(checkpoints)
        .workers(workers)
        .checkpoint_interval(Duration::from_millis(interval))
        .max_epoch_records(max_epoch);
    if let Some(hostfile) = value("--hostfile") {
        let text = std::fs::read_to_string(&hostfile)
            .map_err(|e| format!("read --hostfile {hostfile}: {e}"))?;
        let addresses: Vec<String> = text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(str::to_string)
            .collect();
        if process >= addresses.len() {
            return Err(format!(
                "--process {process} is not in the hostfile's {} addresses",
                addresses.len()
            ));
        }
        config = config.cluster(process, addresses);
    }
    Ok((inputs, out, config))
}
