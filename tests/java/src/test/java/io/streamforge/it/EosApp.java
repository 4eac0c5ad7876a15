package io.streamforge.it;

import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.AuthorizationException;
import org.apache.kafka.common.errors.InvalidProducerEpochException;
import org.apache.kafka.common.errors.OutOfOrderSequenceException;
import org.apache.kafka.common.errors.ProducerFencedException;
import org.apache.kafka.common.errors.TimeoutException;
import org.apache.kafka.common.errors.UnsupportedVersionException;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * A consume-transform-produce app as one is written with the Java client, run in its own JVM by
 * {@link EosKillLoopTest} (which SIGKILLs it, or the broker, at random points): reads every
 * partition of the input (assigned, so a killed instance leaves no member behind) with
 * read_committed from the group's committed offsets, writes each value upper-cased to the same
 * partition of the output and commits the input offsets with `sendOffsetsToTransaction` in the
 * same transaction. Errors as the KafkaProducer documentation handles them: a commit that timed
 * out is retried; ProducerFencedException, OutOfOrderSequenceException and authorization errors
 * are fatal: close the producer, start a new one under the same transactional.id and rewind to
 * the committed offsets (a fenced one first checks whether another instance committed since its
 * own last commit: then it is a zombie and exits with code 4); any other KafkaException is
 * abortable: abortTransaction and rewind.
 *
 * <p>Arguments: bootstrap input output group partitions recordsPerTransaction
 * [transactionTimeoutMs]. Prints `committed N` after each commit and `branch NAME` at each
 * failure branch. A `stall` line on stdin makes the next transaction wait, its records sent and
 * its offsets not yet, until a `resume` line (prints `stalled`).
 */
public final class EosApp {
    private final String bootstrap;
    private final String output;
    private final String group;
    private final List<TopicPartition> parts = new ArrayList<>();
    private final int perTxn;
    private KafkaConsumer<String, String> consumer;
    private KafkaProducer<String, String> producer;
    private Map<TopicPartition, OffsetAndMetadata> lastSeenCommitted = Map.of();
    private long commits;
    private final int txnTimeoutMs;
    /** Set by a `stall` line on stdin: the next transaction waits, once its records are sent, for `resume`. */
    private final java.util.concurrent.Semaphore resume = new java.util.concurrent.Semaphore(0);
    private volatile boolean stallNext;

    private EosApp(String[] a) {
        bootstrap = a[0];
        output = a[2];
        group = a[3];
        for (int i = 0; i < Integer.parseInt(a[4]); i++) {
            parts.add(new TopicPartition(a[1], i));
        }
        perTxn = Integer.parseInt(a[5]);
        txnTimeoutMs = a.length > 6 ? Integer.parseInt(a[6]) : 20000;
    }

    /** Reads `stall` / `resume` lines from stdin (the stop tests' stand-in for a long pause). */
    private void readCommands() {
        Thread t = new Thread(() -> {
            try (java.io.BufferedReader r = new java.io.BufferedReader(
                    new java.io.InputStreamReader(System.in, java.nio.charset.StandardCharsets.UTF_8))) {
                String line;
                while ((line = r.readLine()) != null) {
                    if (line.equals("stall")) {
                        stallNext = true;
                    } else if (line.equals("resume")) {
                        resume.release();
                    }
                }
            } catch (java.io.IOException ignored) {
                // stdin closed
            }
        }, "commands");
        t.setDaemon(true);
        t.start();
    }

    public static void main(String[] args) {
        new EosApp(args).run();
    }

    private static void say(String line) {
        System.out.println(line);
        System.out.flush();
    }

