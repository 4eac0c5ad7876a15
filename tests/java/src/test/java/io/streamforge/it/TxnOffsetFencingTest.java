package io.streamforge.it;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.consumer.CommitFailedException;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerGroupMetadata;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.FencedInstanceIdException;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.ExtendWith;

/**
 * KIP-447: a transaction's offsets are checked against the consumer group (a zombie whose
 * consumer was rebalanced out cannot commit them), and a read_committed consumer
 * (OffsetFetch require_stable) waits for a transaction's pending offsets instead of starting
 * from the older committed offset.
 */
@ExtendWith(KnownGaps.class)
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class TxnOffsetFencingTest {
    static final Broker B = Broker.shared();

    private static KafkaProducer<String, String> txProducer() {
        KafkaProducer<String, String> p = Util.producer(B,
                Map.of(ProducerConfig.TRANSACTIONAL_ID_CONFIG, Util.unique("tid")));
        p.initTransactions();
        return p;
    }

    private static void feed(String topic, int partitions, int perPartition) {
        try (KafkaProducer<String, String> feeder = Util.producer(B, Map.of())) {
            for (int p = 0; p < partitions; p++) {
                for (int i = 0; i < perPartition; i++) {
                    feeder.send(new ProducerRecord<>(topic, p, "k", "m" + i));
                }
            }
        }
    }

    private static Map<TopicPartition, OffsetAndMetadata> offset(TopicPartition tp, long offset) {
        Map<TopicPartition, OffsetAndMetadata> m = new HashMap<>();
        m.put(tp, new OffsetAndMetadata(offset));
        return m;
    }

    private static long committed(String group, TopicPartition tp) throws Exception {
        try (var a = Util.admin(B)) {
            OffsetAndMetadata o = a.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata()
                    .get(10, TimeUnit.SECONDS).get(tp);
            return o == null ? -1 : o.offset();
        }
    }

    /** A producer whose consumer's generation is old is refused; the current member's commit goes through. */
    @Test
    void aRebalancedOutZombieCannotCommitOffsets() throws Exception {
        String src = Util.unique("in");
        String group = Util.unique("app");
        Util.createTopic(B, src, 2);
        feed(src, 2, 5);
        TopicPartition tp0 = new TopicPartition(src, 0);
        try (KafkaConsumer<String, String> c1 = Util.consumer(B, group, Map.of());
             KafkaConsumer<String, String> c2 = Util.consumer(B, group, Map.of())) {
            c1.subscribe(List.of(src));
            assertEquals(10, Util.pollN(c1, 10, Duration.ofSeconds(30)).size());
            ConsumerGroupMetadata old = c1.groupMetadata();
            assertTrue(old.generationId() > 0, "c1 is a member: " + old);
            // A second member joins: a new generation, and c1's old metadata is a zombie's.
            c2.subscribe(List.of(src));
            Util.waitUntil("a rebalance onto both consumers", Duration.ofSeconds(30), () -> {
                c1.poll(Duration.ofMillis(100));
                c2.poll(Duration.ofMillis(100));
                return c1.assignment().size() == 1 && c2.assignment().size() == 1
                        && c1.groupMetadata().generationId() > old.generationId()
                        && c1.groupMetadata().generationId() == c2.groupMetadata().generationId();
            });
            try (KafkaProducer<String, String> zombie = txProducer()) {
                zombie.beginTransaction();
                CommitFailedException e = assertThrows(CommitFailedException.class,
                        () -> zombie.sendOffsetsToTransaction(offset(tp0, 3), old));
                assertTrue(e.getMessage().contains("generation"), e.getMessage());
                // Abortable, not fatal: the zombie aborts and its offsets never show.
                zombie.abortTransaction();
            }
            assertEquals(-1, committed(group, tp0));
            ConsumerGroupMetadata current = c1.groupMetadata();
            try (KafkaProducer<String, String> p = txProducer()) {
                p.beginTransaction();
                p.sendOffsetsToTransaction(offset(tp0, 4), current);
                p.commitTransaction();
                // Without a member (sendOffsetsToTransaction(offsets, groupId)) nothing is checked.
                p.beginTransaction();
                p.sendOffsetsToTransaction(offset(tp0, 5), new ConsumerGroupMetadata(group));
                p.commitTransaction();
            }
            assertEquals(5, committed(group, tp0));
        }
    }

    /** A static member's instance taken over by a new consumer: the old one is fenced. */
    @Test
    void aReplacedStaticMemberIsFenced() throws Exception {
        String src = Util.unique("in");
        String group = Util.unique("app");
        Util.createTopic(B, src, 1);
        feed(src, 1, 5);
        TopicPartition tp = new TopicPartition(src, 0);
        Map<String, Object> staticMember = Map.of(ConsumerConfig.GROUP_INSTANCE_ID_CONFIG, "instance-1");
        ConsumerGroupMetadata old;
        try (KafkaConsumer<String, String> c1 = Util.consumer(B, group, staticMember)) {
            c1.subscribe(List.of(src));
            assertEquals(5, Util.pollN(c1, 5, Duration.ofSeconds(30)).size());
            old = c1.groupMetadata();
            assertTrue(old.groupInstanceId().isPresent());
        }
        // A static member does not leave on close; its successor takes the instance over.
        try (KafkaConsumer<String, String> c2 = Util.consumer(B, group, staticMember)) {
            c2.subscribe(List.of(src));
            Util.waitUntil("the successor is assigned", Duration.ofSeconds(30), () -> {
                c2.poll(Duration.ofMillis(100));
                return c2.assignment().size() == 1;
            });
            assertTrue(!c2.groupMetadata().memberId().equals(old.memberId()));
            try (KafkaProducer<String, String> zombie = txProducer()) {
                zombie.beginTransaction();
                assertThrows(FencedInstanceIdException.class,
                        () -> zombie.sendOffsetsToTransaction(offset(tp, 2), old));
                zombie.abortTransaction();
            }
            try (KafkaProducer<String, String> p = txProducer()) {
                p.beginTransaction();
                p.sendOffsetsToTransaction(offset(tp, 3), c2.groupMetadata());
                p.commitTransaction();
            }
            assertEquals(3, committed(group, tp));
        }
    }

    /**
     * A consumer starting while a transaction holds offsets for its partition (the Java
     * consumer's OffsetFetch always asks require_stable, answered UNSTABLE_OFFSET_COMMIT, which
     * it retries) waits, then starts from the transaction's offset, not the older committed one.
     */
    @Test
    void readCommittedConsumerWaitsForPendingTransactionalOffsets() throws Exception {
        String src = Util.unique("in");
        String group = Util.unique("app");
        Util.createTopic(B, src, 1);
        feed(src, 1, 20);
        TopicPartition tp = new TopicPartition(src, 0);
        try (KafkaConsumer<String, String> c = Util.consumer(B, group, Map.of())) {
            c.assign(List.of(tp));
            c.commitSync(offset(tp, 5));
        }
        try (KafkaProducer<String, String> p = txProducer()) {
            p.beginTransaction();
            p.sendOffsetsToTransaction(offset(tp, 12), new ConsumerGroupMetadata(group));
            CompletableFuture<List<ConsumerRecord<String, String>>> reader = CompletableFuture.supplyAsync(() -> {
                try (KafkaConsumer<String, String> c = Util.consumer(B, group,
                        Map.of(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed"))) {
                    c.assign(List.of(tp));
                    return Util.pollN(c, 1, Duration.ofSeconds(40));
                }
            });
            // While the transaction is open the consumer gets no position, so no records.
            Broker.sleep(3000);
            assertTrue(!reader.isDone(), "the consumer must wait for the open transaction");
            // The admin client's OffsetFetch (require_stable=false) still sees the committed offset.
            assertEquals(5, committed(group, tp));
            assertTrue(!reader.isDone(), "the consumer must wait for the open transaction");
            p.commitTransaction();
            List<ConsumerRecord<String, String>> got = reader.get(60, TimeUnit.SECONDS);
            List<Long> offsets = new ArrayList<>();
            got.forEach(r -> offsets.add(r.offset()));
            assertEquals(12L, offsets.get(0), "resumed from the transaction's offset: " + offsets);
        }
    }
}
