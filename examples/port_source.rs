//! Porting a legacy source, before and after: a line-reading source that checkpoints its file
//! offset, its port to a new-style reader that declares it reads (and writes) the source's
//! state, and the porting kit proving the port at every checkpoint, in both directions; then
//! both running in jobs with the same committed output (MIGRATION.md, "Moving state across the
//! port", resumes a legacy job's checkpoint with the port).
//!
//! ```sh
//! cargo run --example port_source
//! ```

use std::fs::File;
use std::io::{BufRead, BufReader, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::task::Waker;

use streamtask::sink::CollectHandle;
use streamtask::{JobConfig, Model, StreamEnvironment};
use streamtask_bridge::porting::PortingKit;
use streamtask_bridge::{HandoffReader, LegacyStateCompat, PortedReader};
use streamtask_core::OperatorError;
use streamtask_core::state::{decode, encode};
use streamtask_legacy::{SourceContext, SourceFunction};
use streamtask_mailbox::{InputStatus, ReaderOutput, SourceReader};

fn io(path: &Path, e: std::io::Error) -> OperatorError {
    OperatorError::user("lines", format!("{}: {e}", path.display()))
}

/// BEFORE: a legacy source. It loops until the file ends; each line's emit and the offset update
/// share one locked section, so a checkpoint never sees one without the other.
struct LinesSource {
    path: PathBuf,
}

impl SourceFunction for LinesSource {
    type Out = String;
    type State = u64; // byte offset of the next line

    fn run(&mut self, ctx: &mut SourceContext<'_, String, u64>) -> Result<(), OperatorError> {
        let offset = *ctx.lock().state();
        let mut file = File::open(&self.path).map_err(|e| io(&self.path, e))?;
        file.seek(SeekFrom::Start(offset))
            .map_err(|e| io(&self.path, e))?;
        let mut reader = BufReader::new(file);
        let mut line = String::new();
        while !ctx.is_cancelled() {
            line.clear();
            let read = reader.read_line(&mut line).map_err(|e| io(&self.path, e))?; // I/O outside the lock
            if read == 0 {
                return Ok(());
            }
            let mut locked = ctx.lock();
            locked.collect(line.trim_end().to_string())?;
            *locked.state_mut() += read as u64;
        }
        Ok(())
    }
}

/// AFTER: the port. The offset is the reader's own field; one line per poll; no lock.
struct LinesReader {
    path: PathBuf,
    offset: u64,
    reader: Option<BufReader<File>>,
}

impl SourceReader<String> for LinesReader {
    fn name(&self) -> &str {
        "lines"
    }

    fn restore_state(&mut self, state: Option<&[u8]>) -> Result<(), OperatorError> {
        if let Some(bytes) = state {
            self.offset = decode(bytes).map_err(|e| OperatorError::state("lines", e))?;
        }
        Ok(())
    }

    fn poll_next(
        &mut self,
        out: &mut ReaderOutput<'_, String>,
    ) -> Result<InputStatus, OperatorError> {
        if self.reader.is_none() {
            let mut file = File::open(&self.path).map_err(|e| io(&self.path, e))?;
            file.seek(SeekFrom::Start(self.offset))
                .map_err(|e| io(&self.path, e))?;
            self.reader = Some(BufReader::new(file));
        }
        let mut line = String::new();
        let reader = self.reader.as_mut().expect("opened above");
        let read = reader.read_line(&mut line).map_err(|e| io(&self.path, e))?;
        if read == 0 {
            return Ok(InputStatus::EndOfInput);
        }
        out.collect(line.trim_end().to_string())?;
        self.offset += read as u64;
        Ok(InputStatus::MoreAvailable)
    }

    fn register_waker(&mut self, waker: &Waker) {
        waker.wake_by_ref(); // a file always has a line or its end
    }

    fn snapshot_state(&mut self, _checkpoint_id: u64) -> Result<Vec<u8>, OperatorError> {
        encode(&self.offset).map_err(|e| OperatorError::state("lines", e))
    }
}

/// The declaration: the port reads the legacy source's state (the byte offset of the next line)
/// and writes it, so checkpoints move between the two in both directions.
impl LegacyStateCompat<String> for LinesReader {
    type LegacyState = u64; // LinesSource::State

    fn restore_legacy_state(&mut self, offset: u64) -> Result<(), OperatorError> {
        self.offset = offset;
        Ok(())
    }

    fn to_legacy_state(&self) -> Option<u64> {
        Some(self.offset)
    }
}

fn port(path: &Path) -> LinesReader {
    LinesReader {
        path: path.to_path_buf(),
        offset: 0,
        reader: None,
    }
}

fn run(model: Model, path: &Path, dir: &Path) -> Result<Vec<String>, Box<dyn std::error::Error>> {
    let env = StreamEnvironment::new(model);
    let out = CollectHandle::new();
    let path = path.to_path_buf();
    let lines = match model {
        Model::Legacy | Model::Bridge => {
            env.add_source("lines", move |_| LinesSource { path: path.clone() })
        }
        Model::Mailbox => env.add_reader("lines", move |_| PortedReader::new(port(&path))),
    };
    lines
        .map("upper", |l: String| l.to_uppercase())
        .collect_sink("out", &out);
    env.build()?.run(&JobConfig::new(dir.join(model.name())))?;
    let mut got = out.committed();
    got.sort();
    Ok(got)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // A fresh directory per run: nothing of an earlier run is restored (or refused).
    let tmp = tempfile::tempdir()?;
    let dir = tmp.path().to_path_buf();
    let path = dir.join("lines.txt");
    let mut file = File::create(&path)?;
    for i in 0..500 {
        writeln!(file, "line {i:03}")?;
    }
    drop(file);

    // Step 3 of the guide: the unchanged source as a reader, through the handoff.
    let handoff = PortingKit::new(
        || LinesSource { path: path.clone() },
        || HandoffReader::new(LinesSource { path: path.clone() }).with_capacity(1),
    )
    .checkpoint_every(40)
    .fail_after([55, 310])
    .run()
    .map_err(|e| e.to_string())?;
    println!(
        "handoff reader: {} records, {} restores, same output as the legacy source",
        handoff.records.len(),
        handoff.restores.len()
    );

    // Step 4: the port proper, with its declared state compatibility: at every checkpoint the
    // port restores from the legacy source's snapshot and the legacy source from the port's.
    let ported = PortingKit::ported(|| LinesSource { path: path.clone() }, || port(&path))
        .checkpoint_every(40)
        .fail_after([55, 310])
        .run()
        .map_err(|e| e.to_string())?;
    println!(
        "ported reader: {} records, {} restores, {} restores checked across the port, same \
         elements as the legacy source",
        ported.records.len(),
        ported.restores.len(),
        ported.restores_checked.len()
    );

    // And in jobs: the legacy source under the legacy and bridge models, the port under the
    // mailbox model.
    let legacy = run(Model::Legacy, &path, &dir)?;
    for model in [Model::Bridge, Model::Mailbox] {
        assert_eq!(run(model, &path, &dir)?, legacy, "{model}");
    }
    println!(
        "jobs: {} lines committed under every model, identical",
        legacy.len()
    );

    Ok(())
}
