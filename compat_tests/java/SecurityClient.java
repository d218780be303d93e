import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.ScramCredentialInfo;
import org.apache.kafka.clients.admin.ScramMechanism;
import org.apache.kafka.clients.admin.UserScramCredentialUpsertion;
import org.apache.kafka.clients.admin.UserScramCredentialsDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * The unmodified Java clients over a secured listener, for compat_tests/test_security.py. Usage:
 *   java SecurityClient BOOTSTRAP TOPIC SCENARIO [client.property=value ...]
 * Scenarios: roundtrip (an idempotent producer writes three records, a consumer reads them back),
 * refused (a producer's send must fail to authenticate: its exception class is reported),
 * add_user NAME PASSWORD (the Admin's alterUserScramCredentials upserts a SCRAM-SHA-512 user, then
 * describeUserScramCredentials lists its mechanisms). Prints one JSON object per line; each scenario ends
 * with {"event":"done"} or {"event":"error",..}.
 */
public class SecurityClient {
    public static void main(String[] args) {
        String bootstrap = args[0];
        String topic = args[1];
        String scenario = args[2];
        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        List<String> rest = new ArrayList<>();
        for (int i = 3; i < args.length; i++) {
            int eq = args[i].indexOf('=');
            if (eq > 0 && args[i].contains(".")) {
                props.put(args[i].substring(0, eq), args[i].substring(eq + 1));
            } else {
                rest.add(args[i]);
            }
        }
        JsonOut.emit("-", "start", "clientVersion", org.apache.kafka.common.utils.AppInfoParser.getVersion());
        try {
            switch (scenario) {
                case "roundtrip" -> roundtrip(props, topic, scenario);
                case "refused" -> refused(props, topic, scenario);
                case "add_user" -> addUser(props, rest.get(0), rest.get(1), scenario);
                default -> throw new IllegalArgumentException("unknown scenario " + scenario);
            }
            JsonOut.emit(scenario, "done");
        } catch (Throwable t) {
            StringBuilder why = new StringBuilder(t.toString());
            for (Throwable c = t.getCause(); c != null; c = c.getCause()) {
                why.append(" <- ").append(c);
            }
            JsonOut.emit(scenario, "error", "error", why.toString());
        }
        System.exit(0);
    }

    static void roundtrip(Properties base, String topic, String scenario) throws Exception {
        Properties p = new Properties();
        p.putAll(base);
        p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        p.put(ProducerConfig.ACKS_CONFIG, "all");
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(p, new StringSerializer(), new StringSerializer())) {
            for (int i = 0; i < 3; i++) {
                var meta = producer.send(new ProducerRecord<>(topic, "k" + i, "v" + i)).get(30, TimeUnit.SECONDS);
                JsonOut.emit(scenario, "produced", "partition", meta.partition(), "offset", meta.offset());
            }
        }
        Properties c = new Properties();
        c.putAll(base);
        c.put(ConsumerConfig.GROUP_ID_CONFIG, "g-" + topic);
        c.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(c, new StringDeserializer(), new StringDeserializer())) {
            consumer.subscribe(Collections.singletonList(topic));
            int read = 0;
            long deadline = System.currentTimeMillis() + 30000;
            while (read < 3 && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(500))) {
                    JsonOut.emit(scenario, "consumed", "value", r.value(), "offset", r.offset());
                    read++;
                }
            }
        }
    }

    static void refused(Properties base, String topic, String scenario) {
        Properties p = new Properties();
        p.putAll(base);
        p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "15000");
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(p, new StringSerializer(), new StringSerializer())) {
            producer.send(new ProducerRecord<>(topic, "k", "v")).get(30, TimeUnit.SECONDS);
            JsonOut.emit(scenario, "accepted");
        } catch (ExecutionException e) {
            JsonOut.emit(scenario, "refused", "exception", e.getCause().getClass().getSimpleName());
        } catch (Exception e) {
            JsonOut.emit(scenario, "refused", "exception", e.getClass().getSimpleName());
        }
    }

    static void addUser(Properties base, String name, String password, String scenario) throws Exception {
        try (Admin admin = Admin.create(base)) {
            admin.alterUserScramCredentials(List.of(new UserScramCredentialUpsertion(
                name, new ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192), password))).all().get(30, TimeUnit.SECONDS);
            UserScramCredentialsDescription description = admin.describeUserScramCredentials(List.of(name))
                .description(name).get(30, TimeUnit.SECONDS);
            for (ScramCredentialInfo info : description.credentialInfos()) {
                JsonOut.emit(scenario, "credential", "mechanism", info.mechanism().mechanismName(),
                             "iterations", info.iterations());
            }
        }
    }
}
