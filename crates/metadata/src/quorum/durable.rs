//! One voter whose committed log survives restarts and crashes: what a broker started without
//! `--controller-quorum-voters` runs. It behaves as [`super::LocalQuorum`] (a proposal commits
//! when it is made, because this voter is the majority) and writes every batch to a file, with
//! an fsync, before `propose` returns — so a reply sent after a commit is never lost.
//!
//! Layout, in the metadata directory (`<data-dir>/__cluster_metadata-0`, Kafka's name):
//! - `log`: frames `[body_len: u32][crc32c(body): u32][body]`, body = `[base_offset: i64]
//!   [epoch: i32][proposer: u64][seq: u64][count: u32]` then `count` × `[len: u32][record]`.
//! - `snapshot`: `[crc32c(snapshot): u32][snapshot encoding]`, written to `snapshot.tmp`,
//!   fsynced, renamed over the old one, directory fsynced.
//!
//! Bounded: after [`LOG_BATCHES_MAX`] batches or [`LOG_RECORDS_MAX`] records in the file, the image is written as a snapshot
//! and the file starts over. Crash safety: a torn or corrupt frame at the end (a crash during an
//! append, never acknowledged) is cut off on open; a crash between writing a snapshot and
//! emptying the log leaves batches the snapshot already holds, which are skipped by offset.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use parking_lot::Mutex;

use super::files::{
    FrameLog, decode_proposal, encode_proposal, frame, invalid, open_frame_log, read_checked,
    write_checked,
};
use super::{CommittedBatch, CommittedLog, LeaderAndEpoch, MetadataQuorum, NodeId, QuorumError};
use super::{LOCAL_EPOCH, VoterStatus};
use crate::records::{Reader, Record};
use crate::snapshot::Snapshot;

/// Batches in the log file before it is folded into a snapshot.
pub const LOG_BATCHES_MAX: usize = 1000;
/// Records in the log file before it is folded into a snapshot: what a start-up replays (twice:
/// here and in the controller) stays bounded however often the broker restarts, each restart
/// writing two leader changes per partition it leads.
pub const LOG_RECORDS_MAX: usize = 4096;
const LOG_FILE: &str = "log";
const SNAPSHOT_FILE: &str = "snapshot";

#[derive(Debug)]
struct State {
    log: CommittedLog,
    next_seq: u64,
    file: File,
    batches_in_file: usize,
    records_in_file: usize,
}

/// A single-voter quorum persisted in a directory.
#[derive(Debug)]
pub struct DurableQuorum {
    node_id: NodeId,
    dir: PathBuf,
    state: Mutex<State>,
}

/// A batch's frame body.
fn encode_batch(batch: &CommittedBatch) -> io::Result<Vec<u8>> {
    let mut body = Vec::new();
    body.extend_from_slice(&batch.base.offset.to_be_bytes());
    body.extend_from_slice(&batch.base.epoch.to_be_bytes());
    encode_proposal(&mut body, batch.proposer, batch.seq, &batch.records)?;
    Ok(body)
}

fn decode_batch(body: &[u8]) -> Result<CommittedBatch, crate::records::RecordError> {
    let mut r = Reader(body);
    let offset = r.i64()?;
    let epoch = r.u32()? as i32;
    let (proposer, seq, records) = decode_proposal(&mut r)?;
    Ok(CommittedBatch {
        base: crate::image::LogPosition { offset, epoch },
        proposer,
        seq,
        records,
    })
}

impl DurableQuorum {
    /// Open (or create) the metadata directory: load the snapshot, replay the log after it,
    /// cut off a torn tail.
    pub fn open(node_id: NodeId, dir: &Path) -> io::Result<DurableQuorum> {
        fs::create_dir_all(dir)?;
        let mut log = CommittedLog::default();
        if let Some(snapshot) = read_snapshot(dir)? {
            log.restore(&snapshot).map_err(invalid)?;
        }
        let FrameLog {
            frames: batches,
            mut file,
            end,
        } = open_frame_log(
            dir,
            LOG_FILE,
            "metadata log",
            OpenOptions::new().create(true).truncate(false).write(true),
            decode_batch,
        )?;
        let mut next_seq = 0;
        let batches_in_file = batches.len();
        let records_in_file = batches.iter().map(|(_, b)| b.records.len()).sum();
        for (_, batch) in batches {
            next_seq = next_seq.max(batch.seq + 1);
            if batch.last_offset() <= log.image().position().offset {
                continue; // already in the snapshot
            }
            let expected = log.image().position().offset + 1;
            if batch.base.offset != expected {
                return Err(invalid(format!(
                    "metadata log: batch at offset {} where {expected} was expected",
                    batch.base.offset
                )));
            }
            let (proposer, seq, epoch) = (batch.proposer, batch.seq, batch.base.epoch);
            if log.append(proposer, seq, batch.records, epoch).is_none() {
                return Err(invalid(format!(
                    "metadata log: the batch at offset {expected} does not apply"
                )));
            }
        }
        std::io::Seek::seek(&mut file, io::SeekFrom::Start(end))?;
        tracing::info!(
            offset = log.image().position().offset,
            topics = log.image().topics().count(),
            "metadata log loaded"
        );
        Ok(DurableQuorum {
            node_id,
            dir: dir.to_path_buf(),
            state: Mutex::new(State {
                log,
                next_seq,
                file,
                batches_in_file,
                records_in_file,
            }),
        })
    }

