//! KIP-227 incremental fetch sessions, the leader's side (Kafka's `FetchManager` /
//! `FetchSessionCache`), served to follower fetchers. Sans-io: the Fetch handler opens a
//! context for each request (which partitions to read), then asks, for each partition it read,
//! whether the answer must carry it (an incremental answer leaves out the partitions with
//! nothing new).
//!
//! Only replicas get a session. A consumer's Fetch with session id 0 and epoch 0 ("create") is
//! answered as a full fetch with session id 0 (no session), which Kafka's clients (and
//! librdkafka) take as "this broker keeps no session for me" and go on with full fetches. So
//! consumer churn never evicts a follower's session (Kafka gives replica sessions priority in
//! eviction for the same reason). The cache holds at most [`FETCH_SESSION_SLOTS_MAX`] sessions,
//! each of at most [`FETCH_SESSION_PARTITIONS_MAX`] partitions; a full cache evicts the least
//! recently used session only when it has been idle for [`FETCH_SESSION_EVICTION_MS`]
//! (Kafka's `min.incremental.fetch.session.eviction.ms`), else no session is created.

use std::collections::{BTreeMap, HashMap};

use kafka_protocol::ResponseError;
use uuid::Uuid;

/// Kafka's `max.incremental.fetch.session.cache.slots` (default 1000).
pub const FETCH_SESSION_SLOTS_MAX: usize = 1_000;
/// Most partitions one session holds (a follower fetches at most this many from one leader).
pub const FETCH_SESSION_PARTITIONS_MAX: usize = crate::fetcher::manager::FETCHER_PARTITIONS_MAX;
/// Kafka's `min.incremental.fetch.session.eviction.ms` (default 120 s).
pub const FETCH_SESSION_EVICTION_MS: i64 = 120_000;

/// The epoch of a request that opens a full fetch (Kafka's `INITIAL_EPOCH`).
pub const INITIAL_EPOCH: i32 = 0;
/// The epoch of a sessionless request, or of one that closes its session (`FINAL_EPOCH`).
pub const FINAL_EPOCH: i32 = -1;
/// "No session" (`INVALID_SESSION_ID`).
pub const NO_SESSION: i32 = 0;

/// How a request names a topic: by name (Fetch v12 and older) or by id (v13+).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum TopicRef {
    Name(String),
    Id(Uuid),
}

/// What a request asks of one partition (what a session caches between requests).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionParams {
    pub fetch_offset: i64,
    pub partition_max_bytes: i32,
    pub current_leader_epoch: i32,
    pub last_fetched_epoch: i32,
    /// The fetcher's log start (a follower's, for KIP-392's selector; -1 from consumers).
    pub log_start_offset: i64,
}

/// What the leader told the fetcher of a partition in an answer; an incremental answer leaves
/// the partition out while these are unchanged and it has no records and no error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Answered {
    pub high_watermark: i64,
    pub last_stable_offset: i64,
    pub log_start_offset: i64,
}

/// One partition of a request, or of a session.
pub type SessionKey = (TopicRef, i32);

/// The session fields of one Fetch request.
#[derive(Debug, Clone)]
pub struct SessionRequest {
    pub session_id: i32,
    pub session_epoch: i32,
    /// The fetching replica (-1: a consumer, who gets no session).
    pub replica_id: i32,
    /// v13+: the request names topics by id.
    pub uses_topic_ids: bool,
    /// The partitions the request names, in order (a partition named twice: the last wins).
    pub partitions: Vec<(SessionKey, PartitionParams)>,
    /// `forgotten_topics_data`: partitions an incremental request removes from its session.
    pub forgotten: Vec<SessionKey>,
    /// The request's size (its body), for [`ReplicaFetchStats`].
    pub request_bytes: usize,
}

/// What the replicas' Fetch requests to this broker carried, since it started.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ReplicaFetchStats {
    pub requests: u64,
    /// Of which in a session (epoch > 0).
    pub incremental: u64,
    /// Request bodies, in bytes.
    pub request_bytes: u64,
    /// Partitions the requests named.
    pub partitions_named: u64,
}

/// How a request is answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionContext {
    /// A full answer: every partition read is in it. `session_id` is the session created
    /// ([`NO_SESSION`] if none: sessionless, a consumer, a full cache, too many partitions).
    Full { session_id: i32 },
    /// An incremental answer in session `session_id`: only partitions with something new.
    Incremental { session_id: i32 },
    /// The request is refused as a whole with this top-level error, and no partitions.
    Error(i16),
}

impl SessionContext {
    /// The `session_id` of the answer.
    pub fn session_id(&self) -> i32 {
        match *self {
            SessionContext::Full { session_id } | SessionContext::Incremental { session_id } => {
                session_id
            }
            SessionContext::Error(_) => NO_SESSION,
        }
    }
}

