use std::collections::BTreeSet;

use openraft::{Membership, Vote};
use uuid::Uuid;

use super::*;
use crate::records::{Record, TopicRecord};

fn log_id(term: u64, index: u64) -> LogId<NodeId> {
    LogId::new(CommittedLeaderId::new(term, 1), index)
}

fn batch(term: u64, index: u64) -> Entry<TypeConfig> {
    let record = Record::Topic(TopicRecord {
        name: format!("t{index}"),
        topic_id: Uuid::from_u128(u128::from(index) + 1),
    });
    Entry {
        log_id: log_id(term, index),
        payload: EntryPayload::Normal(Batch {
            proposer: 1,
            seq: index,
            records: vec![record],
        }),
    }
}

fn batches(term: u64, indexes: std::ops::Range<u64>) -> Vec<Entry<TypeConfig>> {
    indexes.map(|i| batch(term, i)).collect()
}

fn indexes(log: &RaftLogFile) -> Vec<u64> {
    log.entries(..)
        .unwrap()
        .iter()
        .map(|e| e.log_id.index)
        .collect()
}

#[test]
fn entries_of_every_kind_read_back_after_a_reopen_from_cache_and_file() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = RaftLogFile::open(dir.path()).unwrap();
    let members = Membership::new(vec![BTreeSet::from([1, 2, 3])], None);
    let mut written = vec![
        Entry::<TypeConfig> {
            log_id: log_id(1, 0),
            payload: EntryPayload::Blank,
        },
        Entry {
            log_id: log_id(1, 1),
            payload: EntryPayload::Membership(members),
        },
    ];
    // More than the cache holds: the oldest are read back from the file.
    written.extend(batches(1, 2..LOG_CACHE_ENTRIES_MAX as u64 + 10));
    log.append(written.clone()).unwrap();
    assert_eq!(log.cache.len(), LOG_CACHE_ENTRIES_MAX);
    assert_eq!(log.entries(..).unwrap(), written);
    drop(log);
    let log = RaftLogFile::open(dir.path()).unwrap();
    assert_eq!(log.entries(..).unwrap(), written);
    assert_eq!(log.entries(3..5).unwrap(), written[3..5]);
    assert_eq!(log.last_log_id(), Some(written.last().unwrap().log_id));
}

#[test]
fn the_vote_and_commit_index_survive_a_reopen_and_a_damaged_vote_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = RaftLogFile::open(dir.path()).unwrap();
    assert_eq!(log.vote(), None);
    let vote = Vote::new(3, 2);
    log.save_vote(&vote).unwrap();
    log.save_committed(Some(log_id(3, 7))).unwrap();
    drop(log);
    let log = RaftLogFile::open(dir.path()).unwrap();
    assert_eq!(log.vote(), Some(vote));
    assert_eq!(log.committed(), Some(log_id(3, 7)));
    drop(log);
    let path = dir.path().join(VOTE_FILE);
    let mut bytes = fs::read(&path).unwrap();
    bytes[5] ^= 1;
    fs::write(&path, &bytes).unwrap();
    assert!(RaftLogFile::open(dir.path()).is_err(), "a damaged vote");
}

#[test]
fn truncating_a_conflicting_suffix_lasts_and_new_entries_follow() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = RaftLogFile::open(dir.path()).unwrap();
    log.append(batches(1, 0..10)).unwrap();
    log.truncate(6).unwrap();
    assert_eq!(indexes(&log), (0..6).collect::<Vec<_>>());
    log.append(batches(2, 6..8)).unwrap();
    drop(log);
    let log = RaftLogFile::open(dir.path()).unwrap();
    assert_eq!(indexes(&log), (0..8).collect::<Vec<_>>());
    assert_eq!(log.last_log_id(), Some(log_id(2, 7)));
    assert_eq!(log.entries(5..6).unwrap()[0].log_id, log_id(1, 5));
}

