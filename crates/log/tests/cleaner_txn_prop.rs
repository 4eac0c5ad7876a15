//! The log cleaner and transactions, against a model: random plain and transactional keyed
//! appends from a few producers, commits and aborts (and a transaction left open), cleaned
//! until nothing is dirty, then again past `delete.retention.ms`. A read_committed consumer
//! (Kafka's algorithm: the aborted list from the log, markers ending aborted ranges) then sees
//! exactly the latest committed record per key below the cleaned end and everything else as
//! written; no aborted record is left in the cleaned section; past the horizon no marker
//! without data of its transaction is left; the open transaction and everything after the
//! first unstable offset is untouched; and a clean and an unclean reopen read the same.

use std::collections::{BTreeMap, HashMap, HashSet};

use bytes::Bytes;
use proptest::prelude::*;
use streamforge_log::cleaner::{self, OFFSET_MAP_SLOT_BYTES};
use streamforge_log::{Log, LogConfig, TxnMarker};
use streamforge_protocol::batch::testing::{BatchSpec, build_batch};
use streamforge_protocol::batch::{BatchIter, TRANSACTIONAL};
use streamforge_protocol::control::{ControlType, control_type};
use streamforge_protocol::kafka_protocol::records::RecordBatchDecoder;

const SEGMENT_MS: i64 = 1_000_000;
const DELETE_RETENTION_MS: i64 = 10_000;
const NOW: i64 = 1_000_000_000;
/// After every record's timestamp (min.compaction.lag.ms = 0 still needs that).
const CLEAN_AT: i64 = NOW + 2 * SEGMENT_MS + 100;
const PRODUCERS: i64 = 3;

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

#[derive(Debug, Clone)]
enum Op {
    Plain(u8, u8),
    /// A transactional record of producer (1..=PRODUCERS).
    Txn(i64, u8, u8),
    End(i64, bool),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0u8..12, any::<u8>()).prop_map(|(k, v)| Op::Plain(k, v)),
        5 => (1..=PRODUCERS, 0u8..12, any::<u8>()).prop_map(|(p, k, v)| Op::Txn(p, k, v)),
        2 => (1..=PRODUCERS, any::<bool>()).prop_map(|(p, c)| Op::End(p, c)),
    ]
}

/// (offset, key, value).
type Rec = (i64, Vec<u8>, Vec<u8>);

/// What was written: every data record with its fate (`None` = plain, `Some(txn)`).
struct Model {
    records: Vec<(Rec, Option<usize>)>,
    /// Per transaction: Some(true) committed, Some(false) aborted, None open.
    txns: Vec<Option<bool>>,
}

impl Model {
    fn visible(&self, r: &(Rec, Option<usize>)) -> bool {
        r.1.is_none_or(|t| self.txns[t] == Some(true))
    }
}

fn append(log: &mut Log, pid: i64, seq: &mut HashMap<i64, i32>, k: u8, v: u8, ts: i64) -> i64 {
    let (key, value) = (format!("key-{k}"), format!("value-{v}"));
    let spec = if pid < 0 {
        BatchSpec {
            base_timestamp: ts,
            ..BatchSpec::default()
        }
    } else {
        let s = seq.entry(pid).or_insert(0);
        *s += 1;
        BatchSpec {
            base_timestamp: ts,
            producer_id: pid,
            producer_epoch: 0,
            base_sequence: *s - 1,
            attributes: TRANSACTIONAL,
            ..BatchSpec::default()
        }
    };
    let mut bytes = build_batch(spec, &[(Some(key.as_bytes()), Some(value.as_bytes()))]);
    let info = log.append_as_leader(&mut bytes, 0, ts).unwrap();
    log.set_high_watermark(log.log_end_offset());
    info.first_offset
}

fn end(log: &mut Log, pid: i64, commit: bool, ts: i64) {
    let kind = if commit {
        ControlType::Commit
    } else {
        ControlType::Abort
    };
    let m = TxnMarker {
        producer_id: pid,
        producer_epoch: 0,
        coordinator_epoch: 0,
        kind,
    };
    log.append_txn_marker(m, 0, ts).unwrap();
    log.set_high_watermark(log.log_end_offset());
}

