//! The one polling loop behind every "reloaded without restart" file (TLS certificates, the
//! OAUTHBEARER JWKS): every `interval_ms` run a blocking `reload_if_changed`, log what happened,
//! keep the previous contents when the new ones are broken, stop on shutdown.

use std::fmt::Display;

use tokio::sync::watch;

/// What a reloader logs (its own words, so operators see which file it was).
pub struct ReloadMessages {
    /// `tracing` field value naming the file (e.g. its path).
    pub file: String,
    pub reloaded: &'static str,
    pub failed: &'static str,
    pub task_failed: &'static str,
}

/// Run `reload_if_changed` (blocking: file reads, parsing) every `interval_ms` until shutdown;
/// `interval_ms == 0` disables it.
pub async fn run_file_reloader<E, F>(
    interval_ms: u64,
    mut shutdown: watch::Receiver<bool>,
    messages: ReloadMessages,
    reload_if_changed: F,
) where
    E: Display + Send + 'static,
    F: Fn() -> Result<bool, E> + Clone + Send + 'static,
{
    if interval_ms == 0 {
        return;
    }
    let mut tick = tokio::time::interval(std::time::Duration::from_millis(interval_ms));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tokio::select! {
            _ = shutdown.changed() => return,
            _ = tick.tick() => {
                match tokio::task::spawn_blocking(reload_if_changed.clone()).await {
                    Ok(Ok(true)) => tracing::info!(file = %messages.file, "{}", messages.reloaded),
                    Ok(Ok(false)) => {}
                    Ok(Err(e)) => tracing::error!(file = %messages.file, error = %e, "{}", messages.failed),
                    Err(e) => tracing::error!(error = %e, "{}", messages.task_failed),
                }
            }
        }
    }
}
