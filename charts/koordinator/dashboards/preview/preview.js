// A Grafana-like previewer of the chart's dashboard (koordinator.json), for scripts/dashboard.sh.
//
// It lays the panels out by gridPos (24 columns), draws `timeseries` panels with uPlot from
// /api/v1/query_range and `table` panels from /api/v1/query at the end of the range, and
// substitutes the template variables the way Grafana does: multi-value "All" variables become
// their allValue (`.*`), `$__interval` the step, `$__rate_interval`
// max($__interval + scrape interval, 4 * scrape interval).
//
// A failing query does not stop the panel's other queries (as in Grafana): what they return is
// drawn and the panel title gets an error badge; a panel whose every query failed shows the error.
//
// For the render script each panel element carries data-title, data-series (series with at least
// one finite point; rows of a table) and data-error (the failed queries' errors); when every panel
// is done, body[data-done="1"] and <pre id="summary"> holds a JSON summary.
"use strict";

const COLUMNS = 24;
// Grafana's grid: a height unit is a 30 px cell plus an 8 px margin; scripts/dashboard.sh sizes
// the window with the same numbers.
const UNIT_PX = 38;
const GAP_PX = 8;
const POINTS = 200;
const PALETTE = [
  "#73BF69", "#F2CC0C", "#8AB8FF", "#FF780A", "#F2495C", "#5794F2", "#B877D9", "#705DA0",
  "#37872D", "#FADE2A", "#447EBC", "#C15C17", "#890F02", "#0A437C", "#6D1F62", "#584477",
];
const NICE_STEPS = [1, 2, 5, 10, 15, 20, 30, 60, 120, 300, 600, 900, 1200, 1800, 3600, 7200,
  10800, 21600, 43200, 86400];
const TIME_TICKS = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600,
  43200, 86400, 172800, 604800];

const params = new URLSearchParams(location.search);

function parseDuration(text) {
  const m = /^(\d+(?:\.\d+)?)(ms|s|m|h)?$/.exec(String(text).trim());
  if (!m) throw new Error(`bad duration ${text}`);
  const n = parseFloat(m[1]);
  return { ms: n / 1000, s: n, m: n * 60, h: n * 3600 }[m[2] || "s"];
}

// ---------- value formatting (fieldConfig.defaults.unit) ----------

function trimNum(v, decimals) {
  return String(parseFloat(v.toFixed(decimals)));
}

function plain(v) {
  const a = Math.abs(v);
  if (a === 0) return "0";
  return trimNum(v, a >= 100 ? 0 : a >= 10 ? 1 : a >= 1 ? 2 : 3);
}

function scaled(v, base, suffixes) {
  let i = 0;
  let x = v;
  while (Math.abs(x) >= base && i < suffixes.length - 1) {
    x /= base;
    i++;
  }
  return plain(x) + suffixes[i];
}

function formatValue(unit, v) {
  if (v === null || v === undefined || !Number.isFinite(v)) return "";
  switch (unit || "short") {
    case "bytes":
      return scaled(v, 1024, [" B", " KiB", " MiB", " GiB", " TiB", " PiB"]);
    case "decbytes":
      return scaled(v, 1000, [" B", " kB", " MB", " GB", " TB", " PB"]);
    case "percent":
      return plain(v) + "%";
    case "percentunit":
      return plain(v * 100) + "%";
    case "s": {
      const a = Math.abs(v);
      if (a === 0) return "0 s";
      if (a < 1e-3) return plain(v * 1e6) + " µs";
      if (a < 1) return plain(v * 1e3) + " ms";
      if (a < 60) return plain(v) + " s";
      if (a < 3600) return plain(v / 60) + " min";
      return plain(v / 3600) + " hour";
    }
    case "ms":
      return formatValue("s", v / 1000);
    case "ops":
      return scaled(v, 1000, [" ops/s", "K ops/s", "M ops/s", "B ops/s"]);
    case "reqps":
      return scaled(v, 1000, [" req/s", "K req/s", "M req/s", "B req/s"]);
    case "cores":
      return plain(v) + " cores";
    case "none":
      return plain(v);
    case "short":
      return scaled(v, 1000, ["", " K", " Mil", " Bil", " Tri"]);
    default:
      if (unit.startsWith("suffix:")) return plain(v) + unit.slice(7);
      return scaled(v, 1000, ["", " K", " Mil", " Bil", " Tri"]);
  }
}

