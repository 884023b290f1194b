//! Key groups: how keyed state is cut so that it can move between parallelisms.
//!
//! Flink does not hash a key straight to a subtask: that would tie the key to one parallelism.
//! It hashes the key to one of `max_parallelism` **key groups**, and gives each subtask a
//! contiguous range of key groups. State is stored per key group, so a restore with another
//! parallelism hands whole key groups to their new owners. Max parallelism is fixed for the
//! life of a job's state: changing it would move keys between key groups.
//!
//! | step | here | Flink |
//! |---|---|---|
//! | key -> bytes | [`StableKey`]: integers little-endian, strings UTF-8, tuples field by field | `key.hashCode()` |
//! | bytes -> key group | [`murmur3_32`] (seed 0) `% max_parallelism` | `MathUtils.murmurHash(hashCode) % maxParallelism` |
//! | subtask -> key groups | [`KeyGroupRange::for_operator`] | `computeKeyGroupRangeForOperatorIndex` |
//! | key group -> subtask | [`operator_index_for_key_group`] | `computeOperatorIndexForKeyGroup` |
//!
//! The encoding and the hash are fixed forever: the same key lands in the same key group on
//! every platform and in every release (`tests` pins a few assignments). std's `Hash` is not
//! used, as its bytes depend on the platform and the release.
//!
//! # Keyed state on disk
//!
//! An operator with keyed state snapshots a [`KeyGroupedState`]: one entry per non-empty key
//! group, plus the operator's watermark. [`redistribute_key_groups`] reads such snapshots of
//! every old subtask (without knowing the key or state types: it works on the JSON values),
//! and cuts them into the new subtasks' ranges. A backend calls [`split_by_key_group`] when it
//! snapshots and [`KeyGroupedState::into_groups`] when it restores.
//!
//! # Operator (non-keyed) state
//!
//! State that is not keyed (a source's offsets, a sink's pending transactions) is redistributed
//! as one of Flink's two kinds, which the operator chooses by snapshotting in its envelope:
//!
//! | kind | envelope | on a restore with another parallelism |
//! |---|---|---|
//! | list state | [`ListState`] | every old subtask's items, concatenated in subtask order, split evenly (contiguous runs) |
//! | union state | [`UnionState`] | every new subtask gets every old subtask's items |
//!
//! Any other snapshot is tied to its subtask: it restores only at the same parallelism.

use std::collections::BTreeMap;
use std::fmt;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::state::{StateError, decode, encode};

/// The max parallelism a job gets unless it sets one (Flink's default for small jobs).
pub const DEFAULT_MAX_PARALLELISM: u32 = 128;

/// The largest max parallelism (Flink's `UPPER_BOUND_MAX_PARALLELISM`, 2^15).
pub const UPPER_BOUND_MAX_PARALLELISM: u32 = 1 << 15;

/// A key with a stable byte encoding, the input of the key-group hash.
///
/// The encoding must never change: it decides which subtask a key's state lives on, across
/// runs, platforms and releases. Integers are written little-endian at their own width
/// (`usize` and `isize` as 64 bits), `bool` as one byte, `char` as its `u32`, strings as their
/// UTF-8 bytes; a tuple, `Option` or sequence writes each part with a 4-byte little-endian
/// length prefix, so `("ab", "c")` and `("a", "bc")` differ.
///
/// # Examples
///
/// ```
/// use streamtask_core::keygroup::StableKey;
///
/// assert_eq!(7u32.stable_bytes(), vec![7, 0, 0, 0]);
/// assert_eq!("hé".stable_bytes(), "hé".as_bytes());
/// assert_ne!(("ab", "c").stable_bytes(), ("a", "bc").stable_bytes());
/// ```
pub trait StableKey {
    /// Appends this key's stable encoding to `out`.
    fn write_stable(&self, out: &mut Vec<u8>);

    /// This key's stable encoding.
    fn stable_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.write_stable(&mut out);
        out
    }
}

macro_rules! stable_int {
    ($($t:ty),*) => {$(
        impl StableKey for $t {
            fn write_stable(&self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_le_bytes());
            }
        }
    )*};
}

stable_int!(u8, u16, u32, u64, u128, i8, i16, i32, i64, i128);

