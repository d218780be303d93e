import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.DescribeTopicsOptions;
import org.apache.kafka.clients.admin.LogDirDescription;
import org.apache.kafka.clients.admin.NewPartitionReassignment;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.ProducerState;
import org.apache.kafka.clients.admin.QuorumInfo;
import org.apache.kafka.clients.admin.ReplicaInfo;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.ElectionType;
import org.apache.kafka.common.KafkaFuture;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.TopicPartitionReplica;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * Drives the unmodified Java Admin client through the cluster-admin APIs of a one-node Millrace server and
 * prints one JSON object per line for compat_tests/test_java_cluster_admin.py. Usage:
 *   java ClusterAdminClient BOOTSTRAP TOPIC_PREFIX LOG_DIR SCENARIO...
 * Scenarios: describe_topics (describeTopics two pages of partitions at a time: DescribeTopicPartitions with
 * its cursor; a missing topic), log_dirs (describeLogDirs, alterReplicaLogDirs to LOG_DIR and elsewhere),
 * producers (describeProducers during and after a transaction), elections (electLeaders preferred and
 * unclean), reassignments (alterPartitionReassignments, listPartitionReassignments), quorum
 * (describeMetadataQuorum). Each scenario ends with {"event":"done"} or {"event":"error",..}; an expected
 * failure of one call is reported as that call's outcome (the exception's class name), not as an error.
 */
public class ClusterAdminClient {
    static final long WAIT_SECONDS = 30;
    static String bootstrap;
    static String prefix;
    static String logDir;

