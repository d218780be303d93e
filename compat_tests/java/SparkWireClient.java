import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.UUID;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicReference;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.DeletedRecords;
import org.apache.kafka.clients.admin.ListOffsetsOptions;
import org.apache.kafka.clients.admin.ListOffsetsResult;
import org.apache.kafka.clients.admin.NewPartitions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.RecordsToDelete;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.admin.TopicListing;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetOutOfRangeException;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.IsolationLevel;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.internals.RecordHeaders;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * Makes, with the unmodified Java kafka-clients, the calls Spark's built-in Kafka connector
 * (spark-sql-kafka-0-10, Spark 4.0) makes, with the configurations it makes them with, and prints one JSON
 * object per line for compat_tests/test_spark_wire.py. Usage:
 *   java SparkWireClient BOOTSTRAP TOPIC_PREFIX SCENARIO...
 * The connector's roles, as in its sources:
 *  - driver: KafkaOffsetReaderAdmin. An Admin created from the driver's consumer parameters; each micro-batch
 *    re-lists the partitions (describeTopics, or listTopics for subscribePattern) and asks listOffsets with
 *    ListOffsetsOptions(isolation level) for OffsetSpec.earliest / latest / forTimestamp; partitions that
 *    appear while a query runs start at their earliest offset.
 *  - executors: KafkaDataConsumer / InternalKafkaConsumer. One consumer per topic-partition (pooled across
 *    batches), group.id "spark-kafka-source-UUID-...-executor" but assign() and never a commit,
 *    auto.offset.reset=none, enable.auto.commit=false; each fetch is seek + poll + records(tp) + position,
 *    then seekToBeginning/position and seekToEnd/position for the available range (data-loss checks).
 *  - sink: KafkaDataWriter. One producer with only the byte-array serializers set (so acks=all and
 *    idempotence are the client defaults), shared by the tasks' threads, records with headers, then flush().
 * Scenarios: offsets, executor, new_partitions, sink. Each ends with a "done" or an "error" event.
 */
public class SparkWireClient {
    static final long POLL_TIMEOUT_MS = 10_000;  // Spark: kafkaConsumer.pollTimeoutMs (spark.network.timeout)
    static String bootstrap;
    static String prefix;
    static final String QUERY_GROUP = "spark-kafka-source-" + UUID.randomUUID() + "-" + 1234567;

    public static void main(String[] args) throws Exception {
        bootstrap = args[0];
        prefix = args[1];
        JsonOut.emit("-", "start", "clientVersion", org.apache.kafka.common.utils.AppInfoParser.getVersion());
        for (int i = 2; i < args.length; i++) {
            String scenario = args[i];
            long t0 = System.nanoTime();
            try {
                switch (scenario) {
                    case "offsets" -> offsets(scenario);
                    case "executor" -> executor(scenario);
                    case "new_partitions" -> newPartitions(scenario);
                    case "sink" -> sink(scenario);
                    default -> throw new IllegalArgumentException("unknown scenario " + scenario);
                }
                JsonOut.emit(scenario, "done", "ms", (System.nanoTime() - t0) / 1_000_000);
            } catch (Throwable t) {
                java.io.StringWriter trace = new java.io.StringWriter();
                t.printStackTrace(new java.io.PrintWriter(trace));
                JsonOut.emit(scenario, "error", "error", trace.toString());
            }
        }
        System.out.flush();
        System.exit(0);
    }

    // ---- the connector's configurations (KafkaSourceProvider, KafkaWriter) ----

