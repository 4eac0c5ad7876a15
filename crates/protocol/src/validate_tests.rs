use proptest::prelude::*;

use super::*;
use crate::batch::testing::{BatchSpec, build_batch};
use crate::batch::{HEADER_BYTES, RecordBatch};
use crate::decompress::{CODEC_GZIP, CODEC_LZ4, CODEC_SNAPPY, CODEC_ZSTD};
use crate::malformed;

const CODECS: [u8; 4] = [CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4, CODEC_ZSTD];

fn check(bytes: &[u8], policy: RecordPolicy) -> Result<RecordsSummary, RecordError> {
    let batch = RecordBatch::parse(bytes).expect("header parses");
    batch
        .verify_crc()
        .expect("CRC is valid: only records are wrong");
    validate_batch(&batch, policy, &mut Vec::new())
}

/// The error, asserting its Kafka code and that it names a record and says why.
fn rejected(bytes: &[u8], code: i16) -> RecordError {
    let e = check(bytes, RecordPolicy::default()).unwrap_err();
    assert_eq!(e.kind.kafka_code(), code, "{e}");
    assert!(e.record_index.is_some(), "{e}: no record index");
    assert!(!e.message.is_empty());
    e
}

#[test]
fn accepts_good_batches_of_every_codec() {
    for codec in [0].into_iter().chain(CODECS) {
        let s = check(&malformed::good(codec, 50, 100), RecordPolicy::default()).unwrap();
        assert_eq!(s.max_timestamp_delta, 49);
        assert!(s.records_bytes > 50 * 100);
    }
}

#[test]
fn accepts_keys_values_headers_and_nulls() {
    let b = build_batch(
        BatchSpec::default(),
        &[
            (Some(b"k"), None),
            (None, Some(b"v")),
            (Some(b""), Some(b"")),
        ],
    );
    check(&b, RecordPolicy::default()).unwrap();
    // A record with two headers (one null value), hand-encoded.
    let rec: &[u8] = &[0, 0, 0, 2, b'k', 0, 4, 2, b'a', 2, b'b', 2, b'c', 1];
    let mut records = vec![rec.len() as u8 * 2];
    records.extend_from_slice(rec);
    let one = malformed::replace_records(&malformed::good(0, 1, 1), 0, &records);
    check(&one, RecordPolicy::default()).unwrap();
}

#[test]
fn rejects_record_count_below_records() {
    let e = rejected(&malformed::count_below_records(), 87);
    assert_eq!(e.record_index, Some(2));
    assert!(e.message.contains("remain after the last record"), "{e}");
}

#[test]
fn rejects_record_count_above_records() {
    let e = rejected(&malformed::count_above_records(), 87);
    assert_eq!(e.record_index, Some(3));
    assert!(
        e.message.contains("declares 4 records but holds only 3"),
        "{e}"
    );
}

#[test]
fn rejects_last_offset_delta_mismatch() {
    let e = rejected(&malformed::last_offset_delta_mismatch(), 87);
    assert_eq!(e.record_index, Some(2));
    assert!(e.message.contains("lastOffsetDelta 5"), "{e}");
}

#[test]
fn rejects_a_record_claiming_i32_max_records() {
    let e = rejected(&malformed::claims_max_records(), 87);
    assert_eq!(e.record_index, Some(1));
    assert!(e.message.contains("declares 2147483647 records"), "{e}");
}

#[test]
fn rejects_random_bytes_as_records() {
    for seed in 1..200 {
        let b = malformed::random_records(0, 64, seed);
        let e = rejected(&b, 87);
        assert_eq!(e.kind, RecordErrorKind::InvalidRecord);
    }
}

#[test]
fn rejects_each_codec_over_garbage() {
    for codec in CODECS {
        for seed in 1..20 {
            let b = malformed::random_records(codec, 200, seed);
            let e = rejected(&b, 2);
            assert_eq!(e.record_index, Some(0), "{e}");
            assert!(e.message.contains(decompress::codec_name(codec)), "{e}");
        }
    }
}

#[test]
fn rejects_well_compressed_garbage_records() {
    // The codec is happy; the records inside are not.
    for codec in CODECS {
        let inner = malformed::noise(300, 7);
        let b = malformed::replace_records(
            &malformed::good(0, 4, 8),
            codec,
            &malformed::compress(codec, &inner),
        );
        rejected(&b, 87);
    }
}

#[test]
fn rejects_a_gzip_bomb() {
    // 96 MiB of zeros in ~100 KB: past MAX_DECOMPRESSED_BATCH_BYTES.
    let b = malformed::gzip_bomb(96 << 20);
    assert!(b.len() < 200_000, "{}", b.len());
    let mut scratch = Vec::new();
    let batch = RecordBatch::parse(&b).unwrap();
    let e = validate_batch(&batch, RecordPolicy::default(), &mut scratch).unwrap_err();
    assert_eq!(e.kind.kafka_code(), 87, "{e}");
    assert_eq!(e.record_index, Some(0));
    assert!(e.message.contains("decompress to more than"), "{e}");
    assert!(scratch.capacity() <= decompress::MAX_DECOMPRESSED_BATCH_BYTES + 1);
}

