//! ElectLeaders' answers: Kafka's codes, messages and shapes for each outcome.

use kafka_protocol::messages::ElectLeadersRequest;
use kafka_protocol::messages::elect_leaders_request::TopicPartitions;
use streamforge_protocol::ResponseError;

use super::*;

fn request(topics: Option<&[(&str, &[i32])]>) -> ElectLeadersRequest {
    let mut r = ElectLeadersRequest::default();
    r.topic_partitions = topics.map(|ts| {
        ts.iter()
            .map(|(t, ps)| {
                let mut tp = TopicPartitions::default();
                tp.topic = topic_name(t);
                tp.partitions = ps.to_vec();
                tp
            })
            .collect()
    });
    r
}

fn codes(results: &[ReplicaElectionResult]) -> Vec<(String, Vec<(i32, i16)>)> {
    results
        .iter()
        .map(|r| {
            let ps = r.partition_result.iter();
            let ps = ps.map(|p| (p.partition_id, p.error_code)).collect();
            (r.topic.0.to_string(), ps)
        })
        .collect()
}

#[test]
fn election_types_are_preferred_and_unclean_and_nothing_else() {
    assert_eq!(election_type(0), Some(ElectionType::Preferred));
    assert_eq!(election_type(1), Some(ElectionType::Unclean));
    assert_eq!(election_type(2), None);
    assert_eq!(election_type(-1), None);
}

#[test]
fn a_failed_request_names_the_error_at_the_top_from_v1_and_on_every_named_partition() {
    let named = request(Some(&[("a", &[0, 1]), ("b", &[3])]));
    let denied = ResponseError::ClusterAuthorizationFailed;
    for version in [1, 2] {
        let r = error_response(&named, version, denied);
        assert_eq!(r.error_code, denied.code());
        let code = denied.code();
        assert_eq!(
            codes(&r.replica_election_results),
            vec![
                ("a".into(), vec![(0, code), (1, code)]),
                ("b".into(), vec![(3, code)])
            ]
        );
        let msg = r.replica_election_results[0].partition_result[0]
            .error_message
            .as_deref();
        assert_eq!(msg, Some("Cluster authorization failed."));
    }
    // v0 has no top-level error code: only the partitions carry it.
    let r = error_response(&named, 0, ResponseError::InvalidRequest);
    assert_eq!(r.error_code, 0);
    assert_eq!(
        r.replica_election_results[0].partition_result[0].error_code,
        ResponseError::InvalidRequest.code()
    );
    // Asking for all partitions: no partitions to name, the top-level code says it.
    let r = error_response(&request(None), 2, denied);
    assert_eq!(r.error_code, denied.code());
    assert!(r.replica_election_results.is_empty());
}

#[test]
fn named_partitions_get_one_result_each_with_kafkas_messages() {
    let req = request(Some(&[("t", &[0, 1, 2, 9]), ("gone", &[0]), ("u", &[0])]));
    let results: Results = vec![
        (("t".into(), 0), Ok(1)),
        (("t".into(), 1), Err(ResponseError::ElectionNotNeeded)),
        (
            ("t".into(), 2),
            Err(ResponseError::PreferredLeaderNotAvailable),
        ),
        (("t".into(), 9), Err(ResponseError::UnknownTopicOrPartition)),
        (
            ("gone".into(), 0),
            Err(ResponseError::UnknownTopicOrPartition),
        ),
        (
            ("u".into(), 0),
            Err(ResponseError::EligibleLeadersNotAvailable),
        ),
    ];
    let exists = |t: &str| t != "gone";
    let out = named_results(&req, results, &exists);
    assert_eq!(
        codes(&out),
        vec![
            (
                "t".into(),
                vec![
                    (0, 0),
                    (1, ResponseError::ElectionNotNeeded.code()),
                    (2, ResponseError::PreferredLeaderNotAvailable.code()),
                    (9, ResponseError::UnknownTopicOrPartition.code()),
                ]
            ),
            (
                "gone".into(),
                vec![(0, ResponseError::UnknownTopicOrPartition.code())]
            ),
            (
                "u".into(),
                vec![(0, ResponseError::EligibleLeadersNotAvailable.code())]
            ),
        ]
    );
    let message = |t: usize, p: usize| {
        let m = &out[t].partition_result[p].error_message;
        m.as_ref().map(|m| m.to_string())
    };
    assert_eq!(message(0, 0), None, "success has no message");
    assert_eq!(
        message(0, 1).as_deref(),
        Some("Leader election not needed for topic partition.")
    );
    assert_eq!(
        message(0, 2).as_deref(),
        Some("The preferred leader was not available.")
    );
    assert_eq!(message(0, 3).as_deref(), Some("No such partition as t-9"));
    assert_eq!(message(1, 0).as_deref(), Some("No such topic as gone"));
    assert_eq!(
        message(2, 0).as_deref(),
        Some("Eligible topic partition leaders are not available.")
    );
}

#[test]
fn electing_all_partitions_lists_every_topic_with_the_partitions_that_needed_an_election() {
    let results: Results = vec![
        (("b".into(), 1), Ok(2)),
        (
            ("b".into(), 0),
            Err(ResponseError::PreferredLeaderNotAvailable),
        ),
    ];
    let topics = ["a", "b"].into_iter().map(String::from);
    let out = all_results(results, topics);
    assert_eq!(
        codes(&out),
        vec![
            ("a".into(), vec![]),
            (
                "b".into(),
                vec![
                    (1, 0),
                    (0, ResponseError::PreferredLeaderNotAvailable.code())
                ]
            ),
        ]
    );
}
