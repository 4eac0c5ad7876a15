package io.streamforge.it;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.ExtendWith;

/** Kafka's own command-line tools (4.x main classes) against StreamForge. */
@ExtendWith(KnownGaps.class)
@Timeout(value = 240, unit = TimeUnit.SECONDS)
class ToolsTest {
    static final Broker B = Broker.shared();
    static final String BS = B.bootstrap();

    static final String TOPICS = "org.apache.kafka.tools.TopicCommand";
    static final String CONFIGS = "kafka.admin.ConfigCommand";
    static final String GROUPS = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand";
    static final String CONSOLE_PRODUCER = "org.apache.kafka.tools.ConsoleProducer";
    static final String CONSOLE_CONSUMER = "org.apache.kafka.tools.consumer.ConsoleConsumer";
    static final String DELETE_RECORDS = "org.apache.kafka.tools.DeleteRecordsCommand";
    static final String GET_OFFSETS = "org.apache.kafka.tools.GetOffsetShell";
    static final String API_VERSIONS = "org.apache.kafka.tools.BrokerApiVersionsCommand";
    static final String LOG_DIRS = "org.apache.kafka.tools.LogDirsCommand";
    static final String VERIFIABLE_PRODUCER = "org.apache.kafka.tools.VerifiableProducer";
    static final String VERIFIABLE_CONSUMER = "org.apache.kafka.tools.VerifiableConsumer";
    static final String PRODUCER_PERF = "org.apache.kafka.tools.ProducerPerformance";
    static final String CONSUMER_PERF = "org.apache.kafka.tools.ConsumerPerformance";
    static final String METADATA_QUORUM = "org.apache.kafka.tools.MetadataQuorumCommand";
    static final String LEADER_ELECTION = "org.apache.kafka.tools.LeaderElectionCommand";

    @Test
    void topicsCommand() {
        String t = Util.unique("cli-topic");
        Tool.ok(TOPICS, null, "--bootstrap-server", BS, "--create", "--topic", t, "--partitions", "3",
                "--replication-factor", "1", "--config", "retention.ms=7200000");
        assertTrue(Tool.ok(TOPICS, null, "--bootstrap-server", BS, "--list").out().lines().anyMatch(t::equals));
        Tool.ok(TOPICS, null, "--bootstrap-server", BS, "--alter", "--topic", t, "--partitions", "5");
        String d = Tool.ok(TOPICS, null, "--bootstrap-server", BS, "--describe", "--topic", t).out();
        assertTrue(d.contains("PartitionCount: 5"), d);
        assertTrue(d.contains("retention.ms=7200000"), d);
        assertEquals(5, d.lines().filter(l -> l.contains("Leader: ")).count(), d);
        Tool.ok(TOPICS, null, "--bootstrap-server", BS, "--delete", "--topic", t);
        Util.waitUntil("topic deleted", java.time.Duration.ofSeconds(20), () ->
                Tool.ok(TOPICS, null, "--bootstrap-server", BS, "--list").out().lines().noneMatch(t::equals));
    }

    /**
     * `kafka-topics --describe` (4.x) asks DescribeTopicPartitions when the broker advertises it,
     * here two partitions a page (the cursor walks the topic), and prints the ELR columns only
     * from that API: over Metadata they read `Elr: N/A\tLastKnownElr: N/A`.
     */
    @Test
    void topicsDescribeUsesDescribeTopicPartitions() {
        String t = Util.unique("dtp-topic");
        Tool.ok(TOPICS, null, "--bootstrap-server", BS, "--create", "--topic", t, "--partitions", "5",
                "--replication-factor", "1");
        String d = Tool.ok(TOPICS, null, "--bootstrap-server", BS, "--describe", "--topic", t,
                "--partition-size-limit-per-response", "2").out();
        assertTrue(d.contains("PartitionCount: 5"), d);
        assertFalse(d.contains("N/A"), d);
        Pattern row = Pattern.compile("\\tTopic: (\\S+)\\tPartition: (\\d+)\\tLeader: (\\d+)"
                + "\\tReplicas: (\\d+)\\tIsr: (\\d+)\\tElr: \\tLastKnownElr: ");
        List<String> rows = d.lines().filter(l -> l.contains("\tPartition: ")).toList();
        assertEquals(5, rows.size(), d);
        for (int p = 0; p < rows.size(); p++) {
            Matcher m = row.matcher(rows.get(p));
            assertTrue(m.matches(), rows.get(p));
            assertEquals(t, m.group(1));
            assertEquals(String.valueOf(p), m.group(2));
            // One broker: it leads, and is the only replica and ISR member.
            assertEquals(m.group(3), m.group(4), rows.get(p));
            assertEquals(m.group(3), m.group(5), rows.get(p));
        }
    }

