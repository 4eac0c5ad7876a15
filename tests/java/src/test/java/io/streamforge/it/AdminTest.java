package io.streamforge.it;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.Collection;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.stream.Collectors;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.DescribeClusterResult;
import org.apache.kafka.clients.admin.DescribeTopicsOptions;
import org.apache.kafka.clients.admin.FeatureMetadata;
import org.apache.kafka.clients.admin.GroupListing;
import org.apache.kafka.clients.admin.ListOffsetsResult;
import org.apache.kafka.clients.admin.NewPartitions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.ProducerState;
import org.apache.kafka.clients.admin.RecordsToDelete;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.GroupState;
import org.apache.kafka.common.TopicCollection;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.Uuid;
import org.apache.kafka.common.acl.AclOperation;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.errors.GroupNotEmptyException;
import org.apache.kafka.common.errors.TopicExistsException;
import org.apache.kafka.common.errors.UnknownTopicOrPartitionException;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.ExtendWith;

/** AdminClient calls the broker serves, each checked against what Kafka answers. */
@ExtendWith(KnownGaps.class)
@Timeout(value = 90, unit = TimeUnit.SECONDS)
class AdminTest {
    static final Broker B = Broker.shared();
    static final Admin A = Util.admin(B);
    static final long T = 30;

    @AfterAll
    static void closeAdmin() {
        A.close();
    }

    static Throwable cause(Throwable t) {
        return t instanceof ExecutionException ? t.getCause() : t;
    }

    /** Record i has timestamp BASE_TS + 1000 * (i + 1): recent, as older than retention.ms may go at once. */
    static final long BASE_TS = System.currentTimeMillis() - 3_600_000L;

    static void produce(String topic, int partitions, int perPartition, Map<String, Object> cfg) throws Exception {
        try (KafkaProducer<String, String> p = Util.producer(B, cfg)) {
            for (int part = 0; part < partitions; part++) {
                for (int i = 0; i < perPartition; i++) {
                    p.send(new ProducerRecord<>(topic, part, BASE_TS + 1000L * (i + 1), "k", "v" + i));
                }
            }
            p.flush();
        }
    }

    @Test
    void topicsLifecycle() throws Exception {
        String topic = Util.unique("adm");
        A.createTopics(List.of(new NewTopic(topic, 3, (short) 1)
                .configs(Map.of("retention.ms", "3600000", "cleanup.policy", "delete")))).all().get(T, TimeUnit.SECONDS);
        Throwable dup = assertThrows(ExecutionException.class,
                () -> A.createTopics(List.of(new NewTopic(topic, 1, (short) 1))).all().get(T, TimeUnit.SECONDS));
        assertInstanceOf(TopicExistsException.class, cause(dup));
        assertTrue(A.listTopics().names().get(T, TimeUnit.SECONDS).contains(topic));

        TopicDescription d = A.describeTopics(List.of(topic)).allTopicNames().get(T, TimeUnit.SECONDS).get(topic);
        assertEquals(3, d.partitions().size());
        assertNotNull(d.topicId());
        d.partitions().forEach(p -> assertEquals(1, p.replicas().size()));

        A.createPartitions(Map.of(topic, NewPartitions.increaseTo(5))).all().get(T, TimeUnit.SECONDS);
        Util.waitUntil("5 partitions", Duration.ofSeconds(20), () -> {
            try {
                return A.describeTopics(List.of(topic)).allTopicNames().get().get(topic).partitions().size() == 5;
            } catch (Exception e) {
                return false;
            }
        });

        A.deleteTopics(List.of(topic)).all().get(T, TimeUnit.SECONDS);
        Util.waitUntil("topic gone", Duration.ofSeconds(20), () -> {
            try {
                return !A.listTopics().names().get().contains(topic);
            } catch (Exception e) {
                return false;
            }
        });
        Throwable gone = assertThrows(ExecutionException.class,
                () -> A.describeTopics(List.of(topic)).allTopicNames().get(T, TimeUnit.SECONDS));
        assertInstanceOf(UnknownTopicOrPartitionException.class, cause(gone));
    }

