//! The data directory's `.lock` file (Kafka's `log.dirs/.lock`): one broker process per data
//! directory. Two brokers appending to the same segment files would interleave their writes and
//! each recover the other's half-written tail as corruption.
//!
//! The lock is an exclusive `flock` on `<data_dir>/.lock`, held for the life of the process (or
//! of the embedding [`crate::BrokerHandle`]); the kernel drops it when the process dies, so a
//! `kill -9` never leaves a stale lock behind. The file holds the owner's pid, only to name it
//! in the refusal message: the flock, not the pid, is what excludes.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// The lock file's name inside the data directory (as in Kafka).
pub const LOCK_FILE: &str = ".lock";

/// Bytes of the lock file read back to name its owner (a pid and a newline fit easily).
const OWNER_BYTES_MAX: u64 = 64;

/// Why the data directory could not be locked.
#[derive(Debug, thiserror::Error)]
pub enum DataDirLockError {
    #[error("cannot open data directory {}: {source}", dir.display())]
    Open {
        dir: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "data directory {} is in use by another broker{} (lock file {}); stop it or choose another --data-dir",
        dir.display(),
        owner.map(|pid| format!(" (pid {pid})")).unwrap_or_default(),
        lock.display()
    )]
    InUse {
        dir: PathBuf,
        lock: PathBuf,
        owner: Option<u32>,
    },
}

/// An exclusive lock on a data directory, released on drop.
#[derive(Debug)]
pub struct DataDirLock {
    // Held only for its lock; closing the file releases it.
    _file: File,
    path: PathBuf,
}

impl DataDirLock {
    /// Creates `dir` if needed and locks it, or says which process holds it.
    pub fn acquire(dir: &Path) -> Result<DataDirLock, DataDirLockError> {
        let open_error = |source| DataDirLockError::Open {
            dir: dir.to_path_buf(),
            source,
        };
        std::fs::create_dir_all(dir).map_err(open_error)?;
        let path = dir.join(LOCK_FILE);
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(open_error)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                return Err(DataDirLockError::InUse {
                    dir: dir.to_path_buf(),
                    owner: read_owner(&mut file),
                    lock: path,
                });
            }
            Err(TryLockError::Error(source)) => return Err(open_error(source)),
        }
        // Ours now: record the pid for the next one who tries (best effort, the lock is held).
        let pid = std::process::id();
        let written = file
            .set_len(0)
            .and_then(|()| file.seek(SeekFrom::Start(0)))
            .and_then(|_| file.write_all(format!("{pid}\n").as_bytes()));
        if let Err(e) = written {
            tracing::warn!(path = %path.display(), error = %e, "could not write the pid into the data directory lock file");
        }
        Ok(DataDirLock { _file: file, path })
    }

    /// The lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

fn read_owner(file: &mut File) -> Option<u32> {
    let mut text = String::new();
    file.take(OWNER_BYTES_MAX).read_to_string(&mut text).ok()?;
    text.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_on_the_same_directory_is_refused_with_the_owner() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        let first = DataDirLock::acquire(&data).unwrap();
        let err = DataDirLock::acquire(&data).unwrap_err();
        let text = err.to_string();
        assert!(
            matches!(err, DataDirLockError::InUse { owner: Some(pid), .. } if pid == std::process::id()),
            "{text}"
        );
        assert!(text.contains(&data.display().to_string()), "{text}");
        drop(first);
        DataDirLock::acquire(&data).expect("released on drop");
    }
}
