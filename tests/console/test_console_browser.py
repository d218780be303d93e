"""The web console in real headless Chromium (Debian's ``chromium``, driven by Playwright over its DevTools
protocol; no browser is downloaded) against a live server with real Kafka traffic: the heat map shows an
auto-scaling topic's split, a split asked for on the page happens (after its confirmation), a consumer
group's lag rises while its consumer is stopped and falls once it resumes, a native reader group's
unread bytes do the same while its reader stops and reads again, record browsing finds a produced
record, and the stream list shows each stream's kind, segments, size, rates and retention and sorts by the
header clicked. Screenshots go to pytest's temporary directory (``console-*.png``)."""

from __future__ import annotations

import json
import os
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.server_process import ServerProcess

sync_api = pytest.importorskip("playwright.sync_api", reason="the browser tests need the playwright package")
CHROMIUM = "/usr/bin/chromium"
if not os.path.exists(CHROMIUM):
    pytest.skip(f"the browser tests need Debian's chromium at {CHROMIUM} (scripts/bootstrap.sh installs it)",
                allow_module_level=True)

# Chromium as root in a container: no sandbox, and nothing that reaches out to the network.
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run"]
FAST_SCALING = ("--scale-windows", "1,2,4", "--scale-interval-seconds", "0.5", "--scale-cooldown-seconds", "2")
PARTITIONS = 4

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    srv = ServerProcess(str(tmp_path_factory.mktemp("console-browser") / "data"), *FAST_SCALING).start()
    yield srv
    srv.kill()


@pytest.fixture(scope="module")
def admin(server: ServerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": server.bootstrap})


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    profile = tmp_path_factory.mktemp("chromium-profile")  # a fresh user data dir
    with sync_api.sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(profile), executable_path=CHROMIUM, headless=True, args=CHROMIUM_FLAGS,
            viewport={"width": 1300, "height": 950})
        yield context
        context.close()


class Console:
    """One page of the console, with the page's errors collected (a test fails on any)."""

    def __init__(self, context: Any, server: ServerProcess, shots: Path) -> None:
        self.page = context.new_page()
        self.base = f"http://127.0.0.1:{server.http_port}/"
        self.shots = shots
        self.errors: list[str] = []
        self.page.on("pageerror", lambda exc: self.errors.append(f"page error: {exc}"))
        self.page.on("console", lambda msg: self.errors.append(f"console: {msg.text}") if msg.type == "error" else None)

    def open(self, route: str) -> None:
        self.page.goto(self.base + route)

    def js(self, expression: str) -> Any:
        return self.page.evaluate(expression)

    def wait(self, check: Callable[[], Any], what: str, timeout: float = 60.0) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            result = check()
            if result:
                return result
            if time.monotonic() > deadline:
                self.screenshot("timed-out")
                raise AssertionError(f"timed out waiting for {what}; page errors {self.errors}")
            self.page.wait_for_timeout(250)

    def screenshot(self, name: str) -> Path:
        path = self.shots / f"console-{name}.png"
        self.page.screenshot(path=str(path), full_page=True)
        return path

    def close(self) -> None:
        self.page.close()
        assert self.errors == []


@pytest.fixture
def console(browser: Any, server: ServerProcess, tmp_path: Path) -> Iterator[Console]:
    c = Console(browser, server, tmp_path)
    yield c
    c.close()


def create_topic(admin: AdminClient, name: str, **configs: str) -> None:
    admin.create_topics([NewTopic(name, PARTITIONS, 1, config={"millrace.segments.initial": "1", **configs})]
                        )[name].result(30)


def api(server: ServerProcess, path: str) -> Any:
    with urllib.request.urlopen(f"http://127.0.0.1:{server.http_port}{path}", timeout=30) as resp:
        return json.loads(resp.read())


class LiveProducer:
    """Produces ``rate`` keyed records a second to ``topic`` until stopped."""

    def __init__(self, server: ServerProcess, topic: str, rate: int) -> None:
        self.producer = Producer({"bootstrap.servers": server.bootstrap, "linger.ms": 5})
        self.topic, self.rate, self.sent = topic, rate, 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        start = time.monotonic()
        while not self.stop.is_set():
            due = int((time.monotonic() - start) * self.rate)
            while self.sent < due:
                self.producer.produce(self.topic, f"reading-{self.sent}".encode(), key=f"k{self.sent % 64}".encode())
                self.sent += 1
            self.producer.poll(0)
            time.sleep(0.01)
        self.producer.flush(30)

    def __enter__(self) -> LiveProducer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(60)