impl StableKey for usize {
    fn write_stable(&self, out: &mut Vec<u8>) {
        // 64 bits on every platform, so a key hashes alike on 32- and 64-bit machines.
        (*self as u64).write_stable(out);
    }
}

impl StableKey for isize {
    fn write_stable(&self, out: &mut Vec<u8>) {
        (*self as i64).write_stable(out);
    }
}

impl StableKey for bool {
    fn write_stable(&self, out: &mut Vec<u8>) {
        out.push(u8::from(*self));
    }
}

impl StableKey for char {
    fn write_stable(&self, out: &mut Vec<u8>) {
        u32::from(*self).write_stable(out);
    }
}

impl StableKey for str {
    fn write_stable(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(self.as_bytes());
    }
}

impl StableKey for String {
    fn write_stable(&self, out: &mut Vec<u8>) {
        self.as_str().write_stable(out);
    }
}

impl<K: StableKey + ?Sized> StableKey for &K {
    fn write_stable(&self, out: &mut Vec<u8>) {
        (**self).write_stable(out);
    }
}

/// Writes `part` behind its length, so that concatenated parts stay unambiguous.
fn write_part<K: StableKey + ?Sized>(part: &K, out: &mut Vec<u8>) {
    let at = out.len();
    out.extend_from_slice(&[0; 4]);
    part.write_stable(out);
    let len = u32::try_from(out.len() - at - 4).unwrap_or(u32::MAX);
    out[at..at + 4].copy_from_slice(&len.to_le_bytes());
}

impl<K: StableKey> StableKey for Option<K> {
    fn write_stable(&self, out: &mut Vec<u8>) {
        match self {
            None => out.push(0),
            Some(k) => {
                out.push(1);
                write_part(k, out);
            }
        }
    }
}

impl<K: StableKey> StableKey for [K] {
    fn write_stable(&self, out: &mut Vec<u8>) {
        for part in self {
            write_part(part, out);
        }
    }
}

impl<K: StableKey> StableKey for Vec<K> {
    fn write_stable(&self, out: &mut Vec<u8>) {
        self.as_slice().write_stable(out);
    }
}

macro_rules! stable_tuple {
    ($($name:ident),+) => {
        impl<$($name: StableKey),+> StableKey for ($($name,)+) {
            #[allow(non_snake_case)]
            fn write_stable(&self, out: &mut Vec<u8>) {
                let ($($name,)+) = self;
                $(write_part($name, out);)+
            }
        }
    };
}

stable_tuple!(A);
stable_tuple!(A, B);
stable_tuple!(A, B, C);
stable_tuple!(A, B, C, D);

/// MurmurHash3, x86 32-bit variant (Austin Appleby's reference `MurmurHash3_x86_32`), the hash
/// Flink's key groups use. Computed over the slice directly (little-endian blocks, so it is the
/// same on every platform): it runs once or twice per keyed record, and a reader-based
/// implementation costs several times as much for the short encodings keys have.
///
/// # Examples
///
/// ```
/// use streamtask_core::keygroup::murmur3_32;
///
/// assert_eq!(murmur3_32(b"", 0), 0);
/// assert_eq!(murmur3_32(b"hello", 0), 0x248b_fa47);
/// ```
pub fn murmur3_32(bytes: &[u8], seed: u32) -> u32 {
    const C1: u32 = 0xcc9e_2d51;
    const C2: u32 = 0x1b87_3593;
    let scramble = |k: u32| k.wrapping_mul(C1).rotate_left(15).wrapping_mul(C2);
    let mut h = seed;
    let mut blocks = bytes.chunks_exact(4);
    for block in &mut blocks {
        let k = u32::from_le_bytes([block[0], block[1], block[2], block[3]]);
        h ^= scramble(k);
        h = h.rotate_left(13).wrapping_mul(5).wrapping_add(0xe654_6b64);
    }
    let tail = blocks.remainder();
    if !tail.is_empty() {
        let k = tail
            .iter()
            .rev()
            .fold(0u32, |k, &byte| (k << 8) | u32::from(byte));
        h ^= scramble(k);
    }
    // The reference mixes in the length as a 32-bit int.
    h ^= bytes.len() as u32;
    h ^= h >> 16;
    h = h.wrapping_mul(0x85eb_ca6b);
    h ^= h >> 13;
    h = h.wrapping_mul(0xc2b2_ae35);
    h ^ (h >> 16)
}

