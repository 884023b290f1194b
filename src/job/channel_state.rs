//! The job's side of unaligned checkpoints: the encodings of the record types that cross
//! between tasks, and the input gates that store and restore channel state with them.
//!
//! A record type gets its encoding where the job API already asks for serde (a source's
//! output, an async function's input) or where the user registers it
//! ([`StreamEnvironment::register_channel_type`](super::StreamEnvironment::register_channel_type)).
//! A gate gets the codec of its input's type when there is one: it then takes unaligned
//! barriers early. A job whose checkpoints are not aligned refuses to start a task whose input
//! type has none ([`JobError::ChannelStateType`]), as does a restore of channel state.

use std::any::{Any, TypeId};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use serde::Serialize;
use serde::de::DeserializeOwned;
use streamtask_core::sync::Mutex;
use streamtask_core::{Alignment, StreamElement, state::TaskSnapshot, task::TaskConfig};
use streamtask_runtime::channel::{ChannelCodec, ChannelState};

use super::JobError;

/// The channel-state encodings of a job's record types.
#[derive(Clone, Default)]
pub(crate) struct Codecs(Arc<Mutex<HashMap<TypeId, Arc<dyn Any + Send + Sync>>>>);

impl Codecs {
    /// Registers `T`'s encoding (the task snapshot's own); again is the same as once.
    pub(crate) fn register<T: Serialize + DeserializeOwned + 'static>(&self) {
        self.0
            .lock()
            .entry(TypeId::of::<T>())
            .or_insert_with(|| Arc::new(ChannelCodec::<T>::serde()));
    }

    /// `T`'s encoding, if registered.
    pub(crate) fn get<T: 'static>(&self) -> Option<ChannelCodec<T>> {
        let codecs = self.0.lock();
        codecs
            .get(&TypeId::of::<T>())
            .and_then(|codec| codec.downcast_ref::<ChannelCodec<T>>())
            .cloned()
    }
}

/// The codec a gate of task `config.name` reading `T` gets, and the channel state (flat
/// channel index to encoded elements) its restored snapshot holds.
///
/// # Errors
///
/// [`JobError::ChannelStateType`] when the job's checkpoints are not aligned, or the snapshot
/// holds channel state, and `T` has no codec; [`JobError::ChannelState`] when the channel
/// state is damaged.
pub(crate) fn gate_codec<T: 'static>(
    codecs: &Codecs,
    alignment: Alignment,
    config: &TaskConfig,
) -> Result<(Option<ChannelCodec<T>>, Option<ChannelState>), JobError> {
    let codec = codecs.get::<T>();
    let state = restored(config)?;
    if codec.is_none() && (alignment != Alignment::Aligned || state.is_some()) {
        return Err(JobError::ChannelStateType {
            task: config.name.clone(),
            type_name: std::any::type_name::<T>(),
        });
    }
    Ok((codec, state))
}

/// The channel state in the snapshot `config` restores, if any.
fn restored(config: &TaskConfig) -> Result<Option<ChannelState>, JobError> {
    let Some(bytes) = config
        .restore
        .as_ref()
        .and_then(|snapshot| snapshot.get(TaskSnapshot::CHANNEL_STATE))
    else {
        return Ok(None);
    };
    ChannelState::decode(bytes)
        .map(Some)
        .map_err(|source| JobError::ChannelState {
            task: config.name.clone(),
            source,
        })
}

/// The elements of `state`'s channels `range` (flat indices), decoded with `codec`, keyed by
/// their index within the range.
pub(crate) fn decode_range<T>(
    state: &ChannelState,
    codec: &ChannelCodec<T>,
    range: std::ops::Range<usize>,
    task: &str,
) -> Result<BTreeMap<usize, Vec<StreamElement<T>>>, JobError> {
    let decoded = state
        .decode_elements(codec)
        .map_err(|source| JobError::ChannelState {
            task: task.to_string(),
            source,
        })?;
    Ok(decoded
        .into_iter()
        .filter(|(channel, _)| range.contains(channel))
        .map(|(channel, elements)| (channel - range.start, elements))
        .collect())
}
