//! The Raft log of one voter in files (`<dir>/raft/`), so a restarted voter keeps its vote and
//! its log, as Raft's safety needs:
//!
//! - `log`: one frame per entry (`[len][crc32c][body]`, [`crate::quorum::files`]), body =
//!   `[index: u64][term: u64][leader: u64][kind: u8]` then nothing (blank), `[proposer: u64]
//!   [seq: u64][count: u32]` + `count` × `[len: u32][record]` (a batch) or the membership as
//!   JSON. Appended and `fdatasync`ed before the append is reported flushed. Truncating a
//!   conflicting suffix cuts the file at that entry and fsyncs. Purging writes `purged` first,
//!   then rewrites the retained entries to `log.tmp` and renames it over `log`; a crash in
//!   between leaves entries at or below `purged`, skipped on open.
//! - `vote`, `purged`: JSON in checked files (temp file, fsync, rename, directory fsync)
//!   written before the call returns.
//! - `committed`: the commit index as JSON, renamed in without fsyncs. Raft keeps it in volatile
//!   state: on disk it only lets a restarted voter re-apply its committed log before it hears
//!   from a leader. A stale one re-applies less (the leader's next commit applies the rest); a
//!   damaged one (a crash before the data reached the disk) reads as none.
//!
//! Opening cuts a torn or corrupt tail off `log` (an append that was never reported flushed)
//! and refuses a log whose indexes go back or a damaged checked file. The file is the source of truth: in
//! memory are each entry's log id and file offset (a few dozen bytes per entry, and the log is
//! bounded by snapshots, see [`super::SNAPSHOT_LOGS_SINCE_LAST`]) and the last
//! [`LOG_CACHE_ENTRIES_MAX`] entries themselves; older ones are read back from the file.

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::ops::RangeBounds;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use openraft::{CommittedLeaderId, Entry, EntryPayload, LogId, Vote};

use super::{Batch, TypeConfig};
use crate::quorum::NodeId;
use crate::quorum::files::{
    FRAME_BYTES_MAX, FrameLog, decode_proposal, encode_proposal, frame, frame_at, fsync_dir,
    invalid, open_frame_log, read_checked, write_checked, write_checked_unsynced,
};
use crate::records::{Reader, RecordError};

/// Entries kept decoded in memory (the newest); the rest are read from the file when asked.
pub const LOG_CACHE_ENTRIES_MAX: usize = 1024;
const LOG_FILE: &str = "log";
const VOTE_FILE: &str = "vote";
const COMMITTED_FILE: &str = "committed";
const PURGED_FILE: &str = "purged";
const INCARNATION_FILE: &str = "incarnation";

const KIND_BLANK: u8 = 0;
const KIND_NORMAL: u8 = 1;
const KIND_MEMBERSHIP: u8 = 2;

/// Where an entry is in the file.
#[derive(Debug, Clone, Copy)]
struct Located {
    log_id: LogId<NodeId>,
    offset: u64,
    frame_len: u64,
}

/// One voter's Raft log, vote and commit index on disk.
#[derive(Debug)]
pub struct RaftLogFile {
    dir: PathBuf,
    file: File,
    /// Length of the good prefix of `log`, where the next append goes.
    end: u64,
    entries: BTreeMap<u64, Located>,
    cache: BTreeMap<u64, Entry<TypeConfig>>,
    vote: Option<Vote<NodeId>>,
    committed: Option<LogId<NodeId>>,
    last_purged: Option<LogId<NodeId>>,
}

pub(crate) fn encode_entry(entry: &Entry<TypeConfig>) -> io::Result<Vec<u8>> {
    let mut body = Vec::new();
    body.extend_from_slice(&entry.log_id.index.to_be_bytes());
    body.extend_from_slice(&entry.log_id.leader_id.term.to_be_bytes());
    body.extend_from_slice(&entry.log_id.leader_id.node_id.to_be_bytes());
    match &entry.payload {
        EntryPayload::Blank => body.push(KIND_BLANK),
        EntryPayload::Normal(batch) => {
            body.push(KIND_NORMAL);
            encode_proposal(&mut body, batch.proposer, batch.seq, &batch.records)?;
        }
        EntryPayload::Membership(m) => {
            body.push(KIND_MEMBERSHIP);
            body.extend_from_slice(&serde_json::to_vec(m).map_err(invalid)?);
        }
    }
    if body.len() > FRAME_BYTES_MAX {
        return Err(invalid(format!("a raft entry of {} bytes", body.len())));
    }
    Ok(body)
}

pub(crate) fn decode_entry(body: &[u8]) -> Result<Entry<TypeConfig>, RecordError> {
    let mut r = Reader(body);
    let index = r.i64()? as u64;
    let term = r.i64()? as u64;
    let leader = r.i64()? as u64;
    let log_id = LogId::new(CommittedLeaderId::new(term, leader), index);
    let payload = match r.u8()? {
        KIND_BLANK => EntryPayload::Blank,
        KIND_NORMAL => {
            let (proposer, seq, records) = decode_proposal(&mut r)?;
            EntryPayload::Normal(Batch {
                proposer,
                seq,
                records,
            })
        }
        KIND_MEMBERSHIP => EntryPayload::Membership(serde_json::from_slice(r.0).map_err(|_| {
            RecordError::InvalidTag {
                what: "raft membership",
                tag: KIND_MEMBERSHIP,
            }
        })?),
        tag => {
            return Err(RecordError::InvalidTag {
                what: "raft entry kind",
                tag,
            });
        }
    };
    Ok(Entry { log_id, payload })
}