    /** kafkaParamsForDriver: what KafkaOffsetReaderAdmin creates its Admin from. */
    static Map<String, Object> driverParams() {
        Map<String, Object> p = new HashMap<>();
        p.put("bootstrap.servers", bootstrap);
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        p.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, 1);
        p.put(ConsumerConfig.RECEIVE_BUFFER_CONFIG, 65536);
        return p;
    }

    /** kafkaParamsForExecutors. */
    static Map<String, Object> executorParams() {
        Map<String, Object> p = new HashMap<>();
        p.put("bootstrap.servers", bootstrap);
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "none");
        p.put(ConsumerConfig.GROUP_ID_CONFIG, QUERY_GROUP + "-executor");
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        p.put(ConsumerConfig.RECEIVE_BUFFER_CONFIG, 65536);
        p.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_uncommitted");
        return p;
    }

    /** The sink's producer: the user's kafka.* options (here only bootstrap.servers) and the serializers. */
    static Map<String, Object> sinkParams() {
        Map<String, Object> p = new HashMap<>();
        p.put("bootstrap.servers", bootstrap);
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        return p;
    }

    // ---- the driver: KafkaOffsetReaderAdmin ----

    static final ListOffsetsOptions LIST_OFFSETS_OPTIONS = new ListOffsetsOptions(IsolationLevel.READ_UNCOMMITTED);

    /** ConsumerStrategy.retrieveAllPartitions: describeTopics(...).allTopicNames(), internal topics dropped. */
    static Set<TopicPartition> partitions(Admin admin, Collection<String> topics) throws Exception {
        Set<TopicPartition> out = new TreeSet<>(SparkWireClient::compareTp);
        for (Map.Entry<String, TopicDescription> e : admin.describeTopics(topics).allTopicNames().get().entrySet()) {
            if (e.getValue().isInternal()) {
                continue;
            }
            e.getValue().partitions().forEach(pi -> out.add(new TopicPartition(e.getKey(), pi.partition())));
        }
        return out;
    }

    static Map<TopicPartition, ListOffsetsResult.ListOffsetsResultInfo> listOffsets(
            Admin admin, Collection<TopicPartition> tps, OffsetSpec spec) throws Exception {
        Map<TopicPartition, OffsetSpec> request = new HashMap<>();
        tps.forEach(tp -> request.put(tp, spec));
        Map<TopicPartition, ListOffsetsResult.ListOffsetsResultInfo> out = new TreeMap<>(SparkWireClient::compareTp);
        if (!request.isEmpty()) {
            out.putAll(admin.listOffsets(request, LIST_OFFSETS_OPTIONS).all().get());
        }
        return out;
    }

    static Map<TopicPartition, Long> offsetsOf(Map<TopicPartition, ListOffsetsResult.ListOffsetsResultInfo> m) {
        Map<TopicPartition, Long> out = new TreeMap<>(SparkWireClient::compareTp);
        m.forEach((tp, info) -> out.put(tp, info.offset()));
        return out;
    }

    // ---- executors: InternalKafkaConsumer + KafkaDataConsumer (failOnDataLoss) ----

    static final class DataLoss extends RuntimeException {
        final String how;

        DataLoss(String how, String message) {
            super(message);
            this.how = how;
        }
    }

    static final class ExecutorConsumer implements AutoCloseable {
        final TopicPartition tp;
        final KafkaConsumer<byte[], byte[]> consumer;
        List<ConsumerRecord<byte[], byte[]>> fetched = List.of();
        int next = 0;
        long nextOffsetInFetched = -2;  // UNKNOWN_OFFSET
        long offsetAfterPoll = -2;
        int polls = 0;

        ExecutorConsumer(TopicPartition tp) {
            this.tp = tp;
            this.consumer = new KafkaConsumer<>(executorParams());
            this.consumer.assign(List.of(tp));
        }

        long[] availableOffsetRange() {
            consumer.seekToBeginning(Set.of(tp));
            long earliest = consumer.position(tp);
            consumer.seekToEnd(Set.of(tp));
            long latest = consumer.position(tp);
            return new long[] {earliest, latest};
        }

        /**
         * InternalKafkaConsumer.fetch. With auto.offset.reset=none the client itself throws
         * OffsetOutOfRangeException from poll when the server answers OFFSET_OUT_OF_RANGE; Spark's own range
         * check catches an empty answer. Either is data loss to KafkaDataConsumer.get (failOnDataLoss).
         */
        void fetch(long offset) throws java.util.concurrent.TimeoutException {
            consumer.seek(tp, offset);
            ConsumerRecords<byte[], byte[]> p;
            try {
                p = consumer.poll(Duration.ofMillis(POLL_TIMEOUT_MS));
            } catch (OffsetOutOfRangeException e) {
                throw new DataLoss("poll", "Cannot fetch offset " + offset + ": " + e.getMessage());
            } finally {
                polls++;
            }
            List<ConsumerRecord<byte[], byte[]>> r = p.records(tp);
            long after = consumer.position(tp);
            long[] range = availableOffsetRange();
            fetched = r;
            next = 0;
            nextOffsetInFetched = -2;
            offsetAfterPoll = after;
            if (r.isEmpty()) {
                if (offset < range[0] || offset >= range[1]) {
                    throw new DataLoss("range", "offset " + offset + " outside [" + range[0] + ", " + range[1] + ")");
                } else if (offset == after) {
                    throw new java.util.concurrent.TimeoutException(
                            "Cannot fetch record for offset " + offset + " in " + POLL_TIMEOUT_MS + " milliseconds");
                }
            }
        }

        /** KafkaDataConsumer.get with failOnDataLoss=true: exactly the record at offset, or DataLoss. */
        ConsumerRecord<byte[], byte[]> get(long offset, long untilOffset) throws Exception {
            try {
                if (offset != nextOffsetInFetched) {
                    fetch(offset);
                } else if (next >= fetched.size()) {
                    if (offset < offsetAfterPoll) {
                        throw new IllegalStateException("invisible records at " + offset + " in a non-transactional test");
                    }
                    fetch(offset);
                }
            } catch (DataLoss e) {
                fetched = List.of();
                nextOffsetInFetched = -2;
                throw e;
            }
            if (next >= fetched.size()) {
                throw new IllegalStateException("no visible record at " + offset + " before " + untilOffset);
            }
            ConsumerRecord<byte[], byte[]> rec = fetched.get(next++);
            nextOffsetInFetched = rec.offset() + 1;
            if (rec.offset() > offset) {
                throw new DataLoss("gap", "Tried to fetch " + offset + " but got " + rec.offset());
            } else if (rec.offset() < offset) {
                throw new IllegalStateException("Tried to fetch " + offset + " but the returned record offset was "
                        + rec.offset());
            }
            return rec;
        }

        /** What one Spark task does: read every record of [from, until). */
        List<ConsumerRecord<byte[], byte[]>> read(long from, long until) throws Exception {
            List<ConsumerRecord<byte[], byte[]>> out = new ArrayList<>();
            for (long o = from; o < until; o++) {
                out.add(get(o, until));
            }
            return out;
        }

        @Override
        public void close() {
            consumer.close(Duration.ofSeconds(5));
        }
    }

    // ---- scenarios ----

    /** Topic listing, describeTopics, listOffsets earliest/latest/forTimestamp (event-time timestamps out of order). */
    static void offsets(String scenario) throws Exception {
        String a = prefix + "-offsets-a";
        String b = prefix + "-offsets-b";
        long base = System.currentTimeMillis() - 3_600_000;
        long[] deltas = {0, 1000, 500, 3000, 2000, 2000, 6000, 4000};
        JsonOut.emit(scenario, "base_ts", "ts", base, "deltas", toList(deltas));
        try (Admin admin = Admin.create(driverParams())) {
            admin.createTopics(List.of(new NewTopic(a, 3, (short) 1), new NewTopic(b, 2, (short) 1))).all().get();
            try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(sinkParams())) {
                // a-0: one record per produce request (one batch each); a-1: all in one batch; a-2 empty.
                for (int i = 0; i < deltas.length; i++) {
                    RecordMetadata m = producer.send(new ProducerRecord<>(a, 0, base + deltas[i], null, bytes("a0-" + i))).get();
                    JsonOut.emit(scenario, "produced", "topic", a, "partition", 0, "offset", m.offset(), "ts", m.timestamp());
                }
                List<java.util.concurrent.Future<RecordMetadata>> fs = new ArrayList<>();
                for (int i = 0; i < deltas.length; i++) {
                    fs.add(producer.send(new ProducerRecord<>(a, 1, base + deltas[i], null, bytes("a1-" + i))));
                }
                producer.flush();
                for (java.util.concurrent.Future<RecordMetadata> f : fs) {
                    RecordMetadata m = f.get();
                    JsonOut.emit(scenario, "produced", "topic", a, "partition", 1, "offset", m.offset(), "ts", m.timestamp());
                }
                RecordMetadata m = producer.send(new ProducerRecord<>(b, 0, base + 2500, null, bytes("b0"))).get();
                JsonOut.emit(scenario, "produced", "topic", b, "partition", 0, "offset", m.offset(), "ts", m.timestamp());
            }
            // subscribePattern: listTopics().listings(), then describeTopics of the matching names.
            List<String> listed = new ArrayList<>();
            for (TopicListing l : admin.listTopics().listings().get()) {
                if (l.name().startsWith(prefix + "-offsets-")) {
                    listed.add(l.name() + (l.isInternal() ? ":internal" : ""));
                }
            }
            listed.sort(null);
            JsonOut.emit(scenario, "listed", "topics", listed);
            Set<TopicPartition> tps = partitions(admin, List.of(a, b));
            JsonOut.emit(scenario, "described", "partitions", tps.stream().map(SparkWireClient::tpName).toList());
            offsetsOf(listOffsets(admin, tps, OffsetSpec.earliest())).forEach((tp, o) ->
                    JsonOut.emit(scenario, "offset", "spec", "earliest", "topic", tp.topic(), "partition", tp.partition(), "offset", o));
            offsetsOf(listOffsets(admin, tps, OffsetSpec.latest())).forEach((tp, o) ->
                    JsonOut.emit(scenario, "offset", "spec", "latest", "topic", tp.topic(), "partition", tp.partition(), "offset", o));
            // startingTimestamp / endingTimestamp: one timestamp for every partition (fetchGlobalTimestampBasedOffsets).
            long[] targets = {-1000, 0, 1, 500, 1500, 2000, 2001, 2500, 4000, 5999, 6000, 6001};
            for (long t : targets) {
                listOffsets(admin, tps, OffsetSpec.forTimestamp(base + t)).forEach((tp, info) ->
                        JsonOut.emit(scenario, "by_ts", "target", base + t, "topic", tp.topic(), "partition", tp.partition(),
                                "offset", info.offset(), "ts", info.timestamp()));
            }
        }
    }

    /** An executor's consumer: ranges, reuse, an empty partition, data loss after deleteRecords. */
    static void executor(String scenario) throws Exception {
        String topic = prefix + "-executor";
        TopicPartition p0 = new TopicPartition(topic, 0);
        TopicPartition p1 = new TopicPartition(topic, 1);
        try (Admin admin = Admin.create(driverParams())) {
            admin.createTopics(List.of(new NewTopic(topic, 2, (short) 1))).all().get();
            try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(sinkParams())) {
                for (int batch = 0; batch < 4; batch++) {
                    for (int i = 0; i < 10; i++) {
                        int n = batch * 10 + i;
                        producer.send(new ProducerRecord<>(topic, 0, null, bytes("k" + n % 3), bytes("v" + n)));
                    }
                    producer.flush();
                }
            }
            try (ExecutorConsumer c = new ExecutorConsumer(p0); ExecutorConsumer empty = new ExecutorConsumer(p1)) {
                long[] range = c.availableOffsetRange();
                JsonOut.emit(scenario, "range", "partition", 0, "earliest", range[0], "latest", range[1]);
                emitRead(scenario, "read", 0, 5, 40, c.read(5, 40), c);
                emitRead(scenario, "reread", 0, 0, 12, c.read(0, 12), c);
                long[] er = empty.availableOffsetRange();
                JsonOut.emit(scenario, "range", "partition", 1, "earliest", er[0], "latest", er[1]);

                DeletedRecords deleted = admin.deleteRecords(Map.of(p0, RecordsToDelete.beforeOffset(10)))
                        .lowWatermarks().get(p0).get();
                JsonOut.emit(scenario, "deleted", "low_watermark", deleted.lowWatermark());
                // The next batch still asks for offset 3: failOnDataLoss=true reports it...
                String how = "none";
                try {
                    c.read(3, 40);
                } catch (DataLoss e) {
                    how = e.how;
                }
                long[] after = c.availableOffsetRange();
                JsonOut.emit(scenario, "data_loss", "how", how, "earliest", after[0], "latest", after[1]);
                // ...and failOnDataLoss=false resumes at the earliest available offset (a new consumer, as Spark
                // releases the one that hit the error).
                try (ExecutorConsumer fresh = new ExecutorConsumer(p0)) {
                    long[] fr = fresh.availableOffsetRange();
                    emitRead(scenario, "after_loss", 0, fr[0], 40, fresh.read(fr[0], 40), fresh);
                }
            }
        }
    }

    /**
     * A running query over a topic that grows from 3 to 5 partitions: the micro-batch loop of
     * KafkaMicroBatchStream (re-list partitions, earliest offsets for new ones, latest for all, one executor
     * consumer per partition reading [start, latest)) while a sink-style producer keeps writing.
     */
    static void newPartitions(String scenario) throws Exception {
        String topic = prefix + "-grow";
        int total = 1500;
        try (Admin admin = Admin.create(driverParams());
             KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(sinkParams())) {
            admin.createTopics(List.of(new NewTopic(topic, 3, (short) 1))).all().get();
            AtomicBoolean grown = new AtomicBoolean(false);
            CountDownLatch startGrowing = new CountDownLatch(1);
            AtomicReference<Throwable> producerError = new AtomicReference<>();
            ConcurrentLinkedQueue<long[]> acks = new ConcurrentLinkedQueue<>();  // {i, partition, offset}
            Thread writer = new Thread(() -> {
                try {
                    for (int i = 0; i < total; i++) {
                        if (i == total / 3) {
                            startGrowing.countDown();
                            while (!grown.get()) {
                                Thread.sleep(20);
                            }
                        }
                        Integer partition = null;
                        if (grown.get() && i % 10 == 0) {
                            partition = 3 + (i / 10) % 2;  // explicitly into the new partitions too
                        }
                        final int n = i;
                        producer.send(new ProducerRecord<>(topic, partition, null, bytes("device-" + (i % 17)),
                                bytes("r" + i)), (m, e) -> {
                                    if (e != null) {
                                        producerError.compareAndSet(null, e);
                                    } else {
                                        acks.add(new long[] {n, m.partition(), m.offset()});
                                    }
                                });
                        if (i % 50 == 49) {
                            Thread.sleep(30);
                        }
                    }
                    producer.flush();
                } catch (Throwable t) {
                    producerError.compareAndSet(null, t);
                }
            });
            writer.start();

            Map<TopicPartition, Long> known = new TreeMap<>(SparkWireClient::compareTp);
            Map<TopicPartition, ExecutorConsumer> pool = new HashMap<>();
            try {
                int emptyBatchesAfterDone = 0;
                for (int batch = 0; batch < 400; batch++) {
                    Set<TopicPartition> tps = partitions(admin, List.of(topic));
                    List<TopicPartition> fresh = new ArrayList<>();
                    for (TopicPartition tp : tps) {
                        if (!known.containsKey(tp)) {
                            fresh.add(tp);
                        }
                    }
                    // startingOffsets=earliest for the first batch; fetchEarliestOffsets(newPartitions) later.
                    Map<TopicPartition, Long> start = new TreeMap<>(SparkWireClient::compareTp);
                    start.putAll(known);
                    start.putAll(offsetsOf(listOffsets(admin, fresh, OffsetSpec.earliest())));
                    Map<TopicPartition, Long> end = offsetsOf(listOffsets(admin, tps, OffsetSpec.latest()));
                    boolean done = !writer.isAlive();
                    int read = 0;
                    List<Object> ranges = new ArrayList<>();
                    for (TopicPartition tp : tps) {
                        long from = start.get(tp);
                        long until = end.get(tp);
                        ranges.add(List.of(tp.partition(), from, until));
                        if (until > from) {
                            ExecutorConsumer c = pool.computeIfAbsent(tp, ExecutorConsumer::new);
                            List<ConsumerRecord<byte[], byte[]>> recs = c.read(from, until);
                            read += recs.size();
                            emitRead(scenario, "read", tp.partition(), from, until, recs, c);
                        }
                    }
                    JsonOut.emit(scenario, "batch", "batch", batch, "partitions", tps.stream().map(TopicPartition::partition).toList(),
                            "new", fresh.stream().map(TopicPartition::partition).toList(),
                            "new_earliest", fresh.stream().map(start::get).toList(), "ranges", ranges);
                    known.clear();
                    known.putAll(end);
                    if (startGrowing.getCount() == 0 && !grown.get()) {
                        admin.createPartitions(Map.of(topic, NewPartitions.increaseTo(5))).all().get();
                        grown.set(true);
                        JsonOut.emit(scenario, "grew", "after_batch", batch, "to", 5);
                    }
                    if (done && read == 0 && ++emptyBatchesAfterDone >= 2) {
                        break;
                    }
                    Thread.sleep(100);
                }
            } finally {
                writer.join(60_000);
                for (ExecutorConsumer c : pool.values()) {
                    c.close();
                }
            }
            if (producerError.get() != null) {
                throw new RuntimeException("producer failed", producerError.get());
            }
            List<Long> is = new ArrayList<>();
            List<Long> ps = new ArrayList<>();
            List<Long> os = new ArrayList<>();
            acks.stream().sorted((x, y) -> Long.compare(x[0], y[0])).forEach(x -> {
                is.add(x[0]);
                ps.add(x[1]);
                os.add(x[2]);
            });
            JsonOut.emit(scenario, "produced_all", "i", is, "partitions", ps, "offsets", os);
        }
    }

    /** The sink: one producer shared by 4 task threads, keyed records with headers, then flush. */
    static void sink(String scenario) throws Exception {
        String topic = prefix + "-sink";
        int threads = 4;
        int perThread = 500;
        try (Admin admin = Admin.create(driverParams())) {
            admin.createTopics(List.of(new NewTopic(topic, 3, (short) 1))).all().get();
        }
        ConcurrentLinkedQueue<Object> acks = new ConcurrentLinkedQueue<>();
        AtomicReference<Exception> failed = new AtomicReference<>();
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(sinkParams())) {
            List<Thread> tasks = new ArrayList<>();
            for (int t = 0; t < threads; t++) {
                final int task = t;
                tasks.add(new Thread(() -> {
                    for (int i = 0; i < perThread; i++) {
                        String id = task + "-" + i;
                        RecordHeaders headers = new RecordHeaders();
                        headers.add("task", bytes(String.valueOf(task)));
                        producer.send(new ProducerRecord<>(topic, null, null, bytes("key-" + (i % 11)), bytes(id), headers),
                                (m, e) -> {
                                    if (e != null) {
                                        failed.compareAndSet(null, e);
                                    } else {
                                        acks.add(List.of(id, m.partition(), m.offset()));
                                    }
                                });
                    }
                }));
            }
            tasks.forEach(Thread::start);
            for (Thread t : tasks) {
                t.join();
            }
            producer.flush();  // KafkaDataWriter.commit
        }
        if (failed.get() != null) {
            throw failed.get();
        }
        JsonOut.emit(scenario, "acks", "acks", new ArrayList<>(acks));
        try (Admin admin = Admin.create(driverParams())) {
            Set<TopicPartition> tps = partitions(admin, List.of(topic));
            Map<TopicPartition, Long> end = offsetsOf(listOffsets(admin, tps, OffsetSpec.latest()));
            for (TopicPartition tp : tps) {
                try (ExecutorConsumer c = new ExecutorConsumer(tp)) {
                    emitRead(scenario, "read", tp.partition(), 0, end.get(tp), c.read(0, end.get(tp)), c);
                }
            }
        }
    }

    // ---- output ----

    static void emitRead(String scenario, String event, int partition, long from, long until,
                         List<ConsumerRecord<byte[], byte[]>> recs, ExecutorConsumer c) {
        List<Long> offsets = new ArrayList<>();
        List<String> keys = new ArrayList<>();
        List<String> values = new ArrayList<>();
        List<String> headers = new ArrayList<>();
        for (ConsumerRecord<byte[], byte[]> r : recs) {
            offsets.add(r.offset());
            keys.add(r.key() == null ? null : new String(r.key(), StandardCharsets.UTF_8));
            values.add(r.value() == null ? null : new String(r.value(), StandardCharsets.UTF_8));
            StringBuilder h = new StringBuilder();
            r.headers().forEach(x -> h.append(x.key()).append('=').append(new String(x.value(), StandardCharsets.UTF_8)).append(';'));
            headers.add(h.toString());
        }
        JsonOut.emit(scenario, event, "partition", partition, "from", from, "until", until, "offsets", offsets, "keys", keys,
                "values", values, "headers", headers, "polls", c.polls);
    }

    static byte[] bytes(String s) {
        return s.getBytes(StandardCharsets.UTF_8);
    }

    static int compareTp(TopicPartition x, TopicPartition y) {
        int c = x.topic().compareTo(y.topic());
        return c != 0 ? c : Integer.compare(x.partition(), y.partition());
    }

    static String tpName(TopicPartition tp) {
        return tp.topic() + ":" + tp.partition();
    }

    static List<Long> toList(long[] xs) {
        List<Long> out = new ArrayList<>();
        for (long x : xs) {
            out.add(x);
        }
        return out;
    }
}