function pad2(n) {
  return String(n).padStart(2, "0");
}

function utc(tsSeconds, withDate, withSeconds) {
  const d = new Date(tsSeconds * 1000);
  let s = `${pad2(d.getUTCHours())}:${pad2(d.getUTCMinutes())}`;
  if (withSeconds) s += `:${pad2(d.getUTCSeconds())}`;
  if (withDate) s = `${d.getUTCFullYear()}-${pad2(d.getUTCMonth() + 1)}-${pad2(d.getUTCDate())} ${s}`;
  return s;
}

// ---------- template variables ----------

function variableValues(dashboard) {
  const values = {};
  const texts = [];
  for (const v of (dashboard.templating && dashboard.templating.list) || []) {
    const current = v.current || {};
    const cur = Array.isArray(current.value) ? current.value : [current.value];
    if (v.type === "datasource") {
      texts.push([v.label || v.name, "Prometheus"]);
      continue;
    }
    if (v.includeAll && (cur.includes("$__all") || cur[0] === undefined)) {
      values[v.name] = v.allValue || ".*";
      texts.push([v.label || v.name, "All"]);
    } else {
      values[v.name] = cur.length > 1 ? `(${cur.join("|")})` : String(cur[0] ?? "");
      texts.push([v.label || v.name, cur.join(" + ")]);
    }
  }
  return { values, texts };
}

function substitute(expr, values) {
  return expr.replace(/\$\{(\w+)(?::[^}]*)?\}|\[\[(\w+)\]\]|\$(\w+)/g, (whole, a, b, c) => {
    const name = a || b || c;
    return Object.prototype.hasOwnProperty.call(values, name) ? values[name] : whole;
  });
}

function legendName(format, metric) {
  if (format && format !== "__auto") {
    const s = format.replace(/\{\{\s*([\w.]+)\s*\}\}/g, (_, l) => metric[l] ?? "").trim();
    if (s) return s;
  }
  const name = metric.__name__ || "";
  const labels = Object.keys(metric)
    .filter((k) => k !== "__name__")
    .sort()
    .map((k) => `${k}="${metric[k]}"`);
  return labels.length ? `${name}{${labels.join(", ")}}` : name || "{}";
}

// ---------- Prometheus ----------

async function prom(path, query) {
  const base = (params.get("prom") || "").replace(/\/$/, "");
  const response = await fetch(`${base}${path}?${new URLSearchParams(query)}`);
  let body;
  try {
    body = await response.json();
  } catch (e) {
    throw new Error(`${path}: HTTP ${response.status}`);
  }
  if (body.status !== "success") throw new Error(body.error || `HTTP ${response.status}`);
  return body.data;
}

// ---------- panels ----------

// Waits for every query of a panel: the results of those that worked, the errors of the others.
async function settle(queries) {
  const settled = await Promise.allSettled(queries);
  return {
    results: settled.filter((s) => s.status === "fulfilled").map((s) => s.value),
    errors: settled
      .filter((s) => s.status === "rejected")
      .map((s) => String((s.reason && s.reason.message) || s.reason)),
  };
}

// What a panel drew: with nothing drawn and a query failed, the error is the panel's content.
function drawn(count, errors) {
  if (count === 0 && errors.length > 0) throw new Error(errors.join("; "));
  return { count, errors };
}

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

function showNoData(body) {
  body.appendChild(el("div", "nodata", "No data"));
}

