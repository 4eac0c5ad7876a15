use kafka_protocol::ResponseError;
use std::collections::HashMap;

use bytes::{BufMut, Bytes, BytesMut};

use crate::*;

pub const SESSION_MS: i32 = 10_000;
pub const REBALANCE_MS: i32 = 30_000;

/// Drives a coordinator with an explicit clock and collects its effects.
pub struct Harness {
    pub c: GroupCoordinator,
    pub now_ms: i64,
    pub next_token: u64,
    pub replies: HashMap<RequestToken, Reply>,
    pub appended: Vec<(i32, OffsetsRecord)>,
}

pub fn config(initial_delay_ms: i64) -> CoordinatorConfig {
    CoordinatorConfig {
        group_initial_rebalance_delay_ms: initial_delay_ms,
        offsets_topic_partitions: 4,
        ..CoordinatorConfig::default()
    }
}

/// A ConsumerProtocolSubscription v0 for `topics`.
pub fn subscription(topics: &[&str]) -> Bytes {
    let mut buf = BytesMut::new();
    buf.put_i16(0);
    buf.put_i32(topics.len() as i32);
    for t in topics {
        buf.put_i16(t.len() as i16);
        buf.put_slice(t.as_bytes());
    }
    buf.put_i32(-1);
    buf.freeze()
}

pub fn protocols(names: &[&str], topics: &[&str]) -> Vec<Protocol> {
    names
        .iter()
        .map(|n| Protocol {
            name: n.to_string(),
            metadata: subscription(topics),
        })
        .collect()
}

pub fn join_request(group: &str, member_id: &str, instance: Option<&str>) -> JoinGroupRequest {
    JoinGroupRequest {
        group_id: group.to_string(),
        session_timeout_ms: SESSION_MS,
        rebalance_timeout_ms: REBALANCE_MS,
        member_id: member_id.to_string(),
        group_instance_id: instance.map(str::to_string),
        protocol_type: "consumer".to_string(),
        protocols: protocols(&["range"], &["t"]),
        client_id: "client".to_string(),
        client_host: "/127.0.0.1".to_string(),
        require_known_member_id: true,
    }
}

impl Harness {
    pub fn new(config: CoordinatorConfig) -> Harness {
        Harness {
            c: GroupCoordinator::new(config, 1_000_000),
            now_ms: 1_000_000,
            next_token: 1,
            replies: HashMap::new(),
            appended: Vec::new(),
        }
    }

    pub fn absorb(&mut self, out: Effects) {
        for append in out.appends {
            for r in append.records {
                self.appended.push((append.partition, r));
            }
        }
        for (token, reply) in out.replies {
            assert!(
                self.replies.insert(token, reply).is_none(),
                "a request is answered at most once"
            );
        }
    }

    fn token(&mut self) -> RequestToken {
        self.next_token += 1;
        RequestToken(self.next_token)
    }

    pub fn advance(&mut self, ms: i64) {
        self.now_ms += ms;
        let mut out = Effects::default();
        self.c.tick(self.now_ms, &mut out);
        self.absorb(out);
    }

    pub fn join(&mut self, request: JoinGroupRequest) -> RequestToken {
        let token = self.token();
        let mut out = Effects::default();
        self.c.join_group(self.now_ms, token, request, &mut out);
        self.absorb(out);
        token
    }

    pub fn join_reply(&mut self, token: RequestToken) -> Option<JoinGroupResponse> {
        match self.replies.remove(&token) {
            Some(Reply::Join(r)) => Some(r),
            Some(other) => panic!("expected a join reply, got {other:?}"),
            None => None,
        }
    }

    pub fn sync(
        &mut self,
        group: &str,
        member_id: &str,
        generation_id: i32,
        assignments: Vec<(String, Bytes)>,
    ) -> RequestToken {
        let token = self.token();
        let mut out = Effects::default();
        self.c.sync_group(
            self.now_ms,
            token,
            SyncGroupRequest {
                group_id: group.to_string(),
                generation_id,
                member_id: member_id.to_string(),
                group_instance_id: None,
                protocol_type: Some("consumer".to_string()),
                protocol_name: None,
                assignments,
            },
            &mut out,
        );
        self.absorb(out);
        token
    }

    pub fn sync_reply(&mut self, token: RequestToken) -> Option<SyncGroupResponse> {
        match self.replies.remove(&token) {
            Some(Reply::Sync(r)) => Some(r),
            Some(other) => panic!("expected a sync reply, got {other:?}"),
            None => None,
        }
    }