    private KafkaProducer<String, String> newProducer() {
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, group + "-app");
        p.put(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, String.valueOf(txnTimeoutMs));
        p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "15000");
        p.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, "5000");
        p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "15000");
        p.put(ProducerConfig.LINGER_MS_CONFIG, "2");
        p.put(ProducerConfig.RECONNECT_BACKOFF_MAX_MS_CONFIG, "200");
        KafkaProducer<String, String> prod = new KafkaProducer<>(p);
        while (true) {
            try {
                prod.initTransactions();
                return prod;
            } catch (TimeoutException e) {
                say("retry initTransactions: " + e.getMessage());
            }
        }
    }

    private KafkaConsumer<String, String> newConsumer() {
        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        p.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        p.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        p.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, String.valueOf(perTxn));
        p.put(ConsumerConfig.REQUEST_TIMEOUT_MS_CONFIG, "5000");
        p.put(ConsumerConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "10000");
        p.put(ConsumerConfig.RECONNECT_BACKOFF_MAX_MS_CONFIG, "200");
        return new KafkaConsumer<>(p);
    }

    /** The group's committed offsets (read_committed: a stable OffsetFetch), retried while the broker is away. */
    private Map<TopicPartition, OffsetAndMetadata> committed() {
        while (true) {
            try {
                Map<TopicPartition, OffsetAndMetadata> m = new HashMap<>(consumer.committed(Set.copyOf(parts)));
                m.values().removeIf(v -> v == null);
                return m;
            } catch (TimeoutException e) {
                say("retry committed: " + e.getMessage());
            }
        }
    }

    /** Seeks every partition to the group's committed offset (the start when there is none). */
    private void rewind() {
        Map<TopicPartition, OffsetAndMetadata> c = committed();
        lastSeenCommitted = c;
        for (TopicPartition tp : parts) {
            OffsetAndMetadata o = c.get(tp);
            if (o == null) {
                consumer.seekToBeginning(List.of(tp));
            } else {
                consumer.seek(tp, o.offset());
            }
        }
    }

    private void run() {
        readCommands();
        consumer = newConsumer();
        consumer.assign(parts);
        producer = newProducer();
        rewind();
        say("started");
        while (true) {
            ConsumerRecords<String, String> recs = consumer.poll(Duration.ofMillis(200));
            if (recs.isEmpty()) {
                continue;
            }
            try {
                producer.beginTransaction();
                Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
                for (ConsumerRecord<String, String> r : recs) {
                    producer.send(new ProducerRecord<>(output, r.partition(), r.key(), r.value().toUpperCase()));
                    offsets.put(new TopicPartition(r.topic(), r.partition()), new OffsetAndMetadata(r.offset() + 1));
                }
                if (stallNext) {
                    // A pause with the transaction open at the coordinator (a GC pause, a stop).
                    stallNext = false;
                    producer.flush();
                    say("stalled");
                    resume.acquireUninterruptibly();
                }
                producer.sendOffsetsToTransaction(offsets, consumer.groupMetadata());
                commit();
                commits++;
                lastSeenCommitted = merge(lastSeenCommitted, offsets);
                say("committed " + commits + " " + recs.count());
            } catch (ProducerFencedException | OutOfOrderSequenceException | AuthorizationException
                     | UnsupportedVersionException e) {
                fatal(e);
            } catch (KafkaException e) {
                abortable(e);
            }
        }
    }

    /** commitTransaction, retried while it times out (the client allows the retry). */
    private void commit() {
        while (true) {
            try {
                producer.commitTransaction();
                return;
            } catch (TimeoutException e) {
                say("retry commitTransaction: " + e.getMessage());
            }
        }
    }

    private static Map<TopicPartition, OffsetAndMetadata> merge(Map<TopicPartition, OffsetAndMetadata> a,
                                                                Map<TopicPartition, OffsetAndMetadata> b) {
        Map<TopicPartition, OffsetAndMetadata> m = new HashMap<>(a);
        m.putAll(b);
        return m;
    }

    private void fatal(KafkaException e) {
        if (e instanceof ProducerFencedException && !committed().equals(lastSeenCommitted)) {
            // Someone else committed since our last commit or rewind: a newer instance owns the
            // transactional id and this one is a zombie.
            say("branch fenced " + e);
            System.exit(4);
        }
        say("branch reinit " + e);
        producer.close(Duration.ZERO);
        producer = newProducer();
        rewind();
    }

    private void abortable(KafkaException e) {
        say("branch abort " + e);
        try {
            producer.abortTransaction();
        } catch (ProducerFencedException | InvalidProducerEpochException e2) {
            fatal(e2);
            return;
        } catch (KafkaException e2) {
            say("abort failed: " + e2);
            producer.close(Duration.ZERO);
            producer = newProducer();
        }
        rewind();
    }
}
