// The console's metric history page: draws each chart with the vendored uPlot
// (static/vendor/uplot/, loaded before this script as window.uPlot) from the page's own
// numbers (json_script "history-data", the same numbers as the tables beside the charts);
// no request of its own. Readable without colour: each line has its own dash pattern and
// marker shape, shown in the legend, and a label at its last point. Times are drawn in the
// admin's time zone (the page's "zone").
(function () {
  "use strict";
  const dataNode = document.getElementById("history-data");
  if (!dataNode || typeof window.uPlot !== "function") return;
  const uPlot = window.uPlot;
  const data = JSON.parse(dataNode.textContent);
  const STYLES = [
    { colour: "#1f4e9c", dash: [], marker: "solid", shape: "circle" },
    { colour: "#b3261e", dash: [8, 4], marker: "dashed", shape: "square" },
    { colour: "#2d7a2d", dash: [2, 3], marker: "dotted", shape: "triangle" },
    { colour: "#6b3fa0", dash: [10, 3, 2, 3], marker: "double", shape: "diamond" },
    { colour: "#8a5a00", dash: [4, 2, 4, 6], marker: "groove", shape: "cross" },
  ];
  const MARKERS_PER_LINE = 10;

  function shape(ctx, kind, x, y, r) {
    ctx.beginPath();
    if (kind === "circle") ctx.arc(x, y, r, 0, 2 * Math.PI);
    else if (kind === "square") ctx.rect(x - r, y - r, 2 * r, 2 * r);
    else if (kind === "triangle") { ctx.moveTo(x, y - r); ctx.lineTo(x + r, y + r); ctx.lineTo(x - r, y + r); ctx.closePath(); }
    else if (kind === "diamond") { ctx.moveTo(x, y - r); ctx.lineTo(x + r, y); ctx.lineTo(x, y + r); ctx.lineTo(x - r, y); ctx.closePath(); }
    else { ctx.moveTo(x - r, y - r); ctx.lineTo(x + r, y + r); ctx.moveTo(x + r, y - r); ctx.lineTo(x - r, y + r); }
  }

  // Markers on every few points, and each line's name at its last point.
  function drawMarkers(u) {
    const ctx = u.ctx;
    const ratio = window.devicePixelRatio || 1;
    ctx.save();
    u.series.forEach((series, i) => {
      if (i === 0 || !series.show) return;
      const style = STYLES[(i - 1) % STYLES.length];
      const values = u.data[i];
      const step = Math.max(1, Math.ceil(values.length / MARKERS_PER_LINE));
      ctx.strokeStyle = style.colour;
      ctx.fillStyle = style.colour;
      ctx.lineWidth = 1.5 * ratio;
      let last = -1;
      for (let j = 0; j < values.length; j++) {
        if (values[j] == null) continue;
        last = j;
        if (j % step !== 0) continue;
        const x = Math.round(u.valToPos(u.data[0][j], "x", true));
        const y = Math.round(u.valToPos(values[j], "y", true));
        shape(ctx, style.shape, x, y, 3.5 * ratio);
        if (style.shape === "cross") ctx.stroke(); else ctx.fill();
      }
      if (last >= 0) {
        const x = u.valToPos(u.data[0][last], "x", true);
        const y = u.valToPos(values[last], "y", true);
        ctx.font = `${12 * ratio}px sans-serif`;
        ctx.textAlign = "right";
        ctx.textBaseline = "bottom";
        ctx.fillText(series.label, x - 4 * ratio, y - 4 * ratio);
      }
    });
    ctx.restore();
  }

  // Ticks in 24-hour time (a day or less) or as month-day, in the admin's zone: the same
  // way whatever the page's language.
  const span = data.times.length ? data.times[data.times.length - 1] - data.times[0] : 0;
  const pad = (n) => String(n).padStart(2, "0");
  function timeLabels(u, ticks) {
    return ticks.map((ts) => {
      const at = uPlot.tzDate(new Date(ts * 1e3), data.zone);
      const time = pad(at.getHours()) + ":" + pad(at.getMinutes());
      const day = pad(at.getMonth() + 1) + "-" + pad(at.getDate());
      return span <= 86400 ? time : span <= 3 * 86400 ? day + " " + time : day;
    });
  }

  const plots = [];
  function width(node) {
    return Math.max(240, Math.floor(node.getBoundingClientRect().width));
  }

  for (const chart of data.charts) {
    const node = document.getElementById(chart.id);
    if (!node) continue;
    const series = [{ label: data.words.time }];
    chart.lines.forEach((line, i) => {
      const style = STYLES[i % STYLES.length];
      series.push({ label: line.label, stroke: style.colour, width: 2, dash: style.dash, spanGaps: false, points: { show: false } });
    });
    const options = {
      width: width(node),
      height: 220,
      tzDate: (ts) => uPlot.tzDate(new Date(ts * 1e3), data.zone),
      series: series,
      axes: [{ values: timeLabels }, { label: chart.unit, size: 60 }],
      legend: {
        markers: {
          dash: (u, i) => STYLES[(i - 1) % STYLES.length].marker,
          width: 3,
        },
      },
      hooks: { draw: [drawMarkers] },
    };
    const values = [data.times].concat(chart.lines.map((line) => line.values));
    const plot = new uPlot(options, values, node);
    node.dataset.drawn = "true";
    plots.push([plot, node]);
  }

  // Follow each chart's box (the window, a phone turned, the grid going to one column).
  const resize = () => {
    for (const [plot, node] of plots) {
      if (Math.abs(plot.width - width(node)) > 1) plot.setSize({ width: width(node), height: 220 });
    }
  };
  if (typeof ResizeObserver === "function") {
    const observer = new ResizeObserver(resize);
    for (const [, node] of plots) observer.observe(node.parentElement);
  } else {
    window.addEventListener("resize", () => window.requestAnimationFrame(resize));
  }
})();
