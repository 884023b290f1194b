//! Side outputs: typed, named streams a process function emits to besides its main output
//! (Flink's `OutputTag` and `ctx.output(tag, value)`).
//!
//! An operator that offers side outputs keeps a [`SideOutputs`]: one [`Output`] per tag that
//! somebody reads, installed by whoever builds the task (the job layer installs a channel
//! writer into the side output's own task). Records go to that output at once, in the order the
//! function emits them, so they sit before any later barrier exactly as main-output records do;
//! the operator forwards every watermark and status change it forwards on its main output to
//! every side output too. The task's output must also broadcast barriers and end of input into
//! the side outputs' channels (the job layer wraps it so).

use std::any::Any;
use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;

use super::Output;
use crate::element::{StreamRecord, StreamStatus, Watermark};
use crate::error::OperatorError;

/// The name and type of a side output.
///
/// # Examples
///
/// ```
/// use streamtask_core::operator::{OutputTag, SideOutputs};
/// use streamtask_core::{operator::Output, StreamRecord};
/// use streamtask_core::operator::Emitted;
///
/// let late: OutputTag<String> = OutputTag::new("late");
/// let mut side = SideOutputs::new();
/// side.add(&late, Vec::<Emitted<String>>::new());
/// side.emit(&late, StreamRecord::new("too late".to_string())).unwrap();
/// assert_eq!(side.len(), 1);
/// ```
pub struct OutputTag<T> {
    name: Arc<str>,
    _type: PhantomData<fn() -> T>,
}

impl<T> OutputTag<T> {
    /// A tag named `name`; two tags with the same name name the same side output.
    pub fn new(name: impl Into<String>) -> Self {
        OutputTag {
            name: Arc::from(name.into()),
            _type: PhantomData,
        }
    }

    /// The tag's name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl<T> Clone for OutputTag<T> {
    fn clone(&self) -> Self {
        OutputTag {
            name: Arc::clone(&self.name),
            _type: PhantomData,
        }
    }
}

impl<T> PartialEq for OutputTag<T> {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
    }
}

impl<T> Eq for OutputTag<T> {}

impl<T> fmt::Debug for OutputTag<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OutputTag")
            .field("name", &self.name)
            .field("type", &std::any::type_name::<T>())
            .finish()
    }
}

/// A side output was used with the wrong type.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "side output {tag:?} carries {expected}, not {got}; give tags of different types different \
     names"
)]
pub struct SideOutputTypeError {
    /// The tag's name.
    pub tag: String,
    /// The type the side output was installed with.
    pub expected: &'static str,
    /// The type it was emitted with.
    pub got: &'static str,
}

trait ErasedSide: Send {
    fn emit_watermark(&mut self, watermark: Watermark) -> Result<(), OperatorError>;
    fn emit_status(&mut self, status: StreamStatus) -> Result<(), OperatorError>;
    fn as_any(&mut self) -> &mut dyn Any;
    fn type_name(&self) -> &'static str;
}

struct Typed<T>(Box<dyn Output<T> + Send>);

impl<T: 'static> ErasedSide for Typed<T> {
    fn emit_watermark(&mut self, watermark: Watermark) -> Result<(), OperatorError> {
        self.0.emit_watermark(watermark)
    }
    fn emit_status(&mut self, status: StreamStatus) -> Result<(), OperatorError> {
        self.0.emit_status(status)
    }
    fn as_any(&mut self) -> &mut dyn Any {
        self
    }
    fn type_name(&self) -> &'static str {
        std::any::type_name::<T>()
    }
}

/// The side outputs of one operator: an [`Output`] per tag somebody reads.
#[derive(Default)]
pub struct SideOutputs {
    outputs: Vec<(Arc<str>, Box<dyn ErasedSide>)>,
    dropped: u64,
}

impl SideOutputs {
    /// No side outputs: every side-output record is dropped (and counted).
    pub fn new() -> Self {
        SideOutputs::default()
    }

