package io.streamforge.it;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.Map;
import java.util.Set;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.function.Supplier;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.common.ElectionType;
import org.apache.kafka.common.KafkaFuture;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.acl.AclBindingFilter;
import org.apache.kafka.common.errors.TransactionalIdAuthorizationException;
import org.apache.kafka.common.errors.UnsupportedVersionException;
import org.apache.kafka.common.quota.ClientQuotaFilter;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.ExtendWith;

/**
 * AdminClient calls whose APIs StreamForge does not serve yet (docs/BROKER.md, "Not served yet"):
 * each fails at once with UnsupportedVersionException, because the broker does not list the API in
 * ApiVersions, and the broker keeps serving.
 */
@ExtendWith(KnownGaps.class)
@Timeout(value = 60, unit = TimeUnit.SECONDS)
class NotServedTest {
    static final Broker B = Broker.shared();
    static final Admin A = Util.admin(B);

    @AfterAll
    static void closeAdmin() {
        A.close();
    }

    static void assertUnsupported(String what, Supplier<KafkaFuture<?>> call) {
        Throwable t = assertThrows(ExecutionException.class, () -> call.get().get(30, TimeUnit.SECONDS), what);
        assertInstanceOf(UnsupportedVersionException.class, t.getCause(), what + ": " + t.getCause());
    }

    @Test
    void aclsQuotasTokens() {
        assertUnsupported("DescribeAcls", () -> A.describeAcls(AclBindingFilter.ANY).values());
        assertUnsupported("DescribeClientQuotas", () -> A.describeClientQuotas(ClientQuotaFilter.all()).entities());
        // DescribeUserScramCredentials is served now (SecurityTest).
        assertUnsupported("DescribeDelegationToken", () -> A.describeDelegationToken().delegationTokens());
    }

    @Test
    void replicaManagement() {
        TopicPartition tp = new TopicPartition(Util.unique("x"), 0);
        assertUnsupported("ElectLeaders", () -> A.electLeaders(ElectionType.PREFERRED, Set.of(tp)).all());
        assertUnsupported("ListPartitionReassignments", () -> A.listPartitionReassignments().reassignments());
    }

    @Test
    void transactions() {
        assertUnsupported("ListTransactions", () -> A.listTransactions().all());
        try (KafkaProducer<String, String> p = Util.producer(B, Map.of(
                ProducerConfig.TRANSACTIONAL_ID_CONFIG, Util.unique("tx"),
                ProducerConfig.MAX_BLOCK_MS_CONFIG, "10000"))) {
            // Until transactions are served, FindCoordinator/InitProducerId for a transactional
            // id answer TRANSACTIONAL_ID_AUTHORIZATION_FAILED, so initTransactions fails at once
            // (fatally) instead of the first transactional send hanging.
            long start = System.nanoTime();
            Throwable t = assertThrows(Exception.class, p::initTransactions);
            Throwable c = t;
            while (c.getCause() != null && !(c instanceof TransactionalIdAuthorizationException)) {
                c = c.getCause();
            }
            assertInstanceOf(TransactionalIdAuthorizationException.class, c, "initTransactions: " + t);
            assertTrue(System.nanoTime() - start < TimeUnit.SECONDS.toNanos(5), "initTransactions took too long");
        }
    }

    @Test
    void brokerStillServesAfterUnservedCalls() throws Exception {
        assertUnsupported("DescribeAcls", () -> A.describeAcls(AclBindingFilter.ANY).values());
        assertEquals(1, A.describeCluster().nodes().get(30, TimeUnit.SECONDS).size());
    }
}