def chart_series(console: Console, element: str) -> dict[str, Any]:
    """The series of the ECharts chart in ``element``, by id, as the page handed them to the chart."""
    return console.js(f"""Object.fromEntries(echarts.getInstanceByDom(document.getElementById({element!r}))
        .getOption().series.map((s) => [s.id || s.name, {{data: s.data, marks: (s.markLine || {{}}).data || []}}]))""")


def test_heat_map_shows_an_auto_scaling_topics_split(console: Console, server: ServerProcess,
                                                      admin: AdminClient) -> None:
    create_topic(admin, "sensors", **{"millrace.scaling.type": "by_event_rate", "millrace.scaling.target": "100",
                                      "millrace.scaling.factor": "2", "millrace.scaling.min.segments": "1"})
    console.open("#/stream/kafka/sensors")
    console.wait(lambda: console.js("window.millrace.heatmap !== null"), "the heat map's first data")
    assert len(chart_series(console, "heatmap")["segments"]["data"]) == 1
    with LiveProducer(server, "sensors", 600):
        console.wait(lambda: any(e["reason"] == "scale-up" for e in console.js("window.millrace.heatmap.epochs")),
                     "an automatic split on the page")
        # Rates sampled after the split colour the successors' bands.
        successors = console.wait(lambda: _coloured_successors(console), "sampled rates of the new segments")
    series = chart_series(console, "heatmap")
    bands = series["segments"]["data"]  # [t0, t1, key0, key1, rate, segment number]
    first = next(b for b in bands if b[5] == 0)
    later = [b for b in bands if b[5] != 0]
    assert first[2:4] == [0, 1] and later and all(b[0] >= first[1] for b in later)  # sealed where they begin
    assert sum(b[3] - b[2] for b in later if b[1] >= max(x[1] for x in bands)) == pytest.approx(1.0)  # cover [0, 1)
    assert any("scale-up" in m["name"] for m in series["segments"]["marks"])
    assert successors
    console.screenshot("heatmap-autoscaled")


def _coloured_successors(console: Console) -> list[Any]:
    cells = chart_series(console, "heatmap")["rates"]["data"]
    return [c for c in cells if c[5] != 0 and c[4] > 0]


def test_split_from_the_page_after_confirming(console: Console, server: ServerProcess, admin: AdminClient) -> None:
    create_topic(admin, "orders")
    console.open("#/stream/kafka/orders")
    split = console.page.locator("#segments-table button.split")
    split.wait_for()
    assert split.count() == 1
    split.click()
    console.page.locator("#confirm-text").wait_for()
    assert "Split segment 0 of kafka/orders" in console.page.inner_text("#confirm-text")
    console.page.click("#confirm-cancel")  # changed my mind: nothing happens
    console.page.wait_for_timeout(500)
    assert api(server, "/api/streams/kafka/orders")["epoch"] == 0

    split.click()
    console.screenshot("split-confirmation")
    console.page.click("#confirm-ok")
    console.wait(lambda: console.page.locator("#segments-table tbody tr").count() == 2, "two open segments")
    described = api(server, "/api/streams/kafka/orders")
    assert described["epoch"] == 1 and described["history"][1]["reason"] == "manual"
    assert [(s["key_start"], s["key_end"]) for s in described["segments"]] == [(0.0, 0.5), (0.5, 1.0)]
    bands = console.wait(lambda: len(b := chart_series(console, "heatmap")["segments"]["data"]) == 3 and b,
                         "the split in the heat map")
    assert sorted((b[2], b[3]) for b in bands) == [(0, 0.5), (0, 1), (0.5, 1)]
    console.screenshot("split-done")