/// A request's context and the partitions to read for it (for an incremental request: every
/// partition of its session).
#[derive(Debug)]
pub struct Opened {
    pub context: SessionContext,
    pub partitions: Vec<(SessionKey, PartitionParams)>,
}

#[derive(Debug)]
struct CachedPartition {
    params: PartitionParams,
    /// The last values answered (`None`: never answered in this session).
    answered: Option<Answered>,
}

#[derive(Debug)]
struct Session {
    replica_id: i32,
    uses_topic_ids: bool,
    /// The epoch the next incremental request must carry.
    next_epoch: i32,
    partitions: BTreeMap<SessionKey, CachedPartition>,
    last_used_ms: i64,
}

/// The leader's fetch sessions.
#[derive(Debug)]
pub struct FetchSessionCache {
    sessions: HashMap<i32, Session>,
    /// The last session id handed out (ids are positive, never reused while in the cache).
    last_id: i32,
    slots_max: usize,
    stats: ReplicaFetchStats,
}

impl Default for FetchSessionCache {
    fn default() -> Self {
        FetchSessionCache::with_slots(FETCH_SESSION_SLOTS_MAX)
    }
}

impl FetchSessionCache {
    /// A cache of at most `slots_max` sessions.
    pub fn with_slots(slots_max: usize) -> FetchSessionCache {
        FetchSessionCache {
            sessions: HashMap::new(),
            last_id: rand::random::<i32>().max(1) / 2,
            slots_max,
            stats: ReplicaFetchStats::default(),
        }
    }

    /// What the replicas' Fetch requests carried.
    pub fn stats(&self) -> ReplicaFetchStats {
        self.stats
    }

    /// Sessions in the cache.
    pub fn len(&self) -> usize {
        self.sessions.len()
    }

    pub fn is_empty(&self) -> bool {
        self.sessions.is_empty()
    }

    /// Partitions cached in session `id`, if it exists.
    pub fn session_partitions(&self, id: i32) -> Option<usize> {
        self.sessions.get(&id).map(|s| s.partitions.len())
    }

    /// Kafka's `FetchManager.newContext`: what `request` opens, closes or continues.
    pub fn open(&mut self, request: SessionRequest, now_ms: i64) -> Opened {
        let SessionRequest {
            session_id,
            session_epoch,
            replica_id,
            uses_topic_ids,
            partitions,
            forgotten,
            request_bytes,
        } = request;
        if replica_id >= 0 {
            self.stats.requests += 1;
            self.stats.incremental += u64::from(session_epoch > 0);
            self.stats.request_bytes += request_bytes as u64;
            self.stats.partitions_named += partitions.len() as u64;
        }
        if session_epoch == FINAL_EPOCH || session_epoch == INITIAL_EPOCH {
            // A full fetch; it closes the session it names.
            if session_id != NO_SESSION {
                self.sessions.remove(&session_id);
            }
            let partitions = dedup(partitions);
            let session_id = if session_epoch == INITIAL_EPOCH && replica_id >= 0 {
                self.create(replica_id, uses_topic_ids, &partitions, now_ms)
            } else {
                NO_SESSION
            };
            return Opened {
                context: SessionContext::Full { session_id },
                partitions,
            };
        }
        let Some(session) = self.sessions.get_mut(&session_id) else {
            return refused(ResponseError::FetchSessionIdNotFound);
        };
        if session.replica_id != replica_id {
            // Not this fetcher's session (a consumer never has one).
            return refused(ResponseError::FetchSessionIdNotFound);
        }
        if session.next_epoch != session_epoch {
            return refused(ResponseError::InvalidFetchSessionEpoch);
        }
        if session.uses_topic_ids != uses_topic_ids {
            return refused(ResponseError::FetchSessionTopicIdError);
        }
        for key in &forgotten {
            session.partitions.remove(key);
        }
        for (key, params) in partitions {
            session
                .partitions
                .entry(key)
                .and_modify(|c| c.params = params)
                .or_insert(CachedPartition {
                    params,
                    answered: None,
                });
        }
        let all: Vec<(SessionKey, PartitionParams)> = session
            .partitions
            .iter()
            .map(|(k, c)| (k.clone(), c.params))
            .collect();
        if all.len() > FETCH_SESSION_PARTITIONS_MAX {
            // Over the bound: the session is closed and this request answered in full, with
            // session id 0, which the fetcher takes as "start again with a full fetch".
            self.sessions.remove(&session_id);
            return Opened {
                context: SessionContext::Full {
                    session_id: NO_SESSION,
                },
                partitions: all,
            };
        }
        session.next_epoch = next_epoch(session_epoch);
        session.last_used_ms = now_ms;
        Opened {
            context: SessionContext::Incremental { session_id },
            partitions: all,
        }
    }

