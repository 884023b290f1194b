//! The on-disk framing of a directory checkpoint: one state file per task and a manifest.
//!
//! All integers are little-endian. Strings are UTF-8, prefixed by their length.
//!
//! State file (one task's [`TaskSnapshot`]):
//!
//! ```text
//! magic "STKS" | version u16 | entry count u32 | count x (key len u32, key, value len u64, value)
//! ```
//!
//! Manifest (the checkpoint's table of contents, written last):
//!
//! ```text
//! magic "STKM" | version u16 | body len u64 | body | crc32(magic .. body) u32
//! body = id u64 | timestamp i64 | file count u32 |
//!        count x (task name: len u32 + bytes, file name: len u32 + bytes, file len u64, crc32 u32)
//! ```
//!
//! A state file carries no checksum of its own: the manifest holds its length and CRC32, which
//! the storage checks before decoding. The manifest checks itself with its trailing CRC32.
//!
//! Decoding tells a short input ([`FormatError::Truncated`], the signature of an interrupted
//! write) from wrong content ([`FormatError::Corrupted`]).

use streamtask_core::state::TaskSnapshot;

use super::error::Corruption;

/// First bytes of a state file.
const STATE_MAGIC: [u8; 4] = *b"STKS";
/// First bytes of a manifest.
const MANIFEST_MAGIC: [u8; 4] = *b"STKM";
/// The one format version this build reads and writes.
pub(super) const VERSION: u16 = 1;
/// Magic, version and body length of a manifest.
const MANIFEST_HEADER_LEN: usize = 4 + 2 + 8;

/// Why bytes did not decode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum FormatError {
    /// The input ends before the framing does: `needed` bytes were required, `len` exist.
    Truncated { needed: u64, len: u64 },
    /// The input is complete but wrong.
    Corrupted(Corruption),
}

/// One file a manifest lists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct ManifestEntry {
    /// The task whose state the file holds.
    pub(super) task: String,
    /// The file's name inside the checkpoint directory.
    pub(super) file: String,
    /// The file's length in bytes.
    pub(super) len: u64,
    /// CRC32 of the file's bytes.
    pub(super) crc: u32,
}

/// The table of contents of one checkpoint directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Manifest {
    pub(super) id: u64,
    pub(super) timestamp: i64,
    pub(super) files: Vec<ManifestEntry>,
}

