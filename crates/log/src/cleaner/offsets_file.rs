//! `cleaner-offset-checkpoint`, one per data directory, in Kafka's format: `0` (version), the
//! number of entries, then `topic partition offset` lines. The offset is each log's first dirty
//! offset: everything below it was cleaned. Written to a `.tmp` file, fsynced and renamed.

use std::collections::BTreeMap;
use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

pub const CLEANER_CHECKPOINT_FILE: &str = "cleaner-offset-checkpoint";

/// A log's key in the checkpoint: its directory name, `<topic>-<partition>`.
pub fn log_key(log_dir: &Path) -> Option<(PathBuf, String)> {
    let data_dir = log_dir.parent()?.to_path_buf();
    let name = log_dir.file_name()?.to_str()?.to_string();
    Some((data_dir, name))
}

/// Read a data directory's checkpoint: `<topic>-<partition>` → first dirty offset. A missing
/// file is empty; a damaged one is ignored with a warning (logs are then cleaned from their
/// start, which only costs time).
pub fn read(data_dir: &Path) -> BTreeMap<String, i64> {
    let path = data_dir.join(CLEANER_CHECKPOINT_FILE);
    let text = match fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return BTreeMap::new(),
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "cannot read the cleaner checkpoint");
            return BTreeMap::new();
        }
    };
    parse(&text).unwrap_or_else(|| {
        tracing::warn!(path = %path.display(), "ignoring a damaged cleaner checkpoint");
        BTreeMap::new()
    })
}

fn parse(text: &str) -> Option<BTreeMap<String, i64>> {
    let mut lines = text.lines();
    if lines.next()?.trim() != "0" {
        return None;
    }
    let count: usize = lines.next()?.trim().parse().ok()?;
    let mut out = BTreeMap::new();
    for line in lines.take(count) {
        let mut parts = line.split_whitespace();
        let (topic, partition, offset) = (parts.next()?, parts.next()?, parts.next()?);
        let partition: i32 = partition.parse().ok()?;
        out.insert(format!("{topic}-{partition}"), offset.parse().ok()?);
    }
    (out.len() == count).then_some(out)
}

/// Write a data directory's checkpoint (whole file, atomically).
pub fn write(data_dir: &Path, entries: &BTreeMap<String, i64>) -> io::Result<()> {
    let mut text = format!("0\n{}\n", entries.len());
    for (name, offset) in entries {
        let (topic, partition) = name.rsplit_once('-').unwrap_or((name, "0"));
        text.push_str(&format!("{topic} {partition} {offset}\n"));
    }
    let tmp = data_dir.join(format!("{CLEANER_CHECKPOINT_FILE}.tmp"));
    let mut f = fs::File::create(&tmp)?;
    f.write_all(text.as_bytes())?;
    f.sync_all()?;
    fs::rename(&tmp, data_dir.join(CLEANER_CHECKPOINT_FILE))?;
    crate::checkpoint::sync_dir(data_dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_kafkas_format() {
        let dir = tempfile::tempdir().unwrap();
        let mut m = BTreeMap::new();
        m.insert("orders-v2-3".to_string(), 1234);
        m.insert("__consumer_offsets-0".to_string(), 7);
        write(dir.path(), &m).unwrap();
        let text = fs::read_to_string(dir.path().join(CLEANER_CHECKPOINT_FILE)).unwrap();
        assert!(text.starts_with("0\n2\n"));
        assert!(text.contains("orders-v2 3 1234\n"));
        assert_eq!(read(dir.path()), m);
        fs::write(dir.path().join(CLEANER_CHECKPOINT_FILE), "0\n5\nx 1 2\n").unwrap();
        assert!(read(dir.path()).is_empty());
    }
}
