"""Runs a real ``millrace serve`` process on 127.0.0.1 with free ports, for integration tests."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from typing import Self

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# "millrace: kafka listening on 127.0.0.1:9092", "millrace: pravega controller listening on ...".
_LISTEN = re.compile(r"millrace: ([\w: ]+?) listening on [\d.]+:(\d+)")
# SIGINT stops the child whatever the test runner's disposition. A process inherits an ignored SIGINT
# (pytest-xdist's workers ignore it, as do a shell's background jobs), and then neither Python nor
# Twisted installs a handler: a test's SIGINT would be ignored. coreutils' env sets it back to the
# default before it execs Python: a ``preexec_fn`` would run Python in the forked child, which may
# deadlock when other threads start processes at the same moment (nodes started together).
_DEFAULT_SIGINT = ("env", "--default-signal=INT")


class MillraceProcess:
    """A ``python -m millrace ...`` child process whose output is collected line by line; ``start``
    returns once it prints ``millrace: ready``."""

    name = "millrace"
    cwd = REPO_ROOT  # where the process runs (relative paths in its arguments are relative to this)

    def __init__(self, env: dict[str, str] | None = None) -> None:
        self.env = {**os.environ, **(env or {})}
        self.output: list[str] = []
        self.proc: subprocess.Popen | None = None

    def command(self) -> list[str]:
        raise NotImplementedError

    def on_line(self, line: str) -> None:
        """Each line of output as it arrives (on the reader thread), e.g. to learn a chosen port."""

    def started(self) -> bool:
        """Whether the ready process is usable (checked once it printed ``millrace: ready``)."""
        return True

    def start(self, timeout: float = 60.0) -> Self:
        self.output = []
        self.proc = subprocess.Popen(
            [*_DEFAULT_SIGINT, sys.executable, "-m", "millrace", *self.command()], stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True, env=self.env, cwd=self.cwd,
        )
        ready = threading.Event()

        def pump() -> None:
            assert self.proc is not None and self.proc.stdout is not None
            for line in self.proc.stdout:
                self.output.append(line)
                self.on_line(line)
                if "millrace: ready" in line:
                    ready.set()
            ready.set()

        threading.Thread(target=pump, daemon=True).start()
        deadline = time.monotonic() + timeout
        while not ready.wait(0.1):
            if time.monotonic() > deadline:
                self._dump_threads()
                self.kill()
                raise RuntimeError(f"{self.name} did not start within {timeout} s; its output and a dump of "
                                   "its threads:\n" + "".join(self.output))
        if self.proc.poll() is not None or not self.started():
            raise RuntimeError(f"{self.name} failed to start:\n" + "".join(self.output))
        return self

    def kill(self) -> None:
        """SIGKILL: no shutdown code runs, exactly like a crash."""
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(30)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 60.0) -> int:
        """Send ``sig`` and wait for the exit status; a process that does not exit in time is asked for
        a dump of its threads' stacks (SIGUSR1, ``faulthandler``), which the error carries."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self._dump_threads()
            raise AssertionError(f"{self.name} did not exit within {timeout} s of {signal.Signals(sig).name}; "
                                 "its output and a dump of its threads:\n" + "".join(self.output)) from None

    def _dump_threads(self) -> None:
        """Ask the process for its threads' stacks (SIGUSR1: ``faulthandler`` writes them to its output)
        and give the reader thread a moment to collect them."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGUSR1)
            time.sleep(2)

    def pause(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGCONT)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.kill()




class ServerProcess(MillraceProcess):
    name = "server"

    def __init__(self, data_dir: str, *extra_args: str, env: dict[str, str] | None = None,
                 group_initial_rebalance_delay_ms: int | None = 0) -> None:
        super().__init__(env)
        self.data_dir = data_dir
        # A new group's first rebalance does not wait for more members, as in Kafka's test clusters;
        # None keeps the server's default (Kafka's 3 s).
        delay = group_initial_rebalance_delay_ms
        self.extra_args = ([] if delay is None else ["--group-initial-rebalance-delay-ms", str(delay)]) + list(extra_args)
        self.ports: dict[str, int] = {}

    def command(self) -> list[str]:
        self.ports = {}
        return ["serve", "--data-dir", self.data_dir, "--kafka-port", "0", "--native-port", "0",
                "--http-port", "0", "--log-level", "WARNING", *self.extra_args]

    def on_line(self, line: str) -> None:
        m = _LISTEN.search(line)
        if m:
            self.ports[m.group(1)] = int(m.group(2))

    def started(self) -> bool:
        return "native" in self.ports

    @property
    def kafka_port(self) -> int:
        return self.ports["kafka"]

    @property
    def bootstrap(self) -> str:
        """bootstrap.servers for Kafka clients."""
        return f"127.0.0.1:{self.kafka_port}"

    @property
    def native_port(self) -> int:
        return self.ports["native"]

    @property
    def http_port(self) -> int:
        return self.ports["http"]

    @property
    def pravega_controller_port(self) -> int:
        """Where Pravega's controller API is served (the server was given ``--pravega-controller-port``)."""
        return self.ports["pravega controller"]

    @property
    def pravega_segment_port(self) -> int:
        """Where Pravega's segment store wire protocol is served (given a Pravega port flag)."""
        return self.ports["pravega segment store"]


def add_scram_args(directory: str | os.PathLike[str], *items: str) -> list[str]:
    """``serve`` flags making the SCRAM users ``items`` at start (kafka-storage.sh format's syntax,
    ``SCRAM-SHA-512=[name=admin,password=admin-secret]``): a 0600 file in ``directory`` given with
    ``--add-scram-file``, as the server takes passwords (never on its command line)."""
    path = os.path.join(directory, f"scram-users-{len(os.listdir(directory))}")
    with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as users:
        users.write("".join(f"{item}\n" for item in items))
    return ["--add-scram-file", path]


def config_args(directory: str | os.PathLike[str], *properties: str) -> list[str]:
    """``serve`` flags giving ``properties`` (``key=value``) as a 0600 ``--config`` file in ``directory``:
    the form for properties holding secrets (JAAS users), which ``--override`` refuses."""
    path = os.path.join(directory, f"server-{len(os.listdir(directory))}.properties")
    with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as config:
        config.write("".join(f"{item}\n" for item in properties))
    return ["--config", path]


def create_topic(server: ServerProcess, name: str, partitions: int, **config: str) -> None:
    """Create a Kafka topic on ``server`` through confluent-kafka's admin client (configs as keywords,
    dots spelled out: ``create_topic(s, "t", 4, **{"retention.ms": "1000"})``)."""
    from confluent_kafka.admin import AdminClient, NewTopic  # only the tests that make topics need it

    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1, config=config)])[name].result(30)
