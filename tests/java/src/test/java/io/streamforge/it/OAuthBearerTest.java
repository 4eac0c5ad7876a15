package io.streamforge.it;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.math.BigInteger;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.KeyPair;
import java.security.KeyPairGenerator;
import java.security.Signature;
import java.security.interfaces.RSAPublicKey;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Base64;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
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
 * The Java client with SASL/OAUTHBEARER over SASL_PLAINTEXT: a login callback handler
 * ({@link OAuthTokenHandler}) supplies RS256 JWTs signed here with a throw-away key; the broker
 * checks them against a JWKS file. An expired token and a badly signed one are
 * SaslAuthenticationExceptions (after the broker's invalid_token challenge).
 */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class OAuthBearerTest {
    static final String ISSUER = "https://idp.streamforge.test";
    static Broker b;
    static int saslPort;
    static KeyPair key;

    @BeforeAll
    static void start() throws Exception {
        key = rsaKey();
        Path dir = Files.createTempDirectory("sf-oauth-");
        Path jwks = dir.resolve("jwks.json");
        RSAPublicKey pub = (RSAPublicKey) key.getPublic();
        Files.writeString(jwks, "{\"keys\":[{\"kty\":\"RSA\",\"alg\":\"RS256\",\"kid\":\"java-1\",\"n\":\""
                + b64(unsigned(pub.getModulus())) + "\",\"e\":\"" + b64(unsigned(pub.getPublicExponent())) + "\"}]}");
        saslPort = Broker.freePort();
        b = Broker.start("--listeners", "PLAINTEXT://127.0.0.1:{port},SASL_PLAINTEXT://127.0.0.1:" + saslPort,
                "--sasl-mechanisms", "OAUTHBEARER",
                "--sasl-oauthbearer-jwks-endpoint-url", jwks.toUri().toString(),
                "--sasl-oauthbearer-expected-issuer", ISSUER,
                "--sasl-oauthbearer-expected-audience", "kafka");
    }

    @AfterAll
    static void stop() {
        if (b != null) {
            b.close();
        }
    }

    static KeyPair rsaKey() throws Exception {
        KeyPairGenerator g = KeyPairGenerator.getInstance("RSA");
        g.initialize(2048);
        return g.generateKeyPair();
    }

    static byte[] unsigned(BigInteger n) {
        byte[] bytes = n.toByteArray();
        return bytes[0] == 0 ? java.util.Arrays.copyOfRange(bytes, 1, bytes.length) : bytes;
    }

    static String b64(byte[] data) {
        return Base64.getUrlEncoder().withoutPadding().encodeToString(data);
    }

    static String jwt(KeyPair signer, String sub, long lifetimeS) throws Exception {
        long now = System.currentTimeMillis() / 1000;
        String header = b64("{\"alg\":\"RS256\",\"typ\":\"JWT\",\"kid\":\"java-1\"}".getBytes(StandardCharsets.UTF_8));
        String claims = b64(("{\"sub\":\"" + sub + "\",\"iss\":\"" + ISSUER + "\",\"aud\":\"kafka\",\"iat\":" + now
                + ",\"exp\":" + (now + lifetimeS) + "}").getBytes(StandardCharsets.UTF_8));
        Signature s = Signature.getInstance("SHA256withRSA");
        s.initSign(signer.getPrivate());
        s.update((header + "." + claims).getBytes(StandardCharsets.UTF_8));
        return header + "." + claims + "." + b64(s.sign());
    }

    static Map<String, Object> oauth(String token) {
        Map<String, Object> c = new HashMap<>();
        c.put("bootstrap.servers", "127.0.0.1:" + saslPort);
        c.put("security.protocol", "SASL_PLAINTEXT");
        c.put("sasl.mechanism", "OAUTHBEARER");
        c.put("sasl.login.callback.handler.class", OAuthTokenHandler.class.getName());
        c.put("sasl.jaas.config",
                "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required token=\"" + token + "\";");
        return c;
    }

    @Test
    void aSignedTokenProducesAndConsumes() throws Exception {
        Map<String, Object> cfg = oauth(jwt(key, "java-user", 300));
        String topic = Util.unique("oauth");
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
    }

    @Test
    void expiredAndBadlySignedTokensAreSaslAuthenticationExceptions() throws Exception {
        for (String token : List.of(jwt(key, "late", -120), jwt(rsaKey(), "mallory", 300))) {
            try (KafkaProducer<String, String> p = Util.producer(b, oauth(token))) {
                ExecutionException e = assertThrows(ExecutionException.class,
                        () -> p.send(new ProducerRecord<>(Util.unique("x"), "v")).get(20, TimeUnit.SECONDS));
                assertTrue(e.getCause() instanceof SaslAuthenticationException, e.getCause().toString());
                assertTrue(e.getCause().getMessage().contains("invalid_token"), e.getCause().getMessage());
            }
        }
    }
}
