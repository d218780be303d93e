// The Millrace console: one page, routed by the URL's hash, reading the server's JSON API
// (gateway/console/__init__.py lists it) and polling it while a page is shown. Charts: Apache ECharts
// (the global `echarts`, vendored in static/vendor/). Every value from the server is put in the page as
// text, never as HTML.
import { heatmapOption } from "/static/heatmap.js";

const POLL_MS = 2000;
const view = document.getElementById("view");
const statusLine = document.getElementById("status");

// What the tests (and a curious operator in the devtools) can read: the data each chart was drawn from.
window.millrace = { pollMs: POLL_MS, heatmap: null, lastError: null };

// -- helpers ------------------------------------------------------------------------------------------

function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "class") el.className = v;
    else el.setAttribute(k, v);
  }
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

function table(headers, rows, attrs = {}) {
  return h("table", attrs,
    h("thead", {}, h("tr", {}, headers.map((x) => h("th", {}, x)))),
    h("tbody", {}, rows.map((cells) => h("tr", {}, cells.map((c) =>
      c instanceof Node && c.tagName === "TD" ? c : h("td", typeof c === "number" ? { class: "num" } : {}, c ?? "-"))))));
}

function bytes(n) {
  if (n === null || n === undefined) return "-";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (Math.abs(n) >= 1024 && i < units.length - 1) { n /= 1024; i += 1; }
  return `${n.toFixed(i ? 1 : 0)} ${units[i]}`;
}

const when = (ms) => (ms === null || ms === undefined ? "-" : new Date(ms).toISOString().replace("T", " ").replace("Z", ""));
const enc = encodeURIComponent;

async function api(path, options = {}) {
  const resp = await fetch(path, { headers: { accept: "application/json" }, ...options });
  const body = await resp.json().catch(() => ({ error: resp.statusText }));
  if (!resp.ok) throw new Error(`${resp.status} ${body.error || resp.statusText}`);
  return body;
}

function showError(err) {
  window.millrace.lastError = String(err.message || err);
  statusLine.textContent = window.millrace.lastError;
  statusLine.className = "error";
}

function showOk() {
  statusLine.textContent = `updated ${new Date().toLocaleTimeString()}`;
  statusLine.className = "";
}

// A confirmation in the page (not window.confirm, which would stop the page's polling).
function confirmAction(text) {
  const dialog = document.getElementById("confirm");
  document.getElementById("confirm-text").textContent = text;
  return new Promise((resolve) => {
    dialog.addEventListener("close", () => resolve(dialog.returnValue === "ok"), { once: true });
    dialog.returnValue = "";
    dialog.showModal();
  });
}

function chart(el) {
  return echarts.getInstanceByDom(el) || echarts.init(el);
}

function lineChart(el, series, yName, format = (v) => v) {
  chart(el).setOption({
    animation: false,
    tooltip: { trigger: "axis", valueFormatter: format },
    legend: { top: 4 },
    grid: { left: 70, right: 24, top: 36, bottom: 36 },
    xAxis: { type: "time" },
    yAxis: { type: "value", name: yName, axisLabel: { formatter: format } },
    series: series.map((s) => ({ type: "line", showSymbol: false, name: s.name, data: s.data })),
  }, { notMerge: true });
}

// -- the stream list (the Streams page and the overview's busiest streams) -------------------------------
// Rows as /api/stream-list gives them (gateway/console/stream_list.py says what each figure is). Sorted here
// by the clicked column at once; the Streams page also asks the server for that order, which cuts long
// lists after sorting.

const STREAM_LIST_LIMIT = 500;
const KIND_NAMES = { "kafka-topic": "Kafka topic", "event-stream": "event stream", "byte-stream": "byte stream",
  synchronizer: "synchronizer", unformatted: "unformatted (nothing written yet)", "key-value-table": "key-value table" };

function duration(ms) {
  const units = [["d", 86400000], ["h", 3600000], ["min", 60000], ["s", 1000]];
  for (const [unit, size] of units) if (ms >= size && ms % size === 0) return `${ms / size} ${unit}`;
  for (const [unit, size] of units) if (ms >= size) return `${(ms / size).toFixed(1)} ${unit}`;
  return `${ms} ms`;
}

