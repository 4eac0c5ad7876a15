package io.streamforge.it;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.DescribeTopicsOptions;
import org.apache.kafka.clients.admin.ScramCredentialInfo;
import org.apache.kafka.clients.admin.ScramMechanism;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.admin.UserScramCredentialUpsertion;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.acl.AccessControlEntry;
import org.apache.kafka.common.acl.AccessControlEntryFilter;
import org.apache.kafka.common.acl.AclBinding;
import org.apache.kafka.common.acl.AclBindingFilter;
import org.apache.kafka.common.acl.AclOperation;
import org.apache.kafka.common.acl.AclPermissionType;
import org.apache.kafka.common.errors.ClusterAuthorizationException;
import org.apache.kafka.common.errors.GroupAuthorizationException;
import org.apache.kafka.common.errors.TopicAuthorizationException;
import org.apache.kafka.common.resource.PatternType;
import org.apache.kafka.common.resource.ResourcePattern;
import org.apache.kafka.common.resource.ResourcePatternFilter;
import org.apache.kafka.common.resource.ResourceType;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * ACLs with `--authorizer acl`: Kafka's AclCommand (kafka-acls.sh) adds, lists and removes them;
 * the Java admin creates, describes and deletes them; a SCRAM user's producer, consumer and admin
 * are refused with TopicAuthorizationException, GroupAuthorizationException and
 * ClusterAuthorizationException until an ACL allows them. PLAINTEXT (User:ANONYMOUS) and
 * User:admin are super users.
 */
@Timeout(value = 180, unit = TimeUnit.SECONDS)
class AclTest {
    static final String ACLS = "org.apache.kafka.tools.AclCommand";
    static Broker b;
    static int saslPort;

