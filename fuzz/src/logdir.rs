//! A scratch log directory per fuzzing process, emptied before every execution. On /dev/shm
//! when it exists, so the log's fsyncs cost nothing.

use std::path::{Path, PathBuf};

use streamforge_log::LogConfig;

/// The process's scratch directory for one execution, freshly emptied.
pub fn fresh() -> PathBuf {
    let base = if Path::new("/dev/shm").is_dir() {
        PathBuf::from("/dev/shm")
    } else {
        std::env::temp_dir()
    };
    let dir = base.join(format!("sf-fuzz-log-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch directory");
    dir
}

/// A log config with small, cheap files: tiny preallocated indexes, no preallocation window,
/// an index entry every 128 bytes (so fuzzed segments exercise the index too).
pub fn small_config() -> LogConfig {
    LogConfig {
        segment_bytes: 1 << 20,
        segment_index_bytes: 4096,
        index_interval_bytes: 128,
        preallocate_window_bytes: 0,
        ..LogConfig::default()
    }
}