/// Runs `f` with `key`'s stable encoding, written into a buffer of the calling thread that is
/// reused from call to call: keyed records are placed one after another, and a fresh
/// allocation per record would cost more than hashing the bytes. A re-entrant call (a key whose
/// encoding places another key) gets a buffer of its own.
pub(crate) fn with_stable_bytes<K: StableKey + ?Sized, R>(
    key: &K,
    f: impl FnOnce(&[u8]) -> R,
) -> R {
    thread_local! {
        static BYTES: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    BYTES.with(|cell| match cell.try_borrow_mut() {
        Ok(mut bytes) => {
            bytes.clear();
            key.write_stable(&mut bytes);
            f(&bytes)
        }
        Err(_) => f(&key.stable_bytes()),
    })
}

/// The key group of `key` among `max_parallelism` (Flink's `assignToKeyGroup`).
///
/// # Examples
///
/// ```
/// use streamtask_core::keygroup::key_group_of;
///
/// let group = key_group_of(&42u64, 128);
/// assert!(group < 128);
/// assert_eq!(group, key_group_of(&42u64, 128));
/// ```
pub fn key_group_of<K: StableKey + ?Sized>(key: &K, max_parallelism: u32) -> u32 {
    with_stable_bytes(key, |bytes| murmur3_32(bytes, 0)) % max_parallelism.max(1)
}

/// The subtask (of `parallelism`) that owns `key_group` (Flink's
/// `computeOperatorIndexForKeyGroup`).
pub fn operator_index_for_key_group(max_parallelism: u32, parallelism: u32, key_group: u32) -> u32 {
    // u64: key_group * parallelism overflows u32 near the upper bound.
    (u64::from(key_group) * u64::from(parallelism) / u64::from(max_parallelism.max(1))) as u32
}

/// A contiguous, inclusive range of key groups; possibly empty.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct KeyGroupRange {
    /// The first key group.
    pub start: u32,
    /// The last key group (inclusive); below `start` for an empty range.
    pub end: u32,
}

impl KeyGroupRange {
    /// The key groups `start..=end`.
    pub fn new(start: u32, end: u32) -> Self {
        KeyGroupRange { start, end }
    }

    /// The key groups subtask `index` of `parallelism` owns (Flink's
    /// `computeKeyGroupRangeForOperatorIndex`).
    ///
    /// # Examples
    ///
    /// ```
    /// use streamtask_core::keygroup::KeyGroupRange;
    ///
    /// assert_eq!(KeyGroupRange::for_operator(128, 3, 0), KeyGroupRange::new(0, 42));
    /// assert_eq!(KeyGroupRange::for_operator(128, 3, 1), KeyGroupRange::new(43, 85));
    /// assert_eq!(KeyGroupRange::for_operator(128, 3, 2), KeyGroupRange::new(86, 127));
    /// ```
    pub fn for_operator(max_parallelism: u32, parallelism: u32, index: u32) -> Self {
        let (max, p, i) = (
            u64::from(max_parallelism),
            u64::from(parallelism.max(1)),
            u64::from(index),
        );
        let start = (i * max).div_ceil(p);
        let end = ((i + 1) * max).saturating_sub(1) / p;
        KeyGroupRange {
            start: start as u32,
            end: end as u32,
        }
    }

    /// Whether `key_group` is in the range.
    pub fn contains(&self, key_group: u32) -> bool {
        self.start <= key_group && key_group <= self.end
    }

    /// Number of key groups in the range.
    pub fn len(&self) -> u32 {
        (self.end + 1).saturating_sub(self.start)
    }

    /// Whether the range holds no key group.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl fmt::Display for KeyGroupRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "key groups {}..={}", self.start, self.end)
    }
}

