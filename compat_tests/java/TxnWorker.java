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
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * The consume-transform-produce worker of compat_tests/txn_worker.py with the Java client: reads an input topic
 * read_committed, writes each record upper-cased to an output topic, and commits its input offsets in the same
 * transaction (sendOffsetsToTransaction). Any error ends the process (exit 3): the test runs it again, and the
 * new instance's initTransactions fences the old one and aborts its open transaction, so every restart resumes
 * from the last committed transaction. compat_tests/test_transactions_java.py SIGKILLs it, or the server, while it
 * works. Usage: TxnWorker BOOTSTRAP INPUT OUTPUT TRANSACTIONAL_ID GROUP PARTITIONS PAUSE_SECONDS
 */
public final class TxnWorker {
    /** Input records per transaction at most (small: many transactions, so kills land inside one). */
    private static final int BATCH = 20;

    public static void main(String[] args) throws InterruptedException {
        String bootstrap = args[0];
        String source = args[1];
        String sink = args[2];
        String transactionalId = args[3];
        String group = args[4];
        int partitions = Integer.parseInt(args[5]);
        long pauseMs = Math.round(Double.parseDouble(args[6]) * 1000);
        try {
            run(bootstrap, source, sink, transactionalId, group, partitions, pauseMs);
        } catch (RuntimeException e) {
            System.out.println("worker failed: " + e);
            System.out.flush();
            System.exit(3);
        }
    }

    static void run(String bootstrap, String source, String sink, String transactionalId, String group,
                    int partitions, long pauseMs) throws InterruptedException {
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, transactionalId);
        p.put(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, 10000);
        p.put(ProducerConfig.LINGER_MS_CONFIG, 5);
        p.put(ProducerConfig.RECONNECT_BACKOFF_MAX_MS_CONFIG, 500);
        Properties c = new Properties();
        c.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        c.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        c.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        c.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, false);
        c.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        c.put(ConsumerConfig.FETCH_MAX_WAIT_MS_CONFIG, 100);
        c.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, BATCH);
        c.put(ConsumerConfig.RECONNECT_BACKOFF_MAX_MS_CONFIG, 500);
        try (KafkaProducer<byte[], byte[]> producer =
                     new KafkaProducer<>(p, new ByteArraySerializer(), new ByteArraySerializer());
             KafkaConsumer<byte[], byte[]> consumer =
                     new KafkaConsumer<>(c, new ByteArrayDeserializer(), new ByteArrayDeserializer())) {
            producer.initTransactions();
            // Assigned (not subscribed) partitions start at the group's committed offsets: the last transaction
            // that committed, since the one the previous instance left open was aborted by initTransactions.
            List<TopicPartition> assigned = new ArrayList<>();
            for (int i = 0; i < partitions; i++) {
                assigned.add(new TopicPartition(source, i));
            }
            consumer.assign(assigned);
            System.out.println("worker ready");
            System.out.flush();
            while (true) {
                ConsumerRecords<byte[], byte[]> records = consumer.poll(Duration.ofMillis(500));
                if (records.isEmpty()) {
                    continue;
                }
                producer.beginTransaction();
                for (ConsumerRecord<byte[], byte[]> r : records) {
                    byte[] value = r.value() == null ? new byte[0] : r.value();
                    producer.send(new ProducerRecord<>(sink, r.key(), upper(value)));
                }
                Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
                for (TopicPartition tp : assigned) {
                    offsets.put(tp, new OffsetAndMetadata(consumer.position(tp)));
                }
                producer.sendOffsetsToTransaction(offsets, consumer.groupMetadata());
                producer.commitTransaction();
                Thread.sleep(pauseMs);
            }
        }
    }

    /** ASCII upper case, byte for byte (as Python's bytes.upper() in the other workers). */
    static byte[] upper(byte[] value) {
        byte[] out = value.clone();
        for (int i = 0; i < out.length; i++) {
            if (out[i] >= 'a' && out[i] <= 'z') {
                out[i] -= 32;
            }
        }
        return out;
    }
}
