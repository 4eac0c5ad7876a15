//! openraft storage for the metadata log: the Raft log ([`LogStore`]) and the state machine
//! ([`StateMachine`]) that turns committed entries into a [`CommittedLog`].
//!
//! Each lives in memory ([`LogStore::default`], [`StateMachine::default`], for tests) or in a
//! directory ([`LogStore::open`] over a [`RaftLogFile`], [`StateMachine::open`]: the last
//! snapshot in `snapshot`, written before it is reported built or installed, and loaded on
//! open so a restarted voter replays the log after it). Snapshots are the image encoded as
//! records ([`crate::snapshot::Snapshot::encode`]).

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::io::{self, Cursor};
use std::ops::RangeBounds;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use openraft::storage::{LogFlushed, RaftLogStorage, RaftStateMachine};
use openraft::{
    Entry, EntryPayload, LogId, LogState, RaftLogReader, RaftSnapshotBuilder, SnapshotMeta,
    StorageError, StorageIOError, StoredMembership, Vote,
};
use parking_lot::Mutex;

use super::log_file::RaftLogFile;
use super::{Batch, TypeConfig};
use crate::quorum::files::{invalid, read_checked, write_checked};
use crate::quorum::{CommittedLog, NodeId};
use crate::snapshot::Snapshot as MetadataSnapshot;

type Snapshot = openraft::Snapshot<TypeConfig>;
type Meta = SnapshotMeta<NodeId, openraft::BasicNode>;

const SNAPSHOT_FILE: &str = "snapshot";

#[derive(Debug, Default)]
struct MemoryLog {
    vote: Option<Vote<NodeId>>,
    committed: Option<LogId<NodeId>>,
    last_purged: Option<LogId<NodeId>>,
    entries: BTreeMap<u64, Entry<TypeConfig>>,
}

#[derive(Debug)]
enum LogInner {
    Memory(MemoryLog),
    File(RaftLogFile),
}

impl Default for LogInner {
    fn default() -> Self {
        LogInner::Memory(MemoryLog::default())
    }
}

/// The Raft log, shared between the log storage and its readers.
#[derive(Debug, Clone, Default)]
pub struct LogStore {
    inner: Arc<Mutex<LogInner>>,
}

fn write_error(e: io::Error) -> StorageError<NodeId> {
    StorageIOError::write_logs(&e).into()
}