    pub fn heartbeat(&mut self, group: &str, member_id: &str, generation_id: i32) -> i16 {
        self.heartbeat_static(group, member_id, None, generation_id)
    }

    pub fn heartbeat_static(
        &mut self,
        group: &str,
        member_id: &str,
        instance: Option<&str>,
        generation_id: i32,
    ) -> i16 {
        let mut out = Effects::default();
        let code = self.c.heartbeat(
            self.now_ms,
            HeartbeatRequest {
                group_id: group.to_string(),
                generation_id,
                member_id: member_id.to_string(),
                group_instance_id: instance.map(str::to_string),
            },
            &mut out,
        );
        self.absorb(out);
        code
    }

    pub fn leave(&mut self, group: &str, members: &[(&str, Option<&str>)]) -> LeaveGroupResponse {
        let mut out = Effects::default();
        let response = self.c.leave_group(
            self.now_ms,
            LeaveGroupRequest {
                group_id: group.to_string(),
                members: members
                    .iter()
                    .map(|(m, i)| LeavingMember {
                        member_id: m.to_string(),
                        group_instance_id: i.map(str::to_string),
                    })
                    .collect(),
            },
            &mut out,
        );
        self.absorb(out);
        response
    }

    /// The MEMBER_ID_REQUIRED round trip: returns the assigned member id and the parked token.
    pub fn join_new(&mut self, group: &str) -> (String, RequestToken) {
        let first = self.join(join_request(group, "", None));
        let reply = self
            .join_reply(first)
            .expect("immediate MEMBER_ID_REQUIRED");
        assert_eq!(reply.error_code, ResponseError::MemberIdRequired.code());
        assert!(reply.member_id.starts_with("client-"));
        let member_id = reply.member_id;
        let token = self.join(join_request(group, &member_id, None));
        (member_id, token)
    }

    /// Joins `n` members and completes the rebalance; returns (member ids, generation).
    pub fn stable_group(&mut self, group: &str, n: usize) -> (Vec<String>, i32) {
        let mut ids = Vec::new();
        let mut tokens = Vec::new();
        for _ in 0..n {
            let (id, token) = self.join_new(group);
            ids.push(id);
            tokens.push(token);
        }
        // The initial delay (config(100) in these tests) collects every member first.
        for _ in 0..10 {
            if tokens.iter().all(|t| self.replies.contains_key(t)) {
                break;
            }
            self.advance(100);
        }
        let mut generation = -1;
        let mut leader = String::new();
        for token in tokens {
            let reply = self.join_reply(token).expect("join answered");
            assert_eq!(reply.error_code, 0, "{reply:?}");
            generation = reply.generation_id;
            leader = reply.leader.clone();
        }
        let assignments = ids
            .iter()
            .map(|id| (id.clone(), Bytes::from(format!("assignment-{id}"))))
            .collect();
        let mut tokens = Vec::new();
        for id in &ids {
            if *id != leader {
                tokens.push(self.sync(group, id, generation, Vec::new()));
            }
        }
        let leader_token = self.sync(group, &leader, generation, assignments);
        tokens.push(leader_token);
        for token in tokens {
            let reply = self.sync_reply(token).expect("sync answered");
            assert_eq!(reply.error_code, 0);
        }
        assert_eq!(self.c.group_state(group), Some(GroupState::Stable));
        (ids, generation)
    }

    pub fn commit(
        &mut self,
        group: &str,
        member_id: &str,
        generation_id: i32,
        topic: &str,
        partition: i32,
        offset: i64,
    ) -> i16 {
        let mut out = Effects::default();
        let results = self.c.commit_offsets(
            self.now_ms,
            OffsetCommitRequest {
                group_id: group.to_string(),
                generation_id,
                member_id: member_id.to_string(),
                group_instance_id: None,
                retention_time_ms: -1,
                api_version: 8,
                topics: vec![CommitTopic {
                    name: topic.to_string(),
                    partitions: vec![CommitPartition {
                        partition,
                        offset,
                        leader_epoch: 3,
                        metadata: Some(format!("meta-{offset}")),
                    }],
                }],
            },
            &mut out,
        );
        self.absorb(out);
        results[0].1[0].1
    }

    pub fn fetch(&self, group: &str, topic: &str, partition: i32) -> FetchedOffset {
        let result = self
            .c
            .fetch_offsets(group, Some(&[(topic.to_string(), vec![partition])]));
        assert_eq!(result.error_code, 0);
        result.topics[0].partitions[0].clone()
    }
}
