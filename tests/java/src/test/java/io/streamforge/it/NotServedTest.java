package io.streamforge.it;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;

import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.function.Supplier;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.common.KafkaFuture;
import org.apache.kafka.common.errors.UnsupportedVersionException;
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
        // DescribeAcls is served now (AclTest); DescribeClientQuotas too (QuotasTest).
        // DescribeUserScramCredentials is served now (SecurityTest).
        assertUnsupported("DescribeDelegationToken", () -> A.describeDelegationToken().delegationTokens());
    }

    // ElectLeaders (ToolsTest#leaderElectionCommand) and AlterPartitionReassignments /
    // ListPartitionReassignments (tests/python/test_reassign_cluster.py) are served now.

    @Test
    void brokerStillServesAfterUnservedCalls() throws Exception {
        assertUnsupported("DescribeDelegationToken", () -> A.describeDelegationToken().delegationTokens());
        assertEquals(1, A.describeCluster().nodes().get(30, TimeUnit.SECONDS).size());
    }
}
