//! The remote offset/time index: a sparse list built while a segment is uploaded and stored
//! next to it, so a reader turns an offset or a timestamp into a byte position with one small
//! GET and then fetches only the chunks it needs (ranged GETs).
//!
//! Format (big endian): `b"SFRI"`, version u16, entry count u32, entries, CRC-32C of all
//! preceding bytes. Entry (20 bytes): batch base offset i64, byte position u32, and the
//! largest batch max timestamp strictly before this position i64 (non-decreasing, so it can
//! be binary searched for timestamps although record timestamps themselves are not ordered).

use bytes::Bytes;

use crate::batch::BatchInfo;
use crate::error::{Result, TieredError};

const MAGIC: &[u8; 4] = b"SFRI";
const VERSION: u16 = 1;
const HEADER_BYTES: usize = 10;
const ENTRY_BYTES: usize = 20;
/// An index with more entries than this is rejected as corrupt (bounds memory).
pub const ENTRIES_MAX: usize = 4 << 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexEntry {
    pub base_offset: i64,
    pub position: u32,
    pub max_timestamp_before_ms: i64,
}

/// Builds the index while batches stream past.
#[derive(Debug)]
pub struct RemoteIndexBuilder {
    interval_bytes: u64,
    bytes_since_entry: u64,
    max_timestamp_ms: i64,
    entries: Vec<IndexEntry>,
}

impl RemoteIndexBuilder {
    pub fn new(interval_bytes: u64) -> Self {
        RemoteIndexBuilder {
            interval_bytes: interval_bytes.max(1),
            bytes_since_entry: 0,
            max_timestamp_ms: i64::MIN,
            entries: Vec::new(),
        }
    }

    /// Record the batch that starts at byte `position`.
    pub fn add(&mut self, batch: &BatchInfo, position: u64) {
        if self.entries.is_empty() || self.bytes_since_entry >= self.interval_bytes {
            self.entries.push(IndexEntry {
                base_offset: batch.base_offset,
                position: position as u32,
                max_timestamp_before_ms: self.max_timestamp_ms,
            });
            self.bytes_since_entry = 0;
        }
        self.bytes_since_entry += batch.size_bytes as u64;
        self.max_timestamp_ms = self.max_timestamp_ms.max(batch.max_timestamp_ms);
    }

    pub fn finish(self) -> RemoteIndex {
        RemoteIndex {
            entries: self.entries,
        }
    }
}

/// A decoded remote index.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RemoteIndex {
    entries: Vec<IndexEntry>,
}

impl RemoteIndex {
    pub fn entries(&self) -> &[IndexEntry] {
        &self.entries
    }

    /// Memory held, for the cache's byte accounting.
    pub fn size_bytes(&self) -> usize {
        self.entries.len() * std::mem::size_of::<IndexEntry>() + 64
    }

    /// The position of the last indexed batch starting at or below `offset` (0 if none).
    /// Scanning forward from there reaches the batch containing `offset`.
    pub fn position_for_offset(&self, offset: i64) -> u64 {
        let i = self.entries.partition_point(|e| e.base_offset <= offset);
        if i == 0 {
            0
        } else {
            u64::from(self.entries[i - 1].position)
        }
    }

    /// A position from which scanning forward finds the first batch whose max timestamp is
    /// `>= timestamp_ms`: the last entry before which every batch is older than the target.
    pub fn position_for_timestamp(&self, timestamp_ms: i64) -> u64 {
        let i = self
            .entries
            .partition_point(|e| e.max_timestamp_before_ms < timestamp_ms);
        if i == 0 {
            0
        } else {
            u64::from(self.entries[i - 1].position)
        }
    }

