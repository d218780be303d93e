"""``docker/``: the image and the compose cluster (ZooKeeper, 3 logd, 3 nodes, SeaweedFS S3).

No Docker engine runs on the development machines or CI, so the compose file is checked here for what
can be checked without one: its structure, that every ``millrace`` command and flag it uses exists
(each checked against ``millrace <command> --help``, so a renamed flag fails this test), that ports,
advertised listeners, log replicas, ZooKeeper and S3 endpoints agree with the services, and that S3
authentication is on with the key pair the nodes use. ``test_compose_cluster_serves_kafka_clients``
runs the real thing through testcontainers where an engine answers, and skips cleanly otherwise.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.server_process import REPO_ROOT

DOCKER = Path(REPO_ROOT) / "docker"
COMPOSE = DOCKER / "compose.yaml"
_VARIABLE = re.compile(r"\$\{(\w+):-([^}]*)\}")


def compose() -> dict[str, Any]:
    import yaml

    return dict(yaml.safe_load(COMPOSE.read_text()))


def resolved(value: str) -> str:
    """``${NAME:-default}`` as compose resolves it with NAME unset."""
    return _VARIABLE.sub(lambda m: m.group(2), value)


def flags(command: list[str]) -> dict[str, str]:
    """``--flag value`` pairs of a command line (every flag these commands use takes a value)."""
    out: dict[str, str] = {}
    for i, arg in enumerate(command):
        if arg.startswith("--"):
            assert i + 1 < len(command) and not command[i + 1].startswith("--"), f"{arg} has no value in {command}"
            out[arg] = resolved(command[i + 1])
    return out


def millrace_services(services: dict[str, Any]) -> dict[str, Any]:
    return {name: s for name, s in services.items() if s.get("image") == "millrace:dev" and "entrypoint" not in s}


def published(service: dict[str, Any]) -> dict[int, int]:
    """container port -> host port."""
    out = {}
    for mapping in service.get("ports", []):
        host, container = str(mapping).split(":")[-2:]  # "HOST_PORT:CONTAINER_PORT"
        out[int(container)] = int(host)
    return out


def test_compose_file_has_the_cluster_and_builds_the_image_from_the_dockerfile() -> None:
    spec = compose()
    services = spec["services"]
    assert set(services) == {"zookeeper", "seaweedfs", "create-bucket", "logd-1", "logd-2", "logd-3",
                             "node-1", "node-2", "node-3"}
    for name in ("logd-1", "logd-2", "logd-3", "node-1", "node-2", "node-3", "create-bucket"):
        build = services[name]["build"]
        assert (DOCKER / build["context"] / build["dockerfile"]).resolve() == (DOCKER / "Dockerfile").resolve()
        assert "healthcheck" in services[name] or name == "create-bucket"
    assert set(spec["volumes"]) >= {"logd-1", "logd-2", "logd-3", "node-1", "node-2", "node-3"}
    for name in ("logd-1", "logd-2", "logd-3", "node-1", "node-2", "node-3"):
        assert services[name]["volumes"] == [f"{name}:/data"]  # each its own disk

    dockerfile = (DOCKER / "Dockerfile").read_text()
    assert re.search(r"^FROM python:3\.11-slim$", dockerfile, re.M)
    assert re.search(r"^RUN pip install \. ", dockerfile, re.M)  # the package, not its [test] extras
    assert "[test]" not in dockerfile and "requirements" not in dockerfile
    for copied in re.findall(r"^COPY (\S+) ", dockerfile, re.M):
        for path in copied.split():
            assert (Path(REPO_ROOT) / path).exists(), f"the Dockerfile copies {path}, which is not in the repository"
    assert re.search(r'^ENTRYPOINT \["millrace"\]$', dockerfile, re.M)


def test_every_millrace_command_and_flag_in_the_compose_file_exists() -> None:
    services = millrace_services(compose()["services"])
    assert len(services) == 6
    helps: dict[str, str] = {}
    for name, service in services.items():
        command = service["command"]
        sub = command[0]
        if sub not in helps:
            done = subprocess.run([sys.executable, "-m", "millrace", sub, "--help"], capture_output=True, text=True,
                                  cwd=REPO_ROOT, timeout=60)
            assert done.returncode == 0, f"`millrace {sub} --help` failed: {done.stderr}"
            helps[sub] = done.stdout
        for flag in flags(command):
            assert re.search(rf"(^|\s|\[){re.escape(flag)}(\s|$|\])", helps[sub], re.M), \
                f"{name}: `millrace {sub}` has no {flag}"


def test_ports_listeners_and_endpoints_agree_with_the_services() -> None:
    services = compose()["services"]
    logds = {name: flags(s["command"]) for name, s in services.items() if name.startswith("logd-")}
    replicas = sorted(f"{name}:{f['--port']}" for name, f in logds.items())
    for f in logds.values():
        assert f["--host"] == "0.0.0.0"  # reachable from the nodes' containers
    nodes = {name: flags(s["command"]) for name, s in services.items() if name.startswith("node-")}
    host_ports: list[int] = []
    for name, f in nodes.items():
        assert services[name]["command"][0] == "serve"
        assert f["--node-id"] == name.split("-")[1]
        assert f["--zookeeper"].split(":")[0] == "zookeeper"
        assert sorted(f["--log-replicas"].split(",")) == replicas
        assert int(f["--write-quorum"]) <= len(replicas) and int(f["--ack-quorum"]) <= int(f["--write-quorum"])
        assert f["--host"] == "0.0.0.0"
        assert f["--lts"].startswith("s3://")
        assert f["--s3-endpoint"] == "http://seaweedfs:8333"
        # Clients outside the network: each advertised listener is the host port published for it.
        ports = published(services[name])
        for listener in ("kafka", "native"):
            advertised_host, advertised_port = f[f"--advertised-{listener}"].rsplit(":", 1)
            assert advertised_host == "localhost"
            assert ports[int(f[f"--{listener}-port"])] == int(advertised_port), f"{name}: {listener} not published"
            host_ports.append(int(advertised_port))
        # Peers: inside the network, by service name, on the port the node listens on.
        assert f["--advertised-peer"] == f"{name}:{f['--peer-port']}"
    assert len(host_ports) == len(set(host_ports)) == 6
    # Nodes one at a time, each after ZooKeeper, every logd and the bucket.
    for i, name in enumerate(sorted(nodes)):
        needs = services[name]["depends_on"]
        assert {"zookeeper", "logd-1", "logd-2", "logd-3", "create-bucket"} <= set(needs)
        if i:
            assert needs[f"node-{i}"] == {"condition": "service_healthy"}


def test_the_secure_override_configures_every_node_by_kafka_properties() -> None:
    """compose.secure.yaml: each node reads secure/server.properties (mounted, named by MILLRACE_CONFIG),
    which makes the listeners and an inter-broker login a node accepts (the checks ``serve`` makes at
    start); its first listener is the port compose.yaml publishes and health-checks, and each node's host
    name is its service name, which the INTERNAL listener is advertised as."""
    import yaml

    from millrace.gateway.assembly import node_link
    from millrace.gateway.security.properties import load_properties, security_settings

    base = compose()["services"]
    secure = yaml.safe_load((DOCKER / "compose.secure.yaml").read_text())["services"]
    assert set(secure) == {name for name in base if name.startswith("node-")}
    for name, service in secure.items():
        assert service["hostname"] == name
        target = service["environment"]["MILLRACE_CONFIG"]
        source = next(v.split(":")[0] for v in service["volumes"] if v.split(":")[1] == target)
        settings = security_settings(load_properties(DOCKER / source))
        link = node_link(settings)
        assert link.sasl is not None and link.listener != settings.listeners[0].name
        first = settings.listeners[0]
        assert first.uses_sasl and first.endpoint.port == int(flags(base[name]["command"])["--kafka-port"])
        assert first.endpoint.port in published(base[name])
        assert settings.listener(link.listener).endpoint.port not in published(base[name])  # inside only
        assert settings.authorizer_enabled


def test_s3_authentication_is_on_with_the_nodes_key_pair() -> None:
    services = compose()["services"]
    command = services["seaweedfs"]["command"]
    assert command[0] == "server" and "-s3" in command
    config = next(a.split("=", 1)[1] for a in command if a.startswith("-s3.config="))
    mount = next(v for v in services["seaweedfs"]["volumes"] if v.split(":")[1] == config)
    identities = json.loads((DOCKER / mount.split(":")[0]).read_text())["identities"]
    keys = {(c["accessKey"], c["secretKey"]) for i in identities for c in i["credentials"]
            if {"Read", "Write", "List"} <= set(i["actions"]) or "Admin" in i["actions"]}
    for name in ("node-1", "node-2", "node-3", "create-bucket"):
        env = services[name]["environment"]
        assert (env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"]) in keys, name
    bucket = flags(services["node-1"]["command"])["--lts"].removeprefix("s3://").split("/")[0]
    assert f'"{bucket}"' in services["create-bucket"]["command"][0]


def _docker_engine() -> str | None:
    """None when a Docker engine answers, else why not."""
    try:
        import docker

        docker.from_env(timeout=5).ping()
    except Exception as exc:  # noqa: BLE001 - no socket, no permission, no daemon: all mean "skip"
        return f"no Docker engine: {exc}"
    return None


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_compose_cluster_serves_kafka_clients() -> None:
    missing = _docker_engine()
    if missing:
        pytest.skip(missing)
    from kafka import KafkaConsumer, KafkaProducer
    from testcontainers.compose import DockerCompose

    with DockerCompose(str(DOCKER), compose_file_name="compose.yaml", build=True, wait=True):
        bootstrap = ["localhost:19092", "localhost:29092", "localhost:39092"]
        producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
        values = [str(i).encode() for i in range(100)]
        for v in values:
            producer.send("compose", key=v, value=v)
        producer.flush(60)
        producer.close()
        consumer = KafkaConsumer("compose", bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                                 consumer_timeout_ms=30000)
        got = [m.value for _, m in zip(values, consumer, strict=False)]
        consumer.close()
        assert sorted(got, key=int) == values
