//! Small checkpoint files, in Kafka's text layout: a version line, an entry-count line, then one
//! entry per line. Written atomically (temp file, fsync, rename, fsync of the directory).

use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;

/// Current checkpoint format version.
const VERSION: u32 = 0;
/// Bound on entries read from one checkpoint file (a corrupt count never makes us allocate).
const MAX_CHECKPOINT_ENTRIES: usize = 1 << 20;

/// Leader-epoch cache file (Kafka's name).
pub const LEADER_EPOCH_FILE: &str = "leader-epoch-checkpoint";
/// This partition's recovery point: everything below it is flushed to disk.
pub const RECOVERY_POINT_FILE: &str = "recovery-point-offset-checkpoint";
/// This partition's log start offset (moved by DeleteRecords and retention).
pub const LOG_START_FILE: &str = "log-start-offset-checkpoint";
/// Present only while the log is cleanly closed; removed on open.
pub const CLEAN_SHUTDOWN_FILE: &str = ".kafka_cleanshutdown";

/// Write `entries` (each a line of space-separated fields) to `dir/name` atomically.
pub fn write_entries(dir: &Path, name: &str, entries: &[String]) -> io::Result<()> {
    write_entries_inner(dir, name, entries)?;
    sync_dir(dir)
}

/// Write a single offset that only ever grows (the recovery point moving forward): like
/// [`write_offset`] but without the directory fsync. If a crash loses the rename, the previous
/// file (complete, and lower) is read back, which is safe; a *lowered* value must use
/// [`write_offset`].
pub fn write_offset_advancing(dir: &Path, name: &str, offset: i64) -> io::Result<()> {
    write_entries_inner(dir, name, &[offset.to_string()])
}

fn write_entries_inner(dir: &Path, name: &str, entries: &[String]) -> io::Result<()> {
    let tmp = dir.join(format!("{name}.tmp"));
    {
        let mut f = File::create(&tmp)?;
        let mut text = format!("{VERSION}\n{}\n", entries.len());
        for e in entries {
            text.push_str(e);
            text.push('\n');
        }
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
    }
    fs::rename(&tmp, dir.join(name))
}

/// Read the entries of `dir/name`; `Ok(None)` if the file does not exist.
pub fn read_entries(dir: &Path, name: &str) -> io::Result<Option<Vec<Vec<i64>>>> {
    let path = dir.join(name);
    let bytes = match fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(io::Error::new(
                e.kind(),
                format!("cannot read {}: {e}", path.display()),
            ));
        }
    };
    let bad = |why: &str| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("damaged checkpoint {}: {why}", path.display()),
        )
    };
    let text = std::str::from_utf8(&bytes).map_err(|_| bad("not valid UTF-8 text"))?;
    let mut lines = text.lines();
    let version: u32 = lines
        .next()
        .and_then(|l| l.trim().parse().ok())
        .ok_or_else(|| bad("missing version"))?;
    if version != VERSION {
        return Err(bad("unknown version"));
    }
    let count: usize = lines
        .next()
        .and_then(|l| l.trim().parse().ok())
        .ok_or_else(|| bad("missing entry count"))?;
    if count > MAX_CHECKPOINT_ENTRIES {
        return Err(bad("too many entries"));
    }
    let mut out = Vec::with_capacity(count);
    for _ in 0..count {
        let line = lines
            .next()
            .ok_or_else(|| bad("fewer entries than declared"))?;
        let fields: Result<Vec<i64>, _> = line.split_whitespace().map(str::parse).collect();
        out.push(fields.map_err(|_| bad("malformed entry"))?);
    }
    Ok(Some(out))
}

/// Write a single offset.
pub fn write_offset(dir: &Path, name: &str, offset: i64) -> io::Result<()> {
    write_entries(dir, name, &[offset.to_string()])
}

/// Read a single offset (`None` if the file is missing).
pub fn read_offset(dir: &Path, name: &str) -> io::Result<Option<i64>> {
    Ok(read_entries(dir, name)?.and_then(|e| e.first().and_then(|f| f.first().copied())))
}

