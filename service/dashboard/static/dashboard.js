// A picker of every model (search, kind and status filters) and the selected model's figures
// over time. On selection the page loads the model's past from
// GET /v1/models/{id}/series?checkpoints=true (the API's 5 s samples plus every kept
// checkpoint version, so a model fed in one burst shows its course, not one point), then
// adds a live point from /v1/dashboard/data each time the model's checkpoint version moves
// on (never a copy of an unchanged checkpoint: an idle model is not drawn as a flat line).
"use strict";
const MAX_POINTS = 1500;     // the server keeps 720 by default; room for live points after it
const charts = new Map();    // chart key -> uPlot instance, of the selected model only
window.dashboardCharts = charts;  // for the console and the headless test (its tick labels)
let history = null;          // the selected model's points: {id, t, v, applied, series, loaded}
let feed = [];               // the last feed's models
let selected = null;         // the selected model's id
let timer = null;
let running = false;         // a slow refresh must not overlap the next one
let listHtml = "";           // the picker's last rendering (not rebuilt when unchanged)

// One chart per scale: figures of different magnitude never share an axis (tracking error
// is ~1/sqrt(n) of the RMSE and would be drawn as a flat zero next to it). Each chart is
// titled by the series it draws (LABELS), so a regressor's chart never claims to be APAS's.
const CHARTS = [
  { key: "regret", series: ["cumulative_regret"] },
  { key: "loss", series: ["cumulative_loss"] },
  { key: "rmse", series: ["rmse", "rmse_window"] },
  { key: "te", series: ["tracking_error"] },
  { key: "error", series: ["error_rate"] },
  { key: "applied", series: ["applied"], integer: true, timeOnly: true },
  { key: "epsilon", series: ["epsilon"] },
  { key: "prevalence", series: ["prevalence_cc", "prevalence", "true_prevalence"],
    requires: ["prevalence_cc", "prevalence"] },  // quantifiers only
];
const LABELS = {
  cumulative_regret: "cumulative regret",
  cumulative_loss: "cumulative loss",
  rmse: "RMSE over all events",
  rmse_window: "RMSE over the last window",
  tracking_error: "tracking error √(Σe²)/n",
  error_rate: "error rate",
  applied: "events applied",
  epsilon: "APAS ε",
  prevalence_cc: "prevalence estimate (classify and count)",
  prevalence: "prevalence estimate",
  true_prevalence: "true prevalence",
};
const NAMES = [...new Set(CHARTS.flatMap(c => c.series))];
// Counts: always printed as integers, whatever JSON made of them.
const COUNTS = new Set(["applied", "duplicate", "rejected", "labelled_events", "mistakes"]);
// Diagnostics shown as charts or bars rather than in the table.
const CHARTED = /^(weight_\d+|gamma_\d+|epsilon|prevalence_cc|prevalence)$/;
const COLORS = ["#2563eb", "#dc2626", "#16a34a", "#9333ea"];
const AXIS_FONT = "12px system-ui, -apple-system, sans-serif";
const INT_INCRS = [1, 2, 5].flatMap(m => [...Array(13).keys()].map(e => m * 10 ** e)).sort((a, b) => a - b);
const CHART_HEIGHT = 190;

