//! Leader-epoch cache: `(epoch, start offset)` pairs, persisted in `leader-epoch-checkpoint`
//! (Kafka's format), used by OffsetForLeaderEpoch and follower truncation.

use std::io;
use std::path::{Path, PathBuf};

use crate::checkpoint;

#[derive(Debug)]
pub struct LeaderEpochCache {
    dir: PathBuf,
    /// Strictly increasing epochs with non-decreasing start offsets.
    entries: Vec<(i32, i64)>,
}

impl LeaderEpochCache {
    pub fn load(dir: &Path) -> io::Result<LeaderEpochCache> {
        let mut entries = Vec::new();
        if let Some(rows) = checkpoint::read_entries(dir, checkpoint::LEADER_EPOCH_FILE)? {
            for row in rows {
                if let [epoch, offset] = row[..] {
                    entries.push((epoch as i32, offset));
                } else {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        "malformed leader-epoch-checkpoint entry",
                    ));
                }
            }
        }
        Ok(LeaderEpochCache {
            dir: dir.to_path_buf(),
            entries,
        })
    }

    fn persist(&self) -> io::Result<()> {
        let rows: Vec<String> = self
            .entries
            .iter()
            .map(|(e, o)| format!("{e} {o}"))
            .collect();
        checkpoint::write_entries(&self.dir, checkpoint::LEADER_EPOCH_FILE, &rows)
    }

    pub fn entries(&self) -> &[(i32, i64)] {
        &self.entries
    }

    pub fn latest_epoch(&self) -> Option<i32> {
        self.entries.last().map(|(e, _)| *e)
    }

    /// Record that `epoch` starts at `start_offset` (no-op if it is already the latest epoch; an
    /// older epoch than the latest is ignored, as Kafka does).
    pub fn assign(&mut self, epoch: i32, start_offset: i64) -> io::Result<()> {
        if epoch < 0 {
            return Ok(());
        }
        match self.entries.last() {
            Some((latest, _)) if *latest >= epoch => return Ok(()),
            _ => {}
        }
        // Entries with a start offset at or after the new one are superseded.
        while matches!(self.entries.last(), Some((_, o)) if *o >= start_offset) {
            self.entries.pop();
        }
        self.entries.push((epoch, start_offset));
        self.persist()
    }

    /// Kafka's `endOffsetFor`: `(epoch, end offset)` for the requested epoch, or `None` when it is
    /// unknown (larger than every epoch, or no epochs).
    pub fn end_offset_for(&self, requested: i32, log_end_offset: i64) -> Option<(i32, i64)> {
        let latest = self.latest_epoch()?;
        if requested == latest {
            return Some((latest, log_end_offset));
        }
        let higher = self.entries.iter().find(|(e, _)| *e > requested)?;
        match self.entries.iter().rev().find(|(e, _)| *e <= requested) {
            Some((floor, _)) => Some((*floor, higher.1)),
            None => Some((requested, higher.1)),
        }
    }

    /// Remove entries starting at or after `offset` (log truncated to `offset`).
    pub fn truncate_from_end(&mut self, offset: i64) -> io::Result<()> {
        let before = self.entries.len();
        self.entries.retain(|(_, o)| *o < offset);
        if self.entries.len() != before {
            self.persist()?;
        }
        Ok(())
    }

    /// Log start moved to `offset`: entries wholly below it collapse into one starting there.
    pub fn truncate_from_start(&mut self, offset: i64) -> io::Result<()> {
        let below = self.entries.iter().filter(|(_, o)| *o <= offset).count();
        if below == 0 {
            return Ok(());
        }
        let keep_epoch = self.entries[below - 1].0;
        let changed = below > 1 || self.entries[0].1 != offset;
        self.entries.drain(..below - 1);
        self.entries[0] = (keep_epoch, offset);
        if changed {
            self.persist()?;
        }
        Ok(())
    }

    pub fn clear(&mut self) -> io::Result<()> {
        self.entries.clear();
        self.persist()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn assign_lookup_truncate_reload() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = LeaderEpochCache::load(dir.path()).unwrap();
        assert_eq!(c.end_offset_for(0, 10), None);
        c.assign(1, 0).unwrap();
        c.assign(1, 5).unwrap();
        c.assign(3, 10).unwrap();
        c.assign(5, 20).unwrap();
        assert_eq!(c.end_offset_for(5, 30), Some((5, 30)));
        assert_eq!(c.end_offset_for(3, 30), Some((3, 20)));
        assert_eq!(c.end_offset_for(4, 30), Some((3, 20)));
        assert_eq!(c.end_offset_for(0, 30), Some((0, 0)));
        assert_eq!(c.end_offset_for(9, 30), None);
        c.truncate_from_end(15).unwrap();
        assert_eq!(c.latest_epoch(), Some(3));
        let c2 = LeaderEpochCache::load(dir.path()).unwrap();
        assert_eq!(c2.entries(), &[(1, 0), (3, 10)]);
        let mut c3 = c2;
        c3.truncate_from_start(12).unwrap();
        assert_eq!(c3.entries(), &[(3, 12)]);
    }
}
