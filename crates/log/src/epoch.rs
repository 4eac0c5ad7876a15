//! Leader-epoch cache: `(epoch, start offset)` pairs, persisted in `leader-epoch-checkpoint`
//! (Kafka's format), used by OffsetForLeaderEpoch and follower truncation.

use std::io;
use std::path::{Path, PathBuf};

use crate::checkpoint;
use crate::segment::Segment;

#[derive(Debug)]
pub struct LeaderEpochCache {
    dir: PathBuf,
    /// Strictly increasing epochs with non-decreasing start offsets.
    entries: Vec<(i32, i64)>,
    /// The file still holds entries that opening the log truncated away in memory only; the
    /// next assignment writes the list even when it adds nothing.
    stale_on_disk: bool,
    /// Entries were assigned in memory only (`assign_deferred`, recovery): the file is written
    /// before the log's recovery point checkpoint next moves (`persist_deferred`).
    deferred: bool,
}

impl LeaderEpochCache {
    pub fn load(dir: &Path) -> io::Result<LeaderEpochCache> {
        let mut entries: Vec<(i32, i64)> = Vec::new();
        let bad = |why: &str| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "damaged checkpoint {}: {why}",
                    dir.join(checkpoint::LEADER_EPOCH_FILE).display()
                ),
            )
        };
        if let Some(rows) = checkpoint::read_entries(dir, checkpoint::LEADER_EPOCH_FILE)? {
            for row in rows {
                let [epoch, offset] = row[..] else {
                    return Err(bad("an entry is not `epoch offset`"));
                };
                let epoch = i32::try_from(epoch).map_err(|_| bad("epoch out of range"))?;
                let ordered = entries
                    .last()
                    .is_none_or(|&(e, o)| epoch > e && offset >= o);
                if epoch < 0 || offset < 0 || !ordered {
                    return Err(bad("entries are not increasing epochs and offsets"));
                }
                entries.push((epoch, offset));
            }
        }
        Ok(LeaderEpochCache {
            dir: dir.to_path_buf(),
            entries,
            stale_on_disk: false,
            deferred: false,
        })
    }

    /// Rebuild the cache from the partition leader epochs of the batches in `segments` (oldest
    /// first) and write it: each epoch starts at the first batch carrying it. Used when the
    /// checkpoint is damaged; costs a walk of every batch header.
    pub(crate) fn rebuild<'a>(
        dir: &Path,
        segments: impl Iterator<Item = &'a Segment>,
    ) -> io::Result<LeaderEpochCache> {
        let mut entries: Vec<(i32, i64)> = Vec::new();
        for seg in segments {
            seg.for_each_batch_from(seg.base_offset(), |view| {
                let epoch = view.partition_leader_epoch();
                if epoch >= 0 && entries.last().is_none_or(|&(e, _)| epoch > e) {
                    entries.push((epoch, view.base_offset()));
                }
            });
        }
        let mut cache = LeaderEpochCache {
            dir: dir.to_path_buf(),
            entries,
            stale_on_disk: false,
            deferred: false,
        };
        cache.persist()?;
        Ok(cache)
    }

    fn persist(&mut self) -> io::Result<()> {
        self.stale_on_disk = false;
        self.deferred = false;
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
        if self.assign_in_memory(epoch, start_offset) {
            self.persist()?;
        }
        Ok(())
    }

    /// [`assign`](Self::assign) without writing the file now: for an epoch that begins at the log
    /// end with no batch yet (a new leadership). The entry is written before the recovery point
    /// checkpoint next moves past it ([`persist_deferred`](Self::persist_deferred)); a crash before
    /// that loses only entries no flushed batch depends on, and the unflushed tail's epochs are
    /// re-derived from its batches at open ([`recover_from_batches`](Self::recover_from_batches)).
    /// So a broker that takes leadership of many partitions at start-up does not fsync a file
    /// and a directory per partition (Kafka's KAFKA-15046 likewise moved this flush off the path).
    pub fn assign_deferred(&mut self, epoch: i32, start_offset: i64) {
        if self.assign_in_memory(epoch, start_offset) {
            self.deferred = true;
        }
    }

    /// Write the entries `assign_deferred` or recovery kept in memory, if any.
    pub fn persist_deferred(&mut self) -> io::Result<()> {
        if self.deferred {
            self.persist()?;
        }
        Ok(())
    }

    /// After an unclean open: assign the epochs of the batches at or after `from_offset` (the
    /// tail above the recovery point, whose epoch entries may not have reached the file).
    pub(crate) fn recover_from_batches<'a>(
        &mut self,
        segments: impl Iterator<Item = &'a Segment>,
        from_offset: i64,
    ) {
        for seg in segments {
            if seg.next_offset() <= from_offset {
                continue;
            }
            seg.for_each_batch_from(seg.base_offset().max(from_offset), |view| {
                let epoch = view.partition_leader_epoch();
                if view.base_offset() >= from_offset
                    && self.assign_in_memory(epoch, view.base_offset())
                {
                    self.deferred = true;
                }
            });
        }
    }

    /// The entry list after assigning `epoch` at `start_offset`; whether the file needs writing.
    fn assign_in_memory(&mut self, epoch: i32, start_offset: i64) -> bool {
        if epoch < 0 {
            return false;
        }
        match self.entries.last() {
            // Appends go on in an epoch the file may no longer describe correctly (it can
            // still name a later epoch that opening the log truncated away): rewrite it once.
            Some((latest, _)) if *latest >= epoch => return self.stale_on_disk,
            _ => {}
        }
        // Entries with a start offset at or after the new one are superseded.
        while matches!(self.entries.last(), Some((_, o)) if *o >= start_offset) {
            self.entries.pop();
        }
        self.entries.push((epoch, start_offset));
        true
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
        if self.drop_from_end(offset) {
            self.persist()?;
        }
        Ok(())
    }

    /// Log start moved to `offset`: entries wholly below it collapse into one starting there.
    pub fn truncate_from_start(&mut self, offset: i64) -> io::Result<()> {
        if self.collapse_below(offset) {
            self.persist()?;
        }
        Ok(())
    }

    /// Both truncations, to the bounds of a log being opened, in memory only. The file may keep
    /// entries past the log's ends: every open repeats these truncations, and the next
    /// assignment (even one that adds nothing, see `stale_on_disk`) writes the whole list. Kafka likewise does not fsync this truncation while loading a log
    /// (`truncateFromEndAsyncFlush`); not writing at all means an idle partition's epoch entry
    /// (an epoch that began at the log end, with no records yet) costs no file write per restart.
    pub fn truncate_to_log_on_open(&mut self, log_start_offset: i64, log_end_offset: i64) {
        let dropped = self.drop_from_end(log_end_offset);
        let collapsed = self.collapse_below(log_start_offset);
        self.stale_on_disk |= dropped || collapsed;
    }

    fn drop_from_end(&mut self, offset: i64) -> bool {
        let before = self.entries.len();
        self.entries.retain(|(_, o)| *o < offset);
        self.entries.len() != before
    }

    fn collapse_below(&mut self, offset: i64) -> bool {
        let below = self.entries.iter().filter(|(_, o)| *o <= offset).count();
        if below == 0 {
            return false;
        }
        let keep_epoch = self.entries[below - 1].0;
        let changed = below > 1 || self.entries[0].1 != offset;
        self.entries.drain(..below - 1);
        self.entries[0] = (keep_epoch, offset);
        changed
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

    #[test]
    fn truncation_on_open_writes_nothing_until_the_next_assignment() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join(checkpoint::LEADER_EPOCH_FILE);
        let mut c = LeaderEpochCache::load(dir.path()).unwrap();
        c.assign(0, 0).unwrap();
        c.assign(1, 100).unwrap();
        let inode = |p: &Path| std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(p).unwrap());
        let before = inode(&file);
        // The log came back with its end at 50 (the epoch-1 records were lost): memory only.
        let mut c = LeaderEpochCache::load(dir.path()).unwrap();
        c.truncate_to_log_on_open(0, 50);
        assert_eq!(c.entries(), &[(0, 0)]);
        assert_eq!(inode(&file), before, "opening wrote the checkpoint");
        // Appends continue in epoch 0: the stale file (naming epoch 1 at 100) is rewritten once.
        c.assign(0, 50).unwrap();
        assert_ne!(inode(&file), before);
        assert_eq!(
            LeaderEpochCache::load(dir.path()).unwrap().entries(),
            &[(0, 0)]
        );
        let rewritten = inode(&file);
        c.assign(0, 60).unwrap();
        assert_eq!(inode(&file), rewritten, "a current file is not rewritten");
        // An idle partition: its epoch began at the (empty) log end and is dropped on open
        // without a write; the first append assigns it again.
        let idle = tempfile::tempdir().unwrap();
        let mut c = LeaderEpochCache::load(idle.path()).unwrap();
        c.assign(0, 0).unwrap();
        let idle_file = idle.path().join(checkpoint::LEADER_EPOCH_FILE);
        let before = inode(&idle_file);
        let mut c = LeaderEpochCache::load(idle.path()).unwrap();
        c.truncate_to_log_on_open(0, 0);
        assert!(c.entries().is_empty());
        assert_eq!(inode(&idle_file), before);
        c.assign(0, 0).unwrap();
        assert_eq!(
            LeaderEpochCache::load(idle.path()).unwrap().entries(),
            &[(0, 0)]
        );
    }
}
