package io.streamforge.it;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.TimeUnit;
import java.util.stream.Collectors;
import java.util.stream.LongStream;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.Metric;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.ExtendWith;

/**
 * KIP-392 with the Java consumer across real broker processes: three brokers, each in its own
 * rack (`--broker-rack r1|r2|r3`) with the rack-aware selector, an RF=3 topic led by broker 1.
 * A consumer with `client.rack=r2` reads every acks=all record in order, once each, and its own
 * `preferred-read-replica` metric says it reads from broker 2. Broker 2 killed: the consumer
 * drops the preferred replica when its fetch fails and goes on from the leader (-1) with no gap
 * and no duplicate; broker 2 back in the ISR: the leader names it again.
 */
@ExtendWith(KnownGaps.class)
@Timeout(value = 180, unit = TimeUnit.SECONDS)
class ReadReplicaClusterTest {
    private static final int N = 200;
    private static final Duration WAIT = Duration.ofSeconds(60);

    @Test
    void aRackedConsumerReadsFromItsFollowerAndGoesOnFromTheLeaderWithoutIt() throws Exception {
        List<Broker> brokers = Broker.cluster(3, "--replica-selector", "rack-aware", "--broker-rack", "r{node}");
        String bootstrap = brokers.stream().map(Broker::bootstrap).collect(Collectors.joining(","));
        String topic = Util.unique("rack-reads");
        TopicPartition tp = new TopicPartition(topic, 0);
        try (Admin admin = Admin.create(Map.of(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap));
                KafkaProducer<String, String> producer = producer(bootstrap);
                KafkaConsumer<String, String> consumer = consumer(bootstrap)) {
            admin.createTopics(List.of(new NewTopic(topic, Map.of(0, List.of(1, 2, 3)))
                    .configs(Map.of("min.insync.replicas", "2")))).all().get(30, TimeUnit.SECONDS);
            Util.waitUntil("the ISR full", WAIT, () -> isr(admin, topic).equals(Set.of(1, 2, 3)));
            consumer.assign(List.of(tp));
            consumer.seek(tp, 0);
            List<Long> got = new ArrayList<>();

            produce(producer, topic, 0, N);
            readUntil(consumer, got, N);
            assertEquals(2.0, preferredReadReplica(consumer, tp), "reads from broker 2 (rack r2)");

            brokers.get(1).kill();
            Util.waitUntil("broker 2 out of the ISR", WAIT, () -> isr(admin, topic).equals(Set.of(1, 3)));
            produce(producer, topic, N, 2 * N);
            readUntil(consumer, got, 2 * N);
            assertEquals(-1.0, preferredReadReplica(consumer, tp), "reads from the leader");

            brokers.get(1).restart();
            Util.waitUntil("broker 2 back in the ISR", WAIT, () -> isr(admin, topic).equals(Set.of(1, 2, 3)));
            produce(producer, topic, 2 * N, 3 * N);
            readUntil(consumer, got, 3 * N);
            Util.waitUntil("the consumer back on broker 2", WAIT, () -> {
                consumer.poll(Duration.ofMillis(100)).forEach(r -> got.add(Long.parseLong(r.value())));
                return preferredReadReplica(consumer, tp) == 2.0;
            });
            assertEquals(LongStream.range(0, 3 * N).boxed().toList(), got, "a gap or a duplicate");
        } catch (Exception | AssertionError e) {
            throw new AssertionError(e + "\n" + brokers.stream().map(Broker::logTail)
                    .collect(Collectors.joining("\n----\n")), e);
        } finally {
            brokers.forEach(Broker::close);
        }
    }

    private static KafkaProducer<String, String> producer(String bootstrap) {
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.ACKS_CONFIG, "all");
        p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "30000");
        p.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, "10000");
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        return new KafkaProducer<>(p);
    }

    private static KafkaConsumer<String, String> consumer(String bootstrap) {
        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ConsumerConfig.CLIENT_RACK_CONFIG, "r2");
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        p.put(ConsumerConfig.FETCH_MAX_WAIT_MS_CONFIG, "100");
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        return new KafkaConsumer<>(p);
    }

    private static void produce(KafkaProducer<String, String> producer, String topic, long from, long to)
            throws Exception {
        List<java.util.concurrent.Future<?>> sent = new ArrayList<>();
        for (long v = from; v < to; v++) {
            sent.add(producer.send(new ProducerRecord<>(topic, 0, null, Long.toString(v))));
        }
        producer.flush();
        for (var f : sent) {
            f.get(30, TimeUnit.SECONDS); // every record acknowledged, or this throws
        }
    }

    /** Poll until `got` holds `count` records. */
    private static void readUntil(KafkaConsumer<String, String> consumer, List<Long> got, int count) {
        long deadline = System.nanoTime() + WAIT.toNanos();
        while (got.size() < count) {
            if (System.nanoTime() > deadline) {
                throw new AssertionError("read " + got.size() + " of " + count);
            }
            for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(200))) {
                got.add(Long.parseLong(r.value()));
            }
        }
        assertEquals(LongStream.range(0, count).boxed().toList(), got, "a gap or a duplicate");
    }

    /** The consumer's own `preferred-read-replica` gauge for `tp` (-1: the leader). */
    private static double preferredReadReplica(KafkaConsumer<?, ?> consumer, TopicPartition tp) {
        for (Map.Entry<org.apache.kafka.common.MetricName, ? extends Metric> e : consumer.metrics().entrySet()) {
            var name = e.getKey();
            if (name.name().equals("preferred-read-replica")
                    && tp.topic().equals(name.tags().get("topic"))
                    && String.valueOf(tp.partition()).equals(name.tags().get("partition"))) {
                return ((Number) e.getValue().metricValue()).doubleValue();
            }
        }
        throw new AssertionError("no preferred-read-replica metric for " + tp);
    }

    private static Set<Integer> isr(Admin admin, String topic) {
        try {
            return admin.describeTopics(List.of(topic)).allTopicNames().get(10, TimeUnit.SECONDS)
                    .get(topic).partitions().get(0).isr().stream().map(Node::id).collect(Collectors.toSet());
        } catch (Exception e) {
            return Set.of();
        }
    }
}
