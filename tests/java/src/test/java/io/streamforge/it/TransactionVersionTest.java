package io.streamforge.it;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.ExtendWith;

/**
 * KIP-890 part 2 with the Java 4.x client: at `transaction.version` 2 (the broker's default) the
 * producer uses EndTxn v5 and Produce v12 and every transaction ends with an epoch bump; at 0
 * (`--transaction-version 0`) the same client keeps one epoch (KIP-98). Both commit and abort as
 * read_committed sees them.
 */
@ExtendWith(KnownGaps.class)
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class TransactionVersionTest {

    /** Commit, abort, commit with one producer; the producer epoch after each (describeTransactions). */
    private static List<Short> runTransactions(Broker b, String topic, String tid) throws Exception {
        List<Short> epochs = new ArrayList<>();
        try (KafkaProducer<String, String> p = Util.producer(b, Map.of(ProducerConfig.TRANSACTIONAL_ID_CONFIG, tid));
             var admin = Util.admin(b)) {
            p.initTransactions();
            epochs.add(epoch(admin, tid));
            for (String v : List.of("c1", "aborted", "c2")) {
                p.beginTransaction();
                p.send(new ProducerRecord<>(topic, "k", v));
                p.flush();
                if (v.equals("aborted")) {
                    p.abortTransaction();
                } else {
                    p.commitTransaction();
                }
                epochs.add(epoch(admin, tid));
            }
        }
        return epochs;
    }

    private static short epoch(org.apache.kafka.clients.admin.Admin admin, String tid) throws Exception {
        return (short) admin.describeTransactions(List.of(tid)).all().get(10, TimeUnit.SECONDS).get(tid).producerEpoch();
    }

    private static List<String> readCommitted(Broker b, String topic, int expected) {
        try (KafkaConsumer<String, String> c = Util.consumer(b, null,
                Map.of(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed"))) {
            TopicPartition tp = new TopicPartition(topic, 0);
            c.assign(List.of(tp));
            c.seekToBeginning(List.of(tp));
            List<String> out = new ArrayList<>();
            for (ConsumerRecord<String, String> r : Util.pollN(c, expected, Duration.ofSeconds(15))) {
                out.add(r.value());
            }
            c.poll(Duration.ofSeconds(1)).forEach(r -> out.add(r.value()));
            return out;
        }
    }

    @Test
    void transactionVersion2BumpsTheEpochAtEveryTransaction() throws Exception {
        Broker b = Broker.shared();
        String topic = Util.unique("tv2");
        Util.createTopic(b, topic, 1);
        List<Short> epochs = runTransactions(b, topic, Util.unique("tid"));
        short e0 = epochs.get(0);
        assertEquals(List.of(e0, (short) (e0 + 1), (short) (e0 + 2), (short) (e0 + 3)), epochs);
        assertEquals(List.of("c1", "c2"), readCommitted(b, topic, 2));
    }

    @Test
    void transactionVersion0KeepsOneEpoch() throws Exception {
        try (Broker b = Broker.start("--transaction-version", "0")) {
            String topic = Util.unique("tv0");
            Util.createTopic(b, topic, 1);
            List<Short> epochs = runTransactions(b, topic, Util.unique("tid"));
            short e0 = epochs.get(0);
            assertEquals(List.of(e0, e0, e0, e0), epochs);
            assertEquals(List.of("c1", "c2"), readCommitted(b, topic, 2));
        }
    }
}
