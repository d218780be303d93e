/*
 * A Kafka produce load generator in C on librdkafka, so the broker is what a run measures: a Python
 * producer tops out near 300 k records/s on this machine, below what the brokers take.
 *
 * It links the librdkafka that the confluent-kafka wheel ships (benchmarks/compare.py builds it). The
 * wheel has no headers, so the few calls used are declared below from librdkafka's public, stable ABI
 * (src/rdkafka.h); nothing else of the library is touched.
 *
 *   produce_load BOOTSTRAP TOPIC PARTITIONS RECORDS SIZE [RATE] [-X key=value ...]
 *
 * Record i goes to partition i % PARTITIONS, its value SIZE random bytes, no key. RATE > 0 paces the
 * produce calls to that many records a second (latency at a given load); 0 sends as fast as the queue
 * takes them. Time runs from the first produce to the last delivery report. Latency is each record's
 * produce call to its delivery report (linger included), as librdkafka's own rdkafka_performance -l
 * measures it, after one record sent and acknowledged first (connections, metadata and the producer
 * id are not the load). One JSON line on stdout.
 */

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct rd_kafka_s rd_kafka_t;
typedef struct rd_kafka_conf_s rd_kafka_conf_t;
typedef struct rd_kafka_topic_s rd_kafka_topic_t;
typedef int rd_kafka_resp_err_t;

typedef struct rd_kafka_message_s {
    rd_kafka_resp_err_t err;
    rd_kafka_topic_t *rkt;
    int32_t partition;
    void *payload;
    size_t len;
    void *key;
    size_t key_len;
    int64_t offset;
    void *_private; /* the msg_opaque given to rd_kafka_produce */
} rd_kafka_message_t;

enum { RD_KAFKA_PRODUCER = 0 };
enum { RD_KAFKA_CONF_OK = 0 };
enum { RD_KAFKA_MSG_F_COPY = 0x2 };
enum { RD_KAFKA_RESP_ERR__QUEUE_FULL = -184 };

rd_kafka_conf_t *rd_kafka_conf_new(void);
int rd_kafka_conf_set(rd_kafka_conf_t *conf, const char *name, const char *value, char *errstr,
                      size_t errstr_size);
void rd_kafka_conf_set_dr_msg_cb(rd_kafka_conf_t *conf,
                                 void (*cb)(rd_kafka_t *rk, const rd_kafka_message_t *msg, void *opaque));
rd_kafka_t *rd_kafka_new(int type, rd_kafka_conf_t *conf, char *errstr, size_t errstr_size);
rd_kafka_topic_t *rd_kafka_topic_new(rd_kafka_t *rk, const char *topic, void *conf);
int rd_kafka_produce(rd_kafka_topic_t *rkt, int32_t partition, int msgflags, void *payload, size_t len,
                     const void *key, size_t keylen, void *msg_opaque);
int rd_kafka_poll(rd_kafka_t *rk, int timeout_ms);
rd_kafka_resp_err_t rd_kafka_flush(rd_kafka_t *rk, int timeout_ms);
rd_kafka_resp_err_t rd_kafka_last_error(void);
const char *rd_kafka_err2str(rd_kafka_resp_err_t err);
void rd_kafka_topic_destroy(rd_kafka_topic_t *rkt);
void rd_kafka_destroy(rd_kafka_t *rk);

