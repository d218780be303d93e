import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.GroupListing;
import org.apache.kafka.clients.admin.ListGroupsOptions;
import org.apache.kafka.clients.admin.MemberDescription;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.consumer.SubscriptionPattern;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.GroupType;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * The unmodified Java kafka-clients 4.x consumer with group.protocol=consumer (KIP-848) and the Admin's
 * describeConsumerGroups/listGroups against Millrace, printing JSON lines for
 * compat_tests/test_consumer_group_protocol.py. Usage:
 *   java ConsumerGroupProtocolClient BOOTSTRAP SCENARIO ARGS...
 * Scenarios:
 *   churn TOPIC GROUP ASSIGNOR TOTAL: consumers join and leave on a schedule (one static, with
 *     group.instance.id) while the test produces; each commits synchronously after every batch it
 *     processed; runs until TOTAL distinct records were seen, then closes everyone. Emits "record"
 *     {member, partition, offset}, "assigned"/"revoked" per member, and "describe" snapshots taken while
 *     several members are in the group.
 *   upgrade TOPIC GROUP FIRST TOTAL: a classic-protocol consumer reads FIRST records and commits
 *     ("describe" with the classic group), closes, then a consumer-protocol consumer in the same group
 *     reads on from the committed offsets up to TOTAL records ("describe" again).
 *   online_upgrade TOPIC GROUP TOTAL STRATEGY: a classic-protocol consumer (partition.assignment.strategy
 *     STRATEGY: range = eager, cooperative-sticky) reads while a consumer-protocol consumer joins the same
 *     group (the broker converts the live classic group), both read on, then the classic one leaves and
 *     the other reads up to TOTAL records; "describe" while both are members and at the end.
 *   online_roundtrip TOPIC GROUP TOTAL: as online_upgrade (eager classic member), but the consumer-protocol
 *     member leaves instead, so the group goes back to classic while the classic member reads on.
 *   regex PREFIX GROUP EXISTING: a consumer subscribed with SubscriptionPattern("PREFIX-.*") (the
 *     broker resolves it) reads the EXISTING records of the matching topics, then a new matching topic is
 *     created and written by this JVM and its records must arrive too ("record" {topic, partition, offset}).
 *   describe GROUP / list: the Admin's view.
 * Ends with {"event":"done"} or {"event":"error",..}.
 */
public class ConsumerGroupProtocolClient {
    static String bootstrap;

