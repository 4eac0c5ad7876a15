//! Produce-request record batches through the log's leader append: validation (length, magic,
//! CRC, header, records, idempotence), in-place offset assignment, index updates. What the log
//! accepts must read back byte for byte (offsets patched), pass a CRC scrub, and survive a
//! clean reopen and an unclean recovery.
#![no_main]

use libfuzzer_sys::fuzz_target;
use streamforge_fuzz::logdir;
use streamforge_log::Log;

const NOW_MS: i64 = 1_700_000_000_000;

fuzz_target!(|data: &[u8]| {
    if data.len() > streamforge_fuzz::INPUT_BYTES_MAX {
        return;
    }
    let dir = logdir::fresh();
    let mut log = Log::open(&dir, logdir::small_config(), NOW_MS).expect("open an empty log");
    let mut batches = data.to_vec();
    let Ok(info) = log.append_as_leader(&mut batches, 5, NOW_MS) else {
        assert_eq!(log.log_end_offset(), 0, "a rejected append changed the log");
        return;
    };
    if info.duplicate {
        return;
    }
    assert_eq!(info.first_offset, 0);
    assert_eq!(log.log_end_offset(), info.last_offset + 1);
    assert!(log.verify().is_none(), "an accepted batch fails the scrub");
    let read = log
        .read(0, batches.len() + 1, log.log_end_offset(), true)
        .expect("read back");
    let back: Vec<u8> = read.slices.iter().flat_map(|s| s.iter().copied()).collect();
    assert_eq!(back, batches, "the log does not return what it appended");
    log.close().expect("close");
    let log = Log::open(&dir, logdir::small_config(), NOW_MS).expect("clean reopen");
    assert_eq!(log.log_end_offset(), info.last_offset + 1);
    drop(log); // unclean: no close, no marker written by this open
    let _ = std::fs::remove_file(dir.join(".kafka_cleanshutdown"));
    let log = Log::open(&dir, logdir::small_config(), NOW_MS).expect("unclean reopen");
    assert_eq!(
        log.log_end_offset(),
        info.last_offset + 1,
        "recovery lost accepted data"
    );
});
