//! On-disk rules shared by the metadata quorum's files ([`super::DurableQuorum`]'s log and
//! snapshot, the Raft log, vote and snapshot in [`super::raft`]):
//!
//! - An append-only log is a run of frames `[body_len: u32][crc32c(body): u32][body]`. Reading
//!   stops at the first frame that is short, too long or fails its CRC or its decoder: that is a
//!   torn tail (a crash during an append that was never acknowledged), cut off on open.
//! - A small file replaced as a whole (a snapshot, the vote) is `[crc32c(body): u32][body]`,
//!   written to `<name>.tmp`, fsynced, renamed over `<name>`, and the directory fsynced. A bad CRC
//!   there is corruption (the rename is atomic), reported as an error, never skipped.
//! - A proposal (one voter's batch of records) is stored in both logs' frames as
//!   `[proposer: u64][seq: u64][count: u32]` then `count` × `[len: u32][record]`.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::Path;

use crate::records::{Reader, Record, RecordError, decode_record_list, encode_record_list};

/// Largest frame accepted on read (a batch of many topics' records).
pub const FRAME_BYTES_MAX: usize = 64 * 1024 * 1024;
/// `[body_len: u32][crc32c: u32]`.
pub(crate) const FRAME_HEADER_BYTES: usize = 8;

pub(crate) fn invalid(what: impl std::fmt::Display) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.to_string())
}

pub(crate) fn fsync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// `body` as one log frame.
pub(crate) fn frame(body: &[u8]) -> Vec<u8> {
    assert!(
        body.len() <= FRAME_BYTES_MAX,
        "a frame the reader would refuse"
    );
    let mut frame = Vec::with_capacity(FRAME_HEADER_BYTES + body.len());
    frame.extend_from_slice(&(body.len() as u32).to_be_bytes());
    frame.extend_from_slice(&crc32c::crc32c(body).to_be_bytes());
    frame.extend_from_slice(body);
    frame
}

/// The body of the frame at the start of `bytes` and the frame's length, or `None` when the
/// frame is short, too long or fails its CRC.
pub(crate) fn frame_at(bytes: &[u8]) -> Option<(&[u8], usize)> {
    let header = bytes.get(..FRAME_HEADER_BYTES)?;
    let len = u32::from_be_bytes([header[0], header[1], header[2], header[3]]) as usize;
    let crc = u32::from_be_bytes([header[4], header[5], header[6], header[7]]);
    if len > FRAME_BYTES_MAX {
        return None;
    }
    let body = bytes.get(FRAME_HEADER_BYTES..FRAME_HEADER_BYTES + len)?;
    (crc32c::crc32c(body) == crc).then_some((body, FRAME_HEADER_BYTES + len))
}

/// The frames of `bytes` that are whole, pass their CRC and decode, each with the file offset
/// it starts at, and where that good prefix ends.
pub(crate) fn read_frames<T, E>(
    bytes: &[u8],
    mut decode: impl FnMut(&[u8]) -> Result<T, E>,
) -> (Vec<(u64, T)>, usize) {
    let mut items = Vec::new();
    let mut at = 0usize;
    while let Some((body, frame_len)) = frame_at(&bytes[at..]) {
        match decode(body) {
            Ok(item) => items.push((at as u64, item)),
            Err(_) => break,
        }
        at += frame_len;
    }
    (items, at)
}

/// An append-only frame log as found on open.
pub(crate) struct FrameLog<T> {
    /// The good frames (see [`read_frames`]), each with the file offset it starts at.
    pub frames: Vec<(u64, T)>,
    /// The file, opened with the caller's options, cut back to `end`.
    pub file: File,
    /// Where the good prefix ends: the file's length.
    pub end: u64,
}

/// Open (or create) the frame log `dir/name` with `options`: read its good frames and cut off
/// a torn tail after them (fsynced, as is the directory). `log_name` names the log in the
/// warning about a cut.
pub(crate) fn open_frame_log<T, E>(
    dir: &Path,
    name: &str,
    log_name: &str,
    options: &OpenOptions,
    decode: impl FnMut(&[u8]) -> Result<T, E>,
) -> io::Result<FrameLog<T>> {
    let path = dir.join(name);
    let bytes = match fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(e),
    };
    let (frames, good) = read_frames(&bytes, decode);
    let file = options.open(&path)?;
    if good < bytes.len() {
        tracing::warn!(
            cut_bytes = bytes.len() - good,
            "{log_name}: cutting off a torn tail"
        );
        file.set_len(good as u64)?;
        file.sync_all()?;
    }
    fsync_dir(dir)?;
    Ok(FrameLog {
        frames,
        file,
        end: good as u64,
    })
}

/// Replace `dir/name` with `[crc32c(body)][body]`: temp file, fsync, rename, directory fsync.
pub(crate) fn write_checked(dir: &Path, name: &str, body: &[u8]) -> io::Result<()> {
    let tmp = dir.join(format!("{name}.tmp"));
    let mut f = File::create(&tmp)?;
    f.write_all(&crc32c::crc32c(body).to_be_bytes())?;
    f.write_all(body)?;
    f.sync_all()?;
    drop(f);
    fs::rename(&tmp, dir.join(name))?;
    fsync_dir(dir)
}

/// [`write_checked`] without the fsyncs, for a hint that may be lost or stale after a crash
/// (the rename still means a reader sees the old body, the new one, or a file that fails its
/// check, never a mix).
pub(crate) fn write_checked_unsynced(dir: &Path, name: &str, body: &[u8]) -> io::Result<()> {
    let tmp = dir.join(format!("{name}.tmp"));
    let mut f = File::create(&tmp)?;
    f.write_all(&crc32c::crc32c(body).to_be_bytes())?;
    f.write_all(body)?;
    drop(f);
    fs::rename(&tmp, dir.join(name))
}

/// The body of a file written by [`write_checked`], `None` when there is none; a short file or
/// a bad CRC is an error naming the file.
pub(crate) fn read_checked(path: &Path) -> io::Result<Option<Vec<u8>>> {
    let mut bytes = match fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let named = |what: &str| invalid(format!("{}: {what}", path.display()));
    if bytes.len() < 4 {
        return Err(named("too short"));
    }
    let crc = u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
    if crc32c::crc32c(&bytes[4..]) != crc {
        return Err(named("CRC mismatch"));
    }
    bytes.drain(..4);
    Ok(Some(bytes))
}

/// Appends a proposal's encoding to `body`.
pub(crate) fn encode_proposal(
    body: &mut Vec<u8>,
    proposer: u64,
    seq: u64,
    records: &[Record],
) -> io::Result<()> {
    body.extend_from_slice(&proposer.to_be_bytes());
    body.extend_from_slice(&seq.to_be_bytes());
    encode_record_list(body, records).map_err(invalid)
}

/// Reads a proposal written by [`encode_proposal`]: `(proposer, seq, records)`.
pub(crate) fn decode_proposal(r: &mut Reader) -> Result<(u64, u64, Vec<Record>), RecordError> {
    let proposer = r.i64()? as u64;
    let seq = r.i64()? as u64;
    Ok((proposer, seq, decode_record_list(r)?))
}