function retentionText(r) {
  const limits = [r.ms !== null ? duration(r.ms) : null, r.bytes !== null ? bytes(r.bytes) : null].filter(Boolean);
  const upTo = limits.length ? `up to ${limits.join(" or ")}` : "unlimited";
  if (r.policy === "none") return "none (kept)";
  if (r.policy === "consumption") return "until consumed";
  if (r.policy === "time" || r.policy === "size") return `${r.policy}: ${upTo}`;
  return r.policy.includes("delete") ? `${r.policy}: ${upTo}` : r.policy;  // a Kafka topic's cleanup.policy
}

// Shortest kept first, as the server's stream_list.retention_key.
const retentionKey = (r) => [r.ms ?? Infinity, r.bytes ?? Infinity, r.policy];
const rate = (v, digits = 1) => (v === null || v === undefined ? "-" : v.toFixed(digits));

// [key (the API's sort column), header, the cell's text, the sort value, numeric, first click descending]
const STREAM_COLUMNS = [
  { key: "scope", label: "scope", text: (r) => r.scope, value: (r) => [r.scope, r.stream] },
  { key: "stream", label: "stream", value: (r) => [r.stream, r.scope],
    cell: (r) => h("td", {}, r.kind === "key-value-table" ? r.stream  // no segments over time to show
      : h("a", { href: `#/stream/${enc(r.scope)}/${enc(r.stream)}` }, r.stream)) },
  { key: "kind", label: "kind", text: (r) => KIND_NAMES[r.kind] || r.kind, value: (r) => [r.kind, r.scope, r.stream] },
  { key: "open_segments", label: "open segments", text: (r) => r.open_segments, value: (r) => r.open_segments, num: true },
  { key: "size_bytes", label: "size", text: (r) => bytes(r.size_bytes), value: (r) => r.size_bytes, num: true },
  { key: "events_in_per_s", label: "in events/s", text: (r) => rate(r.events_in_per_s), value: (r) => r.events_in_per_s, num: true },
  { key: "bytes_in_per_s", label: "in bytes/s", text: (r) => `${bytes(r.bytes_in_per_s)}/s`, value: (r) => r.bytes_in_per_s, num: true },
  { key: "bytes_out_per_s", label: "out bytes/s (read)", value: (r) => r.bytes_out_per_s ?? -1, num: true,
    text: (r) => (r.bytes_out_per_s === null ? "-" : `${bytes(r.bytes_out_per_s)}/s`) },
  { key: "retention", label: "retention", text: (r) => retentionText(r.retention), value: (r) => retentionKey(r.retention) },
];

function compareValues(a, b) {
  if (Array.isArray(a)) {
    for (let i = 0; i < a.length; i += 1) {
      const c = compareValues(a[i], b[i]);
      if (c) return c;
    }
    return 0;
  }
  return a < b ? -1 : a > b ? 1 : 0;
}

function sortStreams(rows, sort) {
  const column = STREAM_COLUMNS.find((c) => c.key === sort.key);
  const byName = (a, b) => compareValues([a.scope, a.stream], [b.scope, b.stream]);
  return [...rows].sort((a, b) => (sort.desc ? -1 : 1) * compareValues(column.value(a), column.value(b)) || byName(a, b));
}

// A sort that persists while the console is open: { key, desc }. A first click on a column sorts numbers
// largest first and names from A; a second click on it turns the order round.
function clickedSort(sort, key) {
  if (sort.key === key) return { key, desc: !sort.desc };
  return { key, desc: STREAM_COLUMNS.find((c) => c.key === key).num === true };
}