def test_lag_rises_while_the_consumer_is_stopped_and_falls_when_it_resumes(
        console: Console, server: ServerProcess, admin: AdminClient) -> None:
    create_topic(admin, "clicks")
    stop = threading.Event()

    def consume() -> None:
        consumer = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "dashboard",
                             "auto.offset.reset": "earliest", "auto.commit.interval.ms": 200})
        consumer.subscribe(["clicks"])
        while not stop.is_set():
            consumer.poll(0.1)
        consumer.close()  # commits what it read

    def shown_lag() -> int | None:
        text = console.page.inner_text("#group-lag") if console.page.locator("#group-lag").count() else "-"
        return None if text == "-" else int(text)

    with LiveProducer(server, "clicks", 200):
        reader = threading.Thread(target=consume, daemon=True)
        reader.start()
        # The page is opened once the group exists (before, its poll answers 404: an error in the page).
        console.wait(lambda: "dashboard" in [g["group_id"] for g in api(server, "/api/groups")["groups"]],
                     "the group to exist")
        console.open("#/group/dashboard")
        console.wait(lambda: (lag := shown_lag()) is not None and lag < 400, "a consumer keeping up")
        stop.set()
        reader.join(30)
        stopped = shown_lag()
        assert stopped is not None
        console.wait(lambda: (lag := shown_lag()) is not None and lag > stopped + 1000, "the lag rising while nobody reads")
        # ... and charted: a sample (taken every few seconds) of the risen lag.
        peak = console.wait(lambda: _charted_max(console) > stopped + 1000 and _charted_max(console), "the rise charted")
        console.screenshot("lag-rising")
        stop.clear()
        reader = threading.Thread(target=consume, daemon=True)
        reader.start()
        console.wait(lambda: (lag := shown_lag()) is not None and lag < 400, "the lag falling again")
        # The chart shows both: the peak, and a later sample far below it.
        console.wait(lambda: _fallen_after(chart_series(console, "lag-chart"), peak), "the fall charted after the peak")
        console.screenshot("lag-fallen")
        stop.set()
        reader.join(30)


def test_reader_group_on_the_page_unread_bytes_rise_and_fall(console: Console, server: ServerProcess) -> None:
    from millrace.client.manager import StreamManager

    def shown_unread() -> int | None:
        cell = console.page.locator("#reader-group-unread")
        return int(cell.get_attribute("data-bytes") or "-1") if cell.count() else None

    with StreamManager(f"tcp://127.0.0.1:{server.native_port}") as sm:
        sm.create_scope("mill")
        sm.create_stream("mill", "gauges", initial_segments=2)
        writer = sm.create_writer("mill", "gauges")
        for i in range(20):
            writer.write_event(b"g" * 200, routing_key=f"gauge-{i}").result()
        group = sm.create_reader_group("panel", "mill", "gauges")
        reader = group.create_reader("panel-1")
        while reader.read_next_event(timeout=2.0) is not None:
            pass  # caught up: the reader records its positions

        # The groups page lists it beside the Kafka groups.
        console.open("#/groups")
        row = console.page.locator("#reader-groups-table tbody tr", has_text="panel")
        row.wait_for()
        assert row.locator("td").nth(0).inner_text() == "mill" and "mill/gauges" in row.inner_text()
        row.locator("a").click()
        console.wait(lambda: shown_unread() == 0, "nothing unread while the reader keeps up")
        segments = console.page.locator("#reader-group-segments-table tbody tr")
        assert segments.count() == 2 and all("panel-1" in segments.nth(i).inner_text() for i in range(2))

        for i in range(30):  # the reader stops: unread bytes rise
            writer.write_event(b"h" * 200, routing_key=f"gauge-{i}").result()
        console.wait(lambda: (n := shown_unread()) is not None and n > 6000, "unread bytes rising on the page")
        peak = console.wait(lambda: (m := _charted_series_max(console, "unread-chart")) > 6000 and m, "the rise charted")
        console.screenshot("reader-group-behind")
        while reader.read_next_event(timeout=2.0) is not None:
            pass  # it reads again: unread bytes fall
        console.wait(lambda: shown_unread() == 0, "unread bytes falling to 0 on the page")
        console.wait(lambda: _fallen_to_zero_after(chart_series(console, "unread-chart"), peak), "the fall charted")
        console.screenshot("reader-group-caught-up")
        reader.close()
        writer.close()


def _charted_series_max(console: Console, element: str) -> int:
    (line,) = chart_series(console, element).values()
    return max((v for _, v in line["data"]), default=0)


def _fallen_to_zero_after(series: dict[str, Any], peak: int) -> bool:
    (line,) = series.values()
    values = [v for _, v in line["data"]]
    return peak in values and 0 in values[values.index(peak) + 1:]


def _charted_max(console: Console) -> int:
    (line,) = chart_series(console, "lag-chart").values()
    return max((v for _, v in line["data"]), default=0)