    @Test
    void configsCommand() {
        String t = Util.unique("cli-cfg");
        Util.createTopic(B, t, 1);
        Tool.ok(CONFIGS, null, "--bootstrap-server", BS, "--entity-type", "topics", "--entity-name", t,
                "--alter", "--add-config", "retention.ms=1234567,max.message.bytes=65536");
        String d = Tool.ok(CONFIGS, null, "--bootstrap-server", BS, "--entity-type", "topics", "--entity-name", t,
                "--describe").out();
        assertTrue(d.contains("retention.ms=1234567") && d.contains("max.message.bytes=65536"), d);
        Tool.ok(CONFIGS, null, "--bootstrap-server", BS, "--entity-type", "topics", "--entity-name", t,
                "--alter", "--delete-config", "retention.ms");
        d = Tool.ok(CONFIGS, null, "--bootstrap-server", BS, "--entity-type", "topics", "--entity-name", t,
                "--describe").out();
        assertTrue(!d.contains("retention.ms=1234567") && d.contains("max.message.bytes=65536"), d);
    }

    @Test
    void consoleProducerConsumerAndConsumerGroups() {
        String t = Util.unique("cli-console");
        String g = Util.unique("cli-g");
        Util.createTopic(B, t, 2);
        StringBuilder in = new StringBuilder();
        for (int i = 0; i < 10; i++) {
            in.append("k").append(i).append(':').append("line-").append(i).append('\n');
        }
        Tool.ok(CONSOLE_PRODUCER, in.toString(), "--bootstrap-server", BS, "--topic", t,
                "--property", "parse.key=true", "--property", "key.separator=:");
        Tool.Result c = Tool.ok(CONSOLE_CONSUMER, null, "--bootstrap-server", BS, "--topic", t, "--group", g,
                "--from-beginning", "--max-messages", "10", "--timeout-ms", "30000",
                "--property", "print.key=true", "--property", "key.separator=:");
        Set<String> lines = new HashSet<>(c.out().lines().toList());
        for (int i = 0; i < 10; i++) {
            assertTrue(lines.contains("k" + i + ":line-" + i), c.toString());
        }
        // Five more: the group (offsets committed by the console consumer on exit) lags by 5.
        Tool.ok(CONSOLE_PRODUCER, "a\nb\nc\nd\ne\n", "--bootstrap-server", BS, "--topic", t);
        assertTrue(Tool.ok(GROUPS, null, "--bootstrap-server", BS, "--list").out().lines().anyMatch(g::equals));
        String d = Tool.ok(GROUPS, null, "--bootstrap-server", BS, "--describe", "--group", g).out();
        assertEquals(5, lagSum(d, t), d);

        String reset = Tool.ok(GROUPS, null, "--bootstrap-server", BS, "--reset-offsets", "--group", g,
                "--topic", t, "--to-earliest", "--execute").out();
        assertTrue(reset.contains(t), reset);
        d = Tool.ok(GROUPS, null, "--bootstrap-server", BS, "--describe", "--group", g).out();
        assertEquals(15, lagSum(d, t), d);

        Tool.ok(GROUPS, null, "--bootstrap-server", BS, "--delete", "--group", g);
        assertTrue(Tool.ok(GROUPS, null, "--bootstrap-server", BS, "--list").out().lines().noneMatch(g::equals));
    }

    /** Sums the LAG column of `kafka-consumer-groups --describe` rows for `topic`. */
    static long lagSum(String describe, String topic) {
        List<String> rows = describe.lines().filter(l -> l.trim().split("\\s+").length > 5).toList();
        String[] header = rows.stream().filter(l -> l.contains("LAG")).findFirst().orElseThrow().trim().split("\\s+");
        int lag = List.of(header).indexOf("LAG");
        int top = List.of(header).indexOf("TOPIC");
        return rows.stream().map(l -> l.trim().split("\\s+")).filter(f -> f[top].equals(topic))
                .mapToLong(f -> Long.parseLong(f[lag])).sum();
    }

