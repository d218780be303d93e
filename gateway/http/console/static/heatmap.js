// The segment heat map: the key space [0, 1) up, time across, each segment a band over its life, coloured
// by its sampled rate (grey where no sample covers it: before the console was first opened, or between
// samples of a sealed segment), and a marker at each scale with the epoch and its reason. Splits show as
// one band giving way to narrower ones, merges the other way round.
//
// heatmapOption(answer of /api/heatmap/SCOPE/STREAM, "bytes" | "events", now in ms) -> an ECharts option.
// Each band and each sampled cell is a data item [t0, t1, key0, key1, rate, segment number], drawn as a
// rectangle by a custom series: the test reads them back from the chart's option.

function shapeOf(params, api) {
  const topLeft = api.coord([api.value(0), api.value(3)]);
  const bottomRight = api.coord([api.value(1), api.value(2)]);
  return echarts.graphic.clipRectByRect(
    { x: topLeft[0], y: topLeft[1], width: bottomRight[0] - topLeft[0], height: bottomRight[1] - topLeft[1] },
    { x: params.coordSys.x, y: params.coordSys.y, width: params.coordSys.width, height: params.coordSys.height });
}

// A filled rectangle (a band, or a sampled cell inside one).
function rect(params, api) {
  const shape = shapeOf(params, api);
  return shape && { type: "rect", shape, style: api.style() };
}

// A band's outline, drawn over the cells, so each segment reads as one band however many samples fill it.
function outline(params, api) {
  const shape = shapeOf(params, api);
  return shape && { type: "rect", shape, style: { fill: "transparent", stroke: "#ffffff", lineWidth: 1.5 } };
}

export function heatmapBands(hm, now) {
  return hm.segments.map((s) => [s.created_ms, s.sealed_ms ?? now, s.key_start, s.key_end, null, s.number]);
}

export function heatmapCells(hm, metric, now) {
  const bySegment = new Map(hm.segments.map((s) => [String(s.segment_id), s]));
  const step = hm.sample_seconds * 1000;
  const cells = [];
  hm.rates.forEach((sample, i) => {
    const from = i > 0 ? Math.max(hm.rates[i - 1].time_ms, sample.time_ms - 3 * step) : sample.time_ms - step;
    for (const [id, rate] of Object.entries(sample.segments)) {
      const s = bySegment.get(id);
      if (!s) continue;
      const t0 = Math.max(from, s.created_ms);
      const t1 = Math.min(sample.time_ms, s.sealed_ms ?? now);
      if (t1 <= t0) continue;
      const value = metric === "events" ? rate.events_per_s : rate.bytes_per_s / 1024;
      cells.push([t0, t1, s.key_start, s.key_end, value, s.number]);
    }
  });
  return cells;
}

export function heatmapOption(hm, metric, now) {
  const bands = heatmapBands(hm, now);
  const cells = heatmapCells(hm, metric, now);
  const max = Math.max(1, ...cells.map((c) => c[4]));
  const unit = metric === "events" ? "events/s" : "KiB/s";
  const scales = hm.epochs.filter((e) => e.epoch > 0);
  const dims = ["from", "to", "key from", "key to", unit, "segment"];
  const tooltip = (p) => {
    const [t0, t1, k0, k1, rate, number] = p.value;
    const rateText = rate === null ? "no sample" : `${rate.toFixed(1)} ${unit}`;
    return `segment ${number}<br>keys [${k0.toFixed(3)}, ${k1.toFixed(3)})<br>` +
      `${new Date(t0).toLocaleTimeString()} - ${new Date(t1).toLocaleTimeString()}<br>${rateText}`;
  };
  const first = bands.length ? Math.min(...bands.map((b) => b[0])) : now;
  return {
    animation: false,
    tooltip: { formatter: tooltip },
    grid: { left: 60, right: 110, top: 30, bottom: 60 },
    dataZoom: [{ type: "slider", xAxisIndex: 0, bottom: 10 }, { type: "inside", xAxisIndex: 0 }],
    xAxis: { type: "time", min: first, max: now },
    yAxis: { type: "value", min: 0, max: 1, name: "key", interval: 0.25 },
    visualMap: { type: "continuous", seriesIndex: 1, dimension: 4, min: 0, max, calculable: true, right: 10,
      top: 30, text: [unit, ""], inRange: { color: ["#fff5d6", "#fdae61", "#f46d43", "#d73027", "#7f0000"] } },
    series: [
      { id: "segments", name: "segments", type: "custom", renderItem: rect, dimensions: dims,
        encode: { x: [0, 1], y: [2, 3] }, itemStyle: { color: "#d9dee7" }, data: bands, z: 1,
        // Scales are marked by a line each; its label (epoch and reason) shows on hover, since several
        // scales a few seconds apart would write over each other.
        markLine: { symbol: "none", lineStyle: { color: "#14213d", type: "dashed", width: 1 },
          label: { show: false, formatter: (p) => p.name, position: "insideEndTop" },
          emphasis: { label: { show: true } },
          data: scales.map((e) => ({ xAxis: e.created_ms, name: `epoch ${e.epoch}: ${e.reason}` })) } },
      { id: "rates", name: unit, type: "custom", renderItem: rect, dimensions: dims,
        encode: { x: [0, 1], y: [2, 3] }, data: cells, z: 2 },
      { id: "outlines", name: "outlines", type: "custom", renderItem: outline, dimensions: dims, silent: true,
        encode: { x: [0, 1], y: [2, 3] }, data: bands, z: 3, tooltip: { show: false } },
    ],
  };
}
