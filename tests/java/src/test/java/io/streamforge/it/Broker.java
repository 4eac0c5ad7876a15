package io.streamforge.it;

import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;

/**
 * One real `streamforge broker` child process ($STREAMFORGE_BIN) on a free loopback port with a
 * temporary data dir, like tests/python/harness.py. Stopped by its own pid (SIGTERM, then
 * SIGKILL after a bounded wait); the data dir is removed on close, the log is kept until the JVM
 * exits, so that {@link BrokerLogs} can save the logs of the brokers a failed test used
 * (target/broker-logs/).
 */
public final class Broker implements AutoCloseable {
    static final Duration START_TIMEOUT = Duration.ofSeconds(60);
    static final Duration STOP_TIMEOUT = Duration.ofSeconds(20);

    private static Broker shared;
    /** Every broker of this JVM, for {@link BrokerLogs} and the clean-up at exit. */
    private static final List<Broker> ALL = new CopyOnWriteArrayList<>();

    static {
        Runtime.getRuntime().addShutdownHook(new Thread(Broker::cleanUpAtExit));
    }

    private final Path workDir;
    private final Path logFile;
    private final int port;
    private final List<String> extraArgs;
    private Process process;
    /** When close() stopped it (System.nanoTime), or Long.MIN_VALUE while open. */
    private volatile long closedAtNanos = Long.MIN_VALUE;

    private Broker(List<String> extraArgs) throws IOException {
        this.workDir = Files.createTempDirectory("sf-java-");
        this.logFile = workDir.resolve("broker.log");
        this.port = freePort();
        this.extraArgs = List.copyOf(extraArgs);
        ALL.add(this);
    }

    /** The broker shared by every test class that needs no special flags (stopped at JVM exit). */
    public static synchronized Broker shared() {
        if (shared == null) {
            shared = start();
        }
        return shared;
    }

    /** The brokers running now or closed since `sinceNanos` (System.nanoTime). */
    static List<Broker> usedSince(long sinceNanos) {
        List<Broker> used = new ArrayList<>();
        for (Broker b : ALL) {
            long closed = b.closedAtNanos;
            if (closed == Long.MIN_VALUE || closed - sinceNanos >= 0) {
                used.add(b);
            }
        }
        return used;
    }

    /** This broker's whole log file (kept after close until the JVM exits). */
    Path logFile() {
        return logFile;
    }

    /** At JVM exit: stop what still runs (the shared broker) and remove every work dir. */
    private static void cleanUpAtExit() {
        for (Broker b : ALL) {
            b.close();
            deleteTree(b.workDir);
        }
    }

    /** A fresh broker with extra command-line flags; the caller closes it. */
    public static Broker start(String... extraArgs) {
        try {
            Broker b = new Broker(List.of(extraArgs));
            b.launch();
            return b;
        } catch (IOException e) {
            throw new IllegalStateException("cannot start the broker", e);
        }
    }

    /**
     * `n` brokers as one cluster, each also a controller voter (as tests/python/test_cluster.py
     * starts them), with `extraArgs` each (`{node}` in one stands for the broker's node id).
     * Started together: the voters need each other to elect a controller. The caller closes
     * them.
     */
    public static List<Broker> cluster(int n, String... extraArgs) {
        List<Broker> brokers = new ArrayList<>();
        ExecutorService pool = Executors.newFixedThreadPool(n);
        try {
            StringBuilder voters = new StringBuilder();
            for (int i = 1; i <= n; i++) {
                voters.append(i == 1 ? "" : ",").append(i).append("@127.0.0.1:").append(freePort());
            }
            for (int i = 1; i <= n; i++) {
                List<String> args = new ArrayList<>(List.of("--node-id", String.valueOf(i),
                        "--controller-quorum-voters", voters.toString(),
                        "--broker-session-timeout-ms", "3000",
                        "--broker-heartbeat-interval-ms", "500"));
                for (String a : extraArgs) {
                    args.add(a.replace("{node}", String.valueOf(i)));
                }
                brokers.add(new Broker(args));
            }
            List<Future<Void>> started = new ArrayList<>();
            for (Broker b : brokers) {
                started.add(pool.submit(() -> {
                    b.launch();
                    return null;
                }));
            }
            for (Future<Void> f : started) {
                f.get(START_TIMEOUT.toSeconds() + 10, TimeUnit.SECONDS);
            }
            return brokers;
        } catch (Exception e) {
            brokers.forEach(Broker::close);
            throw new IllegalStateException("cannot start the cluster", e);
        } finally {
            pool.shutdownNow();
        }
    }

    public static String binary() {
        String bin = System.getenv("STREAMFORGE_BIN");
        if (bin == null || bin.isEmpty()) {
            String target = System.getenv().getOrDefault("CARGO_TARGET_DIR", "../../target");
            bin = Path.of(target, "debug", "streamforge").toString();
        }
        if (!Files.isExecutable(Path.of(bin))) {
            throw new IllegalStateException("no broker binary at " + bin + " (set STREAMFORGE_BIN)");
        }
        return bin;
    }

    public String bootstrap() {
        return "127.0.0.1:" + port;
    }

    public int port() {
        return port;
    }

    public Path workDir() {
        return workDir;
    }

    public boolean isRunning() {
        return process != null && process.isAlive();
    }

