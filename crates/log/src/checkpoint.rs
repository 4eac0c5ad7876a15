//! Small checkpoint files, in Kafka's text layout: a version line, an entry-count line, then one
//! entry per line. Written atomically (temp file, fsync, rename, fsync of the directory).

use std::fs::{self, File};
use std::io::{self, Write};
use std::path::Path;

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
    let text = match fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let bad = |why: &str| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{}: {why}", path.display()),
        )
    };
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
