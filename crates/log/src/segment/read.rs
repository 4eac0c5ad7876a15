//! Reading a segment: offset translation through the sparse index, zero-copy reads, lookups by
//! timestamp.

use std::sync::atomic::Ordering;

use bytes::Bytes;
use streamforge_protocol::batch::{RecordBatch, RecordIter};

use super::{BadBatch, BatchPosition, Segment};

impl Segment {
    /// The first batch whose last offset is >= `offset`, or `None` if past the end (or if a
    /// header on the way cannot be parsed; reads use [`Segment::locate`], which says so).
    pub fn translate_offset(&self, offset: i64) -> Option<BatchPosition> {
        self.locate(offset).ok().flatten()
    }

    /// The first batch whose last offset is >= `offset`, `Ok(None)` if past the end, or the
    /// damaged batch met on the way (a header that does not parse, a length running past the
    /// end, offsets that go backwards): below the segment's end every byte is a whole batch.
    pub fn locate(&self, offset: i64) -> Result<Option<BatchPosition>, BadBatch> {
        let mut position = 0;
        let mut expected = self.base_offset;
        if let Some(e) = self.offset_index.floor(offset - self.base_offset) {
            // An entry is (relative last offset of the batch at `value`, `value`).
            let pos = self.checked_header_at(u64::from(e.value), self.base_offset)?;
            if pos.last_offset != self.base_offset + e.key {
                return Err(BadBatch {
                    position: pos.position,
                    offset: self.base_offset + e.key,
                    error: format!(
                        "offset index says the batch here ends at {}, the batch says {}",
                        self.base_offset + e.key,
                        pos.last_offset
                    ),
                });
            }
            if pos.last_offset >= offset {
                return Ok(Some(pos));
            }
            position = pos.position + pos.size_bytes;
            expected = pos.last_offset + 1;
        }
        while position < self.size_bytes {
            let pos = self.checked_header_at(position, expected)?;
            if pos.last_offset >= offset {
                return Ok(Some(pos));
            }
            position += pos.size_bytes;
            expected = pos.last_offset + 1;
        }
        Ok(None)
    }

    /// The header at `position`, which must hold a batch starting at or after `expected`
    /// (offsets only grow inside a segment), with consistent header fields.
    fn checked_header_at(&self, position: u64, expected: i64) -> Result<BatchPosition, BadBatch> {
        let bad = |error: String| BadBatch {
            position,
            offset: expected,
            error,
        };
        let pos = self.header_at(position).map_err(|e| bad(e.to_string()))?;
        if pos.base_offset < expected || pos.last_offset < pos.base_offset {
            return Err(bad(format!(
                "batch offsets {}..={} do not follow {}",
                pos.base_offset,
                pos.last_offset,
                expected - 1
            )));
        }
        RecordBatch::parse(self.batch_bytes(&pos))
            .and_then(|v| crate::stored_batch::validate_stored_header(&v))
            .map_err(|e| bad(e.to_string()))?;
        Ok(pos)
    }

    /// Read whole batches starting at the one containing `offset`: at most `max_bytes` (but one
    /// batch at least when `min_one_message`), only batches starting below `max_offset`.
    /// Returns the slice and the offset after its last batch; that offset is below
    /// [`Segment::next_offset`] when the budget or `max_offset` stopped the read inside this
    /// segment (the caller must not go on to the next segment then). `Ok(None)`: no batch
    /// starting at or after `offset` fits. A damaged batch is an error, unless whole batches
    /// before it were taken: those are returned and the next read (starting at the damage)
    /// reports it.
    pub fn read(
        &self,
        offset: i64,
        max_bytes: usize,
        max_offset: i64,
        min_one_message: bool,
    ) -> Result<Option<(Bytes, i64)>, BadBatch> {
        let Some(first) = self.locate(offset)? else {
            return Ok(None);
        };
        let start = first.position;
        let mut end = start;
        let mut next = offset;
        let mut last_taken: Option<BatchPosition> = None;
        let mut position = start;
        let mut expected = first.base_offset;
        while position < self.size_bytes {
            let pos = match self.checked_header_at(position, expected) {
                Ok(pos) => pos,
                Err(bad) => {
                    (end, next) = self.trust_before_damage(start, last_taken, bad)?;
                    break;
                }
            };
            if pos.base_offset >= max_offset {
                break;
            }
            let taken = (end - start) as usize;
            if taken + pos.size_bytes as usize > max_bytes && !(min_one_message && taken == 0) {
                break;
            }
            end = position + pos.size_bytes;
            next = pos.last_offset + 1;
            expected = next;
            last_taken = Some(pos);
            position = end;
        }
        if end == start {
            return Ok(None);
        }
        self.map_shared.store(true, Ordering::Relaxed);
        Ok(Some((self.map.slice(start as usize, end as usize), next)))
    }

