"""Produce/consume throughput with confluent-kafka (librdkafka): N messages of SIZE bytes into P partitions."""
import sys, time
from confluent_kafka import Producer, Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
bs, acks, n, size, parts = sys.argv[1], sys.argv[2], int(sys.argv[3]), 100, 10
topic = f"perf-acks{acks}-{int(time.time())}"
admin = AdminClient({'bootstrap.servers': bs})
admin.create_topics([NewTopic(topic, parts, 1)])[topic].result()
p = Producer({'bootstrap.servers': bs, 'acks': acks, 'linger.ms': 10, 'batch.num.messages': 2000,
              'batch.size': 2000 * 200, 'queue.buffering.max.messages': 2000000, 'enable.idempotence': False})
payload = b'x' * size
t0 = time.time()
for i in range(n):
    p.produce(topic, payload, partition=i % parts)
    if i % 100000 == 0:
        p.poll(0)
left = p.flush(120)
t1 = time.time()
assert left == 0
print(f"produce acks={acks}: {n} msgs in {t1-t0:.2f}s = {n/(t1-t0):,.0f} msg/s ({n*size/(t1-t0)/1e6:.1f} MB/s)")
c = Consumer({'bootstrap.servers': bs, 'group.id': topic, 'enable.auto.commit': False,
              'fetch.max.bytes': 52428800, 'max.partition.fetch.bytes': 10485760})
c.assign([TopicPartition(topic, i, 0) for i in range(parts)])
got = 0
t0 = time.time()
while got < n and time.time() - t0 < 120:
    msgs = c.consume(10000, 1.0)
    got += sum(1 for m in msgs if not m.error())
t1 = time.time()
print(f"consume: {got} msgs in {t1-t0:.2f}s = {got/(t1-t0):,.0f} msg/s")
c.close()
