use std::io::Write;

use uuid::Uuid;

use super::*;
use crate::records::TopicRecord;

fn topic(name: &str, id: u128) -> Record {
    Record::Topic(TopicRecord {
        name: name.to_string(),
        topic_id: Uuid::from_u128(id),
    })
}

fn names(q: &DurableQuorum) -> Vec<String> {
    let image = q.state.lock().log.image().clone();
    image.topics().map(|t| t.name.clone()).collect()
}

#[test]
fn committed_batches_survive_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let q = DurableQuorum::open(1, dir.path()).unwrap();
    q.propose(vec![topic("a", 10), topic("b", 11)]).unwrap();
    let seq = q.propose(vec![topic("c", 12)]).unwrap();
    drop(q);
    let q = DurableQuorum::open(1, dir.path()).unwrap();
    assert_eq!(names(&q), ["a", "b", "c"]);
    assert_eq!(q.read_committed(0, 10).unwrap().len(), 2);
    assert!(
        q.propose(vec![topic("d", 13)]).unwrap() > seq,
        "sequence numbers keep growing"
    );
    assert_eq!(q.snapshot().position.offset, 3);
}

#[test]
fn a_torn_or_corrupt_tail_is_cut_off_and_later_appends_land_after_the_good_prefix() {
    let dir = tempfile::tempdir().unwrap();
    let q = DurableQuorum::open(1, dir.path()).unwrap();
    q.propose(vec![topic("a", 10)]).unwrap();
    q.propose(vec![topic("b", 11)]).unwrap();
    drop(q);
    let path = dir.path().join(LOG_FILE);
    let len = fs::metadata(&path).unwrap().len();
    // A crash in the middle of the second append: half a frame.
    let f = OpenOptions::new().write(true).open(&path).unwrap();
    f.set_len(len - 3).unwrap();
    drop(f);
    let q = DurableQuorum::open(1, dir.path()).unwrap();
    assert_eq!(names(&q), ["a"]);
    q.propose(vec![topic("c", 12)]).unwrap();
    drop(q);
    // A flipped byte in the last frame: its CRC fails, it goes.
    let mut bytes = fs::read(&path).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    fs::write(&path, &bytes).unwrap();
    let q = DurableQuorum::open(1, dir.path()).unwrap();
    assert_eq!(names(&q), ["a"]);
}

#[test]
fn the_log_is_folded_into_a_snapshot_and_stays_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let q = DurableQuorum::open(1, dir.path()).unwrap();
    for i in 0..(LOG_BATCHES_MAX as u128 + 5) {
        q.propose(vec![topic(&format!("t{i}"), 100 + i)]).unwrap();
    }
    assert_eq!(q.state.lock().batches_in_file, 5);
    drop(q);
    assert!(dir.path().join(SNAPSHOT_FILE).exists());
    let q = DurableQuorum::open(1, dir.path()).unwrap();
    assert_eq!(names(&q).len(), LOG_BATCHES_MAX + 5);
    assert_eq!(q.snapshot().position.offset, LOG_BATCHES_MAX as i64 + 4);
}

/// Few batches of many records (each restart's leader changes) are folded too: what a start-up
/// replays stays under LOG_RECORDS_MAX records, not only under LOG_BATCHES_MAX batches.
#[test]
fn a_log_of_few_large_batches_is_folded_after_log_records_max_records() {
    let dir = tempfile::tempdir().unwrap();
    let q = DurableQuorum::open(1, dir.path()).unwrap();
    let per_batch = LOG_RECORDS_MAX / 4;
    for b in 0..4u128 {
        let records = (0..per_batch as u128)
            .map(|i| topic(&format!("t{b}-{i}"), 1_000_000 * (b + 1) + i))
            .collect();
        q.propose(records).unwrap();
    }
    assert_eq!(
        q.state.lock().batches_in_file,
        0,
        "folded at {LOG_RECORDS_MAX} records"
    );
    assert_eq!(q.state.lock().records_in_file, 0);
    drop(q);
    assert!(dir.path().join(SNAPSHOT_FILE).exists());
    let q = DurableQuorum::open(1, dir.path()).unwrap();
    assert_eq!(names(&q).len(), 4 * per_batch);
}

#[test]
fn batches_already_in_the_snapshot_are_skipped_after_a_crash_before_the_log_was_emptied() {
    let dir = tempfile::tempdir().unwrap();
    let q = DurableQuorum::open(1, dir.path()).unwrap();
    q.propose(vec![topic("a", 10)]).unwrap();
    let log_before = fs::read(dir.path().join(LOG_FILE)).unwrap();
    q.compact(&mut q.state.lock()).unwrap();
    drop(q);
    // The crash: the snapshot was renamed in, the log not yet emptied.
    let mut f = File::create(dir.path().join(LOG_FILE)).unwrap();
    f.write_all(&log_before).unwrap();
    drop(f);
    let q = DurableQuorum::open(1, dir.path()).unwrap();
    assert_eq!(names(&q), ["a"]);
    q.propose(vec![topic("b", 11)]).unwrap();
    drop(q);
    assert_eq!(
        names(&DurableQuorum::open(1, dir.path()).unwrap()),
        ["a", "b"]
    );
}

#[test]
fn a_corrupt_snapshot_is_an_error_not_an_empty_cluster() {
    let dir = tempfile::tempdir().unwrap();
    let q = DurableQuorum::open(1, dir.path()).unwrap();
    q.propose(vec![topic("a", 10)]).unwrap();
    q.compact(&mut q.state.lock()).unwrap();
    drop(q);
    let path = dir.path().join(SNAPSHOT_FILE);
    let mut bytes = fs::read(&path).unwrap();
    bytes[6] ^= 1;
    fs::write(&path, &bytes).unwrap();
    assert!(DurableQuorum::open(1, dir.path()).is_err());
}

#[test]
fn reading_arbitrary_log_bytes_never_panics() {
    let mut seed = 7u64;
    for len in 0..400usize {
        let bytes: Vec<u8> = (0..len)
            .map(|_| {
                seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
                (seed >> 56) as u8
            })
            .collect();
        let (_, good) = crate::quorum::files::read_frames(&bytes, decode_batch);
        assert!(good <= bytes.len());
    }
}
