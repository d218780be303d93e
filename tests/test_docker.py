"""``docker/``: the image and the compose cluster (ZooKeeper, 3 logd, 3 nodes, SeaweedFS S3).

No Docker engine runs on the development machines or CI, so the compose file is checked here for what
can be checked without one: its structure, that every ``millrace`` command and flag it uses exists
(each checked against ``millrace <command> --help``, so a renamed flag fails this test), that ports,
advertised listeners, log replicas, ZooKeeper and S3 endpoints agree with the services, and that S3
authentication is on with the key pair the nodes use. ``compose.secure.yaml`` is checked against the keys
the command its header documents makes (``millrace cluster keys``, run into a temporary directory): every
key file it mounts is one of them, each process gets its own and the flags ``cluster keys`` prints for it,
ZooKeeper listens on TLS only with the lines it prints, and the nodes' properties load with those files.
``test_compose_cluster_serves_kafka_clients``
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

from millrace.gateway.commands.cluster_keys import ClusterKeys
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


# -- compose.secure.yaml: every link secured with the keys of `millrace cluster keys` -----------------

SECURE = DOCKER / "compose.secure.yaml"
KEYS_INSIDE = "/etc/millrace/keys"  # where each service finds its own key files


def secure_compose() -> dict[str, Any]:
    import yaml

    return dict(yaml.safe_load(SECURE.read_text()))


def documented_keys_command() -> list[str]:
    """The ``millrace cluster keys ...`` arguments compose.secure.yaml's header says to run."""
    comments = "\n".join(line.lstrip("#").strip() for line in SECURE.read_text().splitlines()
                         if line.startswith("#"))
    found = re.search(r"millrace (cluster keys .*?)(?<!\\)\n", comments.replace("\\\n", " "))
    assert found, "compose.secure.yaml's header does not say how to make the keys"
    return found.group(1).split()


