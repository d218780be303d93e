import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.common.utils.Time;
import org.apache.kafka.common.utils.Utils;
import org.apache.kafka.connect.connector.policy.ConnectorClientConfigOverridePolicy;
import org.apache.kafka.connect.runtime.Worker;
import org.apache.kafka.connect.runtime.WorkerConfig;
import org.apache.kafka.connect.runtime.WorkerConfigTransformer;
import org.apache.kafka.connect.runtime.distributed.DistributedConfig;
import org.apache.kafka.connect.runtime.distributed.DistributedHerder;
import org.apache.kafka.connect.runtime.isolation.Plugins;
import org.apache.kafka.connect.runtime.rest.RestClient;
import org.apache.kafka.connect.runtime.rest.entities.ConnectorStateInfo;
import org.apache.kafka.connect.storage.ConfigBackingStore;
import org.apache.kafka.connect.storage.Converter;
import org.apache.kafka.connect.storage.KafkaConfigBackingStore;
import org.apache.kafka.connect.storage.KafkaOffsetBackingStore;
import org.apache.kafka.connect.storage.KafkaStatusBackingStore;
import org.apache.kafka.connect.storage.StatusBackingStore;
import org.apache.kafka.connect.util.ConnectUtils;
import org.apache.kafka.connect.util.FutureCallback;
import org.apache.kafka.connect.util.SharedTopicAdmin;

/**
 * A Kafka Connect distributed worker (Kafka 4.3's DistributedHerder, Worker and Kafka-backed config,
 * offset and status stores, wired exactly as ConnectDistributed.createHerder wires them) driven over
 * stdin instead of its REST server: the PyPI package the jars come from lacks jetty-security 12,
 * which the REST server's servlet context needs. Everything a worker does through Kafka (the group
 * protocol, the compacted internal topics, connectors and tasks) is the real runtime.
 *
 * Usage: ConnectWorker WORKER_PROPERTIES WORKER_ID. Commands, one per line on stdin:
 *   put NAME key=value;key=value...   create or update a connector (on the leader)
 *   status NAME                       the connector's and its tasks' states and workers
 *   stop                              stop the worker gracefully (offsets flushed) and exit
 * Answers are JsonOut lines with scenario "connect".
 */
public final class ConnectWorker {
    private ConnectWorker() {
    }

    public static void main(String[] args) throws Exception {
        Map<String, String> props = Utils.propsToStringMap(Utils.loadProps(args[0]));
        String workerId = args[1];
        Plugins plugins = new Plugins(props);
        plugins.compareAndSwapWithDelegatingLoader();
        DistributedConfig config = new DistributedConfig(props);
        RestClient restClient = new RestClient(config);
        ConnectorClientConfigOverridePolicy policy = plugins.newPlugin(
            config.getString(WorkerConfig.CONNECTOR_CLIENT_POLICY_CLASS_CONFIG), config,
            ConnectorClientConfigOverridePolicy.class);
        DistributedHerder herder = createHerder(config, workerId, plugins, policy, restClient);
        herder.start();
        // Started once the herder has created and read its topics and joined the group (KIP-1017's health check).
        FutureCallback<Void> healthy = new FutureCallback<>();
        herder.healthCheck(healthy);
        healthy.get(120, TimeUnit.SECONDS);
        JsonOut.emit("connect", "started", "worker", workerId);
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            String[] parts = line.trim().split(" ", 3);
            try {
                switch (parts[0]) {
                    case "put" -> put(herder, parts[1], parts[2]);
                    case "status" -> status(herder, parts[1]);
                    case "stop" -> {
                        herder.stop();
                        JsonOut.emit("connect", "stopped", "worker", workerId);
                        System.exit(0);
                    }
                    default -> JsonOut.emit("connect", "error", "error", "unknown command " + parts[0]);
                }
            } catch (Exception e) {
                Throwable cause = e.getCause() != null ? e.getCause() : e;
                JsonOut.emit("connect", "failed", "command", parts[0], "error",
                    cause.getClass().getSimpleName() + ": " + cause.getMessage());
            }
        }
        herder.stop();
    }

    /** ConnectDistributed.createHerder, with the worker id given instead of the REST server's URL. */
    static DistributedHerder createHerder(DistributedConfig config, String workerId, Plugins plugins,
                                          ConnectorClientConfigOverridePolicy policy, RestClient restClient) {
        String kafkaClusterId = config.kafkaClusterId();
        String clientIdBase = ConnectUtils.clientIdBase(config);
        Map<String, Object> adminProps = new HashMap<>(config.originals());
        ConnectUtils.addMetricsContextProperties(adminProps, config, kafkaClusterId);
        adminProps.put("client.id", clientIdBase + "shared-admin");
        SharedTopicAdmin sharedAdmin = new SharedTopicAdmin(adminProps);
        KafkaOffsetBackingStore offsetStore = new KafkaOffsetBackingStore(sharedAdmin, () -> clientIdBase,
            plugins.newInternalConverter(true, org.apache.kafka.connect.json.JsonConverter.class.getName(),
                Map.of("schemas.enable", "false")));
        offsetStore.configure(config);
        Worker worker = new Worker(workerId, Time.SYSTEM, plugins, config, offsetStore, policy);
        WorkerConfigTransformer transformer = worker.configTransformer();
        Converter internal = worker.getInternalValueConverter();
        StatusBackingStore statusStore = new KafkaStatusBackingStore(Time.SYSTEM, internal, sharedAdmin, clientIdBase);
        statusStore.configure(config);
        ConfigBackingStore configStore = new KafkaConfigBackingStore(internal, config, transformer, sharedAdmin,
            clientIdBase);
        return new DistributedHerder(config, Time.SYSTEM, worker, kafkaClusterId, statusStore, configStore,
            "http://" + workerId + "/", restClient, policy, List.of(), sharedAdmin);
    }

    static void put(DistributedHerder herder, String name, String spec) throws Exception {
        Map<String, String> config = new LinkedHashMap<>();
        for (String kv : spec.split(";")) {
            int eq = kv.indexOf('=');
            config.put(kv.substring(0, eq), kv.substring(eq + 1));
        }
        config.put("name", name);
        FutureCallback<Object> done = new FutureCallback<>();
        herder.putConnectorConfig(name, config, true, (error, result) -> done.onCompletion(error, result));
        done.get(60, TimeUnit.SECONDS);
        JsonOut.emit("connect", "put", "name", name);
    }

    static void status(DistributedHerder herder, String name) {
        ConnectorStateInfo info = herder.connectorStatus(name);
        List<Object> tasks = new ArrayList<>();
        for (ConnectorStateInfo.TaskState t : info.tasks()) {
            tasks.add(Map.of("id", t.id(), "state", t.state(), "worker", t.workerId()));
        }
        JsonOut.emit("connect", "status", "name", name, "state", info.connector().state(),
            "worker", info.connector().workerId(), "tasks", tasks);
    }
}