    private void launch() throws IOException {
        List<String> cmd = new ArrayList<>(List.of(binary(), "broker",
                "--listen", bootstrap(), "--advertised-listener", bootstrap(),
                "--data-dir", workDir.resolve("data").toString(),
                "--http-listen", "off",
                "--group-initial-rebalance-delay-ms", "0"));
        // `{port}` in a flag stands for this broker's PLAINTEXT port (for --listeners).
        extraArgs.forEach(a -> cmd.add(a.replace("{port}", String.valueOf(port))));
        ProcessBuilder pb = new ProcessBuilder(cmd)
                .redirectErrorStream(true)
                .redirectOutput(ProcessBuilder.Redirect.appendTo(logFile.toFile()));
        pb.environment().putIfAbsent("RUST_LOG", "info");
        process = pb.start();
        waitReady();
    }

    private void waitReady() throws IOException {
        long deadline = System.nanoTime() + START_TIMEOUT.toNanos();
        IOException last = null;
        while (System.nanoTime() < deadline) {
            if (!process.isAlive()) {
                throw new IllegalStateException("broker exited with " + process.exitValue()
                        + " during start-up\n" + logTail());
            }
            try {
                if (Wire.apiVersionsV0(port) == 0) {
                    return;
                }
            } catch (IOException e) {
                last = e;
            }
            sleep(100);
        }
        throw new IllegalStateException("broker not ready after " + START_TIMEOUT + ": " + last
                + "\n" + logTail());
    }

    /**
     * SIGKILL the broker (no clean shutdown: the state on disk is what a crash leaves) and
     * start it again on the same port and data directory.
     */
    public synchronized void killAndRestart() {
        try {
            process.destroyForcibly().waitFor(STOP_TIMEOUT.toSeconds(), TimeUnit.SECONDS);
            launch();
        } catch (IOException e) {
            throw new IllegalStateException("cannot restart the broker", e);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException("interrupted restarting the broker", e);
        }
    }

    /** SIGKILL the broker, keeping its data directory for {@link #restart()}. */
    public synchronized void kill() {
        try {
            process.destroyForcibly().waitFor(STOP_TIMEOUT.toSeconds(), TimeUnit.SECONDS);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException("interrupted killing the broker", e);
        }
    }

    /** Start a killed broker again on the same port and data directory. */
    public synchronized void restart() {
        try {
            launch();
        } catch (IOException e) {
            throw new IllegalStateException("cannot restart the broker", e);
        }
    }

    /** The last lines of the broker's log (printed when a test fails). */
    public String logTail() {
        try {
            List<String> lines = Files.readAllLines(logFile, StandardCharsets.UTF_8);
            return String.join("\n", lines.subList(Math.max(0, lines.size() - 80), lines.size()));
        } catch (IOException e) {
            return "(no log: " + e + ")";
        }
    }

    /** Stops the broker and removes its data; the log stays until the JVM exits. */
    @Override
    public synchronized void close() {
        if (process != null && process.isAlive()) {
            process.destroy();
            try {
                if (!process.waitFor(STOP_TIMEOUT.toSeconds(), TimeUnit.SECONDS)) {
                    process.destroyForcibly().waitFor(STOP_TIMEOUT.toSeconds(), TimeUnit.SECONDS);
                }
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }
        if (closedAtNanos == Long.MIN_VALUE) {
            closedAtNanos = System.nanoTime();
        }
        deleteTree(workDir.resolve("data"));
    }

    private static void deleteTree(Path root) {
        try (Stream<Path> walk = Files.walk(root)) {
            walk.sorted(Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
        } catch (IOException ignored) {
            // best effort: a temp dir
        }
    }

    static int freePort() throws IOException {
        try (ServerSocket s = new ServerSocket()) {
            s.bind(new InetSocketAddress("127.0.0.1", 0));
            return s.getLocalPort();
        }
    }

    static void sleep(long ms) {
        try {
            Thread.sleep(ms);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException(e);
        }
    }

    /** Raw Kafka wire requests for the cases no client sends. */
    static final class Wire {
        private Wire() {}

        /** ApiVersions v0; returns its error code. */
        static short apiVersionsV0(int port) throws IOException {
            return request(port, (short) 18, (short) 0).errorCode;
        }

        record Reply(boolean closed, short errorCode) {}

        /**
         * Sends a header-v1 request with an empty body; returns the first error code of the reply
         * (header v0), or closed=true if the broker closed the connection instead.
         */
        static Reply request(int port, short apiKey, short version) throws IOException {
            try (Socket s = new Socket()) {
                s.connect(new InetSocketAddress("127.0.0.1", port), 2000);
                s.setSoTimeout(5000);
                DataOutputStream out = new DataOutputStream(s.getOutputStream());
                out.writeInt(2 + 2 + 4 + 2);
                out.writeShort(apiKey);
                out.writeShort(version);
                out.writeInt(7);
                out.writeShort(-1); // null client id
                out.flush();
                DataInputStream in = new DataInputStream(s.getInputStream());
                int size;
                try {
                    size = in.readInt();
                } catch (java.io.EOFException | java.net.SocketException e) {
                    return new Reply(true, (short) -1);
                }
                byte[] body = new byte[size];
                in.readFully(body);
                short err = (short) (((body[4] & 0xff) << 8) | (body[5] & 0xff));
                return new Reply(false, err);
            }
        }
    }
}
