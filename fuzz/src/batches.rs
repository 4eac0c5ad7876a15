//! RecordBatch v2 checks shared by the produce, batch, records and compression targets: the
//! protocol crate's views against the tiered crate's own header parser and kafka-protocol's full
//! decoder (three readers of one layout must agree).

use bytes::Bytes;
use kafka_protocol::records::RecordBatchDecoder;
use streamforge_client::compression::{self, Compression};
use streamforge_protocol::batch::field;
use streamforge_protocol::batch::{
    BatchIter, CRC_START, HEADER_BYTES, RecordBatch, RecordBatchMut, RecordIter, RecordMeta,
};
use streamforge_tiered::batch as tiered;

/// Batches larger than this are not decompressed by the harness (the client's bound is far
/// larger; the fuzzer only needs to reach the codecs, not to allocate 256 MiB).
pub const DECOMPRESS_INPUT_BYTES_MAX: usize = 64 << 10;

/// Walk concatenated batches as the log's validation would see them, checking every batch.
pub fn check_batches(buf: &[u8]) {
    let mut end = 0;
    for item in BatchIter::new(buf) {
        match item {
            Ok((at, batch)) => {
                assert_eq!(at, end, "batches are contiguous");
                end = at + batch.size_bytes();
                check_batch(&buf[at..], batch);
            }
            Err(_) => return,
        }
    }
    assert_eq!(end, buf.len(), "BatchIter stopped early without an error");
}

/// One batch view (`rest` starts at the batch and may run on past it).
pub fn check_batch(rest: &[u8], batch: RecordBatch<'_>) {
    let bytes = batch.as_bytes();
    assert!(bytes.len() >= HEADER_BYTES);
    assert_eq!(bytes.len(), batch.batch_length() as usize + 12);
    // The tiered crate parses the same header: same extent and offsets.
    if let Ok(info) = tiered::parse_header(rest) {
        assert_eq!(info.size_bytes, batch.size_bytes(), "batch sizes disagree");
        assert_eq!(info.base_offset, batch.base_offset());
        assert_eq!(info.last_offset, batch.last_offset());
        assert_eq!(info.max_timestamp_ms, batch.max_timestamp());
    }
    let crc_ok = batch.verify_crc().is_ok();
    assert_eq!(crc_ok, batch.compute_crc() == batch.crc());
    assert_eq!(
        crc_ok,
        tiered::verify(bytes).is_ok(),
        "protocol and tiered disagree on the CRC"
    );
    // Patching the fields the log rewrites keeps the CRC valid (baseOffset and epoch are outside
    // it; LogAppendTime recomputes it).
    let mut copy = bytes.to_vec();
    let mut m = RecordBatchMut::parse(&mut copy).expect("a parsed batch parses mutably");
    m.set_base_offset(batch.base_offset().wrapping_add(1));
    m.set_partition_leader_epoch(3);
    assert_eq!(m.view().verify_crc().is_ok(), crc_ok);
    m.set_log_append_time(1_700_000_000_000);
    m.view()
        .verify_crc()
        .expect("update_crc makes the CRC valid");
    assert!(m.view().is_log_append_time());
    assert_eq!(
        crc32c::crc32c(&copy[CRC_START..]),
        RecordBatch::parse(&copy).unwrap().crc()
    );

    let header_ok = batch.validate_header().is_ok();
    let _ = tiered::first_record_at_or_after(bytes, batch.base_timestamp());
    if !crc_ok || !header_ok {
        return;
    }
    if batch.compression() == 0 {
        check_records(batch);
    } else {
        check_compressed(batch);
    }
}

