package io.streamforge.it;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.TransactionDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerGroupMetadata;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.ExtendWith;

/**
 * KIP-890 in a three-broker cluster with the Java 4.x client at the broker's default
 * `transaction.version` 2: the producer's partitions are led by other brokers than its
 * transaction coordinator, so each partition's leader adds the partition to the transaction
 * with an AddPartitionsToTxn v5 to the coordinator (Produce v12 sends none itself), and the
 * group's coordinator does the same for TxnOffsetCommit v5. Commit, abort, commit with offsets:
 * read_committed sees exactly the committed records, the offsets commit with their transaction,
 * and every transaction bumps the epoch.
 */
@ExtendWith(KnownGaps.class)
@Timeout(value = 60, unit = TimeUnit.SECONDS)
class TransactionsClusterTest {
    private static final int PARTITIONS = 6;
    private static final int RECORDS_PER_PARTITION = 3;

    /** Each partition's leader, once leaders are spread over all three brokers. */
    private static Map<Integer, Integer> leaders(Admin admin, String topic) {
        Map<Integer, Integer> out = new HashMap<>();
        Util.waitUntil("leaders of " + topic + " on every broker", Duration.ofSeconds(20), () -> {
            try {
                out.clear();
                admin.describeTopics(List.of(topic)).allTopicNames().get(5, TimeUnit.SECONDS).get(topic)
                        .partitions().forEach(p -> {
                            if (p.leader() != null) {
                                out.put(p.partition(), p.leader().id());
                            }
                        });
                return out.size() == PARTITIONS && new HashSet<>(out.values()).size() == 3;
            } catch (Exception e) {
                return false;
            }
        });
        return out;
    }

    /**
     * A group whose coordinator (the leader of its `__consumer_offsets` partition, Kafka's
     * `abs(hashCode) % partitions`) is not `broker`.
     */
    private static String groupNotCoordinatedBy(Admin admin, int broker) throws Exception {
        var offsets = admin.describeTopics(List.of("__consumer_offsets")).allTopicNames()
                .get(10, TimeUnit.SECONDS).get("__consumer_offsets").partitions();
        for (int i = 0; i < 100; i++) {
            String group = "g-" + i;
            int hash = group.hashCode();
            int partition = (hash == Integer.MIN_VALUE ? 0 : Math.abs(hash)) % offsets.size();
            var leader = offsets.get(partition).leader();
            if (leader != null && leader.id() != broker) {
                return group;
            }
        }
        throw new AssertionError("every group is coordinated by broker " + broker);
    }

    private static TransactionDescription describe(Admin admin, String tid) throws Exception {
        return admin.describeTransactions(List.of(tid)).all().get(10, TimeUnit.SECONDS).get(tid);
    }

    @Test
    void transactionVersion2ProducerAcrossBrokersCommitsAndAbortsExactly() throws Exception {
        List<Broker> cluster = Broker.cluster(3);
        Broker first = cluster.get(0);
        try (Admin admin = Util.admin(first)) {
            Util.waitUntil("three brokers", Duration.ofSeconds(20), () -> {
                try {
                    return admin.describeCluster().nodes().get(5, TimeUnit.SECONDS).size() == 3;
                } catch (Exception e) {
                    return false;
                }
            });
            String topic = Util.unique("txc");
            admin.createTopics(List.of(new NewTopic(topic, PARTITIONS, (short) 3))).all()
                    .get(20, TimeUnit.SECONDS);
            Map<Integer, Integer> leaders = leaders(admin, topic);
            String tid = Util.unique("tid");
            List<String> committed = new ArrayList<>();
            String group;
            try (KafkaProducer<String, String> p = Util.producer(first, Map.of(
                    ProducerConfig.TRANSACTIONAL_ID_CONFIG, tid,
                    ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, 30000))) {
                p.initTransactions();
                TransactionDescription d = describe(admin, tid);
                int coordinator = d.coordinatorId();
                short e0 = (short) d.producerEpoch();
                long elsewhere = leaders.values().stream().filter(l -> l != coordinator).count();
                assertTrue(elsewhere >= 2, "partitions led by other brokers than the coordinator: " + leaders);
                group = groupNotCoordinatedBy(admin, coordinator);
                for (String round : List.of("c1", "a2", "c3")) {
                    p.beginTransaction();
                    List<String> sent = new ArrayList<>();
                    for (int i = 0; i < PARTITIONS; i++) {
                        for (int j = 0; j < RECORDS_PER_PARTITION; j++) {
                            String v = round + "-" + i + "-" + j;
                            p.send(new ProducerRecord<>(topic, i, "k", v));
                            sent.add(v);
                        }
                    }
                    if (round.equals("c3")) {
                        // TxnOffsetCommit v5 to the group's coordinator, another broker than the
                        // transaction's: it adds the offsets partition there.
                        p.sendOffsetsToTransaction(
                                Map.of(new TopicPartition(topic, 0), new OffsetAndMetadata(42)),
                                new ConsumerGroupMetadata(group));
                    }
                    // No flush: EndTxn goes right after the sends. An abort whose batches
                    // never left the client meets the previous transaction still prepared (its
                    // markers on their way): CONCURRENT_TRANSACTIONS, retried by the client.
                    if (round.startsWith("a")) {
                        p.abortTransaction();
                    } else {
                        p.commitTransaction();
                        committed.addAll(sent);
                    }
                }
                assertEquals((short) (e0 + 3), (short) describe(admin, tid).producerEpoch(),
                        "an epoch bump per transaction (transaction version 2)");
            }
            assertEquals(Set.copyOf(committed), Set.copyOf(readCommitted(first, topic, committed.size())));
            TopicPartition tp0 = new TopicPartition(topic, 0);
            Util.waitUntil("the offsets committed with the transaction", Duration.ofSeconds(15), () -> {
                try {
                    OffsetAndMetadata o = admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata()
                            .get(5, TimeUnit.SECONDS).get(tp0);
                    return o != null && o.offset() == 42;
                } catch (Exception e) {
                    return false;
                }
            });
        } catch (Throwable t) {
            for (Broker b : cluster) {
                System.err.println("--- broker " + b.bootstrap() + "\n" + b.logTail());
            }
            throw t;
        } finally {
            cluster.forEach(Broker::close);
        }
    }