/// Max parallelism and parallelism do not fit together.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KeyGroupError {
    /// Max parallelism out of `1..=2^15`.
    #[error(
        "max parallelism {0} is out of range; choose one between 1 and 32768 (the default is 128)"
    )]
    MaxParallelismOutOfRange(u32),
    /// More subtasks than key groups: some would own no key group.
    #[error(
        "parallelism {parallelism} exceeds the max parallelism {max_parallelism}; lower the \
         parallelism (the max parallelism of existing state cannot change)"
    )]
    ParallelismAboveMax {
        /// The parallelism asked for.
        parallelism: u32,
        /// The max parallelism.
        max_parallelism: u32,
    },
}

/// Checks that `parallelism` subtasks can share `max_parallelism` key groups.
///
/// # Errors
///
/// [`KeyGroupError::MaxParallelismOutOfRange`] or [`KeyGroupError::ParallelismAboveMax`].
pub fn check_parallelism(max_parallelism: u32, parallelism: u32) -> Result<(), KeyGroupError> {
    if max_parallelism == 0 || max_parallelism > UPPER_BOUND_MAX_PARALLELISM {
        return Err(KeyGroupError::MaxParallelismOutOfRange(max_parallelism));
    }
    if parallelism > max_parallelism {
        return Err(KeyGroupError::ParallelismAboveMax {
            parallelism,
            max_parallelism,
        });
    }
    Ok(())
}

/// The tag every [`KeyGroupedState`] snapshot carries, so a restore recognizes keyed state
/// without knowing its types.
pub const KEY_GROUPED_FORMAT: &str = "streamtask-key-groups-v1";

/// A keyed operator's snapshot: its state per key group.
///
/// `G` is what one key group holds (the states and timers of its keys); only non-empty key
/// groups are listed, in key-group order.
///
/// # Examples
///
/// ```
/// use streamtask_core::keygroup::{KeyGroupRange, KeyGroupedState, split_by_key_group};
///
/// let groups = split_by_key_group(vec![(1u32, 10u64), (2, 20), (3, 30)], |(k, _)| *k, 128);
/// let snapshot = KeyGroupedState::new(128, i64::MIN, groups);
/// let bytes = snapshot.encode().unwrap();
/// let back = KeyGroupedState::<Vec<(u32, u64)>>::decode(&bytes).unwrap();
/// let mut all: Vec<(u32, u64)> = back.into_groups().into_iter().flat_map(|(_, g)| g).collect();
/// all.sort();
/// assert_eq!(all, vec![(1, 10), (2, 20), (3, 30)]);
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KeyGroupedState<G> {
    format: String,
    /// The max parallelism the key groups were computed with.
    pub max_parallelism: u32,
    /// The operator's event-time watermark (after a merge: the lowest of the merged ones).
    pub watermark: i64,
    /// `(key group, its state)`, ascending.
    pub groups: Vec<(u32, G)>,
}

impl<G> KeyGroupedState<G> {
    /// A snapshot of `groups`, computed with `max_parallelism`.
    pub fn new(
        max_parallelism: u32,
        watermark: i64,
        groups: impl IntoIterator<Item = (u32, G)>,
    ) -> Self {
        let mut groups: Vec<(u32, G)> = groups.into_iter().collect();
        groups.sort_by_key(|(g, _)| *g);
        KeyGroupedState {
            format: KEY_GROUPED_FORMAT.to_string(),
            max_parallelism,
            watermark,
            groups,
        }
    }

    /// The per-key-group states.
    pub fn into_groups(self) -> Vec<(u32, G)> {
        self.groups
    }
}

impl<G: Serialize> KeyGroupedState<G> {
    /// Encodes the snapshot.
    ///
    /// # Errors
    ///
    /// [`StateError::Encode`] if a group's state cannot be encoded.
    pub fn encode(&self) -> Result<Vec<u8>, StateError> {
        encode(self)
    }
}

impl<G: DeserializeOwned> KeyGroupedState<G> {
    /// Decodes a snapshot written by [`encode`](Self::encode).
    ///
    /// # Errors
    ///
    /// [`StateError::Decode`] if the bytes are not a key-grouped snapshot of `G`.
    pub fn decode(bytes: &[u8]) -> Result<Self, StateError> {
        decode(bytes)
    }
}

/// The encoded size of each key group in a keyed snapshot: what
/// [`key_group_sizes`] reads, for tools that show where keyed state sits without knowing its
/// key or state types.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyGroupSizes {
    /// The max parallelism the key groups were computed with.
    pub max_parallelism: u32,
    /// `(key group, bytes of its encoded states and timers)` for every non-empty key group,
    /// ascending.
    pub groups: Vec<(u32, usize)>,
}

