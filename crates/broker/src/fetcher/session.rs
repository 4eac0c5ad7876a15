//! KIP-227 incremental fetch sessions, the fetcher's side (Kafka's `FetchSessionHandler` and
//! its builder). Sans-io: each round the fetcher hands over every partition it wants to fetch
//! with its fetch state; the handler says what the request carries. The first request opens a
//! session (session id 0, epoch 0: a full fetch naming every partition); after that a request
//! names only the partitions whose fetch state changed (added or altered), and
//! `forgotten_topics_data` the ones no longer fetched. On FETCH_SESSION_ID_NOT_FOUND it starts
//! again from scratch; on any other top-level error, or a failed call, it closes its session
//! with a full fetch (its session id, epoch 0).

use std::collections::BTreeMap;
use std::sync::Arc;

use kafka_protocol::ResponseError;
use uuid::Uuid;

use crate::handlers::fetch_session::{INITIAL_EPOCH, NO_SESSION, PartitionParams, next_epoch};

/// A followed partition: topic name and index.
pub type Key = (Arc<str>, i32);

/// What the fetcher asks of one partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wanted {
    /// The topic's id in the metadata image (nil when unknown: the request then names topics).
    pub topic_id: Uuid,
    pub params: PartitionParams,
}

/// What one request carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Built {
    pub session_id: i32,
    pub session_epoch: i32,
    /// A full fetch: `to_send` is every wanted partition.
    pub full: bool,
    /// The request names topics by id (every wanted partition has one).
    pub uses_topic_ids: bool,
    /// Partitions the request names (all of them, or the added and altered ones).
    pub to_send: Vec<(Key, Wanted)>,
    /// Partitions the session drops (`forgotten_topics_data`), with the topic id they had.
    pub forgotten: Vec<(Key, Uuid)>,
}

/// The fetcher's session with one leader.
#[derive(Debug)]
pub struct SessionHandler {
    session_id: i32,
    /// The epoch of the next request ([`INITIAL_EPOCH`]: the next request is a full fetch).
    next_epoch: i32,
    uses_topic_ids: bool,
    /// The partitions of the session as of the last request built, with what it asked.
    partitions: BTreeMap<Key, Wanted>,
    /// The last request built was a full fetch (how its answer is read).
    last_full: bool,
}

impl Default for SessionHandler {
    fn default() -> Self {
        SessionHandler {
            session_id: NO_SESSION,
            next_epoch: INITIAL_EPOCH,
            uses_topic_ids: false,
            partitions: BTreeMap::new(),
            last_full: true,
        }
    }
}

impl SessionHandler {
    /// The session id the leader gave (0: none).
    pub fn session_id(&self) -> i32 {
        self.session_id
    }

    /// The request for `wanted` (every partition to fetch now, with its state).
    pub fn build(&mut self, wanted: BTreeMap<Key, Wanted>) -> Built {
        let uses_topic_ids = !wanted.is_empty() && wanted.values().all(|w| !w.topic_id.is_nil());
        // A change between names and ids needs a new session (Kafka's builder does the same).
        let full = self.next_epoch == INITIAL_EPOCH || uses_topic_ids != self.uses_topic_ids;
        let previous = std::mem::replace(&mut self.partitions, wanted);
        self.uses_topic_ids = uses_topic_ids;
        self.last_full = full;
        if full {
            return Built {
                session_id: self.session_id,
                session_epoch: INITIAL_EPOCH,
                full: true,
                uses_topic_ids,
                to_send: self
                    .partitions
                    .iter()
                    .map(|(k, w)| (k.clone(), *w))
                    .collect(),
                forgotten: Vec::new(),
            };
        }
        let mut to_send = Vec::new();
        let mut forgotten = Vec::new();
        for (key, wanted) in &self.partitions {
            match previous.get(key) {
                Some(before) if before == wanted => {}
                Some(before) if before.topic_id != wanted.topic_id => {
                    // The topic was replaced: drop the old id's partition, add the new one.
                    forgotten.push((key.clone(), before.topic_id));
                    to_send.push((key.clone(), *wanted));
                }
                _ => to_send.push((key.clone(), *wanted)),
            }
        }
        for (key, before) in &previous {
            if !self.partitions.contains_key(key) {
                forgotten.push((key.clone(), before.topic_id));
            }
        }
        Built {
            session_id: self.session_id,
            session_epoch: self.next_epoch,
            full: false,
            uses_topic_ids,
            to_send,
            forgotten,
        }
    }

    /// The answer's top-level `error_code` and `session_id`: what the next request is. False
    /// when the answer is refused as a whole (its partitions carry nothing).
    pub fn handle_response(&mut self, error_code: i16, session_id: i32) -> bool {
        if error_code != 0 {
            if error_code == ResponseError::FetchSessionIdNotFound.code() {
                self.session_id = NO_SESSION;
            }
            // Otherwise (INVALID_FETCH_SESSION_EPOCH, FETCH_SESSION_TOPIC_ID_ERROR, ...):
            // close this session with the next, full, request.
            self.next_epoch = INITIAL_EPOCH;
            return false;
        }
        if session_id == NO_SESSION {
            // No session was made, or the leader closed it: the next request is full.
            self.session_id = NO_SESSION;
            self.next_epoch = INITIAL_EPOCH;
        } else if self.last_full {
            self.session_id = session_id;
            self.next_epoch = 1;
        } else {
            self.next_epoch = next_epoch(self.next_epoch);
        }
        true
    }

    /// The call failed (connection lost, timeout, undecodable answer): the leader may or may
    /// not have moved the session on, so the next request closes it with a full fetch.
    pub fn handle_error(&mut self) {
        self.next_epoch = INITIAL_EPOCH;
    }
}

#[cfg(test)]
#[path = "session_tests.rs"]
mod tests;