#[test]
fn purging_shrinks_the_file_and_lasts_even_past_the_last_entry() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = RaftLogFile::open(dir.path()).unwrap();
    log.append(batches(1, 0..10)).unwrap();
    let before = fs::metadata(dir.path().join(LOG_FILE)).unwrap().len();
    log.purge(log_id(1, 4)).unwrap();
    assert_eq!(indexes(&log), (5..10).collect::<Vec<_>>());
    assert!(fs::metadata(dir.path().join(LOG_FILE)).unwrap().len() < before);
    log.append(batches(1, 10..12)).unwrap();
    drop(log);
    let mut log = RaftLogFile::open(dir.path()).unwrap();
    assert_eq!(indexes(&log), (5..12).collect::<Vec<_>>());
    assert_eq!(log.last_purged(), Some(log_id(1, 4)));
    // A purge past the end (a snapshot installed from the leader): the log goes empty and
    // continues after the purge point.
    log.purge(log_id(2, 20)).unwrap();
    assert!(indexes(&log).is_empty());
    assert_eq!(log.last_log_id(), Some(log_id(2, 20)));
    log.append(batches(2, 19..21)).unwrap();
    assert!(
        indexes(&log).is_empty(),
        "entries a snapshot holds are dropped"
    );
    log.append(batches(2, 21..23)).unwrap();
    assert!(
        log.append(batches(2, 22..23)).is_err(),
        "an entry at or before the last one needs a truncate first"
    );
    drop(log);
    let log = RaftLogFile::open(dir.path()).unwrap();
    assert_eq!(indexes(&log), [21, 22]);
}

#[test]
fn entries_a_purge_covered_are_skipped_after_a_crash_before_the_rewrite() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = RaftLogFile::open(dir.path()).unwrap();
    log.append(batches(1, 0..6)).unwrap();
    drop(log);
    // The crash: `purged` written, `log` not rewritten yet.
    write_json(dir.path(), PURGED_FILE, &log_id(1, 2)).unwrap();
    let mut log = RaftLogFile::open(dir.path()).unwrap();
    assert_eq!(indexes(&log), [3, 4, 5]);
    log.append(batches(1, 6..7)).unwrap();
    log.truncate(4).unwrap();
    drop(log);
    assert_eq!(indexes(&RaftLogFile::open(dir.path()).unwrap()), [3]);
}

#[test]
fn a_torn_or_corrupt_tail_is_cut_off_and_later_appends_land_after_the_good_prefix() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(LOG_FILE);
    let mut log = RaftLogFile::open(dir.path()).unwrap();
    log.append(batches(1, 0..3)).unwrap();
    drop(log);
    // A crash in the middle of the last append: half a frame.
    let len = fs::metadata(&path).unwrap().len();
    OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(len - 3)
        .unwrap();
    let mut log = RaftLogFile::open(dir.path()).unwrap();
    assert_eq!(indexes(&log), [0, 1]);
    log.append(batches(1, 2..4)).unwrap();
    drop(log);
    assert_eq!(
        indexes(&RaftLogFile::open(dir.path()).unwrap()),
        [0, 1, 2, 3]
    );
    // A flipped byte in the last frame: its CRC fails, it goes.
    let mut bytes = fs::read(&path).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    fs::write(&path, &bytes).unwrap();
    let log = RaftLogFile::open(dir.path()).unwrap();
    assert_eq!(indexes(&log), [0, 1, 2]);
    assert_eq!(
        fs::metadata(&path).unwrap().len(),
        log.end,
        "the bad frame is cut from the file"
    );
}

#[test]
fn a_log_whose_indexes_go_back_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut bytes = Vec::new();
    for entry in [batch(1, 0), batch(1, 2), batch(1, 1)] {
        bytes.extend_from_slice(&frame(&encode_entry(&entry).unwrap()));
    }
    fs::write(dir.path().join(LOG_FILE), &bytes).unwrap();
    assert!(RaftLogFile::open(dir.path()).is_err());
}

#[test]
fn arbitrary_bytes_never_panic_the_decoder_or_the_open() {
    let mut seed = 11u64;
    let mut next = || {
        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
        (seed >> 56) as u8
    };
    let good = encode_entry(&batch(1, 0)).unwrap();
    for len in 0..300usize {
        let bytes: Vec<u8> = (0..len).map(|_| next()).collect();
        let _ = decode_entry(&bytes);
        // A good entry with one byte changed.
        let mut changed = good.clone();
        let at = len % changed.len();
        changed[at] ^= next() | 1;
        let _ = decode_entry(&changed);
    }
    let dir = tempfile::tempdir().unwrap();
    for len in (0..200usize).step_by(7) {
        let mut bytes = frame(&good);
        bytes.extend((0..len).map(|_| next()));
        fs::write(dir.path().join(LOG_FILE), &bytes).unwrap();
        let log = RaftLogFile::open(dir.path()).unwrap();
        assert_eq!(
            indexes(&log),
            [0],
            "random bytes after a good frame are a torn tail"
        );
    }
}

#[test]
fn each_start_gets_a_new_incarnation() {
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(next_incarnation(dir.path()).unwrap(), 0);
    assert_eq!(next_incarnation(dir.path()).unwrap(), 1);
    assert_eq!(next_incarnation(dir.path()).unwrap(), 2);
}