    @BeforeAll
    static void start() throws Exception {
        saslPort = Broker.freePort();
        b = Broker.start("--listeners",
                "PLAINTEXT://127.0.0.1:{port},SASL_PLAINTEXT://127.0.0.1:" + saslPort,
                "--authorizer", "acl", "--super-users", "User:admin;User:ANONYMOUS");
        try (Admin a = Util.admin(b)) {
            a.alterUserScramCredentials(List.of(
                    new UserScramCredentialUpsertion("alice",
                            new ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), "alice-secret")))
                    .all().get(20, TimeUnit.SECONDS);
        }
    }

    @AfterAll
    static void stop() {
        if (b != null) {
            b.close();
        }
    }

    static Map<String, Object> alice() {
        Map<String, Object> c = new HashMap<>();
        c.put("bootstrap.servers", "127.0.0.1:" + saslPort);
        c.put("security.protocol", "SASL_PLAINTEXT");
        c.put("sasl.mechanism", "SCRAM-SHA-256");
        c.put("sasl.jaas.config", "org.apache.kafka.common.security.scram.ScramLoginModule required "
                + "username=\"alice\" password=\"alice-secret\";");
        return c;
    }

    static Admin aliceAdmin() {
        Map<String, Object> c = alice();
        c.put("default.api.timeout.ms", "20000");
        c.put("request.timeout.ms", "10000");
        return Admin.create(c);
    }

    static AclBindingFilter byTopic(String topic) {
        return new AclBindingFilter(new ResourcePatternFilter(ResourceType.TOPIC, topic, PatternType.ANY),
                AccessControlEntryFilter.ANY);
    }

    static Collection<AclBinding> describe(Admin a, AclBindingFilter f) throws Exception {
        return a.describeAcls(f).values().get(20, TimeUnit.SECONDS);
    }

    @Test
    void kafkaAclsAddsListsAndRemoves() throws Exception {
        String topic = Util.unique("tool");
        Tool.ok(ACLS, null, "--bootstrap-server", b.bootstrap(), "--add",
                "--allow-principal", "User:alice", "--operation", "Read", "--operation", "Describe",
                "--topic", topic, "--group", "g-" + topic);
        String listed = Tool.ok(ACLS, null, "--bootstrap-server", b.bootstrap(), "--list",
                "--topic", topic).out();
        assertTrue(listed.contains("principal=User:alice") && listed.contains("operation=READ"), listed);
        try (Admin a = Util.admin(b)) {
            assertEquals(2, describe(a, byTopic(topic)).size());
            Tool.ok(ACLS, null, "--bootstrap-server", b.bootstrap(), "--remove", "--force",
                    "--topic", topic);
            assertEquals(0, describe(a, byTopic(topic)).size());
        }
    }

    @Test
    void adminCreatesDescribesAndDeletes() throws Exception {
        String prefix = Util.unique("pre");
        AclBinding binding = new AclBinding(new ResourcePattern(ResourceType.TOPIC, prefix, PatternType.PREFIXED),
                new AccessControlEntry("User:alice", "*", AclOperation.WRITE, AclPermissionType.ALLOW));
        try (Admin a = Util.admin(b)) {
            a.createAcls(List.of(binding)).all().get(20, TimeUnit.SECONDS);
            AclBindingFilter match = new AclBindingFilter(
                    new ResourcePatternFilter(ResourceType.TOPIC, prefix + "-x", PatternType.MATCH),
                    AccessControlEntryFilter.ANY);
            assertEquals(List.of(binding), List.copyOf(describe(a, match)));
            Collection<AclBinding> deleted = a.deleteAcls(List.of(binding.toFilter())).all()
                    .get(20, TimeUnit.SECONDS);
            assertEquals(List.of(binding), List.copyOf(deleted));
        }
    }

    /**
     * DescribeTopicPartitions (what `Admin.describeTopics` sends) checks DESCRIBE per topic: a
     * named topic without it is TOPIC_AUTHORIZATION_FAILED, and the authorized operations of the
     * others are the principal's own (KIP-430).
     */
    @Test
    void aliceDescribesOnlyTheTopicsSheMayDescribe() throws Exception {
        String allowed = Util.unique("visible");
        String denied = Util.unique("hidden");
        Util.createTopic(b, allowed, 3);
        Util.createTopic(b, denied, 1);
        try (Admin a = Util.admin(b)) {
            a.createAcls(List.of(new AclBinding(
                    new ResourcePattern(ResourceType.TOPIC, allowed, PatternType.LITERAL),
                    new AccessControlEntry("User:alice", "*", AclOperation.DESCRIBE, AclPermissionType.ALLOW))))
                    .all().get(20, TimeUnit.SECONDS);
        }
        try (Admin a = aliceAdmin()) {
            var described = a.describeTopics(List.of(allowed, denied),
                    new DescribeTopicsOptions().includeAuthorizedOperations(true)).topicNameValues();
            TopicDescription d = described.get(allowed).get(20, TimeUnit.SECONDS);
            assertEquals(3, d.partitions().size());
            assertEquals(Set.of(AclOperation.DESCRIBE), d.authorizedOperations());
            d.partitions().forEach(p -> assertEquals(List.of(), p.elr()));
            ExecutionException e = assertThrows(ExecutionException.class,
                    () -> described.get(denied).get(20, TimeUnit.SECONDS));
            assertInstanceOf(TopicAuthorizationException.class, e.getCause());
        }
    }

    @Test
    void aliceIsRefusedUntilAllowed() throws Exception {
        String topic = Util.unique("deny");
        String group = Util.unique("g");
        Util.createTopic(b, topic, 1);
        // Admin: DescribeAcls needs DESCRIBE on the cluster.
        try (Admin a = aliceAdmin()) {
            ExecutionException e = assertThrows(ExecutionException.class, () -> describe(a, AclBindingFilter.ANY));
            assertInstanceOf(ClusterAuthorizationException.class, e.getCause());
        }
        Map<String, Object> cfg = alice();
        cfg.put("enable.idempotence", "false");
        try (KafkaProducer<String, String> p = Util.producer(b, cfg)) {
            ExecutionException e = assertThrows(ExecutionException.class,
                    () -> p.send(new ProducerRecord<>(topic, "k", "v")).get(30, TimeUnit.SECONDS));
            assertInstanceOf(TopicAuthorizationException.class, e.getCause());
        }
        try (Admin a = Util.admin(b)) {
            a.createAcls(List.of(
                    new AclBinding(new ResourcePattern(ResourceType.TOPIC, topic, PatternType.LITERAL),
                            new AccessControlEntry("User:alice", "*", AclOperation.ALL, AclPermissionType.ALLOW))))
                    .all().get(20, TimeUnit.SECONDS);
        }
        try (KafkaProducer<String, String> p = Util.producer(b, cfg)) {
            p.send(new ProducerRecord<>(topic, "k", "v")).get(30, TimeUnit.SECONDS);
        }
        try (KafkaConsumer<String, String> c = Util.consumer(b, group, alice())) {
            c.subscribe(List.of(topic));
            assertThrows(GroupAuthorizationException.class, () -> {
                long deadline = System.nanoTime() + Duration.ofSeconds(30).toNanos();
                while (System.nanoTime() < deadline) {
                    c.poll(Duration.ofMillis(500));
                }
            });
        }
    }
}
