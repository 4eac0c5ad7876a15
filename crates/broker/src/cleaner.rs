//! Wiring of the log cleaner (`streamforge_log::LogCleaner`) to this broker's partitions.

use std::sync::{Arc, Weak};

use streamforge_log::{CleanerLogs, LockedLog, LogCleaner};

use crate::BrokerState;

/// Every partition of every topic (the cleaner skips logs that are not compacted).
struct BrokerLogs(Weak<BrokerState>);

impl CleanerLogs for BrokerLogs {
    fn logs(&self) -> Vec<Arc<dyn LockedLog>> {
        let Some(state) = self.0.upgrade() else {
            return Vec::new();
        };
        state
            .replicas
            .all_partitions()
            .into_iter()
            .map(|p| p as Arc<dyn LockedLog>)
            .collect()
    }
}

/// Start the cleaner threads, unless `log.cleaner.enable=false`.
pub fn start(state: &Arc<BrokerState>) -> Option<LogCleaner> {
    if !state.config.log_cleaner_enable {
        return None;
    }
    let logs = Arc::new(BrokerLogs(Arc::downgrade(state)));
    match LogCleaner::start(state.config.log_cleaner.clone(), logs, {
        let clock = Arc::clone(&state.clock);
        Arc::new(move || clock.now_ms())
    }) {
        Ok(c) => Some(c),
        Err(e) => {
            tracing::error!(error = %e, "cannot start the log cleaner; compacted topics grow until it runs");
            None
        }
    }
}