static int64_t *sent_ns;      /* per record: when its produce call was made */
static double *latency_ms;    /* per delivered record, in delivery order */
static int64_t delivered, failed, last_delivery_ns;
static rd_kafka_resp_err_t first_error;

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void on_delivery(rd_kafka_t *rk, const rd_kafka_message_t *msg, void *opaque) {
    (void)rk;
    (void)opaque;
    int64_t now = now_ns();
    if (msg->err) {
        if (!failed++)
            first_error = msg->err;
        return;
    }
    latency_ms[delivered++] = (double)(now - sent_ns[(intptr_t)msg->_private]) / 1e6;
    last_delivery_ns = now;
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double percentile(double p) {
    if (!delivered)
        return 0;
    int64_t i = (int64_t)(p * (double)(delivered - 1) + 0.5);
    return latency_ms[i];
}

static void set(rd_kafka_conf_t *conf, const char *name, const char *value) {
    char err[512];
    if (rd_kafka_conf_set(conf, name, value, err, sizeof err) != RD_KAFKA_CONF_OK) {
        fprintf(stderr, "produce_load: %s=%s: %s\n", name, value, err);
        exit(2);
    }
}

int main(int argc, char **argv) {
    if (argc < 6) {
        fprintf(stderr, "usage: %s BOOTSTRAP TOPIC PARTITIONS RECORDS SIZE [RATE] [-X key=value ...]\n", argv[0]);
        return 2;
    }
    const char *bootstrap = argv[1], *topic_name = argv[2];
    int partitions = atoi(argv[3]);
    int64_t records = atoll(argv[4]);
    size_t size = (size_t)atol(argv[5]);
    double rate = 0;
    int arg = 6;
    if (arg < argc && strcmp(argv[arg], "-X") != 0)
        rate = atof(argv[arg++]);

    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    set(conf, "bootstrap.servers", bootstrap);
    set(conf, "queue.buffering.max.messages", "1000000");
    set(conf, "queue.buffering.max.kbytes", "1048576");
    for (; arg + 1 < argc; arg += 2) {
        if (strcmp(argv[arg], "-X") != 0) {
            fprintf(stderr, "produce_load: expected -X key=value, got %s\n", argv[arg]);
            return 2;
        }
        char *pair = argv[arg + 1], *eq = strchr(pair, '=');
        if (!eq) {
            fprintf(stderr, "produce_load: expected key=value, got %s\n", pair);
            return 2;
        }
        *eq = '\0';
        set(conf, pair, eq + 1);
    }
    rd_kafka_conf_set_dr_msg_cb(conf, on_delivery);
    char err[512];
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof err);
    if (!rk) {
        fprintf(stderr, "produce_load: %s\n", err);
        return 1;
    }
    rd_kafka_topic_t *topic = rd_kafka_topic_new(rk, topic_name, NULL);

    char *payload = malloc(size ? size : 1);
    srand(1);
    for (size_t i = 0; i < size; i++)
        payload[i] = (char)rand();
    sent_ns = calloc((size_t)records, sizeof *sent_ns);
    latency_ms = calloc((size_t)records, sizeof *latency_ms);
    if (!payload || !sent_ns || !latency_ms) {
        fprintf(stderr, "produce_load: out of memory\n");
        return 1;
    }

    /* One record first, waited for: connections, metadata and the producer id are not the load. */
    char warm_error[512] = "";
    sent_ns[0] = now_ns();
    if (rd_kafka_produce(topic, 0, RD_KAFKA_MSG_F_COPY, payload, size, NULL, 0, (void *)(intptr_t)0) != 0)
        snprintf(warm_error, sizeof warm_error, "%s", rd_kafka_err2str(rd_kafka_last_error()));
    int64_t give_up = now_ns() + (int64_t)60e9;
    while (!warm_error[0] && delivered + failed < 1 && now_ns() < give_up)
        rd_kafka_poll(rk, 100);
    if (!warm_error[0] && delivered + failed < 1)
        snprintf(warm_error, sizeof warm_error, "no answer within 60 s");
    if (warm_error[0] || failed) {
        fprintf(stderr, "produce_load: the first record failed: %s\n",
                warm_error[0] ? warm_error : rd_kafka_err2str(first_error));
        return 1;
    }
    delivered = 0;

    int64_t began = now_ns();
    for (int64_t i = 0; i < records; i++) {
        if (rate > 0) {
            int64_t due = began + (int64_t)((double)i * 1e9 / rate);
            while (now_ns() < due)
                rd_kafka_poll(rk, 0);
        }
        sent_ns[i] = now_ns();
        while (rd_kafka_produce(topic, (int32_t)(i % partitions), RD_KAFKA_MSG_F_COPY, payload, size, NULL, 0,
                                (void *)(intptr_t)i) != 0) {
            if (rd_kafka_last_error() != RD_KAFKA_RESP_ERR__QUEUE_FULL) {
                fprintf(stderr, "produce_load: %s\n", rd_kafka_err2str(rd_kafka_last_error()));
                return 1;
            }
            rd_kafka_poll(rk, 1);
        }
        if (!(i & 1023))
            rd_kafka_poll(rk, 0);
    }
    while (delivered + failed < records)
        rd_kafka_poll(rk, 100);
    rd_kafka_flush(rk, 10000);

    double seconds = (double)(last_delivery_ns - began) / 1e9;
    qsort(latency_ms, (size_t)delivered, sizeof *latency_ms, by_value);
    printf("{\"records\": %lld, \"failed\": %lld, \"first_error\": \"%s\", \"size\": %zu, \"partitions\": %d, "
           "\"seconds\": %.6f, \"records_per_s\": %.1f, \"mb_per_s\": %.3f, "
           "\"latency_ms\": {\"p50\": %.3f, \"p95\": %.3f, \"p99\": %.3f, \"max\": %.3f}}\n",
           (long long)delivered, (long long)failed, failed ? rd_kafka_err2str(first_error) : "", size, partitions,
           seconds, seconds > 0 ? (double)delivered / seconds : 0.0,
           seconds > 0 ? (double)delivered * (double)size / seconds / 1e6 : 0.0, percentile(0.50),
           percentile(0.95), percentile(0.99), delivered ? latency_ms[delivered - 1] : 0.0);
    rd_kafka_topic_destroy(topic);
    rd_kafka_destroy(rk);
    return failed ? 1 : 0;
}