/// One log's `recovery-point-offset-checkpoint`, shared by the log (which writes it under its
/// lock: on open, truncation and close) and [`RecoveryPointAdvance`]s, which move it forward
/// after the lock is released (the housekeeping tick), so the file's fsync never holds up
/// appends. A write that lowers the value invalidates every advance issued before it.
#[derive(Debug)]
pub struct RecoveryCheckpoint {
    dir: PathBuf,
    state: Mutex<CheckpointState>,
}

#[derive(Debug)]
struct CheckpointState {
    /// The value in the file (`None`: unknown or no file, so the next write syncs the directory).
    written: Option<i64>,
    /// Bumped by every write that lowers the value.
    generation: u64,
}

impl RecoveryCheckpoint {
    pub fn new(dir: &Path, written: Option<i64>) -> Arc<RecoveryCheckpoint> {
        Arc::new(RecoveryCheckpoint {
            dir: dir.to_path_buf(),
            state: Mutex::new(CheckpointState {
                written,
                generation: 0,
            }),
        })
    }

    /// Write `value` now, whichever way it moves (a lowered value with the directory fsync).
    pub fn write(&self, value: i64) -> io::Result<()> {
        let mut st = self.state.lock();
        match st.written {
            Some(w) if value == w => {}
            Some(w) if value > w => write_offset_advancing(&self.dir, RECOVERY_POINT_FILE, value)?,
            _ => {
                write_offset(&self.dir, RECOVERY_POINT_FILE, value)?;
                st.generation += 1;
            }
        }
        st.written = Some(value);
        Ok(())
    }

    /// A write of `value` (which must only move the checkpoint forward) to run later, outside
    /// the log's lock.
    pub fn advance(self: &Arc<Self>, value: i64) -> RecoveryPointAdvance {
        RecoveryPointAdvance {
            checkpoint: Arc::clone(self),
            generation: self.state.lock().generation,
            value,
        }
    }
}

/// A pending forward move of a log's recovery-point checkpoint (from `Log::tick_deferred`):
/// [`RecoveryPointAdvance::write`] after releasing the log's lock. Skipped if the log lowered
/// the checkpoint since (truncation) or a later value is already written.
#[derive(Debug)]
#[must_use = "the checkpoint is written only by `write`"]
pub struct RecoveryPointAdvance {
    checkpoint: Arc<RecoveryCheckpoint>,
    generation: u64,
    value: i64,
}

impl RecoveryPointAdvance {
    /// The recovery point this writes.
    pub fn value(&self) -> i64 {
        self.value
    }

    /// Write the checkpoint (file fsync + rename; the directory only for a first write).
    pub fn write(self) -> io::Result<()> {
        let cp = &self.checkpoint;
        let mut st = cp.state.lock();
        if st.generation != self.generation || st.written.is_some_and(|w| w >= self.value) {
            return Ok(());
        }
        if st.written.is_some() {
            write_offset_advancing(&cp.dir, RECOVERY_POINT_FILE, self.value)?;
        } else {
            write_offset(&cp.dir, RECOVERY_POINT_FILE, self.value)?;
        }
        st.written = Some(self.value);
        Ok(())
    }
}

/// fsync a directory so renames and new files in it are durable.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip() {
        let dir = tempfile::tempdir().unwrap();
        write_entries(dir.path(), "x", &["1 10".into(), "3 42".into()]).unwrap();
        let e = read_entries(dir.path(), "x").unwrap().unwrap();
        assert_eq!(e, vec![vec![1, 10], vec![3, 42]]);
        write_offset(dir.path(), "y", 77).unwrap();
        assert_eq!(read_offset(dir.path(), "y").unwrap(), Some(77));
        assert_eq!(read_offset(dir.path(), "z").unwrap(), None);
        std::fs::write(dir.path().join("w"), "0\n5\n1 2\n").unwrap();
        assert!(read_entries(dir.path(), "w").is_err());
    }
}
