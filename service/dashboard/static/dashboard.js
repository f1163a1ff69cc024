// Draws, per model, its figures over time. On first sight of a model the page loads the past
// from GET /v1/models/{id}/series (sampled by the API, so it survives a reload), then appends
// a live point from /v1/dashboard/data on every refresh.
"use strict";
const MAX_POINTS = 1500;     // the server keeps 720 by default; room for live points after it
const history = new Map();   // model id -> {t: [], series: {name: []}, loaded: n}
const charts = new Map();    // "model/chart" -> uPlot instance
let timer = null;

// One chart per scale: figures of different magnitude never share an axis (tracking error
// is ~1/sqrt(n) of the RMSE and would be drawn as a flat zero next to it).
const CHARTS = [
  { key: "regret", title: "Cumulative regret", series: ["cumulative_regret"] },
  { key: "loss", title: "Cumulative loss", series: ["cumulative_loss"] },
  { key: "rmse", title: "RMSE (cumulative, last window)", series: ["rmse", "rmse_window"] },
  { key: "te", title: "Tracking error (APAS eq. 13)", series: ["tracking_error"] },
  { key: "error", title: "Error rate", series: ["error_rate"] },
  { key: "applied", title: "Events applied", series: ["applied"], integer: true },
  { key: "epsilon", title: "APAS epsilon", series: ["epsilon"] },
  { key: "prevalence", title: "Prevalence: estimate vs true", series: ["prevalence_cc", "prevalence", "true_prevalence"],
    requires: ["prevalence_cc", "prevalence"] },  // quantifiers only
];
const NAMES = [...new Set(CHARTS.flatMap(c => c.series))];
// Counts: always printed as integers, whatever JSON made of them.
const COUNTS = new Set(["applied", "duplicate", "rejected", "labelled_events", "mistakes"]);
// Diagnostics shown as charts or bars rather than in the table.
const CHARTED = /^(weight_\d+|gamma_\d+|epsilon|prevalence_cc|prevalence)$/;
const COLORS = ["#2563eb", "#dc2626", "#16a34a", "#9333ea"];
const AXIS_FONT = "12px system-ui, -apple-system, sans-serif";
const INT_INCRS = [1, 2, 5].flatMap(m => [...Array(13).keys()].map(e => m * 10 ** e)).sort((a, b) => a - b);
let running = false;         // a slow refresh must not overlap the next one