#[test]
fn rejects_a_small_batch_with_a_huge_ratio() {
    // 9 MiB of zeros: over the always-allowed 8 MiB, and far over 1024 x a few hundred bytes.
    let b = malformed::zstd_ratio_bomb(9 << 20);
    assert!(b.len() < 2000, "{}", b.len());
    let e = rejected(&b, 87);
    assert!(e.message.contains("decompress to more than"), "{e}");
}

#[test]
fn rejects_offset_deltas_that_are_not_consecutive() {
    let mut b = malformed::good(0, 3, 8);
    // Record 1's offset delta (2nd varint after its length and attributes) → 0.
    let rec0_len = (b[HEADER_BYTES] / 2) as usize + 1;
    let at = HEADER_BYTES + rec0_len + 3;
    assert_eq!(b[at], 2, "offset delta 1 zigzag-encoded");
    b[at] = 0;
    malformed::reseal(&mut b);
    let e = rejected(&b, 87);
    assert_eq!(e.record_index, Some(1));
    assert!(e.message.contains("incremental offsets"), "{e}");
}

#[test]
fn compacted_topics_need_keys_even_when_compressed() {
    let policy = RecordPolicy { compacted: true };
    let keyed = build_batch(BatchSpec::default(), &[(Some(b"k"), Some(b"v"))]);
    check(&keyed, policy).unwrap();
    for codec in [0].into_iter().chain(CODECS) {
        let b = malformed::good(codec, 2, 8);
        let e = check(&b, policy).unwrap_err();
        assert_eq!(e.kind.kafka_code(), 87);
        assert_eq!(e.record_index, Some(0));
        assert!(e.message.contains("without key"), "{e}");
    }
}

#[test]
fn rejects_negative_and_zero_counts_as_a_batch() {
    for count in [0, -1, i32::MIN] {
        let mut b = malformed::good(0, 1, 8);
        malformed::set_counts(&mut b, count, 0);
        let e = check(&b, RecordPolicy::default()).unwrap_err();
        assert_eq!(e.kind.kafka_code(), 87);
        assert_eq!(e.record_index, None);
    }
}

#[test]
fn varints_decode_like_kafka() {
    for v in [0i32, 1, -1, 63, -64, 64, 300, i32::MAX, i32::MIN] {
        let mut out = Vec::new();
        let mut z = ((v << 1) ^ (v >> 31)) as u32;
        while z >= 0x80 {
            out.push((z as u8 & 0x7f) | 0x80);
            z >>= 7;
        }
        out.push(z as u8);
        let mut pos = 0;
        assert_eq!(varint(&out, &mut pos), Ok(v));
        assert_eq!(pos, out.len());
    }
    let mut pos = 0;
    assert_eq!(varint(&[0x80; 6], &mut pos), Err(Fault::VarintTooLong));
    let mut pos = 0;
    assert_eq!(varlong(&[0xff; 11], &mut pos), Err(Fault::VarintTooLong));
    let mut pos = 0;
    assert_eq!(varint(&[0x80], &mut pos), Err(Fault::Truncated));
}

fn validate_any(bytes: &[u8], compacted: bool) {
    if let Ok(batch) = RecordBatch::parse(bytes) {
        let _ = validate_batch(&batch, RecordPolicy { compacted }, &mut Vec::new());
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn never_panics_on_random_bytes(
        records in proptest::collection::vec(any::<u8>(), 0..400),
        codec in 0u8..8, count in any::<i32>(), delta in any::<i32>(), compacted: bool,
    ) {
        let mut b = malformed::replace_records(&malformed::good(0, 1, 1), codec, &records);
        malformed::set_counts(&mut b, count, delta);
        validate_any(&b, compacted);
    }

    #[test]
    fn never_panics_on_mutated_good_batches(
        codec in 0u8..5, n in 1usize..20, value_bytes in 0usize..100,
        flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
        cut in any::<prop::sample::Index>(), compacted: bool,
    ) {
        let good = malformed::good(codec, n, value_bytes);
        let mut records = good[HEADER_BYTES..].to_vec();
        for (at, byte) in flips {
            let i = at.index(records.len());
            records[i] ^= byte;
        }
        let keep = cut.index(records.len() + 1);
        let b = malformed::replace_records(&good, codec, &records[..keep.max(records.len() / 2)]);
        validate_any(&b, compacted);
    }

    #[test]
    fn good_batches_always_pass(codec in 0u8..5, n in 1usize..50, value_bytes in 0usize..300) {
        let b = malformed::good(codec, n, value_bytes);
        prop_assert!(check(&b, RecordPolicy::default()).is_ok());
    }
}