    pub fn encode(&self) -> Bytes {
        let mut out = Vec::with_capacity(HEADER_BYTES + self.entries.len() * ENTRY_BYTES + 4);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&VERSION.to_be_bytes());
        out.extend_from_slice(&(self.entries.len() as u32).to_be_bytes());
        for e in &self.entries {
            out.extend_from_slice(&e.base_offset.to_be_bytes());
            out.extend_from_slice(&e.position.to_be_bytes());
            out.extend_from_slice(&e.max_timestamp_before_ms.to_be_bytes());
        }
        let crc = crc32c::crc32c(&out);
        out.extend_from_slice(&crc.to_be_bytes());
        Bytes::from(out)
    }

    pub fn decode(key: &str, b: &[u8]) -> Result<Self> {
        let bad = |reason: String| TieredError::BadMetadata {
            key: key.to_string(),
            reason,
        };
        if b.len() < HEADER_BYTES + 4 || &b[..4] != MAGIC {
            return Err(bad("not a remote index".into()));
        }
        let (body, crc) = b.split_at(b.len() - 4);
        let stored = u32::from_be_bytes([crc[0], crc[1], crc[2], crc[3]]);
        if crc32c::crc32c(body) != stored {
            return Err(bad("crc mismatch".into()));
        }
        let version = u16::from_be_bytes([b[4], b[5]]);
        if version != VERSION {
            return Err(bad(format!("unsupported version {version}")));
        }
        let count = u32::from_be_bytes([b[6], b[7], b[8], b[9]]) as usize;
        if count > ENTRIES_MAX || body.len() != HEADER_BYTES + count * ENTRY_BYTES {
            return Err(bad(format!("bad entry count {count}")));
        }
        let mut entries = Vec::with_capacity(count);
        for e in body[HEADER_BYTES..].chunks_exact(ENTRY_BYTES) {
            let mut o = [0u8; 8];
            o.copy_from_slice(&e[..8]);
            let mut t = [0u8; 8];
            t.copy_from_slice(&e[12..20]);
            entries.push(IndexEntry {
                base_offset: i64::from_be_bytes(o),
                position: u32::from_be_bytes([e[8], e[9], e[10], e[11]]),
                max_timestamp_before_ms: i64::from_be_bytes(t),
            });
        }
        Ok(RemoteIndex { entries })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(base: i64, ts: i64, size: usize) -> BatchInfo {
        BatchInfo {
            base_offset: base,
            last_offset: base + 9,
            max_timestamp_ms: ts,
            size_bytes: size,
        }
    }

    #[test]
    fn sparse_entries_and_lookups() {
        let mut b = RemoteIndexBuilder::new(250);
        // 10 batches of 100 bytes, offsets 0,10,..,90; timestamps not monotonic.
        let ts = [5, 3, 8, 7, 20, 1, 30, 30, 2, 40];
        for (i, t) in ts.iter().enumerate() {
            b.add(&info(i as i64 * 10, *t, 100), i as u64 * 100);
        }
        let idx = b.finish();
        let pos: Vec<u32> = idx.entries().iter().map(|e| e.position).collect();
        assert_eq!(pos, vec![0, 300, 600, 900]);
        assert_eq!(idx.position_for_offset(0), 0);
        assert_eq!(idx.position_for_offset(29), 0);
        assert_eq!(idx.position_for_offset(30), 300);
        assert_eq!(idx.position_for_offset(1000), 900);
        // max before: [MIN, 8, 20, 30]
        assert_eq!(idx.position_for_timestamp(8), 0);
        assert_eq!(idx.position_for_timestamp(9), 300);
        assert_eq!(idx.position_for_timestamp(25), 600);
        assert_eq!(idx.position_for_timestamp(31), 900);
        let back = RemoteIndex::decode("k", &idx.encode()).unwrap();
        assert_eq!(back, idx);
    }

    #[test]
    fn corrupt_index_is_rejected() {
        let mut b = RemoteIndexBuilder::new(1);
        b.add(&info(0, 1, 10), 0);
        let mut bytes = b.finish().encode().to_vec();
        bytes[12] ^= 1;
        assert!(RemoteIndex::decode("k", &bytes).is_err());
        assert!(RemoteIndex::decode("k", b"SFRI").is_err());
        assert!(RemoteIndex::decode("k", &[]).is_err());
    }
}
