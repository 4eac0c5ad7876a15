package io.streamforge.it;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import java.util.Map;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.stream.Collectors;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.DescribeConfigsOptions;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.errors.InvalidRequestException;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.ExtendWith;

/**
 * Dynamic broker configs as an operator changes them: kafka-configs.sh (ConfigCommand) with
 * --entity-default and --entity-name, and Admin.incrementalAlterConfigs on the BROKER resource,
 * with the per-level synonyms Kafka lists. Its own broker: the changes are broker-wide.
 */
@ExtendWith(KnownGaps.class)
@Timeout(value = 180, unit = TimeUnit.SECONDS)
class DynamicBrokerConfigTest {
    static final Broker B = Broker.start();
    static final Admin A = Util.admin(B);
    static final String BS = B.bootstrap();
    static final long T = 30;
    static final ConfigResource DEFAULT = new ConfigResource(ConfigResource.Type.BROKER, "");
    static final ConfigResource NODE = new ConfigResource(ConfigResource.Type.BROKER, "1");

    @AfterAll
    static void close() {
        A.close();
        B.close();
    }

    static Config describe(ConfigResource r) throws Exception {
        return A.describeConfigs(List.of(r), new DescribeConfigsOptions().includeSynonyms(true))
                .all().get(T, TimeUnit.SECONDS).get(r);
    }

    static void set(ConfigResource r, String name, String value) throws Exception {
        AlterConfigOp op = new AlterConfigOp(new ConfigEntry(name, value), AlterConfigOp.OpType.SET);
        A.incrementalAlterConfigs(Map.of(r, List.of(op))).all().get(T, TimeUnit.SECONDS);
    }

    @Test
    void configCommandSetsTheClusterDefaultAndTheAdminSeesEveryLevel() throws Exception {
        Tool.ok(ToolsTest.CONFIGS, null, "--bootstrap-server", BS, "--entity-type", "brokers",
                "--entity-default", "--alter", "--add-config", "log.segment.bytes=2097152");
        String d = Tool.ok(ToolsTest.CONFIGS, null, "--bootstrap-server", BS, "--entity-type", "brokers",
                "--entity-default", "--describe").out();
        assertTrue(d.contains("log.segment.bytes=2097152"), d);

        set(NODE, "log.segment.bytes", "4194304");
        ConfigEntry e = describe(NODE).get("log.segment.bytes");
        assertEquals("4194304", e.value());
        assertEquals(ConfigEntry.ConfigSource.DYNAMIC_BROKER_CONFIG, e.source());
        assertFalse(e.isReadOnly());
        List<String> levels = e.synonyms().stream()
                .map(s -> s.name() + "=" + s.value() + "@" + s.source())
                .collect(Collectors.toList());
        assertEquals(List.of(
                "log.segment.bytes=4194304@DYNAMIC_BROKER_CONFIG",
                "log.segment.bytes=2097152@DYNAMIC_DEFAULT_BROKER_CONFIG",
                "log.segment.bytes=1073741824@DEFAULT_CONFIG"), levels);

        Config defaults = describe(DEFAULT);
        assertEquals("2097152", defaults.get("log.segment.bytes").value());
        assertEquals(ConfigEntry.ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG,
                defaults.get("log.segment.bytes").source());

        Tool.ok(ToolsTest.CONFIGS, null, "--bootstrap-server", BS, "--entity-type", "brokers",
                "--entity-name", "1", "--alter", "--delete-config", "log.segment.bytes");
        assertEquals("2097152", describe(NODE).get("log.segment.bytes").value());
    }

    @Test
    void readOnlyConfigsAreRefusedWithKafkasError() throws Exception {
        ExecutionException ex = assertThrows(ExecutionException.class, () -> set(NODE, "num.partitions", "3"));
        assertInstanceOf(InvalidRequestException.class, ex.getCause());
        assertTrue(ex.getCause().getMessage().contains("Cannot update these configs dynamically: Set(num.partitions)"),
                ex.getCause().getMessage());
        Tool.Result r = Tool.run(ToolsTest.CONFIGS, null, "--bootstrap-server", BS, "--entity-type", "brokers",
                "--entity-default", "--alter", "--add-config", "log.retention.ms=soon");
        assertNotEquals(0, r.exit(), r.toString());
        assertTrue(describe(NODE).get("num.partitions").isReadOnly());
    }
}
