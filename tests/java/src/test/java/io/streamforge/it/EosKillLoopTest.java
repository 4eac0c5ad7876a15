package io.streamforge.it;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.ListConsumerGroupOffsetsOptions;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.ExtendWith;

/**
 * Exactly once under kill -9 with the Java client (the Python loops' counterpart,
 * tests/python/eos_loop.py): {@link EosApp} runs in its own JVM; the app, or separately the
 * broker, is SIGKILLed at seeded random points and started again, more input is fed as it goes;
 * then the app drains the input and the output read with read_committed from the beginning must
 * be every input exactly once, in input order per partition, with the group's committed offsets
 * at the input's end. `SF_EOS_KILLS=N` sets the number of kills (CI: 8), `SF_EOS_SEED` the seed.
 */
@ExtendWith(KnownGaps.class)
@Timeout(value = 600, unit = TimeUnit.SECONDS)
class EosKillLoopTest {
    static final int PARTITIONS = 3;
    static final int PER_TXN = 10;
    static final int KILLS = Integer.parseInt(System.getenv().getOrDefault("SF_EOS_KILLS", "8"));
    static final long SEED = Long.parseLong(System.getenv().getOrDefault("SF_EOS_SEED",
            String.valueOf(System.nanoTime() % 100000)));

    /** The app's JVM: stdout lines counted (`committed`, `branch`), all kept in a log file. */
    static final class App {
        final Process process;
        final AtomicLong commits = new AtomicLong();
        final AtomicLong aborts = new AtomicLong();
        final AtomicLong reinits = new AtomicLong();
        final AtomicLong retries = new AtomicLong();
        final AtomicLong stalls = new AtomicLong();
        final AtomicLong fenced = new AtomicLong();

        App(Broker b, String src, String dst, String group, Path log) throws IOException {
            this(b, src, dst, group, log, 20000);
        }

        App(Broker b, String src, String dst, String group, Path log, int txnTimeoutMs) throws IOException {
            String cp = Path.of("target", "test-classes").toAbsolutePath() + java.io.File.pathSeparator
                    + Tool.classPath();
            List<String> cmd = List.of(Path.of(System.getProperty("java.home"), "bin", "java").toString(),
                    "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Xss512k", "-Xmx128m",
                    "-cp", cp, EosApp.class.getName(), b.bootstrap(), src, dst, group,
                    String.valueOf(PARTITIONS), String.valueOf(PER_TXN), String.valueOf(txnTimeoutMs));
            process = new ProcessBuilder(cmd).redirectErrorStream(true).start();
            Thread t = new Thread(() -> {
                try (BufferedReader r = new BufferedReader(new InputStreamReader(process.getInputStream(),
                        StandardCharsets.UTF_8))) {
                    String line;
                    while ((line = r.readLine()) != null) {
                        if (line.startsWith("committed ")) {
                            commits.incrementAndGet();
                            continue;
                        }
                        if (line.startsWith("branch abort")) {
                            aborts.incrementAndGet();
                        } else if (line.startsWith("branch reinit")) {
                            reinits.incrementAndGet();
                        } else if (line.startsWith("retry ")) {
                            retries.incrementAndGet();
                        } else if (line.equals("stalled")) {
                            stalls.incrementAndGet();
                        } else if (line.startsWith("branch fenced")) {
                            fenced.incrementAndGet();
                        }
                        Files.writeString(log, line + "\n", StandardOpenOption.CREATE, StandardOpenOption.APPEND);
                    }
                } catch (IOException ignored) {
                    // the process died
                }
            }, "eos-app-out");
            t.setDaemon(true);
            t.start();
        }

        /** A `stall` or `resume` line to the app's stdin. */
        void command(String line) throws IOException {
            process.getOutputStream().write((line + "\n").getBytes(StandardCharsets.UTF_8));
            process.getOutputStream().flush();
        }

        void kill() throws InterruptedException {
            process.destroyForcibly().waitFor(20, TimeUnit.SECONDS);
        }