function streamTable(rows, sort, onSort, id) {
  const headers = STREAM_COLUMNS.map((c) => h("th", {
    class: `sortable${c.num ? " num" : ""}`, "data-sort": c.key, title: "sort by this column",
    "aria-sort": c.key === sort.key ? (sort.desc ? "descending" : "ascending") : "none",
    onclick: () => onSort(clickedSort(sort, c.key)) }, c.label, c.key === sort.key ? (sort.desc ? " \u25bc" : " \u25b2") : ""));
  return h("table", { id, class: "streams" },
    h("thead", {}, h("tr", {}, headers)),
    h("tbody", {}, sortStreams(rows, sort).map((r) => h("tr", { "data-stream": `${r.scope}/${r.stream}` },
      STREAM_COLUMNS.map((c) => (c.cell ? c.cell(r) : h("td", {
        class: c.num ? "num" : null,
        "data-value": c.num ? String(c.value(r)) : null }, c.text(r))))))));
}

function streamListNote(l) {
  const span = l.rate_window_s ? `${l.rate_window_s} s` : "its shortest window";
  return `In: appended to the stream's open segments, the store's moving average over ${span}. ` +
    `Out: bytes read from the stream's segments by any reader (Kafka fetches, native reads, the server's own ` +
    `loads) over the last ${l.sample_seconds} s; events out are not counted. Size: bytes its segments hold ` +
    `after truncation. A key-value table's open segments are its partitions. Measured every ${l.sample_seconds} s` + (l.time_ms ? `, last at ${when(l.time_ms)}.` : "; not yet.");
}

// -- pages ---------------------------------------------------------------------------------------------
// Each page: build(params) makes the page's elements once, refresh() fills them and runs on every poll.

const pages = {};

let overviewSort = { key: "bytes_in_per_s", desc: true };
let streamListSort = { key: "bytes_in_per_s", desc: true };

pages.overview = () => {
  const cards = h("div", { class: "cards", id: "overview-cards" });
  const throughput = h("div", { class: "chart", id: "throughput" });
  const streams = h("div", { id: "overview-streams" });
  view.append(h("h2", {}, "Overview"), cards, h("h3", {}, "Throughput (this node)"), throughput,
    h("h3", {}, "Busiest streams (by bytes in; ", h("a", { href: "#/streams" }, "all streams"), ")"), streams);
  let top = [];
  const drawTop = () => streams.replaceChildren(top.length
    ? streamTable(top, overviewSort, (sort) => { overviewSort = sort; drawTop(); }, "top-streams-table")
    : h("p", { class: "muted" }, "No streams measured yet."));
  return async () => {
    const o = await api("/api/overview");
    const streamCount = o.scopes.reduce((n, s) => n + s.streams.length, 0);
    const card = (label, value, cls) => h("div", { class: "card" }, h("div", { class: "label" }, label),
      h("div", { class: `value ${cls || ""}` }, value));
    cards.replaceChildren(
      card("health", o.healthy ? "healthy" : "degraded", o.healthy ? "ok" : "bad"),
      card("containers", Object.keys(o.containers).length),
      card("streams", streamCount), card("Kafka topics", o.topics),
      card("durable log", bytes(o.storage.log_bytes)), card("read cache", bytes(o.storage.cache_bytes)),
      card("long-term storage", bytes(o.storage.long_term_bytes)));
    lineChart(throughput, [
      { name: "in (appended)", data: o.throughput.map((t) => [t.time_ms, t.bytes_in_per_s]) },
      { name: "out (read)", data: o.throughput.map((t) => [t.time_ms, t.bytes_out_per_s]) },
    ], "bytes/s", (v) => `${bytes(v)}/s`);
    top = o.top_streams;
    window.millrace.topStreams = top;
    drawTop();
  };
};

pages.streams = () => {
  const summary = h("p", { id: "stream-list-summary" });
  const list = h("div", { id: "stream-list" });
  const note = h("p", { class: "muted", id: "stream-list-note" });
  view.append(h("h2", {}, "Streams"), summary, list, note);
  let last = null;
  const draw = () => {
    if (!last) return;
    list.replaceChildren(streamTable(last.streams, streamListSort, (sort) => {
      streamListSort = sort;
      draw();  // at once, on the rows here; the next poll asks the server for this order
    }, "streams-table"));
  };
  return async () => {
    const sort = streamListSort;
    const l = await api(`/api/stream-list?sort=${sort.key}&order=${sort.desc ? "desc" : "asc"}&limit=${STREAM_LIST_LIMIT}`);
    last = l;
    window.millrace.streamList = l;
    const column = STREAM_COLUMNS.find((c) => c.key === l.sort).label;
    summary.textContent = l.total > l.streams.length
      ? `${l.total} streams; the first ${l.streams.length} by ${column} (${l.descending ? "largest" : "smallest"} first) are shown.`
      : `${l.total} streams.`;
    note.textContent = streamListNote(l);
    draw();
  };
};