function esc(s) {
  return String(s).replace(/[&<>"']/g, c => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
}

function fmt(v, name) {
  if (typeof v !== "number") return String(v);
  if (COUNTS.has(name) || Number.isInteger(v)) return Math.round(v).toLocaleString("en-US");
  const a = Math.abs(v);
  return a < 1e-3 || a >= 1e5 ? v.toExponential(3) : v.toFixed(4);
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

// The y axis is as wide as its longest label (a fixed width clipped long ones).
const measure = document.createElement("canvas").getContext("2d");
function axisSize(self, values) {
  if (!values) return 40;
  measure.font = AXIS_FONT;
  const w = Math.max(0, ...values.map(v => measure.measureText(String(v)).width));
  return Math.ceil(w) + 20;  // + tick marks (10) and gaps
}

function entry(id) {
  let h = history.get(id);
  if (!h) {
    h = { t: [], series: Object.fromEntries(NAMES.map(n => [n, []])), loaded: 0 };
    history.set(id, h);
  }
  return h;
}

function push(h, ts, get) {
  if (h.t.length && ts <= h.t[h.t.length - 1]) return;  // keep time strictly increasing
  h.t.push(ts);
  for (const name of NAMES) {
    const v = get(name);
    h.series[name].push(v === undefined ? null : v);
  }
  if (h.t.length > MAX_POINTS) {
    h.t.shift();
    for (const s of Object.values(h.series)) s.shift();
  }
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
  const h = entry(id);
  try {
    const r = await fetch(`/v1/models/${encodeURIComponent(id)}/series`,
                          { cache: "no-store", headers: keyHeaders() });
    if (!r.ok) return h;  // an older API, or the model was just deleted: live points only
    const body = await r.json();
    for (const p of body.points) push(h, p.ts, n => (n in p.values ? p.values[n] : p[n]));
    h.loaded = h.t.length;
  } catch (e) {
    console.warn("history of", id, e);
  }
  return h;
}

function live(m) {
  return n => (n in m.counters ? m.counters[n] : n in m.figures ? m.figures[n] : m.diagnostics[n]);
}

function section(m) {
  let el = document.getElementById("model-" + m.id);
  if (el) return el;
  el = document.createElement("section");
  el.className = "model";
  el.id = "model-" + m.id;
  el.innerHTML = `<h2></h2><div class="figures"></div><div class="charts"></div>` +
    `<div class="panels"><div class="weights"></div><div class="side"></div></div>`;
  el.querySelector("h2").innerHTML = `${esc(m.id)} <small>${esc(m.kind)}</small>`;
  return el;
}

function draw(m, h, el) {
  for (const c of CHARTS) {
    const present = c.series.filter(s => h.series[s].some(v => v !== null));
    if (!present.length || (c.requires && !c.requires.some(s => present.includes(s)))) continue;
    const id = m.id + "/" + c.key;
    const data = [h.t, ...present.map(s => h.series[s])];
    let u = charts.get(id);
    if (!u || u.series.length !== present.length + 1) {
      let box = u ? u.root.parentElement : null;
      if (u) u.destroy();
      if (!box) {
        box = document.createElement("div");
        box.className = "chart";
        box.dataset.chart = c.key;
        box.innerHTML = `<h3>${c.title}</h3>`;
        el.querySelector(".charts").appendChild(box);
      }
      box.dataset.series = present.join(",");
      u = new uPlot({
        width: 340, height: 160, legend: { live: false },
        padding: [8, 18, 0, 0],  // room for the last time label and the top tick label
        series: [{}, ...present.map((s, i) => ({ label: s, stroke: COLORS[i % COLORS.length], width: 1.5 }))],
        axes: [{}, { size: axisSize, font: AXIS_FONT, incrs: c.integer ? INT_INCRS : undefined,
                     values: (self, ticks) => tickLabels(ticks, c.integer) }],
      }, data, box);
      charts.set(id, u);
    } else {
      u.setData(data);
    }
    u.root.parentElement.dataset.points = String(h.t.length);
    u.root.parentElement.dataset.history = String(h.loaded);
  }
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
  const rows = Object.entries(m.counters).concat(Object.entries(m.figures));
  el.querySelector(".figures").innerHTML =
    rows.map(([k, v]) => `<span data-name="${esc(k)}">${esc(k)} <b>${esc(fmt(v, k))}</b></span>`).join("");
  const blocks = [];
  if (m.holdings && m.holdings.length) blocks.push(bars("Top holdings", m.holdings));
  const weights = Object.keys(m.diagnostics).filter(k => /^weight_\d+$/.test(k))
    .sort((a, b) => Number(a.slice(7)) - Number(b.slice(7)))
    .map(k => {
      const g = m.diagnostics["gamma_" + k.slice(7)];
      return [g === undefined ? k : `γ=${g.toFixed(g > 0.999 ? 6 : 3)}`, m.diagnostics[k]];
    });
  if (weights.length) blocks.push(bars("Ensemble weights over discount factors", weights));
  el.querySelector(".weights").innerHTML = blocks.join("");
  const diag = Object.entries(m.diagnostics).filter(([k]) => !CHARTED.test(k));
  el.querySelector(".side").innerHTML = diag.length
    ? `<h3>Diagnostics (last step)</h3><div class="diag">` +
      diag.map(([k, v]) => `<span>${esc(k)} <b>${esc(fmt(v, k))}</b></span>`).join("") + `</div>`
    : "";
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
    if (body.models.length) document.querySelector("#models .empty")?.remove();
    const fresh = body.models.filter(m => !history.has(m.id));
    await Promise.all(fresh.map(m => loadHistory(m.id)));
    const main = document.getElementById("models");
    body.models.forEach((m, i) => {  // in the server's order: the demo model first
      const h = entry(m.id);
      push(h, body.ts, live(m));
      const el = section(m);
      const at = main.querySelectorAll(":scope > section.model")[i];
      if (at !== el) main.insertBefore(el, at || null);
      side(m, el);
      draw(m, h, el);
    });
    status.textContent = `updated ${new Date().toLocaleTimeString()} · ${body.models.length} model(s)`;
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
start();