def _fallen_after(series: dict[str, Any], peak: int) -> bool:
    (line,) = series.values()
    values = [v for _, v in line["data"]]
    return peak in values and any(v < 400 for v in values[values.index(peak) + 1:])


def test_browsing_finds_a_produced_record(console: Console, server: ServerProcess, admin: AdminClient) -> None:
    create_topic(admin, "catalog")
    producer = Producer({"bootstrap.servers": server.bootstrap})
    for i in range(20):
        producer.produce("catalog", json.dumps({"sku": i}).encode(), key=f"sku-{i}".encode(), partition=1)
    producer.produce("catalog", json.dumps({"sku": "needle", "price": 42}).encode(), key=b"needle", partition=1,
                     headers=[("origin", b"browser-test")])
    assert producer.flush(30) == 0
    console.open("#/messages")
    console.page.locator("#msg-topic option[value=catalog]").wait_for(state="attached")
    console.page.select_option("#msg-topic", "catalog")
    console.page.fill("input[name=partition]", "1")
    console.page.select_option("select[name=from]", "offset")
    console.page.fill("input[name=position]", "15")
    console.page.select_option("select[name=format]", "json")
    console.page.click("#msg-load")
    console.page.locator("#messages-table").wait_for()
    rows = console.page.locator("#messages-table tbody tr")
    assert rows.count() == 6  # offsets 15 to 20
    needle = rows.nth(5).locator("td")
    assert needle.nth(0).inner_text() == "20" and needle.nth(2).inner_text() == "needle"  # not JSON: as text
    assert json.loads(needle.nth(3).inner_text()) == {"sku": "needle", "price": 42}
    assert needle.nth(4).inner_text() == "origin=browser-test"
    console.screenshot("messages")


STREAM_HEADERS = ["scope", "stream", "kind", "open segments", "size", "in events/s", "in bytes/s", "out bytes/s (read)",
                  "retention"]


def column_values(console: Console, table: str, key: str) -> list[float]:
    """The raw numbers of a numeric column of a stream table (its cells' data-value), top to bottom."""
    return console.js(f"""[...document.querySelectorAll('#{table} tbody tr')].map((tr) =>
        Number(tr.children[[...document.querySelectorAll('#{table} thead th')].findIndex((th) =>
            th.dataset.sort === {key!r})].dataset.value))""")


def stream_row(console: Console, table: str, name: str) -> dict[str, str] | None:
    """A stream table's row for "scope/stream", as {header key: cell text}, or None while it is missing."""
    return console.js(f"""(() => {{
        const tr = document.querySelector(`#{table} tbody tr[data-stream="{name}"]`);
        if (!tr) return null;
        const keys = [...document.querySelectorAll('#{table} thead th')].map((th) => th.dataset.sort);
        return Object.fromEntries([...tr.children].map((td, i) => [keys[i], td.innerText]));
    }})()""")


