//! `cleanup.policy=compact` alone deletes nothing by `retention.ms` / `retention.bytes`;
//! `compact,delete` applies retention as `delete` does (Kafka's rules).

use streamforge_log::{Log, LogConfig};
use streamforge_protocol::batch::testing::{BatchSpec, build_batch};

const T0: i64 = 1_000_000_000;

fn filled(dir: &std::path::Path, delete: bool) -> Log {
    let config = LogConfig {
        segment_bytes: 1024,
        compact: true,
        delete,
        retention_ms: 1_000,
        retention_bytes: 2048,
        retention_check_interval_ms: 0,
        preallocate_window_bytes: 0,
        ..LogConfig::default()
    };
    let mut log = Log::open(dir, config, T0).unwrap();
    for i in 0..60 {
        let key = format!("k{}", i % 7).into_bytes();
        let mut b = build_batch(
            BatchSpec {
                base_timestamp: T0,
                ..BatchSpec::default()
            },
            &[(Some(&key[..]), Some(&[b'v'; 100][..]))],
        );
        log.append_as_leader(&mut b, 0, T0).unwrap();
    }
    // (The replica manager moves it on each append; retention only deletes below it.)
    let end = log.log_end_offset();
    log.set_high_watermark(end);
    log
}

#[test]
fn compact_alone_keeps_old_segments_and_compact_delete_deletes_them() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = filled(dir.path(), false);
    let segments = log.segment_count();
    assert!(segments > 3);
    log.tick(T0 + 3_600_000).unwrap();
    assert_eq!(log.log_start_offset(), 0, "compact alone: nothing deleted");
    assert_eq!(log.segment_count(), segments);

    let dir = tempfile::tempdir().unwrap();
    let mut log = filled(dir.path(), true);
    log.tick(T0 + 3_600_000).unwrap();
    assert!(
        log.log_start_offset() > 0,
        "compact,delete: retention applies"
    );
    assert!(log.segment_count() < segments);
}
