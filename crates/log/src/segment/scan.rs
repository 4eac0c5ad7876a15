//! Walking a segment's batches at load and in recovery: index rebuild, CRC verification.

use streamforge_protocol::batch::RecordBatch;

use super::{BadBatch, ScanOutcome, Segment};

impl Segment {
    /// Walk the batches from the last offset-index entry to the end (no CRC), deriving
    /// `next_offset`, max timestamp and the rolling timestamp. Returns the first structurally bad
    /// batch, if any.
    pub fn load_tail(&mut self) -> Option<BadBatch> {
        // With an index entry, the walk starts at the indexed batch, whose *last* offset is the
        // entry's offset. Without one (a segment smaller than `index.interval.bytes`) it starts
        // at byte 0 with the segment's base offset, which the first batch's *base* offset must
        // not precede (the general rule below), whatever its last offset.
        let last_entry = self.offset_index.last();
        let (mut position, mut expected) = match last_entry {
            Some(e) => (u64::from(e.value), self.base_offset + e.key),
            None => (0, self.base_offset),
        };
        if let Some(t) = self.time_index.last() {
            self.max_timestamp = t.key;
            self.offset_of_max_timestamp = self.base_offset + i64::from(t.value);
        }
        if self.size_bytes > 0 {
            match self.header_at(0) {
                Ok(first) if first.max_timestamp >= 0 => {
                    self.rolling_base_timestamp = Some(first.max_timestamp)
                }
                _ => {}
            }
        }
        let mut first = last_entry.is_some();
        let mut since_entry = 0;
        while position < self.size_bytes {
            let pos = match self.header_at(position) {
                Ok(p) => p,
                Err(e) => {
                    return Some(BadBatch {
                        position,
                        offset: expected,
                        error: e.to_string(),
                    });
                }
            };
            if first {
                // The indexed batch's last offset is the entry's offset.
                if pos.last_offset != expected {
                    return Some(BadBatch {
                        position,
                        offset: expected,
                        error: format!(
                            "offset index entry says {expected}, batch ends at {}",
                            pos.last_offset
                        ),
                    });
                }
                first = false;
            } else if pos.base_offset < expected {
                return Some(BadBatch {
                    position,
                    offset: expected,
                    error: format!("batch offset {} goes backwards", pos.base_offset),
                });
            }
            if pos.last_offset - self.base_offset > super::SEGMENT_RELATIVE_OFFSET_MAX {
                return Some(BadBatch {
                    position,
                    offset: expected,
                    error: format!(
                        "batch offset {} is past what segment {} can index",
                        pos.last_offset, self.base_offset
                    ),
                });
            }
            if pos.max_timestamp > self.max_timestamp {
                self.max_timestamp = pos.max_timestamp;
                self.offset_of_max_timestamp = pos.last_offset;
            }
            expected = pos.last_offset + 1;
            self.next_offset = expected;
            position += pos.size_bytes;
            since_entry += pos.size_bytes;
        }
        self.bytes_since_index_entry = since_entry;
        None
    }

    /// Recovery scan: walk every batch from the start, rebuilding both indexes; verify the CRC of
    /// each batch whose last offset is >= `verify_from_offset`. Stops at the first bad batch
    /// (which the caller truncates or reports).
    pub fn scan(&mut self, verify_from_offset: i64) -> ScanOutcome {
        self.offset_index.clear();
        self.time_index.clear();
        self.bytes_since_index_entry = 0;
        self.next_offset = self.base_offset;
        self.max_timestamp = -1;
        self.offset_of_max_timestamp = -1;
        self.rolling_base_timestamp = None;
        let mut position = 0u64;
        let mut valid_batches = 0u64;
        let mut checked_bytes = 0u64;
        // Only the CRC-checked part is read in full: prefault it once reached (below it, only
        // batch headers are read, one page each).
        let mut populated = false;
        while position < self.size_bytes {
            let bad = |error: String| BadBatch {
                position,
                offset: self.next_offset,
                error,
            };
            let pos = match self.header_at(position) {
                Ok(p) => p,
                Err(e) => {
                    return ScanOutcome {
                        valid_batches,
                        checked_bytes,
                        bad: Some(bad(e.to_string())),
                    };
                }
            };
            if pos.base_offset < self.next_offset
                || pos.last_offset < pos.base_offset
                || pos.last_offset - self.base_offset > super::SEGMENT_RELATIVE_OFFSET_MAX
            {
                return ScanOutcome {
                    valid_batches,
                    checked_bytes,
                    bad: Some(bad(format!(
                        "batch offsets {}..={} do not follow {}",
                        pos.base_offset, pos.last_offset, self.next_offset
                    ))),
                };
            }
            if pos.last_offset >= verify_from_offset {
                if !populated {
                    self.map
                        .populate(position as usize, self.size_bytes as usize);
                    populated = true;
                }
                let checked = RecordBatch::parse(self.batch_bytes(&pos)).and_then(|v| {
                    v.verify_crc()
                        .and_then(|_| crate::stored_batch::validate_stored_header(&v))
                });
                if let Err(e) = checked {
                    return ScanOutcome {
                        valid_batches,
                        checked_bytes,
                        bad: Some(bad(e.to_string())),
                    };
                }
                checked_bytes += pos.size_bytes;
            }
            if let Err(e) =
                self.index_batch(position, pos.last_offset, pos.max_timestamp, pos.size_bytes)
            {
                // The index is sparse: a missing entry only makes lookups walk further.
                tracing::warn!(segment = self.base_offset, error = %e, "index entry not written while rebuilding");
            }
            position += pos.size_bytes;
            valid_batches += 1;
        }
        ScanOutcome {
            valid_batches,
            checked_bytes,
            bad: None,
        }
    }

    /// Verify every batch's CRC without changing anything. Returns the first bad batch.
    pub fn verify(&self) -> Option<BadBatch> {
        let mut position = 0;
        let mut expected = self.base_offset;
        while position < self.size_bytes {
            let checked = self.header_at(position).and_then(|pos| {
                let v = RecordBatch::parse(self.batch_bytes(&pos))?;
                v.verify_crc()?;
                crate::stored_batch::validate_stored_header(&v)?;
                Ok(pos)
            });
            match checked {
                Ok(pos) => {
                    expected = pos.last_offset + 1;
                    position += pos.size_bytes;
                }
                Err(e) => {
                    return Some(BadBatch {
                        position,
                        offset: expected,
                        error: e.to_string(),
                    });
                }
            }
        }
        None
    }
}