    @Test
    void deleteRecordsAndGetOffsets() throws Exception {
        String t = Util.unique("cli-del");
        Util.createTopic(B, t, 1);
        // Distinct, increasing timestamps, so max-timestamp names one record (offset 5).
        long base = System.currentTimeMillis() - 60_000;
        try (var p = Util.producer(B, Map.of())) {
            for (int i = 0; i < 6; i++) {
                p.send(new org.apache.kafka.clients.producer.ProducerRecord<>(t, 0, base + 1000L * i, "k", "v" + i));
            }
        }
        assertEquals(t + ":0:6", Tool.ok(GET_OFFSETS, null, "--bootstrap-server", BS, "--topic", t,
                "--time", "-1").out().strip());
        Path json = Files.createTempFile("delete-records", ".json");
        Files.writeString(json, "{\"version\":1,\"partitions\":[{\"topic\":\"" + t + "\",\"partition\":0,\"offset\":4}]}");
        String out = Tool.ok(DELETE_RECORDS, null, "--bootstrap-server", BS, "--offset-json-file", json.toString()).out();
        assertTrue(out.contains("low_watermark: 4"), out);
        assertEquals(t + ":0:4", Tool.ok(GET_OFFSETS, null, "--bootstrap-server", BS, "--topic", t,
                "--time", "earliest").out().strip());
        assertEquals(t + ":0:5", Tool.ok(GET_OFFSETS, null, "--bootstrap-server", BS, "--topic", t,
                "--time", "max-timestamp").out().strip());
        Files.delete(json);
    }

    @Test
    void brokerApiVersions() {
        String out = Tool.ok(API_VERSIONS, null, "--bootstrap-server", BS).out();
        // Produce v12: transaction.version 2 (KIP-890 part 2) is served.
        assertTrue(out.contains("Produce(0): 0 to 12 [usable: 12]"), out);
        assertTrue(out.contains("Fetch(1): 4 to 15 [usable: 15]"), out);
        assertTrue(out.contains("DescribeLogDirs(35): 1 to 4 [usable: 4]"), out);
        assertTrue(out.contains("DescribeTopicPartitions(75): 0 [usable: 0]"), out);
    }

    @Test
    void metadataQuorumCommand() {
        // kafka-metadata-quorum describe (DescribeQuorum): a one-voter quorum led by this broker.
        String status = Tool.ok(METADATA_QUORUM, null, "--bootstrap-server", BS, "describe", "--status").out();
        assertTrue(status.matches("(?s).*LeaderId:\\s+1\\b.*"), status);
        assertTrue(status.matches("(?s).*HighWatermark:\\s+[1-9]\\d*.*"), status);
        assertTrue(status.matches("(?s).*MaxFollowerLag:\\s+0\\b.*"), status);
        assertTrue(status.matches("(?s).*CurrentVoters:\\s+\\[\\{\"id\": 1\\b.*"), status);
        String replication = Tool.ok(METADATA_QUORUM, null, "--bootstrap-server", BS, "describe", "--replication")
                .out();
        assertTrue(replication.lines().anyMatch(l -> l.matches("^1\\s.*Leader\\s*$")), replication);
    }

    @Test
    void leaderElectionCommand() {
        // kafka-leader-election (ElectLeaders): on one broker every partition is led by its
        // preferred replica. Asked for all partitions, Kafka 4 leaves those out of the answer,
        // so the tool has nothing to print and exits 0.
        String t = Util.unique("cli-election");
        Util.createTopic(B, t, 2);
        Tool.Result all = Tool.ok(LEADER_ELECTION, null, "--bootstrap-server", BS,
                "--election-type", "preferred", "--all-topic-partitions");
        assertFalse(all.out().contains("Error"), all.toString());
        // Named partitions are each answered: ELECTION_NOT_NEEDED is "Valid replica already elected".
        String preferred = Tool.ok(LEADER_ELECTION, null, "--bootstrap-server", BS,
                "--election-type", "preferred", "--topic", t, "--partition", "0").out();
        assertTrue(preferred.contains("Valid replica already elected for partitions " + t + "-0"), preferred);
        // Unclean: the partition has a leader, nothing to do either.
        String unclean = Tool.ok(LEADER_ELECTION, null, "--bootstrap-server", BS,
                "--election-type", "unclean", "--topic", t, "--partition", "1").out();
        assertTrue(unclean.contains("Valid replica already elected for partitions " + t + "-1"), unclean);
        // A partition that does not exist fails the tool with Kafka's error.
        Tool.Result unknown = Tool.run(LEADER_ELECTION, null, "--bootstrap-server", BS,
                "--election-type", "preferred", "--topic", t, "--partition", "7");
        assertEquals(1, unknown.exit(), unknown.toString());
        assertTrue((unknown.out() + unknown.err()).contains("UnknownTopicOrPartitionException"), unknown.toString());
    }