pages.stream = (scope, stream) => {
  const heading = h("h2", {}, `${scope}/${stream}`);
  const summary = h("p", { id: "stream-summary", class: "muted" });
  const metric = h("select", { id: "heat-metric" }, h("option", { value: "bytes" }, "KiB/s"),
    h("option", { value: "events" }, "events/s"));
  const heat = h("div", { class: "chart tall", id: "heatmap" });
  const segments = h("div", { id: "segments" });
  const epochs = h("div", { id: "epochs" });
  const partitions = h("div", { id: "partitions" });
  const base = `/api/streams/${enc(scope)}/${enc(stream)}`;
  let last = null;
  const draw = () => {
    if (!last) return;
    chart(heat).setOption(heatmapOption(last, metric.value, Date.now()), { notMerge: true });
  };
  metric.addEventListener("change", draw);

  async function scale(action, body, text) {
    if (!(await confirmAction(text))) return;
    try {
      await api(`${base}/${action}`, { method: "POST", headers: { "content-type": "application/json" },
        body: JSON.stringify(body) });
      await refresh();
    } catch (err) { showError(err); }
  }

  view.append(heading, summary, h("h3", {}, "Segments over time (key space against time, coloured by rate) ", metric),
    heat, h("h3", {}, "Open segments"), segments, h("h3", {}, "Epochs"), epochs, partitions);

  async function refresh() {
    const hm = await api(`/api/heatmap/${enc(scope)}/${enc(stream)}`);
    last = hm;
    window.millrace.heatmap = hm;
    draw();
    const d = hm.description;
    summary.textContent = `${d.state}, epoch ${d.epoch}, ${d.segments.length} open segments` +
      (d.partition_count !== null ? `, Kafka topic with ${d.partition_count} partitions` : "") +
      `; scaling ${d.config.scaling.type}; retention ${d.config.retention.type} ${d.config.retention.value}`;
    const open = [...d.segments].sort((a, b) => a.key_start - b.key_start);
    const rate = (s) => (s.rates && s.rates.length ? s.rates[0] : null);
    segments.replaceChildren(table(
      ["segment", "key range", "partitions", "container", "length", "events/s", "KiB/s", ""],
      open.map((s, i) => [s.number, `[${s.key_start.toFixed(4)}, ${s.key_end.toFixed(4)})`,
        s.partitions ? s.partitions.join(",") : "-", s.container, s.length,
        rate(s) ? rate(s).events_per_s.toFixed(1) : "-", rate(s) ? rate(s).kib_per_s.toFixed(1) : "-",
        h("td", {},
          h("button", { class: "split", "data-segment": s.number, onclick: () => scale("split",
            { segment: s.number, pieces: 2 }, `Split segment ${s.number} of ${scope}/${stream} in two?`) }, "Split"),
          " ",
          i + 1 < open.length ? h("button", { class: "merge", "data-segment": s.number, onclick: () => scale("merge",
            { segments: [s.number, open[i + 1].number] },
            `Merge segments ${s.number} and ${open[i + 1].number} of ${scope}/${stream}?`) }, "Merge with next") : null)]),
      { id: "segments-table" }));
    epochs.replaceChildren(table(["epoch", "time", "reason", "sealed", "created"], [...hm.epochs].reverse().map((e) => [
      e.epoch, when(e.created_ms), e.reason, e.sealed_ids.map((x) => x % 2 ** 32).join(", ") || "-",
      e.created_ids.map((x) => x % 2 ** 32).join(", ")])));
    if (d.partition_count !== null) {
      const t = await api(`/api/topics/${enc(stream)}`);
      partitions.replaceChildren(h("h3", {}, "Partitions"), table(
        ["partition", "log start", "high watermark", "last stable", "records", ""],
        t.partitions.map((p) => [p.partition, p.log_start_offset, p.high_watermark, p.last_stable_offset,
          p.high_watermark - p.log_start_offset,
          h("td", {}, h("a", { href: `#/messages/${enc(stream)}/${p.partition}` }, "browse"))])),
        h("p", { class: "muted" }, "retention: ", t.configs["retention.ms"] ? `${t.configs["retention.ms"]} ms` : "default",
          "; configs: ", Object.entries(t.configs).map(([k, v]) => `${k}=${v}`).join(", ") || "defaults"));
    }
  }
  return refresh;
};

