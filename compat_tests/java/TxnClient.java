import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * Kafka transactions with the Java client against Millrace: one JVM runs the scenarios named on the command
 * line (commit-abort, fencing, ctp) and prints JSON lines (JsonOut) that compat_tests/test_transactions_java.py
 * checks. Usage: TxnClient BOOTSTRAP PREFIX SCENARIO...
 */
public final class TxnClient {
    private static String bootstrap;
    private static String prefix;

    public static void main(String[] args) {
        bootstrap = args[0];
        prefix = args[1];
        JsonOut.emit("-", "start", "clientVersion", org.apache.kafka.common.utils.AppInfoParser.getVersion());
        for (int i = 2; i < args.length; i++) {
            String scenario = args[i];
            try {
                switch (scenario) {
                    case "commit-abort" -> commitAbort(scenario);
                    case "fencing" -> fencing(scenario);
                    case "ctp" -> consumeTransformProduce(scenario);
                    default -> throw new IllegalArgumentException("unknown scenario " + scenario);
                }
                JsonOut.emit(scenario, "done");
            } catch (Exception e) {
                JsonOut.emit(scenario, "error", "error", e.toString());
            }
        }
        System.exit(0);
    }

    static KafkaProducer<String, String> producer(String transactionalId) {
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, transactionalId);
        p.put(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, 30000);
        p.put(ProducerConfig.LINGER_MS_CONFIG, 2);
        KafkaProducer<String, String> producer = new KafkaProducer<>(p, new StringSerializer(), new StringSerializer());
        producer.initTransactions();
        return producer;
    }

    static KafkaConsumer<String, String> consumer(String group, String isolation) {
        Properties c = new Properties();
        c.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        c.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        c.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, isolation);
        c.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        c.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, false);
        return new KafkaConsumer<>(c, new StringDeserializer(), new StringDeserializer());
    }

    /** Every value of the topic's partitions up to their end offsets at the given isolation level. */
    static List<String> readAll(String topic, int partitions, String isolation) {
        List<String> values = new ArrayList<>();
        try (KafkaConsumer<String, String> c = consumer(prefix + "-reader-" + System.nanoTime(), isolation)) {
            List<TopicPartition> tps = new ArrayList<>();
            for (int p = 0; p < partitions; p++) {
                tps.add(new TopicPartition(topic, p));
            }
            c.assign(tps);
            c.seekToBeginning(tps);
            Map<TopicPartition, Long> end = c.endOffsets(tps); // the last stable offset at read_committed
            long deadline = System.currentTimeMillis() + 30000;
            while (System.currentTimeMillis() < deadline) {
                boolean done = true;
                for (TopicPartition tp : tps) {
                    done &= c.position(tp) >= end.get(tp);
                }
                if (done) {
                    break;
                }
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(200))) {
                    values.add(r.value());
                }
            }
        }
        return values;
    }

    static void commitAbort(String scenario) {
        String topic = prefix + "-ca";
        try (KafkaProducer<String, String> p = producer(prefix + "-ca-tx")) {
            p.beginTransaction();
            for (int i = 0; i < 20; i++) {
                p.send(new ProducerRecord<>(topic, "k" + i, "committed-" + i));
            }
            p.commitTransaction();
            p.beginTransaction();
            for (int i = 0; i < 20; i++) {
                p.send(new ProducerRecord<>(topic, "k" + i, "aborted-" + i));
            }
            p.flush();
            p.abortTransaction();
        }
        JsonOut.emit(scenario, "read", "isolation", "read_committed", "values", readAll(topic, 3, "read_committed"));
        JsonOut.emit(scenario, "read", "isolation", "read_uncommitted", "values",
                readAll(topic, 3, "read_uncommitted"));
    }

    static void fencing(String scenario) {
        String topic = prefix + "-fence";
        String id = prefix + "-fence-tx";
        KafkaProducer<String, String> zombie = producer(id);
        zombie.beginTransaction();
        zombie.send(new ProducerRecord<>(topic, "z", "zombie"));
        zombie.flush();
        try (KafkaProducer<String, String> successor = producer(id)) {
            String fenced = "not fenced";
            try {
                zombie.send(new ProducerRecord<>(topic, "z", "zombie-again"));
                zombie.commitTransaction();
            } catch (KafkaException e) {
                fenced = e.getClass().getSimpleName();
            }
            zombie.close(Duration.ofSeconds(5));
            JsonOut.emit(scenario, "zombie", "exception", fenced);
            successor.beginTransaction();
            successor.send(new ProducerRecord<>(topic, "s", "successor"));
            successor.commitTransaction();
        }
        JsonOut.emit(scenario, "read", "values", readAll(topic, 3, "read_committed"));
    }

    /** Reads 300 input records in transactions of 30 and writes them upper-cased with their offsets. */
    static void consumeTransformProduce(String scenario) {
        String source = prefix + "-ctp-in";
        String sink = prefix + "-ctp-out";
        String group = prefix + "-ctp-group";
        try (KafkaProducer<String, String> feeder = producer(prefix + "-ctp-feed")) {
            feeder.beginTransaction();
            for (int i = 0; i < 300; i++) {
                feeder.send(new ProducerRecord<>(source, "k" + (i % 7), "r" + i));
            }
            feeder.commitTransaction();
        }
        int moved = 0;
        try (KafkaProducer<String, String> p = producer(prefix + "-ctp-tx");
             KafkaConsumer<String, String> c = consumer(group, "read_committed")) {
            c.subscribe(List.of(source));
            long deadline = System.currentTimeMillis() + 60000;
            while (moved < 300 && System.currentTimeMillis() < deadline) {
                ConsumerRecords<String, String> records = c.poll(Duration.ofMillis(200));
                if (records.isEmpty()) {
                    continue;
                }
                p.beginTransaction();
                Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
                for (ConsumerRecord<String, String> r : records) {
                    p.send(new ProducerRecord<>(sink, r.key(), r.value().toUpperCase()));
                    offsets.put(new TopicPartition(r.topic(), r.partition()), new OffsetAndMetadata(r.offset() + 1));
                    moved++;
                }
                p.sendOffsetsToTransaction(offsets, c.groupMetadata());
                p.commitTransaction();
            }
        }
        Map<String, Long> committed = new HashMap<>();
        try (KafkaConsumer<String, String> c = consumer(group, "read_committed")) {
            List<TopicPartition> tps = new ArrayList<>();
            for (int i = 0; i < 3; i++) {
                tps.add(new TopicPartition(source, i));
            }
            for (Map.Entry<TopicPartition, OffsetAndMetadata> e : c.committed(new java.util.HashSet<>(tps)).entrySet()) {
                committed.put(String.valueOf(e.getKey().partition()), e.getValue() == null ? -1L : e.getValue().offset());
            }
        }
        JsonOut.emit(scenario, "moved", "count", moved, "committed", committed,
                "values", readAll(sink, 3, "read_committed"));
    }
}
