//! Producer ack latency, as Kafka's `ProducerPerformance` measures it: per record, from the
//! moment it is handed to the producer (`send_batch`, which may wait for buffer memory) until
//! the produce response for its batch arrives (with acks=all: until the ISR has it).
//!
//! Producers hand each delivery (one per batch their records went to) to a collector task
//! through a bounded channel; the collector waits on all of them at once and records each
//! when it completes, so a slow partition does not delay the timing of a fast one.
use std::future::Future;
use std::pin::Pin;

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use hdrhistogram::Histogram;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use streamforge_client::BatchDelivery;

use crate::latency;

/// Deliveries queued between the producers and the collector; a full queue makes the
/// producer wait (it is far larger than the batches a producer has in flight).
const ACK_QUEUE_DELIVERIES: usize = 4096;
/// Deliveries the collector waits on at once; past it, it stops taking new ones.
pub const ACK_PENDING_DELIVERIES_MAX: usize = 65_536;

/// Resolves to whether the records were acknowledged (failures are not timed).
type Acked = Pin<Box<dyn Future<Output = bool> + Send>>;

/// Records handed to the producer together at `sent_us` ([`latency::now_us`]).
pub struct Tracked {
    sent_us: u64,
    records: u64,
    acked: Acked,
}

impl Tracked {
    /// One tracked entry per batch the records of `delivery` went to.
    pub fn of(sent_us: u64, delivery: BatchDelivery) -> impl Iterator<Item = Tracked> {
        delivery.per_batch().map(move |d| Tracked {
            sent_us,
            records: d.record_count() as u64,
            acked: Box::pin(async move { d.wait().await.is_ok() }),
        })
    }
}

/// Where producers send what they want timed.
pub type AckSender = mpsc::Sender<Tracked>;

/// The collector of one phase.
pub struct AckTracker {
    tx: AckSender,
    collector: JoinHandle<Histogram<u64>>,
}

impl AckTracker {
    pub fn start() -> Self {
        Self::with_pending_max(ACK_PENDING_DELIVERIES_MAX)
    }

    fn with_pending_max(pending_max: usize) -> Self {
        let (tx, rx) = mpsc::channel(ACK_QUEUE_DELIVERIES);
        let collector = tokio::spawn(collect(rx, pending_max));
        Self { tx, collector }
    }

    pub fn sender(&self) -> AckSender {
        self.tx.clone()
    }

    /// Waits for every delivery sent so far (once every sender is dropped) and returns the
    /// histogram of ack latencies in microseconds, one sample per acknowledged record.
    pub async fn finish(self) -> Histogram<u64> {
        drop(self.tx);
        self.collector
            .await
            .unwrap_or_else(|_| latency::new_histogram())
    }
}

async fn collect(mut rx: mpsc::Receiver<Tracked>, pending_max: usize) -> Histogram<u64> {
    let mut h = latency::new_histogram();
    let mut pending = FuturesUnordered::new();
    let mut open = true;
    loop {
        tokio::select! {
            // Completions first: the time is taken when the future is seen done.
            biased;
            Some((sent_us, records, ok)) = pending.next(), if !pending.is_empty() => {
                if ok {
                    latency::record_n(&mut h, sent_us, records);
                }
            }
            next = rx.recv(), if open && pending.len() < pending_max => match next {
                Some(t) => pending.push(async move { (t.sent_us, t.records, t.acked.await) }),
                None => open = false,
            },
            else => break,
        }
    }
    h
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn after(ms: u64, ok: bool, records: u64) -> Tracked {
        Tracked {
            sent_us: latency::now_us(),
            records,
            acked: Box::pin(async move {
                tokio::time::sleep(Duration::from_millis(ms)).await;
                ok
            }),
        }
    }

    #[tokio::test]
    async fn each_delivery_is_timed_when_it_completes_not_in_send_order() {
        let t = AckTracker::start();
        let tx = t.sender();
        // The slow one first: the fast one must not wait behind it.
        tx.send(after(60, true, 3)).await.unwrap();
        tx.send(after(1, true, 1)).await.unwrap();
        tx.send(after(1, false, 5)).await.unwrap();
        drop(tx);
        let h = t.finish().await;
        assert_eq!(h.len(), 4, "failed records are not timed");
        assert!(h.min() >= 1_000, "{}", h.min());
        assert!(h.min() < 50_000, "fast delivery waited behind the slow one");
        assert!(h.max() >= 60_000, "{}", h.max());
        assert_eq!(h.count_between(59_000, 10_000_000), 3);
    }

    #[tokio::test]
    async fn a_full_collector_still_takes_every_delivery() {
        let t = AckTracker::with_pending_max(1);
        let tx = t.sender();
        for _ in 0..20 {
            tx.send(after(0, true, 2)).await.unwrap();
        }
        drop(tx);
        assert_eq!(t.finish().await.len(), 40);
    }

    #[tokio::test]
    async fn nothing_sent_is_an_empty_histogram() {
        let h = AckTracker::start().finish().await;
        assert!(h.is_empty());
        assert!(latency::LatencySummary::from_histogram(&h).is_none());
    }
}
