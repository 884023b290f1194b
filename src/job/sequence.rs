//! A parallel sequence source: [`StreamEnvironment::from_sequence_parallel`].
//!
//! Its state is list state (the ranges each subtask has left, see `sources.rs`), so it is the
//! one built-in source a savepoint can take to another parallelism.

use super::environment::StreamEnvironment;
use super::sources::SequenceReader;
use super::stream::DataStream;

impl StreamEnvironment {
    /// The numbers of `range`, each once, read by `parallelism` subtasks: subtask `i` starts
    /// with the `i`-th of `parallelism` contiguous parts. Checkpointed as list state of the
    /// ranges left, so a restore from a savepoint with another parallelism splits the ranges
    /// left evenly over the new subtasks and no number is lost or repeated. The records carry
    /// no timestamps; the order across subtasks is not defined.
    ///
    /// # Examples
    ///
    /// ```
    /// use streamtask::prelude::*;
    ///
    /// let env = StreamEnvironment::new(Model::Mailbox);
    /// let out = CollectHandle::new();
    /// env.from_sequence_parallel("numbers", 0..10, 3)
    ///     .collect_sink("collect", &out);
    /// let dir = tempfile::tempdir().unwrap();
    /// env.build().unwrap().run(&JobConfig::new(dir.path())).unwrap();
    /// let mut got = out.committed();
    /// got.sort_unstable();
    /// assert_eq!(got, (0..10).collect::<Vec<u64>>());
    /// ```
    pub fn from_sequence_parallel(
        &self,
        name: &str,
        range: std::ops::Range<u64>,
        parallelism: usize,
    ) -> DataStream<u64> {
        let reader_name = name.to_string();
        self.register_channel_type::<u64>();
        self.add_reader_parallel(name, parallelism, move |subtask| {
            SequenceReader::new(reader_name.clone(), range.clone(), subtask, parallelism)
        })
    }
}
