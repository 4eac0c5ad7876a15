//! A segment file's bytes through the log's open path: the recovery scan after an unclean
//! shutdown (first byte even) or the clean-shutdown tail walk with index rebuild (odd). After an
//! unclean open everything left must pass a full CRC scrub, reads must stay in range, and the
//! log must take a new batch and reopen with the same end. After a clean open (files trusted,
//! as Kafka does) a read may instead report a damaged batch, never skip it.
#![no_main]

use libfuzzer_sys::fuzz_target;
use streamforge_fuzz::logdir;
use streamforge_log::{Log, LogError, file_stem};
use streamforge_protocol::batch::testing::{BatchSpec, build_simple};

const NOW_MS: i64 = 1_700_000_000_000;

fuzz_target!(|data: &[u8]| {
    let Some((&mode, segment)) = data.split_first() else {
        return;
    };
    if segment.len() > streamforge_fuzz::INPUT_BYTES_MAX {
        return;
    }
    let dir = logdir::fresh();
    std::fs::write(dir.join(format!("{}.log", file_stem(0))), segment).expect("write segment");
    let clean = mode & 1 == 1;
    if clean {
        std::fs::write(dir.join(".kafka_cleanshutdown"), b"").expect("marker");
    }
    let Ok(mut log) = Log::open(&dir, logdir::small_config(), NOW_MS) else {
        return;
    };
    if !clean {
        assert!(
            log.verify().is_none(),
            "recovery left a corrupt batch behind"
        );
    }
    let (start, end) = (log.log_start_offset(), log.log_end_offset());
    assert!(start <= end);
    let read = match log.read(start, 1 << 20, end, true) {
        Ok(read) => read,
        // A clean open trusts the files (no CRC scan, as Kafka); damage met by a read is then
        // reported to the reader, never skipped (docs/STORAGE.md, D6).
        Err(LogError::DamagedBatch { .. }) if clean => return,
        Err(e) => panic!("reading from the log start: {e:?}"),
    };
    assert!(read.bytes <= log.size_bytes() as usize);
    let _ = log.offset_for_timestamp(0);
    if end > i64::MAX / 2 {
        return;
    }
    let mut batch = build_simple(BatchSpec::default(), 2, 8);
    let info = log
        .append_as_leader(&mut batch, 0, NOW_MS)
        .expect("a valid batch appends after recovery");
    assert_eq!(info.first_offset, end);
    log.close().expect("close");
    let log = Log::open(&dir, logdir::small_config(), NOW_MS).expect("reopen after close");
    assert_eq!(log.log_end_offset(), end + 2);
});