/// Encodes one task's snapshot as a state file.
pub(super) fn encode_snapshot(snapshot: &TaskSnapshot) -> Vec<u8> {
    let mut out = Vec::with_capacity(10 + snapshot.size_bytes() + 12 * snapshot.len());
    out.extend_from_slice(&STATE_MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    put_u32(&mut out, len_u32(snapshot.len()));
    for (key, value) in snapshot.iter() {
        put_str(&mut out, key);
        out.extend_from_slice(&(value.len() as u64).to_le_bytes());
        out.extend_from_slice(value);
    }
    out
}

/// Decodes a state file written by [`encode_snapshot`].
pub(super) fn decode_snapshot(bytes: &[u8]) -> Result<TaskSnapshot, FormatError> {
    let mut r = Reader::new(bytes);
    if r.take(4)? != STATE_MAGIC {
        return Err(FormatError::Corrupted(Corruption::BadMagic));
    }
    check_version(r.u16()?)?;
    let count = r.u32()?;
    let mut entries = Vec::new();
    for _ in 0..count {
        let key = r.string()?;
        let len = r.u64()?;
        let value = r.take_u64(len)?.to_vec();
        entries.push((key, value));
    }
    r.finish()?;
    let snapshot: TaskSnapshot = entries.iter().cloned().collect();
    if snapshot.len() != entries.len() {
        return Err(FormatError::Corrupted(Corruption::DuplicateName));
    }
    Ok(snapshot)
}

/// Encodes a manifest, trailing checksum included.
pub(super) fn encode_manifest(manifest: &Manifest) -> Vec<u8> {
    let mut body = Vec::new();
    body.extend_from_slice(&manifest.id.to_le_bytes());
    body.extend_from_slice(&manifest.timestamp.to_le_bytes());
    put_u32(&mut body, len_u32(manifest.files.len()));
    for entry in &manifest.files {
        put_str(&mut body, &entry.task);
        put_str(&mut body, &entry.file);
        body.extend_from_slice(&entry.len.to_le_bytes());
        put_u32(&mut body, entry.crc);
    }
    let mut out = Vec::with_capacity(MANIFEST_HEADER_LEN + body.len() + 4);
    out.extend_from_slice(&MANIFEST_MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.extend_from_slice(&(body.len() as u64).to_le_bytes());
    out.extend_from_slice(&body);
    let crc = crc32fast::hash(&out);
    put_u32(&mut out, crc);
    out
}

/// Decodes a manifest written by [`encode_manifest`], checking its checksum.
pub(super) fn decode_manifest(bytes: &[u8]) -> Result<Manifest, FormatError> {
    let mut r = Reader::new(bytes);
    if r.take(4)? != MANIFEST_MAGIC {
        return Err(FormatError::Corrupted(Corruption::BadMagic));
    }
    check_version(r.u16()?)?;
    let body_len = r.u64()?;
    // The whole length is known up front, so a short manifest is told apart from a wrong one
    // before anything in the body is trusted.
    let needed = (MANIFEST_HEADER_LEN as u64)
        .saturating_add(body_len)
        .saturating_add(4);
    let len = bytes.len() as u64;
    if len < needed {
        return Err(FormatError::Truncated { needed, len });
    }
    if len > needed {
        return Err(FormatError::Corrupted(Corruption::TrailingBytes));
    }
    let (checked, crc) = bytes.split_at(bytes.len() - 4);
    let expected = u32::from_le_bytes(crc.try_into().expect("split at len - 4"));
    let actual = crc32fast::hash(checked);
    if expected != actual {
        return Err(FormatError::Corrupted(Corruption::ChecksumMismatch {
            expected,
            actual,
        }));
    }
    // The checksum matched, so any inconsistency from here on is content, not a short write.
    let mut body = Reader::new(&checked[MANIFEST_HEADER_LEN..]);
    let parsed = (|| {
        let id = body.u64()?;
        let timestamp = body.i64()?;
        let count = body.u32()?;
        let mut files = Vec::new();
        for _ in 0..count {
            files.push(ManifestEntry {
                task: body.string()?,
                file: body.string()?,
                len: body.u64()?,
                crc: body.u32()?,
            });
        }
        body.finish()?;
        Ok(Manifest {
            id,
            timestamp,
            files,
        })
    })();
    parsed.map_err(|e| match e {
        FormatError::Truncated { .. } => FormatError::Corrupted(Corruption::Inconsistent),
        other => other,
    })
}

fn check_version(version: u16) -> Result<(), FormatError> {
    if version == VERSION {
        Ok(())
    } else {
        Err(FormatError::Corrupted(Corruption::UnsupportedVersion(
            version,
        )))
    }
}

fn len_u32(len: usize) -> u32 {
    u32::try_from(len).expect("a checkpoint holds fewer than 2^32 tasks, entries and name bytes")
}

fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_le_bytes());
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    put_u32(out, len_u32(s.len()));
    out.extend_from_slice(s.as_bytes());
}

