//! Model-based property test: random sequences of append / roll / truncate / DeleteRecords /
//! retention / reopen (clean and unclean) against a simple in-memory model. After every step:
//! offsets are dense and monotonic, reads return exactly what was appended (from every offset,
//! which exercises the sparse indexes against a full scan), and timestamp lookups agree with a
//! linear scan of the model.

use proptest::prelude::*;
use streamforge_log::{Log, LogConfig};
use streamforge_protocol::batch::testing::{BatchSpec, build_simple};
use streamforge_protocol::batch::{BatchIter, RecordBatch};

#[derive(Debug, Clone)]
enum Op {
    Append {
        records: usize,
        value_bytes: usize,
        ts_step: i64,
    },
    Truncate {
        back: u16,
    },
    DeleteRecords {
        forward: u16,
    },
    RetentionBytes {
        keep: u16,
    },
    Tick {
        advance_ms: i64,
    },
    Reopen {
        clean: bool,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (1usize..8, 0usize..200, -5i64..50).prop_map(|(records, value_bytes, ts_step)| Op::Append { records, value_bytes, ts_step }),
        1 => any::<u16>().prop_map(|back| Op::Truncate { back: back % 40 }),
        1 => any::<u16>().prop_map(|forward| Op::DeleteRecords { forward: forward % 40 }),
        1 => any::<u16>().prop_map(|keep| Op::RetentionBytes { keep: keep % 6000 }),
        1 => (0i64..3000).prop_map(|advance_ms| Op::Tick { advance_ms }),
        1 => any::<bool>().prop_map(|clean| Op::Reopen { clean }),
    ]
}

/// One appended batch as the model sees it.
#[derive(Debug, Clone)]
struct ModelBatch {
    base: i64,
    last: i64,
    base_ts: i64,
    bytes: Vec<u8>,
}

fn config() -> LogConfig {
    LogConfig {
        segment_bytes: 2048,
        segment_ms: 1000,
        segment_index_bytes: 96,
        index_interval_bytes: 300,
        max_message_bytes: 1 << 20,
        ..LogConfig::default()
    }
}

/// Read everything from `from`, in as many reads as needed (one read touches a bounded number
/// of segments).
fn read_all(log: &Log, from: i64) -> Vec<(i64, i64, Vec<u8>)> {
    let mut out: Vec<(i64, i64, Vec<u8>)> = Vec::new();
    let mut at = from;
    while at < log.log_end_offset() {
        let info = log.read(at, usize::MAX, i64::MAX, true).unwrap();
        assert!(!info.slices.is_empty(), "read at {at} returned nothing");
        for slice in &info.slices {
            for item in BatchIter::new(slice) {
                let (_, b) = item.unwrap();
                out.push((b.base_offset(), b.last_offset(), b.as_bytes().to_vec()));
                at = b.last_offset() + 1;
            }
        }
    }
    out
}

fn check(log: &Log, model: &[ModelBatch], log_start: i64, next: i64) -> Result<(), TestCaseError> {
    prop_assert_eq!(log.log_end_offset(), next);
    prop_assert_eq!(log.log_start_offset(), log_start);
    // Dense and monotonic, and exactly what was appended.
    let visible: Vec<&ModelBatch> = model.iter().filter(|b| b.last >= log_start).collect();
    let got = read_all(log, log_start);
    prop_assert_eq!(got.len(), visible.len());
    for (g, m) in got.iter().zip(&visible) {
        prop_assert_eq!((g.0, g.1), (m.base, m.last));
        prop_assert_eq!(&g.2, &m.bytes);
    }
    for w in got.windows(2) {
        prop_assert_eq!(w[1].0, w[0].1 + 1);
    }
    // Reads from every offset start with the batch containing it (index vs. full scan).
    for offset in log_start..next {
        let info = log.read(offset, 1, i64::MAX, true).unwrap();
        let first = RecordBatch::parse(&info.slices[0]).unwrap();
        prop_assert!(first.base_offset() <= offset && offset <= first.last_offset());
    }
    // Timestamp lookups agree with a linear scan (record i of a batch has ts base_ts + i).
    let mut probes: Vec<i64> = visible.iter().map(|b| b.base_ts).collect();
    probes.extend(visible.iter().map(|b| b.base_ts + (b.last - b.base) + 1));
    for ts in probes {
        let mut expect = None;
        for b in &visible {
            for off in b.base..=b.last {
                let rts = b.base_ts + (off - b.base);
                if off >= log_start && rts >= ts {
                    expect = Some((off, rts));
                    break;
                }
            }
            if expect.is_some() {
                break;
            }
        }
        // The log answers per segment ordered by offset, as Kafka does: the first segment whose
        // max timestamp reaches `ts`, then the first record in it. With non-monotonic timestamps
        // that is the first record in offset order with ts >= target: same as the scan.
        prop_assert_eq!(log.offset_for_timestamp(ts).unwrap(), expect);
    }
    Ok(())
}