/// A checked JSON file's value, `None` when there is none.
fn read_json<T: serde::de::DeserializeOwned>(dir: &Path, name: &str) -> io::Result<Option<T>> {
    let Some(bytes) = read_checked(&dir.join(name))? else {
        return Ok(None);
    };
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|e| invalid(format!("{}: {e}", dir.join(name).display())))
}

fn write_json<T: serde::Serialize>(dir: &Path, name: &str, value: &T) -> io::Result<()> {
    write_checked(dir, name, &serde_json::to_vec(value).map_err(invalid)?)
}

/// Count this start in `dir` and return how many starts came before it: a voter numbers its
/// proposals from `incarnation << 32`, so a batch it proposed before a restart is never taken
/// for one it proposes after.
pub fn next_incarnation(dir: &Path) -> io::Result<u64> {
    fs::create_dir_all(dir)?;
    let before: u64 = read_json(dir, INCARNATION_FILE)?.unwrap_or(0);
    write_json(dir, INCARNATION_FILE, &(before + 1))?;
    Ok(before)
}

impl RaftLogFile {
    /// Open (or create) the Raft log in `dir`: read the vote, commit index and purge point,
    /// index the log's entries and cut off a torn tail.
    pub fn open(dir: &Path) -> io::Result<RaftLogFile> {
        fs::create_dir_all(dir)?;
        let vote = read_json(dir, VOTE_FILE)?;
        let committed = read_json(dir, COMMITTED_FILE).unwrap_or_else(|error| {
            tracing::warn!(%error, "raft log: ignoring a damaged commit index");
            None
        });
        let last_purged: Option<LogId<NodeId>> = read_json(dir, PURGED_FILE)?;
        let FrameLog { frames, file, end } = open_frame_log(
            dir,
            LOG_FILE,
            "raft log",
            OpenOptions::new().create(true).append(true).read(true),
            decode_entry,
        )?;
        let mut log = RaftLogFile {
            dir: dir.to_path_buf(),
            file,
            end,
            entries: BTreeMap::new(),
            cache: BTreeMap::new(),
            vote,
            committed,
            last_purged,
        };
        log.index_frames(frames, end)?;
        tracing::info!(
            entries = log.entries.len(),
            last_purged = ?log.last_purged.map(|l| l.index),
            "raft log loaded"
        );
        Ok(log)
    }

    /// Fill the index from the frames read on open, skipping what a purge already covers.
    fn index_frames(&mut self, frames: Vec<(u64, Entry<TypeConfig>)>, end: u64) -> io::Result<()> {
        let purged = self.last_purged.map(|l| l.index);
        let offsets: Vec<u64> = frames.iter().map(|(at, _)| *at).chain([end]).collect();
        for (i, (offset, entry)) in frames.into_iter().enumerate() {
            let index = entry.log_id.index;
            if purged.is_some_and(|p| index <= p) {
                continue; // a crash between writing `purged` and rewriting the log
            }
            if let Some(after) = self.next_index()
                && index < after
            {
                return Err(invalid(format!(
                    "raft log: entry {index} after entry {}",
                    after - 1
                )));
            }
            let located = Located {
                log_id: entry.log_id,
                offset,
                frame_len: offsets[i + 1] - offset,
            };
            self.entries.insert(index, located);
            self.cache_insert(entry);
        }
        Ok(())
    }

    fn cache_insert(&mut self, entry: Entry<TypeConfig>) {
        self.cache.insert(entry.log_id.index, entry);
        while self.cache.len() > LOG_CACHE_ENTRIES_MAX {
            self.cache.pop_first();
        }
    }

    /// The lowest index the next append may have, when the log or a purge fixes one (Raft
    /// appends the one right after the last; openraft's storage suite also appends past a gap).
    fn next_index(&self) -> Option<u64> {
        self.last_log_id().map(|l| l.index + 1)
    }

    pub fn last_purged(&self) -> Option<LogId<NodeId>> {
        self.last_purged
    }

    /// The last entry's log id, or the purge point when every entry is purged.
    pub fn last_log_id(&self) -> Option<LogId<NodeId>> {
        self.entries
            .values()
            .next_back()
            .map(|l| l.log_id)
            .or(self.last_purged)
    }

    pub fn vote(&self) -> Option<Vote<NodeId>> {
        self.vote
    }

    pub fn committed(&self) -> Option<LogId<NodeId>> {
        self.committed
    }

    /// Persist the vote (fsynced before returning).
    pub fn save_vote(&mut self, vote: &Vote<NodeId>) -> io::Result<()> {
        write_json(&self.dir, VOTE_FILE, vote)?;
        self.vote = Some(*vote);
        Ok(())
    }

