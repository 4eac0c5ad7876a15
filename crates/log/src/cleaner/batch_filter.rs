//! Rewriting one batch: keep the records the offset map says are the latest for their key,
//! drop tombstones past their delete horizon, and write the batch back with its original base
//! offset, `lastOffsetDelta`, producer fields and compression codec (Kafka's
//! `MemoryRecords.filterTo`), with a fresh CRC-32C.

use std::collections::HashMap;

use bytes::BytesMut;
use streamforge_protocol::batch::{self, BatchError, CRC_START, DELETE_HORIZON, RecordBatch};
use streamforge_protocol::decompress::{self, CODEC_NONE};
use streamforge_protocol::kafka_protocol::compression::{Compressor, Gzip, Lz4, Snappy, Zstd};

use super::offset_map::OffsetMap;
use super::records::{Records, put_with_timestamp_delta};
use super::txn_filter::TxnFilter;
use crate::txn_index::AbortedTxn;

/// What decides which records a batch keeps.
pub struct RetainRules<'a> {
    pub map: &'a OffsetMap,
    pub now_ms: i64,
    pub delete_retention_ms: i64,
    /// Producer id → last offset of its last batch (the log's producer state): that batch is
    /// kept, empty if need be, so the producer's sequence survives (Kafka's rule).
    pub producer_last_offsets: &'a HashMap<i64, i64>,
}

/// What cleaning one batch did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct BatchOutcome {
    pub records_kept: u64,
    pub records_removed: u64,
    /// The delete horizon of a kept batch holding tombstones (or of a kept marker).
    pub delete_horizon_ms: Option<i64>,
    /// A kept ABORT marker whose transaction still has data: its `.txnindex` entry stays.
    pub aborted_entry: Option<AbortedTxn>,
}

/// Reusable buffers (one set per cleaner thread).
#[derive(Default)]
pub struct Scratch {
    decompressed: Vec<u8>,
    kept: Vec<u8>,
    kept_ranges: Vec<(usize, usize)>,
}

#[derive(Debug, thiserror::Error)]
pub enum FilterError {
    #[error("malformed batch at offset {offset}: {source}")]
    Malformed { offset: i64, source: BatchError },
    #[error("batch at offset {offset}: {source}")]
    Decompress {
        offset: i64,
        source: decompress::DecompressError,
    },
    #[error("batch at offset {offset}: cannot recompress: {reason}")]
    Compress { offset: i64, reason: String },
}

/// Append the cleaned form of `batch` to `out` (nothing when no record, and no producer state,
/// needs it).
pub fn filter_batch(
    batch: &RecordBatch<'_>,
    rules: &RetainRules<'_>,
    txn: &mut TxnFilter,
    scratch: &mut Scratch,
    out: &mut Vec<u8>,
) -> Result<BatchOutcome, FilterError> {
    if batch.is_control() {
        return super::txn_filter::filter_marker(batch, rules, txn, out);
    }
    if txn.on_data_batch(batch) {
        // An aborted transaction's records: none is ever read (Kafka's cleaner drops them).
        keep_empty_if_producers_last(batch, rules, out)?;
        return Ok(BatchOutcome {
            records_removed: batch.record_count().max(0) as u64,
            ..BatchOutcome::default()
        });
    }
    let Scratch {
        decompressed,
        kept,
        kept_ranges,
    } = scratch;
    let records = records_of(batch, decompressed)?;
    let selected = select(batch, records, rules, kept, kept_ranges)?;
    let mut outcome = selected.outcome;
    let has_horizon = batch.attributes() & DELETE_HORIZON != 0;
    let new_horizon = selected.tombstones_kept && !has_horizon;
    if outcome.records_removed == 0 && !new_horizon {
        out.extend_from_slice(batch.as_bytes());
        outcome.delete_horizon_ms =
            (selected.tombstones_kept && has_horizon).then(|| batch.base_timestamp());
        return Ok(outcome);
    }
    if outcome.records_kept == 0 {
        keep_empty_if_producers_last(batch, rules, out)?;
        return Ok(outcome);
    }
    let (base_timestamp, attributes) = if new_horizon {
        let horizon = rules.now_ms.saturating_add(rules.delete_retention_ms);
        *kept = rebase(batch, kept, kept_ranges, horizon)?;
        (horizon, batch.attributes() | DELETE_HORIZON)
    } else {
        (batch.base_timestamp(), batch.attributes())
    };
    outcome.delete_horizon_ms = selected.tombstones_kept.then_some(base_timestamp);
    let max_timestamp = if batch.is_log_append_time() {
        batch.max_timestamp()
    } else {
        selected.max_timestamp
    };
    let count = outcome.records_kept as i32;
    write_batch(
        batch,
        kept,
        count,
        base_timestamp,
        max_timestamp,
        attributes,
        out,
    )?;
    Ok(outcome)
}