    /**
     * `describeTopics` by name goes through DescribeTopicPartitions (Kafka 4.x, when the broker
     * advertises it), paging by `partitionSizeLimitPerResponse`. Only that API fills the ELR lists:
     * over Metadata `elr()` and `lastKnownElr()` are null.
     */
    @Test
    void describeTopicsPagesThroughDescribeTopicPartitions() throws Exception {
        String topic = Util.unique("dtp");
        String other = Util.unique("dtp-other");
        Util.createTopic(B, topic, 5);
        Util.createTopic(B, other, 2);
        String missing = Util.unique("dtp-missing");
        DescribeTopicsOptions options = new DescribeTopicsOptions()
                .partitionSizeLimitPerResponse(2).includeAuthorizedOperations(true);
        var result = A.describeTopics(List.of(topic, other, missing), options).topicNameValues();
        for (String name : List.of(topic, other)) {
            TopicDescription d = result.get(name).get(T, TimeUnit.SECONDS);
            assertNotEquals(Uuid.ZERO_UUID, d.topicId());
            assertFalse(d.isInternal());
            assertTrue(d.authorizedOperations().contains(AclOperation.DESCRIBE), d.toString());
            List<Integer> indexes = d.partitions().stream().map(TopicPartitionInfo::partition).toList();
            int count = name.equals(topic) ? 5 : 2;
            assertEquals(java.util.stream.IntStream.range(0, count).boxed().toList(), indexes, d.toString());
            for (TopicPartitionInfo p : d.partitions()) {
                assertNotNull(p.leader(), d.toString());
                assertEquals(List.of(p.leader()), p.replicas(), d.toString());
                assertEquals(List.of(p.leader()), p.isr(), d.toString());
                assertEquals(List.of(), p.elr(), d.toString());
                assertEquals(List.of(), p.lastKnownElr(), d.toString());
            }
        }
        Throwable gone = assertThrows(ExecutionException.class, () -> result.get(missing).get(T, TimeUnit.SECONDS));
        assertInstanceOf(UnknownTopicOrPartitionException.class, cause(gone));
    }

    @Test
    void describeTopicsById() throws Exception {
        String topic = Util.unique("byid");
        Util.createTopic(B, topic, 2);
        TopicDescription d = A.describeTopics(List.of(topic)).allTopicNames().get(T, TimeUnit.SECONDS).get(topic);
        assertNotEquals(Uuid.ZERO_UUID, d.topicId());
        TopicDescription byId = A.describeTopics(TopicCollection.ofTopicIds(List.of(d.topicId())))
                .allTopicIds().get(T, TimeUnit.SECONDS).get(d.topicId());
        assertEquals(topic, byId.name());
        assertEquals(2, byId.partitions().size());
    }

    @Test
    void describeAndAlterConfigsIncrementally() throws Exception {
        String topic = Util.unique("cfg");
        Util.createTopic(B, topic, 1);
        ConfigResource res = new ConfigResource(ConfigResource.Type.TOPIC, topic);
        A.incrementalAlterConfigs(Map.of(res, List.of(
                new AlterConfigOp(new ConfigEntry("retention.ms", "123456"), AlterConfigOp.OpType.SET),
                new AlterConfigOp(new ConfigEntry("max.message.bytes", "50000"), AlterConfigOp.OpType.SET))))
                .all().get(T, TimeUnit.SECONDS);
        Config c = A.describeConfigs(List.of(res)).all().get(T, TimeUnit.SECONDS).get(res);
        assertEquals("123456", c.get("retention.ms").value());
        assertEquals(ConfigEntry.ConfigSource.DYNAMIC_TOPIC_CONFIG, c.get("retention.ms").source());
        assertEquals("50000", c.get("max.message.bytes").value());
        assertNotNull(c.get("segment.bytes"), "defaults listed too");

        A.incrementalAlterConfigs(Map.of(res, List.of(
                new AlterConfigOp(new ConfigEntry("retention.ms", ""), AlterConfigOp.OpType.DELETE))))
                .all().get(T, TimeUnit.SECONDS);
        Config after = A.describeConfigs(List.of(res)).all().get(T, TimeUnit.SECONDS).get(res);
        assertFalse(after.get("retention.ms").source() == ConfigEntry.ConfigSource.DYNAMIC_TOPIC_CONFIG);
        assertEquals("50000", after.get("max.message.bytes").value());
    }