pages.groups = () => {
  const list = h("div", { id: "group-list" });
  const readerList = h("div", { id: "reader-group-list" });
  view.append(h("h2", {}, "Consumer groups"), list, h("h2", {}, "Native reader groups"), readerList);
  return async () => {
    // On a cluster only the coordinating node answers for the Kafka groups (the others answer 503 naming
    // it), while any node answers for the reader groups: draw what came, then report what did not.
    const [kafka, native] = await Promise.allSettled([api("/api/groups"), api("/api/reader-groups")]);
    if (kafka.status === "fulfilled") {
      const { groups } = kafka.value;
      list.replaceChildren(groups.length ? table(["group", "state", "type", "members", "lag"], groups.map((g) => [
        h("td", {}, h("a", { href: `#/group/${enc(g.group_id)}` }, g.group_id)), g.state, g.type, g.members, g.lag]),
      { id: "groups-table" }) : h("p", { class: "muted" }, "No consumer groups."));
    } else {
      list.replaceChildren(h("p", { class: "muted" }, String(kafka.reason.message || kafka.reason)));
    }
    if (native.status === "rejected") throw native.reason;
    const readerGroups = native.value.reader_groups;
    window.millrace.readerGroups = readerGroups;
    readerList.replaceChildren(readerGroups.length ? table(["scope", "group", "streams", "readers online", "unread"],
      readerGroups.map((g) => [g.scope,
        h("td", {}, h("a", { href: `#/reader-group/${enc(g.scope)}/${enc(g.group)}` }, g.group)),
        g.streams.join(", "), g.online_readers.length, h("td", { class: "num", "data-bytes": g.unread_bytes }, bytes(g.unread_bytes))]),
    { id: "reader-groups-table" }) : h("p", { class: "muted" }, "No reader groups."));
    if (kafka.status === "rejected") throw kafka.reason;
  };
};

// A native reader group: its readers' segments and positions (what they last recorded) and the bytes left
// to read, now and over time.
pages["reader-group"] = (scope, group) => {
  const summary = h("p", { id: "reader-group-summary" });
  const unreadChart = h("div", { class: "chart", id: "unread-chart" });
  const segments = h("div", { id: "reader-group-segments" });
  const checkpoints = h("p", { id: "reader-group-checkpoints", class: "muted" });
  view.append(h("h2", {}, `Reader group ${scope}/${group}`), summary, h("h3", {}, "Unread bytes over time"), unreadChart,
    h("h3", {}, "Segments (held by a reader, waiting, or not reached yet)"), segments, checkpoints);
  return async () => {
    const g = await api(`/api/reader-groups/${enc(scope)}/${enc(group)}`);
    window.millrace.readerGroup = g;
    summary.replaceChildren(`streams ${g.streams.join(", ")}; ${g.online_readers.length} readers online ` +
      `(${g.online_readers.join(", ") || "none"}); unread `,
      h("strong", { id: "reader-group-unread", "data-bytes": g.unread_bytes }, bytes(g.unread_bytes)));
    lineChart(unreadChart, [{ name: "unread", data: g.unread_history.map((x) => [x.time_ms, x.unread_bytes]) }],
      "bytes", bytes);
    segments.replaceChildren(table(["segment", "reader", "state", "position", "length", "unread"],
      g.segments.map((x) => [x.segment, x.reader, x.state, x.skip ? `${x.offset} (+${x.skip} events)` : x.offset, x.length,
        h("td", { class: "num", "data-bytes": x.unread_bytes }, bytes(x.unread_bytes))]),
      { id: "reader-group-segments-table" }));
    checkpoints.textContent = `checkpoints pending: ${g.checkpoints.pending.map((c) => c.name).join(", ") || "none"}; ` +
      `completed: ${g.checkpoints.completed.join(", ") || "none"}`;
  };
};