/// An emptied batch stays (without records) when it is its producer's last: the producer's
/// sequence and epoch survive a restart (Kafka's rule).
fn keep_empty_if_producers_last(
    batch: &RecordBatch<'_>,
    rules: &RetainRules<'_>,
    out: &mut Vec<u8>,
) -> Result<(), FilterError> {
    let last_of_producer = batch.producer_id() >= 0
        && rules.producer_last_offsets.get(&batch.producer_id()) == Some(&batch.last_offset());
    if last_of_producer {
        let (ts, max_ts) = (batch.base_timestamp(), batch.max_timestamp());
        write_batch(batch, &[], 0, ts, max_ts, batch.attributes(), out)?;
    }
    Ok(())
}

/// Which records of a batch stay.
struct Selection {
    outcome: BatchOutcome,
    tombstones_kept: bool,
    /// Largest timestamp of a kept record.
    max_timestamp: i64,
}

/// Copy the records that stay into `kept` as they are (their byte ranges in `ranges`): the
/// latest of their key, and not a tombstone past its batch's delete horizon.
fn select(
    batch: &RecordBatch<'_>,
    records: &[u8],
    rules: &RetainRules<'_>,
    kept: &mut Vec<u8>,
    ranges: &mut Vec<(usize, usize)>,
) -> Result<Selection, FilterError> {
    let offset = batch.base_offset();
    let horizon_passed =
        batch.attributes() & DELETE_HORIZON != 0 && rules.now_ms >= batch.base_timestamp();
    let mut selection = Selection {
        outcome: BatchOutcome::default(),
        tombstones_kept: false,
        max_timestamp: -1,
    };
    kept.clear();
    ranges.clear();
    for r in Records::new(records, batch.record_count()) {
        let r = r.map_err(|source| FilterError::Malformed { offset, source })?;
        let record_offset = offset + i64::from(r.offset_delta);
        let keep = match r.key {
            // Kafka discards keyless records from a compacted log.
            None => false,
            Some(key) => {
                let latest = rules.map.get(key).is_none_or(|o| record_offset >= o);
                latest && !(r.null_value && horizon_passed)
            }
        };
        if !keep {
            selection.outcome.records_removed += 1;
            continue;
        }
        selection.outcome.records_kept += 1;
        selection.tombstones_kept |= r.null_value;
        let timestamp = batch.base_timestamp().saturating_add(r.timestamp_delta);
        selection.max_timestamp = selection.max_timestamp.max(timestamp);
        let at = kept.len();
        kept.extend_from_slice(r.encoded);
        ranges.push((at, kept.len()));
    }
    Ok(selection)
}

/// The kept records re-encoded against a base timestamp of `horizon`: the batch's base
/// timestamp now holds the delete horizon (KIP-534), and each record keeps its timestamp.
pub(super) fn rebase(
    batch: &RecordBatch<'_>,
    kept: &[u8],
    ranges: &[(usize, usize)],
    horizon: i64,
) -> Result<Vec<u8>, FilterError> {
    let mut rebased = Vec::with_capacity(kept.len() + ranges.len() * 4);
    for (from, to) in ranges {
        let r = Records::new(&kept[*from..*to], 1)
            .next()
            .expect("one kept record")
            .map_err(|source| FilterError::Malformed {
                offset: batch.base_offset(),
                source,
            })?;
        let timestamp = batch.base_timestamp().saturating_add(r.timestamp_delta);
        put_with_timestamp_delta(&mut rebased, &r, timestamp.saturating_sub(horizon));
    }
    Ok(rebased)
}