    /// A read that started at `start` met `bad` after taking batches up to `last_taken`. The
    /// damage may be in the last taken batch's own length field (which put the next header in
    /// the wrong place), so that batch is only kept when its CRC holds. Returns where the
    /// trusted batches end and the offset after them, or the error when nothing before the
    /// damage can be trusted (never an empty success).
    fn trust_before_damage(
        &self,
        start: u64,
        last_taken: Option<BatchPosition>,
        bad: BadBatch,
    ) -> Result<(u64, i64), BadBatch> {
        let Some(last) = last_taken else {
            return Err(bad);
        };
        let crc_ok =
            RecordBatch::parse(self.batch_bytes(&last)).is_ok_and(|v| v.verify_crc().is_ok());
        if crc_ok {
            return Ok((last.position + last.size_bytes, last.last_offset + 1));
        }
        if last.position == start {
            return Err(BadBatch {
                position: last.position,
                offset: last.base_offset,
                error: format!("CRC mismatch, and after this batch: {}", bad.error),
            });
        }
        Ok((last.position, last.base_offset))
    }

    /// First record at or after `min_offset` whose timestamp is >= `timestamp_ms`:
    /// `(offset, timestamp)`.
    pub fn find_by_timestamp(&self, timestamp_ms: i64, min_offset: i64) -> Option<(i64, i64)> {
        // The time index only picks where to start: every record before its entry's offset has a
        // timestamp <= the entry's (the max so far), so none of them can be a better answer.
        let start_offset = match self.time_index.floor(timestamp_ms) {
            Some(e) => (self.base_offset + i64::from(e.value)).max(min_offset),
            None => min_offset.max(self.base_offset),
        };
        let mut pos = self.translate_offset(start_offset)?;
        loop {
            if pos.max_timestamp >= timestamp_ms
                && let Some(found) = self.record_at_or_after(&pos, timestamp_ms, min_offset)
            {
                return Some(found);
            }
            let next = pos.position + pos.size_bytes;
            if next >= self.size_bytes {
                return None;
            }
            pos = self.header_at(next).ok()?;
        }
    }

    /// Within the batch at `pos`: the first record with offset >= `min_offset` and timestamp >=
    /// `timestamp_ms`. Compressed batches and LogAppendTime batches answer at batch level.
    fn record_at_or_after(
        &self,
        pos: &BatchPosition,
        timestamp_ms: i64,
        min_offset: i64,
    ) -> Option<(i64, i64)> {
        let view = RecordBatch::parse(self.batch_bytes(pos)).ok()?;
        if view.is_log_append_time() || view.compression() != 0 {
            return Some((view.base_offset().max(min_offset), view.max_timestamp()));
        }
        let records = RecordIter::new(&view).ok()?;
        for record in records {
            let record = record.ok()?;
            let offset = view.base_offset() + i64::from(record.offset_delta);
            let ts = view.base_timestamp().saturating_add(record.timestamp_delta);
            if offset >= min_offset && ts >= timestamp_ms {
                return Some((offset, ts));
            }
        }
        None
    }

    /// The exact record offset carrying this segment's max timestamp (ListOffsets -3).
    pub fn max_timestamp_record(&self) -> Option<(i64, i64)> {
        if self.max_timestamp < 0 {
            return None;
        }
        let pos = self.translate_offset(self.offset_of_max_timestamp)?;
        self.record_at_or_after(&pos, self.max_timestamp, pos.base_offset)
            .or(Some((self.offset_of_max_timestamp, self.max_timestamp)))
    }

    /// Call `f` for every batch from the one containing `offset` to the end (header view;
    /// producer-state replay).
    /// Every written byte of the segment, as one zero-copy slice (marks the mapping shared, so
    /// a truncation copies instead of cutting in place).
    pub fn all_bytes(&self) -> Bytes {
        self.map_shared.store(true, Ordering::Relaxed);
        self.map.slice(0, self.size_bytes as usize)
    }

    pub fn for_each_batch_from(&self, offset: i64, mut f: impl FnMut(&RecordBatch<'_>)) {
        let Some(first) = self.translate_offset(offset) else {
            return;
        };
        let mut position = first.position;
        while position < self.size_bytes {
            let Ok(pos) = self.header_at(position) else {
                return;
            };
            if let Ok(view) = RecordBatch::parse(self.batch_bytes(&pos)) {
                f(&view);
            }
            position += pos.size_bytes;
        }
    }
}