    @Test
    void deleteRecordsAndListOffsetsBySpec() throws Exception {
        String topic = Util.unique("offs");
        Util.createTopic(B, topic, 1);
        produce(topic, 1, 20, Map.of());
        TopicPartition tp = new TopicPartition(topic, 0);
        Map<TopicPartition, Long> low = A.deleteRecords(Map.of(tp, RecordsToDelete.beforeOffset(5)))
                .lowWatermarks().entrySet().stream().collect(Collectors.toMap(Map.Entry::getKey, e -> {
                    try {
                        return e.getValue().get(T, TimeUnit.SECONDS).lowWatermark();
                    } catch (Exception ex) {
                        throw new IllegalStateException(ex);
                    }
                }));
        assertEquals(5L, low.get(tp));
        assertEquals(5L, offset(tp, OffsetSpec.earliest()).offset());
        assertEquals(20L, offset(tp, OffsetSpec.latest()).offset());
        ListOffsetsResult.ListOffsetsResultInfo max = offset(tp, OffsetSpec.maxTimestamp());
        assertEquals(19L, max.offset());
        assertEquals(BASE_TS + 20_000L, max.timestamp());
        assertEquals(10L, offset(tp, OffsetSpec.forTimestamp(BASE_TS + 10_500L)).offset());
        assertEquals(5L, offset(tp, OffsetSpec.earliestLocal()).offset());
    }

    static ListOffsetsResult.ListOffsetsResultInfo offset(TopicPartition tp, OffsetSpec spec) throws Exception {
        return A.listOffsets(Map.of(tp, spec)).partitionResult(tp).get(T, TimeUnit.SECONDS);
    }

    @Test
    void consumerGroupsListDescribeAlterDeleteOffsets() throws Exception {
        String topic = Util.unique("admgrp");
        String group = Util.unique("g");
        Util.createTopic(B, topic, 2);
        produce(topic, 2, 10, Map.of());
        TopicPartition p0 = new TopicPartition(topic, 0);
        TopicPartition p1 = new TopicPartition(topic, 1);
        try (KafkaConsumer<String, String> c = Util.consumer(B, group, Map.of(ConsumerConfig.CLIENT_ID_CONFIG, "adm-c"))) {
            c.subscribe(List.of(topic));
            Util.pollN(c, 20, Duration.ofSeconds(30));
            c.commitSync(Map.of(p0, new OffsetAndMetadata(10), p1, new OffsetAndMetadata(4)));

            Collection<GroupListing> groups = A.listGroups().all().get(T, TimeUnit.SECONDS);
            assertTrue(groups.stream().anyMatch(g -> g.groupId().equals(group)), "listGroups has " + group);
            ConsumerGroupDescription d = A.describeConsumerGroups(List.of(group)).all().get(T, TimeUnit.SECONDS).get(group);
            assertEquals(GroupState.STABLE, d.groupState());
            assertEquals(1, d.members().size());
            assertEquals("adm-c", d.members().iterator().next().clientId());
            assertEquals(Set.of(p0, p1), d.members().iterator().next().assignment().topicPartitions());

            Throwable nonEmpty = assertThrows(ExecutionException.class,
                    () -> A.deleteConsumerGroups(List.of(group)).all().get(T, TimeUnit.SECONDS));
            assertInstanceOf(GroupNotEmptyException.class, cause(nonEmpty));
        }
        Map<TopicPartition, OffsetAndMetadata> offs = A.listConsumerGroupOffsets(group)
                .partitionsToOffsetAndMetadata().get(T, TimeUnit.SECONDS);
        assertEquals(10L, offs.get(p0).offset());
        assertEquals(4L, offs.get(p1).offset());

        A.alterConsumerGroupOffsets(group, Map.of(p1, new OffsetAndMetadata(2))).all().get(T, TimeUnit.SECONDS);
        A.deleteConsumerGroupOffsets(group, Set.of(p0)).all().get(T, TimeUnit.SECONDS);
        offs = A.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get(T, TimeUnit.SECONDS);
        assertEquals(2L, offs.get(p1).offset());
        assertFalse(offs.containsKey(p0) && offs.get(p0) != null, "p0 offset deleted: " + offs);

        A.deleteConsumerGroups(List.of(group)).all().get(T, TimeUnit.SECONDS);
        assertFalse(A.listGroups().all().get(T, TimeUnit.SECONDS).stream().anyMatch(g -> g.groupId().equals(group)));
    }