/// Run `ops` (then leave producer 1's transaction open if it is), returning the model.
fn write(log: &mut Log, ops: &[Op], ts: i64) -> Model {
    let mut model = Model {
        records: Vec::new(),
        txns: Vec::new(),
    };
    let mut open: HashMap<i64, usize> = HashMap::new();
    let mut seq = HashMap::new();
    for op in ops {
        match op {
            Op::Plain(k, v) => {
                let o = append(log, -1, &mut seq, *k, *v, ts);
                model.records.push((rec(o, *k, *v), None));
            }
            Op::Txn(p, k, v) => {
                let t = *open.entry(*p).or_insert_with(|| {
                    model.txns.push(None);
                    model.txns.len() - 1
                });
                let o = append(log, *p, &mut seq, *k, *v, ts);
                model.records.push((rec(o, *k, *v), Some(t)));
            }
            Op::End(p, commit) => {
                if let Some(t) = open.remove(p) {
                    end(log, *p, *commit, ts);
                    model.txns[t] = Some(*commit);
                }
            }
        }
    }
    // Every transaction but producer 1's ends (committed when the op count is even).
    for (p, t) in open {
        if p != 1 {
            end(log, p, ops.len().is_multiple_of(2), ts);
            model.txns[t] = Some(ops.len().is_multiple_of(2));
        }
    }
    model
}

fn rec(o: i64, k: u8, v: u8) -> Rec {
    (
        o,
        format!("key-{k}").into_bytes(),
        format!("value-{v}").into_bytes(),
    )
}

/// What the log holds: (base offset, last offset, producer, transactional, marker kind,
/// records) per batch, in order.
type Batch = (i64, i64, i64, bool, Option<ControlType>, Vec<Rec>);

fn batches(log: &Log) -> Vec<Batch> {
    let mut out = Vec::new();
    let mut next = log.log_start_offset();
    while next < log.log_end_offset() {
        let info = log.read(next, 1 << 16, i64::MAX, true).unwrap();
        assert!(!info.slices.is_empty(), "no data at {next}");
        for slice in info.slices {
            for item in BatchIter::new(&slice) {
                let (_, b) = item.unwrap();
                b.verify_crc().unwrap();
                let mut bytes = Bytes::copy_from_slice(b.as_bytes());
                let mut records = Vec::new();
                if !b.is_control() {
                    for set in RecordBatchDecoder::decode_all(&mut bytes).unwrap() {
                        for r in set.records {
                            let (k, v) = (r.key.unwrap().to_vec(), r.value.unwrap().to_vec());
                            records.push((r.offset, k, v));
                        }
                    }
                }
                let kind = b.is_control().then(|| control_type(&b)).flatten();
                out.push((
                    b.base_offset(),
                    b.last_offset(),
                    b.producer_id(),
                    b.is_transactional(),
                    kind,
                    records,
                ));
                next = b.last_offset() + 1;
            }
        }
    }
    out
}

/// Kafka's read_committed consumer over the log up to its last stable offset.
fn read_committed(log: &Log) -> Vec<Rec> {
    let lso = log.last_stable_offset();
    let mut aborted = log.aborted_transactions(0, i64::MAX);
    aborted.sort_by_key(|a| a.first_offset);
    let mut aborted = aborted.into_iter().peekable();
    let mut aborting: HashSet<i64> = HashSet::new();
    let mut out = Vec::new();
    for (base, last, pid, txn, kind, records) in batches(log) {
        if base >= lso {
            break;
        }
        while aborted.peek().is_some_and(|a| a.first_offset <= last) {
            aborting.insert(aborted.next().unwrap().producer_id);
        }
        if let Some(kind) = kind {
            if kind == ControlType::Abort {
                aborting.remove(&pid);
            }
            continue;
        }
        if txn && aborting.contains(&pid) {
            continue;
        }
        out.extend(records);
    }
    out
}

