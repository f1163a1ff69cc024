// Polls /v1/dashboard/data and draws, per model, regret, loss and tracking error over time,
// plus the learner's diagnostics. History is kept in the page (last MAX_POINTS samples).
"use strict";
const MAX_POINTS = 600;
const history = new Map();   // model id -> {t: [], series: {name: []}}
const charts = new Map();    // "model/chart" -> uPlot instance
let timer = null;

// Series are read from the model's figures, then its last-step diagnostics.
const CHARTS = [
  { key: "regret", title: "Cumulative regret", series: ["cumulative_regret"] },
  { key: "loss", title: "Cumulative loss", series: ["cumulative_loss"] },
  { key: "te", title: "Tracking error (RMSE) / error rate", series: ["rmse", "rmse_window", "tracking_error", "error_rate"] },
  { key: "epsilon", title: "APAS epsilon", series: ["epsilon"] },
  { key: "prevalence", title: "Prevalence: estimate vs true", series: ["prevalence_cc", "prevalence", "true_prevalence"],
    requires: ["prevalence_cc", "prevalence"] },  // quantifiers only
];
// Diagnostics shown as charts or bars rather than in the table.
const CHARTED = /^(weight_\d+|gamma_\d+|epsilon|prevalence_cc|prevalence)$/;

function esc(s) {
  return String(s).replace(/[&<>"']/g, c => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
}

function fmt(v) {
  if (typeof v !== "number") return String(v);
  const a = Math.abs(v);
  return a !== 0 && (a < 1e-3 || a >= 1e5) ? v.toExponential(3) : v.toFixed(4);
}

function record(m, now) {
  let h = history.get(m.id);
  if (!h) { h = { t: [], series: {} }; history.set(m.id, h); }
  h.t.push(now);
  const names = new Set(CHARTS.flatMap(c => c.series));
  for (const name of names) {
    if (!h.series[name]) h.series[name] = new Array(h.t.length - 1).fill(null);
    const v = name in m.figures ? m.figures[name] : m.diagnostics[name];
    h.series[name].push(v === undefined ? null : v);
  }
  if (h.t.length > MAX_POINTS) {
    h.t.shift();
    for (const s of Object.values(h.series)) s.shift();
  }
  return h;
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
  document.getElementById("models").appendChild(el);
  return el;
}

function draw(m, h, el) {
  for (const c of CHARTS) {
    const present = c.series.filter(s => h.series[s] && h.series[s].some(v => v !== null));
    if (!present.length || (c.requires && !c.requires.some(s => present.includes(s)))) continue;
    const id = m.id + "/" + c.key;
    const data = [h.t, ...present.map(s => h.series[s])];
    let u = charts.get(id);
    if (!u || u.series.length !== present.length + 1) {
      if (u) u.destroy();
      const box = document.createElement("div");
      box.className = "chart";
      box.dataset.chart = c.key;
      box.innerHTML = `<h3>${c.title}</h3>`;
      el.querySelector(".charts").appendChild(box);
      const colors = ["#2563eb", "#dc2626", "#16a34a", "#9333ea"];
      u = new uPlot({
        width: 315, height: 150, legend: { live: false },
        series: [{}, ...present.map((s, i) => ({ label: s, stroke: colors[i % colors.length], width: 1.5 }))],
        axes: [{}, { size: 70, values: (self, ticks) => ticks.map(fmt) }],
      }, data, box);
      charts.set(id, u);
    } else {
      u.setData(data);
    }
    u.root.parentElement.dataset.points = String(h.t.length);
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
  const figs = Object.entries(m.figures).map(([k, v]) => `<span>${esc(k)} <b>${fmt(v)}</b></span>`);
  const counts = Object.entries(m.counters).map(([k, v]) => `<span>${esc(k)} <b>${esc(v)}</b></span>`);
  el.querySelector(".figures").innerHTML = counts.concat(figs).join("");
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
      diag.map(([k, v]) => `<span>${esc(k)} <b>${fmt(v)}</b></span>`).join("") + `</div>`
    : "";
}

async function tick() {
  const status = document.getElementById("status");
  try {
    const r = await fetch("/v1/dashboard/data", { cache: "no-store" });
    if (!r.ok) throw new Error(`HTTP ${r.status}`);
    const body = await r.json();
    const now = Date.now() / 1000;
    if (body.models.length) document.querySelector("#models .empty")?.remove();
    for (const m of body.models) {
      const h = record(m, now);
      const el = section(m);
      side(m, el);
      draw(m, h, el);
    }
    status.textContent = `updated ${new Date().toLocaleTimeString()} · ${body.models.length} model(s)`;
    document.body.dataset.ticks = String(Number(document.body.dataset.ticks || 0) + 1);
  } catch (e) {
    status.textContent = `error: ${e.message}`;
  }
}

function start() {
  if (timer) clearInterval(timer);
  tick();
  timer = setInterval(tick, Number(document.getElementById("refresh").value));
}
document.getElementById("refresh").addEventListener("change", start);
start();