/// Iterate an uncompressed batch's records and compare with kafka-protocol's decoder.
fn check_records(batch: RecordBatch<'_>) {
    let ours: Result<Vec<RecordMeta>, _> = RecordIter::new(&batch).expect("uncompressed").collect();
    if let Ok(metas) = &ours {
        assert!(metas.len() <= batch.record_count() as usize);
    }
    if !kafka_protocol_can_decode(
        batch.records_bytes(),
        batch.base_offset(),
        batch.base_timestamp(),
    ) {
        return;
    }
    let mut b = Bytes::copy_from_slice(batch.as_bytes());
    let Ok(set) = RecordBatchDecoder::decode(&mut b) else {
        return;
    };
    // When both accept the batch they must have read the same records. (RecordIter is the
    // stricter one: it rejects negative offset deltas, which kafka-protocol lets through.)
    let Ok(metas) = ours else {
        return;
    };
    assert_eq!(metas.len(), set.records.len(), "record counts disagree");
    for (meta, rec) in metas.iter().zip(&set.records) {
        assert_eq!(
            batch.base_offset() + i64::from(meta.offset_delta),
            rec.offset
        );
        let key_len = rec.key.as_ref().map_or(-1, |k| k.len() as i32);
        assert_eq!(meta.key_len, key_len, "key lengths disagree");
    }
}

/// Decompress a compressed batch's records with the client's codecs (what consumers run on
/// every fetched batch) and walk the result as an uncompressed batch.
fn check_compressed(batch: RecordBatch<'_>) {
    let records = batch.records_bytes();
    if records.len() > DECOMPRESS_INPUT_BYTES_MAX {
        return;
    }
    let Ok(codec) = Compression::from_attribute_bits(i16::from(batch.compression())) else {
        return;
    };
    let Ok(plain) = compression::decompress(codec, &Bytes::copy_from_slice(records)) else {
        return;
    };
    let mut rebuilt = batch.as_bytes()[..HEADER_BYTES].to_vec();
    rebuilt.extend_from_slice(&plain);
    let attributes = batch.attributes() & !streamforge_protocol::batch::COMPRESSION_MASK;
    if let Some(plain_batch) = wrap(&mut rebuilt, attributes) {
        let _: Vec<_> = RecordIter::new(&plain_batch)
            .expect("uncompressed")
            .collect();
    }
}

/// Whether kafka-protocol's decoder can take `batch` safely: its records (decompressed with the
/// client's codecs when compressed, within [`DECOMPRESS_INPUT_BYTES_MAX`]) pass
/// [`kafka_protocol_can_decode`].
pub fn kafka_protocol_accepts(batch: &RecordBatch<'_>) -> bool {
    let records = batch.records_bytes();
    let (base_offset, base_timestamp) = (batch.base_offset(), batch.base_timestamp());
    if batch.compression() == 0 {
        return kafka_protocol_can_decode(records, base_offset, base_timestamp);
    }
    if records.len() > DECOMPRESS_INPUT_BYTES_MAX {
        return false;
    }
    let Ok(codec) = Compression::from_attribute_bits(i16::from(batch.compression())) else {
        return true; // kafka-protocol rejects the codec itself
    };
    match compression::decompress(codec, &Bytes::copy_from_slice(records)) {
        Ok(plain) => kafka_protocol_can_decode(&plain, base_offset, base_timestamp),
        Err(_) => false, // not worth the risk (e.g. a snappy header declaring 4 GiB)
    }
}

/// Write `bytes` at header field offset `at`.
fn put(buf: &mut [u8], at: usize, bytes: &[u8]) {
    buf[at..at + bytes.len()].copy_from_slice(bytes);
}

/// Fix up `buf` (a header followed by records) as a valid batch with `attributes`: length,
/// magic and CRC. `None` if the result is too large for a batch.
pub fn wrap(buf: &mut [u8], attributes: i16) -> Option<RecordBatch<'_>> {
    let length = i32::try_from(buf.len().checked_sub(12)?).ok()?;
    put(buf, field::BATCH_LENGTH, &length.to_be_bytes());
    buf[field::MAGIC] = 2;
    put(buf, field::ATTRIBUTES, &attributes.to_be_bytes());
    let crc = crc32c::crc32c(&buf[CRC_START..]);
    put(buf, field::CRC, &crc.to_be_bytes());
    RecordBatch::parse(buf).ok()
}

