//! The high-watermark checkpoint, Kafka's `replication-offset-checkpoint`: one file per data
//! directory with every hosted partition's high watermark, so a restarted broker does not take
//! its log end for committed. Format (Kafka's `OffsetCheckpointFile`): a version line `0`, the
//! number of entries, then one `topic partition offset` line per partition.
//!
//! Written whole, crash-safe: a temp file, fsync, rename over the old file, fsync of the
//! directory, so a crash leaves either the old file or the new one, never a torn one.
//! Read with typed errors, never a panic: a file that does not parse is
//! [`HwCheckpointError::Malformed`]; what the broker does then is in [`read_or_empty`].

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use parking_lot::Mutex;
use streamforge_metadata::PartitionState;

use super::ReplicaManager;
use crate::partition::OpenHighWatermark;

/// The file's name in the data directory (Kafka's).
pub const HW_CHECKPOINT_FILE: &str = "replication-offset-checkpoint";
/// The only format version Kafka has written.
const VERSION: u32 = 0;
/// Most entries read from one file: a damaged count never makes us allocate more.
pub const HW_CHECKPOINT_ENTRIES_MAX: usize = 1 << 20;

/// `(topic, partition)` → high watermark.
pub type HighWatermarks = BTreeMap<(String, i32), i64>;

/// Why a checkpoint could not be read.
#[derive(Debug, thiserror::Error)]
pub enum HwCheckpointError {
    #[error("cannot read {path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error("damaged high-watermark checkpoint {path}: {why}")]
    Malformed { path: PathBuf, why: String },
}

/// Parse the file's text.
pub fn parse(text: &str) -> Result<HighWatermarks, String> {
    let mut lines = text.lines();
    let version: u32 = lines
        .next()
        .and_then(|l| l.trim().parse().ok())
        .ok_or("missing version line")?;
    if version != VERSION {
        return Err(format!("unknown version {version}"));
    }
    let count: usize = lines
        .next()
        .and_then(|l| l.trim().parse().ok())
        .ok_or("missing entry count")?;
    if count > HW_CHECKPOINT_ENTRIES_MAX {
        return Err(format!(
            "{count} entries, more than {HW_CHECKPOINT_ENTRIES_MAX}"
        ));
    }
    let mut out = HighWatermarks::new();
    let mut found = 0usize;
    for (n, line) in lines.enumerate() {
        // Kafka reads every line and compares the total with the count: extra lines are damage.
        if found == count {
            return Err(format!("more entries than the {count} declared"));
        }
        let (topic, partition, hw) =
            parse_entry(line).ok_or(format!("line {}: {line:?}", n + 3))?;
        if out.insert((topic.to_string(), partition), hw).is_some() {
            return Err(format!("{topic} {partition} appears twice"));
        }
        found += 1;
    }
    if found != count {
        return Err(format!("{found} entries, {count} declared"));
    }
    Ok(out)
}

/// One `topic partition offset` line (a partition and a high watermark are never negative).
fn parse_entry(line: &str) -> Option<(&str, i32, i64)> {
    let mut fields = line.split_whitespace();
    let (topic, partition, hw) = (fields.next()?, fields.next()?, fields.next()?);
    if fields.next().is_some() {
        return None;
    }
    let partition: i32 = partition.parse().ok().filter(|p| *p >= 0)?;
    let hw: i64 = hw.parse().ok().filter(|o| *o >= 0)?;
    Some((topic, partition, hw))
}

/// The file's text for `entries`.
pub fn format(entries: &HighWatermarks) -> String {
    let mut text = format!("{VERSION}\n{}\n", entries.len());
    for ((topic, partition), hw) in entries {
        debug_assert!(*hw >= 0 && !topic.contains(char::is_whitespace));
        text.push_str(&format!("{topic} {partition} {hw}\n"));
    }
    text
}

/// Read `<data_dir>/replication-offset-checkpoint`; `Ok(None)` when there is none (a new
/// data directory, or one last used by a release without this file).
pub fn read(data_dir: &Path) -> Result<Option<HighWatermarks>, HwCheckpointError> {
    let path = data_dir.join(HW_CHECKPOINT_FILE);
    let bytes = match fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(HwCheckpointError::Io { path, source }),
    };
    let malformed = |why: String| HwCheckpointError::Malformed {
        path: path.clone(),
        why,
    };
    let text = std::str::from_utf8(&bytes).map_err(|_| malformed("not UTF-8 text".into()))?;
    parse(text).map(Some).map_err(malformed)
}