impl LogStore {
    /// The Raft log in `dir` (created if missing).
    pub fn open(dir: &Path) -> io::Result<LogStore> {
        let file = RaftLogFile::open(dir)?;
        Ok(LogStore {
            inner: Arc::new(Mutex::new(LogInner::File(file))),
        })
    }
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + Send>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry<TypeConfig>>, StorageError<NodeId>> {
        match &*self.inner.lock() {
            LogInner::Memory(m) => Ok(m.entries.range(range).map(|(_, e)| e.clone()).collect()),
            LogInner::File(f) => f
                .entries(range)
                .map_err(|e| StorageIOError::read_logs(&e).into()),
        }
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError<NodeId>> {
        let (last_purged_log_id, last_log_id) = match &*self.inner.lock() {
            LogInner::Memory(m) => {
                let last = m.entries.values().next_back().map(|e| e.log_id);
                (m.last_purged, last.or(m.last_purged))
            }
            LogInner::File(f) => (f.last_purged(), f.last_log_id()),
        };
        Ok(LogState {
            last_purged_log_id,
            last_log_id,
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<NodeId>) -> Result<(), StorageError<NodeId>> {
        match &mut *self.inner.lock() {
            LogInner::Memory(m) => m.vote = Some(*vote),
            LogInner::File(f) => f
                .save_vote(vote)
                .map_err(|e| StorageError::from(StorageIOError::write_vote(&e)))?,
        }
        Ok(())
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<NodeId>>, StorageError<NodeId>> {
        Ok(match &*self.inner.lock() {
            LogInner::Memory(m) => m.vote,
            LogInner::File(f) => f.vote(),
        })
    }

    async fn save_committed(
        &mut self,
        committed: Option<LogId<NodeId>>,
    ) -> Result<(), StorageError<NodeId>> {
        match &mut *self.inner.lock() {
            LogInner::Memory(m) => m.committed = committed,
            LogInner::File(f) => f.save_committed(committed).map_err(write_error)?,
        }
        Ok(())
    }

    async fn read_committed(&mut self) -> Result<Option<LogId<NodeId>>, StorageError<NodeId>> {
        Ok(match &*self.inner.lock() {
            LogInner::Memory(m) => m.committed,
            LogInner::File(f) => f.committed(),
        })
    }

    /// On disk (fsynced) before the callback reports the entries flushed.
    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<TypeConfig>,
    ) -> Result<(), StorageError<NodeId>>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + Send,
        I::IntoIter: Send,
    {
        let result = match &mut *self.inner.lock() {
            LogInner::Memory(m) => {
                for entry in entries {
                    m.entries.insert(entry.log_id.index, entry);
                }
                Ok(())
            }
            LogInner::File(f) => f.append(entries.into_iter().collect()),
        };
        match result {
            Ok(()) => {
                callback.log_io_completed(Ok(()));
                Ok(())
            }
            Err(e) => {
                tracing::error!(error = %e, "raft log append failed");
                let storage = write_error(io::Error::new(e.kind(), e.to_string()));
                callback.log_io_completed(Err(e));
                Err(storage)
            }
        }
    }

    async fn truncate(&mut self, log_id: LogId<NodeId>) -> Result<(), StorageError<NodeId>> {
        match &mut *self.inner.lock() {
            LogInner::Memory(m) => drop(m.entries.split_off(&log_id.index)),
            LogInner::File(f) => f.truncate(log_id.index).map_err(write_error)?,
        }
        Ok(())
    }

    async fn purge(&mut self, log_id: LogId<NodeId>) -> Result<(), StorageError<NodeId>> {
        match &mut *self.inner.lock() {
            LogInner::Memory(m) => {
                m.last_purged = Some(log_id);
                m.entries = m.entries.split_off(&(log_id.index + 1));
            }
            LogInner::File(f) => f.purge(log_id).map_err(write_error)?,
        }
        Ok(())
    }
}

#[derive(Debug, Default)]
pub(super) struct SmInner {
    pub(super) last_applied: Option<LogId<NodeId>>,
    pub(super) membership: StoredMembership<NodeId, openraft::BasicNode>,
    pub(super) log: CommittedLog,
    snapshot: Option<(Meta, Vec<u8>)>,
    snapshot_count: u64,
    /// Where the snapshot is kept; `None` in memory.
    dir: Option<PathBuf>,
}

/// The state machine: committed entries become [`CommittedLog`] batches.
#[derive(Debug, Clone, Default)]
pub struct StateMachine {
    pub(super) inner: Arc<Mutex<SmInner>>,
}

fn snapshot_error(e: impl std::error::Error + 'static) -> StorageError<NodeId> {
    StorageIOError::read_snapshot(None, &e).into()
}

/// `snapshot` holds `[meta_len: u32][meta as JSON][snapshot encoding]` in a checked file.
fn write_snapshot_file(dir: &Path, meta: &Meta, data: &[u8]) -> io::Result<()> {
    let meta_json = serde_json::to_vec(meta).map_err(invalid)?;
    let mut body = Vec::with_capacity(4 + meta_json.len() + data.len());
    body.extend_from_slice(&(meta_json.len() as u32).to_be_bytes());
    body.extend_from_slice(&meta_json);
    body.extend_from_slice(data);
    write_checked(dir, SNAPSHOT_FILE, &body)
}

fn read_snapshot_file(dir: &Path) -> io::Result<Option<(Meta, Vec<u8>)>> {
    let path = dir.join(SNAPSHOT_FILE);
    let Some(body) = read_checked(&path)? else {
        return Ok(None);
    };
    let damaged = |what: &str| invalid(format!("{}: {what}", path.display()));
    let len_bytes = body.get(..4).ok_or_else(|| damaged("too short"))?;
    let meta_len = u32::from_be_bytes([len_bytes[0], len_bytes[1], len_bytes[2], len_bytes[3]]);
    let meta_end = 4usize.saturating_add(meta_len as usize);
    let meta_json = body.get(4..meta_end).ok_or_else(|| damaged("short meta"))?;
    let meta: Meta = serde_json::from_slice(meta_json).map_err(|e| damaged(&e.to_string()))?;
    Ok(Some((meta, body[meta_end..].to_vec())))
}

impl StateMachine {
    /// The state machine of the voter whose files are in `dir`: its last snapshot, if any, is
    /// loaded (openraft replays the committed log after it).
    pub fn open(dir: &Path) -> io::Result<StateMachine> {
        std::fs::create_dir_all(dir)?;
        let mut inner = SmInner {
            dir: Some(dir.to_path_buf()),
            ..SmInner::default()
        };
        if let Some((meta, data)) = read_snapshot_file(dir)? {
            let decoded = MetadataSnapshot::decode(&data).map_err(invalid)?;
            inner.log.restore(&decoded).map_err(invalid)?;
            inner.last_applied = meta.last_log_id;
            inner.membership = meta.last_membership.clone();
            tracing::info!(
                last_applied = ?meta.last_log_id.map(|l| l.index),
                "raft snapshot loaded"
            );
            inner.snapshot = Some((meta, data));
        }
        Ok(StateMachine {
            inner: Arc::new(Mutex::new(inner)),
        })
    }
}

impl SmInner {
    /// Keep `meta` + `data` as the current snapshot, on disk first when there is a directory.
    fn keep_snapshot(&mut self, meta: &Meta, data: Vec<u8>) -> io::Result<()> {
        if let Some(dir) = &self.dir {
            write_snapshot_file(dir, meta, &data)?;
        }
        self.snapshot = Some((meta.clone(), data));
        Ok(())
    }
}

fn write_snapshot_error(meta: &Meta, e: io::Error) -> StorageError<NodeId> {
    tracing::error!(error = %e, "raft snapshot write failed");
    StorageIOError::write_snapshot(Some(meta.signature()), &e).into()
}

impl RaftSnapshotBuilder<TypeConfig> for StateMachine {
    async fn build_snapshot(&mut self) -> Result<Snapshot, StorageError<NodeId>> {
        let mut inner = self.inner.lock();
        let data = inner.log.snapshot().encode().map_err(snapshot_error)?;
        inner.snapshot_count += 1;
        let at = inner
            .last_applied
            .map_or((0, 0), |l| (l.leader_id.term, l.index));
        let meta = SnapshotMeta {
            last_log_id: inner.last_applied,
            last_membership: inner.membership.clone(),
            snapshot_id: format!("metadata-{}-{}-{}", at.0, at.1, inner.snapshot_count),
        };
        inner
            .keep_snapshot(&meta, data.clone())
            .map_err(|e| write_snapshot_error(&meta, e))?;
        Ok(Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(data)),
        })
    }
}

impl RaftStateMachine<TypeConfig> for StateMachine {
    type SnapshotBuilder = StateMachine;

