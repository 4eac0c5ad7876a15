package io.streamforge.it;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.CooperativeStickyAssignor;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.consumer.OffsetAndTimestamp;
import org.apache.kafka.clients.consumer.RangeAssignor;
import org.apache.kafka.clients.consumer.RoundRobinAssignor;
import org.apache.kafka.clients.consumer.StickyAssignor;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.ExtendWith;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/** The Java consumer: classic-protocol groups with every assignor, static members, assign/seek, commits, pause. */
@ExtendWith(KnownGaps.class)
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class ConsumerTest {
    static final Broker B = Broker.shared();

    static void produce(String topic, int partitions, int perPartition, long baseTs) throws Exception {
        try (KafkaProducer<String, String> p = Util.producer(B, Map.of())) {
            for (int part = 0; part < partitions; part++) {
                for (int i = 0; i < perPartition; i++) {
                    p.send(new ProducerRecord<>(topic, part, baseTs + i, "k", part + ":" + i));
                }
            }
            p.flush();
        }
    }

    /** Polls both consumers until they together hold all partitions and read `total` records. */
    static Set<String> pollGroup(List<KafkaConsumer<String, String>> cs, int partitions, int total) {
        Set<String> seen = new HashSet<>();
        long deadline = System.nanoTime() + Duration.ofSeconds(60).toNanos();
        while (System.nanoTime() < deadline) {
            for (KafkaConsumer<String, String> c : cs) {
                c.poll(Duration.ofMillis(100)).forEach(r -> seen.add(r.value()));
            }
            int assigned = cs.stream().mapToInt(c -> c.assignment().size()).sum();
            boolean allNonEmpty = cs.stream().allMatch(c -> !c.assignment().isEmpty());
            if (seen.size() >= total && assigned == partitions && allNonEmpty) {
                break;
            }
        }
        return seen;
    }

    @ParameterizedTest(name = "assignor={0}")
    @ValueSource(classes = {RangeAssignor.class, RoundRobinAssignor.class, StickyAssignor.class,
            CooperativeStickyAssignor.class})
    void groupWithAssignor(Class<?> assignor) throws Exception {
        String topic = Util.unique("grp");
        String group = Util.unique("g");
        Util.createTopic(B, topic, 4);
        produce(topic, 4, 25, System.currentTimeMillis());
        Map<String, Object> cfg = Map.of(
                ConsumerConfig.PARTITION_ASSIGNMENT_STRATEGY_CONFIG, assignor.getName(),
                ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "true",
                ConsumerConfig.AUTO_COMMIT_INTERVAL_MS_CONFIG, "200");
        try (KafkaConsumer<String, String> c1 = Util.consumer(B, group, cfg);
             KafkaConsumer<String, String> c2 = Util.consumer(B, group, cfg)) {
            c1.subscribe(List.of(topic));
            c2.subscribe(List.of(topic));
            Set<String> seen = pollGroup(List.of(c1, c2), 4, 100);
            assertEquals(100, seen.size(), "every record consumed by the group");
            Set<TopicPartition> union = new HashSet<>(c1.assignment());
            union.addAll(c2.assignment());
            assertEquals(4, union.size());
            assertEquals(4, c1.assignment().size() + c2.assignment().size(), "disjoint assignment");
            assertEquals(2, c1.assignment().size(), assignor.getSimpleName() + " balances 4 partitions");
        }
    }

    @Test
    void staticMembershipKeepsAssignmentAcrossRestart() throws Exception {
        String topic = Util.unique("static");
        String group = Util.unique("g");
        Util.createTopic(B, topic, 4);
        produce(topic, 4, 5, System.currentTimeMillis());
        Map<String, Object> a = Map.of(ConsumerConfig.GROUP_INSTANCE_ID_CONFIG, "inst-a",
                ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, "30000");
        Map<String, Object> b = Map.of(ConsumerConfig.GROUP_INSTANCE_ID_CONFIG, "inst-b",
                ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, "30000");
        try (KafkaConsumer<String, String> cb = Util.consumer(B, group, b)) {
            cb.subscribe(List.of(topic));
            Set<TopicPartition> before;
            KafkaConsumer<String, String> ca = Util.consumer(B, group, a);
            try {
                ca.subscribe(List.of(topic));
                pollGroup(List.of(ca, cb), 4, 20);
                before = new HashSet<>(ca.assignment());
                assertEquals(2, before.size());
            } finally {
                ca.close(); // a static member's close does not leave the group
            }
            Set<TopicPartition> bAssigned = new HashSet<>(cb.assignment());
            try (KafkaConsumer<String, String> ca2 = Util.consumer(B, group, a)) {
                ca2.subscribe(List.of(topic));
                Util.waitUntil("the restarted static member gets its partitions back", Duration.ofSeconds(30), () -> {
                    ca2.poll(Duration.ofMillis(100));
                    cb.poll(Duration.ofMillis(50));
                    return !ca2.assignment().isEmpty();
                });
                assertEquals(before, ca2.assignment(), "same partitions after the restart");
                assertEquals(bAssigned, cb.assignment(), "the other member was not rebalanced");
            }
        }
    }

    @Test
    void assignSeekByOffsetAndTimestamp() throws Exception {
        String topic = Util.unique("seek");
        Util.createTopic(B, topic, 1);
        // Recent timestamps: records older than retention.ms (7 days) may be deleted at once.
        long base = System.currentTimeMillis() - 3_600_000L;
        produce(topic, 1, 50, base);
        TopicPartition tp = new TopicPartition(topic, 0);
        try (KafkaConsumer<String, String> c = Util.consumer(B, null, Map.of())) {
            c.assign(List.of(tp));
            c.seek(tp, 30);
            ConsumerRecord<String, String> r = Util.pollN(c, 1, Duration.ofSeconds(20)).get(0);
            assertEquals(30, r.offset());
            assertEquals("0:30", r.value());

            Map<TopicPartition, OffsetAndTimestamp> byTs = c.offsetsForTimes(Map.of(tp, base + 42));
            assertEquals(42, byTs.get(tp).offset());
            assertEquals(base + 42, byTs.get(tp).timestamp());
            assertEquals(null, c.offsetsForTimes(Map.of(tp, base + 1000)).get(tp), "no record that late");
            c.seek(tp, byTs.get(tp).offset());
            assertEquals("0:42", Util.pollN(c, 1, Duration.ofSeconds(20)).get(0).value());

            assertEquals(0L, c.beginningOffsets(List.of(tp)).get(tp));
            assertEquals(50L, c.endOffsets(List.of(tp)).get(tp));
            c.seekToEnd(List.of(tp));
            assertEquals(50L, c.position(tp));
        }
    }

    @Test
    void commitSyncAndAsync() throws Exception {
        String topic = Util.unique("commit");
        String group = Util.unique("g");
        Util.createTopic(B, topic, 2);
        produce(topic, 2, 10, System.currentTimeMillis());
        TopicPartition p0 = new TopicPartition(topic, 0);
        TopicPartition p1 = new TopicPartition(topic, 1);
        try (KafkaConsumer<String, String> c = Util.consumer(B, group, Map.of())) {
            c.subscribe(List.of(topic));
            Util.pollN(c, 20, Duration.ofSeconds(30));
            c.commitSync(Map.of(p0, new OffsetAndMetadata(7, "sync-meta")));
            CompletableFuture<Exception> done = new CompletableFuture<>();
            c.commitAsync(Map.of(p1, new OffsetAndMetadata(9, "async-meta")), (offsets, e) -> done.complete(e));
            Util.waitUntil("commitAsync callback", Duration.ofSeconds(20), () -> {
                c.poll(Duration.ofMillis(50));
                return done.isDone();
            });
            assertEquals(null, done.get());
            Map<TopicPartition, OffsetAndMetadata> committed = c.committed(Set.of(p0, p1));
            assertEquals(7, committed.get(p0).offset());
            assertEquals("sync-meta", committed.get(p0).metadata());
            assertEquals(9, committed.get(p1).offset());
            assertEquals("async-meta", committed.get(p1).metadata());
        }
        // A new member of the group resumes from the committed offsets.
        try (KafkaConsumer<String, String> c = Util.consumer(B, group, Map.of())) {
            c.subscribe(List.of(topic));
            List<ConsumerRecord<String, String>> rest = Util.pollN(c, 4, Duration.ofSeconds(30));
            Set<String> vals = new HashSet<>();
            rest.forEach(r -> vals.add(r.value()));
            assertEquals(Set.of("0:7", "0:8", "0:9", "1:9"), vals);
        }
    }

    @Test
    void pauseAndResume() throws Exception {
        String topic = Util.unique("pause");
        Util.createTopic(B, topic, 2);
        produce(topic, 2, 10, System.currentTimeMillis());
        TopicPartition p0 = new TopicPartition(topic, 0);
        TopicPartition p1 = new TopicPartition(topic, 1);
        try (KafkaConsumer<String, String> c = Util.consumer(B, null, Map.of())) {
            c.assign(List.of(p0, p1));
            c.seekToBeginning(List.of(p0, p1));
            c.pause(List.of(p1));
            assertEquals(Set.of(p1), c.paused());
            List<ConsumerRecord<String, String>> first = Util.pollN(c, 10, Duration.ofSeconds(20));
            for (int i = 0; i < 5; i++) {
                first.addAll(c.poll(Duration.ofMillis(100)).records(p1));
            }
            assertEquals(10, first.size());
            first.forEach(r -> assertEquals(0, r.partition(), "nothing from the paused partition"));
            c.resume(List.of(p1));
            List<ConsumerRecord<String, String>> second = Util.pollN(c, 10, Duration.ofSeconds(20));
            assertEquals(10, second.size());
            second.forEach(r -> assertEquals(1, r.partition()));
            assertNotNull(c.metrics());
            assertTrue(c.paused().isEmpty());
        }
    }
}
