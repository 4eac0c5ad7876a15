//! Reading a segment: offset translation through the sparse index, zero-copy reads, lookups by
//! timestamp.

use std::sync::atomic::Ordering;

use bytes::Bytes;
use streamforge_protocol::batch::{RecordBatch, RecordIter};

use super::{BatchPosition, Segment};

impl Segment {
    /// The first batch whose last offset is >= `offset`, or `None` if past the end.
    pub fn translate_offset(&self, offset: i64) -> Option<BatchPosition> {
        let mut position = match self.offset_index.floor(offset - self.base_offset) {
            Some(e) => u64::from(e.value),
            None => 0,
        };
        while position < self.size_bytes {
            let pos = self.header_at(position).ok()?;
            if pos.last_offset >= offset {
                return Some(pos);
            }
            position += pos.size_bytes;
        }
        None
    }

    /// Read whole batches starting at the one containing `offset`: at most `max_bytes` (but one
    /// batch at least when `min_one_message`), only batches starting below `max_offset`.
    /// Returns the slice and the offset after its last batch.
    pub fn read(
        &self,
        offset: i64,
        max_bytes: usize,
        max_offset: i64,
        min_one_message: bool,
    ) -> Option<(Bytes, i64)> {
        let first = self.translate_offset(offset)?;
        let start = first.position;
        let mut end = start;
        let mut next = offset;
        let mut position = start;
        while position < self.size_bytes {
            let Ok(pos) = self.header_at(position) else {
                break;
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
            position = end;
        }
        if end == start {
            return None;
        }
        self.map_shared.store(true, Ordering::Relaxed);
        Some((self.map.slice(start as usize, end as usize), next))
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
