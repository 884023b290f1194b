//! Operator and task state snapshots.
//!
//! An operator snapshots its state as bytes ([`encode`] any serde value) and gets the same bytes
//! back on restore ([`decode`]). A task collects the bytes of its source and of every operator of
//! its chain in a [`TaskSnapshot`], keyed by [`TaskSnapshot::SOURCE`] and
//! [`TaskSnapshot::operator_key`]; a checkpoint is one `TaskSnapshot` per task.
//!
//! The encoding is JSON: checkpoints stay human-readable when something needs debugging, and the
//! states streamtask keeps (offsets, per-key aggregates, in-flight async inputs) are small.

use std::collections::BTreeMap;

use serde::Serialize;
use serde::de::DeserializeOwned;

/// Encoding or decoding state failed.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// The value could not be encoded.
    #[error("cannot encode state: {0}")]
    Encode(#[source] serde_json::Error),
    /// The bytes are not a valid encoding of the expected type (a changed state type, or a
    /// checkpoint from another job).
    #[error(
        "cannot decode state: {0}; restore from a checkpoint written by the same operator version"
    )]
    Decode(#[source] serde_json::Error),
}

/// Encodes a state value.
///
/// # Errors
///
/// [`StateError::Encode`] if serde cannot encode it (a map with non-string keys, say: store
/// such maps as a `Vec` of pairs).
///
/// # Examples
///
/// ```
/// use streamtask_core::state::{decode, encode};
///
/// let bytes = encode(&vec![(1u32, "a".to_string())]).unwrap();
/// let back: Vec<(u32, String)> = decode(&bytes).unwrap();
/// assert_eq!(back, vec![(1, "a".to_string())]);
/// ```
pub fn encode<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, StateError> {
    serde_json::to_vec(value).map_err(StateError::Encode)
}

/// Decodes a state value written by [`encode`].
///
/// # Errors
///
/// [`StateError::Decode`] if the bytes do not decode to `T`.
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, StateError> {
    serde_json::from_slice(bytes).map_err(StateError::Decode)
}

/// The state of one task at one checkpoint: named byte strings.
///
/// # Examples
///
/// ```
/// use streamtask_core::state::TaskSnapshot;
///
/// let mut snapshot = TaskSnapshot::new();
/// snapshot.put_value(TaskSnapshot::SOURCE, &42u64).unwrap();
/// snapshot.put(TaskSnapshot::operator_key(1), b"raw".to_vec());
/// assert_eq!(snapshot.get_value::<u64>(TaskSnapshot::SOURCE).unwrap(), Some(42));
/// assert_eq!(snapshot.get(&TaskSnapshot::operator_key(1)), Some(&b"raw"[..]));
/// assert_eq!(snapshot.len(), 2);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TaskSnapshot {
    entries: BTreeMap<String, Vec<u8>>,
}

impl TaskSnapshot {
    /// The key of a source's state.
    pub const SOURCE: &'static str = "source";

    /// The key of the elements a source had emitted before the barrier but not yet passed to
    /// the chain: what the bridge's `HandoffReader` holds in its handoff. Kept beside
    /// [`SOURCE`](Self::SOURCE), so that key holds exactly the bytes the same source writes
    /// under every model; written only when elements are in flight.
    pub const SOURCE_IN_FLIGHT: &'static str = "source-in-flight";

    /// The key of a task's channel state: the elements an unaligned checkpoint overtook in
    /// the task's input channels, in the runtime's channel-state format; written only when
    /// there are any.
    pub const CHANNEL_STATE: &'static str = "channel-state";

    /// The key of what a source task read, as the job declared it for the source (UTF-8 text,
    /// e.g. a file's name and length): written into a source task's snapshot by the job's
    /// checkpoint storage, so that a restore can refuse a checkpoint taken over other input.
    pub const SOURCE_IDENTITY: &'static str = "source-identity";

    /// The key of the marker (empty bytes) a task writes once a draining stop-with-savepoint
    /// ended its chain's input (see
    /// [`CheckpointKind::DrainingSavepoint`](crate::CheckpointKind::DrainingSavepoint)): a
    /// task restored from such a snapshot starts after end of input. Its source emits nothing
    /// and ends at once, its operators get no records, watermarks, timers or end of input, and
    /// its own snapshots carry the marker on.
    pub const FINISHED: &'static str = "finished";

    /// An empty snapshot.
    pub fn new() -> Self {
        TaskSnapshot::default()
    }

    /// The key of the state of the operator at `index` in the task's chain.
    pub fn operator_key(index: usize) -> String {
        format!("operator-{index}")
    }

    /// Stores `bytes` under `key`, replacing what was there.
    pub fn put(&mut self, key: impl Into<String>, bytes: Vec<u8>) {
        self.entries.insert(key.into(), bytes);
    }

    /// Encodes `value` and stores it under `key`.
    ///
    /// # Errors
    ///
    /// [`StateError::Encode`] if `value` cannot be encoded.
    pub fn put_value<T: Serialize + ?Sized>(
        &mut self,
        key: impl Into<String>,
        value: &T,
    ) -> Result<(), StateError> {
        self.put(key, encode(value)?);
        Ok(())
    }

    /// Takes the bytes stored under `key` out of the snapshot.
    pub fn remove(&mut self, key: &str) -> Option<Vec<u8>> {
        self.entries.remove(key)
    }

    /// The bytes stored under `key`.
    pub fn get(&self, key: &str) -> Option<&[u8]> {
        self.entries.get(key).map(Vec::as_slice)
    }

    /// Decodes the value stored under `key`, if any.
    ///
    /// # Errors
    ///
    /// [`StateError::Decode`] if the bytes do not decode to `T`.
    pub fn get_value<T: DeserializeOwned>(&self, key: &str) -> Result<Option<T>, StateError> {
        self.get(key).map(decode).transpose()
    }

    /// All entries in key order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &[u8])> {
        self.entries.iter().map(|(k, v)| (k.as_str(), v.as_slice()))
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there are no entries.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Total size of the stored bytes.
    pub fn size_bytes(&self) -> usize {
        self.entries.iter().map(|(k, v)| k.len() + v.len()).sum()
    }
}

impl FromIterator<(String, Vec<u8>)> for TaskSnapshot {
    fn from_iter<I: IntoIterator<Item = (String, Vec<u8>)>>(iter: I) -> Self {
        TaskSnapshot {
            entries: iter.into_iter().collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decode_of_the_wrong_type_is_a_typed_error() {
        let bytes = encode(&"text").unwrap();
        let err = decode::<u64>(&bytes).unwrap_err();
        assert!(matches!(err, StateError::Decode(_)));
        assert!(err.to_string().contains("same operator version"));
    }

    #[test]
    fn maps_with_non_string_keys_are_an_encode_error() {
        let mut map = BTreeMap::new();
        map.insert((1, 2), 3);
        assert!(matches!(encode(&map), Err(StateError::Encode(_))));
    }

    #[test]
    fn snapshot_collects_from_pairs() {
        let s: TaskSnapshot = vec![("b".to_string(), vec![2]), ("a".to_string(), vec![1])]
            .into_iter()
            .collect();
        let keys: Vec<&str> = s.iter().map(|(k, _)| k).collect();
        assert_eq!(keys, vec!["a", "b"]);
        assert_eq!(s.size_bytes(), 4);
        assert!(!s.is_empty());
    }
}
