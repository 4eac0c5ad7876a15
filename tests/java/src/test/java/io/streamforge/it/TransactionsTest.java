package io.streamforge.it;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.TransactionState;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.ExtendWith;

/** The Java client's transactional producer: commit, abort, fencing, sendOffsetsToTransaction. */
@ExtendWith(KnownGaps.class)
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class TransactionsTest {
    static final Broker B = Broker.shared();

    private static KafkaProducer<String, String> txProducer(String tid) {
        KafkaProducer<String, String> p = Util.producer(B, Map.of(ProducerConfig.TRANSACTIONAL_ID_CONFIG, tid));
        p.initTransactions();
        return p;
    }

    private static List<String> read(String topic, String isolation, int atLeast) {
        try (KafkaConsumer<String, String> c = Util.consumer(B, null,
                Map.of(ConsumerConfig.ISOLATION_LEVEL_CONFIG, isolation))) {
            TopicPartition tp = new TopicPartition(topic, 0);
            c.assign(List.of(tp));
            c.seekToBeginning(List.of(tp));
            List<String> out = new ArrayList<>();
            for (ConsumerRecord<String, String> r : Util.pollN(c, atLeast, Duration.ofSeconds(15))) {
                out.add(r.value());
            }
            // Nothing more arrives after what was expected.
            c.poll(Duration.ofSeconds(1)).forEach(r -> out.add(r.value()));
            return out;
        }
    }

    @Test
    void commitAndAbortAsEachIsolationLevelSeesThem() {
        String topic = Util.unique("tx");
        Util.createTopic(B, topic, 1);
        try (KafkaProducer<String, String> p = txProducer(Util.unique("tid"))) {
            p.beginTransaction();
            p.send(new ProducerRecord<>(topic, "k", "c1"));
            p.send(new ProducerRecord<>(topic, "k", "c2"));
            p.commitTransaction();
            p.beginTransaction();
            p.send(new ProducerRecord<>(topic, "k", "aborted"));
            p.flush();
            p.abortTransaction();
            p.beginTransaction();
            p.send(new ProducerRecord<>(topic, "k", "c3"));
            p.commitTransaction();
        }
        assertEquals(List.of("c1", "c2", "c3"), read(topic, "read_committed", 3));
        assertEquals(List.of("c1", "c2", "aborted", "c3"), read(topic, "read_uncommitted", 4));
    }

    @Test
    void aNewInstanceFencesTheOldOne() throws Exception {
        String topic = Util.unique("tx");
        Util.createTopic(B, topic, 1);
        String tid = Util.unique("tid");
        try (KafkaProducer<String, String> zombie = txProducer(tid)) {
            zombie.beginTransaction();
            zombie.send(new ProducerRecord<>(topic, "k", "zombie"));
            zombie.flush();
            try (var a = Util.admin(B)) {
                var d = a.describeTransactions(List.of(tid)).all().get(10, TimeUnit.SECONDS).get(tid);
                assertEquals(TransactionState.ONGOING, d.state());
                assertEquals(List.of(new TopicPartition(topic, 0)), List.copyOf(d.topicPartitions()));
                boolean listed = a.listTransactions().all().get(10, TimeUnit.SECONDS).stream()
                        .anyMatch(l -> l.transactionalId().equals(tid));
                assertEquals(true, listed, "listTransactions shows " + tid);
            }
            try (KafkaProducer<String, String> successor = txProducer(tid)) {
                assertThrows(KafkaException.class, zombie::commitTransaction);
                successor.beginTransaction();
                successor.send(new ProducerRecord<>(topic, "k", "successor"));
                successor.commitTransaction();
            }
        }
        assertEquals(List.of("successor"), read(topic, "read_committed", 1));
    }

    @Test
    void offsetsSentToTheTransactionCommitWithIt() throws Exception {
        String src = Util.unique("in");
        String dst = Util.unique("out");
        String group = Util.unique("app");
        Util.createTopic(B, src, 1);
        Util.createTopic(B, dst, 1);
        try (KafkaProducer<String, String> feeder = Util.producer(B, Map.of())) {
            for (int i = 0; i < 50; i++) {
                feeder.send(new ProducerRecord<>(src, "k", "m" + i));
            }
        }
        TopicPartition in = new TopicPartition(src, 0);
        try (KafkaProducer<String, String> p = txProducer(Util.unique("tid"));
             KafkaConsumer<String, String> c = Util.consumer(B, group,
                     Map.of(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed"))) {
            c.subscribe(List.of(src));
            List<ConsumerRecord<String, String>> got = Util.pollN(c, 50, Duration.ofSeconds(20));
            assertEquals(50, got.size());
            p.beginTransaction();
            for (ConsumerRecord<String, String> r : got) {
                p.send(new ProducerRecord<>(dst, r.key(), r.value().toUpperCase()));
            }
            Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
            offsets.put(in, new OffsetAndMetadata(got.get(got.size() - 1).offset() + 1));
            p.sendOffsetsToTransaction(offsets, c.groupMetadata());
            // Not visible before the commit.
            try (var a = Util.admin(B)) {
                var before = a.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get(10, TimeUnit.SECONDS);
                assertEquals(null, before.get(in));
            }
            p.commitTransaction();
        }
        try (var a = Util.admin(B)) {
            var after = a.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get(10, TimeUnit.SECONDS);
            assertEquals(50L, after.get(in).offset());
        }
        assertEquals(50, read(dst, "read_committed", 50).size());
    }
}
