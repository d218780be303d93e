import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.DescribeConfigsOptions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.RecordsToDelete;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.KafkaFuture;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * Drives the unmodified Java Admin, producer and consumer through Millrace's topic configs, DeleteRecords
 * and fetch sizing, printing one JSON object per line for compat_tests/test_java_topic_configs.py. Usage:
 *   java TopicConfigsClient BOOTSTRAP TOPIC_PREFIX SCENARIO...
 * Scenarios: configs (createTopics with Kafka 4.0 configs, describeConfigs with synonyms,
 * incrementalAlterConfigs SET/DELETE/APPEND/SUBTRACT, refusals), log_append_time (a LogAppendTime topic
 * read back by a consumer), delete_records (deleteRecords, then listOffsets earliest and a consumer from
 * the beginning), small_fetches (a consumer with fetch.max.bytes and max.partition.fetch.bytes below one
 * batch over three partitions). Each scenario ends with {"event":"done"} or {"event":"error",..}; an
 * expected failure of one call is reported as that call's outcome, not as an error.
 */
public class TopicConfigsClient {
    static final long WAIT_SECONDS = 30;
    static String bootstrap;
    static String prefix;

    public static void main(String[] args) throws Exception {
        bootstrap = args[0];
        prefix = args[1];
        JsonOut.emit("-", "start", "clientVersion", org.apache.kafka.common.utils.AppInfoParser.getVersion());
        try (Admin admin = Admin.create(adminProps())) {
            for (int i = 2; i < args.length; i++) {
                String scenario = args[i];
                try {
                    switch (scenario) {
                        case "configs" -> configs(admin, scenario);
                        case "log_append_time" -> logAppendTime(admin, scenario);
                        case "delete_records" -> deleteRecords(admin, scenario);
                        case "small_fetches" -> smallFetches(admin, scenario);
                        default -> throw new IllegalArgumentException("unknown scenario " + scenario);
                    }
                    JsonOut.emit(scenario, "done");
                } catch (Exception e) {
                    Throwable root = e;
                    while (root.getCause() != null) {
                        root = root.getCause();
                    }
                    JsonOut.emit(scenario, "error", "error", e.toString(), "cause", root.toString());
                }
            }
        }
    }