    @Test
    void logDirsCommand() {
        // kafka-log-dirs --describe: the one log dir (the data dir) with each partition's size.
        String t = Util.unique("cli-logdirs");
        Util.createTopic(B, t, 2);
        Tool.ok(CONSOLE_PRODUCER, "a\nb\nc\n", "--bootstrap-server", BS, "--topic", t,
                "--property", "partitioner.class=org.apache.kafka.clients.producer.RoundRobinPartitioner");
        String out = Tool.ok(LOG_DIRS, null, "--bootstrap-server", BS, "--describe", "--topic-list", t).out();
        assertTrue(out.contains("\"logDir\":\"/"), out);
        assertTrue(out.contains("\"error\":null"), out);
        Matcher m = Pattern.compile("\"partition\":\"" + Pattern.quote(t) + "-(\\d)\",\"size\":(\\d+),"
                + "\"offsetLag\":0,\"isFuture\":false").matcher(out);
        Map<String, Long> sizes = new HashMap<>();
        while (m.find()) {
            sizes.put(m.group(1), Long.parseLong(m.group(2)));
        }
        assertEquals(Set.of("0", "1"), sizes.keySet(), out);
        assertTrue(sizes.values().stream().mapToLong(Long::longValue).sum() > 0, out);
    }

    @Test
    void verifiableProducerAndConsumer() {
        String t = Util.unique("cli-verifiable");
        Util.createTopic(B, t, 3);
        int n = 3000;
        String prod = Tool.ok(VERIFIABLE_PRODUCER, null, "--bootstrap-server", BS, "--topic", t,
                "--max-messages", String.valueOf(n), "--acks", "-1").out();
        Map<Integer, Set<Long>> acked = new HashMap<>();
        Pattern partition = Pattern.compile("\"partition\":(\\d+)");
        Pattern offset = Pattern.compile("\"offset\":(\\d+)");
        for (String line : prod.lines().filter(l -> l.contains("\"producer_send_success\"")).toList()) {
            Matcher pm = partition.matcher(line);
            Matcher om = offset.matcher(line);
            assertTrue(pm.find() && om.find(), line);
            acked.computeIfAbsent(Integer.parseInt(pm.group(1)), k -> new HashSet<>()).add(Long.parseLong(om.group(1)));
        }
        assertEquals(n, acked.values().stream().mapToInt(Set::size).sum(), "every message acknowledged: " + prod.lines().limit(5).toList());
        assertTrue(prod.contains("\"acked\":" + n), prod.lines().skip(Math.max(0, prod.lines().count() - 3)).toList().toString());

        String cons = Tool.ok(VERIFIABLE_CONSUMER, null, "--bootstrap-server", BS, "--topic", t,
                "--group-id", Util.unique("vg"), "--max-messages", String.valueOf(n), "--reset-policy", "earliest",
                "--group-protocol", "classic").out();
        Map<Integer, Set<Long>> consumed = new HashMap<>();
        Pattern range = Pattern.compile("\\{\"topic\":\"[^\"]+\",\"partition\":(\\d+),\"count\":\\d+,\"minOffset\":(\\d+),\"maxOffset\":(\\d+)\\}");
        for (String line : cons.lines().filter(l -> l.contains("\"records_consumed\"")).toList()) {
            Matcher m = range.matcher(line);
            while (m.find()) {
                Set<Long> s = consumed.computeIfAbsent(Integer.parseInt(m.group(1)), k -> new HashSet<>());
                for (long o = Long.parseLong(m.group(2)); o <= Long.parseLong(m.group(3)); o++) {
                    s.add(o);
                }
            }
        }
        for (Map.Entry<Integer, Set<Long>> e : acked.entrySet()) {
            Set<Long> missing = new HashSet<>(e.getValue());
            missing.removeAll(consumed.getOrDefault(e.getKey(), Set.of()));
            assertTrue(missing.isEmpty(), "partition " + e.getKey() + ": acknowledged but not consumed: " + missing);
        }
    }

    @Test
    void producerAndConsumerPerfTest() {
        String t = Util.unique("cli-perf");
        Util.createTopic(B, t, 3);
        String p = Tool.ok(PRODUCER_PERF, null, "--topic", t, "--num-records", "20000", "--record-size", "100",
                "--throughput", "-1", "--producer-props", "bootstrap.servers=" + BS, "acks=all").out();
        assertTrue(p.contains("20000 records sent"), p);
        String c = Tool.ok(CONSUMER_PERF, null, "--bootstrap-server", BS, "--topic", t, "--messages", "20000",
                "--timeout", "30000").out();
        // CSV: start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, ...
        String[] row = c.lines().filter(l -> !l.startsWith("start.time") && l.contains(",")).reduce((a, b) -> b)
                .orElseThrow().split(",\\s*");
        assertEquals(20000, Long.parseLong(row[4].trim()), c);
    }
}