    @Test
    void removeMembersFromConsumerGroup() throws Exception {
        String topic = Util.unique("rm");
        String group = Util.unique("g");
        Util.createTopic(B, topic, 1);
        try (KafkaConsumer<String, String> c = Util.consumer(B, group,
                Map.of(ConsumerConfig.GROUP_INSTANCE_ID_CONFIG, "rm-inst"))) {
            c.subscribe(List.of(topic));
            Util.waitUntil("assignment", Duration.ofSeconds(30), () -> {
                c.poll(Duration.ofMillis(100));
                return !c.assignment().isEmpty();
            });
            A.removeMembersFromConsumerGroup(group, new org.apache.kafka.clients.admin.RemoveMembersFromConsumerGroupOptions(
                    List.of(new org.apache.kafka.clients.admin.MemberToRemove("rm-inst")))).all().get(T, TimeUnit.SECONDS);
            ConsumerGroupDescription d = A.describeConsumerGroups(List.of(group)).all().get(T, TimeUnit.SECONDS).get(group);
            assertTrue(d.members().isEmpty(), "member removed: " + d);
        }
    }

    @Test
    void describeCluster() throws Exception {
        DescribeClusterResult r = A.describeCluster();
        assertEquals(1, r.nodes().get(T, TimeUnit.SECONDS).size());
        assertEquals(B.port(), r.nodes().get().iterator().next().port());
        assertNotNull(r.clusterId().get(T, TimeUnit.SECONDS));
        assertEquals(r.nodes().get().iterator().next().id(), r.controller().get(T, TimeUnit.SECONDS).id());
    }

    @Test
    void describeProducers() throws Exception {
        String topic = Util.unique("producers");
        Util.createTopic(B, topic, 1);
        produce(topic, 1, 3, Map.of(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true", ProducerConfig.ACKS_CONFIG, "all"));
        TopicPartition tp = new TopicPartition(topic, 0);
        List<ProducerState> states = A.describeProducers(List.of(tp)).partitionResult(tp).get(T, TimeUnit.SECONDS)
                .activeProducers();
        assertEquals(1, states.size());
        assertEquals(2, states.get(0).lastSequence());
    }

    @Test
    void describeFeatures() throws Exception {
        FeatureMetadata f = A.describeFeatures().featureMetadata().get(T, TimeUnit.SECONDS);
        assertNotNull(f.finalizedFeatures());
        assertNotNull(f.supportedFeatures());
        // KIP-890 part 2, as a Kafka 4.x cluster finalizes it.
        assertEquals((short) 2, f.finalizedFeatures().get("transaction.version").maxVersionLevel());
        assertEquals((short) 2, f.supportedFeatures().get("transaction.version").maxVersion());
    }
}