    /**
     * Commits and aborts right after `send()`, without a flush, many times in a row: each
     * EndTxn may meet the previous transaction's markers still on their way to the other
     * brokers, and must wait for them (CONCURRENT_TRANSACTIONS, retried by the client), never
     * fence the producer. read_committed sees exactly the committed records; every transaction
     * bumps the epoch. Prints the commitTransaction latency (the batches' round trip and EndTxn).
     */
    @Test
    void endTxnRightAfterSendNeverFencesTheProducer() throws Exception {
        final int rounds = 20;
        List<Broker> cluster = Broker.cluster(3);
        Broker first = cluster.get(0);
        try (Admin admin = Util.admin(first)) {
            Util.waitUntil("three brokers", Duration.ofSeconds(20), () -> {
                try {
                    return admin.describeCluster().nodes().get(5, TimeUnit.SECONDS).size() == 3;
                } catch (Exception e) {
                    return false;
                }
            });
            String topic = Util.unique("txr");
            admin.createTopics(List.of(new NewTopic(topic, PARTITIONS, (short) 3))).all()
                    .get(20, TimeUnit.SECONDS);
            leaders(admin, topic);
            String tid = Util.unique("tid");
            List<String> committed = new ArrayList<>();
            List<Long> commitMicros = new ArrayList<>();
            try (KafkaProducer<String, String> p = Util.producer(first, Map.of(
                    ProducerConfig.TRANSACTIONAL_ID_CONFIG, tid,
                    ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, 30000))) {
                p.initTransactions();
                short e0 = (short) describe(admin, tid).producerEpoch();
                for (int round = 0; round < rounds; round++) {
                    p.beginTransaction();
                    List<String> sent = new ArrayList<>();
                    for (int i = 0; i < PARTITIONS; i++) {
                        String v = "r" + round + "-" + i;
                        p.send(new ProducerRecord<>(topic, i, "k", v));
                        sent.add(v);
                    }
                    if (round % 3 == 2) {
                        p.abortTransaction();
                    } else {
                        long t0 = System.nanoTime();
                        p.commitTransaction();
                        commitMicros.add((System.nanoTime() - t0) / 1000);
                        committed.addAll(sent);
                    }
                }
                assertEquals((short) (e0 + rounds), (short) describe(admin, tid).producerEpoch(),
                        "an epoch bump per transaction (transaction version 2)");
            }
            List<Long> sorted = new ArrayList<>(commitMicros);
            sorted.sort(null);
            System.out.printf("commitTransaction right after send, %d commits: p50 %.1f ms, max %.1f ms%n",
                    sorted.size(), sorted.get(sorted.size() / 2) / 1000.0,
                    sorted.get(sorted.size() - 1) / 1000.0);
            assertEquals(Set.copyOf(committed), Set.copyOf(readCommitted(first, topic, committed.size())));
        } catch (Throwable t) {
            for (Broker b : cluster) {
                System.err.println("--- broker " + b.bootstrap() + "\n" + b.logTail());
            }
            throw t;
        } finally {
            cluster.forEach(Broker::close);
        }
    }

    /** Every record read_committed sees (exactly `expected`, none more within a second). */
    private static List<String> readCommitted(Broker b, String topic, int expected) {
        try (KafkaConsumer<String, String> c = Util.consumer(b, null,
                Map.of(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed"))) {
            List<TopicPartition> tps = new ArrayList<>(Util.partitions(topic, List.of(0, 1, 2, 3, 4, 5)));
            c.assign(tps);
            c.seekToBeginning(tps);
            List<String> out = new ArrayList<>();
            for (ConsumerRecord<String, String> r : Util.pollN(c, expected, Duration.ofSeconds(20))) {
                out.add(r.value());
            }
            c.poll(Duration.ofSeconds(1)).forEach(r -> out.add(r.value()));
            assertEquals(expected, out.size(), "read_committed: " + out);
            assertNotEquals(0, expected);
            return out;
        }
    }
}