/// Reads the size of every key group of a [`KeyGroupedState`] snapshot (any key and state
/// types); `None` if `bytes` is another kind of state (see [`state_kind`]).
///
/// # Errors
///
/// [`StateError::Decode`] if the snapshot says it is keyed but does not decode.
///
/// # Examples
///
/// ```
/// use streamtask_core::keygroup::{KeyGroupedState, key_group_sizes};
///
/// let bytes = KeyGroupedState::new(128, 0, vec![(3, vec![1u8, 2]), (7, vec![])])
///     .encode()
///     .unwrap();
/// let sizes = key_group_sizes(&bytes).unwrap().unwrap();
/// assert_eq!(sizes.max_parallelism, 128);
/// assert_eq!(sizes.groups, vec![(3, 5), (7, 2)]); // `[1,2]` and `[]`
/// assert!(key_group_sizes(b"{}").unwrap().is_none());
/// ```
pub fn key_group_sizes(bytes: &[u8]) -> Result<Option<KeyGroupSizes>, StateError> {
    if state_kind(bytes) != StateKind::KeyGrouped {
        return Ok(None);
    }
    // Each group's value is re-encoded on its own: its length is what the group adds to the
    // snapshot, whatever the key and state types are.
    let snapshot = KeyGroupedState::<serde_json::Value>::decode(bytes)?;
    let groups = snapshot
        .groups
        .iter()
        .map(|(group, value)| Ok((*group, encode(value)?.len())))
        .collect::<Result<_, StateError>>()?;
    Ok(Some(KeyGroupSizes {
        max_parallelism: snapshot.max_parallelism,
        groups,
    }))
}

/// Groups `entries` by the key group of the key `key_of` names, ascending; what a keyed backend
/// calls before it snapshots.
pub fn split_by_key_group<E, K: StableKey>(
    entries: impl IntoIterator<Item = E>,
    key_of: impl Fn(&E) -> K,
    max_parallelism: u32,
) -> Vec<(u32, Vec<E>)> {
    let mut groups: BTreeMap<u32, Vec<E>> = BTreeMap::new();
    for entry in entries {
        let group = key_group_of(&key_of(&entry), max_parallelism);
        groups.entry(group).or_default().push(entry);
    }
    groups.into_iter().collect()
}

/// The tag of a [`ListState`] snapshot.
pub const LIST_STATE_FORMAT: &str = "streamtask-list-state-v1";
/// The tag of a [`UnionState`] snapshot.
pub const UNION_STATE_FORMAT: &str = "streamtask-union-state-v1";

macro_rules! operator_state {
    ($(#[$doc:meta])* $name:ident, $tag:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
        pub struct $name<T> {
            format: String,
            /// The items.
            pub items: Vec<T>,
        }

        impl<T> $name<T> {
            /// A snapshot of `items`.
            pub fn new(items: Vec<T>) -> Self {
                $name {
                    format: $tag.to_string(),
                    items,
                }
            }
        }

        impl<T: Serialize> $name<T> {
            /// Encodes the snapshot.
            ///
            /// # Errors
            ///
            /// [`StateError::Encode`] if an item cannot be encoded.
            pub fn encode(&self) -> Result<Vec<u8>, StateError> {
                encode(self)
            }
        }

        impl<T: DeserializeOwned> $name<T> {
            /// Decodes a snapshot written by `encode`.
            ///
            /// # Errors
            ///
            /// [`StateError::Decode`] if the bytes are not such a snapshot of `T`.
            pub fn decode(bytes: &[u8]) -> Result<Self, StateError> {
                decode(bytes)
            }
        }
    };
}

operator_state!(
    /// Operator state as Flink's list state: on a rescale, the items of every old subtask are
    /// concatenated and split evenly over the new subtasks (for state any subtask can take
    /// over, such as a queue of inputs).
    ListState,
    LIST_STATE_FORMAT
);

operator_state!(
    /// Operator state as Flink's union state: on a rescale, every new subtask gets the items of
    /// every old subtask (for state each subtask must see whole, such as the transactions a
    /// sink must commit, whoever wrote them).
    UnionState,
    UNION_STATE_FORMAT
);

/// How a snapshot moves to another parallelism, read from its envelope.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StateKind {
    /// A [`KeyGroupedState`].
    KeyGrouped,
    /// A [`ListState`].
    List,
    /// A [`UnionState`].
    Union,
    /// Anything else: restores only into the subtask that wrote it.
    Subtask,
}