/// A cursor over bytes whose every read fails with `Truncated` at the end of the input.
struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn new(bytes: &'a [u8]) -> Self {
        Reader { bytes, pos: 0 }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], FormatError> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&end| end <= self.bytes.len());
        match end {
            Some(end) => {
                let out = &self.bytes[self.pos..end];
                self.pos = end;
                Ok(out)
            }
            None => Err(FormatError::Truncated {
                needed: (self.pos as u64).saturating_add(n as u64),
                len: self.bytes.len() as u64,
            }),
        }
    }

    fn take_u64(&mut self, n: u64) -> Result<&'a [u8], FormatError> {
        match usize::try_from(n) {
            Ok(n) => self.take(n),
            Err(_) => Err(FormatError::Truncated {
                needed: (self.pos as u64).saturating_add(n),
                len: self.bytes.len() as u64,
            }),
        }
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], FormatError> {
        Ok(self.take(N)?.try_into().expect("take returns N bytes"))
    }

    fn u16(&mut self) -> Result<u16, FormatError> {
        self.array().map(u16::from_le_bytes)
    }

    fn u32(&mut self) -> Result<u32, FormatError> {
        self.array().map(u32::from_le_bytes)
    }

    fn u64(&mut self) -> Result<u64, FormatError> {
        self.array().map(u64::from_le_bytes)
    }

    fn i64(&mut self) -> Result<i64, FormatError> {
        self.array().map(i64::from_le_bytes)
    }

    fn string(&mut self) -> Result<String, FormatError> {
        let len = self.u32()?;
        let bytes = self.take_u64(u64::from(len))?;
        String::from_utf8(bytes.to_vec())
            .map_err(|_| FormatError::Corrupted(Corruption::InvalidText))
    }

    /// Fails if bytes are left over after the last field.
    fn finish(&self) -> Result<(), FormatError> {
        if self.pos == self.bytes.len() {
            Ok(())
        } else {
            Err(FormatError::Corrupted(Corruption::TrailingBytes))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snapshot() -> TaskSnapshot {
        let mut s = TaskSnapshot::new();
        s.put(TaskSnapshot::SOURCE, b"offset=42".to_vec());
        s.put(TaskSnapshot::operator_key(1), Vec::new());
        s.put("ключ", vec![0, 255, 7]);
        s
    }

    fn manifest() -> Manifest {
        Manifest {
            id: 7,
            timestamp: -3,
            files: vec![
                ManifestEntry {
                    task: "source".into(),
                    file: "task-0.state".into(),
                    len: 10,
                    crc: 0xdead_beef,
                },
                ManifestEntry {
                    task: "sink".into(),
                    file: "task-1.state".into(),
                    len: 0,
                    crc: 0,
                },
            ],
        }
    }

    #[test]
    fn snapshots_round_trip() {
        let s = snapshot();
        assert_eq!(decode_snapshot(&encode_snapshot(&s)).unwrap(), s);
        let empty = TaskSnapshot::new();
        assert_eq!(decode_snapshot(&encode_snapshot(&empty)).unwrap(), empty);
    }

    #[test]
    fn every_proper_prefix_of_a_state_file_is_truncated() {
        let bytes = encode_snapshot(&snapshot());
        for cut in 0..bytes.len() {
            match decode_snapshot(&bytes[..cut]) {
                Err(FormatError::Truncated { needed, len }) => {
                    assert_eq!(len, cut as u64);
                    assert!(needed > len);
                }
                other => panic!("prefix of {cut} bytes decoded to {other:?}"),
            }
        }
    }

    #[test]
    fn state_file_with_wrong_magic_version_or_tail_is_corrupted() {
        let good = encode_snapshot(&snapshot());
        let mut magic = good.clone();
        magic[0] ^= 0xff;
        assert_eq!(
            decode_snapshot(&magic),
            Err(FormatError::Corrupted(Corruption::BadMagic))
        );
        let mut version = good.clone();
        version[4] = 9;
        assert_eq!(
            decode_snapshot(&version),
            Err(FormatError::Corrupted(Corruption::UnsupportedVersion(9)))
        );
        let mut tail = good;
        tail.push(0);
        assert_eq!(
            decode_snapshot(&tail),
            Err(FormatError::Corrupted(Corruption::TrailingBytes))
        );
    }

    #[test]
    fn a_length_running_past_the_end_is_truncated() {
        let mut bytes = encode_snapshot(&snapshot());
        // The first key's length field follows magic, version and count.
        bytes[10..14].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(
            decode_snapshot(&bytes),
            Err(FormatError::Truncated { .. })
        ));
    }

    #[test]
    fn non_utf8_keys_and_duplicate_keys_are_corrupted() {
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&STATE_MAGIC);
        bytes.extend_from_slice(&VERSION.to_le_bytes());
        put_u32(&mut bytes, 2);
        for _ in 0..2 {
            put_str(&mut bytes, "k");
            bytes.extend_from_slice(&0u64.to_le_bytes());
        }
        assert_eq!(
            decode_snapshot(&bytes),
            Err(FormatError::Corrupted(Corruption::DuplicateName))
        );
        // Turn the first key into an invalid UTF-8 byte.
        bytes[14] = 0xff;
        assert_eq!(
            decode_snapshot(&bytes),
            Err(FormatError::Corrupted(Corruption::InvalidText))
        );
    }

    #[test]
    fn manifests_round_trip() {
        let m = manifest();
        assert_eq!(decode_manifest(&encode_manifest(&m)).unwrap(), m);
    }

    #[test]
    fn every_proper_prefix_of_a_manifest_is_truncated() {
        let bytes = encode_manifest(&manifest());
        for cut in 0..bytes.len() {
            assert!(
                matches!(
                    decode_manifest(&bytes[..cut]),
                    Err(FormatError::Truncated { .. })
                ),
                "prefix of {cut} bytes"
            );
        }
    }

    #[test]
    fn a_flipped_byte_in_a_manifest_body_fails_the_checksum() {
        let good = encode_manifest(&manifest());
        for i in MANIFEST_HEADER_LEN..good.len() {
            let mut bad = good.clone();
            bad[i] ^= 0x10;
            assert!(
                matches!(
                    decode_manifest(&bad),
                    Err(FormatError::Corrupted(Corruption::ChecksumMismatch { .. }))
                ),
                "flipped byte {i}"
            );
        }
    }

    #[test]
    fn a_manifest_with_extra_bytes_is_corrupted() {
        let mut bytes = encode_manifest(&manifest());
        bytes.push(1);
        assert_eq!(
            decode_manifest(&bytes),
            Err(FormatError::Corrupted(Corruption::TrailingBytes))
        );
    }
}