/// The records section of `batch`, decompressed into `buf` when compressed.
fn records_of<'a>(batch: &RecordBatch<'a>, buf: &'a mut Vec<u8>) -> Result<&'a [u8], FilterError> {
    let codec = batch.compression();
    if codec == CODEC_NONE {
        return Ok(batch.records_bytes());
    }
    let input = batch.records_bytes();
    decompress::decompress_into(
        codec,
        input,
        decompress::output_limit_bytes(input.len()),
        buf,
    )
    .map_err(|source| FilterError::Decompress {
        offset: batch.base_offset(),
        source,
    })?;
    Ok(&buf[..])
}

macro_rules! compress_with {
    ($codec:ty, $out:ident, $data:ident) => {
        <$codec as Compressor<BytesMut>>::compress(&mut $out, |tmp: &mut BytesMut| {
            tmp.extend_from_slice($data);
            Ok(())
        })
    };
}

/// `records` compressed with the batch's codec (Kafka recompresses a cleaned batch with it).
fn compress(codec: u8, records: &[u8], offset: i64) -> Result<BytesMut, FilterError> {
    let mut out = BytesMut::with_capacity(records.len() / 2 + 64);
    let result = match codec {
        decompress::CODEC_GZIP => compress_with!(Gzip, out, records),
        decompress::CODEC_SNAPPY => compress_with!(Snappy, out, records),
        decompress::CODEC_LZ4 => compress_with!(Lz4, out, records),
        decompress::CODEC_ZSTD => compress_with!(Zstd, out, records),
        _ => {
            out.extend_from_slice(records);
            Ok(())
        }
    };
    result.map_err(|e| FilterError::Compress {
        offset,
        reason: e.to_string(),
    })?;
    Ok(out)
}