#[derive(Deserialize)]
struct Tagged {
    format: String,
}

/// What kind of state `bytes` is.
pub fn state_kind(bytes: &[u8]) -> StateKind {
    match serde_json::from_slice::<Tagged>(bytes) {
        Ok(t) if t.format == KEY_GROUPED_FORMAT => StateKind::KeyGrouped,
        Ok(t) if t.format == LIST_STATE_FORMAT => StateKind::List,
        Ok(t) if t.format == UNION_STATE_FORMAT => StateKind::Union,
        _ => StateKind::Subtask,
    }
}

/// A snapshot could not be redistributed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RedistributeError {
    /// The snapshots were written with another max parallelism than the job has.
    #[error(
        "the state was written with max parallelism {found}, the job has {expected}; keep the \
         max parallelism of the job that wrote the state (it cannot change across a restore)"
    )]
    MaxParallelismChanged {
        /// The job's max parallelism.
        expected: u32,
        /// The snapshot's.
        found: u32,
    },
    /// The new parallelism does not fit the max parallelism.
    #[error(transparent)]
    Parallelism(#[from] KeyGroupError),
    /// A snapshot is not of the kind its envelope says.
    #[error(transparent)]
    State(#[from] StateError),
    /// Snapshots of different kinds were given for one state.
    #[error(
        "the subtasks' snapshots of one state are of different kinds (keyed, list, union or \
         per-subtask); restore from a savepoint written by one version of the job"
    )]
    MixedKinds,
}

/// Redistributes the snapshots of one keyed state, one per old subtask (`None`: that subtask
/// had none), over `parallelism` new subtasks; returns one snapshot per new subtask (`None`
/// where it owns no state).
///
/// # Errors
///
/// [`RedistributeError::MaxParallelismChanged`] if a snapshot was written with another max
/// parallelism; [`RedistributeError::Parallelism`] if `parallelism` exceeds it;
/// [`RedistributeError::State`] if a snapshot is not key-grouped.
pub fn redistribute_key_groups(
    old: &[Option<&[u8]>],
    max_parallelism: u32,
    parallelism: u32,
) -> Result<Vec<Option<Vec<u8>>>, RedistributeError> {
    check_parallelism(max_parallelism, parallelism)?;
    let mut watermark = i64::MAX;
    let mut groups: Vec<(u32, serde_json::Value)> = Vec::new();
    let mut any = false;
    for bytes in old.iter().flatten() {
        let snap = KeyGroupedState::<serde_json::Value>::decode(bytes)?;
        if snap.max_parallelism != max_parallelism {
            return Err(RedistributeError::MaxParallelismChanged {
                expected: max_parallelism,
                found: snap.max_parallelism,
            });
        }
        any = true;
        watermark = watermark.min(snap.watermark);
        groups.extend(snap.groups);
    }
    if !any {
        return Ok(vec![None; parallelism as usize]);
    }
    let mut out: Vec<Vec<(u32, serde_json::Value)>> = vec![Vec::new(); parallelism as usize];
    for (group, state) in groups {
        let owner = operator_index_for_key_group(max_parallelism, parallelism, group);
        out[owner as usize].push((group, state));
    }
    out.into_iter()
        .map(|groups| {
            KeyGroupedState::new(max_parallelism, watermark, groups)
                .encode()
                .map(Some)
                .map_err(RedistributeError::from)
        })
        .collect()
}