function esc(s) {
  return String(s).replace(/[&<>"']/g, c => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
}

function fmt(v, name) {
  if (typeof v !== "number") return String(v);
  if (COUNTS.has(name) || Number.isInteger(v)) return Math.round(v).toLocaleString("en-US");
  const a = Math.abs(v);
  return a < 1e-3 || a >= 1e5 ? v.toExponential(3) : v.toFixed(4);
}

function title(c, present, kind, xmode) {
  let t = present.map(s => LABELS[s] || s).join(" and ");
  if (present.includes("tracking_error") && kind === "apas") t += " (APAS eq. 13)";
  t += xmode === "applied" ? " by events applied" : " over time";
  return t[0].toUpperCase() + t.slice(1);
}

// Tick labels with as many digits as the tick spacing needs, so 4e-5 is not printed as 0.
function tickLabels(ticks, integer) {
  if (!ticks.length) return [];
  const step = ticks.length > 1 ? Math.abs(ticks[1] - ticks[0]) : Math.abs(ticks[0]) || 1;
  const top = Math.max(...ticks.map(Math.abs));
  if (integer || (step >= 1 && ticks.every(Number.isInteger) && top < 1e6))
    return ticks.map(v => Math.round(v).toLocaleString("en-US"));
  if (top !== 0 && (top < 1e-3 || top >= 1e6)) {
    const mag = x => Math.floor(Math.log10(x) + 1e-9);  // tolerant of 9.999...e-6 steps
    const digits = Math.min(4, Math.max(0, mag(top) - mag(step)));
    return ticks.map(v => (v === 0 ? "0" : v.toExponential(digits)));
  }
  const decimals = Math.min(8, Math.max(0, Math.ceil(-Math.log10(step) - 1e-9)));
  return ticks.map(v => v.toFixed(decimals));
}

// Time ticks in the page's local time, as short as the visible span allows: seconds under
// ten minutes (their fraction when ticks are closer than a second: a burst), hours and
// minutes within a day, the date (once per day) beyond. Ticks are further apart than the
// widest label of their span, so labels never overlap.
// uPlot's own steps jump from 1 s to 5 s: a 4 s burst got a single tick
const M = 60, H = 3600, D = 86400;
const TIME_INCRS = [0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30,
  M, 2 * M, 5 * M, 10 * M, 15 * M, 30 * M, H, 2 * H, 3 * H, 6 * H, 12 * H, D, 2 * D, 7 * D, 14 * D, 28 * D];
function timeSpace(self, axis, min, max) {
  const span = max - min;
  return span < 10 ? 85 : span < 600 ? 75 : span < 86400 ? 60 : 110;
}
const MONTHS = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
const two = n => String(n).padStart(2, "0");
function timeLabels(self, ticks, axis, space, incr) {
  const span = self.scales.x.max - self.scales.x.min;
  const step = incr || (ticks.length > 1 ? ticks[1] - ticks[0] : 1);  // one tick has a step too
  const frac = step < 1 ? Math.min(3, Math.ceil(-Math.log10(step) - 1e-9)) : 0;
  let day = null;
  return ticks.map(s => {
    const ms = Math.round(s * 1000);
    const d = new Date(ms);
    const hm = `${two(d.getHours())}:${two(d.getMinutes())}`;
    if (frac) return `${hm}:${two(d.getSeconds())}.${String(ms % 1000).padStart(3, "0").slice(0, frac)}`;
    if (span < 600) return `${hm}:${two(d.getSeconds())}`;
    if (span < 86400) return hm;
    const date = `${MONTHS[d.getMonth()]} ${d.getDate()}`;
    const label = date === day ? hm : `${date} ${hm}`;
    day = date;
    return label;
  });
}

// The y axis is as wide as its longest label (a fixed width clipped long ones).
const measure = document.createElement("canvas").getContext("2d");
function axisSize(self, values) {
  if (!values) return 40;
  measure.font = AXIS_FONT;
  const w = Math.max(0, ...values.map(v => measure.measureText(String(v)).width));
  return Math.ceil(w) + 20;  // + tick marks (10) and gaps
}

function fresh(id) {
  return { id, t: [], v: [], applied: [], series: Object.fromEntries(NAMES.map(n => [n, []])), loaded: 0 };
}

// Points in version order; one per checkpoint version.
function push(h, ts, version, applied, get) {
  const n = h.v.length;
  if (n && (version <= h.v[n - 1] || ts <= h.t[n - 1])) return false;
  h.t.push(ts);
  h.v.push(version);
  h.applied.push(applied);
  for (const name of NAMES) {
    const v = name === "applied" ? applied : get(name);
    h.series[name].push(v === undefined ? null : v);
  }
  if (h.t.length > MAX_POINTS) {
    for (const a of [h.t, h.v, h.applied, ...Object.values(h.series)]) a.shift();
  }
  return true;
}

// With API keys configured the feed needs a `read` key: asked once, kept for this tab
// only (sessionStorage), sent as X-API-Key (docs/security.md, "Keys and scopes").
const KEY_SLOT = "onlinepredict.apiKey";
function keyHeaders() {
  const key = sessionStorage.getItem(KEY_SLOT);
  return key ? { "X-API-Key": key } : {};
}
function askKey(code) {
  const key = window.prompt(`The API answered ${code}: an API key with the read scope`, "");
  if (key) sessionStorage.setItem(KEY_SLOT, key);
  else sessionStorage.removeItem(KEY_SLOT);
}

async function loadHistory(id) {
  const h = fresh(id);
  try {
    const r = await fetch(`/v1/models/${encodeURIComponent(id)}/series?checkpoints=true`,
                          { cache: "no-store", headers: keyHeaders() });
    if (r.ok) {  // else an older API, or the model was just deleted: live points only
      const body = await r.json();
      for (const p of body.points) push(h, p.ts, p.version, p.applied, n => p.values[n]);
    }
  } catch (e) {
    console.warn("history of", id, e);
  }
  h.loaded = h.t.length;
  return h;
}

function live(m) {
  return n => (n in m.counters ? m.counters[n] : n in m.figures ? m.figures[n] : m.diagnostics[n]);
}

// ---- the picker ------------------------------------------------------------------------
function matches(m, q, kind, state) {
  if (kind && m.kind !== kind) return false;
  if (state && m.status !== state) return false;
  return !q || m.id.toLowerCase().includes(q) || m.kind.toLowerCase().includes(q);
}

function renderPicker() {
  const kindSel = document.getElementById("kind");
  const kinds = [...new Set(feed.map(m => m.kind))].sort();
  const have = [...kindSel.options].slice(1).map(o => o.value);
  if (kinds.join("\n") !== have.join("\n")) {
    const keep = kindSel.value;
    kindSel.innerHTML = `<option value="">every kind</option>` +
      kinds.map(k => `<option value="${esc(k)}">${esc(k)}</option>`).join("");
    kindSel.value = kinds.includes(keep) ? keep : "";
  }
  const q = document.getElementById("search").value.trim().toLowerCase();
  const shown = feed.filter(m => matches(m, q, kindSel.value, document.getElementById("state").value));
  document.getElementById("count").textContent = `${shown.length} of ${feed.length} models`;
  const html = shown.map(m =>
    `<li><button type="button" data-model="${esc(m.id)}" data-status="${esc(m.status)}"` +
    `${m.id === selected ? ' class="selected" aria-current="true"' : ""}>` +
    `<span class="dot ${esc(m.status)}" title="${esc(m.status)}"></span>` +
    `<span class="id">${esc(m.id)}</span>` +
    `<small>${esc(m.kind)} · ${fmt(m.counters.applied || 0, "applied")}</small></button></li>`).join("");
  if (html !== listHtml) {
    document.getElementById("list").innerHTML = html;
    listHtml = html;
  }
  return shown;
}

document.getElementById("list").addEventListener("click", e => {
  const b = e.target.closest("button[data-model]");
  if (b) select(b.dataset.model);
});
for (const id of ["search", "kind", "state"])
  document.getElementById(id).addEventListener("input", renderPicker);

async function select(id) {
  selected = id;
  history = null;
  history_replace(id);
  for (const u of charts.values()) u.destroy();
  charts.clear();
  document.getElementById("models").innerHTML = "";
  renderPicker();
  const now = feed.find(x => x.id === id);
  if (now) show(now);  // its figures at once, its charts once its past is loaded
  const h = await loadHistory(id);
  if (selected !== id) return;  // another pick while this one loaded
  history = h;
  const m = feed.find(x => x.id === id);
  if (m) show(m);
}

function history_replace(id) {
  window.history.replaceState(null, "", "#model=" + encodeURIComponent(id));
}

function fromHash() {
  const m = /^#model=(.+)$/.exec(location.hash);
  return m ? decodeURIComponent(m[1]) : null;
}

// ---- the selected model ---------------------------------------------------------------
function section(m) {
  let el = document.getElementById("model-" + m.id);
  if (el) return el;
  el = document.createElement("section");
  el.className = "model";
  el.id = "model-" + m.id;
  el.innerHTML = `<h2></h2><div class="figures"></div><div class="charts"></div>` +
    `<div class="panels"><div class="weights"></div><div class="side"></div></div>`;
  document.getElementById("models").replaceChildren(el);
  return el;
}

function xdata(h, xmode) {
  if (xmode !== "applied") return { x: h.t, keep: null };
  // events applied only grow, except across a rollback that discarded: keep a rising run
  const keep = [];
  let last = -1;
  h.applied.forEach((a, i) => { if (a > last) { keep.push(i); last = a; } });
  return { x: keep.map(i => h.applied[i]), keep };
}

function draw(m, h, el) {
  const xmode = document.getElementById("xaxis").value;
  const { x, keep } = xdata(h, xmode);
  const pick = a => (keep ? keep.map(i => a[i]) : a);
  for (const c of CHARTS) {
    if (c.timeOnly && xmode === "applied") continue;  // events applied by events applied
    const present = c.series.filter(s => h.series[s].some(v => v !== null));
    if (!present.length || (c.requires && !c.requires.some(s => present.includes(s)))) continue;
    const data = [x, ...present.map(s => pick(h.series[s]))];
    let u = charts.get(c.key);
    if (!u || u.series.length !== present.length + 1) {
      let box = u ? u.root.parentElement : null;
      if (u) u.destroy();
      if (!box) {
        box = document.createElement("div");
        box.className = "chart";
        box.dataset.chart = c.key;
        box.innerHTML = `<h3></h3>`;
        el.querySelector(".charts").appendChild(box);
      }
      const text = title(c, present, m.kind, xmode);
      box.querySelector("h3").textContent = text;
      box.dataset.title = text;
      box.dataset.series = present.join(",");
      box.dataset.x = xmode;
      u = new uPlot({
        width: Math.max(280, box.clientWidth), height: CHART_HEIGHT,
        legend: { show: present.length > 1, live: false },  // one series: the title names it
        padding: [8, 24, 0, 0],  // room for the last time label and the top tick label
        scales: { x: { time: xmode === "time" } },
        series: [{ label: xmode === "time" ? "time" : "events applied" },
                 ...present.map((s, i) => ({
                   label: LABELS[s] || s, stroke: COLORS[i % COLORS.length], width: 1.5,
                   spanGaps: true,
                   // dots where points are sparse (a burst's checkpoints), a line alone else
                   points: { show: u2 => u2.data[0].length <= 60, size: 5 },
                 }))],
        axes: [
          xmode === "time"
            ? { space: timeSpace, incrs: TIME_INCRS, font: AXIS_FONT, values: timeLabels }
            : { space: 80, font: AXIS_FONT, values: (self, ticks) => tickLabels(ticks, true) },
          { size: axisSize, font: AXIS_FONT, incrs: c.integer ? INT_INCRS : undefined,
            values: (self, ticks) => tickLabels(ticks, c.integer) },
        ],
      }, data, box);
      charts.set(c.key, u);
    } else {
      u.setData(data);
    }
    u.root.parentElement.dataset.points = String(x.length);
    u.root.parentElement.dataset.history = String(h.loaded);
  }
}

// Each expert of the ensemble by its memory 1/(1-gamma) = 1 + eta, in events: gammas near 1
// printed with a fixed number of decimals collided (0.999999 twice); memories are printed
// with as many significant digits as it takes to tell them all apart.
function memory(v, digits) {
  if (v < 1e5) return Math.round(v).toLocaleString("en-US");
  return v.toPrecision(digits).replace(/\.?0+e/, "e").replace("e+", "e");
}
function gammaLabels(gammas) {
  for (let digits = 3; digits <= 12; digits++) {
    const labels = gammas.map(g => (g === 0 ? "γ = 0" : `memory ${memory(1 / (1 - g), digits)}`));
    if (new Set(labels).size === labels.length) return labels;
  }
  return gammas.map(g => `γ = ${g}`);
}

function bars(title, rows) {
  // rows: [label, value in [0, 1]]; the bar is scaled to the largest value
  const top = Math.max(...rows.map(r => r[1]), 1e-12);
  const body = rows.map(([label, v]) =>
    `<div class="bar"><span class="label">${esc(label)}</span>` +
    `<span class="track"><span style="width:${(100 * v / top).toFixed(1)}%"></span></span>` +
    `<span class="value">${(100 * v).toFixed(1)}%</span></div>`).join("");
  return `<div class="bars"><h3>${esc(title)}</h3>${body}</div>`;
}

function side(m, el) {
  const badge = `<span class="badge ${esc(m.status)}">${esc(m.status)}</span>`;
  el.querySelector("h2").innerHTML =
    `${esc(m.id)} <small>${esc(m.kind)} · version ${fmt(m.version, "applied")}</small> ${badge}`;
  const rows = Object.entries(m.counters).concat(Object.entries(m.figures));
  el.querySelector(".figures").innerHTML =
    rows.map(([k, v]) => `<span data-name="${esc(k)}">${esc(k)} <b>${esc(fmt(v, k))}</b></span>`).join("");
  const blocks = [];
  if (m.holdings && m.holdings.length) blocks.push(bars("Top holdings", m.holdings));
  const idx = Object.keys(m.diagnostics).filter(k => /^weight_\d+$/.test(k))
    .map(k => Number(k.slice(7))).sort((a, b) => a - b);
  if (idx.length) {
    const gammas = idx.map(i => m.diagnostics["gamma_" + i]);
    const labels = gammas.every(g => g !== undefined) ? gammaLabels(gammas) : idx.map(i => `weight_${i}`);
    blocks.push(bars("Ensemble weights over discount factors γ (by memory 1/(1−γ), in events)",
                     idx.map((i, j) => [labels[j], m.diagnostics["weight_" + i]])));
  }
  el.querySelector(".weights").innerHTML = blocks.join("");
  const diag = Object.entries(m.diagnostics).filter(([k]) => !CHARTED.test(k));
  el.querySelector(".side").innerHTML = diag.length
    ? `<h3>Diagnostics (last step)</h3><div class="diag">` +
      diag.map(([k, v]) => `<span>${esc(k)} <b>${esc(fmt(v, k))}</b></span>`).join("") + `</div>`
    : "";
}

function show(m, ts) {
  const el = section(m);
  side(m, el);
  if (!history || history.id !== m.id) return;  // its past is still loading
  if (ts !== undefined && m.version > 0) push(history, ts, m.version, m.counters.applied || 0, live(m));
  draw(m, history, el);
}

async function tick() {
  if (running) return;
  running = true;
  const status = document.getElementById("status");
  try {
    const r = await fetch("/v1/dashboard/data", { cache: "no-store", headers: keyHeaders() });
    if (r.status === 401 || r.status === 403) askKey(r.status);
    if (!r.ok) throw new Error(`HTTP ${r.status}`);
    const body = await r.json();
    feed = body.models;
    const shown = renderPicker();
    if (!feed.some(m => m.id === selected)) {  // none yet, or the selected one was deleted
      const want = fromHash();
      const first = feed.find(m => m.id === want) || shown[0] || feed[0];
      if (first) await select(first.id);
      else document.getElementById("models").innerHTML =
        `<p class="empty">No models yet. Create one with <code>POST /v1/models</code> or run <code>make up</code>.</p>`;
    }
    const m = feed.find(x => x.id === selected);
    if (m) show(m, body.ts);
    status.textContent = `updated ${new Date().toLocaleTimeString()} · ${feed.length} model(s)`;
    document.body.dataset.ticks = String(Number(document.body.dataset.ticks || 0) + 1);
  } catch (e) {
    status.textContent = `error: ${e.message}`;
  } finally {
    running = false;
  }
}

function start() {
  if (timer) clearInterval(timer);
  tick();
  timer = setInterval(tick, Number(document.getElementById("refresh").value));
}
document.getElementById("refresh").addEventListener("change", start);
document.getElementById("xaxis").addEventListener("change", () => {
  for (const u of charts.values()) u.root.parentElement.remove();
  for (const u of charts.values()) u.destroy();
  charts.clear();
  const m = feed.find(x => x.id === selected);
  if (m) show(m);
});
window.addEventListener("resize", () => {
  for (const u of charts.values())
    u.setSize({ width: Math.max(280, u.root.parentElement.clientWidth), height: CHART_HEIGHT });
});
start();
