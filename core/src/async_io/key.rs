//! The key a key-ordered async operator orders by.

use std::fmt;
use std::sync::Arc;

use crate::keygroup::{StableKey, murmur3_32, with_stable_bytes};

/// Where a record's key puts it: the lane its calls queue in, and its key group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct KeyPlace {
    /// The key's identity for ordering: records with equal keys have equal lanes. Two keys that
    /// share a lane (a 64-bit hash collision) are merely ordered together.
    pub lane: u64,
    /// The key group (as [`key_group_of`](crate::keygroup::key_group_of) computes it): where the
    /// record's in-flight state goes on a rescale.
    pub key_group: u32,
}

type PlaceFn<I> = Arc<dyn Fn(&I) -> KeyPlace + Send + Sync>;

/// The key of an async operator's input records, for
/// [`OutputMode::KeyOrdered`](super::OutputMode::KeyOrdered): results of one key leave in input
/// order, and the in-flight records of a snapshot are stored by key group, so a restore at
/// another parallelism hands each record to the subtask that owns its key.
///
/// The job API builds it from a keyed stream's key (`key_by(..).async_wait(..)`); an operator
/// built by hand takes one with the max parallelism of the job it runs in.
///
/// # Examples
///
/// ```
/// use streamtask_core::async_io::AsyncKey;
/// use streamtask_core::keygroup::key_group_of;
///
/// let key = AsyncKey::new(128, |order: &(u32, String)| order.0);
/// let a = key.place(&(7, "apple".to_string()));
/// let b = key.place(&(7, "pear".to_string()));
/// let c = key.place(&(8, "apple".to_string()));
/// assert_eq!(a, b, "same key, same lane");
/// assert_ne!(a.lane, c.lane);
/// assert_eq!(a.key_group, key_group_of(&7u32, 128));
/// ```
pub struct AsyncKey<I> {
    max_parallelism: u32,
    place: PlaceFn<I>,
}

impl<I> AsyncKey<I> {
    /// Orders records by `key(record)`, with key groups among `max_parallelism` (the job's).
    pub fn new<K, KF>(max_parallelism: u32, key: KF) -> Self
    where
        K: StableKey,
        KF: Fn(&I) -> K + Send + Sync + 'static,
    {
        let max = max_parallelism.max(1);
        AsyncKey {
            max_parallelism: max,
            place: Arc::new(move |input: &I| {
                with_stable_bytes(&key(input), |bytes| {
                    // The key-group hash (seed 0) is half of the lane; a second seed makes the
                    // other half, so keys of one key group still get lanes of their own.
                    let group_hash = murmur3_32(bytes, 0);
                    let other = murmur3_32(bytes, 0x9747_b28c);
                    KeyPlace {
                        lane: (u64::from(group_hash) << 32) | u64::from(other),
                        key_group: group_hash % max,
                    }
                })
            }),
        }
    }

    /// The max parallelism the key groups are computed with.
    pub fn max_parallelism(&self) -> u32 {
        self.max_parallelism
    }

    /// Where `input`'s key puts it.
    #[inline]
    pub fn place(&self, input: &I) -> KeyPlace {
        (self.place)(input)
    }
}

impl<I> Clone for AsyncKey<I> {
    fn clone(&self) -> Self {
        AsyncKey {
            max_parallelism: self.max_parallelism,
            place: Arc::clone(&self.place),
        }
    }
}

impl<I> fmt::Debug for AsyncKey<I> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AsyncKey")
            .field("max_parallelism", &self.max_parallelism)
            .finish_non_exhaustive()
    }
}