/// Redistributes the snapshots of one list or union state (see the module docs), one per old
/// subtask, over `parallelism` new subtasks.
///
/// # Errors
///
/// [`RedistributeError::State`] if a snapshot is not a list or union state;
/// [`RedistributeError::MixedKinds`] if some are lists and some unions.
pub fn redistribute_operator_state(
    old: &[Option<&[u8]>],
    parallelism: usize,
) -> Result<Vec<Option<Vec<u8>>>, RedistributeError> {
    let mut kind = None;
    let mut items: Vec<serde_json::Value> = Vec::new();
    for bytes in old.iter().flatten() {
        let this = state_kind(bytes);
        if kind.is_some_and(|k| k != this) {
            return Err(RedistributeError::MixedKinds);
        }
        kind = Some(this);
        let snap = ListState::<serde_json::Value>::decode(bytes)?;
        items.extend(snap.items);
    }
    let encode_as = |kind: StateKind, items: Vec<serde_json::Value>| match kind {
        StateKind::Union => UnionState::new(items).encode(),
        _ => ListState::new(items).encode(),
    };
    match kind {
        None => Ok(vec![None; parallelism]),
        Some(StateKind::Union) => (0..parallelism)
            .map(|_| {
                encode_as(StateKind::Union, items.clone())
                    .map(Some)
                    .map_err(Into::into)
            })
            .collect(),
        Some(StateKind::List) => {
            // Even split in contiguous runs: the first `len % p` subtasks get one more.
            let p = parallelism.max(1);
            let (base, extra) = (items.len() / p, items.len() % p);
            let mut rest = items.into_iter();
            (0..p)
                .map(|i| {
                    let n = base + usize::from(i < extra);
                    encode_as(StateKind::List, rest.by_ref().take(n).collect())
                        .map(Some)
                        .map_err(Into::into)
                })
                .collect()
        }
        Some(_) => Err(RedistributeError::MixedKinds),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn murmur3_matches_the_reference_vectors() {
        assert_eq!(murmur3_32(b"", 0), 0);
        assert_eq!(murmur3_32(b"", 1), 0x514e_28b7);
        assert_eq!(murmur3_32(b"hello", 0), 0x248b_fa47);
        assert_eq!(
            murmur3_32(b"The quick brown fox jumps over the lazy dog", 0),
            0x2e4f_f723
        );
    }

    #[test]
    fn murmur3_matches_the_murmur3_crate_for_every_tail_length_and_seed() {
        let bytes: Vec<u8> = (0u8..=70).map(|b| b.wrapping_mul(37) ^ 0x5a).collect();
        for len in 0..bytes.len() {
            for seed in [0, 1, 0x9747_b28c, u32::MAX] {
                let reference =
                    murmur3::murmur3_32(&mut std::io::Cursor::new(&bytes[..len]), seed).unwrap();
                assert_eq!(murmur3_32(&bytes[..len], seed), reference, "{len} {seed}");
            }
        }
    }

    /// Pinned forever: a change here moves keyed state between subtasks of existing
    /// savepoints.
    #[test]
    fn key_group_assignments_are_pinned() {
        let groups: Vec<u32> = [0u64, 1, 42, 1_000_000]
            .iter()
            .map(|k| key_group_of(k, 128))
            .collect();
        assert_eq!(groups, PINNED_U64);
        let groups: Vec<u32> = [0u32, 1, 42, 7_777]
            .iter()
            .map(|k| key_group_of(k, 128))
            .collect();
        assert_eq!(groups, PINNED_U32);
        let groups: Vec<u32> = [-1i64, i64::MIN]
            .iter()
            .map(|k| key_group_of(k, 128))
            .collect();
        assert_eq!(groups, PINNED_I64);
        let groups: Vec<u32> = ["", "alice", "bob", "ünïcode"]
            .iter()
            .map(|k| key_group_of(*k, 128))
            .collect();
        assert_eq!(groups, PINNED_STR);
        let groups: Vec<u32> = [(1u32, "a".to_string()), (2, "b".to_string())]
            .iter()
            .map(|k| key_group_of(k, 128))
            .collect();
        assert_eq!(groups, PINNED_TUPLE);
        // Another max parallelism: the same hash, another modulus.
        assert_eq!(key_group_of(&42u64, 32768), PINNED_42_AT_32768);
    }

    const PINNED_U64: [u32; 4] = [124, 68, 62, 38];
    const PINNED_U32: [u32; 4] = [94, 42, 99, 69];
    const PINNED_I64: [u32; 2] = [104, 37];
    const PINNED_STR: [u32; 4] = [0, 93, 114, 92];
    const PINNED_TUPLE: [u32; 2] = [47, 76];
    const PINNED_42_AT_32768: u32 = 4414;

    #[test]
    fn ranges_match_flinks_assignment() {
        for max in [1u32, 7, 128, 1000] {
            for p in 1..=max.min(9) {
                let mut next = 0;
                for i in 0..p {
                    let range = KeyGroupRange::for_operator(max, p, i);
                    assert_eq!(range.start, next, "ranges are contiguous");
                    for g in range.start..=range.end {
                        assert_eq!(operator_index_for_key_group(max, p, g), i);
                    }
                    next = range.end + 1;
                }
                assert_eq!(next, max, "ranges cover every key group");
            }
        }
    }

    #[test]
    fn parallelism_above_max_is_refused() {
        assert_eq!(
            check_parallelism(4, 5),
            Err(KeyGroupError::ParallelismAboveMax {
                parallelism: 5,
                max_parallelism: 4
            })
        );
        assert!(check_parallelism(0, 1).is_err());
        assert!(check_parallelism(1 << 16, 1).is_err());
        assert!(check_parallelism(128, 128).is_ok());
    }

    #[test]
    fn key_groups_move_whole_to_their_new_owner() {
        let entries: Vec<(u64, u64)> = (0..200).map(|k| (k, k * 10)).collect();
        let snapshot_of = |p: u32, i: u32| {
            let range = KeyGroupRange::for_operator(128, p, i);
            let mine = entries
                .iter()
                .copied()
                .filter(|(k, _)| range.contains(key_group_of(k, 128)));
            KeyGroupedState::new(
                128,
                5 + i64::from(i),
                split_by_key_group(mine, |e| e.0, 128),
            )
            .encode()
            .unwrap()
        };
        let old: Vec<Vec<u8>> = (0..2).map(|i| snapshot_of(2, i)).collect();
        let old_refs: Vec<Option<&[u8]>> = old.iter().map(|b| Some(b.as_slice())).collect();
        let new = redistribute_key_groups(&old_refs, 128, 3).unwrap();
        let mut seen = Vec::new();
        for (i, bytes) in new.iter().enumerate() {
            let snap = KeyGroupedState::<Vec<(u64, u64)>>::decode(bytes.as_ref().unwrap()).unwrap();
            assert_eq!(snap.watermark, 5, "the lowest watermark");
            let range = KeyGroupRange::for_operator(128, 3, i as u32);
            for (group, items) in snap.into_groups() {
                assert!(range.contains(group));
                seen.extend(items);
            }
        }
        seen.sort_unstable();
        assert_eq!(seen, entries);
        assert!(matches!(
            redistribute_key_groups(&old_refs, 64, 3),
            Err(RedistributeError::MaxParallelismChanged {
                expected: 64,
                found: 128
            })
        ));
    }

    #[test]
    fn list_state_splits_evenly_and_union_state_goes_to_everyone() {
        let a = ListState::new(vec![1u32, 2, 3]).encode().unwrap();
        let b = ListState::new(vec![4u32, 5]).encode().unwrap();
        let new = redistribute_operator_state(&[Some(&a), None, Some(&b)], 2).unwrap();
        let items: Vec<Vec<u32>> = new
            .iter()
            .map(|b| ListState::<u32>::decode(b.as_ref().unwrap()).unwrap().items)
            .collect();
        assert_eq!(items, vec![vec![1, 2, 3], vec![4, 5]]);

        let a = UnionState::new(vec!["x"]).encode().unwrap();
        let b = UnionState::new(vec!["y"]).encode().unwrap();
        let new = redistribute_operator_state(&[Some(&a), Some(&b)], 3).unwrap();
        for bytes in &new {
            let snap = UnionState::<String>::decode(bytes.as_ref().unwrap()).unwrap();
            assert_eq!(snap.items, vec!["x", "y"]);
        }
        assert_eq!(state_kind(&a), StateKind::Union);
        assert_eq!(state_kind(b"42"), StateKind::Subtask);
        let list = ListState::new(vec![1u32]).encode().unwrap();
        assert!(matches!(
            redistribute_operator_state(&[Some(&a), Some(&list)], 1),
            Err(RedistributeError::MixedKinds)
        ));
    }
}
