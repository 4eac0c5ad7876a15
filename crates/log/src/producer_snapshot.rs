//! Producer-state snapshot files: `<offset>.snapshot` holds the producer state as of `offset`
//! (every batch below it applied). Taken when a segment rolls and on clean close, so reopening
//! replays only the batches after the latest snapshot.
//!
//! Format (big-endian): magic `SFPS`, version u16 (= 3), entry count u32, entries, then a
//! CRC-32C of everything before it. Entry: producer id i64, epoch i16, last timestamp i64, batch
//! count u8, then per batch: first seq i32, last seq i32, first offset i64, last offset i64,
//! timestamp i64; version 2 adds, after the batches, the first offset of the producer's open
//! transaction i64 (-1 = none; version 1 files read as none); version 3 adds after it the
//! coordinator epoch of the last marker applied for the producer i32 (-1 = none, as Kafka's
//! snapshot field `coordinator_epoch`; versions 1 and 2 read as none). Unlike Kafka's snapshot
//! (last batch only) all 5 retained batches are kept, so duplicates of any of them are still
//! recognised after a restart.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use crate::producer_state::{
    BATCHES_TO_RETAIN, BatchMetadata, ProducerEntry, ProducerStateManager,
};
use crate::segment::file_stem;

const MAGIC: &[u8; 4] = b"SFPS";
const VERSION: u16 = 3;
/// Snapshots written before the coordinator epoch was kept are still read (as none).
const VERSION_WITHOUT_COORDINATOR_EPOCH: u16 = 2;
/// Snapshots written before transactions (no open-transaction field) are still read.
const VERSION_WITHOUT_TXN: u16 = 1;
const HEADER_BYTES: usize = 4 + 2 + 4;
const ENTRY_FIXED_BYTES: usize = 8 + 2 + 8 + 1;
const TXN_BYTES: usize = 8 + 4;
const BATCH_BYTES: usize = 4 + 4 + 8 + 8 + 8;

pub fn snapshot_path(dir: &Path, offset: i64) -> PathBuf {
    dir.join(format!("{}.snapshot", file_stem(offset)))
}

/// Offsets of the snapshot files in `dir`, ascending.
pub fn list(dir: &Path) -> io::Result<Vec<i64>> {
    let mut out = Vec::new();
    for entry in fs::read_dir(dir)? {
        let name = entry?.file_name();
        if let Some(stem) = name.to_str().and_then(|n| n.strip_suffix(".snapshot"))
            && let Ok(offset) = stem.parse::<i64>()
        {
            out.push(offset);
        }
    }
    out.sort_unstable();
    Ok(out)
}

/// Write the state as of `offset` (temp file + rename; not fsynced: a lost or torn snapshot is
/// detected by its CRC and recovery replays from an older one).
pub fn write(dir: &Path, offset: i64, state: &ProducerStateManager) -> io::Result<()> {
    let entries = state.entries();
    let mut buf = Vec::with_capacity(
        HEADER_BYTES
            + entries.len() * (ENTRY_FIXED_BYTES + BATCHES_TO_RETAIN * BATCH_BYTES + TXN_BYTES)
            + 4,
    );
    buf.extend_from_slice(MAGIC);
    buf.extend_from_slice(&VERSION.to_be_bytes());
    buf.extend_from_slice(&(entries.len() as u32).to_be_bytes());
    for e in entries {
        buf.extend_from_slice(&e.producer_id.to_be_bytes());
        buf.extend_from_slice(&e.epoch.to_be_bytes());
        buf.extend_from_slice(&e.last_timestamp.to_be_bytes());
        buf.push(e.batches().len() as u8);
        for b in e.batches() {
            buf.extend_from_slice(&b.first_seq.to_be_bytes());
            buf.extend_from_slice(&b.last_seq.to_be_bytes());
            buf.extend_from_slice(&b.first_offset.to_be_bytes());
            buf.extend_from_slice(&b.last_offset.to_be_bytes());
            buf.extend_from_slice(&b.timestamp.to_be_bytes());
        }
        buf.extend_from_slice(&e.current_txn_first_offset.to_be_bytes());
        buf.extend_from_slice(&e.coordinator_epoch.to_be_bytes());
    }
    let crc = crc32c::crc32c(&buf);
    buf.extend_from_slice(&crc.to_be_bytes());
    let path = snapshot_path(dir, offset);
    let tmp = path.with_extension("snapshot.tmp");
    fs::write(&tmp, &buf)?;
    fs::rename(&tmp, &path)
}