/// Read the checkpoint for start-up. A missing file is empty. A damaged or unreadable one is
/// reported at ERROR and also read as empty: Kafka fails the whole log directory instead
/// (every partition in it offline). Empty is the safe choice here because an absent entry
/// starts a replicated partition's high watermark at its log start, the lowest it can be: no
/// record is exposed that the ISR may not have, and the leader's HW climbs back as the ISR
/// fetches. Partitions alone in their ISR do not read the checkpoint at all. The next write
/// replaces the damaged file.
pub fn read_or_empty(data_dir: &Path) -> HighWatermarks {
    match read(data_dir) {
        Ok(entries) => entries.unwrap_or_default(),
        Err(e) => {
            tracing::error!(error = %e, "ignoring the high-watermark checkpoint: replicated partitions start with their high watermark at the log start");
            HighWatermarks::new()
        }
    }
}

/// Write `entries` to `<data_dir>/replication-offset-checkpoint`, crash-safe.
pub fn write(data_dir: &Path, entries: &HighWatermarks) -> io::Result<()> {
    let tmp = data_dir.join(format!("{HW_CHECKPOINT_FILE}.tmp"));
    {
        let mut f = File::create(&tmp)?;
        f.write_all(format(entries).as_bytes())?;
        f.sync_all()?;
    }
    fs::rename(&tmp, data_dir.join(HW_CHECKPOINT_FILE))?;
    File::open(data_dir)?.sync_all()
}

/// Kafka's default `replica.high.watermark.checkpoint.interval.ms`.
pub const HW_CHECKPOINT_INTERVAL_MS_DEFAULT: u64 = 5_000;

/// The broker's checkpoint state: what was read at start-up, what was written last, when.
#[derive(Debug)]
pub(crate) struct HwCheckpointer {
    /// Every this many ms from the housekeeping tick (0: only at clean shutdown).
    interval_ms: AtomicU64,
    /// When the last periodic write was considered (`i64::MIN`: never).
    last_ms: AtomicI64,
    /// The file as read at start-up: where replicated partitions' HWs start, and the entries
    /// kept for partitions that are offline (no log to ask).
    at_open: HighWatermarks,
    /// The entries last written; held while writing, so writes never interleave.
    written: Mutex<Option<HighWatermarks>>,
}

impl HwCheckpointer {
    pub(crate) fn open(data_dir: &Path) -> HwCheckpointer {
        HwCheckpointer {
            interval_ms: AtomicU64::new(HW_CHECKPOINT_INTERVAL_MS_DEFAULT),
            last_ms: AtomicI64::new(i64::MIN),
            at_open: read_or_empty(data_dir),
            written: Mutex::new(None),
        }
    }
}

impl ReplicaManager {
    /// Set `replica.high.watermark.checkpoint.interval.ms` (start-up; 0 = only at shutdown).
    pub fn set_hw_checkpoint_interval_ms(&self, interval_ms: u64) {
        self.hw_checkpoint
            .interval_ms
            .store(interval_ms, Ordering::Relaxed);
    }

    /// Where partition `index` of `topic` starts its high watermark: at the log end when this
    /// broker is alone in its ISR, else at the checkpointed one (never past the log end).
    pub(crate) fn open_high_watermark(
        &self,
        topic: &str,
        index: i32,
        state: &PartitionState,
    ) -> OpenHighWatermark {
        if state.isr.as_slice() == [self.metadata.node_id()] {
            return OpenHighWatermark::LogEnd;
        }
        let key = (topic.to_string(), index);
        OpenHighWatermark::Checkpointed(self.hw_checkpoint.at_open.get(&key).copied())
    }

    /// The housekeeping tick: write the checkpoint when the interval has passed and a high
    /// watermark moved since the last write.
    pub(crate) fn maybe_checkpoint_high_watermarks(&self, now_ms: i64) {
        let cp = &self.hw_checkpoint;
        let interval_ms = i64::try_from(cp.interval_ms.load(Ordering::Relaxed)).unwrap_or(i64::MAX);
        let last_ms = cp.last_ms.load(Ordering::Relaxed);
        if interval_ms == 0 || (last_ms != i64::MIN && now_ms.saturating_sub(last_ms) < interval_ms)
        {
            return;
        }
        cp.last_ms.store(now_ms, Ordering::Relaxed);
        self.write_hw_checkpoint(self.high_watermarks());
    }