async function timeseriesPanel(panel, body, ctx) {
  const targets = (panel.targets || []).filter((t) => !t.hide && t.expr);
  const { results, errors } = await settle(
    targets.map((t) =>
      prom("/api/v1/query_range", {
        query: substitute(t.expr, ctx.values),
        start: ctx.start,
        end: ctx.end,
        step: ctx.step,
      }).then((data) => ({ target: t, data })),
    ),
  );
  const xs = [];
  for (let t = ctx.start; t <= ctx.end + 1e-9; t += ctx.step) xs.push(t);
  const series = [];
  for (const { target, data } of results) {
    for (const r of data.result || []) {
      const ys = new Array(xs.length).fill(null);
      let points = 0;
      for (const [t, v] of r.values || []) {
        const i = Math.round((t - ctx.start) / ctx.step);
        const y = parseFloat(v);
        if (i >= 0 && i < xs.length && Number.isFinite(y)) {
          ys[i] = y;
          points++;
        }
      }
      if (points > 0) series.push({ name: legendName(target.legendFormat, r.metric), ys });
    }
  }
  if (series.length === 0) {
    if (errors.length === 0) showNoData(body);
    return drawn(0, errors);
  }
  const unit = panel.fieldConfig && panel.fieldConfig.defaults && panel.fieldConfig.defaults.unit;
  const legend = el("div", "legend");
  series.forEach((s, i) => {
    const item = el("div", "item");
    const sw = el("span", "swatch");
    sw.style.background = PALETTE[i % PALETTE.length];
    item.appendChild(sw);
    item.appendChild(el("span", "", s.name));
    legend.appendChild(item);
  });
  const chart = el("div", "chart");
  body.appendChild(chart);
  body.appendChild(legend);
  const width = body.clientWidth - 16;
  const height = Math.max(60, body.clientHeight - legend.offsetHeight - 6);
  const axisFont = '11px Inter, "Helvetica Neue", Arial, "DejaVu Sans", sans-serif';
  const opts = {
    width,
    height,
    padding: [10, 12, 0, 0],
    legend: { show: false },
    cursor: { show: false },
    scales: { x: { time: false } },
    series: [
      {},
      ...series.map((s, i) => ({
        label: s.name,
        stroke: PALETTE[i % PALETTE.length],
        width: 1,
        points: { show: false },
        spanGaps: false,
      })),
    ],
    axes: [
      {
        stroke: "#ccccdc",
        font: axisFont,
        grid: { stroke: "rgba(204,204,220,0.08)", width: 1 },
        ticks: { show: false },
        size: 24,
        space: 80,
        incrs: TIME_TICKS,
        values: (u, splits, axis, space, incr) => splits.map((t) => utc(t, false, incr < 60)),
      },
      {
        stroke: "#ccccdc",
        font: axisFont,
        grid: { stroke: "rgba(204,204,220,0.08)", width: 1 },
        ticks: { show: false },
        space: 25,
        values: (u, splits) => splits.map((v) => formatValue(unit, v)),
        size: (u, values) =>
          values ? Math.max(30, 10 + 6.5 * Math.max(...values.map((v) => String(v).length))) : 40,
      },
    ],
  };
  new uPlot(opts, [xs, ...series.map((s) => s.ys)], chart);
  return drawn(series.length, errors);
}

async function tablePanel(panel, body, ctx) {
  const targets = (panel.targets || []).filter((t) => !t.hide && t.expr);
  const { results, errors } = await settle(
    targets.map((t) => prom("/api/v1/query", { query: substitute(t.expr, ctx.values), time: ctx.end })),
  );
  const rows = [];
  for (const data of results) {
    const list = data.resultType === "vector" ? data.result : [];
    for (const r of list) rows.push({ metric: r.metric, t: r.value[0], v: r.value[1] });
  }
  if (rows.length === 0) {
    if (errors.length === 0) showNoData(body);
    return drawn(0, errors);
  }
  const labels = [...new Set(rows.flatMap((r) => Object.keys(r.metric)))].filter((l) => l !== "__name__").sort();
  const table = el("table", "data");
  const head = el("tr");
  for (const h of ["Time", ...labels, "Value"]) head.appendChild(el("th", "", h));
  table.appendChild(head);
  const unit = panel.fieldConfig && panel.fieldConfig.defaults && panel.fieldConfig.defaults.unit;
  for (const r of rows) {
    const tr = el("tr");
    tr.appendChild(el("td", "", utc(r.t, true, true)));
    for (const l of labels) tr.appendChild(el("td", "", r.metric[l] ?? ""));
    tr.appendChild(el("td", "", formatValue(unit, parseFloat(r.v))));
    table.appendChild(tr);
  }
  body.appendChild(table);
  return drawn(rows.length, errors);
}

// Top-level panels in reading order. A collapsed row keeps its panels inside it (row.panels), and
// Grafana does not draw them, so neither does the previewer.
function byPosition(panels) {
  return panels.slice().sort((a, b) => a.gridPos.y - b.gridPos.y || a.gridPos.x - b.gridPos.x);
}