/// Write a batch with `original`'s base offset, leader epoch, `lastOffsetDelta` and producer
/// fields around `records` (uncompressed), compressing them with `original`'s codec.
pub(super) fn write_batch(
    original: &RecordBatch<'_>,
    records: &[u8],
    count: i32,
    base_timestamp: i64,
    max_timestamp: i64,
    attributes: i16,
    out: &mut Vec<u8>,
) -> Result<(), FilterError> {
    let codec = original.compression();
    let compressed;
    let body: &[u8] = if codec == CODEC_NONE || count == 0 {
        records
    } else {
        compressed = compress(codec, records, original.base_offset())?;
        &compressed
    };
    let start = out.len();
    out.extend_from_slice(&original.base_offset().to_be_bytes());
    let batch_length = (batch::HEADER_BYTES - batch::LOG_OVERHEAD_BYTES + body.len()) as i32;
    out.extend_from_slice(&batch_length.to_be_bytes());
    out.extend_from_slice(&original.partition_leader_epoch().to_be_bytes());
    out.push(original.magic() as u8);
    out.extend_from_slice(&[0; 4]); // CRC, below
    out.extend_from_slice(&attributes.to_be_bytes());
    out.extend_from_slice(&original.last_offset_delta().to_be_bytes());
    out.extend_from_slice(&base_timestamp.to_be_bytes());
    out.extend_from_slice(&max_timestamp.to_be_bytes());
    out.extend_from_slice(&original.producer_id().to_be_bytes());
    out.extend_from_slice(&original.producer_epoch().to_be_bytes());
    out.extend_from_slice(&original.base_sequence().to_be_bytes());
    out.extend_from_slice(&count.to_be_bytes());
    debug_assert_eq!(out.len() - start, batch::HEADER_BYTES);
    out.extend_from_slice(body);
    let crc = crc32c::crc32c(&out[start + CRC_START..]);
    out[start + CRC_START - 4..start + CRC_START].copy_from_slice(&crc.to_be_bytes());
    // Check what was written before it reaches a file (assert after write).
    let written = RecordBatch::parse(&out[start..]).expect("a cleaned batch parses");
    assert_eq!(written.base_offset(), original.base_offset());
    assert_eq!(written.last_offset(), original.last_offset());
    debug_assert!(written.verify_crc().is_ok());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use streamforge_protocol::batch::testing::{BatchSpec, build_batch};
    use streamforge_protocol::kafka_protocol::records::RecordBatchDecoder;

    /// `plain` with its records compressed by `codec`.
    fn compressed(plain: &[u8], codec: u8) -> Vec<u8> {
        let v = RecordBatch::parse(plain).unwrap();
        let body = compress(codec, v.records_bytes(), 0).unwrap();
        let mut out = plain[..batch::HEADER_BYTES].to_vec();
        out.extend_from_slice(&body);
        let len = (out.len() - batch::LOG_OVERHEAD_BYTES) as i32;
        out[8..12].copy_from_slice(&len.to_be_bytes());
        out[21..23].copy_from_slice(&(v.attributes() | i16::from(codec)).to_be_bytes());
        let crc = crc32c::crc32c(&out[CRC_START..]);
        out[17..21].copy_from_slice(&crc.to_be_bytes());
        out
    }

    fn decode(bytes: &[u8]) -> Vec<(i64, Vec<u8>, Option<Vec<u8>>)> {
        let mut b = Bytes::copy_from_slice(bytes);
        RecordBatchDecoder::decode_all(&mut b)
            .unwrap()
            .into_iter()
            .flat_map(|s| s.records)
            .map(|r| {
                (
                    r.offset,
                    r.key.unwrap().to_vec(),
                    r.value.map(|v| v.to_vec()),
                )
            })
            .collect()
    }

    #[test]
    fn a_compressed_batch_keeps_its_codec_offsets_and_timestamps() {
        for codec in [1u8, 2, 3, 4] {
            let spec = BatchSpec {
                base_offset: 100,
                base_timestamp: 5_000,
                ..BatchSpec::default()
            };
            let plain = build_batch(
                spec,
                &[
                    (Some(b"a"), Some(b"1")),
                    (Some(b"b"), None),
                    (Some(b"a"), Some(b"2")),
                ],
            );
            let batch = compressed(&plain, codec);
            let mut map = OffsetMap::with_memory(1 << 12);
            map.put(b"a", 102);
            map.put(b"b", 101);
            let none = HashMap::new();
            let rules = RetainRules {
                map: &map,
                now_ms: 10_000,
                delete_retention_ms: 1_000,
                producer_last_offsets: &none,
            };
            let mut out = Vec::new();
            let view = RecordBatch::parse(&batch).unwrap();
            let done = filter_batch(
                &view,
                &rules,
                &mut TxnFilter::default(),
                &mut Scratch::default(),
                &mut out,
            )
            .unwrap();
            assert_eq!((done.records_kept, done.records_removed), (2, 1));
            assert_eq!(done.delete_horizon_ms, Some(11_000));
            let cleaned = RecordBatch::parse(&out).unwrap();
            cleaned.verify_crc().unwrap();
            assert_eq!(cleaned.compression(), codec);
            assert_eq!((cleaned.base_offset(), cleaned.last_offset()), (100, 102));
            assert_eq!(cleaned.base_timestamp(), 11_000, "the delete horizon");
            assert_ne!(cleaned.attributes() & DELETE_HORIZON, 0);
            crate::stored_batch::validate_stored_header(&cleaned).unwrap();
            assert_eq!(
                decode(&out),
                vec![
                    (101, b"b".to_vec(), None),
                    (102, b"a".to_vec(), Some(b"2".to_vec()))
                ]
            );
            let mut b = Bytes::copy_from_slice(&out);
            let set = RecordBatchDecoder::decode_all(&mut b).unwrap().remove(0);
            let stamps: Vec<i64> = set.records.iter().map(|r| r.timestamp).collect();
            assert_eq!(
                stamps,
                vec![5_001, 5_002],
                "record timestamps survive the rebase"
            );
            // Past the horizon the tombstone goes.
            let later = RetainRules {
                now_ms: 11_000,
                ..rules
            };
            let mut again = Vec::new();
            let view = RecordBatch::parse(&out).unwrap();
            filter_batch(
                &view,
                &later,
                &mut TxnFilter::default(),
                &mut Scratch::default(),
                &mut again,
            )
            .unwrap();
            assert_eq!(
                decode(&again),
                vec![(102, b"a".to_vec(), Some(b"2".to_vec()))]
            );
        }
    }

    #[test]
    fn an_emptied_batch_stays_only_when_it_is_its_producers_last() {
        let spec = BatchSpec {
            base_offset: 10,
            producer_id: 7,
            producer_epoch: 0,
            base_sequence: 40,
            ..BatchSpec::default()
        };
        let batch = build_batch(spec, &[(Some(b"a"), Some(b"1")), (Some(b"a"), Some(b"2"))]);
        let mut map = OffsetMap::with_memory(1 << 12);
        map.put(b"a", 50);
        for (last, kept) in [(11i64, true), (60, false)] {
            let producers = HashMap::from([(7i64, last)]);
            let rules = RetainRules {
                map: &map,
                now_ms: 0,
                delete_retention_ms: 0,
                producer_last_offsets: &producers,
            };
            let mut out = Vec::new();
            let view = RecordBatch::parse(&batch).unwrap();
            filter_batch(
                &view,
                &rules,
                &mut TxnFilter::default(),
                &mut Scratch::default(),
                &mut out,
            )
            .unwrap();
            assert_eq!(!out.is_empty(), kept);
            if kept {
                let empty = RecordBatch::parse(&out).unwrap();
                empty.verify_crc().unwrap();
                assert_eq!(empty.record_count(), 0);
                assert_eq!((empty.base_offset(), empty.last_offset()), (10, 11));
                assert_eq!((empty.producer_id(), empty.base_sequence()), (7, 40));
                crate::stored_batch::validate_stored_header(&empty).unwrap();
                assert!(decode(&out).is_empty());
            }
        }
    }

    proptest::proptest! {
        /// Any records section behind a valid header (any codec bits, any count): the filter
        /// and the key pass return a result, never panic.
        #[test]
        fn damaged_records_are_errors_never_panics(
            body in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300),
            count in -2i32..40,
            codec in 0u8..5,
            horizon in proptest::prelude::any::<bool>(),
        ) {
            let plain = build_batch(BatchSpec::default(), &[(Some(b"k"), Some(b"v"))]);
            let mut b = plain[..batch::HEADER_BYTES].to_vec();
            b.extend_from_slice(&body);
            let len = (b.len() - batch::LOG_OVERHEAD_BYTES) as i32;
            b[8..12].copy_from_slice(&len.to_be_bytes());
            let attributes = i16::from(codec) | if horizon { DELETE_HORIZON } else { 0 };
            b[21..23].copy_from_slice(&attributes.to_be_bytes());
            b[57..61].copy_from_slice(&count.to_be_bytes());
            let crc = crc32c::crc32c(&b[CRC_START..]);
            b[17..21].copy_from_slice(&crc.to_be_bytes());
            let Ok(view) = RecordBatch::parse(&b) else { return Ok(()) };
            let mut map = OffsetMap::with_memory(1 << 12);
            map.put(b"k", 5);
            let none = HashMap::new();
            let rules = RetainRules { map: &map, now_ms: 1, delete_retention_ms: 1, producer_last_offsets: &none };
            let _ = filter_batch(&view, &rules, &mut TxnFilter::default(), &mut Scratch::default(), &mut Vec::new());
        }
    }
}