@pytest.fixture(scope="module")
def made_keys(tmp_path_factory: pytest.TempPathFactory) -> tuple[ClusterKeys, str]:
    """The keys the documented command makes (into a temporary directory instead of docker/secure/keys),
    and what it printed."""
    args = documented_keys_command()
    where = args.index("--dir") + 1
    assert (Path(REPO_ROOT) / args[where]).resolve() == (DOCKER / "secure" / "keys").resolve()
    args[where] = str(tmp_path_factory.mktemp("compose") / "keys")
    done = subprocess.run([sys.executable, "-m", "millrace", *args], capture_output=True, text=True,
                          cwd=REPO_ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    return ClusterKeys(Path(args[where])), done.stdout


def key_files(secure: dict[str, Any], service: str, keys: ClusterKeys) -> dict[str, Path]:
    """What ``service`` finds under /etc/millrace/keys (its path there -> the file `cluster keys` made that
    the ``keys`` service copies there), checking the chain of mounts on the way: a read-only bind of
    secure/keys/FILE at /from/SERVICE/NAME in ``keys``, its volume keys-SERVICE at /to/SERVICE there and
    read-only at /etc/millrace/keys in the service."""
    copier = secure["services"]["keys"]["volumes"]
    assert f"keys-{service}:/to/{service}" in copier
    assert f"keys-{service}:{KEYS_INSIDE}:ro" in secure["services"][service]["volumes"]
    out: dict[str, Path] = {}
    for mount in copier:
        if isinstance(mount, dict) and mount["target"].startswith(f"/from/{service}/"):
            assert mount["type"] == "bind" and mount["read_only"] is True, mount
            assert mount["bind"]["create_host_path"] is False, mount  # a missing key is an error, not a directory
            source = (DOCKER / mount["source"]).resolve()
            relative = source.relative_to((DOCKER / "secure" / "keys").resolve())
            made = keys.directory / relative
            assert made.is_file(), f"{service}: {mount['source']} is no file `millrace cluster keys` makes"
            out[KEYS_INSIDE + mount["target"].removeprefix(f"/from/{service}")] = made
    assert out, f"{service} gets no key files"
    return out


def inside(files: dict[str, Path], path: str) -> Path:
    """The file (or, for a directory, the directory of the files) ``path`` names inside a container."""
    if path in files:
        return files[path]
    under = {p: f for p, f in files.items() if p.startswith(path.rstrip("/") + "/")}
    assert under, f"{path} is not among the key files mounted: {sorted(files)}"
    parents = {f.parent for f in under.values()}
    assert len(parents) == 1, f"{path} mixes files of {parents}"
    return parents.pop()


def test_the_secure_override_mounts_only_key_files_cluster_keys_makes(made_keys: tuple[ClusterKeys, str]) -> None:
    keys, _ = made_keys
    secure = secure_compose()
    services = secure["services"]
    assert set(services) == {"keys", "zookeeper", "logd-1", "logd-2", "logd-3", "node-1", "node-2", "node-3"}
    assert "docker/secure/keys/" in (Path(REPO_ROOT) / ".gitignore").read_text().splitlines()
    copier = services["keys"]
    assert copier["image"] == "millrace:dev" and copier["user"] == "root" and copier["restart"] == "no"
    compile(copier["command"][0], "keys", "exec")
    secrets = {keys.ca_key, keys.logd_secret_key, keys.node_secret_key, keys.zookeeper_credentials,
               keys.zookeeper_keystore, *(keys.node_keystore(n) for n in ("1", "2", "3"))}
    wanted = {
        "zookeeper": {keys.zookeeper_keystore, keys.ca},
        **{f"logd-{i}": {keys.logd_secret_key, keys.logd_public_key.parent.parent / "nodes" / "node.key"}
           for i in (1, 2, 3)},
        **{f"node-{i}": {keys.node_keystore(str(i)), keys.ca, keys.zookeeper_credentials, keys.node_secret_key,
                         keys.logd_public_key} for i in (1, 2, 3)},
    }
    for name, files in wanted.items():
        given = set(key_files(secure, name, keys).values())
        assert given == files, f"{name} gets {sorted(map(str, given))}"
        assert keys.ca_key not in given  # the CA's key stays with whoever signs
        assert services[name]["depends_on"]["keys"] == {"condition": "service_completed_successfully"}
        assert secrets & given <= files
    binds = [m for m in copier["volumes"] if isinstance(m, dict)]
    assert len(binds) == sum(len(files) for files in wanted.values())  # nothing else is mounted
    assert set(secure["volumes"]) == {f"keys-{name}" for name in wanted}


def test_every_millrace_command_and_flag_in_the_secure_override_exists() -> None:
    services = secure_compose()["services"]
    helps: dict[str, str] = {}
    for name, service in services.items():
        if name in ("keys", "zookeeper"):
            continue
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


def test_every_node_and_logd_gets_the_flags_cluster_keys_prints(made_keys: tuple[ClusterKeys, str]) -> None:
    """Each command is compose.yaml's plus what `cluster keys` prints for the process (the same files, as
    they are named inside its container); the nodes' --zookeeper names ZooKeeper's TLS port."""
    from millrace.store.cluster.peer_tls import PeerTls
    from millrace.store.cluster.zk_auth import ZooKeeperCredentials
    from millrace.store.cluster.zk_tls import ZooKeeperTls
    from millrace.store.durablelog.curve import CurveClientKeys, CurveServerKeys

    keys, printed = made_keys
    base = compose()["services"]
    secure = secure_compose()
    zoo = zookeeper_config(secure)
    for name, service in secure["services"].items():
        if not name.startswith(("node-", "logd-")):
            continue
        files = key_files(secure, name, keys)
        given, before = flags(service["command"]), flags(base[name]["command"])
        assert service["command"][0] == base[name]["command"][0]
        if name.startswith("node-"):
            node_id = name.split("-")[1]
            expected = flags(keys.node_flags(node_id, zookeeper_tls=True))
            assert f"millrace serve ... {' '.join(keys.node_flags(node_id, zookeeper_tls=True))}" in printed
            assert given["--zookeeper"] == f"zookeeper:{zoo['secureClientPort']}"
            assert {**before, "--zookeeper": given["--zookeeper"]} == {f: v for f, v in given.items()
                                                                       if f not in expected}
            assert service["hostname"] == name
        else:
            expected = flags(keys.logd_flags())
            assert f"millrace logd ... {' '.join(keys.logd_flags())}" in printed
            assert before == {f: v for f, v in given.items() if f not in expected}
        assert set(expected) <= set(given), f"{name} lacks {set(expected) - set(given)}"
        for flag, made in expected.items():
            assert inside(files, given[flag]) == Path(made), f"{name}: {flag} {given[flag]} is not {made}"
        translated = {flag: str(inside(files, given[flag])) for flag in expected}
        if name.startswith("node-"):  # and they load as the node loads them
            assert PeerTls.from_flags(translated["--peer-tls-keystore"], translated["--peer-tls-truststore"])
            assert ZooKeeperTls.from_flags(translated["--zookeeper-tls-keystore"],
                                           translated["--zookeeper-tls-truststore"])
            ZooKeeperCredentials.load(translated["--zookeeper-credentials"])
            CurveClientKeys.load(translated["--log-curve-secret-key"], translated["--log-curve-server-key"])
        else:
            CurveServerKeys.load(translated["--curve-secret-key"], translated["--curve-authorized-keys"])
            authorized = {p for p in files if p.startswith(given["--curve-authorized-keys"] + "/")}
            assert {Path(p).name for p in authorized} == {"node.key"}  # the nodes' public key, not their secret


def zookeeper_config(secure: dict[str, Any]) -> dict[str, str]:
    volumes = secure["services"]["zookeeper"]["volumes"]
    source = next(v.split(":")[0] for v in volumes if isinstance(v, str) and v.split(":")[1] == "/conf/zoo.cfg")
    lines = [line.strip() for line in (DOCKER / source).read_text().splitlines()]
    return dict(line.split("=", 1) for line in lines if line and not line.startswith("#"))


def test_zookeeper_listens_on_tls_only_with_the_keys_cluster_keys_makes(made_keys: tuple[ClusterKeys, str]) -> None:
    keys, printed = made_keys
    secure = secure_compose()
    zookeeper = secure["services"]["zookeeper"]
    assert compose()["services"]["zookeeper"]["image"] == "zookeeper:3.9"  # reads /conf/zoo.cfg when there
    config = zookeeper_config(secure)
    assert "clientPort" not in config and "clientPortAddress" not in config
    assert config["secureClientPort"].isdigit()
    files = key_files(secure, "zookeeper", keys)
    assert f"secureClientPort=<port> {' '.join(keys.zookeeper_tls_properties())}" in printed
    for line in keys.zookeeper_tls_properties():
        key, value = line.split("=", 1)
        if key.endswith(".location"):  # the same file, as the container names it
            assert inside(files, config[key]) == Path(value), line
        else:
            assert config[key] == value, line
    # The health check (`zkServer.sh status`) dials the TLS port with a certificate of the CA.
    assert compose()["services"]["zookeeper"]["healthcheck"]["test"] == ["CMD", "zkServer.sh", "status"]
    client = dict(f.removeprefix("-D").split("=", 1) for f in zookeeper["environment"]["CLIENT_JVMFLAGS"].split())
    assert inside(files, client["zookeeper.ssl.keyStore.location"]) == keys.zookeeper_keystore
    assert inside(files, client["zookeeper.ssl.trustStore.location"]) == keys.ca
    assert client["zookeeper.ssl.keyStore.type"] == client["zookeeper.ssl.trustStore.type"] == "PEM"
    assert "4lw.commands.whitelist" in config and "srvr" in config["4lw.commands.whitelist"].split(",")


def test_the_secure_override_configures_every_node_by_kafka_properties(made_keys: tuple[ClusterKeys, str]) -> None:
    """Each node reads secure/server.properties (mounted, named by MILLRACE_CONFIG): every listener
    SASL_SSL with the node's own key store and the cluster CA (the file names the same path in every
    container; each node's holds its own certificate), and an inter-broker and native login a node
    accepts (the checks ``serve`` makes at start, here with the key files the paths name); its first
    listener is the port compose.yaml publishes and health-checks (over TLS, for the node's host name),
    and each node's host name is its service name, which the INTERNAL listener is advertised as."""
    from millrace.gateway.security.properties import (
        apply_overrides,
        load_properties,
        native_listener_settings,
        security_settings,
    )
    from millrace.gateway.shared.assembly import native_link, node_link

    keys, _ = made_keys
    base = compose()["services"]
    secure = secure_compose()
    for name, service in secure["services"].items():
        if not name.startswith("node-"):
            continue
        assert service["hostname"] == name
        target = service["environment"]["MILLRACE_CONFIG"]
        source = next(v.split(":")[0] for v in service["volumes"] if v.split(":")[1] == target)
        props = load_properties(DOCKER / source)
        files = key_files(secure, name, keys)
        assert inside(files, props["ssl.keystore.location"]) == keys.node_keystore(name.split("-")[1])
        assert inside(files, props["ssl.truststore.location"]) == keys.ca
        located = [f"{k}={inside(files, v)}" for k, v in props.items() if k.endswith(".location")]
        settings = security_settings(apply_overrides(props, located))
        link = node_link(settings)
        assert link.sasl is not None and link.tls is not None and link.listener != settings.listeners[0].name
        node_flags = flags(service["command"])
        native = native_listener_settings(apply_overrides(props, located), "0.0.0.0", int(node_flags["--native-port"]))
        assert native_link(settings, native, link).tls is not None
        for listener in (*settings.listeners, native, settings.http):
            assert listener.security_protocol == "SASL_SSL", listener.name
        first = settings.listeners[0]
        assert first.endpoint.port == int(node_flags["--kafka-port"])
        assert first.endpoint.port in published(base[name])
        assert settings.listener(link.listener).endpoint.port not in published(base[name])  # inside only
        assert settings.authorizer_enabled
        check = service["healthcheck"]["test"]
        assert check[:3] == ["CMD", "python", "-c"]
        compile(check[3], "healthcheck", "exec")
        assert f'("127.0.0.1", {first.endpoint.port})' in check[3] and "server_hostname=socket.gethostname()" in check[3]
        cafile = re.search(r'cafile="([^"]+)"', check[3])
        assert cafile and inside(files, cafile.group(1)) == keys.ca


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