pages.group = (groupId) => {
  const summary = h("p", { id: "group-summary" });
  const lagChart = h("div", { class: "chart", id: "lag-chart" });
  const members = h("div", { id: "members" });
  const partitions = h("div", { id: "group-partitions" });
  view.append(h("h2", {}, `Group ${groupId}`), summary, h("h3", {}, "Lag over time"), lagChart,
    h("h3", {}, "Members"), members, h("h3", {}, "Partitions"), partitions);
  return async () => {
    const g = await api(`/api/groups/${enc(groupId)}`);
    window.millrace.group = g;
    summary.replaceChildren(`${g.state} (${g.type}), generation ${g.generation}, ${g.members.length} members, total lag `,
      h("strong", { id: "group-lag" }, g.lag ?? "-"));
    lineChart(lagChart, [{ name: "lag (records)", data: g.lag_history.map((x) => [x.time_ms, x.lag]) }], "records");
    members.replaceChildren(table(["member", "client id", "host", "assignment"], g.members.map((m) => [
      m.member_id, m.client_id, m.client_host,
      m.assignment.map((a) => `${a.topic}: ${a.partitions.join(",")}`).join("; ") || "-"])));
    partitions.replaceChildren(table(["topic", "partition", "committed", "log start", "high watermark", "lag"],
      g.partitions.map((p) => [p.topic, p.partition, p.committed_offset, p.log_start_offset, p.high_watermark, p.lag]),
      { id: "group-partitions-table" }));
  };
};

pages.messages = (topic = "", partition = "0") => {
  const topicSelect = h("select", { name: "topic", id: "msg-topic" });
  const form = h("form", { class: "inline", id: "msg-form" },
    h("label", {}, "topic", topicSelect),
    h("label", {}, "partition", h("input", { name: "partition", type: "number", min: "0", value: partition, size: "4" })),
    h("label", {}, "from", h("select", { name: "from" }, h("option", { value: "newest" }, "newest"),
      h("option", { value: "offset" }, "offset"), h("option", { value: "timestamp" }, "time (ISO or ms)"))),
    h("label", {}, "position", h("input", { name: "position", placeholder: "offset or time", size: "22" })),
    h("label", {}, "limit", h("input", { name: "limit", type: "number", min: "1", max: "500", value: "50", size: "4" })),
    h("label", {}, "value as", h("select", { name: "format" }, ["text", "json", "hex", "base64"].map((f) => h("option", { value: f }, f)))),
    h("label", {}, "isolation", h("select", { name: "isolation" }, h("option", { value: "read_committed" }, "read committed"),
      h("option", { value: "read_uncommitted" }, "read uncommitted"))),
    h("button", { type: "submit", id: "msg-load" }, "Load"));
  const out = h("div", { id: "messages" });
  view.append(h("h2", {}, "Messages"), form, out);

  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const f = new FormData(form);
    const q = new URLSearchParams({ partition: f.get("partition"), limit: f.get("limit"), format: f.get("format"),
      isolation: f.get("isolation") });
    const position = String(f.get("position") || "").trim();
    if (f.get("from") === "offset") q.set("offset", position || "0");
    if (f.get("from") === "timestamp") q.set("timestamp", /^\d+$/.test(position) ? position : String(Date.parse(position)));
    try {
      const r = await api(`/api/topics/${enc(f.get("topic"))}/messages?${q}`);
      window.millrace.messages = r;
      const show = (v) => (v !== null && typeof v === "object" ? JSON.stringify(v, null, 1) : v);
      out.replaceChildren(h("p", { class: "muted" }, `${r.topic}-${r.partition}: log start ${r.log_start_offset}, ` +
        `high watermark ${r.high_watermark}, last stable ${r.last_stable_offset}; ${r.records.length} records (${r.isolation})`),
      table(["offset", "timestamp", "key", "value", "headers"], r.records.map((m) => [m.offset, when(m.timestamp),
        h("td", { class: "value" }, show(m.key) ?? "null"), h("td", { class: "value" }, show(m.value) ?? "null"),
        h("td", { class: "value" }, m.headers.map((x) => `${x.key}=${show(x.value)}`).join("\n"))]),
      { id: "messages-table" }));
      showOk();
    } catch (err) { showError(err); }
  });

  // Browsing is asked for, not polled; the topic list is filled once.
  api("/api/topics").then(({ topics }) => {
    topicSelect.replaceChildren(...topics.map((t) => h("option", { value: t.topic }, t.topic)));
    if (topic) topicSelect.value = topic;
    if (topic) form.requestSubmit();
  }).catch(showError);
  return null;
};