    /// Whether the answer to a request in `context` carries this partition, given what it
    /// would say (`answered`) and whether it must be sent whatever the offsets
    /// (`must`: records, an error, a diverging epoch, a preferred read replica). Records what
    /// the session's fetcher was told.
    pub fn include(
        &mut self,
        context: SessionContext,
        key: &SessionKey,
        answered: Answered,
        must: bool,
    ) -> bool {
        let session_id = context.session_id();
        let Some(cached) = self
            .sessions
            .get_mut(&session_id)
            .and_then(|s| s.partitions.get_mut(key))
        else {
            return !matches!(context, SessionContext::Error(_));
        };
        let send = match context {
            SessionContext::Full { .. } => true,
            SessionContext::Incremental { .. } => must || cached.answered != Some(answered),
            SessionContext::Error(_) => false,
        };
        if send {
            cached.answered = Some(answered);
        }
        send
    }

    /// A new session for `replica_id` holding `partitions`, or [`NO_SESSION`] when the cache
    /// is full of sessions used in the last [`FETCH_SESSION_EVICTION_MS`] or the partitions
    /// are over the bound.
    fn create(
        &mut self,
        replica_id: i32,
        uses_topic_ids: bool,
        partitions: &[(SessionKey, PartitionParams)],
        now_ms: i64,
    ) -> i32 {
        if partitions.len() > FETCH_SESSION_PARTITIONS_MAX || self.slots_max == 0 {
            return NO_SESSION;
        }
        if self.sessions.len() >= self.slots_max {
            let oldest = self
                .sessions
                .iter()
                .min_by_key(|(_, s)| s.last_used_ms)
                .map(|(&id, s)| (id, s.last_used_ms));
            match oldest {
                Some((id, used)) if now_ms - used >= FETCH_SESSION_EVICTION_MS => {
                    self.sessions.remove(&id);
                }
                _ => return NO_SESSION,
            }
        }
        let id = self.new_id();
        let partitions = partitions
            .iter()
            .map(|(k, params)| {
                let cached = CachedPartition {
                    params: *params,
                    answered: None,
                };
                (k.clone(), cached)
            })
            .collect();
        let session = Session {
            replica_id,
            uses_topic_ids,
            next_epoch: 1,
            partitions,
            last_used_ms: now_ms,
        };
        self.sessions.insert(id, session);
        debug_assert!(self.sessions.len() <= self.slots_max);
        id
    }

    fn new_id(&mut self) -> i32 {
        loop {
            self.last_id = if self.last_id >= i32::MAX - 1 {
                1
            } else {
                self.last_id + 1
            };
            if !self.sessions.contains_key(&self.last_id) {
                return self.last_id;
            }
        }
    }
}

impl SessionRequest {
    /// Whether the request needs the cache: a replica's (it may open or use a session), or
    /// one naming a session. A consumer's sessionless or "create" request does not, and is
    /// answered in full without taking the cache's lock ([`sessionless`]).
    pub fn needs_cache(&self) -> bool {
        self.replica_id >= 0 || self.session_id != NO_SESSION
    }
}

/// A full answer with no session, for a request that does not need the cache.
pub fn sessionless(request: SessionRequest) -> Opened {
    debug_assert!(!request.needs_cache());
    Opened {
        context: SessionContext::Full {
            session_id: NO_SESSION,
        },
        partitions: dedup(request.partitions),
    }
}

/// The epoch after `epoch` (Kafka's `nextEpoch`: it wraps to 1, never 0 or -1).
pub fn next_epoch(epoch: i32) -> i32 {
    if epoch < 0 {
        FINAL_EPOCH
    } else if epoch == i32::MAX {
        1
    } else {
        epoch + 1
    }
}

fn refused(error: ResponseError) -> Opened {
    Opened {
        context: SessionContext::Error(error.code()),
        partitions: Vec::new(),
    }
}

/// Each partition once, in the place of its first mention with the values of its last.
fn dedup(partitions: Vec<(SessionKey, PartitionParams)>) -> Vec<(SessionKey, PartitionParams)> {
    let mut at: HashMap<SessionKey, usize> = HashMap::with_capacity(partitions.len());
    let mut out: Vec<(SessionKey, PartitionParams)> = Vec::with_capacity(partitions.len());
    for (key, params) in partitions {
        match at.get(&key) {
            Some(&i) => out[i].1 = params,
            None => {
                at.insert(key.clone(), out.len());
                out.push((key, params));
            }
        }
    }
    out
}

#[cfg(test)]
#[path = "fetch_session_tests.rs"]
mod tests;
