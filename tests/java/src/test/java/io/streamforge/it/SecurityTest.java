package io.streamforge.it;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.ScramCredentialInfo;
import org.apache.kafka.clients.admin.ScramMechanism;
import org.apache.kafka.clients.admin.UserScramCredentialUpsertion;
import org.apache.kafka.clients.admin.UserScramCredentialsDescription;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.errors.SaslAuthenticationException;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * The Java client over SSL with a client certificate (mutual TLS) and over SASL_SSL with
 * SCRAM-SHA-256/512 and PLAIN; users created and described with the Java admin
 * (AlterUserScramCredentials / DescribeUserScramCredentials); a wrong password is a
 * SaslAuthenticationException. Certificates come from scripts/gen-certs (PEM stores).
 */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class SecurityTest {
    static Path certs;
    static Broker b;
    static int sslPort;
    static int saslSslPort;

    @BeforeAll
    static void start() throws Exception {
        certs = Files.createTempDirectory("sf-certs-");
        Process gen = new ProcessBuilder("../../scripts/gen-certs", certs.toString(), "alice")
                .redirectErrorStream(true).start();
        assertEquals(0, gen.waitFor(), "gen-certs failed");
        Files.writeString(certs.resolve("alice-keystore.pem"),
                Files.readString(certs.resolve("alice.key")) + Files.readString(certs.resolve("alice.pem")));
        sslPort = Broker.freePort();
        saslSslPort = Broker.freePort();
        b = Broker.start("--listeners",
                "PLAINTEXT://127.0.0.1:{port},SSL://127.0.0.1:" + sslPort + ",SASL_SSL://127.0.0.1:" + saslSslPort,
                "--ssl-cert", certs.resolve("broker.pem").toString(),
                "--ssl-key", certs.resolve("broker.key").toString(),
                "--ssl-ca", certs.resolve("ca.pem").toString(),
                "--ssl-client-auth", "requested",
                "--sasl-mechanisms", "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512");
        try (Admin a = Util.admin(b)) {
            a.alterUserScramCredentials(List.of(
                    new UserScramCredentialUpsertion("alice",
                            new ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), "alice-secret"),
                    new UserScramCredentialUpsertion("alice",
                            new ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192), "alice-secret")))
                    .all().get(20, TimeUnit.SECONDS);
            Map<String, UserScramCredentialsDescription> d =
                    a.describeUserScramCredentials().all().get(20, TimeUnit.SECONDS);
            assertEquals(2, d.get("alice").credentialInfos().size());
        }
    }

    @AfterAll
    static void stop() {
        if (b != null) {
            b.close();
        }
    }

    static Map<String, Object> tls(int port) {
        Map<String, Object> c = new HashMap<>();
        c.put("bootstrap.servers", "127.0.0.1:" + port);
        c.put("ssl.truststore.type", "PEM");
        c.put("ssl.truststore.location", certs.resolve("ca.pem").toString());
        return c;
    }

    static Map<String, Object> sasl(String mechanism, String password) {
        Map<String, Object> c = tls(saslSslPort);
        c.put("security.protocol", "SASL_SSL");
        c.put("sasl.mechanism", mechanism);
        String module = mechanism.equals("PLAIN")
                ? "org.apache.kafka.common.security.plain.PlainLoginModule"
                : "org.apache.kafka.common.security.scram.ScramLoginModule";
        c.put("sasl.jaas.config", module + " required username=\"alice\" password=\"" + password + "\";");
        return c;
    }

    static void roundTrip(Map<String, Object> cfg) throws Exception {
        String topic = Util.unique("sec");
        try (KafkaProducer<String, String> p = Util.producer(b, cfg)) {
            for (int i = 0; i < 10; i++) {
                p.send(new ProducerRecord<>(topic, "k", "v" + i)).get(20, TimeUnit.SECONDS);
            }
        }
        List<String> got = new ArrayList<>();
        try (KafkaConsumer<String, String> c = Util.consumer(b, Util.unique("g"), cfg)) {
            c.subscribe(List.of(topic));
            long deadline = System.nanoTime() + Duration.ofSeconds(30).toNanos();
            while (got.size() < 10 && System.nanoTime() < deadline) {
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(500))) {
                    got.add(r.value());
                }
            }
        }
        assertEquals(10, got.size(), "consumed " + got);
        assertEquals("v0", got.get(0));
    }

    @Test
    void mutualTls() throws Exception {
        Map<String, Object> c = tls(sslPort);
        c.put("security.protocol", "SSL");
        c.put("ssl.keystore.type", "PEM");
        c.put("ssl.keystore.location", certs.resolve("alice-keystore.pem").toString());
        roundTrip(c);
    }

    @Test
    void saslSslWithEachMechanism() throws Exception {
        for (String m : List.of("SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN")) {
            roundTrip(sasl(m, "alice-secret"));
        }
    }

    @Test
    void aWrongPasswordIsASaslAuthenticationException() {
        Map<String, Object> cfg = sasl("SCRAM-SHA-512", "wrong");
        try (KafkaProducer<String, String> p = Util.producer(b, cfg)) {
            ExecutionException e = assertThrows(ExecutionException.class,
                    () -> p.send(new ProducerRecord<>(Util.unique("x"), "v")).get(20, TimeUnit.SECONDS));
            assertTrue(e.getCause() instanceof SaslAuthenticationException, e.getCause().toString());
        }
    }
}