pages.cluster = () => {
  const out = h("div", { id: "cluster" });
  view.append(h("h2", {}, "Cluster"), out);
  return async () => {
    const c = await api("/api/cluster");
    out.replaceChildren(
      h("p", { class: "muted" }, c.mode === "embedded" ? "The embedded server: one node owns every container." : c.mode),
      h("h3", {}, "Nodes"),
      table(["node", "Kafka listener", "live", "containers", "role"], c.nodes.map((n) => [n.id, `${n.host}:${n.kafka_port}`,
        n.live ? "yes" : "no", n.containers.join(", "),
        [n.id === c.controller ? "controller" : "", n.id === c.group_coordinator ? "group coordinator" : ""]
          .filter(Boolean).join(", ") || "-"]), { id: "nodes-table" }),
      h("h3", {}, "Containers"),
      table(["container", "owner", "epoch", "state", "durable log"], c.containers.map((x) => [x.id, x.owner, x.epoch,
        x.state, bytes(x.log_bytes)]), { id: "containers-table" }),
      h("h3", {}, c.mode === "embedded" ? "Durable logs" : `Replicated logs of node ${c.this_node}'s containers`),
      c.log_replicas.length ? table(["container", "log epoch", "ensemble (replicas, entries not yet acknowledged)", "under-replicated fragments"],
        c.log_replicas.map((r) => [r.container, r.epoch,
          r.ensemble.map((a) => `${a} (${r.replica_lag[a] ?? 0} behind)`).join(", "),
          h("td", { class: r.under_replicated_fragments ? "num bad" : "num" }, r.under_replicated_fragments)]),
        { id: "logs-table" })
        : h("p", { class: "muted" }, "Local file logs: no replicas."));
  };
};

// -- routing and polling -------------------------------------------------------------------------------

let refresh = null;
let timer = null;
let busy = false;

async function poll() {
  if (!refresh || busy) return;
  busy = true;
  const current = refresh;
  try {
    await current();
    if (current === refresh) showOk();
  } catch (err) {
    if (current === refresh) showError(err);
  } finally {
    busy = false;
  }
}

function route() {
  const [name, ...params] = (location.hash.replace(/^#\/?/, "") || "overview").split("/").map(decodeURIComponent);
  const page = pages[name] || pages.overview;
  view.querySelectorAll(".chart").forEach((el) => echarts.getInstanceByDom(el)?.dispose());
  view.replaceChildren();
  document.querySelectorAll("nav a").forEach((a) => a.classList.toggle("active",
    a.dataset.page === name || (a.dataset.page === "streams" && name === "stream") || (a.dataset.page === "groups" && (name === "group" || name === "reader-group"))));
  refresh = page(...params);
  clearInterval(timer);
  if (refresh) {
    poll();
    timer = setInterval(poll, POLL_MS);
  }
}

window.addEventListener("hashchange", route);
window.addEventListener("resize", () => view.querySelectorAll(".chart").forEach((el) => echarts.getInstanceByDom(el)?.resize()));
route();
