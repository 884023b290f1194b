//! The stateless one-to-one, one-to-optional and one-to-many operators.

use std::fmt;
use std::marker::PhantomData;

use super::{Context, Operator};
use crate::element::StreamRecord;
use crate::error::OperatorError;

/// Applies a function to every record's value; the timestamp is kept.
///
/// # Examples
///
/// ```
/// use streamtask_core::operator::Map;
/// use streamtask_core::testing::OperatorHarness;
///
/// let mut h = OperatorHarness::new(Map::new("len", |s: &'static str| s.len()));
/// h.open().unwrap();
/// h.process_with_timestamp("four", 9).unwrap();
/// let out = h.output_records();
/// assert_eq!((out[0].value, out[0].timestamp), (4, Some(9)));
/// ```
pub struct Map<I, O, F> {
    name: String,
    f: F,
    _types: PhantomData<fn(I) -> O>,
}

impl<I, O, F: FnMut(I) -> O + Send> Map<I, O, F> {
    /// A map operator named `name`.
    pub fn new(name: impl Into<String>, f: F) -> Self {
        Map {
            name: name.into(),
            f,
            _types: PhantomData,
        }
    }
}

impl<I, O, F: FnMut(I) -> O + Send> Operator for Map<I, O, F> {
    type In = I;
    type Out = O;

    fn name(&self) -> &str {
        &self.name
    }

    #[inline]
    fn process_element(
        &mut self,
        record: StreamRecord<I>,
        ctx: &mut Context<'_, O>,
    ) -> Result<(), OperatorError> {
        ctx.collect(record.map(&mut self.f))
    }
}

impl<I, O, F> fmt::Debug for Map<I, O, F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Map").field("name", &self.name).finish()
    }
}

/// Keeps the records whose value satisfies a predicate.
///
/// # Examples
///
/// ```
/// use streamtask_core::operator::Filter;
/// use streamtask_core::testing::OperatorHarness;
///
/// let mut h = OperatorHarness::new(Filter::new("even", |x: &u32| x % 2 == 0));
/// h.open().unwrap();
/// for x in 0..5 {
///     h.process(x).unwrap();
/// }
/// assert_eq!(h.output_values(), vec![0, 2, 4]);
/// ```
pub struct Filter<T, F> {
    name: String,
    predicate: F,
    _types: PhantomData<fn(T)>,
}

impl<T, F: FnMut(&T) -> bool + Send> Filter<T, F> {
    /// A filter operator named `name`.
    pub fn new(name: impl Into<String>, predicate: F) -> Self {
        Filter {
            name: name.into(),
            predicate,
            _types: PhantomData,
        }
    }
}

impl<T, F: FnMut(&T) -> bool + Send> Operator for Filter<T, F> {
    type In = T;
    type Out = T;

    fn name(&self) -> &str {
        &self.name
    }

    #[inline]
    fn process_element(
        &mut self,
        record: StreamRecord<T>,
        ctx: &mut Context<'_, T>,
    ) -> Result<(), OperatorError> {
        if (self.predicate)(&record.value) {
            ctx.collect(record)
        } else {
            Ok(())
        }
    }
}

impl<T, F> fmt::Debug for Filter<T, F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Filter").field("name", &self.name).finish()
    }
}

/// Turns every record into zero or more records, all with the input's timestamp.
///
/// The function pushes its results into a buffer the operator reuses, so after the first
/// records no allocation happens per record.
///
/// # Examples
///
/// ```
/// use streamtask_core::operator::FlatMap;
/// use streamtask_core::testing::OperatorHarness;
///
/// let words = FlatMap::new("split", |line: String, out: &mut Vec<String>| {
///     out.extend(line.split(' ').map(str::to_string));
/// });
/// let mut h = OperatorHarness::new(words);
/// h.open().unwrap();
/// h.process("a b c".to_string()).unwrap();
/// assert_eq!(h.output_values(), vec!["a", "b", "c"]);
/// ```
pub struct FlatMap<I, O, F> {
    name: String,
    f: F,
    buffer: Vec<O>,
    _types: PhantomData<fn(I)>,
}

impl<I, O, F: FnMut(I, &mut Vec<O>) + Send> FlatMap<I, O, F> {
    /// A flat-map operator named `name`.
    pub fn new(name: impl Into<String>, f: F) -> Self {
        FlatMap {
            name: name.into(),
            f,
            buffer: Vec::new(),
            _types: PhantomData,
        }
    }
}

impl<I, O: Send, F: FnMut(I, &mut Vec<O>) + Send> Operator for FlatMap<I, O, F> {
    type In = I;
    type Out = O;

    fn name(&self) -> &str {
        &self.name
    }

    fn process_element(
        &mut self,
        record: StreamRecord<I>,
        ctx: &mut Context<'_, O>,
    ) -> Result<(), OperatorError> {
        let timestamp = record.timestamp;
        (self.f)(record.value, &mut self.buffer);
        for value in self.buffer.drain(..) {
            ctx.collect(StreamRecord { value, timestamp })?;
        }
        Ok(())
    }
}

impl<I, O, F> fmt::Debug for FlatMap<I, O, F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FlatMap").field("name", &self.name).finish()
    }
}
