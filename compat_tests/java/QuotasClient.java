import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.AlterClientQuotasOptions;
import org.apache.kafka.common.KafkaFuture;
import org.apache.kafka.common.quota.ClientQuotaAlteration;
import org.apache.kafka.common.quota.ClientQuotaEntity;
import org.apache.kafka.common.quota.ClientQuotaFilter;
import org.apache.kafka.common.quota.ClientQuotaFilterComponent;

/**
 * Sets and lists client quotas through the unmodified Java Admin (alterClientQuotas,
 * describeClientQuotas), printing one JSON object per line for compat_tests/test_quotas.py. Usage:
 *   java QuotasClient BOOTSTRAP PRODUCER_CLIENT_ID CONSUMER_CLIENT_ID BYTES_PER_SECOND
 * Scenarios, in order: refused (validateOnly with an unknown key, then a fractional byte rate: each
 * call's outcome), alter (producer_byte_rate on the producer's client id, consumer_byte_rate on the
 * consumer's, request_percentage on the default user), describe (every client-id entity, then the
 * default user strictly).
 */
public class QuotasClient {
    static final long WAIT_SECONDS = 30;

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String producer = args[1];
        String consumer = args[2];
        double rate = Double.parseDouble(args[3]);
        JsonOut.emit("-", "start", "clientVersion", org.apache.kafka.common.utils.AppInfoParser.getVersion());
        Properties p = new Properties();
        p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "20000");
        p.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, "15000");
        try (Admin admin = Admin.create(p)) {
            run("refused", () -> {
                ClientQuotaEntity entity = new ClientQuotaEntity(Map.of(ClientQuotaEntity.CLIENT_ID, producer));
                outcome("refused", "unknown_key", admin.alterClientQuotas(List.of(new ClientQuotaAlteration(entity,
                    List.of(new ClientQuotaAlteration.Op("no_such_quota", 1.0)))),
                    new AlterClientQuotasOptions().validateOnly(true)).all());
                outcome("refused", "fraction", admin.alterClientQuotas(List.of(new ClientQuotaAlteration(entity,
                    List.of(new ClientQuotaAlteration.Op("producer_byte_rate", 1.5))))).all());
            });
            run("alter", () -> {
                Map<String, String> defaultUser = new TreeMap<>();
                defaultUser.put(ClientQuotaEntity.USER, null);  // <default>
                get(admin.alterClientQuotas(List.of(
                    new ClientQuotaAlteration(new ClientQuotaEntity(Map.of(ClientQuotaEntity.CLIENT_ID, producer)),
                        List.of(new ClientQuotaAlteration.Op("producer_byte_rate", rate))),
                    new ClientQuotaAlteration(new ClientQuotaEntity(Map.of(ClientQuotaEntity.CLIENT_ID, consumer)),
                        List.of(new ClientQuotaAlteration.Op("consumer_byte_rate", rate))),
                    new ClientQuotaAlteration(new ClientQuotaEntity(defaultUser),
                        List.of(new ClientQuotaAlteration.Op("request_percentage", 400.0))))).all());
            });
            run("describe", () -> {
                emitQuotas("describe", "clients", get(admin.describeClientQuotas(ClientQuotaFilter.contains(
                    List.of(ClientQuotaFilterComponent.ofEntityType(ClientQuotaEntity.CLIENT_ID)))).entities()));
                emitQuotas("describe", "default_user", get(admin.describeClientQuotas(ClientQuotaFilter.containsOnly(
                    List.of(ClientQuotaFilterComponent.ofDefaultEntity(ClientQuotaEntity.USER)))).entities()));
            });
        }
    }

    interface Body {
        void run() throws Exception;
    }

    static void run(String scenario, Body body) {
        try {
            body.run();
            JsonOut.emit(scenario, "done");
        } catch (Exception e) {
            JsonOut.emit(scenario, "error", "error", e.toString());
        }
    }

    static <T> T get(KafkaFuture<T> future) throws Exception {
        return future.get(WAIT_SECONDS, TimeUnit.SECONDS);
    }

    static void outcome(String scenario, String event, KafkaFuture<?> future) throws Exception {
        try {
            get(future);
            JsonOut.emit(scenario, event, "outcome", "ok");
        } catch (ExecutionException e) {
            JsonOut.emit(scenario, event, "outcome", e.getCause().getClass().getSimpleName(),
                "message", e.getCause().getMessage());
        }
    }

    static void emitQuotas(String scenario, String event, Map<ClientQuotaEntity, Map<String, Double>> found) {
        List<Object> entries = new ArrayList<>();
        for (Map.Entry<ClientQuotaEntity, Map<String, Double>> e : found.entrySet()) {
            Map<String, Object> entry = new TreeMap<>();
            Map<String, String> names = new TreeMap<>();
            e.getKey().entries().forEach((type, name) -> names.put(type, name == null ? "<default>" : name));
            entry.put("entity", names);
            entry.put("values", new TreeMap<>(e.getValue()));
            entries.add(entry);
        }
        JsonOut.emit(scenario, event, "entries", entries);
    }
}
