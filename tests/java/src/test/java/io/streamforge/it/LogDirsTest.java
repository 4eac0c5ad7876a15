package io.streamforge.it;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import java.util.Map;
import java.util.OptionalLong;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.LogDirDescription;
import org.apache.kafka.clients.admin.ReplicaInfo;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.ExtendWith;

/** Admin.describeLogDirs / describeReplicaLogDirs (DescribeLogDirs, API 35): the one log dir. */
@ExtendWith(KnownGaps.class)
@Timeout(value = 60, unit = TimeUnit.SECONDS)
class LogDirsTest {
    static final Broker B = Broker.shared();
    static final Admin A = Util.admin(B);

    @AfterAll
    static void closeAdmin() {
        A.close();
    }

    static int nodeId() throws Exception {
        return A.describeCluster().nodes().get(30, TimeUnit.SECONDS).iterator().next().id();
    }

    @Test
    void describeLogDirsReportsEveryPartitionAndTheVolume() throws Exception {
        String t = Util.unique("logdirs");
        Util.createTopic(B, t, 2);
        try (KafkaProducer<String, String> p = Util.producer(B, Map.of())) {
            for (int i = 0; i < 10; i++) {
                p.send(new ProducerRecord<>(t, 0, "k", "value-" + i)).get(30, TimeUnit.SECONDS);
            }
        }
        int node = nodeId();
        Map<String, LogDirDescription> dirs = A.describeLogDirs(List.of(node)).allDescriptions()
                .get(30, TimeUnit.SECONDS).get(node);
        assertEquals(1, dirs.size(), dirs.toString());
        Map.Entry<String, LogDirDescription> dir = dirs.entrySet().iterator().next();
        assertTrue(dir.getKey().startsWith("/"), dir.getKey());
        LogDirDescription d = dir.getValue();
        assertNull(d.error());
        ReplicaInfo p0 = d.replicaInfos().get(new TopicPartition(t, 0));
        ReplicaInfo p1 = d.replicaInfos().get(new TopicPartition(t, 1));
        assertTrue(p0.size() > 10 * "value-0".length(), "p0 holds the 10 records: " + p0);
        assertEquals(0, p1.size(), "p1 is empty: " + p1);
        assertEquals(0, p0.offsetLag());
        assertFalse(p0.isFuture());
        // v4 (KIP-827): the volume's total and usable bytes.
        OptionalLong total = d.totalBytes();
        OptionalLong usable = d.usableBytes();
        assertTrue(total.isPresent() && usable.isPresent(), d.toString());
        assertTrue(total.getAsLong() > 0 && usable.getAsLong() <= total.getAsLong(), d.toString());
    }

    @Test
    void describeReplicaLogDirsOfAnUnknownTopicFindsNothing() throws Exception {
        // Kafka answers only the partitions it hosts: an unknown one is absent from the answer,
        // which the Admin client reports as a replica with no log dir.
        int node = nodeId();
        var replica = new org.apache.kafka.common.TopicPartitionReplica(Util.unique("missing"), 0, node);
        var info = A.describeReplicaLogDirs(List.of(replica)).all().get(30, TimeUnit.SECONDS).get(replica);
        assertNull(info.getCurrentReplicaLogDir(), info.toString());
    }
}
