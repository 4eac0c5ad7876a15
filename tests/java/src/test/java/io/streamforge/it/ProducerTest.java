package io.streamforge.it;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.Partitioner;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.Cluster;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.ExtendWith;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/** The Java producer: acks, idempotence, every codec, headers, a custom partitioner. */
@ExtendWith(KnownGaps.class)
@Timeout(value = 90, unit = TimeUnit.SECONDS)
class ProducerTest {
    static final Broker B = Broker.shared();
    static final int N = 200;
    static final long TS = System.currentTimeMillis() - 3_600_000L;

    /** Produces N keyed records and reads them back in order per partition. */
    private void roundTrip(Map<String, Object> cfg, int partitions) throws Exception {
        String topic = Util.unique("prod");
        Util.createTopic(B, topic, partitions);
        List<Future<RecordMetadata>> acks = new ArrayList<>();
        try (KafkaProducer<String, String> p = Util.producer(B, cfg)) {
            for (int i = 0; i < N; i++) {
                acks.add(p.send(new ProducerRecord<>(topic, "k" + (i % 7), "v" + i)));
            }
            p.flush();
            for (Future<RecordMetadata> f : acks) {
                RecordMetadata md = f.get(20, TimeUnit.SECONDS);
                assertEquals(topic, md.topic());
            }
        }
        List<ConsumerRecord<String, String>> got = Util.readAll(B, topic, partitions, N);
        assertEquals(N, got.size(), "records read back");
        Map<Integer, Integer> lastSeq = new HashMap<>();
        for (ConsumerRecord<String, String> r : got) {
            int seq = Integer.parseInt(r.value().substring(1));
            Integer prev = lastSeq.put(r.partition(), seq);
            assertTrue(prev == null || prev < seq, "order within partition " + r.partition());
        }
    }

    @ParameterizedTest(name = "acks={0}")
    @ValueSource(strings = {"0", "1", "all"})
    void acks(String acks) throws Exception {
        roundTrip(Map.of(ProducerConfig.ACKS_CONFIG, acks,
                ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "false"), 3);
    }

    @Test
    void idempotentProducer() throws Exception {
        roundTrip(Map.of(ProducerConfig.ACKS_CONFIG, "all",
                ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true",
                ProducerConfig.MAX_IN_FLIGHT_REQUESTS_PER_CONNECTION, "5"), 3);
    }

    @ParameterizedTest(name = "compression={0}")
    @ValueSource(strings = {"none", "gzip", "snappy", "lz4", "zstd"})
    void compression(String codec) throws Exception {
        roundTrip(Map.of(ProducerConfig.COMPRESSION_TYPE_CONFIG, codec,
                ProducerConfig.BATCH_SIZE_CONFIG, "65536"), 2);
    }

    @Test
    void headersRoundTrip() throws Exception {
        String topic = Util.unique("headers");
        Util.createTopic(B, topic, 1);
        try (KafkaProducer<String, String> p = Util.producer(B, Map.of())) {
            ProducerRecord<String, String> rec = new ProducerRecord<>(topic, null, TS, "k", "v",
                    List.<Header>of(new RecordHeader("trace", "abc".getBytes(StandardCharsets.UTF_8)),
                            new RecordHeader("empty", new byte[0]),
                            new RecordHeader("trace", "second".getBytes(StandardCharsets.UTF_8))));
            p.send(rec).get(20, TimeUnit.SECONDS);
        }
        ConsumerRecord<String, String> r = Util.readAll(B, topic, 1, 1).get(0);
        assertEquals(TS, r.timestamp());
        List<String> hs = new ArrayList<>();
        r.headers().forEach(h -> hs.add(h.key() + "=" + new String(h.value(), StandardCharsets.UTF_8)));
        assertEquals(List.of("trace=abc", "empty=", "trace=second"), hs);
    }

    /** Sends every record to the last partition. */
    public static final class LastPartition implements Partitioner {
        @Override
        public int partition(String topic, Object key, byte[] kb, Object value, byte[] vb, Cluster cluster) {
            return cluster.partitionCountForTopic(topic) - 1;
        }

        @Override
        public void close() {}

        @Override
        public void configure(Map<String, ?> configs) {}
    }

    @Test
    void customPartitioner() throws Exception {
        String topic = Util.unique("partitioner");
        Util.createTopic(B, topic, 4);
        try (KafkaProducer<String, String> p = Util.producer(B,
                Map.of(ProducerConfig.PARTITIONER_CLASS_CONFIG, LastPartition.class.getName()))) {
            for (int i = 0; i < 20; i++) {
                assertEquals(3, p.send(new ProducerRecord<>(topic, "k" + i, "v")).get(20, TimeUnit.SECONDS).partition());
            }
        }
        List<ConsumerRecord<String, String>> got = Util.readAll(B, topic, 4, 20);
        assertEquals(20, got.size());
        got.forEach(r -> assertEquals(3, r.partition()));
    }
}
