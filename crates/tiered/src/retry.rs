//! Exponential backoff with full jitter, bounded in attempts.

use std::future::Future;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::{Result, TieredError};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct RetryPolicy {
    pub initial_backoff_ms: u64,
    pub max_backoff_ms: u64,
    /// Attempts per call (the tiering task calls again on its next round).
    pub attempts_max: u32,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            initial_backoff_ms: 100,
            max_backoff_ms: 5_000,
            attempts_max: 5,
        }
    }
}

impl RetryPolicy {
    /// The sleep before retry number `attempt` (1-based): uniform in [cap/2, cap] where
    /// cap doubles per attempt up to `max_backoff_ms` ("equal jitter": spreads retries of
    /// many partitions while still backing off).
    pub fn backoff(&self, attempt: u32) -> Duration {
        let exp = self
            .initial_backoff_ms
            .saturating_mul(1u64 << attempt.saturating_sub(1).min(20));
        let cap = exp.min(self.max_backoff_ms).max(1);
        let ms = cap / 2 + rand::random_range(0..=cap - cap / 2);
        Duration::from_millis(ms)
    }

    /// Run `op` until it succeeds, fails with a non-retriable error, or runs out of attempts.
    pub async fn run<T, F, Fut>(&self, what: &str, mut op: F) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        let attempts_max = self.attempts_max.max(1);
        let mut attempt = 1;
        loop {
            match op().await {
                Ok(v) => return Ok(v),
                Err(e) if !e.is_retriable() => return Err(e),
                Err(e) if attempt >= attempts_max => {
                    return Err(TieredError::RetriesExhausted {
                        attempts: attempt,
                        last: e.to_string(),
                    });
                }
                Err(e) => {
                    let wait = self.backoff(attempt);
                    tracing::warn!(op = what, attempt, wait_ms = wait.as_millis() as u64, error = %e, "remote storage operation failed; retrying");
                    tokio::time::sleep(wait).await;
                    attempt += 1;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    #[test]
    fn backoff_grows_and_is_capped_with_jitter() {
        let p = RetryPolicy {
            initial_backoff_ms: 100,
            max_backoff_ms: 1_000,
            attempts_max: 10,
        };
        for _ in 0..100 {
            let b1 = p.backoff(1).as_millis();
            assert!((50..=100).contains(&b1), "{b1}");
            let b3 = p.backoff(3).as_millis();
            assert!((200..=400).contains(&b3), "{b3}");
            let b30 = p.backoff(30).as_millis();
            assert!((500..=1_000).contains(&b30), "{b30}");
        }
    }

    #[tokio::test]
    async fn retries_until_success_or_budget() {
        let p = RetryPolicy {
            initial_backoff_ms: 1,
            max_backoff_ms: 2,
            attempts_max: 3,
        };
        let calls = AtomicU32::new(0);
        let r: Result<u32> = p
            .run("t", || async {
                let n = calls.fetch_add(1, Ordering::SeqCst);
                if n < 2 {
                    Err(TieredError::Store(object_store::Error::Generic {
                        store: "x",
                        source: "down".into(),
                    }))
                } else {
                    Ok(n)
                }
            })
            .await;
        assert_eq!(r.unwrap(), 2);
        calls.store(0, Ordering::SeqCst);
        let r: Result<u32> = p
            .run("t", || async {
                calls.fetch_add(1, Ordering::SeqCst);
                Err(TieredError::Store(object_store::Error::Generic {
                    store: "x",
                    source: "down".into(),
                }))
            })
            .await;
        assert!(matches!(
            r,
            Err(TieredError::RetriesExhausted { attempts: 3, .. })
        ));
        calls.store(0, Ordering::SeqCst);
        let r: Result<u32> = p
            .run("t", || async {
                calls.fetch_add(1, Ordering::SeqCst);
                Err(TieredError::OffsetNotRemote { offset: 1 })
            })
            .await;
        assert!(r.is_err());
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }
}
