package io.streamforge.it;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Collectors;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartitionInfo;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.ExtendWith;

/**
 * KIP-966's eligible leader replicas as Kafka 4's tools show them, from a three-broker cluster
 * after broker 3 stops: DescribeTopicPartitions answers each broker's metadata image, so
 * `Admin.describeTopics` and `kafka-topics --describe` print the ELR the controller wrote.
 * <ul>
 * <li>RF 3 with `min.insync.replicas=3`: broker 3 leaves the ISR, which is then below min ISR,
 * so broker 3 joins the ELR (it holds every acks=all record);
 * <li>RF 1 on broker 3: its last ISR member is fenced, the ISR becomes empty, broker 3 is in the
 * ELR and is the last known leader; no leader.
 * </ul>
 */
@ExtendWith(KnownGaps.class)
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class ElrClusterTest {
    private static final String TOPICS = "org.apache.kafka.tools.TopicCommand";

    private static List<Integer> ids(List<Node> nodes) {
        return nodes == null ? null : nodes.stream().map(Node::id).toList();
    }

    private static Map<String, TopicDescription> describe(Admin admin, List<String> topics) {
        try {
            return admin.describeTopics(topics).allTopicNames().get(10, TimeUnit.SECONDS);
        } catch (Exception e) {
            throw new AssertionError(e);
        }
    }

    /** (isr, elr, last known elr) of every partition of `topic`, as the Admin client sees them. */
    private static Map<Integer, List<Set<Integer>>> elrState(Admin admin, String topic) {
        Map<Integer, List<Set<Integer>>> out = new HashMap<>();
        for (TopicPartitionInfo p : describe(admin, List.of(topic)).get(topic).partitions()) {
            out.put(p.partition(), List.of(Set.copyOf(ids(p.isr())), Set.copyOf(ids(p.elr())),
                    Set.copyOf(ids(p.lastKnownElr()))));
        }
        return out;
    }

    @Test
    void stoppedBrokersShowInTheElrOfDescribeTopicPartitions() {
        List<Broker> brokers = Broker.cluster(3);
        String bootstrap = brokers.get(0).bootstrap() + "," + brokers.get(1).bootstrap();
        Admin admin = Admin.create(Map.of(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap));
        try {
            String replicated = Util.unique("elr-rf3");
            String solo = Util.unique("elr-solo");
            admin.createTopics(List.of(
                    new NewTopic(replicated, 2, (short) 3).configs(Map.of("min.insync.replicas", "3")),
                    new NewTopic(solo, Map.of(0, List.of(3))))).all().get(30, TimeUnit.SECONDS);
            Set<Integer> all = Set.of(1, 2, 3);
            Util.waitUntil("full ISRs", Duration.ofSeconds(30), () -> quietly(() ->
                    elrState(admin, replicated).values().stream().allMatch(s -> s.get(0).equals(all))
                            && elrState(admin, solo).get(0).get(0).equals(Set.of(3))));
            elrState(admin, replicated).values().forEach(s -> assertEquals(Set.of(), s.get(1)));

            brokers.get(2).close();

            List<Set<Integer>> rf3 = List.of(Set.of(1, 2), Set.of(3), Set.of());
            List<Set<Integer>> alone = List.of(Set.of(), Set.of(3), Set.of(3));
            Util.waitUntil("broker 3 in the ELR", Duration.ofSeconds(30), () -> quietly(() ->
                    elrState(admin, replicated).values().stream().allMatch(rf3::equals)
                            && elrState(admin, solo).get(0).equals(alone)));
            TopicPartitionInfo leaderless = describe(admin, List.of(solo)).get(solo).partitions().get(0);
            assertNull(leaderless.leader(), leaderless.toString());
            assertEquals(List.of(3), ids(leaderless.replicas()));

            // Each remaining broker answers from its own image: kafka-topics through either one
            // prints the same ELR (only DescribeTopicPartitions carries these columns).
            Pattern row = Pattern.compile("\\tTopic: (\\S+)\\tPartition: (\\d+)\\tLeader: (\\S+)"
                    + "\\tReplicas: ([\\d,]+)\\tIsr: ([\\d,]*)\\tElr: ([\\d,]*)\\tLastKnownElr: ([\\d,]*)");
            for (Broker b : brokers.subList(0, 2)) {
                String out = Tool.ok(TOPICS, null, "--bootstrap-server", b.bootstrap(), "--describe",
                        "--topic", replicated + "," + solo).out();
                Map<String, List<String>> rows = out.lines().filter(l -> l.contains("\tPartition: "))
                        .collect(Collectors.toMap(l -> l.split("\t")[1] + "/" + l.split("\t")[2], l -> {
                            Matcher m = row.matcher(l);
                            assertTrue(m.matches(), l);
                            return List.of(m.group(3), sorted(m.group(5)), m.group(6), m.group(7));
                        }));
                assertEquals(3, rows.size(), out);
                for (int p = 0; p < 2; p++) {
                    List<String> r = rows.get("Topic: " + replicated + "/Partition: " + p);
                    assertTrue(r.get(0).equals("1") || r.get(0).equals("2"), out);
                    assertEquals(List.of("1,2", "3", ""), r.subList(1, 4), out);
                }
                assertEquals(List.of("none", "", "3", "3"), rows.get("Topic: " + solo + "/Partition: 0"), out);
            }
        } catch (Exception e) {
            throw new AssertionError(e + "\n" + brokers.get(0).logTail(), e);
        } finally {
            admin.close();
            brokers.forEach(Broker::close);
        }
    }

    /** `cond`, or false while the cluster cannot answer yet. */
    private static boolean quietly(java.util.function.BooleanSupplier cond) {
        try {
            return cond.getAsBoolean();
        } catch (AssertionError | RuntimeException e) {
            return false;
        }
    }

    private static String sorted(String ids) {
        return ids.isEmpty() ? ids
                : java.util.Arrays.stream(ids.split(",")).sorted().collect(Collectors.joining(","));
    }
}