    async fn applied_state(
        &mut self,
    ) -> Result<
        (
            Option<LogId<NodeId>>,
            StoredMembership<NodeId, openraft::BasicNode>,
        ),
        StorageError<NodeId>,
    > {
        let inner = self.inner.lock();
        Ok((inner.last_applied, inner.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<()>, StorageError<NodeId>>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + Send,
        I::IntoIter: Send,
    {
        let mut inner = self.inner.lock();
        let mut responses = Vec::new();
        for entry in entries {
            inner.last_applied = Some(entry.log_id);
            match entry.payload {
                EntryPayload::Blank => {}
                EntryPayload::Normal(Batch {
                    proposer,
                    seq,
                    records,
                }) => {
                    let epoch = i32::try_from(entry.log_id.leader_id.term).unwrap_or(i32::MAX);
                    inner.log.append(proposer, seq, records, epoch);
                }
                EntryPayload::Membership(m) => {
                    inner.membership = StoredMembership::new(Some(entry.log_id), m);
                }
            }
            responses.push(());
        }
        Ok(responses)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn begin_receiving_snapshot(
        &mut self,
    ) -> Result<Box<Cursor<Vec<u8>>>, StorageError<NodeId>> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    /// On disk before the image is replaced: a voter restarted after this starts from it.
    async fn install_snapshot(
        &mut self,
        meta: &Meta,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), StorageError<NodeId>> {
        let data = snapshot.into_inner();
        let decoded = MetadataSnapshot::decode(&data).map_err(snapshot_error)?;
        let mut inner = self.inner.lock();
        inner
            .keep_snapshot(meta, data)
            .map_err(|e| write_snapshot_error(meta, e))?;
        inner.log.restore(&decoded).map_err(snapshot_error)?;
        inner.last_applied = meta.last_log_id;
        inner.membership = meta.last_membership.clone();
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot>, StorageError<NodeId>> {
        let inner = self.inner.lock();
        Ok(inner.snapshot.as_ref().map(|(meta, data)| Snapshot {
            meta: meta.clone(),
            snapshot: Box::new(Cursor::new(data.clone())),
        }))
    }
}