    /// Fold the file into a snapshot of the image and start an empty log.
    fn compact(&self, state: &mut State) -> io::Result<()> {
        let snapshot = state.log.snapshot().encode().map_err(invalid)?;
        write_checked(&self.dir, SNAPSHOT_FILE, &snapshot)?;
        state.file.set_len(0)?;
        std::io::Seek::seek(&mut state.file, io::SeekFrom::Start(0))?;
        state.file.sync_all()?;
        state.batches_in_file = 0;
        state.records_in_file = 0;
        Ok(())
    }

    fn persist(&self, state: &mut State, batch: &CommittedBatch) -> io::Result<()> {
        let body = encode_batch(batch)?;
        state.file.write_all(&frame(&body))?;
        state.file.sync_data()?;
        state.batches_in_file += 1;
        state.records_in_file += batch.records.len();
        Ok(())
    }
}

/// The snapshot in `dir`, if any; damage is an error naming the file (written to a temp file
/// and renamed: a bad CRC is corruption, not a torn write).
fn read_snapshot(dir: &Path) -> io::Result<Option<Snapshot>> {
    let path = dir.join(SNAPSHOT_FILE);
    let Some(bytes) = read_checked(&path)? else {
        return Ok(None);
    };
    Snapshot::decode(&bytes)
        .map(Some)
        .map_err(|e| invalid(format!("{}: metadata snapshot: {e}", path.display())))
}

impl MetadataQuorum for DurableQuorum {
    fn node_id(&self) -> NodeId {
        self.node_id
    }

    fn propose(&self, records: Vec<Record>) -> Result<u64, QuorumError> {
        let mut state = self.state.lock();
        let seq = state.next_seq;
        state.next_seq += 1;
        let batch = CommittedBatch {
            base: crate::image::LogPosition {
                offset: state.log.image().position().offset + 1,
                epoch: LOCAL_EPOCH,
            },
            proposer: self.node_id,
            seq,
            records,
        };
        // Dropped as on every voter when a record does not apply (the log says why).
        if batch.records.is_empty() || state.log.image().apply_all(batch.positioned()).is_err() {
            state
                .log
                .append(self.node_id, seq, batch.records, LOCAL_EPOCH);
            return Ok(seq);
        }
        // On disk before it is visible: a reply released on commit is never lost.
        if let Err(e) = self.persist(&mut state, &batch) {
            tracing::error!(error = %e, "metadata log write failed");
            return Err(QuorumError::Storage(e.to_string()));
        }
        let appended = state
            .log
            .append(self.node_id, seq, batch.records, LOCAL_EPOCH);
        assert!(appended.is_some(), "a checked batch applies");
        if (state.batches_in_file >= LOG_BATCHES_MAX || state.records_in_file >= LOG_RECORDS_MAX)
            && let Err(e) = self.compact(&mut state)
        {
            // The log file still holds every batch: only the bound is late.
            tracing::error!(error = %e, "metadata snapshot failed");
        }
        Ok(seq)
    }

    fn read_committed(
        &self,
        from_offset: i64,
        max_batches: usize,
    ) -> Result<Vec<CommittedBatch>, QuorumError> {
        self.state.lock().log.read(from_offset, max_batches)
    }

    fn snapshot(&self) -> Snapshot {
        self.state.lock().log.snapshot()
    }

    fn leader(&self) -> LeaderAndEpoch {
        LeaderAndEpoch {
            leader: Some(self.node_id),
            epoch: LOCAL_EPOCH,
        }
    }

    fn is_ready_leader(&self) -> bool {
        true
    }

    fn voters(&self) -> Vec<VoterStatus> {
        vec![VoterStatus {
            id: self.node_id,
            lag_entries: Some(0),
        }]
    }
}

#[cfg(test)]
#[path = "durable_tests.rs"]
mod tests;