struct Reader<'a> {
    buf: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> Option<[u8; N]> {
        let bytes = self.buf.get(self.at..self.at + N)?;
        self.at += N;
        bytes.try_into().ok()
    }
    fn i64(&mut self) -> Option<i64> {
        self.take::<8>().map(i64::from_be_bytes)
    }
    fn i32(&mut self) -> Option<i32> {
        self.take::<4>().map(i32::from_be_bytes)
    }
    fn i16(&mut self) -> Option<i16> {
        self.take::<2>().map(i16::from_be_bytes)
    }
}

/// Read a snapshot; `Err` with a reason if it is damaged.
pub fn read(dir: &Path, offset: i64) -> io::Result<Vec<ProducerEntry>> {
    decode(&fs::read(snapshot_path(dir, offset))?, offset)
}

/// Decode a snapshot file's bytes (`offset` names it in errors); `Err` with a reason if it is
/// damaged. Never panics, whatever the bytes (a remote store's object goes through here).
pub fn decode(bytes: &[u8], offset: i64) -> io::Result<Vec<ProducerEntry>> {
    let bad = |why: &str| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("snapshot {offset}: {why}"),
        )
    };
    if bytes.len() < HEADER_BYTES + 4 || &bytes[..4] != MAGIC {
        return Err(bad("bad magic or too short"));
    }
    let (body, crc) = bytes.split_at(bytes.len() - 4);
    let stored = u32::from_be_bytes([crc[0], crc[1], crc[2], crc[3]]);
    if crc32c::crc32c(body) != stored {
        return Err(bad("CRC mismatch"));
    }
    let mut r = Reader { buf: body, at: 4 };
    let version = r
        .take::<2>()
        .map(u16::from_be_bytes)
        .ok_or_else(|| bad("short"))?;
    if !matches!(
        version,
        VERSION | VERSION_WITHOUT_COORDINATOR_EPOCH | VERSION_WITHOUT_TXN
    ) {
        return Err(bad("unknown version"));
    }
    let count = r.i32().ok_or_else(|| bad("short"))? as u32 as usize;
    // Each entry takes at least ENTRY_FIXED_BYTES: a count beyond that is corrupt.
    if count > body.len() / ENTRY_FIXED_BYTES {
        return Err(bad("entry count exceeds file"));
    }
    let mut out = Vec::with_capacity(count);
    for _ in 0..count {
        let short = || bad("truncated entry");
        let producer_id = r.i64().ok_or_else(short)?;
        let epoch = r.i16().ok_or_else(short)?;
        let last_timestamp = r.i64().ok_or_else(short)?;
        let n = r.take::<1>().ok_or_else(short)?[0] as usize;
        if n > BATCHES_TO_RETAIN {
            return Err(bad("too many batches"));
        }
        let mut batches = [BatchMetadata::default(); BATCHES_TO_RETAIN];
        for b in batches.iter_mut().take(n) {
            *b = BatchMetadata {
                first_seq: r.i32().ok_or_else(short)?,
                last_seq: r.i32().ok_or_else(short)?,
                first_offset: r.i64().ok_or_else(short)?,
                last_offset: r.i64().ok_or_else(short)?,
                timestamp: r.i64().ok_or_else(short)?,
            };
        }
        let txn_first_offset = if version >= VERSION_WITHOUT_COORDINATOR_EPOCH {
            r.i64().ok_or_else(short)?
        } else {
            crate::producer_state::NO_TXN
        };
        let coordinator_epoch = if version >= VERSION {
            r.i32().ok_or_else(short)?
        } else {
            crate::producer_state::NO_COORDINATOR_EPOCH
        };
        let mut entry = ProducerEntry::restore(
            producer_id,
            epoch,
            last_timestamp,
            &batches[..n],
            txn_first_offset,
        );
        entry.coordinator_epoch = coordinator_epoch;
        out.push(entry);
    }
    Ok(out)
}

