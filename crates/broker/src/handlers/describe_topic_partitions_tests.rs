//! DescribeTopicPartitions against metadata images built from records: Kafka's paging, cursor,
//! error codes and authorization, and the ELR as the image holds it.

use kafka_protocol::messages::describe_topic_partitions_request::{
    Cursor as RequestCursor, TopicRequest,
};
use streamforge_metadata::LogPosition;
use streamforge_metadata::records::{
    Endpoint, PartitionElr, PartitionRecord, Record, RegisterBroker, TopicRecord,
};

use super::*;

fn register(id: BrokerId) -> Record {
    Record::RegisterBroker(RegisterBroker {
        broker_id: id,
        broker_epoch: i64::from(id),
        incarnation_id: Uuid::from_u128(id as u128),
        endpoints: vec![Endpoint {
            name: "PLAINTEXT".into(),
            host: "127.0.0.1".into(),
            port: 9092,
        }],
        rack: None,
        fenced: false,
    })
}

fn topic_id(name: &str) -> Uuid {
    Uuid::from_u128(name.bytes().fold(1u128, |h, b| h * 131 + u128::from(b)))
}

/// A topic with `count` partitions, partition p on replicas [1, 2, 3] rotated by p.
fn topic(name: &str, count: i32) -> Vec<Record> {
    let mut records = vec![Record::Topic(TopicRecord {
        name: name.into(),
        topic_id: topic_id(name),
    })];
    for p in 0..count {
        let replicas: Vec<BrokerId> = (0..3).map(|i| (p + i) % 3 + 1).collect();
        records.push(Record::Partition(PartitionRecord {
            topic_id: topic_id(name),
            partition: p,
            isr: replicas.clone(),
            leader: replicas[0],
            replicas,
            leader_epoch: 4,
            partition_epoch: 0,
        }));
    }
    records
}

fn image(records: impl IntoIterator<Item = Record>) -> MetadataImage {
    let mut image = MetadataImage::empty();
    for r in records {
        let at = LogPosition {
            offset: image.position().offset + 1,
            epoch: 1,
        };
        image = image.apply(&r, at).unwrap().0;
    }
    image
}

/// Brokers 1-3 and topics `a` (3 partitions), `b` (2) and `c` (1).
fn cluster() -> Vec<Record> {
    let mut records: Vec<Record> = (1..=3).map(register).collect();
    records.extend(topic("b", 2));
    records.extend(topic("a", 3));
    records.extend(topic("c", 1));
    records
}

fn no_offline(_: &str) -> BTreeSet<i32> {
    BTreeSet::new()
}

fn view<'a>(
    image: &'a MetadataImage,
    offline: &'a dyn Fn(&str) -> BTreeSet<i32>,
) -> ReplicaView<'a> {
    ReplicaView {
        image,
        node: 1,
        listener: "PLAINTEXT",
        offline_here: offline,
    }
}

const OPERATIONS: i32 = 0b1010;
const ALLOW_ALL: Authorization<'static> = Authorization {
    may_describe: &|_| true,
    operations: &|_| OPERATIONS,
};

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
            req.name = topic_name(t);
            req
        })
        .collect();
    r.response_partition_limit = limit;
    r.cursor = cursor.map(|(t, p)| {
        let mut c = RequestCursor::default();
        c.topic_name = topic_name(t);
        c.partition_index = p;
        c
    });
    r
}

/// (topic, error code, partition indexes) of each topic, and the next cursor.
type Shape = (Vec<(String, i16, Vec<i32>)>, Option<(String, i32)>);

fn shape(r: &DescribeTopicPartitionsResponse) -> Shape {
    let topics = r
        .topics
        .iter()
        .map(|t| {
            let name = t.name.as_ref().map(|n| n.0.to_string()).unwrap_or_default();
            let ps = t.partitions.iter().map(|p| p.partition_index).collect();
            (name, t.error_code, ps)
        })
        .collect();
    let cursor = r
        .next_cursor
        .as_ref()
        .map(|c| (c.topic_name.0.to_string(), c.partition_index));
    (topics, cursor)
}

