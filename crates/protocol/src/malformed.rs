//! Batches a producer should never send, built for tests (unit tests here, the broker's
//! real-wire tests) and benchmarks: each has a valid header and CRC, so only record validation
//! ([`crate::validate`]) can tell it apart from a good batch. Also compresses a good batch with
//! any codec, as a client would.

use std::io::Write;

use crate::batch::field::{ATTRIBUTES, CRC, LAST_OFFSET_DELTA, RECORD_COUNT};
use crate::batch::testing::{BatchSpec, build_simple};
use crate::batch::{CRC_START, HEADER_BYTES};
use crate::decompress::{CODEC_GZIP, CODEC_LZ4, CODEC_SNAPPY, CODEC_ZSTD};

const BATCH_LENGTH: usize = 8;

fn put_i32(batch: &mut [u8], at: usize, v: i32) {
    batch[at..at + 4].copy_from_slice(&v.to_be_bytes());
}

/// Recompute `batchLength` and the CRC after an edit.
pub fn reseal(batch: &mut [u8]) {
    let len = (batch.len() - crate::batch::LOG_OVERHEAD_BYTES) as i32;
    put_i32(batch, BATCH_LENGTH, len);
    let crc = crc32c::crc32c(&batch[CRC_START..]);
    batch[CRC..CRC + 4].copy_from_slice(&crc.to_be_bytes());
}

/// Set `recordCount` and `lastOffsetDelta` (and reseal).
pub fn set_counts(batch: &mut [u8], record_count: i32, last_offset_delta: i32) {
    put_i32(batch, RECORD_COUNT, record_count);
    put_i32(batch, LAST_OFFSET_DELTA, last_offset_delta);
    reseal(batch);
}

/// Replace the records section with `records`, set the codec bits to `codec` (and reseal).
pub fn replace_records(batch: &[u8], codec: u8, records: &[u8]) -> Vec<u8> {
    let mut out = batch[..HEADER_BYTES].to_vec();
    out.extend_from_slice(records);
    let attributes = i16::from_be_bytes([out[ATTRIBUTES], out[ATTRIBUTES + 1]]);
    let attributes = (attributes & !crate::batch::COMPRESSION_MASK) | i16::from(codec);
    out[ATTRIBUTES..ATTRIBUTES + 2].copy_from_slice(&attributes.to_be_bytes());
    reseal(&mut out);
    out
}

/// Compress `data` with `codec` as Kafka clients do (gzip, xerial-framed snappy as the Java
/// client writes it, lz4 frame, zstd).
pub fn compress(codec: u8, data: &[u8]) -> Vec<u8> {
    match codec {
        CODEC_GZIP => {
            let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            e.write_all(data).expect("write to a Vec");
            e.finish().expect("write to a Vec")
        }
        CODEC_SNAPPY => {
            let mut out = b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01".to_vec();
            for block in data.chunks(32 << 10) {
                let b = snap::raw::Encoder::new()
                    .compress_vec(block)
                    .expect("snappy block within limits");
                out.extend_from_slice(&(b.len() as u32).to_be_bytes());
                out.extend_from_slice(&b);
            }
            out
        }
        CODEC_LZ4 => {
            let mut e = lz4::EncoderBuilder::new()
                .build(Vec::new())
                .expect("lz4 encoder");
            e.write_all(data).expect("write to a Vec");
            let (out, result) = e.finish();
            result.expect("lz4 finish");
            out
        }
        CODEC_ZSTD => zstd::encode_all(data, 3).expect("zstd to a Vec"),
        _ => data.to_vec(),
    }
}

/// A good batch of `n` records of `value_bytes` each, compressed with `codec`.
pub fn good(codec: u8, n: usize, value_bytes: usize) -> Vec<u8> {
    let plain = build_simple(BatchSpec::default(), n, value_bytes);
    if codec == 0 {
        return plain;
    }
    replace_records(&plain, codec, &compress(codec, &plain[HEADER_BYTES..]))
}

/// Three records, header says two (`lastOffsetDelta` 1): a record is left over.
pub fn count_below_records() -> Vec<u8> {
    let mut b = build_simple(BatchSpec::default(), 3, 8);
    set_counts(&mut b, 2, 1);
    b
}

/// Three records, header says four (`lastOffsetDelta` 3): a record is missing.
pub fn count_above_records() -> Vec<u8> {
    let mut b = build_simple(BatchSpec::default(), 3, 8);
    set_counts(&mut b, 4, 3);
    b
}

/// Three records and `recordCount` 3, but `lastOffsetDelta` 5.
pub fn last_offset_delta_mismatch() -> Vec<u8> {
    let mut b = build_simple(BatchSpec::default(), 3, 8);
    set_counts(&mut b, 3, 5);
    b
}

/// One record claiming to be 2^31−1 (header consistent: `lastOffsetDelta` 2^31−2); accepted,
/// it would move the log end offset by 2^31.
pub fn claims_max_records() -> Vec<u8> {
    let mut b = build_simple(BatchSpec::default(), 1, 8);
    set_counts(&mut b, i32::MAX, i32::MAX - 1);
    b
}

/// Deterministic pseudo-random bytes (xorshift), so tests need no RNG crate.
pub fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// `records` random bytes in place of the records of a 4-record batch, with codec bits `codec`.
pub fn random_records(codec: u8, len: usize, seed: u64) -> Vec<u8> {
    let b = build_simple(BatchSpec::default(), 4, 8);
    replace_records(&b, codec, &noise(len, seed))
}

/// A one-record batch whose gzip records section inflates to `zero_bytes` zeros: gzip members
/// of 1 MiB of zeros each (about 1 KB compressed), concatenated as a multi-member gzip stream,
/// so 1 GiB takes about 1 MB.
pub fn gzip_bomb(zero_bytes: usize) -> Vec<u8> {
    const MEMBER_BYTES: usize = 1 << 20;
    let gzip_best = |data: &[u8]| {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        e.write_all(data).expect("write to a Vec");
        e.finish().expect("write to a Vec")
    };
    let member = gzip_best(&vec![0u8; MEMBER_BYTES]);
    let mut records = Vec::with_capacity(member.len() * zero_bytes.div_ceil(MEMBER_BYTES));
    let mut left = zero_bytes;
    while left >= MEMBER_BYTES {
        records.extend_from_slice(&member);
        left -= MEMBER_BYTES;
    }
    if left > 0 {
        records.extend_from_slice(&gzip_best(&vec![0u8; left]));
    }
    let b = build_simple(BatchSpec::default(), 1, 8);
    replace_records(&b, CODEC_GZIP, &records)
}

/// A one-record batch whose records are one zstd frame of `zero_bytes` zeros: a tiny batch
/// with a huge ratio (zstd packs 4 MiB of zeros in a few hundred bytes).
pub fn zstd_ratio_bomb(zero_bytes: usize) -> Vec<u8> {
    let b = build_simple(BatchSpec::default(), 1, 8);
    replace_records(
        &b,
        CODEC_ZSTD,
        &compress(CODEC_ZSTD, &vec![0u8; zero_bytes]),
    )
}