def test_stream_list_shows_its_columns_and_sorts_by_a_clicked_header(console: Console, server: ServerProcess,
                                                                       admin: AdminClient) -> None:
    from millrace.client.manager import StreamManager

    create_topic(admin, "telemetry", **{"retention.ms": "86400000"})
    with StreamManager(f"tcp://127.0.0.1:{server.native_port}") as sm:
        sm.create_scope("depot")
        sm.create_byte_stream("depot", "blob")
        with sm.create_byte_writer("depot", "blob") as writer:
            writer.write(b"b" * 5000)
            writer.flush()
        sm.create_stream("depot", "idle", initial_segments=3)
        stock = sm.create_key_value_table("depot", "stock", partitions=2)
        stock.put("bolts", b"40")

    with LiveProducer(server, "telemetry", 400):
        console.open("#/streams")
        console.wait(lambda: (row := stream_row(console, "streams-table", "kafka/telemetry"))
                     and row["bytes_in_per_s"] not in ("0 B/s", "-"), "the producing topic's rate in on the page")
        headers = console.page.locator("#streams-table thead th")
        assert [headers.nth(i).inner_text().rstrip(" \u25b2\u25bc") for i in range(headers.count())] == STREAM_HEADERS
        telemetry = stream_row(console, "streams-table", "kafka/telemetry")
        assert telemetry is not None
        assert (telemetry["kind"], telemetry["open_segments"], telemetry["retention"]) == (
            "Kafka topic", "1", "delete: up to 1 d")
        blob = stream_row(console, "streams-table", "depot/blob")
        idle = stream_row(console, "streams-table", "depot/idle")
        assert blob is not None and idle is not None
        assert (blob["kind"], blob["size_bytes"], blob["retention"]) == ("byte stream", "4.9 KiB", "none (kept)")
        assert (idle["kind"], idle["open_segments"], idle["size_bytes"]) == ("unformatted (nothing written yet)", "3", "0 B")
        table = console.wait(lambda: stream_row(console, "streams-table", "depot/stock"), "the key-value table")
        assert (table["kind"], table["open_segments"]) == ("key-value table", "2")
        assert console.page.locator('#streams-table tr[data-stream="depot/stock"] a').count() == 0  # no heat map
        # Busiest first by default.
        rates = column_values(console, "streams-table", "bytes_in_per_s")
        assert rates == sorted(rates, reverse=True) and rates[0] > 0
        assert "events out are not counted" in console.page.inner_text("#stream-list-note")
        console.screenshot("stream-list")

        # A click on "size" sorts by size, largest first; a second click turns the order round.
        console.page.click("#streams-table th[data-sort=size_bytes]")
        sizes = column_values(console, "streams-table", "size_bytes")
        assert sizes == sorted(sizes, reverse=True) and sizes[-1] == 0 and len(sizes) >= 3
        size_header = console.page.locator("#streams-table th[data-sort=size_bytes]")
        assert size_header.get_attribute("aria-sort") == "descending"
        console.page.click("#streams-table th[data-sort=size_bytes]")
        ascending = column_values(console, "streams-table", "size_bytes")  # the topic grows: read once
        assert ascending == sorted(ascending) and ascending[0] == 0
        assert console.page.locator("#streams-table th[data-sort=size_bytes]").get_attribute("aria-sort") == "ascending"
        # ... and stays so after the next polls, which ask the server for that order.
        console.wait(lambda: (listed := console.js("window.millrace.streamList")) and listed["sort"] == "size_bytes"
                     and not listed["descending"], "the server asked for the clicked order")
        polled = column_values(console, "streams-table", "size_bytes")
        assert polled == sorted(polled)
        console.screenshot("stream-list-by-size")
        # Names sort from A on the first click.
        console.page.click("#streams-table th[data-sort=stream]")
        names = console.js("[...document.querySelectorAll('#streams-table tbody tr')].map((tr) => tr.dataset.stream)")
        assert [n.split("/", 1)[1] for n in names] == sorted(n.split("/", 1)[1] for n in names)

        # The overview: the same columns for the busiest streams, the producing topic on top.
        console.open("#/overview")
        console.wait(lambda: (names := console.js("""[...document.querySelectorAll('#top-streams-table tbody tr')]
                                                     .map((tr) => tr.dataset.stream)""")) and names[0] == "kafka/telemetry",
                     "the producing topic at the top of the busiest streams")
        top_headers = console.page.locator("#top-streams-table thead th")
        assert [top_headers.nth(i).inner_text().rstrip(" \u25b2\u25bc") for i in range(top_headers.count())] == STREAM_HEADERS
        assert console.page.locator("#top-streams-table tbody tr").count() <= 10
        console.page.click("#top-streams-table th[data-sort=size_bytes]")
        top_sizes = column_values(console, "top-streams-table", "size_bytes")
        assert top_sizes == sorted(top_sizes, reverse=True)
        console.screenshot("overview-busiest-streams")


def test_overview_and_cluster_pages(console: Console, server: ServerProcess) -> None:
    console.open("#/overview")
    console.wait(lambda: console.page.locator("#overview-cards .card").count() == 7, "the overview's cards")
    assert "healthy" in console.page.inner_text("#overview-cards")
    console.wait(lambda: len(chart_series(console, "throughput")["in (appended)"]["data"]) >= 2, "throughput samples")
    links = console.page.locator("#overview-streams a")
    console.wait(lambda: links.count() > 0, "the busiest streams")
    assert "#/stream/" in (links.first.get_attribute("href") or "")
    console.screenshot("overview")
    console.open("#/cluster")
    console.page.locator("#containers-table").wait_for()
    assert console.page.locator("#containers-table tbody tr").count() == len(api(server, "/api/cluster")["containers"])
    console.screenshot("cluster")