fn ok(name: &str, partitions: &[i32]) -> (String, i16, Vec<i32>) {
    (name.to_string(), 0, partitions.to_vec())
}

fn cursor(name: &str, partition: i32) -> Option<(String, i32)> {
    Some((name.to_string(), partition))
}

fn run(
    image: &MetadataImage,
    req: &DescribeTopicPartitionsRequest,
) -> DescribeTopicPartitionsResponse {
    describe(req, &view(image, &no_offline), &ALLOW_ALL).unwrap()
}

#[test]
fn pages_walk_every_partition_of_every_topic_once_in_name_order() {
    let image = image(cluster());
    let named = ["c", "b", "a"];
    let r = run(&image, &request(&named, 2, None));
    assert_eq!(shape(&r), (vec![ok("a", &[0, 1])], cursor("a", 2)));
    // The cursor's topic starts at its partition, the topics after it at 0.
    let r = run(&image, &request(&named, 2, Some(("a", 2))));
    assert_eq!(
        shape(&r),
        (vec![ok("a", &[2]), ok("b", &[0])], cursor("b", 1))
    );
    let r = run(&image, &request(&named, 2, Some(("b", 1))));
    assert_eq!(shape(&r), (vec![ok("b", &[1]), ok("c", &[0])], None));
    // A page that fills at a topic's end points at the next topic's first partition.
    let r = run(&image, &request(&named, 3, None));
    assert_eq!(shape(&r), (vec![ok("a", &[0, 1, 2])], cursor("b", 0)));
    // Everything fits: no cursor.
    let r = run(&image, &request(&named, 2000, None));
    let all = vec![ok("a", &[0, 1, 2]), ok("b", &[0, 1]), ok("c", &[0])];
    assert_eq!(shape(&r), (all.clone(), None));
    // An empty list is every topic, the same way.
    assert_eq!(shape(&run(&image, &request(&[], 2000, None))), (all, None));
    let r = run(&image, &request(&[], 4, Some(("a", 1))));
    assert_eq!(
        shape(&r),
        (vec![ok("a", &[1, 2]), ok("b", &[0, 1])], cursor("c", 0))
    );
}

#[test]
fn the_limit_is_capped_at_kafkas_broker_maximum_and_is_at_least_one() {
    let mut records = cluster();
    records.extend(topic("big", RESPONSE_PARTITIONS_MAX + 100));
    let image = image(records);
    let r = run(&image, &request(&["big"], i32::MAX, None));
    let (topics, next) = shape(&r);
    assert_eq!(topics[0].2.len(), RESPONSE_PARTITIONS_MAX as usize);
    assert_eq!(next, cursor("big", RESPONSE_PARTITIONS_MAX));
    let r = run(&image, &request(&["big"], 5000, Some(("big", 2000))));
    let (topics, next) = shape(&r);
    assert_eq!(topics[0].2, (2000..2100).collect::<Vec<_>>());
    assert_eq!(next, None);
    for limit in [0, -1, i32::MIN] {
        let r = run(&image, &request(&["a"], limit, None));
        assert_eq!(shape(&r), (vec![ok("a", &[0])], cursor("a", 1)), "{limit}");
    }
}

#[test]
fn a_cursor_past_the_topics_end_describes_it_with_no_partitions() {
    let image = image(cluster());
    let r = run(&image, &request(&["a", "b"], 10, Some(("a", 7))));
    assert_eq!(shape(&r), (vec![ok("a", &[]), ok("b", &[0, 1])], None));
}