async function main() {
  const summary = { panels: [] };
  try {
    const dashboard = await (await fetch(params.get("dashboard") || "koordinator.json")).json();
    const scrape = parseDuration(params.get("scrape") || "5s");
    const rawStart = parseFloat(params.get("start"));
    const rawEnd = parseFloat(params.get("end"));
    if (!Number.isFinite(rawStart) || !Number.isFinite(rawEnd) || rawEnd <= rawStart) {
      throw new Error("start and end (Unix seconds) are required URL parameters");
    }
    const raw = (rawEnd - rawStart) / POINTS;
    const step = Math.max(scrape, NICE_STEPS.find((s) => s >= raw) || Math.ceil(raw));
    const start = Math.floor(rawStart / step) * step;
    const end = Math.ceil(rawEnd / step) * step;
    const rateInterval = Math.max(step + scrape, 4 * scrape);
    const { values, texts } = variableValues(dashboard);
    Object.assign(values, {
      __interval: `${step}s`,
      __interval_ms: String(step * 1000),
      __rate_interval: `${rateInterval}s`,
      __range: `${end - start}s`,
      __range_s: String(end - start),
    });
    Object.assign(summary, { title: dashboard.title, start, end, step, rate_interval: `${rateInterval}s` });
    const ctx = { start, end, step, values };

    document.title = dashboard.title;
    document.getElementById("dtitle").textContent = dashboard.title;
    document.getElementById("range").textContent = `${utc(rawStart, true, true)} to ${utc(rawEnd, true, true)} UTC`;
    const vars = document.getElementById("vars");
    for (const [label, text] of texts) {
      const v = el("div", "var");
      v.appendChild(el("div", "label", label));
      v.appendChild(el("div", "box", text));
      vars.appendChild(v);
    }

    const grid = document.getElementById("grid");
    const colPx = grid.clientWidth / COLUMNS;
    const panels = byPosition(dashboard.panels || []);
    let bottom = 0;
    const jobs = [];
    for (const panel of panels) {
      const g = panel.gridPos;
      bottom = Math.max(bottom, (g.y + g.h) * UNIT_PX);
      const box = el("div", panel.type === "row" ? "row" : "panel");
      box.style.left = `${g.x * colPx}px`;
      box.style.top = `${g.y * UNIT_PX}px`;
      box.style.width = `${g.w * colPx - GAP_PX}px`;
      box.style.height = `${g.h * UNIT_PX - GAP_PX}px`;
      box.dataset.title = panel.title || "";
      box.dataset.type = panel.type;
      grid.appendChild(box);
      const entry = { id: panel.id, title: panel.title || "", type: panel.type, series: 0 };
      summary.panels.push(entry);
      if (panel.type === "row") {
        box.textContent = panel.title || "";
        continue;
      }
      const title = el("div", "ptitle", panel.title || "");
      if (panel.description) title.title = panel.description;
      const body = el("div", "pbody");
      box.appendChild(title);
      box.appendChild(body);
      const draw = panel.type === "table" ? tablePanel : panel.type === "timeseries" ? timeseriesPanel : null;
      const job = (async () => {
        if (!draw) throw new Error(`panel type ${panel.type} is not supported by the previewer`);
        if (panel.type === "timeseries" && typeof uPlot === "undefined") throw new Error("uPlot is not loaded");
        return draw(panel, body, ctx);
      })()
        .then(({ count, errors }) => {
          entry.series = count;
          box.dataset.series = String(count);
          if (errors.length > 0) {
            entry.error = errors.join("; ");
            box.dataset.error = entry.error;
            const badge = el("span", "pbadge", "!");
            badge.title = entry.error;
            title.prepend(badge);
          }
        })
        .catch((e) => {
          entry.error = String((e && e.message) || e);
          box.dataset.series = "0";
          box.dataset.error = entry.error;
          body.appendChild(el("div", "perror", entry.error));
        });
      jobs.push(job);
    }
    grid.style.height = `${bottom}px`;
    await Promise.all(jobs);
  } catch (e) {
    summary.error = String((e && e.message) || e);
  }
  document.getElementById("summary").textContent = JSON.stringify(summary);
  document.body.dataset.done = "1";
}

main();
