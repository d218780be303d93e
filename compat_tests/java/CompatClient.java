import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Base64;
import java.util.Collection;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.ListOffsetsResult;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.consumer.OffsetAndTimestamp;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeaders;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * Drives the unmodified Java Kafka client against a Millrace server and prints one JSON object per line
 * for compat_tests/test_java_clients.py to check. Usage:
 *   java CompatClient BOOTSTRAP WORKDIR TOPIC_PREFIX SCENARIO...
 * Scenarios: roundtrip:CODEC (producer with default settings + the codec, then a consumer without a group
 * using assign/seekToBeginning/seek/poll), bulk:N (N small records through the default pipelined idempotent
 * producer, read back), write:TOPIC:PARTITION:CODEC and
 * read:TOPIC:COUNT (records shared with other clients), group (subscribe, commitSync, resume in a new consumer),
 * admin (createTopics, describeTopics, listOffsets earliest/latest/forTimestamp/maxTimestamp, the consumer's
 * beginningOffsets/endOffsets/offsetsForTimes, deleteTopics),
 * admin_groups (describeConsumerGroups with a live member, what kafka-consumer-groups --reset-offsets and
 * --delete-offsets call (listOffsets, alterConsumerGroupOffsets, deleteConsumerGroupOffsets), listConsumerGroupOffsets,
 * listConsumerGroups),
 * continuity:TOPIC:SECONDS:RATE:CONSUMERS (an existing topic: CONSUMERS group members subscribe, then the default
 * producer sends RATE keyed records/s for SECONDS while another process scales the topic's stream; prints
 * "producing" when it starts, then every send's partition/offset and every record consumed, in order).
 * Records to produce come from WORKDIR/records.tsv (key, value, then header name/value pairs; "=base64" or "-" for null).
 * Each scenario ends with {"scenario":..,"event":"done"} or {"scenario":..,"event":"error",..}.
 */
public class CompatClient {
    static final int MAX_REQUEST = 4 * 1024 * 1024;
    static final Duration POLL_BUDGET = Duration.ofSeconds(30);
    static String bootstrap;
    static Path workdir;
    static String prefix;

    public static void main(String[] args) throws Exception {
        bootstrap = args[0];
        workdir = Path.of(args[1]);
        prefix = args[2];
        JsonOut.emit("-", "start", "clientVersion", org.apache.kafka.common.utils.AppInfoParser.getVersion());
        for (int i = 3; i < args.length; i++) {
            String scenario = args[i];
            long t0 = System.nanoTime();
            try {
                if (scenario.startsWith("roundtrip:")) {
                    roundtrip(scenario, scenario.substring("roundtrip:".length()));
                } else if (scenario.startsWith("write:")) {
                    String[] parts = scenario.split(":");
                    write(scenario, parts[1], Integer.parseInt(parts[2]), parts[3]);
                } else if (scenario.startsWith("read:")) {
                    String[] parts = scenario.split(":");
                    read(scenario, parts[1], Integer.parseInt(parts[2]));
                } else if (scenario.startsWith("bulk:")) {
                    bulk(scenario, Integer.parseInt(scenario.substring("bulk:".length())));
                } else if (scenario.equals("group")) {
                    group(scenario);
                } else if (scenario.equals("admin")) {
                    admin(scenario);
                } else if (scenario.equals("admin_groups")) {
                    adminGroups(scenario);
                } else if (scenario.startsWith("continuity:")) {
                    String[] parts = scenario.split(":");
                    continuity(scenario, parts[1], Double.parseDouble(parts[2]), Integer.parseInt(parts[3]),
                            Integer.parseInt(parts[4]));
                } else {
                    throw new IllegalArgumentException("unknown scenario " + scenario);
                }
                JsonOut.emit(scenario, "done", "ms", (System.nanoTime() - t0) / 1_000_000);
            } catch (Throwable e) {
                StringBuilder trace = new StringBuilder(e.toString());
                for (Throwable c = e.getCause(); c != null; c = c.getCause()) {
                    trace.append(" <- caused by ").append(c);
                }
                JsonOut.emit(scenario, "error", "error", trace.toString(), "ms", (System.nanoTime() - t0) / 1_000_000);
            }
        }
        JsonOut.emit("-", "exit");
        System.out.flush();
        System.exit(0);  // never wait on a client's non-daemon threads
    }

    // ---- scenarios ----

    static void roundtrip(String scenario, String codec) throws Exception {
        String topic = prefix + "-rt-" + codec;
        List<String[]> recs = readRecords("records.tsv");
        Properties pp = producerProps();
        pp.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, codec);
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(pp)) {
            produceAndReport(producer, topic, recs, scenario);
        }
        // No group at all: assign every partition, seekToBeginning, poll.
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(consumerProps(null))) {
            List<TopicPartition> tps = new ArrayList<>();
            for (PartitionInfo pi : consumer.partitionsFor(topic)) {
                tps.add(new TopicPartition(topic, pi.partition()));
            }
            consumer.assign(tps);
            consumer.seekToBeginning(tps);
            for (ConsumerRecord<byte[], byte[]> rec : pollAtLeast(consumer, recs.size())) {
                emitRecord(scenario, "consumed", rec);
            }
            // seek(): re-read partition 0 from offset 2 (if it has that many records).
            TopicPartition p0 = new TopicPartition(topic, 0);
            long end = consumer.endOffsets(List.of(p0)).get(p0);
            consumer.assign(List.of(p0));
            consumer.seek(p0, Math.min(2, end));
            JsonOut.emit(scenario, "seek", "partition", 0, "offset", Math.min(2, end), "end", end);
            for (ConsumerRecord<byte[], byte[]> rec : pollAtLeast(consumer, (int) Math.max(0, end - 2))) {
                emitRecord(scenario, "reread", rec);
            }
        }
    }

    /** Writes WORKDIR/records.tsv into PARTITION of an existing topic with the default producer and CODEC. */
    static void write(String scenario, String topic, int partition, String codec) throws Exception {
        Properties pp = producerProps();
        pp.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, codec);
        pp.put(ProducerConfig.LINGER_MS_CONFIG, "20");
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(pp)) {
            List<Future<RecordMetadata>> futures = new ArrayList<>();
            for (String[] r : readRecords("records.tsv")) {
                futures.add(producer.send(toRecord(topic, partition, null, r)));
            }
            producer.flush();
            for (int i = 0; i < futures.size(); i++) {
                RecordMetadata m = futures.get(i).get(30, TimeUnit.SECONDS);
                JsonOut.emit(scenario, "produced", "i", i, "partition", m.partition(), "offset", m.offset());
            }
        }
    }

    /** Reads COUNT records of an existing topic (written by other clients) from the beginning, no group. */
    static void read(String scenario, String topic, int count) {
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(consumerProps(null))) {
            List<TopicPartition> tps = new ArrayList<>();
            for (PartitionInfo pi : consumer.partitionsFor(topic)) {
                tps.add(new TopicPartition(topic, pi.partition()));
            }
            consumer.assign(tps);
            consumer.seekToBeginning(tps);
            for (ConsumerRecord<byte[], byte[]> rec : pollAtLeast(consumer, count)) {
                emitRecord(scenario, "consumed", rec);
            }
        }
    }

    /** Many small records through the default (idempotent, pipelined: up to 5 requests in flight) producer. */
    static void bulk(String scenario, int count) throws Exception {
        String topic = prefix + "-bulk";
        int[] partitions = new int[count];
        long[] offsets = new long[count];
        Properties pp = producerProps();
        pp.put(ProducerConfig.LINGER_MS_CONFIG, "5");
        pp.put(ProducerConfig.BATCH_SIZE_CONFIG, "4096");
        pp.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, "lz4");
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(pp)) {
            JsonOut.emit(scenario, "producer_config", "idempotence",
                    new ProducerConfig(pp).getBoolean(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG),
                    "acks", new ProducerConfig(pp).getString(ProducerConfig.ACKS_CONFIG));
            List<Future<RecordMetadata>> futures = new ArrayList<>(count);
            for (int i = 0; i < count; i++) {
                futures.add(producer.send(new ProducerRecord<>(topic, ("k" + (i % 17)).getBytes(StandardCharsets.UTF_8),
                        ("b-" + i).getBytes(StandardCharsets.UTF_8))));
            }
            producer.flush();
            for (int i = 0; i < count; i++) {
                RecordMetadata m = futures.get(i).get(30, TimeUnit.SECONDS);
                partitions[i] = m.partition();
                offsets[i] = m.offset();
            }
        }
        JsonOut.emit(scenario, "produced_all", "partitions", toList(partitions), "offsets", toList(offsets));
        List<Integer> cp = new ArrayList<>();
        List<Long> co = new ArrayList<>();
        List<Integer> ci = new ArrayList<>();
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(consumerProps(null))) {
            List<TopicPartition> tps = new ArrayList<>();
            for (PartitionInfo pi : consumer.partitionsFor(topic)) {
                tps.add(new TopicPartition(topic, pi.partition()));
            }
            consumer.assign(tps);
            consumer.seekToBeginning(tps);
            for (ConsumerRecord<byte[], byte[]> rec : pollAtLeast(consumer, count)) {
                cp.add(rec.partition());
                co.add(rec.offset());
                ci.add(Integer.parseInt(new String(rec.value(), StandardCharsets.UTF_8).substring(2)));
            }
        }
        JsonOut.emit(scenario, "consumed_all", "partitions", cp, "offsets", co, "indexes", ci);
    }

    static List<Object> toList(int[] a) {
        List<Object> out = new ArrayList<>(a.length);
        for (int x : a) out.add(x);
        return out;
    }

    static List<Object> toList(long[] a) {
        List<Object> out = new ArrayList<>(a.length);
        for (long x : a) out.add(x);
        return out;
    }

    static void group(String scenario) throws Exception {
        String topic = prefix + "-group";
        String group = prefix + "-group";
        List<String[]> recs = readRecords("group.tsv");
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(producerProps())) {
            produceAndReport(producer, topic, recs, scenario);
        }
        int half = recs.size() / 2;
        int firstCount = 0;
        Properties cp = consumerProps(group);
        cp.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, "5");
        try (KafkaConsumer<byte[], byte[]> first = new KafkaConsumer<>(cp)) {
            first.subscribe(List.of(topic));
            for (ConsumerRecord<byte[], byte[]> rec : pollAtLeast(first, half)) {
                emitRecord(scenario, "first", rec);
                firstCount++;
            }
            first.commitSync(Duration.ofSeconds(20));
            Map<TopicPartition, OffsetAndMetadata> committed = first.committed(first.assignment(), Duration.ofSeconds(20));
            for (Map.Entry<TopicPartition, OffsetAndMetadata> e : byPartition(committed).entrySet()) {
                JsonOut.emit(scenario, "committed", "partition", e.getKey().partition(),
                        "offset", e.getValue() == null ? -1 : e.getValue().offset());
            }
        }
        try (KafkaConsumer<byte[], byte[]> second = new KafkaConsumer<>(consumerProps(group))) {
            second.subscribe(List.of(topic));
            // It should pick up exactly at the commits: the rest, and (checked in Python) nothing before.
            for (ConsumerRecord<byte[], byte[]> rec : pollAtLeast(second, recs.size() - firstCount)) {
                emitRecord(scenario, "second", rec);
            }
            second.commitSync(Duration.ofSeconds(20));
        }
    }

    static void admin(String scenario) throws Exception {
        String topic = prefix + "-admin";
        try (Admin admin = Admin.create(adminProps())) {
            admin.createTopics(List.of(new NewTopic(topic, 5, (short) 1))).all().get(20, TimeUnit.SECONDS);
            JsonOut.emit(scenario, "created", "topic", topic);
            Map<String, TopicDescription> desc = describe(admin, topic);
            TopicDescription d = desc.get(topic);
            List<Integer> ids = new ArrayList<>();
            d.partitions().forEach(p -> ids.add(p.partition()));
            JsonOut.emit(scenario, "described", "name", d.name(), "partitions", ids,
                    "leaders", d.partitions().stream().map(p -> p.leader() == null ? -1 : p.leader().id()).toList());

            long base = System.currentTimeMillis() - 60_000;
            JsonOut.emit(scenario, "base_ts", "ts", base);
            try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(producerProps())) {
                for (int i = 0; i < 6; i++) {
                    RecordMetadata m = producer.send(new ProducerRecord<>(topic, 1, base + i * 1000L, null,
                            ("v" + i).getBytes(StandardCharsets.UTF_8))).get(30, TimeUnit.SECONDS);
                    JsonOut.emit(scenario, "produced", "partition", m.partition(), "offset", m.offset(), "ts", m.timestamp());
                }
            }
            TopicPartition p0 = new TopicPartition(topic, 0);
            TopicPartition p1 = new TopicPartition(topic, 1);
            listOffsets(scenario, admin, "earliest", Map.of(p0, OffsetSpec.earliest(), p1, OffsetSpec.earliest()));
            listOffsets(scenario, admin, "latest", Map.of(p0, OffsetSpec.latest(), p1, OffsetSpec.latest()));
            listOffsets(scenario, admin, "ts", Map.of(p1, OffsetSpec.forTimestamp(base + 2500)));
            listOffsets(scenario, admin, "ts_after_all", Map.of(p1, OffsetSpec.forTimestamp(base + 60_000)));
            listOffsets(scenario, admin, "max_ts", Map.of(p1, OffsetSpec.maxTimestamp()));
            // The same through the consumer (Spark's older offset reader, and many applications).
            try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(consumerProps(null))) {
                List<TopicPartition> tps = List.of(p0, p1);
                byPartition(consumer.beginningOffsets(tps)).forEach((tp, o) ->
                        JsonOut.emit(scenario, "consumer_offsets", "spec", "beginning", "partition", tp.partition(), "offset", o));
                byPartition(consumer.endOffsets(tps)).forEach((tp, o) ->
                        JsonOut.emit(scenario, "consumer_offsets", "spec", "end", "partition", tp.partition(), "offset", o));
                Map<TopicPartition, OffsetAndTimestamp> times = consumer.offsetsForTimes(Map.of(p1, base + 2500L));
                OffsetAndTimestamp at = times.get(p1);
                JsonOut.emit(scenario, "consumer_offsets", "spec", "ts", "partition", 1,
                        "offset", at == null ? -1 : at.offset(), "timestamp", at == null ? -1 : at.timestamp());
            }

            admin.deleteTopics(List.of(topic)).all().get(20, TimeUnit.SECONDS);
            Set<String> names = admin.listTopics().names().get(20, TimeUnit.SECONDS);
            JsonOut.emit(scenario, "deleted", "still_listed", names.contains(topic));
        }
    }

    static void adminGroups(String scenario) throws Exception {
        String topic = prefix + "-admin-groups";
        String group = prefix + "-admin-group";
        try (Admin admin = Admin.create(adminProps())) {
            admin.createTopics(List.of(new NewTopic(topic, 5, (short) 1))).all().get(20, TimeUnit.SECONDS);
            try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(producerProps())) {
                for (int i = 0; i < 6; i++) {
                    producer.send(new ProducerRecord<>(topic, 1, null, ("v" + i).getBytes(StandardCharsets.UTF_8)))
                            .get(30, TimeUnit.SECONDS);
                }
            }
            TopicPartition p1 = new TopicPartition(topic, 1);
            // A live group member: describeConsumerGroups while it is there, then its committed offsets.
            try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(consumerProps(group))) {
                consumer.subscribe(List.of(topic));
                pollAtLeast(consumer, 6);
                consumer.commitSync(Duration.ofSeconds(20));
                ConsumerGroupDescription g = admin.describeConsumerGroups(List.of(group)).all()
                        .get(20, TimeUnit.SECONDS).get(group);
                List<Integer> assigned = new ArrayList<>();
                g.members().forEach(m -> m.assignment().topicPartitions().forEach(tp -> assigned.add(tp.partition())));
                assigned.sort(null);
                JsonOut.emit(scenario, "group", "id", g.groupId(), "state", String.valueOf(g.state()), "members", g.members().size(),
                        "assigned", assigned, "simple", g.isSimpleConsumerGroup());
                // kafka-consumer-groups --delete-offsets on a topic the live group subscribes to: refused.
                String refused = "none";
                try {
                    admin.deleteConsumerGroupOffsets(group, Set.of(p1)).all().get(20, TimeUnit.SECONDS);
                } catch (java.util.concurrent.ExecutionException e) {
                    refused = e.getCause().getClass().getSimpleName();
                }
                JsonOut.emit(scenario, "delete_offsets_while_subscribed", "error", refused);
            }
            // kafka-consumer-groups --reset-offsets on the now empty group, as the tool does it: the group's
            // state, the target offsets from listOffsets (--to-earliest; --to-datetime; --shift-by -2 from the
            // committed offset), alterConsumerGroupOffsets, then listConsumerGroupOffsets to show them.
            String state = String.valueOf(admin.describeConsumerGroups(List.of(group)).all().get(20, TimeUnit.SECONDS)
                    .get(group).state());
            long earliest = admin.listOffsets(Map.of(p1, OffsetSpec.earliest())).partitionResult(p1)
                    .get(20, TimeUnit.SECONDS).offset();
            admin.alterConsumerGroupOffsets(group, Map.of(p1, new OffsetAndMetadata(earliest))).all()
                    .get(20, TimeUnit.SECONDS);
            long afterEarliest = admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata()
                    .get(20, TimeUnit.SECONDS).get(p1).offset();
            long future = admin.listOffsets(Map.of(p1, OffsetSpec.forTimestamp(System.currentTimeMillis() + 3_600_000L)))
                    .partitionResult(p1).get(20, TimeUnit.SECONDS).offset();
            long latest = admin.listOffsets(Map.of(p1, OffsetSpec.latest())).partitionResult(p1)
                    .get(20, TimeUnit.SECONDS).offset();
            admin.alterConsumerGroupOffsets(group, Map.of(p1, new OffsetAndMetadata(latest - 2))).all()
                    .get(20, TimeUnit.SECONDS);
            long afterShift = admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata()
                    .get(20, TimeUnit.SECONDS).get(p1).offset();
            JsonOut.emit(scenario, "reset_offsets", "state", state, "earliest", earliest, "after_earliest", afterEarliest,
                    "for_future_time", future, "latest", latest, "after_shift", afterShift);
            // A consumer of the group resumes at the reset offset.
            try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(consumerProps(group))) {
                consumer.subscribe(List.of(topic));
                List<ConsumerRecord<byte[], byte[]>> resumed = pollAtLeast(consumer, 2);
                JsonOut.emit(scenario, "resumed", "first_offset", resumed.get(0).offset(), "count", resumed.size());
            }
            // kafka-consumer-groups --delete-offsets on the empty group: its offsets of the partition go.
            admin.deleteConsumerGroupOffsets(group, Set.of(p1)).all().get(20, TimeUnit.SECONDS);
            Map<TopicPartition, OffsetAndMetadata> left = admin.listConsumerGroupOffsets(group)
                    .partitionsToOffsetAndMetadata().get(20, TimeUnit.SECONDS);
            JsonOut.emit(scenario, "offsets_deleted", "partition_1_left", left.containsKey(p1) && left.get(p1) != null);
            admin.alterConsumerGroupOffsets(group, Map.of(p1, new OffsetAndMetadata(6))).all().get(20, TimeUnit.SECONDS);
            Map<TopicPartition, OffsetAndMetadata> offsets = admin.listConsumerGroupOffsets(group)
                    .partitionsToOffsetAndMetadata().get(20, TimeUnit.SECONDS);
            for (Map.Entry<TopicPartition, OffsetAndMetadata> e : byPartition(offsets).entrySet()) {
                JsonOut.emit(scenario, "group_offset", "partition", e.getKey().partition(), "offset", e.getValue().offset());
            }
            Collection<String> listed = new ArrayList<>();
            admin.listConsumerGroups().all().get(20, TimeUnit.SECONDS).forEach(l -> listed.add(l.groupId()));
            JsonOut.emit(scenario, "groups_listed", "contains", listed.contains(group));

        }
    }

    /**
     * A producer with default settings and a consumer group running side by side for a fixed time, while the
     * topic's segments split and merge underneath (driven from outside). Consumers commit what they processed
     * when partitions are revoked, so a rebalance (if any) neither loses nor repeats records.
     */
    static void continuity(String scenario, String topic, double seconds, int rate, int consumers) throws Exception {
        String group = topic + "-group";
        List<long[]> consumed = new ArrayList<>();  // {partition, offset, index}, in the order polled
        List<String> consumerErrors = new ArrayList<>();
        java.util.concurrent.atomic.AtomicBoolean stop = new java.util.concurrent.atomic.AtomicBoolean();
        java.util.concurrent.atomic.AtomicInteger assigned = new java.util.concurrent.atomic.AtomicInteger();
        java.util.concurrent.atomic.AtomicInteger rebalances = new java.util.concurrent.atomic.AtomicInteger();
        List<Thread> threads = new ArrayList<>();
        for (int c = 0; c < consumers; c++) {
            Thread t = new Thread(() -> {
                Properties cp = consumerProps(group);
                cp.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, "500");
                try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(cp)) {
                    consumer.subscribe(List.of(topic), new org.apache.kafka.clients.consumer.ConsumerRebalanceListener() {
                        public void onPartitionsRevoked(Collection<TopicPartition> parts) {
                            assigned.addAndGet(-parts.size());
                            rebalances.incrementAndGet();
                            if (!parts.isEmpty()) {
                                consumer.commitSync(Duration.ofSeconds(20));
                            }
                        }

                        public void onPartitionsAssigned(Collection<TopicPartition> parts) {
                            assigned.addAndGet(parts.size());
                        }
                    });
                    while (!stop.get()) {
                        try {
                            for (ConsumerRecord<byte[], byte[]> rec : consumer.poll(Duration.ofMillis(200))) {
                                long index = Long.parseLong(new String(rec.value(), StandardCharsets.UTF_8).substring(2));
                                synchronized (consumed) {
                                    consumed.add(new long[] {rec.partition(), rec.offset(), index});
                                }
                            }
                        } catch (Exception e) {
                            synchronized (consumerErrors) {
                                consumerErrors.add(e.toString());
                            }
                        }
                    }
                    consumer.commitSync(Duration.ofSeconds(20));
                } catch (Exception e) {
                    synchronized (consumerErrors) {
                        consumerErrors.add(e.toString());
                    }
                }
            }, "consumer-" + c);
            t.start();
            threads.add(t);
        }
        int partitionCount;
        try (Admin admin = Admin.create(adminProps())) {
            partitionCount = describe(admin, topic).get(topic).partitions().size();
        }
        long readyBy = System.nanoTime() + 30_000_000_000L;
        while (assigned.get() < partitionCount && System.nanoTime() < readyBy) {
            Thread.sleep(50);
        }
        JsonOut.emit(scenario, "group_ready", "assigned", assigned.get(), "partitions", partitionCount);

        int total = (int) (seconds * rate);
        int[] partitions = new int[total];
        long[] offsets = new long[total];
        java.util.Arrays.fill(offsets, -1);
        List<String> sendErrors = new ArrayList<>();
        Properties pp = producerProps();
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(pp)) {
            JsonOut.emit(scenario, "producing", "idempotence", new ProducerConfig(pp).getBoolean(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG),
                    "acks", new ProducerConfig(pp).getString(ProducerConfig.ACKS_CONFIG), "records", total);
            long t0 = System.nanoTime();
            for (int i = 0; i < total; i++) {
                long due = t0 + (long) (i * 1e9 / rate);
                long wait = due - System.nanoTime();
                if (wait > 1_000_000) {
                    Thread.sleep(wait / 1_000_000);
                }
                final int index = i;
                producer.send(new ProducerRecord<>(topic, ("k" + (i % 256)).getBytes(StandardCharsets.UTF_8),
                        ("c-" + i).getBytes(StandardCharsets.UTF_8)), (m, e) -> {
                            if (e != null) {
                                synchronized (sendErrors) {
                                    sendErrors.add(index + ": " + e);
                                }
                            } else {
                                partitions[index] = m.partition();
                                offsets[index] = m.offset();
                            }
                        });
            }
            producer.flush();
        }
        JsonOut.emit(scenario, "produced_all", "partitions", toList(partitions), "offsets", toList(offsets),
                "errors", sendErrors.subList(0, Math.min(20, sendErrors.size())), "error_count", sendErrors.size());

        int acked = 0;
        for (long o : offsets) {
            if (o >= 0) acked++;
        }
        long drainBy = System.nanoTime() + 30_000_000_000L;
        long extraUntil = -1;
        while (System.nanoTime() < drainBy) {
            int have;
            synchronized (consumed) {
                have = consumed.size();
            }
            if (have >= acked) {
                if (extraUntil < 0) {
                    extraUntil = System.nanoTime() + 1_000_000_000L;  // a second more, to catch duplicates
                } else if (System.nanoTime() >= extraUntil) {
                    break;
                }
            }
            Thread.sleep(50);
        }
        stop.set(true);
        for (Thread t : threads) {
            t.join(30_000);
        }
        List<Object> cp = new ArrayList<>();
        List<Object> co = new ArrayList<>();
        List<Object> ci = new ArrayList<>();
        synchronized (consumed) {
            for (long[] r : consumed) {
                cp.add(r[0]);
                co.add(r[1]);
                ci.add(r[2]);
            }
        }
        synchronized (consumerErrors) {
            JsonOut.emit(scenario, "consumed_all", "partitions", cp, "offsets", co, "indexes", ci,
                    "errors", consumerErrors.subList(0, Math.min(20, consumerErrors.size())),
                    "error_count", consumerErrors.size(), "rebalances", rebalances.get());
        }
    }

    // ---- helpers ----

    static Map<String, TopicDescription> describe(Admin admin, String topic) throws Exception {
        // allTopicNames() exists in 3.1+ and 4.x (all() was removed in 4.0).
        return admin.describeTopics(List.of(topic)).allTopicNames().get(20, TimeUnit.SECONDS);
    }

    static void listOffsets(String scenario, Admin admin, String label, Map<TopicPartition, OffsetSpec> specs)
            throws Exception {
        Map<TopicPartition, ListOffsetsResult.ListOffsetsResultInfo> res = admin.listOffsets(specs).all()
                .get(20, TimeUnit.SECONDS);
        for (Map.Entry<TopicPartition, ListOffsetsResult.ListOffsetsResultInfo> e : byPartition(res).entrySet()) {
            JsonOut.emit(scenario, "offsets", "spec", label, "partition", e.getKey().partition(),
                    "offset", e.getValue().offset(), "timestamp", e.getValue().timestamp());
        }
    }

    static <V> Map<TopicPartition, V> byPartition(Map<TopicPartition, V> m) {
        Map<TopicPartition, V> out = new TreeMap<>((a, b) -> Integer.compare(a.partition(), b.partition()));
        out.putAll(m);
        return out;
    }

    static List<ConsumerRecord<byte[], byte[]>> pollAtLeast(KafkaConsumer<byte[], byte[]> c, int want) {
        List<ConsumerRecord<byte[], byte[]>> got = new ArrayList<>();
        long deadline = System.nanoTime() + POLL_BUDGET.toNanos();
        long extraUntil = -1;
        while (System.nanoTime() < deadline) {
            for (ConsumerRecord<byte[], byte[]> r : c.poll(Duration.ofMillis(300))) {
                got.add(r);
            }
            if (got.size() >= want) {
                if (extraUntil < 0) {
                    extraUntil = System.nanoTime() + 500_000_000L;  // half a second more, to catch extras
                } else if (System.nanoTime() >= extraUntil) {
                    break;
                }
            }
        }
        return got;
    }

    static Properties common() {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("request.timeout.ms", "15000");
        return p;
    }

    static Properties adminProps() {
        Properties p = common();
        p.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "20000");
        return p;
    }

    /** The producer's defaults are what is tested (idempotence on, acks=all), plus room for 1 MiB records. */
    /** Send every record, then report each one's partition and offset in send order. */
    static void produceAndReport(KafkaProducer<byte[], byte[]> producer, String topic, List<String[]> recs,
                                 String scenario) throws Exception {
        List<Future<RecordMetadata>> futures = new ArrayList<>();
        for (String[] r : recs) {
            futures.add(producer.send(toRecord(topic, null, null, r)));
        }
        producer.flush();
        for (int i = 0; i < futures.size(); i++) {
            RecordMetadata m = futures.get(i).get(30, TimeUnit.SECONDS);
            JsonOut.emit(scenario, "produced", "i", i, "partition", m.partition(), "offset", m.offset());
        }
    }

    static Properties producerProps() {
        Properties p = common();
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        p.put(ProducerConfig.MAX_REQUEST_SIZE_CONFIG, String.valueOf(MAX_REQUEST));
        p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "20000");
        p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "30000");
        return p;
    }

    static Properties consumerProps(String group) {
        Properties p = common();
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        p.put(ConsumerConfig.FETCH_MAX_WAIT_MS_CONFIG, "200");
        p.put(ConsumerConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "20000");
        p.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, "10000");
        p.put(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, "1000");
        if (group != null) {
            p.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        }
        return p;
    }

    static List<String[]> readRecords(String name) throws Exception {
        List<String[]> out = new ArrayList<>();
        for (String line : Files.readAllLines(workdir.resolve(name), StandardCharsets.UTF_8)) {
            if (!line.isEmpty()) {
                out.add(line.split("\t", -1));
            }
        }
        return out;
    }

    static byte[] field(String f) {
        return f.equals("-") ? null : Base64.getDecoder().decode(f.substring(1));
    }

    static ProducerRecord<byte[], byte[]> toRecord(String topic, Integer partition, Long ts, String[] r) {
        RecordHeaders headers = new RecordHeaders();
        for (int i = 2; i + 1 < r.length; i += 2) {
            headers.add(new String(field(r[i]), StandardCharsets.UTF_8), field(r[i + 1]));
        }
        return new ProducerRecord<>(topic, partition, ts, field(r[0]), field(r[1]), headers);
    }

    static void emitRecord(String scenario, String event, ConsumerRecord<byte[], byte[]> rec) {
        List<Object> headers = new ArrayList<>();
        for (Header h : rec.headers()) {
            headers.add(List.of(b64(h.key().getBytes(StandardCharsets.UTF_8)), b64(h.value())));
        }
        JsonOut.emit(scenario, event, "partition", rec.partition(), "offset", rec.offset(), "key", b64(rec.key()),
                "value", b64(rec.value()), "headers", headers, "ts", rec.timestamp());
    }

    static String b64(byte[] b) {
        return b == null ? "-" : "=" + Base64.getEncoder().encodeToString(b);
    }
}
