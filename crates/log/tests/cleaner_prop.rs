//! The log cleaner against a model (a map of key → latest offset and value): random keyed
//! appends with tombstones over many segments, clean (with offset maps small enough to fill
//! part-way), read back through the consumer's decoder: every key's latest value at its
//! original offset, offsets ascending, nothing at or past the dirty section's end changed,
//! tombstones gone once their delete horizon passed, and the same after a reopen.

use std::collections::BTreeMap;

use bytes::Bytes;
use proptest::prelude::*;
use streamforge_log::cleaner::{self, OFFSET_MAP_SLOT_BYTES};
use streamforge_log::{Log, LogConfig};
use streamforge_protocol::batch::testing::{BatchSpec, build_batch};
use streamforge_protocol::kafka_protocol::records::RecordBatchDecoder;

const SEGMENT_MS: i64 = 1_000_000;
const DELETE_RETENTION_MS: i64 = 10_000;

fn config() -> LogConfig {
    LogConfig {
        segment_bytes: 1500,
        segment_ms: SEGMENT_MS,
        segment_index_bytes: 4096,
        index_interval_bytes: 256,
        compact: true,
        delete: false,
        delete_retention_ms: DELETE_RETENTION_MS,
        min_cleanable_dirty_ratio: 0.0,
        preallocate_window_bytes: 0,
        ..LogConfig::default()
    }
}

/// (offset, key, value) as a consumer decodes them.
type Record = (i64, Vec<u8>, Option<Vec<u8>>);

fn read_all(log: &Log) -> Vec<Record> {
    let mut out = Vec::new();
    let mut next = log.log_start_offset();
    for _ in 0..10_000 {
        if next >= log.log_end_offset() {
            break;
        }
        let info = log.read(next, 1 << 16, i64::MAX, true).unwrap();
        assert!(!info.slices.is_empty(), "no data at {next}");
        for slice in info.slices {
            let mut bytes: Bytes = slice.clone();
            for set in RecordBatchDecoder::decode_all(&mut bytes).unwrap() {
                for r in set.records {
                    out.push((
                        r.offset,
                        r.key.unwrap().to_vec(),
                        r.value.map(|v| v.to_vec()),
                    ));
                }
            }
            for item in streamforge_protocol::batch::BatchIter::new(&slice) {
                let (_, b) = item.unwrap();
                b.verify_crc().unwrap();
                assert!(b.base_offset() >= next, "batches go forward");
                next = b.last_offset() + 1;
            }
        }
    }
    out
}

/// Append `batches` of (key, value) with timestamps from `now`; returns every record written.
fn append(log: &mut Log, batches: &[Vec<(u8, Option<u8>)>], now: i64) -> Vec<Record> {
    let mut written = Vec::new();
    for b in batches {
        let keys: Vec<Vec<u8>> = b
            .iter()
            .map(|(k, _)| format!("key-{k}").into_bytes())
            .collect();
        let values: Vec<Option<Vec<u8>>> = b
            .iter()
            .map(|(_, v)| {
                v.map(|v| format!("value-{v}-{}", "x".repeat(v as usize % 7)).into_bytes())
            })
            .collect();
        let records: Vec<_> = keys
            .iter()
            .zip(&values)
            .map(|(k, v)| (Some(&k[..]), v.as_deref()))
            .collect();
        let mut bytes = build_batch(
            BatchSpec {
                base_timestamp: now,
                ..BatchSpec::default()
            },
            &records,
        );
        let info = log.append_as_leader(&mut bytes, 0, now).unwrap();
        for (i, (k, v)) in keys.into_iter().zip(values).enumerate() {
            written.push((info.first_offset + i as i64, k, v));
        }
    }
    written
}

/// The latest record per key among `written` below `end`.
fn latest_below(written: &[Record], end: i64) -> BTreeMap<Vec<u8>, Record> {
    let mut m = BTreeMap::new();
    for r in written.iter().filter(|r| r.0 < end) {
        m.insert(r.1.clone(), r.clone());
    }
    m
}

fn check(read: &[Record], written: &[Record], clean_end: i64, tombstones_gone: bool) {
    assert!(read.windows(2).all(|w| w[0].0 < w[1].0), "offsets ascend");
    let by_offset: BTreeMap<i64, &Record> = written.iter().map(|r| (r.0, r)).collect();
    for r in read {
        assert_eq!(by_offset[&r.0], r, "offset {} keeps its record", r.0);
    }
    // At or past the end of the cleaned section: untouched.
    let tail_read: Vec<&Record> = read.iter().filter(|r| r.0 >= clean_end).collect();
    let tail_written: Vec<&Record> = written.iter().filter(|r| r.0 >= clean_end).collect();
    assert_eq!(
        tail_read, tail_written,
        "nothing past the dirty section changes"
    );
    // Below it: exactly the latest record per key (tombstones too, until their horizon).
    let clean_read: Vec<&Record> = read.iter().filter(|r| r.0 < clean_end).collect();
    let mut expected: Vec<Record> = latest_below(written, clean_end)
        .into_values()
        .filter(|r| !(tombstones_gone && r.2.is_none()))
        .collect();
    expected.sort();
    let got: Vec<Record> = clean_read.into_iter().cloned().collect();
    assert_eq!(got, expected);
}