fn check(log: &Log, model: &Model, clean_end: i64, horizon_passed: bool) {
    let visible: Vec<&(Rec, Option<usize>)> =
        model.records.iter().filter(|r| model.visible(r)).collect();
    let mut latest: BTreeMap<&[u8], &Rec> = BTreeMap::new();
    for (r, _) in visible.iter().copied().filter(|(r, _)| r.0 < clean_end) {
        latest.insert(&r.1, r);
    }
    let mut expected: Vec<Rec> = latest.into_values().cloned().collect();
    // Past the cleaned end everything is as written, up to the last stable offset (the open
    // transaction holds read_committed back).
    let lso = log.last_stable_offset();
    expected.extend(
        visible
            .iter()
            .filter(|(r, _)| r.0 >= clean_end && r.0 < lso)
            .map(|(r, _)| r.clone()),
    );
    expected.sort();
    assert_eq!(read_committed(log), expected, "read_committed view");
    let all = batches(log);
    let fate: HashMap<i64, Option<usize>> = model.records.iter().map(|(r, t)| (r.0, *t)).collect();
    for (base, _, _, _, _, records) in &all {
        for r in records {
            if let Some(Some(t)) = fate.get(&r.0) {
                assert!(
                    r.0 >= clean_end || model.txns[*t] != Some(false),
                    "aborted record at {} (batch {base}) left in the cleaned section",
                    r.0
                );
            }
        }
    }
    if horizon_passed {
        // A marker below the cleaned end stays only while data of its transaction does.
        for (i, (base, _, pid, _, kind, _)) in all.iter().enumerate() {
            if kind.is_none() || *base >= clean_end {
                continue;
            }
            let has_data = all[..i]
                .iter()
                .rev()
                .take_while(|b| !(b.2 == *pid && b.4.is_some()))
                .any(|b| b.2 == *pid && b.3);
            assert!(has_data, "marker at {base} outlived its transaction's data");
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, .. ProptestConfig::default() })]

    #[test]
    fn cleaning_keeps_committed_data_and_drops_aborted_data_and_idle_markers(
        ops in prop::collection::vec(op(), 1..90),
        map_keys in prop_oneof![Just(4usize), Just(4096)],
    ) {
        let dir = tempfile::tempdir().unwrap();
        let mut log = Log::open(dir.path(), config(), NOW).unwrap();
        let model = write(&mut log, &ops, NOW);
        log.tick(NOW + 2 * SEGMENT_MS).unwrap();
        let active = *log.segment_base_offsets().last().unwrap();
        let unstable = log.first_unstable_offset();
        let map_memory = map_keys * OFFSET_MAP_SLOT_BYTES * 2;
        let mut checkpoint = None;
        for _ in 0..200 {
            let Some(stats) = cleaner::clean_now(&mut log, checkpoint, map_memory, CLEAN_AT, false).unwrap() else {
                break;
            };
            checkpoint = Some(stats.end_offset);
        }
        // Cleaned up to the active segment or the open transaction's segment.
        let clean_end = checkpoint.unwrap_or(0);
        prop_assert!(clean_end <= active);
        if let Some(u) = unstable {
            prop_assert!(clean_end <= u, "nothing at or past the first unstable offset is cleaned");
        }
        check(&log, &model, clean_end, false);
        // Two forced passes past delete.retention.ms: stamp the idle markers, then drop them.
        for at in [CLEAN_AT + 1, CLEAN_AT + 2 + DELETE_RETENTION_MS, CLEAN_AT + 3 + 2 * DELETE_RETENTION_MS] {
            cleaner::clean_now(&mut log, checkpoint, map_memory, at, true).unwrap();
        }
        check(&log, &model, clean_end, true);
        prop_assert_eq!(log.first_unstable_offset(), unstable);
        prop_assert!(log.verify().is_none());
        let before = read_committed(&log);
        log.close().unwrap();
        let log = Log::open(dir.path(), config(), CLEAN_AT).unwrap();
        prop_assert_eq!(read_committed(&log), before.clone());
        drop(log);
        std::fs::remove_file(dir.path().join(".kafka_cleanshutdown")).ok();
        std::fs::remove_file(dir.path().join("recovery-point-offset-checkpoint")).ok();
        let log = Log::open(dir.path(), config(), CLEAN_AT).unwrap();
        prop_assert_eq!(read_committed(&log), before);
        prop_assert_eq!(log.first_unstable_offset(), unstable);
    }
}