#[test]
fn a_cursor_outside_the_listed_topics_or_below_zero_is_an_invalid_request() {
    let image = image(cluster());
    let v = view(&image, &no_offline);
    let req = request(&["a", "b"], 10, Some(("c", 0)));
    assert_eq!(
        describe(&req, &v, &ALLOW_ALL),
        Err(InvalidCursor::TopicNotListed("c".into()))
    );
    // Listed topics before the cursor's are dropped first; the cursor's must remain.
    let req = request(&["b", "a"], 10, Some(("a", 0)));
    assert!(describe(&req, &v, &ALLOW_ALL).is_ok());
    let req = request(&["a"], 10, Some(("a", -1)));
    assert_eq!(
        describe(&req, &v, &ALLOW_ALL),
        Err(InvalidCursor::NegativePartition(-1))
    );
    let req = request(&[], 10, Some(("a", -1)));
    assert_eq!(
        describe(&req, &v, &ALLOW_ALL),
        Err(InvalidCursor::NegativePartition(-1))
    );
    // Listing every topic, the cursor's topic need not exist: the page starts after it.
    let r = run(&image, &request(&[], 10, Some(("aa", 3))));
    assert_eq!(shape(&r), (vec![ok("b", &[0, 1]), ok("c", &[0])], None));

    // The whole request answers INVALID_REQUEST on every listed topic, with nothing else.
    let req = request(&["b", "a"], 10, Some(("c", 0)));
    let r = error_response(&req, ResponseError::InvalidRequest);
    let invalid = ResponseError::InvalidRequest.code();
    let expected = vec![("b".into(), invalid, vec![]), ("a".into(), invalid, vec![])];
    assert_eq!(shape(&r), (expected, None));
    assert!(
        r.topics
            .iter()
            .all(|t| t.topic_id.is_nil() && !t.is_internal)
    );
}

#[test]
fn unknown_topics_are_named_with_kafkas_codes_and_take_no_room() {
    let image = image(cluster());
    let named = ["a", "gone", "bad name", "__consumer_offsets", "a"];
    let r = run(&image, &request(&named, 3, None));
    let unknown = ResponseError::UnknownTopicOrPartition.code();
    let invalid = ResponseError::InvalidTopicException.code();
    let expected = vec![
        ("__consumer_offsets".into(), unknown, vec![]),
        ok("a", &[0, 1, 2]),
        ("bad name".into(), invalid, vec![]),
        ("gone".into(), unknown, vec![]),
    ];
    // The page filled with `a`: the topics after it, known or not, wait for the next page.
    assert_eq!(shape(&r), (expected[..2].to_vec(), cursor("bad name", 0)));
    let r = run(&image, &request(&named, 10, None));
    assert_eq!(shape(&r), (expected, None));
    assert!(r.topics[0].is_internal && r.topics[0].topic_id.is_nil());
    assert!(!r.topics[1].is_internal);
    assert_eq!(r.topics[1].topic_id, topic_id("a"));
    assert!(
        r.topics
            .iter()
            .all(|t| t.topic_authorized_operations == OPERATIONS)
    );
}

#[test]
fn partitions_carry_the_images_leader_replicas_isr_and_elr() {
    let mut records = cluster();
    records.push(Record::PartitionChange(
        streamforge_metadata::records::PartitionChange {
            topic_id: topic_id("a"),
            partition: 1,
            leader: None,
            isr: Some(vec![2]),
            replicas: None,
        },
    ));
    records.push(Record::PartitionElr(PartitionElr {
        topic_id: topic_id("a"),
        partition: 1,
        elr: vec![3, 1],
        last_known_elr: vec![2],
    }));
    let image = image(records);
    let r = run(&image, &request(&["a"], 10, None));
    let p = &r.topics[0].partitions;
    let ids = |v: &[WireBrokerId]| v.iter().map(|b| b.0).collect::<Vec<_>>();
    assert_eq!(p[1].leader_id.0, 2);
    assert_eq!(p[1].leader_epoch, 4);
    assert_eq!(ids(&p[1].replica_nodes), vec![2, 3, 1]);
    assert_eq!(ids(&p[1].isr_nodes), vec![2]);
    assert_eq!(
        p[1].eligible_leader_replicas.as_deref().map(ids),
        Some(vec![3, 1])
    );
    assert_eq!(p[1].last_known_elr.as_deref().map(ids), Some(vec![2]));
    // Without an ELR both lists are empty, never null.
    assert_eq!(p[0].eligible_leader_replicas.as_deref(), Some(&[][..]));
    assert_eq!(p[0].last_known_elr.as_deref(), Some(&[][..]));
    assert!(
        p.iter()
            .all(|p| p.error_code == 0 && p.offline_replicas.is_empty())
    );
}