fn batches_strategy() -> impl Strategy<Value = Vec<Vec<(u8, Option<u8>)>>> {
    let record = (0u8..24, prop::option::weighted(0.85, any::<u8>()));
    prop::collection::vec(prop::collection::vec(record, 1..6), 1..120)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, .. ProptestConfig::default() })]

    #[test]
    fn cleaner_keeps_the_latest_value_per_key(
        batches in batches_strategy(),
        more in batches_strategy(),
        map_keys in prop_oneof![Just(4usize), Just(12), Just(4096)],
    ) {
        let dir = tempfile::tempdir().unwrap();
        let now = 1_000_000_000i64;
        let mut log = Log::open(dir.path(), config(), now).unwrap();
        let mut written = append(&mut log, &batches, now);
        // Seal the active segment, then write a little that must stay untouched.
        log.tick(now + 2 * SEGMENT_MS).unwrap();
        written.extend(append(&mut log, &more[..more.len().min(3)], now + 2 * SEGMENT_MS + 1));
        // After every record's timestamp (min.compaction.lag.ms = 0 still needs that).
        const CLEAN_AT: i64 = 1_000_000_000 + 2 * SEGMENT_MS + 100;
        let mut checkpoint = None;
        let map_memory = map_keys * OFFSET_MAP_SLOT_BYTES * 2;
        // Passes with a small map clean up to where it filled; repeat until all is clean.
        for _ in 0..200 {
            let Some(stats) = cleaner::clean_now(&mut log, checkpoint, map_memory, CLEAN_AT, false).unwrap() else {
                break;
            };
            prop_assert!(stats.complete);
            checkpoint = Some(stats.end_offset);
            let read = read_all(&log);
            check(&read, &written, stats.end_offset.min(log.segment_base_offsets().last().copied().unwrap()), false);
        }
        let active = *log.segment_base_offsets().last().unwrap();
        prop_assert_eq!(checkpoint.unwrap_or(active), active, "everything sealed got cleaned");
        prop_assert!(log.verify().is_none());
        // After the delete horizon, a forced pass drops the tombstones it had kept.
        let later = CLEAN_AT + DELETE_RETENTION_MS;
        cleaner::clean_now(&mut log, checkpoint, map_memory, later, true).unwrap();
        check(&read_all(&log), &written, active, true);
        // And the cleaned log reopens to the same records (clean and unclean).
        let before = read_all(&log);
        log.close().unwrap();
        let log = Log::open(dir.path(), config(), later).unwrap();
        prop_assert_eq!(read_all(&log), before.clone());
        drop(log);
        std::fs::remove_file(dir.path().join(".kafka_cleanshutdown")).ok();
        std::fs::remove_file(dir.path().join("recovery-point-offset-checkpoint")).ok();
        let log = Log::open(dir.path(), config(), later).unwrap();
        prop_assert_eq!(read_all(&log), before);
        prop_assert!(log.verify().is_none());
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, .. ProptestConfig::default() })]

    /// A segment with bytes flipped anywhere, recovered by an unclean open (which cuts at the
    /// damage), then cleaned: the cleaner never panics, the result verifies, and every record
    /// a consumer decodes is one that was written, at its offset.
    #[test]
    fn cleaning_any_recovered_log_keeps_it_valid(
        batches in batches_strategy(),
        flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..4),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let now = 1_000_000_000i64;
        let mut log = Log::open(dir.path(), config(), now).unwrap();
        let written = append(&mut log, &batches, now);
        drop(log); // unclean: no marker, no recovery point
        let mut segments: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "log"))
            .collect();
        segments.sort();
        let path = &segments[0];
        let mut bytes = std::fs::read(path).unwrap();
        // A batch's baseOffset (its first 8 bytes) is outside the CRC, in Kafka's format as in
        // ours: a flip there moves the whole batch to another offset undetectably (offsets may
        // have gaps, so no reader can tell). Every other byte is covered (the length by the
        // CRC of the bytes it frames), so flips go there.
        let base_offsets = batch_starts(&bytes);
        for (at, value) in &flips {
            let i = at.index(bytes.len());
            if base_offsets.iter().any(|s| (*s..*s + 8).contains(&i)) {
                continue;
            }
            bytes[i] ^= value | 1;
        }
        std::fs::write(path, &bytes).unwrap();
        let _ = std::fs::remove_file(dir.path().join("recovery-point-offset-checkpoint"));
        let Ok(mut log) = Log::open(dir.path(), config(), now) else {
            return Ok(());
        };
        log.tick(now + 2 * SEGMENT_MS).unwrap();
        let later = now + 2 * SEGMENT_MS + 100;
        let _ = cleaner::clean_now(&mut log, None, 1 << 16, later, false).unwrap();
        prop_assert!(log.verify().is_none());
        let by_offset: BTreeMap<i64, &Record> = written.iter().map(|r| (r.0, r)).collect();
        for r in read_all(&log) {
            prop_assert_eq!(by_offset.get(&r.0).copied(), Some(&r));
        }
    }
}

/// The byte positions where the batches of an undamaged segment file start.
fn batch_starts(bytes: &[u8]) -> Vec<usize> {
    let mut starts = Vec::new();
    let mut pos = 0usize;
    while pos + 12 <= bytes.len() {
        starts.push(pos);
        let len = i32::from_be_bytes(bytes[pos + 8..pos + 12].try_into().unwrap());
        pos += 12 + len.max(0) as usize;
    }
    starts
}