        /** Waits for `n` more commits than `since`; false when the app died or 60 s passed. */
        boolean awaitCommits(long since, long n) {
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
            while (commits.get() < since + n) {
                if (!process.isAlive() || System.nanoTime() > deadline) {
                    return false;
                }
                Broker.sleep(20);
            }
            return true;
        }
    }

    /** Feeds `m{i}` to partition i % PARTITIONS with an idempotent producer of its own. */
    static final class Feeder {
        final Broker b;
        final String topic;
        int next;

        Feeder(Broker b, String topic) {
            this.b = b;
            this.topic = topic;
        }

        void feed(int n) {
            try (KafkaProducer<String, String> p = Util.producer(b, Map.of(ProducerConfig.ACKS_CONFIG, "all",
                    ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true"))) {
                for (int i = 0; i < n; i++, next++) {
                    p.send(new ProducerRecord<>(topic, next % PARTITIONS, null, "m" + next));
                }
                p.flush();
            }
        }
    }

    /** A loop's input and output topics (created, {@link #PARTITIONS} each) and its group. */
    private record Names(String src, String dst, String group) {
        static Names create(Broker b) throws Exception {
            Names n = new Names(Util.unique("eos-in"), Util.unique("eos-out"), Util.unique("eos"));
            Util.createTopic(b, n.src, PARTITIONS);
            Util.createTopic(b, n.dst, PARTITIONS);
            return n;
        }
    }

    private static Map<TopicPartition, Long> ends(Admin a, String topic) throws Exception {
        Map<TopicPartition, OffsetSpec> q = new HashMap<>();
        for (int i = 0; i < PARTITIONS; i++) {
            q.put(new TopicPartition(topic, i), OffsetSpec.latest());
        }
        Map<TopicPartition, Long> out = new HashMap<>();
        a.listOffsets(q).all().get(20, TimeUnit.SECONDS).forEach((tp, r) -> out.put(tp, r.offset()));
        return out;
    }

    private static Map<TopicPartition, Long> groupOffsets(Admin a, String group) throws Exception {
        Map<TopicPartition, Long> out = new HashMap<>();
        Map<TopicPartition, OffsetAndMetadata> m = a.listConsumerGroupOffsets(group,
                new ListConsumerGroupOffsetsOptions().requireStable(true))
                .partitionsToOffsetAndMetadata().get(20, TimeUnit.SECONDS);
        m.forEach((tp, o) -> out.put(tp, o == null ? -1 : o.offset()));
        return out;
    }

    /** Runs the app until the group committed the whole input, then checks the output. */
    private static void drainAndCheck(Broker b, String src, String dst, String group, int inputs,
                                      Path log) throws Exception {
        App app = new App(b, src, dst, group, log);
        try (Admin a = Util.admin(b)) {
            Map<TopicPartition, Long> end = ends(a, src);
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(120);
            while (!groupOffsets(a, group).equals(end)) {
                assertTrue(app.process.isAlive(), "the app exited while draining: " + Files.readString(log));
                assertTrue(System.nanoTime() < deadline, "not drained in 120 s: group "
                        + groupOffsets(a, group) + " input ends " + end + "\n" + Files.readString(log));
                Broker.sleep(200);
            }
        } finally {
            app.kill();
        }
        Map<Integer, List<String>> want = new HashMap<>();
        for (int i = 0; i < inputs; i++) {
            want.computeIfAbsent(i % PARTITIONS, k -> new ArrayList<>()).add("M" + i);
        }
        Map<Integer, List<String>> got = new HashMap<>();
        try (KafkaConsumer<String, String> c = Util.consumer(b, null,
                Map.of(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed",
                        ConsumerConfig.MAX_POLL_RECORDS_CONFIG, "2000"))) {
            List<TopicPartition> tps = new ArrayList<>(Util.partitions(dst, want.keySet()));
            c.assign(tps);
            c.seekToBeginning(tps);
            List<ConsumerRecord<String, String>> recs = Util.pollN(c, inputs, Duration.ofSeconds(60));
            c.poll(Duration.ofSeconds(1)).forEach(recs::add);
            for (ConsumerRecord<String, String> r : recs) {
                got.computeIfAbsent(r.partition(), k -> new ArrayList<>()).add(r.value());
            }
        }
        for (int p = 0; p < PARTITIONS; p++) {
            List<String> w = want.getOrDefault(p, List.of());
            List<String> g = got.getOrDefault(p, List.of());
            if (!w.equals(g)) {
                int i = 0;
                while (i < Math.min(w.size(), g.size()) && w.get(i).equals(g.get(i))) {
                    i++;
                }
                throw new AssertionError("output partition " + p + ": " + g.size() + " records for " + w.size()
                        + " inputs, first difference at " + i + ": want "
                        + w.subList(i, Math.min(w.size(), i + 5)) + " got " + g.subList(i, Math.min(g.size(), i + 5)));
            }
        }
    }

    private static void await(String what, java.util.function.BooleanSupplier cond, Path log, Broker b)
            throws IOException {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
        while (!cond.getAsBoolean()) {
            if (System.nanoTime() > deadline) {
                throw new AssertionError("timed out waiting for " + what + "\n" + Files.readString(log)
                        + "\n" + b.logTail());
            }
            Broker.sleep(20);
        }
    }

    /**
     * The app's failure branches with real failures (the Python stop tests' counterpart): the app
     * (transaction.timeout.ms 3,000) holds a transaction open, its records sent, past the
     * timeout: the coordinator aborts it, `sendOffsetsToTransaction` then throws
     * ProducerFencedException, nobody else committed, so the app starts a new producer, rewinds
     * and goes on (`reinit`). Then it holds one open while a second instance starts under the
     * same transactional.id and group, fences it and commits: at its resume the first one is
     * fenced, finds the other's commits and exits with code 4 (`fenced`). The output holds
     * every input exactly once.
     */
    @Test
    void exactlyOnceWhenTheAppStallsPastItsTimeoutAndIsFencedByANewInstance() throws Exception {
        long t0 = System.nanoTime();
        Path log = Files.createTempFile("eos-app-", ".log");
        try (Broker b = Broker.start()) {
            Names names = Names.create(b);
            String src = names.src(), dst = names.dst(), group = names.group();
            Feeder feeder = new Feeder(b, src);
            feeder.feed(200);
            App a = new App(b, src, dst, group, log, 3000);
            App next = null;
            try {
                assertTrue(a.awaitCommits(0, 1), "no commit\n" + Files.readString(log));
                // reinit: past the transaction timeout.
                a.command("stall");
                feeder.feed(100);
                await("the first stall", () -> a.stalls.get() == 1, log, b);
                Broker.sleep(5000);
                a.command("resume");
                await("the re-initialisation", () -> a.reinits.get() >= 1, log, b);
                long after = a.commits.get();
                feeder.feed(100);
                assertTrue(a.awaitCommits(after, 1), "no commit after the re-initialisation\n" + Files.readString(log));
                // fenced: a new instance takes over while this one holds its transaction open.
                a.command("stall");
                feeder.feed(100);
                await("the second stall", () -> a.stalls.get() == 2, log, b);
                App b2 = new App(b, src, dst, group, log, 3000);
                next = b2;
                assertTrue(b2.awaitCommits(0, 1), "the new instance made no commit\n" + Files.readString(log));
                a.command("resume");
                assertTrue(a.process.waitFor(30, TimeUnit.SECONDS), "the zombie did not exit\n" + Files.readString(log));
                assertEquals(4, a.process.exitValue(), Files.readString(log));
                assertEquals(1, a.fenced.get());
                assertEquals(1, a.reinits.get());
                assertEquals(0, b2.reinits.get() + b2.fenced.get(), Files.readString(log));
                feeder.feed(100);
                long since = b2.commits.get();
                assertTrue(b2.awaitCommits(since, 1), "the new instance stopped\n" + Files.readString(log));
            } finally {
                a.kill();
                if (next != null) {
                    next.kill();
                }
            }
            String brokerLog = Files.readString(b.logFile());
            assertTrue(brokerLog.contains("aborting a transaction past its timeout"), "no timeout abort in the broker's log");
            drainAndCheck(b, src, dst, group, feeder.next, log);
            System.out.printf("stalls: %d inputs, reinit %d, fenced %d, %.1f s%n", feeder.next, a.reinits.get(),
                    a.fenced.get(), (System.nanoTime() - t0) / 1e9);
            Files.readAllLines(log).stream().filter(l -> l.startsWith("branch")).forEach(System.out::println);
        } finally {
            Files.deleteIfExists(log);
        }
    }

    @Test
    void exactlyOnceWhenTheAppIsKilledAtRandomPoints() throws Exception {
        Random rnd = new Random(SEED);
        long t0 = System.nanoTime();
        Path log = Files.createTempFile("eos-app-", ".log");
        try (Broker b = Broker.start()) {
            Names names = Names.create(b);
            String src = names.src(), dst = names.dst(), group = names.group();
            Feeder feeder = new Feeder(b, src);
            feeder.feed(1000);
            long totalCommits = 0;
            for (int k = 0; k < KILLS; k++) {
                App app = new App(b, src, dst, group, log);
                // Killed 0–1 s after its first commit of this run: mid-transaction, mid-commit, or between.
                assertTrue(app.awaitCommits(0, 1), "no commit after a restart\n" + Files.readString(log)
                        + "\n" + b.logTail());
                Broker.sleep(rnd.nextInt(1000));
                app.kill();
                totalCommits += app.commits.get();
                feeder.feed(300);
            }
            drainAndCheck(b, src, dst, group, feeder.next, log);
            System.out.printf("app kills: seed %d, %d kills, %d inputs, %d commits before the final run, %.1f s%n",
                    SEED, KILLS, feeder.next, totalCommits, (System.nanoTime() - t0) / 1e9);
        } finally {
            Files.deleteIfExists(log);
        }
    }

    @Test
    void exactlyOnceWhenTheBrokerIsKilledAtRandomPoints() throws Exception {
        Random rnd = new Random(SEED);
        long t0 = System.nanoTime();
        Path log = Files.createTempFile("eos-app-", ".log");
        try (Broker b = Broker.start()) {
            Names names = Names.create(b);
            String src = names.src(), dst = names.dst(), group = names.group();
            Feeder feeder = new Feeder(b, src);
            feeder.feed(600);
            // Every kill comes 0-0.5 s after a commit of the app's, with 300 more inputs fed
            // after each restart: the app is in the middle of its transactions.
            App app = new App(b, src, dst, group, log);
            int restarts = 0;
            try {
                for (int k = 0; k < KILLS; k++) {
                    long since = app.commits.get();
                    if (!app.awaitCommits(since, 1)) {
                        assertTrue(!app.process.isAlive(), "no commit for 60 s after a broker restart\n"
                                + Files.readString(log) + "\n" + b.logTail());
                        // It exited (counted); a supervisor would start it again.
                        restarts++;
                        app = new App(b, src, dst, group, log);
                        assertTrue(app.awaitCommits(0, 1), "no commit after an app restart\n" + Files.readString(log));
                    }
                    Broker.sleep(rnd.nextInt(500));
                    b.kill();
                    Broker.sleep(rnd.nextInt(500));
                    b.restart();
                    feeder.feed(300);
                }
            } finally {
                app.kill();
            }
            drainAndCheck(b, src, dst, group, feeder.next, log);
            System.out.printf("broker kills: seed %d, %d kills, %d inputs, "
                            + "%d app restarts, %d aborts, %d new producers, %d timed-out calls retried, %.1f s%n",
                    SEED, KILLS, feeder.next, restarts, app.aborts.get(), app.reinits.get(), app.retries.get(), (System.nanoTime() - t0) / 1e9);
        } finally {
            Files.deleteIfExists(log);
        }
    }
}
