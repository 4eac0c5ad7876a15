package io.streamforge.it;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.List;
import java.util.Optional;
import org.junit.jupiter.api.extension.BeforeEachCallback;
import org.junit.jupiter.api.extension.ExtensionContext;
import org.junit.jupiter.api.extension.TestWatcher;

/**
 * When a test fails, saves the log of every broker it may have used (running at the failure, or
 * closed since the test started; the shared broker included) to
 * target/broker-logs/Class.method/broker-PORT.log and prints each one's tail, so a failure seen
 * once in CI can be read afterwards. Registered for every test class (JUnit's extension
 * auto-detection, enabled in pom.xml).
 */
public final class BrokerLogs implements BeforeEachCallback, TestWatcher {
    static final Path DIR = Path.of("target", "broker-logs");
    private static final ExtensionContext.Namespace NS = ExtensionContext.Namespace.create(BrokerLogs.class);
    /** Lines of each log printed with the failure. */
    private static final int TAIL_LINES = 80;

    @Override
    public void beforeEach(ExtensionContext ctx) {
        ctx.getStore(NS).put("started", System.nanoTime());
    }

    @Override
    public void testFailed(ExtensionContext ctx, Throwable cause) {
        Long started = ctx.getStore(NS).get("started", Long.class);
        List<Broker> used = Broker.usedSince(started == null ? Long.MIN_VALUE : started);
        String test = ctx.getRequiredTestClass().getSimpleName() + "."
                + ctx.getTestMethod().map(m -> m.getName()).orElse("all");
        Path dir = DIR.resolve(test);
        for (Broker b : used) {
            Optional<Path> saved = save(b, dir);
            System.err.println("==== " + test + " failed: broker " + b.bootstrap() + " log"
                    + saved.map(p -> " saved to " + p.toAbsolutePath()).orElse(" (not saved)")
                    + ", last " + TAIL_LINES + " lines:");
            System.err.println(tail(b.logFile()));
            System.err.println("==== end of broker " + b.bootstrap() + " log");
        }
    }

    private static Optional<Path> save(Broker b, Path dir) {
        try {
            Files.createDirectories(dir);
            Path to = dir.resolve("broker-" + b.port() + ".log");
            Files.copy(b.logFile(), to, StandardCopyOption.REPLACE_EXISTING);
            return Optional.of(to);
        } catch (IOException e) {
            System.err.println("cannot save " + b.logFile() + ": " + e);
            return Optional.empty();
        }
    }

    private static String tail(Path log) {
        try {
            // Lenient decoding: a tail is worth more than a MalformedInputException.
            List<String> lines = new String(Files.readAllBytes(log), StandardCharsets.UTF_8).lines().toList();
            return String.join("\n", lines.subList(Math.max(0, lines.size() - TAIL_LINES), lines.size()));
        } catch (IOException e) {
            return "(no log: " + e + ")";
        }
    }
}