    /// Keep the commit index on disk as a hint (not fsynced, see the module doc).
    pub fn save_committed(&mut self, committed: Option<LogId<NodeId>>) -> io::Result<()> {
        let body = serde_json::to_vec(&committed).map_err(invalid)?;
        write_checked_unsynced(&self.dir, COMMITTED_FILE, &body)?;
        self.committed = committed;
        Ok(())
    }

    /// The entries with indexes in `range`, from the cache or the file.
    pub fn entries<RB: RangeBounds<u64>>(&self, range: RB) -> io::Result<Vec<Entry<TypeConfig>>> {
        let mut out = Vec::new();
        for (index, located) in self.entries.range(range) {
            match self.cache.get(index) {
                Some(entry) => out.push(entry.clone()),
                None => out.push(self.read_entry(located)?),
            }
        }
        Ok(out)
    }

    fn read_entry(&self, located: &Located) -> io::Result<Entry<TypeConfig>> {
        let mut bytes = vec![0; located.frame_len as usize];
        self.file.read_exact_at(&mut bytes, located.offset)?;
        let damaged = || invalid(format!("raft log: entry {} damaged", located.log_id.index));
        let (body, _) = frame_at(&bytes).ok_or_else(damaged)?;
        let entry = decode_entry(body).map_err(|_| damaged())?;
        if entry.log_id != located.log_id {
            return Err(damaged());
        }
        Ok(entry)
    }

    /// Append `entries` (each after the last; those at or below the purge point are dropped) and
    /// fsync them before returning.
    pub fn append(&mut self, entries: Vec<Entry<TypeConfig>>) -> io::Result<()> {
        let mut buf = Vec::new();
        let mut located = Vec::with_capacity(entries.len());
        let purged = self.last_purged.map(|l| l.index);
        // Already in a snapshot: openraft's start-up purges a log behind its state machine, and
        // its storage suite then appends there.
        let entries: Vec<_> = entries
            .into_iter()
            .filter(|e| purged.is_none_or(|p| e.log_id.index > p))
            .collect();
        let mut lowest = self.next_index();
        for entry in &entries {
            let index = entry.log_id.index;
            if lowest.is_some_and(|l| index < l) {
                return Err(invalid(format!(
                    "raft log: append of entry {index} before entry {lowest:?} (truncate first)"
                )));
            }
            lowest = Some(index + 1);
            let frame = frame(&encode_entry(entry)?);
            located.push(Located {
                log_id: entry.log_id,
                offset: self.end + buf.len() as u64,
                frame_len: frame.len() as u64,
            });
            buf.extend_from_slice(&frame);
        }
        self.file.write_all(&buf)?;
        self.file.sync_data()?;
        self.end += buf.len() as u64;
        for (l, entry) in located.into_iter().zip(entries) {
            self.entries.insert(l.log_id.index, l);
            self.cache_insert(entry);
        }
        Ok(())
    }

    /// Delete the entries from `index` on (a conflicting suffix).
    pub fn truncate(&mut self, index: u64) -> io::Result<()> {
        let Some(first) = self.entries.range(index..).next().map(|(_, l)| *l) else {
            return Ok(());
        };
        self.file.set_len(first.offset)?;
        self.file.sync_data()?;
        self.end = first.offset;
        self.entries.split_off(&index);
        self.cache.split_off(&index);
        Ok(())
    }

    /// Delete the entries up to and including `log_id` (already in a snapshot).
    pub fn purge(&mut self, log_id: LogId<NodeId>) -> io::Result<()> {
        assert!(
            self.last_purged.is_none_or(|p| p.index <= log_id.index),
            "raft log: purge point moves back"
        );
        write_json(&self.dir, PURGED_FILE, &log_id)?;
        self.last_purged = Some(log_id);
        self.entries = self.entries.split_off(&(log_id.index + 1));
        self.cache = self.cache.split_off(&(log_id.index + 1));
        let start = self.entries.values().next().map_or(self.end, |l| l.offset);
        self.rewrite_from(start)
    }

    /// Replace `log` by its bytes from `start` on (temp file, fsync, rename, directory fsync).
    fn rewrite_from(&mut self, start: u64) -> io::Result<()> {
        let mut kept = vec![0; (self.end - start) as usize];
        self.file.read_exact_at(&mut kept, start)?;
        let tmp = self.dir.join(format!("{LOG_FILE}.tmp"));
        let mut f = File::create(&tmp)?;
        f.write_all(&kept)?;
        f.sync_all()?;
        drop(f);
        fs::rename(&tmp, self.dir.join(LOG_FILE))?;
        fsync_dir(&self.dir)?;
        self.file = OpenOptions::new()
            .append(true)
            .read(true)
            .open(self.dir.join(LOG_FILE))?;
        self.end -= start;
        for l in self.entries.values_mut() {
            l.offset -= start;
        }
        Ok(())
    }
}

#[cfg(test)]
#[path = "log_file_tests.rs"]
mod tests;