fn run(ops: Vec<Op>) -> Result<(), TestCaseError> {
    let dir = tempfile::tempdir().unwrap();
    let mut now_ms = 0i64;
    let mut log = Some(Log::open(dir.path(), config(), now_ms).unwrap());
    let mut model: Vec<ModelBatch> = Vec::new();
    let mut log_start = 0i64;
    let mut next = 0i64;
    let mut ts = 1_000i64;
    for op in ops {
        let l = log.as_mut().unwrap();
        match op {
            Op::Append {
                records,
                value_bytes,
                ts_step,
            } => {
                ts = (ts + ts_step).max(0);
                let mut bytes = build_simple(
                    BatchSpec {
                        base_timestamp: ts,
                        ..BatchSpec::default()
                    },
                    records,
                    value_bytes,
                );
                let info = l.append_as_leader(&mut bytes, 3, now_ms).unwrap();
                prop_assert_eq!(info.first_offset, next);
                prop_assert_eq!(info.last_offset, next + records as i64 - 1);
                model.push(ModelBatch {
                    base: next,
                    last: info.last_offset,
                    base_ts: ts,
                    bytes,
                });
                next = info.last_offset + 1;
                l.set_high_watermark(next);
            }
            Op::Truncate { back } => {
                // Truncate to a batch boundary (as followers do).
                let target = (next - i64::from(back)).max(log_start);
                let cut = model.iter().position(|b| b.last >= target);
                if let Some(i) = cut {
                    let at = model[i].base.max(log_start);
                    if model[i].base >= log_start {
                        l.truncate_to(at).unwrap();
                        model.truncate(i);
                        next = at;
                        l.set_high_watermark(next);
                    }
                }
            }
            Op::DeleteRecords { forward } => {
                let target = (log_start + i64::from(forward)).min(next);
                let got = l.delete_records_before(target).unwrap();
                log_start = log_start.max(target);
                prop_assert_eq!(got, log_start);
            }
            Op::RetentionBytes { keep } => {
                let mut c = config();
                c.retention_bytes = i64::from(keep);
                c.retention_check_interval_ms = 0;
                l.update_config(c);
                l.tick(now_ms).unwrap();
                l.update_config(config());
                log_start = l.log_start_offset();
            }
            Op::Tick { advance_ms } => {
                now_ms += advance_ms;
                l.tick(now_ms).unwrap();
                // retention.ms is 7 days by default: nothing expires here.
            }
            Op::Reopen { clean } => {
                let l = log.take().unwrap();
                if clean {
                    l.close().unwrap();
                } else {
                    drop(l);
                }
                log = Some(Log::open(dir.path(), config(), now_ms).unwrap());
                log.as_mut().unwrap().set_high_watermark(next);
            }
        }
        // Records below the log start are gone from the model too.
        check(log.as_ref().unwrap(), &model, log_start, next)?;
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]
    #[test]
    fn log_matches_model(ops in proptest::collection::vec(op(), 1..60)) {
        run(ops)?;
    }
}
