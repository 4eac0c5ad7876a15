package io.streamforge.it;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;

/**
 * Runs one of Kafka's command-line tools through its main class in its own JVM
 * (`java -cp <kafka-tools + kafka_2.13 class path> <main> args...`), as kafka-*.sh does.
 */
final class Tool {
    static final long TIMEOUT_S = 90;

    record Result(int exit, String out, String err) {
        @Override
        public String toString() {
            return "exit " + exit + "\n--- stdout:\n" + out + "\n--- stderr:\n" + err;
        }
    }

    private Tool() {}

    static String classPath() {
        String file = System.getProperty("tools.classpath.file", "target/tools.classpath");
        try {
            return Files.readString(Path.of(file)).strip();
        } catch (IOException e) {
            throw new IllegalStateException("no tools class path at " + file + " (run through mvn)", e);
        }
    }

    static Result run(String mainClass, String stdin, String... args) {
        List<String> cmd = new ArrayList<>(List.of(
                Path.of(System.getProperty("java.home"), "bin", "java").toString(),
                // Quick start-up for short-lived tools (what kafka-run-class.sh leaves to the user).
                "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Xss512k", "-Xmx256m",
                "-cp", classPath(), mainClass));
        cmd.addAll(List.of(args));
        try {
            Path out = Files.createTempFile("tool-out", ".txt");
            Path err = Files.createTempFile("tool-err", ".txt");
            ProcessBuilder pb = new ProcessBuilder(cmd)
                    .redirectOutput(out.toFile()).redirectError(err.toFile());
            Process p = pb.start();
            if (stdin != null) {
                p.getOutputStream().write(stdin.getBytes(StandardCharsets.UTF_8));
            }
            p.getOutputStream().close();
            if (!p.waitFor(TIMEOUT_S, TimeUnit.SECONDS)) {
                p.destroyForcibly().waitFor(10, TimeUnit.SECONDS);
                throw new AssertionError(mainClass + " did not finish in " + TIMEOUT_S + " s\n"
                        + Files.readString(out) + Files.readString(err));
            }
            Result r = new Result(p.exitValue(), Files.readString(out), Files.readString(err));
            Files.deleteIfExists(out);
            Files.deleteIfExists(err);
            return r;
        } catch (IOException e) {
            throw new IllegalStateException(e);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException(e);
        }
    }

    /** Runs and asserts exit 0. */
    static Result ok(String mainClass, String stdin, String... args) {
        Result r = run(mainClass, stdin, args);
        if (r.exit() != 0) {
            throw new AssertionError(mainClass + " " + String.join(" ", args) + " failed: " + r);
        }
        return r;
    }
}
