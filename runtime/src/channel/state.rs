//! Channel state: the elements an unaligned checkpoint overtook in a task's input channels,
//! stored with the task's snapshot and put back in front of each channel on restore; its codec
//! and its format on disk.
//!
//! The format is on [`ChannelState`].

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use serde::Serialize;
use serde::de::DeserializeOwned;
use streamtask_core::StreamElement;

#[cfg(doc)]
use streamtask_core::state::TaskSnapshot;

const MAGIC: &[u8; 4] = b"STCS";
const VERSION: u8 = 1;

/// Encodes and decodes the elements of one edge for its channel state.
pub struct ChannelCodec<T> {
    encode: Arc<EncodeFn<T>>,
    decode: Arc<DecodeFn<T>>,
}

type EncodeFn<T> = dyn Fn(&StreamElement<T>) -> Result<Vec<u8>, String> + Send + Sync;
type DecodeFn<T> = dyn Fn(&[u8]) -> Result<StreamElement<T>, String> + Send + Sync;

impl<T: Serialize + DeserializeOwned + 'static> ChannelCodec<T> {
    /// The codec of the task snapshot's own encoding ([`streamtask_core::state::encode`]).
    pub fn serde() -> Self {
        ChannelCodec {
            encode: Arc::new(|e| streamtask_core::state::encode(e).map_err(|e| e.to_string())),
            decode: Arc::new(|b| streamtask_core::state::decode(b).map_err(|e| e.to_string())),
        }
    }
}

impl<T> ChannelCodec<T> {
    /// Encodes one element.
    ///
    /// # Errors
    ///
    /// The codec's message when the element cannot be encoded.
    pub fn encode(&self, element: &StreamElement<T>) -> Result<Vec<u8>, String> {
        (self.encode)(element)
    }

    /// Decodes one element.
    ///
    /// # Errors
    ///
    /// The codec's message when the bytes are not an element of this edge.
    pub fn decode(&self, bytes: &[u8]) -> Result<StreamElement<T>, String> {
        (self.decode)(bytes)
    }
}

impl<T> Clone for ChannelCodec<T> {
    fn clone(&self) -> Self {
        ChannelCodec {
            encode: Arc::clone(&self.encode),
            decode: Arc::clone(&self.decode),
        }
    }
}

impl<T> fmt::Debug for ChannelCodec<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ChannelCodec").finish_non_exhaustive()
    }
}

/// The encoded elements of one checkpoint, per input channel of a task (flat channel index:
/// a two-input task's input 1 channels first).
///
/// # Format
///
/// One entry of the task's snapshot ([`TaskSnapshot::CHANNEL_STATE`]), little-endian:
///
/// | field | bytes |
/// |---|---|
/// | magic `STCS` | 4 |
/// | format version (1) | 1 |
/// | channels that hold elements | 4 |
/// | per channel: its index in the gate, its element count, then per element its length and its bytes | 4 + 4 + (4 + n) each |
/// | CRC-32 of everything before it | 4 |
///
/// Elements are encoded by the edge's [`ChannelCodec`]; a channel's elements are in the order
/// they were sent. A damaged entry is refused ([`ChannelStateError`]), never half read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChannelState {
    channels: BTreeMap<usize, Vec<Vec<u8>>>,
    bytes: usize,
}

/// A channel state entry could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ChannelStateError {
    /// The entry does not start with the channel-state magic, or ends early.
    #[error(
        "the checkpoint's channel state is not readable ({0}); restore from another checkpoint \
         or a savepoint"
    )]
    Malformed(&'static str),
    /// Written by a newer format.
    #[error(
        "the checkpoint's channel state has format version {0}, this build reads version 1; \
         restore it with the build that wrote it, or from a savepoint (savepoints hold no \
         channel state)"
    )]
    Version(u8),
    /// The checksum does not match: the entry was damaged on disk.
    #[error(
        "the checkpoint's channel state is damaged (CRC-32 {actual:#010x}, expected \
         {expected:#010x}); restore from another checkpoint or a savepoint"
    )]
    Checksum {
        /// The CRC-32 stored with the entry.
        expected: u32,
        /// The CRC-32 of the bytes read.
        actual: u32,
    },
    /// An element could not be decoded by the edge's codec.
    #[error(
        "an element of input channel {channel}'s state could not be decoded ({message}); the \
         checkpoint was taken by a job whose input type differs: restore it with that job"
    )]
    Element {
        /// The channel whose element failed.
        channel: usize,
        /// The codec's message.
        message: String,
    },
}

impl ChannelState {
    /// No elements.
    pub fn new() -> Self {
        ChannelState::default()
    }

    /// Adds one encoded element at the end of `channel`'s.
    pub fn push(&mut self, channel: usize, element: Vec<u8>) {
        self.bytes += element.len();
        self.channels.entry(channel).or_default().push(element);
    }

    /// Takes back the last element added to `channel` (a record the task read and put back:
    /// it is stored again when read again).
    pub fn pop(&mut self, channel: usize) -> Option<Vec<u8>> {
        let elements = self.channels.get_mut(&channel)?;
        let element = elements.pop()?;
        if elements.is_empty() {
            self.channels.remove(&channel);
        }
        self.bytes -= element.len();
        Some(element)
    }

    /// Elements over all channels.
    pub fn elements(&self) -> usize {
        self.channels.values().map(Vec::len).sum()
    }

    /// Encoded bytes of the elements (without the format's framing).
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Whether no channel holds an element.
    pub fn is_empty(&self) -> bool {
        self.channels.is_empty()
    }

