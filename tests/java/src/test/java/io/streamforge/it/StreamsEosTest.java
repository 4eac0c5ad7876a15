package io.streamforge.it;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.time.Duration;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.LongDeserializer;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler;
import org.apache.kafka.streams.kstream.Produced;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.ExtendWith;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * Kafka Streams word count (a state store, with the changelog and repartition topics Streams
 * creates itself) under processing.guarantee=exactly_once_v2 and at_least_once, on a steady
 * broker and across a SIGKILL + restart of the broker while the application runs. Exactly once
 * must count every word exactly once; at least once exactly once on the steady broker (nothing
 * failed) and at least once across the kill (a record may be processed again after it).
 */
@ExtendWith(KnownGaps.class)
@Timeout(value = 300, unit = TimeUnit.SECONDS)
class StreamsEosTest {
    static final Broker B = Broker.shared();

    @ParameterizedTest
    @ValueSource(strings = {StreamsConfig.EXACTLY_ONCE_V2, StreamsConfig.AT_LEAST_ONCE})
    void wordCountIsExactOnASteadyBroker(String guarantee) throws Exception {
        String in = Util.unique("words-in");
        String out = Util.unique("words-out");
        Util.createTopic(B, in, 2);
        Util.createTopic(B, out, 2);
        String[] lines = {"a b c", "b c", "c", "a a", "d"};
        Map<String, Long> expected = new HashMap<>();
        try (KafkaProducer<String, String> p = Util.producer(B, Map.of())) {
            for (int round = 0; round < 20; round++) {
                for (String line : lines) {
                    p.send(new ProducerRecord<>(in, null, line));
                    for (String w : line.split(" ")) {
                        expected.merge(w, 1L, Long::sum);
                    }
                }
            }
        }
        Properties props = new Properties();
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, Util.unique("wordcount"));
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, B.bootstrap());
        props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, guarantee);
        props.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, 1);
        props.put(StreamsConfig.STATE_DIR_CONFIG, Files.createTempDirectory("streams").toString());
        props.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 200);
        props.put(StreamsConfig.DEFAULT_KEY_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        props.put(StreamsConfig.DEFAULT_VALUE_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        props.put(StreamsConfig.consumerPrefix(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG), "earliest");
        StreamsBuilder builder = new StreamsBuilder();
        builder.<String, String>stream(in)
                .flatMapValues(v -> Arrays.asList(v.toLowerCase(Locale.ROOT).split(" ")))
                .groupBy((k, w) -> w)
                .count()
                .toStream()
                .to(out, Produced.with(Serdes.String(), Serdes.Long()));
        Map<String, Long> latest = new HashMap<>();
        try (KafkaStreams streams = new KafkaStreams(builder.build(), props);
             KafkaConsumer<String, Long> c = new KafkaConsumer<>(Map.of(
                     ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, B.bootstrap(),
                     ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed",
                     ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest",
                     ConsumerConfig.GROUP_PROTOCOL_CONFIG, "classic"),
                     new StringDeserializer(), new LongDeserializer())) {
            streams.start();
            c.assign(List.of(new TopicPartition(out, 0), new TopicPartition(out, 1)));
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(120);
            while (!latest.equals(expected) && System.nanoTime() < deadline) {
                for (ConsumerRecord<String, Long> r : c.poll(Duration.ofMillis(500))) {
                    latest.put(r.key(), r.value());
                }
            }
        }
        assertEquals(expected, latest, guarantee);
    }

    private static Map<String, Long> produceLines(Broker b, String in, int rounds, Map<String, Long> expected) {
        String[] lines = {"a b c", "b c", "c", "a a", "d"};
        try (KafkaProducer<String, String> p = Util.producer(b, Map.of())) {
            for (int round = 0; round < rounds; round++) {
                for (String line : lines) {
                    p.send(new ProducerRecord<>(in, null, line));
                    for (String w : line.split(" ")) {
                        expected.merge(w, 1L, Long::sum);
                    }
                }
            }
        }
        return expected;
    }

    /**
     * Reads the output's read_committed counts into `latest` until they equal `expected`
     * (`exact`), or until every expected word is counted at least that often.
     */
    private static void awaitCounts(KafkaConsumer<String, Long> c, Map<String, Long> latest,
                                    Map<String, Long> expected, boolean exact, long seconds) {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(seconds);
        while (!(exact ? latest.equals(expected) : countsAtLeast(latest, expected))
                && System.nanoTime() < deadline) {
            for (ConsumerRecord<String, Long> r : c.poll(Duration.ofMillis(500))) {
                latest.put(r.key(), r.value());
            }
        }
    }

    @ParameterizedTest
    @ValueSource(strings = {StreamsConfig.EXACTLY_ONCE_V2, StreamsConfig.AT_LEAST_ONCE})
    void wordCountHoldsItsGuaranteeAcrossABrokerKill(String guarantee) throws Exception {
        boolean exactlyOnce = guarantee.equals(StreamsConfig.EXACTLY_ONCE_V2);
        try (Broker b = Broker.start()) {
            String in = Util.unique("words-in");
            String out = Util.unique("words-out");
            Util.createTopic(b, in, 2);
            Util.createTopic(b, out, 2);
            Map<String, Long> expected = produceLines(b, in, 20, new HashMap<>());
            Properties props = new Properties();
            props.put(StreamsConfig.APPLICATION_ID_CONFIG, Util.unique("wordcount"));
            props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, b.bootstrap());
            props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, guarantee);
            props.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, 1);
            props.put(StreamsConfig.STATE_DIR_CONFIG, Files.createTempDirectory("streams").toString());
            props.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 200);
            props.put(StreamsConfig.DEFAULT_KEY_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
            props.put(StreamsConfig.DEFAULT_VALUE_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
            props.put(StreamsConfig.consumerPrefix(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG), "earliest");
            StreamsBuilder builder = new StreamsBuilder();
            builder.<String, String>stream(in)
                    .flatMapValues(v -> Arrays.asList(v.toLowerCase(Locale.ROOT).split(" ")))
                    .groupBy((k, w) -> w)
                    .count()
                    .toStream()
                    .to(out, Produced.with(Serdes.String(), Serdes.Long()));
            Map<String, Long> latest = new HashMap<>();
            try (KafkaStreams streams = new KafkaStreams(builder.build(), props)) {
                // A thread that dies on the outage is replaced, as an operator would configure.
                streams.setUncaughtExceptionHandler(e -> StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.REPLACE_THREAD);
                streams.start();
                try (KafkaConsumer<String, Long> c = countsConsumer(b)) {
                    c.assign(List.of(new TopicPartition(out, 0), new TopicPartition(out, 1)));
                    awaitCounts(c, latest, expected, true, 90);
                    assertEquals(expected, latest, "before the kill");
                    // More input, and the kill as soon as its first counts are committed: the
                    // application is in the middle of it (several 200 ms transactions).
                    Map<String, Long> before = new HashMap<>(latest);
                    produceLines(b, in, 300, expected);
                    awaitProgress(c, before, 60);
                }
                b.killAndRestart();
                produceLines(b, in, 20, expected);
                latest.clear();
                try (KafkaConsumer<String, Long> c = countsConsumer(b)) {
                    c.assign(List.of(new TopicPartition(out, 0), new TopicPartition(out, 1)));
                    awaitCounts(c, latest, expected, exactlyOnce, 150);
                }
            }
            if (exactlyOnce) {
                assertEquals(expected, latest, "after the kill: every word counted exactly once");
            } else {
                assertEquals(expected.keySet(), latest.keySet(), "after the kill: the words");
                assertTrue(countsAtLeast(latest, expected),
                        "after the kill: every word counted at least once: " + latest + " against " + expected);
            }
        }
    }

    private static boolean countsAtLeast(Map<String, Long> latest, Map<String, Long> expected) {
        return expected.entrySet().stream()
                .allMatch(e -> latest.getOrDefault(e.getKey(), 0L) >= e.getValue());
    }

    /** Polls until some count moved past `before`. */
    private static void awaitProgress(KafkaConsumer<String, Long> c, Map<String, Long> before, long seconds) {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(seconds);
        while (System.nanoTime() < deadline) {
            for (ConsumerRecord<String, Long> r : c.poll(Duration.ofMillis(50))) {
                if (r.value() > before.getOrDefault(r.key(), 0L)) {
                    return;
                }
            }
        }
        throw new AssertionError("the application made no progress on the new input");
    }

    private static KafkaConsumer<String, Long> countsConsumer(Broker b) {
        return new KafkaConsumer<>(Map.of(
                ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, b.bootstrap(),
                ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed",
                ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest",
                ConsumerConfig.GROUP_PROTOCOL_CONFIG, "classic"),
                new StringDeserializer(), new LongDeserializer());
    }
}