/// A batch header for `records` with `count` records (offset delta `count - 1`), then the
/// records, made valid by [`wrap`].
pub fn batch_around(records: &[u8], count: i32, attributes: i16) -> Vec<u8> {
    let mut buf = vec![0u8; HEADER_BYTES];
    put(&mut buf, field::LAST_OFFSET_DELTA, &(count - 1).max(0).to_be_bytes());
    put(&mut buf, field::BASE_TIMESTAMP, &1_700_000_000_000i64.to_be_bytes());
    put(&mut buf, field::MAX_TIMESTAMP, &1_700_000_000_000i64.to_be_bytes());
    put(&mut buf, field::PRODUCER_ID, &(-1i64).to_be_bytes());
    put(&mut buf, field::PRODUCER_EPOCH, &(-1i16).to_be_bytes());
    put(&mut buf, field::BASE_SEQUENCE, &(-1i32).to_be_bytes());
    put(&mut buf, field::RECORD_COUNT, &count.to_be_bytes());
    buf.extend_from_slice(records);
    if wrap(&mut buf, attributes).is_none() {
        buf.truncate(HEADER_BYTES);
    }
    buf
}

/// Whether every record's header count in uncompressed `records` fits in its record.
/// kafka-protocol's decoder allocates `IndexMap::with_capacity(header count)` before reading a
/// header, so an absurd count aborts the process (found by fuzz/records; the broker decodes
/// with it in the coordinator's replay and the dashboard's message view). Until those callers
/// validate records first, the harness only hands it batches that pass this check.
pub fn header_counts_fit(records: &[u8]) -> bool {
    kafka_protocol_can_decode(records, 0, 0)
}

/// [`header_counts_fit`], and no record's timestamp or offset overflows `i64` from the batch's
/// `base_timestamp` and `base_offset` (kafka-protocol adds them unchecked: a panic in builds with
/// overflow checks, as every fuzz build; a wrapped value in the broker's release build).
pub fn kafka_protocol_can_decode(records: &[u8], base_offset: i64, base_timestamp: i64) -> bool {
    let mut pos = 0;
    while pos < records.len() {
        let Some(len) = varint32(records, &mut pos) else {
            return false;
        };
        let Some(end) = usize::try_from(len).ok().and_then(|l| pos.checked_add(l)) else {
            return false;
        };
        let Some(record) = records.get(..end) else {
            return false;
        };
        pos += 1; // attributes
        let (Some(ts), Some(od)) = (varlong(record, &mut pos), varint32(record, &mut pos)) else {
            return false; // timestamp delta, offset delta
        };
        if base_timestamp.checked_add(ts).is_none()
            || base_offset.checked_add(i64::from(od)).is_none()
        {
            return false;
        }
        for _ in 0..2 {
            // key, value: length then bytes
            let Some(n) = varint32(record, &mut pos) else {
                return false;
            };
            pos = pos.saturating_add(usize::try_from(n).unwrap_or(0));
        }
        match varint32(record, &mut pos) {
            Some(h) if h >= 0 && (h as u64) <= end.saturating_sub(pos) as u64 => {}
            _ => return false,
        }
        pos = end;
    }
    true
}

/// A zigzag varint read as kafka-protocol does: at most 5 bytes, truncated to 32 bits.
fn varint32(b: &[u8], pos: &mut usize) -> Option<i32> {
    let mut raw = 0u32;
    for i in 0..5 {
        let byte = *b.get(*pos)?;
        *pos += 1;
        raw |= u32::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            break;
        }
    }
    Some(((raw >> 1) as i32) ^ -((raw & 1) as i32))
}

/// A zigzag varlong at `b[*pos..]`.
fn varlong(b: &[u8], pos: &mut usize) -> Option<i64> {
    let mut raw = 0u64;
    for i in 0..10 {
        let byte = *b.get(*pos)?;
        *pos += 1;
        raw |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Some(((raw >> 1) as i64) ^ -((raw & 1) as i64));
        }
    }
    None
}