#[test]
fn fenced_brokers_and_logs_offline_here_are_offline_replicas() {
    let mut records = cluster();
    records.push(Record::FenceBroker {
        broker_id: 3,
        broker_epoch: 3,
    });
    let image = image(records);
    // Partition a-1's log could not be opened on this broker (1).
    let offline = |t: &str| -> BTreeSet<i32> {
        if t == "a" {
            [1].into()
        } else {
            BTreeSet::new()
        }
    };
    let r = describe(
        &request(&["a"], 10, None),
        &view(&image, &offline),
        &ALLOW_ALL,
    )
    .unwrap();
    let p = &r.topics[0].partitions;
    let ids = |v: &[WireBrokerId]| v.iter().map(|b| b.0).collect::<Vec<_>>();
    assert_eq!(ids(&p[0].offline_replicas), vec![3]);
    assert_eq!(ids(&p[1].offline_replicas), vec![3, 1]);
    // a-1 is led by 2 (online); a-0 by 1, online here; a-2 by 3, fenced but registered.
    assert_eq!(
        p.iter().map(|p| p.leader_id.0).collect::<Vec<_>>(),
        vec![1, 2, 3]
    );
    // A leader whose log is offline here is no leader, as Metadata reports it.
    let offline0 = |t: &str| -> BTreeSet<i32> {
        if t == "a" {
            [0].into()
        } else {
            BTreeSet::new()
        }
    };
    let r = describe(
        &request(&["a"], 10, None),
        &view(&image, &offline0),
        &ALLOW_ALL,
    )
    .unwrap();
    assert_eq!(r.topics[0].partitions[0].leader_id.0, NO_LEADER);
    assert_eq!(r.topics[0].partitions[0].leader_epoch, 4);
    // Another listener than the one the brokers registered: every other broker is offline.
    let v = ReplicaView {
        listener: "SASL_SSL",
        ..view(&image, &no_offline)
    };
    let r = describe(&request(&["a"], 10, None), &v, &ALLOW_ALL).unwrap();
    let p = &r.topics[0].partitions;
    assert_eq!(ids(&p[0].offline_replicas), vec![2, 3]);
    assert_eq!(p[0].leader_id.0, 1);
    assert_eq!(p[1].leader_id.0, NO_LEADER);
}

#[test]
fn topics_without_describe_are_refused_when_named_and_hidden_when_listing_all() {
    let image = image(cluster());
    let auth = Authorization {
        may_describe: &|name| name != "b" && name != "secret",
        operations: &|_| OPERATIONS,
    };
    let v = view(&image, &no_offline);
    let r = describe(&request(&["secret", "b", "a"], 10, None), &v, &auth).unwrap();
    let denied = ResponseError::TopicAuthorizationFailed.code();
    let expected = vec![
        ok("a", &[0, 1, 2]),
        ("b".into(), denied, vec![]),
        ("secret".into(), denied, vec![]),
    ];
    assert_eq!(shape(&r), (expected, None));
    // A refused topic reveals nothing: no id, and no authorized operations.
    assert!(r.topics[1].topic_id.is_nil());
    assert_eq!(r.topics[1].topic_authorized_operations, i32::MIN);
    assert_eq!(r.topics[0].topic_authorized_operations, OPERATIONS);
    let r = describe(&request(&[], 10, None), &v, &auth).unwrap();
    assert_eq!(shape(&r), (vec![ok("a", &[0, 1, 2]), ok("c", &[0])], None));
}
