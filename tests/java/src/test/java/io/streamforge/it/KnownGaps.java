package io.streamforge.it;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.lang.reflect.Method;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.HashMap;
import java.util.Map;
import org.junit.jupiter.api.extension.ExtensionContext;
import org.junit.jupiter.api.extension.InvocationInterceptor;
import org.junit.jupiter.api.extension.ReflectiveInvocationContext;

/**
 * Reads tests/java/known-gaps.txt: lines `Class#method  reason` naming tests that assert Kafka's
 * behaviour where StreamForge does not match it yet. Such a test still runs: if it fails, the
 * failure is printed as "KNOWN GAP" and the test counts as passed; if it passes, it fails, so the
 * list never hides a fixed gap. Nothing is skipped.
 */
public final class KnownGaps implements InvocationInterceptor {
    static final Path FILE = Path.of("known-gaps.txt");
    private static Map<String, String> gaps;

    static synchronized Map<String, String> gaps() {
        if (gaps == null) {
            gaps = new HashMap<>();
            try {
                for (String line : Files.readAllLines(FILE)) {
                    String l = line.strip();
                    if (l.isEmpty() || l.startsWith("#")) {
                        continue;
                    }
                    String[] parts = l.split("\\s+", 2);
                    gaps.put(parts[0], parts.length > 1 ? parts[1] : "");
                }
            } catch (IOException e) {
                throw new UncheckedIOException("cannot read " + FILE.toAbsolutePath(), e);
            }
        }
        return gaps;
    }

    @Override
    public void interceptTestMethod(Invocation<Void> invocation, ReflectiveInvocationContext<Method> ctx,
                                    ExtensionContext ext) throws Throwable {
        String id = ctx.getExecutable().getDeclaringClass().getSimpleName() + "#" + ctx.getExecutable().getName();
        String reason = gaps().get(id);
        if (reason == null) {
            invocation.proceed();
            return;
        }
        try {
            invocation.proceed();
        } catch (Throwable t) {
            System.out.println("KNOWN GAP " + id + " (" + reason + "): " + t);
            return;
        }
        throw new AssertionError(id + " is listed in " + FILE + " as a known gap but now passes: remove it");
    }
}
