package sfgo

// The real `streamforge broker` ($STREAMFORGE_BIN) on a free loopback port with a temp data dir,
// like tests/python/harness.py. One broker serves the whole package; stopped by its pid.

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

const (
	startTimeout = 60 * time.Second
	stopTimeout  = 20 * time.Second
)

type broker struct {
	cmd     *exec.Cmd
	dir     string
	addr    string
	logPath string
	exited  chan struct{}
}

var shared *broker

func brokerBinary() string {
	if b := os.Getenv("STREAMFORGE_BIN"); b != "" {
		return b
	}
	target := os.Getenv("CARGO_TARGET_DIR")
	if target == "" {
		target = "../../target"
	}
	return filepath.Join(target, "debug", "streamforge")
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

func startBroker(extra ...string) (*broker, error) {
	dir, err := os.MkdirTemp("", "sf-go-")
	if err != nil {
		return nil, err
	}
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	b := &broker{dir: dir, addr: addr, logPath: filepath.Join(dir, "broker.log")}
	args := append([]string{"broker", "--listen", addr, "--advertised-listener", addr,
		"--data-dir", filepath.Join(dir, "data"), "--http-listen", "off",
		"--group-initial-rebalance-delay-ms", "0"}, extra...)
	logf, err := os.Create(b.logPath)
	if err != nil {
		return nil, err
	}
	b.cmd = exec.Command(brokerBinary(), args...)
	b.cmd.Stdout, b.cmd.Stderr = logf, logf
	b.cmd.Env = append(os.Environ(), "RUST_LOG=info")
	if err := b.cmd.Start(); err != nil {
		logf.Close()
		os.RemoveAll(dir)
		return nil, fmt.Errorf("start %s: %w", brokerBinary(), err)
	}
	b.exited = make(chan struct{})
	go func() { _ = b.cmd.Wait(); logf.Close(); close(b.exited) }()
	deadline := time.Now().Add(startTimeout)
	for time.Now().Before(deadline) {
		select {
		case <-b.exited:
			return nil, fmt.Errorf("broker exited during start-up:\n%s", b.logTail())
		default:
		}
		if code, closed, err := rawRequest(addr, 18, 0); err == nil && !closed && code == 0 {
			return b, nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	b.stop()
	return nil, fmt.Errorf("broker not ready after %s:\n%s", startTimeout, b.logTail())
}

func (b *broker) stop() {
	select {
	case <-b.exited:
	default:
		_ = b.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-b.exited:
		case <-time.After(stopTimeout):
			_ = b.cmd.Process.Kill()
			<-b.exited
		}
	}
	os.RemoveAll(b.dir)
}

func (b *broker) logTail() string {
	f, err := os.Open(b.logPath)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	var lines []string
	s := bufio.NewScanner(f)
	for s.Scan() {
		lines = append(lines, s.Text())
		if len(lines) > 80 {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n")
}

// rawRequest sends a header-v1 request with an empty body and returns the first error code of
// the reply, or closed=true when the broker closed the connection instead.
func rawRequest(addr string, apiKey, version int16) (code int16, closed bool, err error) {
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return 0, false, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	req := make([]byte, 14)
	binary.BigEndian.PutUint32(req[0:], 10)
	binary.BigEndian.PutUint16(req[4:], uint16(apiKey))
	binary.BigEndian.PutUint16(req[6:], uint16(version))
	binary.BigEndian.PutUint32(req[8:], 7)
	binary.BigEndian.PutUint16(req[12:], 0xffff)
	if _, err := c.Write(req); err != nil {
		return 0, false, err
	}
	var size [4]byte
	if _, err := io.ReadFull(c, size[:]); err != nil {
		return -1, true, nil
	}
	body := make([]byte, binary.BigEndian.Uint32(size[:]))
	if _, err := io.ReadFull(c, body); err != nil {
		return -1, true, nil
	}
	return int16(binary.BigEndian.Uint16(body[4:6])), false, nil
}

func TestMain(m *testing.M) {
	b, err := startBroker()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	shared = b
	code := m.Run()
	if code != 0 {
		fmt.Fprintf(os.Stderr, "--- broker log tail:\n%s\n", b.logTail())
	}
	b.stop()
	os.Exit(code)
}

var seq int

func unique(prefix string) string {
	seq++
	return fmt.Sprintf("%s-%d-%d", prefix, time.Now().UnixNano()%1_000_000_000, seq)
}