    /// The encoded elements of `channel`, oldest first.
    pub fn channel(&self, channel: usize) -> &[Vec<u8>] {
        self.channels.get(&channel).map_or(&[], Vec::as_slice)
    }

    /// The channels that hold elements, in order.
    pub fn channel_indices(&self) -> impl Iterator<Item = usize> + '_ {
        self.channels.keys().copied()
    }

    /// The entry's bytes (see the format above).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(13 + self.bytes + 8 * self.channels.len());
        out.extend_from_slice(MAGIC);
        out.push(VERSION);
        put_u32(&mut out, self.channels.len());
        for (&channel, elements) in &self.channels {
            put_u32(&mut out, channel);
            put_u32(&mut out, elements.len());
            for element in elements {
                put_u32(&mut out, element.len());
                out.extend_from_slice(element);
            }
        }
        let crc = crc32fast::hash(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    /// Reads an entry written by [`encode`](Self::encode).
    ///
    /// # Errors
    ///
    /// [`ChannelStateError`] when the entry is malformed, of another version or damaged.
    pub fn decode(bytes: &[u8]) -> Result<Self, ChannelStateError> {
        if bytes.len() < MAGIC.len() + 1 + 4 + 4 || &bytes[..4] != MAGIC {
            return Err(ChannelStateError::Malformed("no channel-state header"));
        }
        let (body, crc) = bytes.split_at(bytes.len() - 4);
        let expected = u32::from_le_bytes(crc.try_into().expect("four bytes"));
        let actual = crc32fast::hash(body);
        if expected != actual {
            return Err(ChannelStateError::Checksum { expected, actual });
        }
        if body[4] != VERSION {
            return Err(ChannelStateError::Version(body[4]));
        }
        let mut reader = Reader { bytes: &body[5..] };
        let mut state = ChannelState::new();
        for _ in 0..reader.u32()? {
            let channel = reader.u32()?;
            for _ in 0..reader.u32()? {
                let len = reader.u32()?;
                let element = reader.take(len)?;
                state.push(channel, element.to_vec());
            }
        }
        if !reader.bytes.is_empty() {
            return Err(ChannelStateError::Malformed("bytes after the last channel"));
        }
        Ok(state)
    }

    /// Decodes every channel's elements with `codec`, oldest first per channel.
    ///
    /// # Errors
    ///
    /// [`ChannelStateError::Element`] when an element is not of the edge's type.
    pub fn decode_elements<T>(
        &self,
        codec: &ChannelCodec<T>,
    ) -> Result<BTreeMap<usize, Vec<StreamElement<T>>>, ChannelStateError> {
        self.channels
            .iter()
            .map(|(&channel, elements)| {
                let decoded = elements
                    .iter()
                    .map(|bytes| {
                        codec
                            .decode(bytes)
                            .map_err(|message| ChannelStateError::Element { channel, message })
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                Ok((channel, decoded))
            })
            .collect()
    }
}

fn put_u32(out: &mut Vec<u8>, value: usize) {
    let value = u32::try_from(value).expect("channel state counts and lengths fit in 32 bits");
    out.extend_from_slice(&value.to_le_bytes());
}

struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, len: usize) -> Result<&'a [u8], ChannelStateError> {
        if self.bytes.len() < len {
            return Err(ChannelStateError::Malformed("the entry ends early"));
        }
        let (head, rest) = self.bytes.split_at(len);
        self.bytes = rest;
        Ok(head)
    }

    fn u32(&mut self) -> Result<usize, ChannelStateError> {
        let bytes = self.take(4)?;
        Ok(u32::from_le_bytes(bytes.try_into().expect("four bytes")) as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use streamtask_core::{StreamRecord, Watermark};

    #[test]
    fn round_trips_and_refuses_damage() {
        let codec = ChannelCodec::<String>::serde();
        let mut state = ChannelState::new();
        state.push(
            2,
            codec
                .encode(&StreamElement::Record(StreamRecord::new("a".to_string())))
                .unwrap(),
        );
        state.push(
            0,
            codec
                .encode(&StreamElement::Watermark(Watermark(5)))
                .unwrap(),
        );
        state.push(
            2,
            codec
                .encode(&StreamElement::Record(StreamRecord::new("b".to_string())))
                .unwrap(),
        );
        let bytes = state.encode();
        let read = ChannelState::decode(&bytes).unwrap();
        assert_eq!(read, state);
        assert_eq!(read.elements(), 3);
        let decoded = read.decode_elements(&codec).unwrap();
        assert_eq!(
            decoded[&2],
            vec![
                StreamElement::Record(StreamRecord::new("a".to_string())),
                StreamElement::Record(StreamRecord::new("b".to_string()))
            ]
        );

        let mut damaged = bytes.clone();
        damaged[12] ^= 1;
        assert!(matches!(
            ChannelState::decode(&damaged),
            Err(ChannelStateError::Checksum { .. })
        ));
        assert!(matches!(
            ChannelState::decode(&bytes[..bytes.len() - 5]),
            Err(ChannelStateError::Checksum { .. } | ChannelStateError::Malformed(_))
        ));
        assert!(matches!(
            ChannelState::decode(b"nope"),
            Err(ChannelStateError::Malformed(_))
        ));
        let wrong = ChannelCodec::<u64>::serde();
        assert!(matches!(
            read.decode_elements(&wrong),
            Err(ChannelStateError::Element { channel: 2, .. })
        ));
    }
}
