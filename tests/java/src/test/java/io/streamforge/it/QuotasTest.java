package io.streamforge.it;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.Metric;
import org.apache.kafka.common.MetricName;
import org.apache.kafka.common.quota.ClientQuotaEntity;
import org.apache.kafka.common.quota.ClientQuotaFilter;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.ExtendWith;

/**
 * Client quotas (docs/SECURITY.md "Quotas") through Kafka's own `kafka-configs` (ConfigCommand
 * sends AlterClientQuotas / DescribeClientQuotas for users and clients) and the Java client:
 * the admin's describeClientQuotas, and a producer over its quota seeing the throttle time.
 */
@ExtendWith(KnownGaps.class)
@Timeout(value = 180, unit = TimeUnit.SECONDS)
class QuotasTest {
    static final Broker B = Broker.shared();
    static final String BS = B.bootstrap();

    static String configs(String... args) {
        String[] all = new String[args.length + 2];
        all[0] = "--bootstrap-server";
        all[1] = BS;
        System.arraycopy(args, 0, all, 2, args.length);
        return Tool.ok(ToolsTest.CONFIGS, null, all).out();
    }

    @Test
    void kafkaConfigsAltersAndDescribesUserAndClientQuotas() throws Exception {
        String user = Util.unique("quser");
        String client = Util.unique("qclient");
        configs("--entity-type", "users", "--entity-name", user, "--alter",
                "--add-config", "producer_byte_rate=1048576,consumer_byte_rate=2097152");
        configs("--entity-type", "clients", "--entity-name", client, "--alter",
                "--add-config", "request_percentage=50");
        configs("--entity-type", "users", "--entity-name", user, "--entity-type", "clients",
                "--entity-default", "--alter", "--add-config", "producer_byte_rate=4096");
        String d = configs("--entity-type", "users", "--entity-name", user, "--describe");
        assertTrue(d.contains("producer_byte_rate=1048576.0") && d.contains("consumer_byte_rate=2097152.0"), d);
        d = configs("--entity-type", "clients", "--entity-name", client, "--describe");
        assertTrue(d.contains("request_percentage=50.0"), d);
        d = configs("--entity-type", "users", "--entity-name", user, "--entity-type", "clients",
                "--entity-default", "--describe");
        assertTrue(d.contains("producer_byte_rate=4096.0"), d);

        try (Admin a = Util.admin(B)) {
            Map<ClientQuotaEntity, Map<String, Double>> all =
                    a.describeClientQuotas(ClientQuotaFilter.all()).entities().get(30, TimeUnit.SECONDS);
            assertEquals(Map.of("request_percentage", 50.0),
                    all.get(new ClientQuotaEntity(Map.of(ClientQuotaEntity.CLIENT_ID, client))));
        }

        // An unknown key is refused (INVALID_REQUEST), and a deleted key is gone.
        Tool.Result bad = Tool.run(ToolsTest.CONFIGS, null, "--bootstrap-server", BS, "--entity-type", "users",
                "--entity-name", user, "--alter", "--add-config", "bogus_rate=5");
        assertNotEquals(0, bad.exit(), bad.toString());
        configs("--entity-type", "users", "--entity-name", user, "--alter", "--delete-config", "consumer_byte_rate");
        d = configs("--entity-type", "users", "--entity-name", user, "--describe");
        assertTrue(d.contains("producer_byte_rate=1048576.0") && !d.contains("consumer_byte_rate"), d);
    }

    @Test
    void aProducerOverItsQuotaIsThrottled() throws Exception {
        String t = Util.unique("quota-topic");
        String client = Util.unique("throttled");
        Util.createTopic(B, t, 1);
        configs("--entity-type", "clients", "--entity-name", client, "--alter",
                "--add-config", "producer_byte_rate=20480");
        Map<String, Object> extra = Map.of(ProducerConfig.CLIENT_ID_CONFIG, client);
        try (KafkaProducer<String, String> p = Util.producer(B, extra)) {
            String value = "v".repeat(10_000);
            for (int i = 0; i < 40; i++) {
                p.send(new ProducerRecord<>(t, value)).get(60, TimeUnit.SECONDS);
            }
            double throttleMax = 0;
            for (Map.Entry<MetricName, ? extends Metric> m : p.metrics().entrySet()) {
                if (m.getKey().name().equals("produce-throttle-time-max")) {
                    throttleMax = Math.max(throttleMax, ((Number) m.getValue().metricValue()).doubleValue());
                }
            }
            assertTrue(throttleMax > 0, "produce-throttle-time-max " + throttleMax);
        }
    }
}
