//! Header checks for batches already in the log.
//!
//! A producer's batch holds one record per offset (`recordCount == lastOffsetDelta + 1`), and
//! `append` insists on it. A batch the log cleaner rewrote keeps its base offset and
//! `lastOffsetDelta` but holds only the records it kept, possibly none (the last batch of an
//! idempotent producer is kept empty to remember its sequence, as Kafka does). Reads, recovery
//! and the scrub therefore accept `recordCount <= lastOffsetDelta + 1`.

use streamforge_protocol::batch::{BatchError, RecordBatch};

/// Header consistency of a stored batch (see the module comment). Does not read the records.
pub fn validate_stored_header(batch: &RecordBatch<'_>) -> Result<(), BatchError> {
    let count = batch.record_count();
    let delta = batch.last_offset_delta();
    if count < 0 {
        return Err(BatchError::InvalidHeader("negative record count"));
    }
    if delta < 0 {
        return Err(BatchError::InvalidHeader("negative lastOffsetDelta"));
    }
    if i64::from(count) > i64::from(delta) + 1 {
        return Err(BatchError::InvalidHeader(
            "record count exceeds lastOffsetDelta + 1",
        ));
    }
    // An uncompressed batch holds at least one byte per record (each record's length varint).
    if batch.compression() == 0 && (count as usize) > batch.records_bytes().len() {
        return Err(BatchError::InvalidHeader("record count exceeds batch size"));
    }
    if batch.compression() > 4 {
        return Err(BatchError::InvalidHeader("unknown compression codec"));
    }
    Ok(())
}
