//! The real broker binary over raw sockets: DescribeTopicPartitions (75) v0 is advertised,
//! pages through topics and partitions by its cursor, agrees with Metadata on leaders, replicas
//! and ISR, and answers Kafka's codes for unknown topics and a bad cursor.

mod support;

use kafka_protocol::ResponseError;
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::describe_topic_partitions_request::{Cursor, TopicRequest};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use support::{BrokerProc, Conn};

fn name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_string()))
}

fn create_topic(c: &mut Conn, topic: &str, partitions: i32) {
    let mut t = CreatableTopic::default();
    t.name = name(topic);
    t.num_partitions = partitions;
    t.replication_factor = 1;
    let mut req = CreateTopicsRequest::default();
    req.topics = vec![t];
    req.timeout_ms = 5000;
    let r: CreateTopicsResponse = c.call(ApiKey::CreateTopics, 7, &req);
    assert_eq!(r.topics[0].error_code, 0);
}

fn request(
    topics: &[&str],
    limit: i32,
    cursor: Option<(&str, i32)>,
) -> DescribeTopicPartitionsRequest {
    let mut r = DescribeTopicPartitionsRequest::default();
    r.topics = topics
        .iter()
        .map(|t| {
            let mut req = TopicRequest::default();
            req.name = name(t);
            req
        })
        .collect();
    r.response_partition_limit = limit;
    r.cursor = cursor.map(|(t, p)| {
        let mut c = Cursor::default();
        c.topic_name = name(t);
        c.partition_index = p;
        c
    });
    r
}

fn describe(c: &mut Conn, req: &DescribeTopicPartitionsRequest) -> DescribeTopicPartitionsResponse {
    c.call(ApiKey::DescribeTopicPartitions, 0, req)
}

/// (topic, partition, leader, leader epoch, replicas, isr) as DescribeTopicPartitions has them.
type Row = (String, i32, i32, i32, Vec<i32>, Vec<i32>);

fn ids(v: &[BrokerId]) -> Vec<i32> {
    v.iter().map(|b| b.0).collect()
}

