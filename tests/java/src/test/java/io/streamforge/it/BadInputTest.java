package io.streamforge.it;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.RecordTooLargeException;
import org.apache.kafka.common.errors.TimeoutException;
import org.apache.kafka.common.errors.UnknownTopicOrPartitionException;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.ExtendWith;

/**
 * Bad input gets the error Kafka returns and the broker keeps serving. Runs its own broker with
 * topic auto-creation off (Kafka's auto.create.topics.enable=false).
 */
@ExtendWith(KnownGaps.class)
@Timeout(value = 90, unit = TimeUnit.SECONDS)
class BadInputTest {
    static final Broker B = Broker.start("--auto-create-topics", "false");
    static final Admin A = Util.admin(B);

    @AfterAll
    static void stop() {
        A.close();
        B.close();
    }

    /** A plain produce and read on a fresh topic: the broker still serves. */
    static void assertServes() throws Exception {
        String topic = Util.unique("alive");
        Util.createTopic(B, topic, 1);
        try (KafkaProducer<String, String> p = Util.producer(B, Map.of())) {
            assertEquals(0L, p.send(new ProducerRecord<>(topic, "k", "alive")).get(20, TimeUnit.SECONDS).offset());
        }
        assertEquals("alive", Util.readAll(B, topic, 1, 1).get(0).value());
        assertTrue(B.isRunning());
    }

    @Test
    void recordOverMaxMessageBytes() throws Exception {
        String topic = Util.unique("big");
        A.createTopics(List.of(new NewTopic(topic, 1, (short) 1).configs(Map.of("max.message.bytes", "1000"))))
                .all().get(30, TimeUnit.SECONDS);
        try (KafkaProducer<String, String> p = Util.producer(B, Map.of(ProducerConfig.RETRIES_CONFIG, "0"))) {
            Throwable t = assertThrows(ExecutionException.class,
                    () -> p.send(new ProducerRecord<>(topic, "k", "x".repeat(5000))).get(20, TimeUnit.SECONDS));
            assertInstanceOf(RecordTooLargeException.class, t.getCause(), "MESSAGE_TOO_LARGE: " + t.getCause());
            assertEquals(0L, p.send(new ProducerRecord<>(topic, "k", "small")).get(20, TimeUnit.SECONDS).offset(),
                    "a fitting record on the same connection still goes in");
        }
        assertServes();
    }

    @Test
    void unknownTopicWithAutoCreateOff() throws Exception {
        String topic = Util.unique("nosuch");
        try (KafkaProducer<String, String> p = Util.producer(B, Map.of(ProducerConfig.MAX_BLOCK_MS_CONFIG, "2000"))) {
            Throwable t = assertThrows(ExecutionException.class,
                    () -> p.send(new ProducerRecord<>(topic, "k", "v")).get(20, TimeUnit.SECONDS));
            assertInstanceOf(TimeoutException.class, t.getCause());
            assertTrue(t.getCause().getMessage().contains("not present in metadata"), t.getCause().getMessage());
        }
        Throwable d = assertThrows(ExecutionException.class,
                () -> A.describeTopics(List.of(topic)).allTopicNames().get(30, TimeUnit.SECONDS));
        assertInstanceOf(UnknownTopicOrPartitionException.class, d.getCause());
        try (KafkaConsumer<String, String> c = Util.consumer(B, null, Map.of())) {
            assertTrue(c.partitionsFor(topic, Duration.ofSeconds(5)).isEmpty(), "no partitions for " + topic);
            TopicPartition tp = new TopicPartition(topic, 0);
            assertThrows(TimeoutException.class, () -> c.endOffsets(List.of(tp), Duration.ofSeconds(3)));
        }
        assertTrue(!A.listTopics().names().get(30, TimeUnit.SECONDS).contains(topic), "not auto-created");
        assertServes();
    }

    @Test
    void unservedApiKeyClosesTheConnection() throws Exception {
        // AlterReplicaLogDirs (34) is not served: Kafka closes a connection whose request it cannot
        // parse; so do we. The next connection is served.
        Broker.Wire.Reply r = Broker.Wire.request(B.port(), (short) 34, (short) 1);
        assertTrue(r.closed(), "connection closed for an unserved api key");
        Broker.Wire.Reply bogus = Broker.Wire.request(B.port(), (short) 9999, (short) 0);
        assertTrue(bogus.closed(), "connection closed for an unknown api key");
        assertServes();
    }

    @Test
    void unservedVersionOfApiVersions() throws Exception {
        // ApiVersions at a version newer than served: UNSUPPORTED_VERSION (35) in a v0 body.
        Broker.Wire.Reply r = Broker.Wire.request(B.port(), (short) 18, (short) 99);
        assertEquals(false, r.closed());
        assertEquals((short) 35, r.errorCode());
        // Metadata at a version newer than served: the connection is closed, as Kafka does.
        assertTrue(Broker.Wire.request(B.port(), (short) 3, (short) 99).closed());
        assertServes();
    }
}
