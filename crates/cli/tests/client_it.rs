//! The Rust client against the real broker binary.
mod client_support;

use std::time::Duration;

use client_support::{BrokerProcess, client, consume_n, create};
use streamforge_client::{
    Acks, Admin, Compression, Consumer, ConsumerConfig, Header, NewTopic, OffsetReset, Producer,
    ProducerConfig, ProducerRecord,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn produce_and_consume_every_codec() {
    let dir = tempfile::tempdir().unwrap();
    let b = BrokerProcess::start(&dir.path().join("data"), &[]);
    let admin = Admin::new(client(&b));
    for codec in [
        Compression::None,
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ] {
        let topic = format!("codec-{codec}");
        create(&admin, &topic, 3).await;
        let p = Producer::new(ProducerConfig {
            client: client(&b),
            compression: codec,
            acks: Acks::All,
            ..Default::default()
        })
        .await
        .unwrap();
        let headers = [Header {
            key: "h".into(),
            value: Some(bytes::Bytes::from_static(b"hv")),
        }];
        let mut futs = Vec::new();
        for i in 0..300 {
            let v = format!("value-{i}");
            let k = format!("key-{}", i % 10);
            futs.push(
                p.send(
                    ProducerRecord::new(&topic, v.as_bytes())
                        .key(k.as_bytes())
                        .headers(&headers)
                        .timestamp(1_700_000_000_000 + i),
                )
                .await
                .unwrap(),
            );
        }
        p.flush().await.unwrap();
        let mut offsets = Vec::new();
        for f in futs {
            let md = f.await.unwrap();
            assert!(md.offset >= 0);
            // Default partitioner: murmur2 of the key.
            offsets.push((md.partition, md.offset));
        }
        offsets.sort();
        offsets.dedup();
        assert_eq!(offsets.len(), 300, "offsets are unique per partition");
        let mut c = Consumer::new(ConsumerConfig {
            client: client(&b),
            auto_offset_reset: OffsetReset::Earliest,
            ..Default::default()
        });
        c.assign(&[(topic.clone(), 0), (topic.clone(), 1), (topic.clone(), 2)]);
        let recs = consume_n(&mut c, 300).await;
        assert_eq!(recs.len(), 300, "{codec}");
        for r in &recs {
            let k = String::from_utf8(r.key.clone().unwrap().to_vec()).unwrap();
            let i: i64 = String::from_utf8(r.value.clone().unwrap().to_vec()).unwrap()
                ["value-".len()..]
                .parse()
                .unwrap();
            assert_eq!(k, format!("key-{}", i % 10));
            assert_eq!(r.timestamp_ms, 1_700_000_000_000 + i);
            assert_eq!(r.headers[0].key, "h");
            assert_eq!(
                r.partition,
                streamforge_client::partitioner::partition_for_key(k.as_bytes(), 3)
            );
        }
        p.close().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acks_zero_one_all() {
    let dir = tempfile::tempdir().unwrap();
    let b = BrokerProcess::start(&dir.path().join("data"), &[]);
    let admin = Admin::new(client(&b));
    create(&admin, "acks", 1).await;
    for (acks, idem) in [
        (Acks::None, false),
        (Acks::Leader, false),
        (Acks::All, false),
    ] {
        let p = Producer::new(ProducerConfig {
            client: client(&b),
            acks,
            enable_idempotence: idem,
            linger_ms: 1,
            ..Default::default()
        })
        .await
        .unwrap();
        if idem {
            assert!(p.producer_id().0 >= 0, "idempotent producer has an id");
        }
        let mut futs = Vec::new();
        for i in 0..100 {
            futs.push(
                p.send(ProducerRecord::new("acks", format!("{i}").as_bytes()))
                    .await
                    .unwrap(),
            );
        }
        p.flush().await.unwrap();
        for f in futs {
            let md = f.await.unwrap();
            if acks == Acks::None {
                assert_eq!(md.offset, -1)
            } else {
                assert!(md.offset >= 0)
            }
        }
        p.close().await.unwrap();
    }
    let mut c = Consumer::new(ConsumerConfig {
        client: client(&b),
        auto_offset_reset: OffsetReset::Earliest,
        ..Default::default()
    });
    c.assign(&[("acks".into(), 0)]);
    assert_eq!(consume_n(&mut c, 300).await.len(), 300);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seek_by_offset_and_timestamp() {
    let dir = tempfile::tempdir().unwrap();
    let b = BrokerProcess::start(&dir.path().join("data"), &[]);
    create(&Admin::new(client(&b)), "seek", 1).await;
    let p = Producer::new(ProducerConfig {
        client: client(&b),
        ..Default::default()
    })
    .await
    .unwrap();
    for i in 0..50i64 {
        p.send(
            ProducerRecord::new("seek", format!("{i}").as_bytes())
                .partition(0)
                .timestamp(1_000_000 + i * 10),
        )
        .await
        .unwrap();
    }
    p.close().await.unwrap();
    let mut c = Consumer::new(ConsumerConfig {
        client: client(&b),
        auto_offset_reset: OffsetReset::Earliest,
        ..Default::default()
    });
    c.assign(&[("seek".into(), 0)]);
    c.seek("seek", 0, 40).unwrap();
    let r = consume_n(&mut c, 10).await;
    assert_eq!(r.first().unwrap().offset, 40);
    assert_eq!(r.len(), 10);
    c.seek_to_timestamp(1_000_000 + 205).await.unwrap();
    let r = consume_n(&mut c, 29).await;
    assert_eq!(r.first().unwrap().offset, 21);
    c.seek_to_end().await.unwrap();
    assert!(c.poll(Duration::from_millis(300)).await.unwrap().is_empty());
    assert_eq!(c.position("seek", 0), Some(50));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_topics_configs_partitions_records() {
    let dir = tempfile::tempdir().unwrap();
    let b = BrokerProcess::start(&dir.path().join("data"), &[]);
    let admin = Admin::new(client(&b));
    admin
        .create_topics(
            &[NewTopic {
                name: "adm".into(),
                partitions: 2,
                replication_factor: 1,
                configs: vec![("retention.ms".into(), "12345".into())],
            }],
            false,
        )
        .await
        .unwrap();
    let err = admin
        .create_topics(
            &[NewTopic {
                name: "adm".into(),
                partitions: 2,
                replication_factor: 1,
                configs: vec![],
            }],
            false,
        )
        .await
        .unwrap_err();
    assert_eq!(err.kafka_code(), Some(36), "TOPIC_ALREADY_EXISTS: {err}");
    assert!(
        admin
            .list_topics()
            .await
            .unwrap()
            .contains(&"adm".to_string())
    );
    let cfg = admin.describe_topic_configs("adm").await.unwrap();
    let ret = cfg.iter().find(|c| c.name == "retention.ms").unwrap();
    assert_eq!(ret.value.as_deref(), Some("12345"));
    assert!(!ret.is_default);
    admin
        .alter_topic_configs("adm", &[("retention.ms".into(), "999".into())], &[])
        .await
        .unwrap();
    let cfg = admin.describe_topic_configs("adm").await.unwrap();
    assert_eq!(
        cfg.iter()
            .find(|c| c.name == "retention.ms")
            .unwrap()
            .value
            .as_deref(),
        Some("999")
    );
    admin.create_partitions("adm", 4).await.unwrap();
    assert_eq!(
        admin.describe_topics(&["adm".into()]).await.unwrap()[0]
            .partitions
            .len(),
        4
    );
    let p = Producer::new(ProducerConfig {
        client: client(&b),
        ..Default::default()
    })
    .await
    .unwrap();
    for i in 0..20 {
        p.send(ProducerRecord::new("adm", format!("{i}").as_bytes()).partition(0))
            .await
            .unwrap();
    }
    p.close().await.unwrap();
    let lw = admin
        .delete_records(&[(("adm".into(), 0), 15)])
        .await
        .unwrap();
    assert_eq!(lw[&("adm".to_string(), 0)], 15);
    let mut c = Consumer::new(ConsumerConfig {
        client: client(&b),
        auto_offset_reset: OffsetReset::Earliest,
        ..Default::default()
    });
    c.assign(&[("adm".into(), 0)]);
    assert_eq!(consume_n(&mut c, 5).await.first().unwrap().offset, 15);
    let m = admin.describe_cluster().await.unwrap();
    assert_eq!(m.brokers.len(), 1);
    admin.delete_topics(&["adm".into()]).await.unwrap();
    assert!(
        !admin
            .list_topics()
            .await
            .unwrap()
            .contains(&"adm".to_string())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn producer_and_consumer_survive_broker_restart() {
    client_support::produce_across_broker_restart(false).await;
}