    public static void main(String[] args) throws Exception {
        bootstrap = args[0];
        String scenario = args[1];
        JsonOut.emit("-", "start", "clientVersion", org.apache.kafka.common.utils.AppInfoParser.getVersion());
        try (Admin admin = Admin.create(adminProps())) {
            switch (scenario) {
                case "churn" -> churn(admin, scenario, args[2], args[3], args[4], Integer.parseInt(args[5]));
                case "upgrade" -> upgrade(admin, scenario, args[2], args[3], Integer.parseInt(args[4]),
                        Integer.parseInt(args[5]));
                case "online_upgrade" -> onlineUpgrade(admin, scenario, args[2], args[3], Integer.parseInt(args[4]),
                        args[5]);
                case "online_roundtrip" -> onlineRoundtrip(admin, scenario, args[2], args[3], Integer.parseInt(args[4]));
                case "regex" -> regex(admin, scenario, args[2], args[3], Integer.parseInt(args[4]));
                case "describe" -> describe(admin, scenario, args[2], "describe");
                case "list" -> list(admin, scenario);
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

    static Properties adminProps() {
        Properties p = new Properties();
        p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "20000");
        p.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, "15000");
        return p;
    }

    static KafkaConsumer<byte[], byte[]> consumer(String group, String protocol, String assignor, String instance) {
        return consumer(group, protocol, assignor, instance, null);
    }

    static KafkaConsumer<byte[], byte[]> consumer(String group, String protocol, String assignor, String instance,
                                                  String strategy) {
        Properties p = new Properties();
        if (strategy != null) {
            p.put(ConsumerConfig.PARTITION_ASSIGNMENT_STRATEGY_CONFIG, strategy);
        }
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        p.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, protocol);
        if (assignor != null) {
            p.put(ConsumerConfig.GROUP_REMOTE_ASSIGNOR_CONFIG, assignor);
        }
        if (instance != null) {
            p.put(ConsumerConfig.GROUP_INSTANCE_ID_CONFIG, instance);
        }
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        p.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, "50");
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        return new KafkaConsumer<>(p);
    }

    static List<String> names(Collection<TopicPartition> tps) {
        List<String> out = new ArrayList<>();
        for (TopicPartition tp : tps) {
            out.add(tp.topic() + "-" + tp.partition());
        }
        out.sort(null);
        return out;
    }

    /** One member: polls, reports each record, commits after each batch, until told to stop. */
    static final class Member implements Runnable {
        final String scenario;
        final String name;
        final String topic;
        final String group;
        final String protocol;
        final String assignor;
        final String instance;
        final Set<String> seen;
        final AtomicBoolean stop = new AtomicBoolean();
        final Thread thread;
        final Map<TopicPartition, OffsetAndMetadata> pending = new LinkedHashMap<>();  // processed, not committed
        String strategy;  // classic members: partition.assignment.strategy class, or null for the default
        volatile Exception failure;
        volatile int count;
        int limit = Integer.MAX_VALUE;  // stop polling (but stay a member) after this many records

        Member(String scenario, String name, String topic, String group, String protocol, String assignor,
               String instance, Set<String> seen) {
            this.scenario = scenario;
            this.name = name;
            this.topic = topic;
            this.group = group;
            this.protocol = protocol;
            this.assignor = assignor;
            this.instance = instance;
            this.seen = seen;
            this.thread = new Thread(this, name);
        }

        public void run() {
            try (KafkaConsumer<byte[], byte[]> c = consumer(group, protocol, assignor, instance, strategy)) {
                c.subscribe(List.of(topic), new ConsumerRebalanceListener() {
                    public void onPartitionsRevoked(Collection<TopicPartition> partitions) {
                        JsonOut.emit(scenario, "revoked", "member", name, "partitions", names(partitions));
                        // What was processed but not yet committed (a commit refused during a classic
                        // rebalance) is committed before the partitions go.
                        Map<TopicPartition, OffsetAndMetadata> leaving = new LinkedHashMap<>();
                        for (TopicPartition tp : partitions) {
                            OffsetAndMetadata o = pending.remove(tp);
                            if (o != null) {
                                leaving.put(tp, o);
                            }
                        }
                        if (!leaving.isEmpty()) {
                            c.commitSync(leaving);
                        }
                    }

                    public void onPartitionsAssigned(Collection<TopicPartition> partitions) {
                        JsonOut.emit(scenario, "assigned", "member", name, "partitions", names(partitions));
                    }
                });
                while (!stop.get()) {
                    if (count >= limit) {
                        Thread.sleep(50);
                        continue;
                    }
                    ConsumerRecords<byte[], byte[]> records = c.poll(Duration.ofMillis(200));
                    if (records.isEmpty()) {
                        commitPending(c);
                        continue;
                    }
                    Map<TopicPartition, OffsetAndMetadata> commit = pending;
                    for (ConsumerRecord<byte[], byte[]> r : records) {
                        JsonOut.emit(scenario, "record", "member", name, "partition", r.partition(), "offset",
                                r.offset());
                        seen.add(r.partition() + ":" + r.offset());
                        count++;
                        commit.put(new TopicPartition(r.topic(), r.partition()), new OffsetAndMetadata(r.offset() + 1));
                    }
                    commitPending(c);
                }
                JsonOut.emit(scenario, "closing", "member", name);
            } catch (Exception e) {
                failure = e;
                JsonOut.emit(scenario, "member_error", "member", name, "error", e.toString());
            }
            JsonOut.emit(scenario, "closed", "member", name);
        }

        /** Commits what was processed; a classic consumer refuses while it rejoins (retried after the
         *  next poll, or committed in onPartitionsRevoked if the partitions go). */
        void commitPending(KafkaConsumer<byte[], byte[]> c) {
            if (pending.isEmpty()) {
                return;
            }
            try {
                c.commitSync(pending);
                pending.clear();
            } catch (org.apache.kafka.common.errors.RebalanceInProgressException e) {
                JsonOut.emit(scenario, "commit_deferred", "member", name);
            }
        }

        void start() {
            JsonOut.emit(scenario, "starting", "member", name);
            thread.start();
        }

        void close() throws InterruptedException {
            stop.set(true);
            thread.join(60_000);
        }
    }

    static void churn(Admin admin, String scenario, String topic, String group, String assignor, int total)
            throws Exception {
        Set<String> seen = ConcurrentHashMap.newKeySet();
        String protocol = "consumer";
        Member a = new Member(scenario, "a", topic, group, protocol, assignor, null, seen);
        Member b = new Member(scenario, "b", topic, group, protocol, assignor, null, seen);
        Member c = new Member(scenario, "c", topic, group, protocol, assignor, null, seen);
        Member s = new Member(scenario, "s", topic, group, protocol, assignor, "static-s", seen);
        Member d = new Member(scenario, "d", topic, group, protocol, assignor, null, seen);
        long t0 = System.currentTimeMillis();
        a.start();
        waitFor(seen, total / 10, t0 + 30_000);
        b.start();
        s.start();
        waitFor(seen, total / 4, t0 + 45_000);
        c.start();
        Thread.sleep(6_000);
        describe(admin, scenario, group, "describe_busy");
        a.close();  // the first member leaves while the others keep consuming
        waitFor(seen, total / 2, t0 + 70_000);
        d.start();
        Thread.sleep(6_000);
        b.close();
        waitFor(seen, total, t0 + 110_000);
        describe(admin, scenario, group, "describe_end");
        for (Member m : List.of(c, s, d)) {
            m.close();
        }
        for (Member m : List.of(a, b, c, s, d)) {
            if (m.failure != null) {
                throw m.failure;
            }
        }
        JsonOut.emit(scenario, "seen", "distinct", seen.size());
        describe(admin, scenario, group, "describe_empty");  // the static member stays (epoch -2)
    }

    static void upgrade(Admin admin, String scenario, String topic, String group, int first, int total)
            throws Exception {
        Set<String> seen = ConcurrentHashMap.newKeySet();
        long t0 = System.currentTimeMillis();
        Member classic = new Member(scenario, "classic", topic, group, "classic", null, null, seen);
        classic.limit = first;
        classic.start();
        waitFor(seen, first, t0 + 60_000);
        describe(admin, scenario, group, "describe_classic");
        list(admin, scenario);
        classic.close();
        Member modern = new Member(scenario, "consumer", topic, group, "consumer", "range", null, seen);
        modern.start();
        waitFor(seen, total, t0 + 120_000);
        describe(admin, scenario, group, "describe_consumer");
        list(admin, scenario);
        modern.close();
        for (Member m : List.of(classic, modern)) {
            if (m.failure != null) {
                throw m.failure;
            }
        }
    }

    static void regex(Admin admin, String scenario, String prefix, String group, int existing) throws Exception {
        Set<String> seen = ConcurrentHashMap.newKeySet();
        long t0 = System.currentTimeMillis();
        try (KafkaConsumer<byte[], byte[]> c = consumer(group, "consumer", null, null)) {
            c.subscribe(new SubscriptionPattern(prefix + "-.*"));
            boolean created = false;
            int later = 20;
            while (seen.size() < existing + later && System.currentTimeMillis() < t0 + 90_000) {
                for (ConsumerRecord<byte[], byte[]> r : c.poll(Duration.ofMillis(200))) {
                    JsonOut.emit(scenario, "record", "topic", r.topic(), "partition", r.partition(), "offset",
                            r.offset());
                    seen.add(r.topic() + ":" + r.partition() + ":" + r.offset());
                }
                if (!created && seen.size() >= existing) {
                    created = true;
                    String topic = prefix + "-late";
                    admin.createTopics(List.of(new NewTopic(topic, 1, (short) 1))).all().get(30, TimeUnit.SECONDS);
                    Properties p = new Properties();
                    p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
                    p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
                    p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
                    try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p)) {
                        for (int i = 0; i < later; i++) {
                            producer.send(new ProducerRecord<>(topic, ("late-" + i).getBytes())).get();
                        }
                    }
                    JsonOut.emit(scenario, "created", "topic", topic);
                }
            }
            JsonOut.emit(scenario, "assignment", "partitions", names(c.assignment()));
        }
    }

    static void onlineUpgrade(Admin admin, String scenario, String topic, String group, int total, String strategy)
            throws Exception {
        Set<String> seen = ConcurrentHashMap.newKeySet();
        long t0 = System.currentTimeMillis();
        Member classic = new Member(scenario, "classic", topic, group, "classic", null, null, seen);
        classic.strategy = strategy.equals("cooperative-sticky")
                ? "org.apache.kafka.clients.consumer.CooperativeStickyAssignor"
                : "org.apache.kafka.clients.consumer.RangeAssignor";
        classic.start();
        waitFor(seen, total / 5, t0 + 60_000);
        describe(admin, scenario, group, "describe_classic");
        Member modern = new Member(scenario, "consumer", topic, group, "consumer", "uniform", null, seen);
        modern.start();
        Thread.sleep(10_000);
        describe(admin, scenario, group, "describe_mixed");
        waitFor(seen, total * 2 / 3, t0 + 100_000);
        classic.close();
        waitFor(seen, total, t0 + 150_000);
        describe(admin, scenario, group, "describe_consumer");
        modern.close();
        for (Member m : List.of(classic, modern)) {
            if (m.failure != null) {
                throw m.failure;
            }
        }
    }

    static void onlineRoundtrip(Admin admin, String scenario, String topic, String group, int total) throws Exception {
        Set<String> seen = ConcurrentHashMap.newKeySet();
        long t0 = System.currentTimeMillis();
        Member classic = new Member(scenario, "classic", topic, group, "classic", null, null, seen);
        classic.start();
        waitFor(seen, total / 5, t0 + 60_000);
        Member modern = new Member(scenario, "consumer", topic, group, "consumer", "range", null, seen);
        modern.start();
        Thread.sleep(10_000);
        describe(admin, scenario, group, "describe_mixed");
        modern.close();
        waitFor(seen, total, t0 + 150_000);
        describe(admin, scenario, group, "describe_classic");
        classic.close();
        for (Member m : List.of(classic, modern)) {
            if (m.failure != null) {
                throw m.failure;
            }
        }
    }

    static void waitFor(Set<String> seen, int count, long deadline) throws InterruptedException {
        while (seen.size() < count && System.currentTimeMillis() < deadline) {
            Thread.sleep(50);
        }
    }

    static void describe(Admin admin, String scenario, String group, String event) throws Exception {
        ConsumerGroupDescription g = admin.describeConsumerGroups(List.of(group)).describedGroups().get(group)
                .get(30, TimeUnit.SECONDS);
        List<Map<String, Object>> members = new ArrayList<>();
        for (MemberDescription m : g.members()) {
            Map<String, Object> md = new TreeMap<>();
            md.put("memberId", m.consumerId());
            md.put("instanceId", m.groupInstanceId().orElse(null));
            md.put("clientId", m.clientId());
            md.put("host", m.host());
            md.put("assignment", names(m.assignment().topicPartitions()));
            md.put("targetAssignment", m.targetAssignment().map(t -> names(t.topicPartitions())).orElse(null));
            md.put("memberEpoch", m.memberEpoch().orElse(null));
            md.put("upgraded", m.upgraded().orElse(null));
            members.add(md);
        }
        JsonOut.emit(scenario, event, "group", g.groupId(), "type", g.type().toString(), "state",
                g.groupState().toString(), "assignor", g.partitionAssignor(), "groupEpoch",
                g.groupEpoch().orElse(null), "targetAssignmentEpoch", g.targetAssignmentEpoch().orElse(null),
                "members", members);
    }

    static void list(Admin admin, String scenario) throws Exception {
        List<Map<String, Object>> all = new ArrayList<>();
        for (GroupListing l : admin.listGroups().all().get(30, TimeUnit.SECONDS)) {
            Map<String, Object> m = new TreeMap<>();
            m.put("group", l.groupId());
            m.put("type", l.type().map(Object::toString).orElse(null));
            m.put("protocol", l.protocol());
            m.put("state", l.groupState().map(Object::toString).orElse(null));
            all.add(m);
        }
        List<String> consumers = new ArrayList<>();
        for (GroupListing l : admin.listGroups(new ListGroupsOptions().withTypes(Set.of(GroupType.CONSUMER)))
                .all().get(30, TimeUnit.SECONDS)) {
            consumers.add(l.groupId());
        }
        JsonOut.emit(scenario, "list", "groups", all, "consumerGroups", consumers);
    }
}