#[test]
fn describe_topic_partitions_pages_through_the_topics_as_kafka_does() {
    let dir = tempfile::tempdir().unwrap();
    let b = BrokerProc::start(&dir.path().join("d"), &[]);
    let mut c = b.connect();

    let versions: ApiVersionsResponse =
        c.call(ApiKey::ApiVersions, 2, &ApiVersionsRequest::default());
    let advertised = versions
        .api_keys
        .iter()
        .find(|k| k.api_key == ApiKey::DescribeTopicPartitions as i16)
        .map(|k| (k.min_version, k.max_version));
    assert_eq!(advertised, Some((0, 0)));

    create_topic(&mut c, "dtp-b", 3);
    create_topic(&mut c, "dtp-a", 5);

    // Walk both topics two partitions at a time, as the Admin client does with its cursor.
    let named = ["dtp-b", "dtp-a"];
    let mut rows: Vec<Row> = Vec::new();
    let mut cursors = Vec::new();
    let mut cursor: Option<(String, i32)> = None;
    for _ in 0..10 {
        let at = cursor.as_ref().map(|(t, p)| (t.as_str(), *p));
        let r = describe(&mut c, &request(&named, 2, at));
        for t in &r.topics {
            assert_eq!(t.error_code, 0);
            assert!(!t.topic_id.is_nil());
            assert!(!t.is_internal);
            // Without an authorizer: every topic operation (KIP-430), as Metadata answers.
            assert_ne!(t.topic_authorized_operations, i32::MIN);
            let topic = t.name.as_ref().unwrap().0.to_string();
            for p in &t.partitions {
                assert_eq!(p.error_code, 0);
                assert_eq!(p.eligible_leader_replicas.as_deref(), Some(&[][..]));
                assert_eq!(p.last_known_elr.as_deref(), Some(&[][..]));
                assert!(p.offline_replicas.is_empty());
                let row = (
                    topic.clone(),
                    p.partition_index,
                    p.leader_id.0,
                    p.leader_epoch,
                );
                rows.push((
                    row.0,
                    row.1,
                    row.2,
                    row.3,
                    ids(&p.replica_nodes),
                    ids(&p.isr_nodes),
                ));
            }
        }
        cursor = r
            .next_cursor
            .map(|c| (c.topic_name.0.to_string(), c.partition_index));
        match &cursor {
            Some(c) => cursors.push(c.clone()),
            None => break,
        }
    }
    let pages: Vec<(&str, i32)> = cursors.iter().map(|(t, p)| (t.as_str(), *p)).collect();
    assert_eq!(pages, vec![("dtp-a", 2), ("dtp-a", 4), ("dtp-b", 1)]);
    let order: Vec<(&str, i32)> = rows.iter().map(|r| (r.0.as_str(), r.1)).collect();
    let expected: Vec<(&str, i32)> = (0..5)
        .map(|p| ("dtp-a", p))
        .chain((0..3).map(|p| ("dtp-b", p)))
        .collect();
    assert_eq!(order, expected);

    // The same leaders, epochs, replicas and ISR as Metadata answers.
    let mut meta = MetadataRequest::default();
    meta.topics = Some(
        named
            .iter()
            .map(|t| {
                let mut m = MetadataRequestTopic::default();
                m.name = Some(name(t));
                m
            })
            .collect(),
    );
    let m: MetadataResponse = c.call(ApiKey::Metadata, 12, &meta);
    let mut from_metadata: Vec<Row> = m
        .topics
        .iter()
        .flat_map(|t| {
            let topic = t.name.as_ref().unwrap().0.to_string();
            t.partitions.iter().map(move |p| {
                let (leader, epoch) = (p.leader_id.0, p.leader_epoch);
                let (replicas, isr) = (ids(&p.replica_nodes), ids(&p.isr_nodes));
                (
                    topic.clone(),
                    p.partition_index,
                    leader,
                    epoch,
                    replicas,
                    isr,
                )
            })
        })
        .collect();
    from_metadata.sort();
    assert_eq!(rows, from_metadata);
    assert!(
        rows.iter()
            .all(|r| r.2 >= 0 && r.4 == vec![r.2] && r.5 == vec![r.2])
    );

    // Every topic (an empty list), from a cursor: the topics after it, in name order.
    let r = describe(&mut c, &request(&[], 2000, Some(("dtp-a", 3))));
    let listed: Vec<(String, Vec<i32>)> = r
        .topics
        .iter()
        .map(|t| {
            let ps = t.partitions.iter().map(|p| p.partition_index).collect();
            (t.name.as_ref().unwrap().0.to_string(), ps)
        })
        .filter(|(t, _)| t.starts_with("dtp-"))
        .collect();
    let expected = vec![
        ("dtp-a".to_string(), vec![3, 4]),
        ("dtp-b".to_string(), vec![0, 1, 2]),
    ];
    assert_eq!(listed, expected);

    // An unknown topic is named with UNKNOWN_TOPIC_OR_PARTITION, an illegal name with
    // INVALID_TOPIC_EXCEPTION; neither is created.
    let r = describe(&mut c, &request(&["dtp-none", "no/such"], 10, None));
    let codes: Vec<(String, i16)> = r
        .topics
        .iter()
        .map(|t| (t.name.as_ref().unwrap().0.to_string(), t.error_code))
        .collect();
    let unknown = ResponseError::UnknownTopicOrPartition.code();
    let invalid_name = ResponseError::InvalidTopicException.code();
    assert_eq!(
        codes,
        vec![
            ("dtp-none".into(), unknown),
            ("no/such".into(), invalid_name)
        ]
    );

    // A cursor naming a topic that is not listed: INVALID_REQUEST for every listed topic.
    let r = describe(
        &mut c,
        &request(&["dtp-b", "dtp-a"], 10, Some(("dtp-c", 0))),
    );
    let invalid = ResponseError::InvalidRequest.code();
    assert_eq!(r.topics.len(), 2);
    assert!(
        r.topics
            .iter()
            .all(|t| t.error_code == invalid && t.partitions.is_empty())
    );
    assert!(r.next_cursor.is_none());
    // The connection stays usable.
    let r = describe(&mut c, &request(&["dtp-b"], 10, None));
    assert_eq!(r.topics[0].partitions.len(), 3);
}
