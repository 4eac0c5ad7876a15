package sfgo

// franz-go (kgo + kadm) round trips against the real broker.

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func kclient(t *testing.T, opts ...kgo.Opt) *kgo.Client {
	c, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(shared.addr)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func createTopic(t *testing.T, adm *kadm.Client, topic string, partitions int32, cfg map[string]*string) {
	resp, err := adm.CreateTopic(ctxT(t, 20*time.Second), partitions, 1, cfg, topic)
	if err != nil || resp.Err != nil {
		t.Fatalf("create %s: %v %v", topic, err, resp.Err)
	}
}

func TestFranzProduceConsumeCodecs(t *testing.T) {
	codecs := map[string]kgo.CompressionCodec{"none": kgo.NoCompression(), "gzip": kgo.GzipCompression(),
		"snappy": kgo.SnappyCompression(), "lz4": kgo.Lz4Compression(), "zstd": kgo.ZstdCompression()}
	adm := kadm.NewClient(kclient(t))
	for name, codec := range codecs {
		t.Run(name, func(t *testing.T) {
			topic := unique("franz-" + name)
			createTopic(t, adm, topic, 3, nil)
			p := kclient(t, kgo.ProducerBatchCompression(codec), kgo.RequiredAcks(kgo.AllISRAcks()))
			const n = 300
			for i := 0; i < n; i++ {
				p.Produce(ctxT(t, 20*time.Second), &kgo.Record{Topic: topic, Key: []byte(fmt.Sprint(i % 5)),
					Value: []byte(fmt.Sprintf("v%d", i)), Headers: []kgo.RecordHeader{{Key: "h", Value: []byte(name)}}}, nil)
			}
			if err := p.Flush(ctxT(t, 20*time.Second)); err != nil {
				t.Fatal(err)
			}
			c := kclient(t, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
			got := 0
			ctx := ctxT(t, 30*time.Second)
			for got < n {
				fs := c.PollFetches(ctx)
				if ctx.Err() != nil {
					t.Fatalf("got %d of %d records", got, n)
				}
				fs.EachError(func(tp string, p int32, err error) { t.Fatalf("fetch %s/%d: %v", tp, p, err) })
				fs.EachRecord(func(r *kgo.Record) {
					if len(r.Headers) != 1 || string(r.Headers[0].Value) != name {
						t.Fatalf("headers %v", r.Headers)
					}
					got++
				})
			}
		})
	}
}

func TestFranzGroupAndAdmin(t *testing.T) {
	ctx := ctxT(t, 90*time.Second)
	adm := kadm.NewClient(kclient(t))
	topic, group := unique("franz-grp"), unique("g")
	createTopic(t, adm, topic, 4, nil)
	p := kclient(t, kgo.DefaultProduceTopic(topic))
	for i := 0; i < 100; i++ {
		if err := p.ProduceSync(ctx, kgo.StringRecord(fmt.Sprint(i))).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	for _, balancer := range []kgo.GroupBalancer{kgo.CooperativeStickyBalancer(), kgo.RangeBalancer()} {
		g := group + "-" + balancer.ProtocolName()
		c := kclient(t, kgo.ConsumeTopics(topic), kgo.ConsumerGroup(g), kgo.Balancers(balancer),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit())
		got := 0
		for got < 100 {
			fs := c.PollFetches(ctx)
			if ctx.Err() != nil {
				t.Fatalf("%s: got %d", g, got)
			}
			got += fs.NumRecords()
		}
		if err := c.CommitUncommittedOffsets(ctx); err != nil {
			t.Fatal(err)
		}
		lags, err := adm.Lag(ctx, g)
		if err != nil {
			t.Fatal(err)
		}
		if l := lags[g]; l.Error() != nil || l.Lag.Total() != 0 || l.State != "Stable" {
			t.Fatalf("%s lag %+v total %d state %s err %v", g, l.Lag, l.Lag.Total(), l.State, l.Error())
		}
		c.Close()
	}
	described, err := adm.DescribeGroups(ctx, group+"-range")
	if err != nil || described.Error() != nil {
		t.Fatal(err, described.Error())
	}
	if st := described[group+"-range"].State; st != "Empty" {
		t.Fatalf("state after close: %s", st)
	}
	// Alter and delete offsets, list offsets, delete records, configs, delete the group.
	g := group + "-range"
	commit := kadm.Offsets{}
	commit.AddOffset(topic, 0, 3, -1)
	if r, err := adm.CommitOffsets(ctx, g, commit); err != nil || r.Error() != nil {
		t.Fatal(err, r.Error())
	}
	fetched, err := adm.FetchOffsets(ctx, g)
	if err != nil || fetched.Error() != nil {
		t.Fatal(err)
	}
	if o, _ := fetched.Lookup(topic, 0); o.At != 3 {
		t.Fatalf("offset %+v", o)
	}
	end, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	total := int64(0)
	end.Each(func(o kadm.ListedOffset) { total += o.Offset })
	if total != 100 {
		t.Fatalf("end offsets sum %d", total)
	}
	// Delete the first 5 records of the fullest partition (franz-go's sticky partitioner may
	// leave some partitions empty; DeleteRecords past the end is OFFSET_OUT_OF_RANGE).
	full := int32(0)
	end.Each(func(o kadm.ListedOffset) {
		if f, _ := end.Lookup(topic, full); o.Offset > f.Offset {
			full = o.Partition
		}
	})
	del := kadm.Offsets{}
	del.AddOffset(topic, full, 5, -1)
	if r, err := adm.DeleteRecords(ctx, del); err != nil || r.Error() != nil {
		t.Fatal(err, r.Error())
	}
	start, _ := adm.ListStartOffsets(ctx, topic)
	if o, _ := start.Lookup(topic, full); o.Offset != 5 {
		t.Fatalf("start offset after DeleteRecords: %+v", o)
	}
	v := "86400000"
	if r, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "retention.ms", Value: &v}}, topic); err != nil || r[0].Err != nil {
		t.Fatal(err, r)
	}
	rc, err := adm.DescribeTopicConfigs(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	if c, err := rc.On(topic, nil); err != nil || configValue(c, "retention.ms") != v {
		t.Fatalf("retention.ms %v %v", configValue(c, "retention.ms"), err)
	}
	if r, err := adm.DeleteGroup(ctx, g); err != nil || r.Err != nil {
		t.Fatal(err, r.Err)
	}
	if _, err := adm.DeleteTopic(ctx, topic); err != nil {
		t.Fatal(err)
	}
}

func configValue(c kadm.ResourceConfig, name string) string {
	for _, e := range c.Configs {
		if e.Key == name && e.Value != nil {
			return *e.Value
		}
	}
	return ""
}

func TestFranzBadInput(t *testing.T) {
	ctx := ctxT(t, 60*time.Second)
	adm := kadm.NewClient(kclient(t))
	topic := unique("franz-big")
	limit := "1000"
	createTopic(t, adm, topic, 1, map[string]*string{"max.message.bytes": &limit})
	// Uncompressed: Kafka checks the batch as sent, and 5000 zero bytes compress below the limit.
	p := kclient(t, kgo.DefaultProduceTopic(topic), kgo.RecordRetries(0), kgo.ProducerBatchCompression(kgo.NoCompression()))
	err := p.ProduceSync(ctx, &kgo.Record{Value: make([]byte, 5000)}).FirstErr()
	if !errors.Is(err, kerr.MessageTooLarge) {
		t.Fatalf("want MESSAGE_TOO_LARGE, got %v", err)
	}
	if err := p.ProduceSync(ctx, kgo.StringRecord("small")).FirstErr(); err != nil {
		t.Fatalf("the broker keeps serving: %v", err)
	}
	// An unserved API key: Kafka closes the connection, and so do we; then a healthy request.
	if _, closed, _ := rawRequest(shared.addr, 34, 1); !closed {
		t.Fatal("AlterReplicaLogDirs (not served) should close the connection")
	}
	if code, closed, err := rawRequest(shared.addr, 18, 99); err != nil || closed || code != 35 {
		t.Fatalf("ApiVersions v99: code %d closed %v err %v, want UNSUPPORTED_VERSION (35)", code, closed, err)
	}
	if _, err := adm.ListTopics(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestFranzUnknownTopicAutoCreateOff(t *testing.T) {
	b, err := startBroker("--auto-create-topics", "false")
	if err != nil {
		t.Fatal(err)
	}
	defer b.stop()
	ctx := ctxT(t, 30*time.Second)
	c, err := kgo.NewClient(kgo.SeedBrokers(b.addr), kgo.RecordDeliveryTimeout(3*time.Second),
		kgo.RecordRetries(3), kgo.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	topic := unique("nosuch")
	err = c.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte("v")}).FirstErr()
	if !errors.Is(err, kerr.UnknownTopicOrPartition) {
		t.Fatalf("want UNKNOWN_TOPIC_OR_PARTITION, got %v", err)
	}
	adm := kadm.NewClient(c)
	md, err := adm.Metadata(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	if d := md.Topics[topic]; !errors.Is(d.Err, kerr.UnknownTopicOrPartition) {
		t.Fatalf("metadata for %s: %v", topic, d.Err)
	}
	if _, err := adm.ListBrokers(ctx); err != nil {
		t.Fatalf("the broker keeps serving: %v", err)
	}
}