    public static void main(String[] args) throws Exception {
        bootstrap = args[0];
        prefix = args[1];
        logDir = args[2];
        JsonOut.emit("-", "start", "clientVersion", org.apache.kafka.common.utils.AppInfoParser.getVersion());
        try (Admin admin = Admin.create(adminProps())) {
            for (int i = 3; i < args.length; i++) {
                String scenario = args[i];
                try {
                    switch (scenario) {
                        case "describe_topics" -> describeTopics(admin, scenario);
                        case "log_dirs" -> logDirs(admin, scenario);
                        case "producers" -> producers(admin, scenario);
                        case "elections" -> elections(admin, scenario);
                        case "reassignments" -> reassignments(admin, scenario);
                        case "quorum" -> quorum(admin, scenario);
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

    /** "ok" for a call that succeeded, else the simple class name of why it failed. */
    static String outcome(KafkaFuture<?> future) throws Exception {
        try {
            get(future);
            return "ok";
        } catch (ExecutionException e) {
            return e.getCause().getClass().getSimpleName();
        }
    }

    static void createTopic(Admin admin, String name, int partitions) throws Exception {
        get(admin.createTopics(List.of(new NewTopic(name, partitions, (short) 1))).all());
    }

    static void describeTopics(Admin admin, String scenario) throws Exception {
        String a = prefix + "-dtp-a";
        String b = prefix + "-dtp-b";
        createTopic(admin, a, 5);
        createTopic(admin, b, 3);
        // Two partitions per response: the Admin follows NextCursor through four DescribeTopicPartitions pages.
        Map<String, TopicDescription> described = get(admin.describeTopics(List.of(b, a),
                new DescribeTopicsOptions().partitionSizeLimitPerResponse(2)).allTopicNames());
        for (TopicDescription d : new TreeMap<>(described).values()) {
            List<Integer> partitions = new ArrayList<>();
            List<Integer> leaders = new ArrayList<>();
            List<List<Integer>> replicas = new ArrayList<>();
            List<List<Integer>> isr = new ArrayList<>();
            for (TopicPartitionInfo p : d.partitions()) {
                partitions.add(p.partition());
                leaders.add(p.leader() == null ? -1 : p.leader().id());
                replicas.add(p.replicas().stream().map(n -> n.id()).toList());
                isr.add(p.isr().stream().map(n -> n.id()).toList());
            }
            JsonOut.emit(scenario, "described", "name", d.name(), "topicId", d.topicId().toString(),
                    "internal", d.isInternal(), "partitions", partitions, "leaders", leaders, "replicas", replicas,
                    "isr", isr);
        }
        String missing = prefix + "-dtp-missing";
        JsonOut.emit(scenario, "missing", "outcome",
                outcome(admin.describeTopics(List.of(missing)).topicNameValues().get(missing)));
    }

    static void logDirs(Admin admin, String scenario) throws Exception {
        String topic = prefix + "-dirs";
        createTopic(admin, topic, 2);
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(producerProps(null))) {
            get(toKafkaFuture(producer, new ProducerRecord<>(topic, 1, null, new byte[1000])));
        }
        Map<Integer, Map<String, LogDirDescription>> all = get(admin.describeLogDirs(List.of(0)).allDescriptions());
        for (Map.Entry<Integer, Map<String, LogDirDescription>> broker : all.entrySet()) {
            for (Map.Entry<String, LogDirDescription> dir : broker.getValue().entrySet()) {
                LogDirDescription d = dir.getValue();
                Map<String, Object> sizes = new TreeMap<>();
                for (Map.Entry<TopicPartition, ReplicaInfo> r : d.replicaInfos().entrySet()) {
                    if (r.getKey().topic().equals(topic)) {
                        sizes.put(String.valueOf(r.getKey().partition()), List.of(r.getValue().size(),
                                r.getValue().offsetLag(), r.getValue().isFuture()));
                    }
                }
                JsonOut.emit(scenario, "log_dir", "broker", broker.getKey(), "path", dir.getKey(),
                        "error", d.error() == null ? null : d.error().getClass().getSimpleName(),
                        "totalBytes", d.totalBytes().orElse(-1), "usableBytes", d.usableBytes().orElse(-1),
                        "sizes", sizes);
            }
        }
        TopicPartitionReplica here = new TopicPartitionReplica(topic, 0, 0);
        TopicPartitionReplica away = new TopicPartitionReplica(topic, 1, 0);
        Map<TopicPartitionReplica, KafkaFuture<Void>> moved = admin.alterReplicaLogDirs(
                Map.of(here, logDir, away, "/nonexistent/kafka-logs")).values();
        JsonOut.emit(scenario, "moved", "same_dir", outcome(moved.get(here)), "other_dir", outcome(moved.get(away)));
    }

    static void producers(Admin admin, String scenario) throws Exception {
        String topic = prefix + "-producers";
        createTopic(admin, topic, 1);
        TopicPartition tp = new TopicPartition(topic, 0);
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(producerProps(prefix + "-txn"))) {
            producer.initTransactions();
            producer.beginTransaction();
            for (int i = 0; i < 3; i++) {
                producer.send(new ProducerRecord<>(topic, 0, null, new byte[] {(byte) i}));
            }
            producer.flush();
            emitProducers(admin, scenario, "ongoing", tp);
            producer.commitTransaction();
            emitProducers(admin, scenario, "committed", tp);
        }
    }

    static void emitProducers(Admin admin, String scenario, String event, TopicPartition tp) throws Exception {
        List<Map<String, Object>> states = new ArrayList<>();
        for (ProducerState s : get(admin.describeProducers(List.of(tp)).partitionResult(tp)).activeProducers()) {
            Map<String, Object> m = new LinkedHashMap<>();
            m.put("producerId", s.producerId());
            m.put("producerEpoch", s.producerEpoch());
            m.put("lastSequence", s.lastSequence());
            m.put("lastTimestamp", s.lastTimestamp());
            m.put("coordinatorEpoch", s.coordinatorEpoch().isPresent() ? s.coordinatorEpoch().getAsInt() : null);
            m.put("txnStartOffset", s.currentTransactionStartOffset().isPresent()
                    ? s.currentTransactionStartOffset().getAsLong() : null);
            states.add(m);
        }
        JsonOut.emit(scenario, event, "producers", states);
    }

    static void elections(Admin admin, String scenario) throws Exception {
        String topic = prefix + "-elect";
        createTopic(admin, topic, 2);
        Set<TopicPartition> wanted = Set.of(new TopicPartition(topic, 0), new TopicPartition(topic, 1),
                new TopicPartition(prefix + "-elect-missing", 0));
        for (ElectionType type : List.of(ElectionType.PREFERRED, ElectionType.UNCLEAN)) {
            Map<String, String> results = new TreeMap<>();
            get(admin.electLeaders(type, wanted).partitions()).forEach((tp, error) ->
                    results.put(tp.toString(), error.map(e -> e.getClass().getSimpleName()).orElse("ok")));
            JsonOut.emit(scenario, "elected", "type", type.toString(), "results", results);
        }
    }

    static void reassignments(Admin admin, String scenario) throws Exception {
        String topic = prefix + "-reassign";
        createTopic(admin, topic, 3);
        TopicPartition p0 = new TopicPartition(topic, 0);
        TopicPartition p1 = new TopicPartition(topic, 1);
        TopicPartition p2 = new TopicPartition(topic, 2);
        Map<TopicPartition, Optional<NewPartitionReassignment>> targets = new LinkedHashMap<>();
        targets.put(p0, Optional.of(new NewPartitionReassignment(List.of(0))));
        targets.put(p1, Optional.of(new NewPartitionReassignment(List.of(1))));
        targets.put(p2, Optional.empty());  // cancel: none in progress
        Map<TopicPartition, KafkaFuture<Void>> altered = admin.alterPartitionReassignments(targets).values();
        JsonOut.emit(scenario, "altered", "same_broker", outcome(altered.get(p0)),
                "other_broker", outcome(altered.get(p1)), "cancel", outcome(altered.get(p2)));
        JsonOut.emit(scenario, "listed", "count", get(admin.listPartitionReassignments().reassignments()).size());
    }

    static void quorum(Admin admin, String scenario) throws Exception {
        QuorumInfo q = get(admin.describeMetadataQuorum().quorumInfo());
        List<List<Long>> voters = new ArrayList<>();
        for (QuorumInfo.ReplicaState v : q.voters()) {
            voters.add(List.of((long) v.replicaId(), v.logEndOffset()));
        }
        Map<String, Object> nodes = new TreeMap<>();
        q.nodes().forEach((id, node) -> nodes.put(String.valueOf(id), node.endpoints().stream()
                .map(e -> e.listener() + "://" + e.host() + ":" + e.port()).toList()));
        JsonOut.emit(scenario, "quorum", "leaderId", q.leaderId(), "leaderEpoch", q.leaderEpoch(),
                "highWatermark", q.highWatermark(), "voters", voters, "observers", q.observers().size(),
                "nodes", nodes);
    }

    static Properties producerProps(String transactionalId) {
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "20000");
        if (transactionalId != null) {
            p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, transactionalId);
        }
        return p;
    }

    /** The send's outcome as a KafkaFuture, so one helper waits on every call. */
    static KafkaFuture<Void> toKafkaFuture(KafkaProducer<byte[], byte[]> producer, ProducerRecord<byte[], byte[]> r) {
        org.apache.kafka.common.internals.KafkaFutureImpl<Void> done = new org.apache.kafka.common.internals.KafkaFutureImpl<>();
        producer.send(r, (metadata, error) -> {
            if (error != null) {
                done.completeExceptionally(error);
            } else {
                done.complete(null);
            }
        });
        return done;
    }
}