    /// Sends what is emitted to `tag` into `output` (replacing an earlier output of the tag).
    pub fn add<T: 'static>(&mut self, tag: &OutputTag<T>, output: impl Output<T> + Send + 'static) {
        self.outputs.retain(|(name, _)| **name != *tag.name);
        self.outputs
            .push((Arc::clone(&tag.name), Box::new(Typed(Box::new(output)))));
    }

    /// Emits `record` to the side output `tag`. A tag nobody reads drops the record, as Flink
    /// does for a tag without a consumer; [`dropped`](Self::dropped) counts them.
    ///
    /// # Errors
    ///
    /// Whatever the side output fails with; [`SideOutputTypeError`] (as a user error) when the
    /// tag was installed with another type.
    pub fn emit<T: 'static>(
        &mut self,
        tag: &OutputTag<T>,
        record: StreamRecord<T>,
    ) -> Result<(), OperatorError> {
        let Some((_, side)) = self.outputs.iter_mut().find(|(n, _)| **n == *tag.name) else {
            self.dropped += 1;
            return Ok(());
        };
        let expected = side.type_name();
        match side.as_any().downcast_mut::<Typed<T>>() {
            Some(typed) => typed.0.collect(record),
            None => Err(OperatorError::user(
                format!("side output {}", tag.name),
                SideOutputTypeError {
                    tag: tag.name.to_string(),
                    expected,
                    got: std::any::type_name::<T>(),
                },
            )),
        }
    }

    /// Forwards a watermark to every side output.
    ///
    /// # Errors
    ///
    /// The first side output's failure.
    pub fn emit_watermark(&mut self, watermark: Watermark) -> Result<(), OperatorError> {
        self.outputs
            .iter_mut()
            .try_for_each(|(_, side)| side.emit_watermark(watermark))
    }

    /// Forwards a status change to every side output.
    ///
    /// # Errors
    ///
    /// The first side output's failure.
    pub fn emit_status(&mut self, status: StreamStatus) -> Result<(), OperatorError> {
        self.outputs
            .iter_mut()
            .try_for_each(|(_, side)| side.emit_status(status))
    }

    /// Number of side outputs installed.
    pub fn len(&self) -> usize {
        self.outputs.len()
    }

    /// Whether no side output is installed.
    pub fn is_empty(&self) -> bool {
        self.outputs.is_empty()
    }

    /// Records emitted to tags nobody reads.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }
}

impl fmt::Debug for SideOutputs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SideOutputs")
            .field(
                "tags",
                &self.outputs.iter().map(|(n, _)| &**n).collect::<Vec<_>>(),
            )
            .field("dropped", &self.dropped)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::operator::Emitted;

    #[test]
    fn records_watermarks_and_status_reach_the_tag_installed() {
        let tag: OutputTag<u32> = OutputTag::new("t");
        let mut side = SideOutputs::new();
        let shared = std::sync::Arc::new(crate::sync::Mutex::new(Vec::new()));
        struct Shared(std::sync::Arc<crate::sync::Mutex<Vec<Emitted<u32>>>>);
        impl Output<u32> for Shared {
            fn collect(&mut self, record: StreamRecord<u32>) -> Result<(), OperatorError> {
                self.0.lock().push(Emitted::Record(record));
                Ok(())
            }
            fn emit_watermark(&mut self, watermark: Watermark) -> Result<(), OperatorError> {
                self.0.lock().push(Emitted::Watermark(watermark));
                Ok(())
            }
            fn emit_status(&mut self, status: StreamStatus) -> Result<(), OperatorError> {
                self.0.lock().push(Emitted::Status(status));
                Ok(())
            }
        }
        side.add(&tag, Shared(std::sync::Arc::clone(&shared)));
        side.emit(&tag, StreamRecord::with_timestamp(7, 3)).unwrap();
        side.emit_watermark(Watermark(3)).unwrap();
        side.emit_status(StreamStatus::Idle).unwrap();
        assert_eq!(
            *shared.lock(),
            vec![
                Emitted::Record(StreamRecord::with_timestamp(7, 3)),
                Emitted::Watermark(Watermark(3)),
                Emitted::Status(StreamStatus::Idle),
            ]
        );
    }

    #[test]
    fn a_tag_nobody_reads_is_counted_and_a_wrong_type_is_an_error() {
        let mut side = SideOutputs::new();
        side.emit(&OutputTag::<u32>::new("unread"), StreamRecord::new(1))
            .unwrap();
        assert_eq!(side.dropped(), 1);
        side.add(
            &OutputTag::<u32>::new("numbers"),
            Vec::<Emitted<u32>>::new(),
        );
        let err = side
            .emit(
                &OutputTag::<String>::new("numbers"),
                StreamRecord::new("x".into()),
            )
            .unwrap_err();
        assert!(err.to_string().contains("carries u32"), "{err}");
    }
}
