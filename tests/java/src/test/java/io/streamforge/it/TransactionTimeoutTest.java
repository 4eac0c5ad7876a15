package io.streamforge.it;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.TransactionDescription;
import org.apache.kafka.clients.admin.TransactionState;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.ProducerFencedException;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.ExtendWith;

/**
 * `transaction.timeout.ms` with the Java client: the coordinator aborts a transaction left open
 * past its timeout on its own (under a bumped epoch), at transaction version 2 (the default) and
 * 0. The producer's commitTransaction then fails with ProducerFencedException: the coordinator
 * answers EndTxn of the old epoch PRODUCER_FENCED, as Kafka's does (its timeout abort is the
 * same epoch fence; at version 2 a commit under the epoch before the abort's is no retry of
 * anything), and the Java client's EndTxn handler turns PRODUCER_FENCED (and
 * INVALID_PRODUCER_EPOCH) into that fatal error. Its records are never visible to
 * read_committed, visible to read_uncommitted; a new producer under the same transactional.id
 * commits afterwards.
 */
@ExtendWith(KnownGaps.class)
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class TransactionTimeoutTest {

    private static List<String> read(Broker b, String topic, String isolation, int atLeast) {
        try (KafkaConsumer<String, String> c = Util.consumer(b, null,
                Map.of(ConsumerConfig.ISOLATION_LEVEL_CONFIG, isolation))) {
            TopicPartition tp = new TopicPartition(topic, 0);
            c.assign(List.of(tp));
            c.seekToBeginning(List.of(tp));
            List<String> out = new ArrayList<>();
            for (ConsumerRecord<String, String> r : Util.pollN(c, atLeast, Duration.ofSeconds(15))) {
                out.add(r.value());
            }
            c.poll(Duration.ofSeconds(1)).forEach(r -> out.add(r.value()));
            return out;
        }
    }

    private static TransactionDescription describe(Admin a, String tid) {
        try {
            return a.describeTransactions(List.of(tid)).all().get(10, TimeUnit.SECONDS).get(tid);
        } catch (Exception e) {
            throw new IllegalStateException(e);
        }
    }

    private static void timedOutTransactionIsAbortedAndTheProducerFenced(Broker b) {
        String topic = Util.unique("txto");
        Util.createTopic(b, topic, 1);
        String tid = Util.unique("tid");
        try (Admin a = Util.admin(b)) {
            try (KafkaProducer<String, String> p = Util.producer(b, Map.of(
                    ProducerConfig.TRANSACTIONAL_ID_CONFIG, tid,
                    ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, 2000))) {
                p.initTransactions();
                p.beginTransaction();
                p.send(new ProducerRecord<>(topic, "k", "timed-out"));
                p.flush();
                TransactionDescription open = describe(a, tid);
                assertEquals(TransactionState.ONGOING, open.state());
                assertEquals(2000, open.transactionTimeoutMs());
                // The coordinator aborts it by itself (it looks at least every second).
                Util.waitUntil("the timeout's abort", Duration.ofSeconds(15),
                        () -> describe(a, tid).state() == TransactionState.COMPLETE_ABORT);
                TransactionDescription aborted = describe(a, tid);
                assertEquals(open.producerId(), aborted.producerId());
                assertEquals(true, aborted.producerEpoch() > open.producerEpoch(),
                        "the timeout's abort bumps the epoch: " + open.producerEpoch() + " -> "
                                + aborted.producerEpoch());
                assertThrows(ProducerFencedException.class, p::commitTransaction);
            }
            assertEquals(List.of(), read(b, topic, "read_committed", 0));
            assertEquals(List.of("timed-out"), read(b, topic, "read_uncommitted", 1));
            try (KafkaProducer<String, String> next = Util.producer(b, Map.of(
                    ProducerConfig.TRANSACTIONAL_ID_CONFIG, tid))) {
                next.initTransactions();
                next.beginTransaction();
                next.send(new ProducerRecord<>(topic, "k", "after"));
                next.commitTransaction();
            }
            assertEquals(TransactionState.COMPLETE_COMMIT, describe(a, tid).state());
        }
        assertEquals(List.of("after"), read(b, topic, "read_committed", 1));
        assertEquals(List.of("timed-out", "after"), read(b, topic, "read_uncommitted", 2));
    }

    @Test
    void atTransactionVersion2() {
        timedOutTransactionIsAbortedAndTheProducerFenced(Broker.shared());
    }

    @Test
    void atTransactionVersion0() {
        try (Broker b = Broker.start("--transaction-version", "0")) {
            timedOutTransactionIsAbortedAndTheProducerFenced(b);
        }
    }
}
