//! `__consumer_offsets` batches as the group coordinator replays them at start-up: kafka-protocol's
//! batch decoder (every codec), then the key/value decoders (offset commits, group metadata,
//! tombstones). Replaying the coordinator's own snapshot of the result must give the same
//! snapshot again.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use streamforge_coordinator::records::{decode_batches, decode_key, encode_batch};
use streamforge_coordinator::{CoordinatorConfig, GroupCoordinator, OffsetsRecord};
use streamforge_protocol::batch::BatchIter;

const NOW_MS: i64 = 1_700_000_000_000;
/// Records replayed per input (bounds the work of one execution).
const RECORDS_MAX: usize = 4096;

fn replay(records: &[OffsetsRecord]) -> (GroupCoordinator, Vec<OffsetsRecord>) {
    let config = CoordinatorConfig::default();
    let partitions = config.offsets_topic_partitions;
    let mut c = GroupCoordinator::new(config, NOW_MS);
    for r in records.iter().take(RECORDS_MAX) {
        let _ = decode_key(&r.key);
        let _ = c.replay(r, NOW_MS);
    }
    c.finish_replay(NOW_MS);
    let snapshot = (0..partitions)
        .flat_map(|p| c.snapshot_records(p, NOW_MS))
        .collect();
    (c, snapshot)
}

fuzz_target!(|data: &[u8]| {
    if data.len() > streamforge_fuzz::INPUT_BYTES_MAX {
        return;
    }
    // kafka-protocol's decoder aborts on absurd header counts and overflows on extreme
    // deltas (see batches::kafka_protocol_can_decode): only hand it batches that pass.
    for item in BatchIter::new(data) {
        match item {
            Ok((_, b)) if !streamforge_fuzz::batches::kafka_protocol_accepts(&b) => return,
            Ok(_) => {}
            Err(_) => break,
        }
    }
    let Ok(records) = decode_batches(Bytes::copy_from_slice(data)) else {
        return;
    };
    let (_, snapshot) = replay(&records);
    if snapshot.is_empty() {
        return;
    }
    let batch = encode_batch(&snapshot, NOW_MS).expect("a snapshot encodes");
    let back = decode_batches(batch.freeze()).expect("our own batch decodes");
    assert_eq!(back, snapshot, "records change through encode/decode");
    let (_, again) = replay(&back);
    assert_eq!(again, snapshot, "replaying a snapshot changes it");
});
