//! Helpers shared by the log's integration tests.

use streamforge_log::Log;
use streamforge_protocol::batch::BatchIter;

/// Read every batch from the log start, checking CRCs and dense offsets; returns the end.
pub fn read_everything(log: &Log) -> i64 {
    let mut next = log.log_start_offset();
    for _ in 0..10_000 {
        if next >= log.log_end_offset() {
            break;
        }
        let info = log.read(next, 1 << 20, i64::MAX, true).unwrap();
        assert!(!info.slices.is_empty(), "no data at {next}");
        for slice in &info.slices {
            for item in BatchIter::new(slice) {
                let (_, b) = item.unwrap();
                b.verify_crc().unwrap();
                assert_eq!(b.base_offset(), next);
                next = b.last_offset() + 1;
            }
        }
    }
    next
}
