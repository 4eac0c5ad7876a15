package sfgo

// IBM/sarama round trips against the real broker.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
)

func saramaConfig() *sarama.Config {
	c := sarama.NewConfig()
	c.Version = sarama.V3_6_0_0
	c.Producer.Return.Successes = true
	c.Producer.RequiredAcks = sarama.WaitForAll
	c.Consumer.Offsets.Initial = sarama.OffsetOldest
	c.Net.DialTimeout = 5 * time.Second
	c.Metadata.Retry.Max = 2
	return c
}

func TestSaramaProduceConsume(t *testing.T) {
	for _, codec := range []sarama.CompressionCodec{sarama.CompressionNone, sarama.CompressionGZIP,
		sarama.CompressionSnappy, sarama.CompressionLZ4, sarama.CompressionZSTD} {
		t.Run(codec.String(), func(t *testing.T) {
			cfg := saramaConfig()
			cfg.Producer.Compression = codec
			cfg.Producer.Idempotent = codec == sarama.CompressionNone
			if cfg.Producer.Idempotent {
				cfg.Net.MaxOpenRequests = 1
			}
			admin, err := sarama.NewClusterAdmin([]string{shared.addr}, cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer admin.Close()
			topic := unique("sarama-" + codec.String())
			if err := admin.CreateTopic(topic, &sarama.TopicDetail{NumPartitions: 2, ReplicationFactor: 1}, false); err != nil {
				t.Fatal(err)
			}
			p, err := sarama.NewSyncProducer([]string{shared.addr}, cfg)
			if err != nil {
				t.Fatal(err)
			}
			var msgs []*sarama.ProducerMessage
			for i := 0; i < 100; i++ {
				msgs = append(msgs, &sarama.ProducerMessage{Topic: topic, Key: sarama.StringEncoder(fmt.Sprint(i % 3)),
					Value: sarama.StringEncoder(fmt.Sprint(i))})
			}
			if err := p.SendMessages(msgs); err != nil {
				t.Fatal(err)
			}
			p.Close()
			c, err := sarama.NewConsumer([]string{shared.addr}, cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			got := 0
			for part := int32(0); part < 2; part++ {
				pc, err := c.ConsumePartition(topic, part, sarama.OffsetOldest)
				if err != nil {
					t.Fatal(err)
				}
				hw := pc.HighWaterMarkOffset()
				for n := int64(0); n < hw; n++ {
					select {
					case <-pc.Messages():
						got++
					case <-time.After(20 * time.Second):
						t.Fatalf("partition %d: timed out after %d", part, n)
					}
				}
				pc.Close()
			}
			if got != 100 {
				t.Fatalf("consumed %d", got)
			}
		})
	}
}

type handler struct {
	mu    sync.Mutex
	seen  map[string]bool
	want  int
	done  chan struct{}
	close sync.Once
}

func (h *handler) Setup(sarama.ConsumerGroupSession) error   { return nil }
func (h *handler) Cleanup(sarama.ConsumerGroupSession) error { return nil }
func (h *handler) ConsumeClaim(s sarama.ConsumerGroupSession, c sarama.ConsumerGroupClaim) error {
	for m := range c.Messages() {
		s.MarkMessage(m, "")
		h.mu.Lock()
		h.seen[string(m.Value)] = true
		if len(h.seen) >= h.want {
			h.close.Do(func() { close(h.done) })
		}
		h.mu.Unlock()
	}
	return nil
}

func TestSaramaConsumerGroupAndAdmin(t *testing.T) {
	cfg := saramaConfig()
	cfg.Consumer.Offsets.AutoCommit.Interval = 100 * time.Millisecond
	cfg.Consumer.Group.Rebalance.GroupStrategies = []sarama.BalanceStrategy{sarama.NewBalanceStrategyRoundRobin()}
	admin, err := sarama.NewClusterAdmin([]string{shared.addr}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	topic, group := unique("sarama-grp"), unique("g")
	if err := admin.CreateTopic(topic, &sarama.TopicDetail{NumPartitions: 3, ReplicationFactor: 1}, false); err != nil {
		t.Fatal(err)
	}
	p, err := sarama.NewSyncProducer([]string{shared.addr}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 60; i++ {
		if _, _, err := p.SendMessage(&sarama.ProducerMessage{Topic: topic, Value: sarama.StringEncoder(fmt.Sprint(i))}); err != nil {
			t.Fatal(err)
		}
	}
	p.Close()
	cg, err := sarama.NewConsumerGroup([]string{shared.addr}, group, cfg)
	if err != nil {
		t.Fatal(err)
	}
	h := &handler{seen: map[string]bool{}, want: 60, done: make(chan struct{})}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	go func() {
		for ctx.Err() == nil {
			if err := cg.Consume(ctx, []string{topic}, h); err != nil && !errors.Is(err, sarama.ErrClosedConsumerGroup) {
				t.Logf("consume: %v", err)
			}
		}
	}()
	select {
	case <-h.done:
	case <-ctx.Done():
		t.Fatalf("group consumed %d of 60", len(h.seen))
	}
	groups, err := admin.ListConsumerGroups()
	if err != nil || groups[group] != "consumer" {
		t.Fatalf("ListConsumerGroups: %v %v", groups, err)
	}
	desc, err := admin.DescribeConsumerGroups([]string{group})
	if err != nil || len(desc) != 1 || desc[0].State != "Stable" || len(desc[0].Members) != 1 {
		t.Fatalf("DescribeConsumerGroups: %+v %v", desc, err)
	}
	cancel()
	cg.Close()
	offs, err := admin.ListConsumerGroupOffsets(group, nil)
	if err != nil {
		t.Fatal(err)
	}
	var committed int64
	for _, b := range offs.Blocks[topic] {
		committed += b.Offset
	}
	if committed != 60 {
		t.Fatalf("committed offsets sum %d, want 60", committed)
	}
	if err := admin.DeleteConsumerGroupOffset(group, topic, 0); err != nil {
		t.Fatal(err)
	}
	if err := admin.DeleteConsumerGroup(group); err != nil {
		t.Fatal(err)
	}
	md, err := admin.DescribeTopics([]string{topic})
	if err != nil || len(md) != 1 || len(md[0].Partitions) != 3 {
		t.Fatalf("DescribeTopics %+v %v", md, err)
	}
	if err := admin.CreatePartitions(topic, 5, nil, false); err != nil {
		t.Fatal(err)
	}
	if err := admin.DeleteRecords(topic, map[int32]int64{0: 1}); err != nil {
		t.Fatal(err)
	}
	v := "3600000"
	if err := admin.AlterConfig(sarama.TopicResource, topic, map[string]*string{"retention.ms": &v}, false); err != nil {
		t.Fatal(err)
	}
	entries, err := admin.DescribeConfig(sarama.ConfigResource{Type: sarama.TopicResource, Name: topic})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, e := range entries {
		found = found || (e.Name == "retention.ms" && e.Value == v)
	}
	if !found {
		t.Fatal("retention.ms not altered")
	}
	brokers, ctrl, err := admin.DescribeCluster()
	if err != nil || len(brokers) != 1 || ctrl != brokers[0].ID() {
		t.Fatalf("DescribeCluster %v %d %v", brokers, ctrl, err)
	}
	if err := admin.DeleteTopic(topic); err != nil {
		t.Fatal(err)
	}
}

func TestSaramaMessageTooLarge(t *testing.T) {
	cfg := saramaConfig()
	cfg.Producer.Retry.Max = 0
	admin, err := sarama.NewClusterAdmin([]string{shared.addr}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	topic := unique("sarama-big")
	limit := "1000"
	if err := admin.CreateTopic(topic, &sarama.TopicDetail{NumPartitions: 1, ReplicationFactor: 1,
		ConfigEntries: map[string]*string{"max.message.bytes": &limit}}, false); err != nil {
		t.Fatal(err)
	}
	p, err := sarama.NewSyncProducer([]string{shared.addr}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	_, _, err = p.SendMessage(&sarama.ProducerMessage{Topic: topic, Value: sarama.ByteEncoder(make([]byte, 5000))})
	if !errors.Is(err, sarama.ErrMessageSizeTooLarge) {
		t.Fatalf("want MESSAGE_TOO_LARGE, got %v", err)
	}
	if _, _, err := p.SendMessage(&sarama.ProducerMessage{Topic: topic, Value: sarama.StringEncoder("ok")}); err != nil {
		t.Fatalf("the broker keeps serving: %v", err)
	}
}