    static Properties adminProps() {
        Properties p = new Properties();
        p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "20000");
        p.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, "15000");
        return p;
    }

    static <T> T get(KafkaFuture<T> future) throws Exception {
        return future.get(WAIT_SECONDS, TimeUnit.SECONDS);
    }

    /** Emits ``event`` with the call's outcome: "ok", or the failure's class name and message. */
    static void emitOutcome(String scenario, String event, KafkaFuture<?> future) throws Exception {
        try {
            get(future);
            JsonOut.emit(scenario, event, "outcome", "ok");
        } catch (ExecutionException e) {
            JsonOut.emit(scenario, event, "outcome", e.getCause().getClass().getSimpleName(),
                "message", e.getCause().getMessage());
        }
    }

    static Map<String, Object> entry(ConfigEntry e) {
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("value", e.value());
        m.put("source", e.source().name());
        m.put("type", e.type().name());
        List<List<Object>> synonyms = new ArrayList<>();
        for (ConfigEntry.ConfigSynonym s : e.synonyms()) {
            synonyms.add(List.of(s.name(), String.valueOf(s.value()), s.source().name()));
        }
        m.put("synonyms", synonyms);
        return m;
    }

    static Map<String, Object> describe(Admin admin, String topic, Collection<String> names) throws Exception {
        ConfigResource resource = new ConfigResource(ConfigResource.Type.TOPIC, topic);
        Config config = get(admin.describeConfigs(List.of(resource), new DescribeConfigsOptions().includeSynonyms(true))
            .values().get(resource));
        Map<String, Object> out = new TreeMap<>();
        for (String name : names) {
            ConfigEntry e = config.get(name);
            out.put(name, e == null ? null : entry(e));
        }
        return out;
    }

    static KafkaFuture<Void> alter(Admin admin, String topic, AlterConfigOp... ops) {
        ConfigResource resource = new ConfigResource(ConfigResource.Type.TOPIC, topic);
        return admin.incrementalAlterConfigs(Map.of(resource, List.of(ops))).values().get(resource);
    }

    static AlterConfigOp op(String name, String value, AlterConfigOp.OpType type) {
        return new AlterConfigOp(new ConfigEntry(name, value), type);
    }

    static void configs(Admin admin, String scenario) throws Exception {
        String topic = prefix + "-configs";
        Map<String, String> created = Map.of("segment.ms", "3600000", "file.delete.delay.ms", "1000",
            "min.cleanable.dirty.ratio", "0.3", "preallocate", "true");
        get(admin.createTopics(List.of(new NewTopic(topic, 1, (short) 1).configs(created))).all());
        List<String> names = List.of("segment.ms", "file.delete.delay.ms", "min.cleanable.dirty.ratio", "preallocate",
            "retention.ms", "flush.messages", "leader.replication.throttled.replicas", "message.timestamp.after.max.ms");
        JsonOut.emit(scenario, "created", "configs", describe(admin, topic, names));
        get(alter(admin, topic, op("segment.ms", null, AlterConfigOp.OpType.DELETE),
            op("flush.messages", "5000", AlterConfigOp.OpType.SET),
            op("leader.replication.throttled.replicas", "0:0,1:0", AlterConfigOp.OpType.APPEND)));
        get(alter(admin, topic, op("leader.replication.throttled.replicas", "0:0", AlterConfigOp.OpType.SUBTRACT)));
        JsonOut.emit(scenario, "altered", "configs", describe(admin, topic, names));
        emitOutcome(scenario, "bad_value", alter(admin, topic, op("flush.ms", "-5", AlterConfigOp.OpType.SET)));
        emitOutcome(scenario, "append_scalar", alter(admin, topic, op("segment.ms", "5", AlterConfigOp.OpType.APPEND)));
        emitOutcome(scenario, "unknown", alter(admin, topic, op("no.such.config", "5", AlterConfigOp.OpType.SET)));
        emitOutcome(scenario, "compact", admin.createTopics(List.of(new NewTopic(topic + "-compact", 1, (short) 1)
            .configs(Map.of("cleanup.policy", "compact")))).all());
    }

    static Properties producerProps() {
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        return p;
    }

    static KafkaConsumer<byte[], byte[]> consumer(Map<String, Object> extra) {
        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        p.putAll(extra);
        return new KafkaConsumer<>(p);
    }

    /** Reads ``want`` records from ``partitions`` (assigned, from their start), or what came in 30 polls. */
    static List<ConsumerRecord<byte[], byte[]>> read(KafkaConsumer<byte[], byte[]> c, List<TopicPartition> partitions,
                                                    int want) {
        c.assign(partitions);
        c.seekToBeginning(partitions);
        List<ConsumerRecord<byte[], byte[]>> out = new ArrayList<>();
        for (int i = 0; i < 30 && out.size() < want; i++) {
            for (ConsumerRecord<byte[], byte[]> r : c.poll(Duration.ofSeconds(1))) {
                out.add(r);
            }
        }
        return out;
    }

    static void logAppendTime(Admin admin, String scenario) throws Exception {
        String topic = prefix + "-append-time";
        get(admin.createTopics(List.of(new NewTopic(topic, 1, (short) 1)
            .configs(Map.of("message.timestamp.type", "LogAppendTime")))).all());
        long before = System.currentTimeMillis();
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(producerProps())) {
            long sentTimestamp = 1000L;
            var metadata = producer.send(new ProducerRecord<>(topic, 0, sentTimestamp, null, "v".getBytes())).get();
            JsonOut.emit(scenario, "sent", "timestamp", metadata.timestamp(), "before", before);
        }
        try (KafkaConsumer<byte[], byte[]> c = consumer(Map.of())) {
            for (ConsumerRecord<byte[], byte[]> r : read(c, List.of(new TopicPartition(topic, 0)), 1)) {
                JsonOut.emit(scenario, "read", "timestampType", r.timestampType().name, "timestamp", r.timestamp());
            }
        }
    }

    static void deleteRecords(Admin admin, String scenario) throws Exception {
        String topic = prefix + "-delete";
        get(admin.createTopics(List.of(new NewTopic(topic, 1, (short) 1))).all());
        TopicPartition tp = new TopicPartition(topic, 0);
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(producerProps())) {
            for (int i = 0; i < 10; i++) {
                producer.send(new ProducerRecord<>(topic, 0, null, ("r" + i).getBytes())).get();
            }
        }
        long low = get(admin.deleteRecords(Map.of(tp, RecordsToDelete.beforeOffset(6))).lowWatermarks().get(tp))
            .lowWatermark();
        long earliest = get(admin.listOffsets(Map.of(tp, OffsetSpec.earliest())).partitionResult(tp)).offset();
        long firstRead;
        try (KafkaConsumer<byte[], byte[]> c = consumer(Map.of())) {
            List<ConsumerRecord<byte[], byte[]>> got = read(c, List.of(tp), 4);
            firstRead = got.isEmpty() ? -1 : got.get(0).offset();
        }
        JsonOut.emit(scenario, "deleted", "lowWatermark", low, "earliest", earliest, "firstRead", firstRead);
    }

    static void smallFetches(Admin admin, String scenario) throws Exception {
        String topic = prefix + "-small-fetches";
        int partitions = 3;
        int perPartition = 10;
        get(admin.createTopics(List.of(new NewTopic(topic, partitions, (short) 1))).all());
        Properties props = producerProps();
        props.put(ProducerConfig.BATCH_SIZE_CONFIG, "1");  // one record a batch
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(props)) {
            for (int p = 0; p < partitions; p++) {
                for (int i = 0; i < perPartition; i++) {
                    producer.send(new ProducerRecord<>(topic, p, null, new byte[600])).get();
                }
            }
        }
        List<TopicPartition> tps = new ArrayList<>();
        for (int p = 0; p < partitions; p++) {
            tps.add(new TopicPartition(topic, p));
        }
        Map<String, Object> limits = Map.of(ConsumerConfig.FETCH_MAX_BYTES_CONFIG, "500",
            ConsumerConfig.MAX_PARTITION_FETCH_BYTES_CONFIG, "300");
        try (KafkaConsumer<byte[], byte[]> c = consumer(limits)) {
            Map<Integer, Integer> counts = new TreeMap<>();
            for (ConsumerRecord<byte[], byte[]> r : read(c, tps, partitions * perPartition)) {
                counts.merge(r.partition(), 1, Integer::sum);
            }
            JsonOut.emit(scenario, "read", "counts", counts);
        }
    }
}
