package io.streamforge.it;

import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;

/**
 * Transactional producer throughput against the idempotent producer with the Java 4.x client,
 * same JVM, same broker, alternating rounds (not a test: run it with `java`, see
 * docs/BENCHMARKS.md). Each round produces MESSAGES 100-byte values to a fresh 10-partition
 * topic (acks=all, linger.ms=5); the transactional round commits every PER_TXN messages and
 * times each commitTransaction (its EndTxn). Runs against a broker at transaction.version 2
 * (KIP-890 part 2, the default) and one started with --transaction-version 0 (KIP-98).
 *
 * Arguments: [messages=200000] [perTxn=1000] [rounds=5]
 */
public final class TxnBench {
    private static final int PARTITIONS = 10;
    private static final String VALUE = "x".repeat(100);

    public static void main(String[] args) throws Exception {
        int messages = args.length > 0 ? Integer.parseInt(args[0]) : 200_000;
        int perTxn = args.length > 1 ? Integer.parseInt(args[1]) : 1000;
        int rounds = args.length > 2 ? Integer.parseInt(args[2]) : 5;
        for (String tv : List.of("2", "0")) {
            try (Broker b = Broker.start("--transaction-version", tv)) {
                run(b, "transaction.version " + tv, messages, perTxn, rounds);
            }
        }
    }

    private static void run(Broker b, String label, int messages, int perTxn, int rounds) {
        List<Double> idem = new ArrayList<>();
        List<Double> txn = new ArrayList<>();
        List<Double> commitsMs = new ArrayList<>();
        Map<String, Object> conf = Map.of(ProducerConfig.ACKS_CONFIG, "all", ProducerConfig.LINGER_MS_CONFIG, 5,
                ProducerConfig.BATCH_SIZE_CONFIG, 200_000);
        // Round 0 warms the JVM and is not counted.
        for (int r = 0; r <= rounds; r++) {
            String it = Util.unique("idem");
            Util.createTopic(b, it, PARTITIONS);
            double i;
            try (KafkaProducer<String, String> p = Util.producer(b, conf)) {
                send(p, it, PARTITIONS);
                p.flush();
                long start = System.nanoTime();
                send(p, it, messages);
                p.flush();
                i = messages / ((System.nanoTime() - start) / 1e9);
            }
            String tt = Util.unique("txn");
            Util.createTopic(b, tt, PARTITIONS);
            List<Double> commits = new ArrayList<>();
            double t;
            var txConf = new java.util.HashMap<>(conf);
            txConf.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, Util.unique("bench"));
            try (KafkaProducer<String, String> p = Util.producer(b, txConf)) {
                p.initTransactions();
                long start = System.nanoTime();
                for (int sent = 0; sent < messages; sent += perTxn) {
                    p.beginTransaction();
                    send(p, tt, Math.min(perTxn, messages - sent));
                    long c0 = System.nanoTime();
                    p.commitTransaction();
                    commits.add((System.nanoTime() - c0) / 1e6);
                }
                t = messages / ((System.nanoTime() - start) / 1e9);
            }
            if (r == 0) {
                continue;
            }
            idem.add(i);
            txn.add(t);
            commitsMs.addAll(commits);
            System.out.printf("%s round %d: idempotent %,.0f msgs/s, transactional %,.0f msgs/s%n", label, r, i, t);
        }
        Collections.sort(commitsMs);
        System.out.printf("%s: transactional / idempotent (medians) %.3f; commitTransaction over %d: p50 %.2f ms, p99 %.2f ms%n",
                label, median(txn) / median(idem), commitsMs.size(), commitsMs.get(commitsMs.size() / 2),
                commitsMs.get(Math.min(commitsMs.size() - 1, (int) (commitsMs.size() * 0.99))));
    }

    private static void send(KafkaProducer<String, String> p, String topic, int n) {
        for (int k = 0; k < n; k++) {
            p.send(new ProducerRecord<>(topic, k % PARTITIONS, null, VALUE));
        }
    }

    private static double median(List<Double> xs) {
        List<Double> s = new ArrayList<>(xs);
        Collections.sort(s);
        return s.get(s.size() / 2);
    }
}