    /// Every hosted partition's high watermark now (offline ones keep their start-up entry).
    pub(crate) fn high_watermarks(&self) -> HighWatermarks {
        let mut out = HighWatermarks::new();
        for p in self.all_partitions() {
            let key = (p.topic.to_string(), p.index);
            let hw = match p.offline_reason() {
                Some(_) => self.hw_checkpoint.at_open.get(&key).copied(),
                None => p.high_watermark().ok(),
            };
            if let Some(hw) = hw {
                out.insert(key, hw);
            }
        }
        out
    }

    /// Write `entries` unless they are what the file already holds. A failure is logged (the
    /// previous file stays whole) and retried at the next interval.
    pub(crate) fn write_hw_checkpoint(&self, entries: HighWatermarks) {
        let mut written = self.hw_checkpoint.written.lock();
        if written.as_ref() == Some(&entries) {
            return;
        }
        match write(&self.data_dir, &entries) {
            Ok(()) => *written = Some(entries),
            Err(e) => {
                tracing::error!(path = %self.data_dir.join(HW_CHECKPOINT_FILE).display(), error = %e, "cannot write the high-watermark checkpoint")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries() -> HighWatermarks {
        HighWatermarks::from([
            (("orders-v2".to_string(), 3), 1234),
            (("__consumer_offsets".to_string(), 0), 7),
            (("t".to_string(), 10), 0),
        ])
    }

    #[test]
    fn the_file_round_trips_in_kafkas_format() {
        let dir = tempfile::tempdir().unwrap();
        assert!(read(dir.path()).unwrap().is_none());
        write(dir.path(), &entries()).unwrap();
        let text = fs::read_to_string(dir.path().join(HW_CHECKPOINT_FILE)).unwrap();
        assert_eq!(
            text,
            "0\n3\n__consumer_offsets 0 7\norders-v2 3 1234\nt 10 0\n"
        );
        assert_eq!(read(dir.path()).unwrap(), Some(entries()));
        assert!(
            !dir.path()
                .join(format!("{HW_CHECKPOINT_FILE}.tmp"))
                .exists()
        );
        // A rewrite replaces the whole file.
        write(dir.path(), &HighWatermarks::new()).unwrap();
        assert_eq!(read(dir.path()).unwrap(), Some(HighWatermarks::new()));
    }

    #[test]
    fn a_file_kafka_wrote_is_read() {
        // Kafka's writer: version, size, then `topic partition offset`, one per line.
        let parsed = parse("0\n2\nfoo 0 42\nbar-baz 12 9000000000\n").unwrap();
        assert_eq!(parsed[&("foo".to_string(), 0)], 42);
        assert_eq!(parsed[&("bar-baz".to_string(), 12)], 9_000_000_000);
    }

    #[test]
    fn damaged_files_are_errors_not_panics() {
        for bad in [
            "",
            "1\n0\n",
            "x\n0\n",
            "0\n",
            "0\nmany\n",
            "0\n2\nt 0 1\n",
            "0\n1\nt 0 1\nt 1 2\n",
            "0\n1\nt 0\n",
            "0\n1\nt 0 1 2\n",
            "0\n1\nt -1 5\n",
            "0\n1\nt 0 -5\n",
            "0\n1\nt zero 5\n",
            "0\n2\nt 0 1\nt 0 2\n",
            "0\n99999999999999999999\n",
            "0\n1048577\n",
        ] {
            assert!(parse(bad).is_err(), "{bad:?} parsed");
        }
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join(HW_CHECKPOINT_FILE), [0xff, 0xfe, b'\n']).unwrap();
        assert!(matches!(
            read(dir.path()),
            Err(HwCheckpointError::Malformed { .. })
        ));
        assert!(read_or_empty(dir.path()).is_empty());
        fs::write(dir.path().join(HW_CHECKPOINT_FILE), "0\n1\nt 0 x\n").unwrap();
        assert!(read_or_empty(dir.path()).is_empty());
    }

    proptest::proptest! {
        #[test]
        fn parse_never_panics(text in "\\PC{0,200}") {
            let _ = parse(&text);
        }

        #[test]
        fn any_entries_round_trip(
            raw in proptest::collection::btree_map(
                ("[a-zA-Z0-9._-]{1,20}", 0i32..10_000), 0i64..i64::MAX, 0..50)
        ) {
            proptest::prop_assert_eq!(parse(&format(&raw)).unwrap(), raw);
        }
    }
}