/// Delete snapshots whose offset is above `offset` (log truncated).
pub fn delete_above(dir: &Path, offset: i64) -> io::Result<()> {
    for o in list(dir)? {
        if o > offset {
            remove(dir, o)?;
        }
    }
    Ok(())
}

/// Delete snapshots whose offset is below `offset` (segments deleted), keeping the newest one.
pub fn delete_below(dir: &Path, offset: i64) -> io::Result<()> {
    let all = list(dir)?;
    let newest = all.last().copied();
    for o in all {
        if o < offset && Some(o) != newest {
            remove(dir, o)?;
        }
    }
    Ok(())
}

fn remove(dir: &Path, offset: i64) -> io::Result<()> {
    match fs::remove_file(snapshot_path(dir, offset)) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::producer_state::{NO_COORDINATOR_EPOCH, NO_TXN};

    fn batch(seq: i32, offset: i64) -> BatchMetadata {
        BatchMetadata {
            first_seq: seq,
            last_seq: seq,
            first_offset: offset,
            last_offset: offset,
            timestamp: 77,
        }
    }

    /// A file of `version` holding one producer (id 5, epoch 2, one batch), its
    /// version-dependent tail as given.
    fn legacy_file(dir: &Path, version: u16, tail: &[u8]) {
        let mut buf = Vec::new();
        buf.extend_from_slice(MAGIC);
        buf.extend_from_slice(&version.to_be_bytes());
        buf.extend_from_slice(&1u32.to_be_bytes());
        buf.extend_from_slice(&5i64.to_be_bytes());
        buf.extend_from_slice(&2i16.to_be_bytes());
        buf.extend_from_slice(&77i64.to_be_bytes());
        buf.push(1);
        let b = batch(0, 10);
        buf.extend_from_slice(&b.first_seq.to_be_bytes());
        buf.extend_from_slice(&b.last_seq.to_be_bytes());
        buf.extend_from_slice(&b.first_offset.to_be_bytes());
        buf.extend_from_slice(&b.last_offset.to_be_bytes());
        buf.extend_from_slice(&b.timestamp.to_be_bytes());
        buf.extend_from_slice(tail);
        let crc = crc32c::crc32c(&buf);
        buf.extend_from_slice(&crc.to_be_bytes());
        fs::write(snapshot_path(dir, 11), buf).unwrap();
    }

    #[test]
    fn the_coordinator_epoch_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        let mut state = ProducerStateManager::new();
        let mut entry = ProducerEntry::restore(5, 2, 77, &[batch(0, 10)], 12);
        entry.coordinator_epoch = 9;
        state.insert(entry.clone());
        state.insert(ProducerEntry::restore(6, 0, 78, &[], NO_TXN));
        write(dir.path(), 13, &state).unwrap();
        let entries = read(dir.path(), 13).unwrap();
        assert_eq!(entries.len(), 2);
        assert_eq!(entries.iter().find(|e| e.producer_id == 5), Some(&entry));
        let other = entries.iter().find(|e| e.producer_id == 6).unwrap();
        assert_eq!(other.coordinator_epoch, NO_COORDINATOR_EPOCH);
    }

    #[test]
    fn older_versions_read_without_a_coordinator_epoch() {
        let dir = tempfile::tempdir().unwrap();
        legacy_file(
            dir.path(),
            VERSION_WITHOUT_COORDINATOR_EPOCH,
            &12i64.to_be_bytes(),
        );
        let entries = read(dir.path(), 11).unwrap();
        assert_eq!(entries[0].current_txn_first_offset, 12);
        assert_eq!(entries[0].coordinator_epoch, NO_COORDINATOR_EPOCH);
        assert_eq!(entries[0].batches(), &[batch(0, 10)]);

        legacy_file(dir.path(), VERSION_WITHOUT_TXN, &[]);
        let entries = read(dir.path(), 11).unwrap();
        assert_eq!(entries[0].current_txn_first_offset, NO_TXN);
        assert_eq!(entries[0].coordinator_epoch, NO_COORDINATOR_EPOCH);

        // A version 2 body under the version 3 number is short: an error, not a panic.
        legacy_file(dir.path(), VERSION, &12i64.to_be_bytes());
        assert!(read(dir.path(), 11).is_err());
        legacy_file(dir.path(), 4, &[0; 12]);
        assert!(read(dir.path(), 11).is_err(), "unknown version");
    }
}
