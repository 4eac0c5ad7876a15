//! Request handler time as Kafka's request quota counts it: time spent working on a request,
//! not time waiting for something else (Kafka's `requestThreadTimeNanos` leaves out the time a
//! request sits in purgatory, e.g. a Fetch long poll or a JoinGroup waiting for the rebalance).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

/// A stopwatch that a handler pauses around its waits.
#[derive(Debug)]
pub struct BusyTime {
    total: Duration,
    running_since: Option<Instant>,
}

impl BusyTime {
    /// Running from now.
    pub fn start() -> BusyTime {
        BusyTime {
            total: Duration::ZERO,
            running_since: Some(Instant::now()),
        }
    }

    pub fn pause(&mut self) {
        if let Some(since) = self.running_since.take() {
            self.total += since.elapsed();
        }
    }

    pub fn resume(&mut self) {
        if self.running_since.is_none() {
            self.running_since = Some(Instant::now());
        }
    }

    pub fn total(&self) -> Duration {
        self.total + self.running_since.map_or(Duration::ZERO, |s| s.elapsed())
    }
}

/// A future that adds up the time spent inside its `poll` calls: the time the handler ran on
/// a thread, whatever it awaited in between.
pub struct PollTime<F> {
    inner: F,
    busy: Duration,
}

impl<F> PollTime<F> {
    pub fn new(inner: F) -> PollTime<F> {
        PollTime {
            inner,
            busy: Duration::ZERO,
        }
    }

    pub fn busy(&self) -> Duration {
        self.busy
    }
}

impl<F: Future + Unpin> Future for PollTime<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let started = Instant::now();
        let out = Pin::new(&mut self.inner).poll(cx);
        self.busy += started.elapsed();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn waiting_is_not_busy_time() {
        let mut f = PollTime::new(Box::pin(async {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }));
        (&mut f).await;
        assert!(f.busy() < Duration::from_millis(100), "{:?}", f.busy());
        let mut b = BusyTime::start();
        b.pause();
        std::thread::sleep(Duration::from_millis(50));
        assert!(b.total() < Duration::from_millis(25));
        b.resume();
        std::thread::sleep(Duration::from_millis(30));
        assert!(b.total() >= Duration::from_millis(30));
    }
}
