//! The clean-shutdown marker (KIP-966, Kafka's `CleanShutdownFileHandler`): written once every
//! log has been flushed and closed, with the broker epoch the broker had; read and removed at
//! the next start, before the broker registers. The registration names that epoch
//! (`previous_broker_epoch`), and the controller trusts the broker's logs (keeps it in the
//! ELR) only when it is the epoch it last registered with. A crash, kill -9 or power loss
//! leaves no marker: the broker may have lost its page cache, so it is no longer eligible to
//! lead cleanly.
//!
//! Format: one line, `broker_epoch <n>`. A missing, unreadable or damaged marker means
//! "unclean" ([`NO_PREVIOUS_BROKER_EPOCH`]), never an error: that is the safe reading.

use std::fs::{self, File};
use std::io::{self, Write};
use std::path::Path;

use streamforge_metadata::controller::NO_PREVIOUS_BROKER_EPOCH;

/// The marker's name in the data dir.
pub const CLEAN_SHUTDOWN_FILE: &str = "clean_shutdown";
/// Bound on the marker's size: anything longer is damaged.
const MARKER_BYTES_MAX: u64 = 64;

/// Write the marker for `broker_epoch`, crash-safe (temp file, fsync, rename, dir fsync).
pub fn write(data_dir: &Path, broker_epoch: i64) -> io::Result<()> {
    let tmp = data_dir.join(format!("{CLEAN_SHUTDOWN_FILE}.tmp"));
    {
        let mut f = File::create(&tmp)?;
        f.write_all(format!("broker_epoch {broker_epoch}\n").as_bytes())?;
        f.sync_all()?;
    }
    fs::rename(&tmp, data_dir.join(CLEAN_SHUTDOWN_FILE))?;
    File::open(data_dir)?.sync_all()
}

/// Read and remove the marker: the epoch it names, or [`NO_PREVIOUS_BROKER_EPOCH`]. It is
/// removed (and the removal made durable) before the broker registers, so a crash of this
/// process can never be taken for a clean stop.
pub fn take(data_dir: &Path) -> i64 {
    let path = data_dir.join(CLEAN_SHUTDOWN_FILE);
    let epoch = match read(&path) {
        Ok(epoch) => epoch,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return NO_PREVIOUS_BROKER_EPOCH,
        Err(e) => {
            tracing::warn!(error = %e, "clean-shutdown marker unreadable: taken as an unclean shutdown");
            NO_PREVIOUS_BROKER_EPOCH
        }
    };
    let removed = fs::remove_file(&path).and_then(|()| File::open(data_dir)?.sync_all());
    if let Err(e) = removed {
        // A marker that cannot be removed could vouch for a later crash: do not use it.
        tracing::error!(error = %e, "could not remove the clean-shutdown marker: taken as an unclean shutdown");
        return NO_PREVIOUS_BROKER_EPOCH;
    }
    epoch
}

fn read(path: &Path) -> io::Result<i64> {
    let len = fs::metadata(path)?.len();
    if len > MARKER_BYTES_MAX {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "marker too long",
        ));
    }
    let text = fs::read_to_string(path)?;
    text.trim()
        .strip_prefix("broker_epoch ")
        .and_then(|n| n.parse::<i64>().ok())
        .filter(|&n| n >= 0)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "damaged marker"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_written_marker_is_read_once() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), 42).unwrap();
        assert_eq!(take(dir.path()), 42);
        assert!(!dir.path().join(CLEAN_SHUTDOWN_FILE).exists());
        assert_eq!(
            take(dir.path()),
            NO_PREVIOUS_BROKER_EPOCH,
            "gone after one start"
        );
    }

    #[test]
    fn no_or_a_damaged_marker_is_an_unclean_shutdown() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(take(dir.path()), NO_PREVIOUS_BROKER_EPOCH);
        let path = dir.path().join(CLEAN_SHUTDOWN_FILE);
        for damaged in [
            "",
            "broker_epoch",
            "broker_epoch -3",
            "epoch 4",
            &"9".repeat(100),
        ] {
            fs::write(&path, damaged).unwrap();
            assert_eq!(take(dir.path()), NO_PREVIOUS_BROKER_EPOCH, "{damaged:?}");
            assert!(!path.exists(), "a damaged marker is removed too");
        }
    }
}
