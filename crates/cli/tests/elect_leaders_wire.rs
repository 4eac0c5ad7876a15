//! The real broker binary over raw sockets: ElectLeaders (43) in each version. v0 has no
//! election type (preferred) and no top-level error code; v1+ carry both. On one broker every
//! partition is led by its preferred replica.

mod support;

use kafka_protocol::ResponseError;
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::elect_leaders_request::TopicPartitions;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use support::BrokerProc;

fn name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_string()))
}

fn request(election_type: i8, topics: Option<&[(&str, &[i32])]>) -> ElectLeadersRequest {
    let mut r = ElectLeadersRequest::default();
    r.election_type = election_type;
    r.timeout_ms = 10_000;
    r.topic_partitions = topics.map(|ts| {
        ts.iter()
            .map(|(t, ps)| {
                let mut tp = TopicPartitions::default();
                tp.topic = name(t);
                tp.partitions = ps.to_vec();
                tp
            })
            .collect()
    });
    r
}

/// (topic, partition, error code) of every partition result.
fn results(r: &ElectLeadersResponse) -> Vec<(String, i32, i16)> {
    let each = |t: &elect_leaders_response::ReplicaElectionResult| {
        let topic = t.topic.0.to_string();
        let ps = t.partition_result.iter();
        ps.map(move |p| (topic.clone(), p.partition_id, p.error_code))
            .collect::<Vec<_>>()
    };
    r.replica_election_results.iter().flat_map(each).collect()
}

#[test]
fn elect_leaders_answers_each_version_with_kafkas_codes() {
    let dir = tempfile::tempdir().unwrap();
    let b = BrokerProc::start(&dir.path().join("d"), &[]);
    let mut c = b.connect();
    let mut t = CreatableTopic::default();
    t.name = name("e");
    t.num_partitions = 2;
    t.replication_factor = 1;
    let mut create = CreateTopicsRequest::default();
    create.topics = vec![t];
    create.timeout_ms = 5000;
    let r: CreateTopicsResponse = c.call(ApiKey::CreateTopics, 7, &create);
    assert_eq!(r.topics[0].error_code, 0);

    let not_needed = ResponseError::ElectionNotNeeded.code();
    let unknown = ResponseError::UnknownTopicOrPartition.code();
    let named: &[(&str, &[i32])] = &[("e", &[0, 1, 5]), ("nope", &[0])];
    for version in 0..=2 {
        let r: ElectLeadersResponse =
            c.call(ApiKey::ElectLeaders, version, &request(0, Some(named)));
        assert_eq!(r.error_code, 0, "v{version}");
        let expected = vec![
            ("e".to_string(), 0, not_needed),
            ("e".to_string(), 1, not_needed),
            ("e".to_string(), 5, unknown),
            ("nope".to_string(), 0, unknown),
        ];
        assert_eq!(results(&r), expected, "v{version}");
        // All partitions: the ones that need no election are left out.
        let r: ElectLeadersResponse = c.call(ApiKey::ElectLeaders, version, &request(0, None));
        assert!(results(&r).is_empty(), "v{version}: {r:?}");
    }
    // Unclean on a partition with a leader: nothing to do.
    let only: &[(&str, &[i32])] = &[("e", &[1])];
    let r: ElectLeadersResponse = c.call(ApiKey::ElectLeaders, 2, &request(1, Some(only)));
    assert_eq!(results(&r), vec![("e".to_string(), 1, not_needed)]);
    // An unknown election type fails the whole request.
    let invalid = ResponseError::InvalidRequest.code();
    let r: ElectLeadersResponse = c.call(ApiKey::ElectLeaders, 1, &request(2, Some(only)));
    assert_eq!(r.error_code, invalid);
    assert_eq!(results(&r), vec![("e".to_string(), 1, invalid)]);
    // No time left: REQUEST_TIMED_OUT, nothing elected.
    let mut no_time = request(0, Some(only));
    no_time.timeout_ms = 0;
    let r: ElectLeadersResponse = c.call(ApiKey::ElectLeaders, 2, &no_time);
    assert_eq!(r.error_code, ResponseError::RequestTimedOut.code());
}
