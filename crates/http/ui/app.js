// StreamForge dashboard: shared helpers, the router, the live stream and charts.
// Plain browser JavaScript, no build step; pages register themselves in SF.routes.
"use strict";

const SF = {
  routes: [],      // [{pattern: RegExp, nav: string, render: (params, el) => cleanup?}]
  liveHandlers: new Set(),
  liveHistory: [], // recent snapshots (oldest first), bounded by LIVE_KEEP
  cleanup: null,
  cluster: null,
};
const LIVE_KEEP = 300;

// ---------- formatting ----------
SF.esc = (s) => String(s ?? "").replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
SF.num = (n, digits = 0) => (n == null || Number.isNaN(n) ? "–" : Number(n).toLocaleString("en-US", { maximumFractionDigits: digits, minimumFractionDigits: 0 }));
SF.compact = (n) => {
  if (n == null) return "–";
  const a = Math.abs(n);
  if (a >= 1e9) return (n / 1e9).toFixed(2) + "G";
  if (a >= 1e6) return (n / 1e6).toFixed(2) + "M";
  if (a >= 1e4) return (n / 1e3).toFixed(1) + "k";
  return SF.num(n, a < 10 ? 1 : 0);
};
SF.bytes = (b) => {
  if (b == null) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  let v = Number(b);
  while (Math.abs(v) >= 1024 && i < units.length - 1) { v /= 1024; i++; }
  return (i === 0 ? v.toFixed(0) : v.toFixed(v < 10 ? 2 : 1)) + " " + units[i];
};
SF.ms = (v) => (v == null ? "–" : v < 1 ? v.toFixed(3) + " ms" : v < 100 ? v.toFixed(2) + " ms" : SF.num(v) + " ms");
SF.duration = (ms) => {
  const s = Math.floor(ms / 1000);
  const d = Math.floor(s / 86400), h = Math.floor((s % 86400) / 3600), m = Math.floor((s % 3600) / 60);
  if (d) return `${d}d ${h}h`;
  if (h) return `${h}h ${m}m`;
  if (m) return `${m}m ${s % 60}s`;
  return `${s}s`;
};
SF.time = (ms) => (ms == null || ms < 0 ? "–" : new Date(ms).toISOString().replace("T", " ").replace("Z", " UTC"));
SF.badge = (text, kind) => `<span class="badge badge-${kind || "neutral"}">${SF.esc(text)}</span>`;
SF.stateBadge = (state) => SF.badge(state, { Stable: "ok", Empty: "neutral", Dead: "bad", PreparingRebalance: "warn", CompletingRebalance: "warn" }[state] || "neutral");

// ---------- HTTP ----------
// Errors say what went wrong in words: the broker's message with Kafka's error name when the
// broker refused the action, or that the broker cannot be reached (never "Failed to fetch").
SF.api = async (path, options = {}) => {
  let response;
  try {
    response = await fetch(path, { headers: { "Content-Type": "application/json" }, ...options });
  } catch (e) {
    const err = new Error(`Cannot reach the broker at ${location.host}: it is not running or the network is down (${(options.method || "GET")} ${path.split("?")[0]}).`);
    err.status = 0;
    throw err;
  }
  // The session ended (logout elsewhere, expiry): back to the login page, then here again.
  if (response.status === 401) {
    location.href = `/login?next=${encodeURIComponent(location.pathname + location.search)}`;
  }
  const text = await response.text();
  let body = null;
  try { body = text ? JSON.parse(text) : null; } catch (_) { body = { error: text.trim() }; }
  if (!response.ok) {
    const message = (body && body.error) || `${response.status} ${response.statusText}`;
    const err = new Error(body && body.kafka_error ? `${body.kafka_error}: ${message}` : message);
    err.status = response.status;
    err.kafkaError = body && body.kafka_error;
    throw err;
  }
  return body;
};

// ---------- human-readable config values ----------
const LONG_MAX = "9223372036854775807";
SF.durationText = (ms) => {
  const units = [["d", 86400000], ["h", 3600000], ["min", 60000], ["s", 1000]];
  for (const [u, size] of units) if (ms >= size && ms % size === 0) return `${SF.num(ms / size)} ${u}`;
  for (const [u, size] of units) if (ms >= size) return `${SF.num(ms / size, 1)} ${u}`;
  return `${SF.num(ms)} ms`;
};
// "retention.ms" = 3600000 -> "1 h"; byte sizes as KiB/MiB; -1 and Long.MAX_VALUE as "unlimited".
SF.configHuman = (name, value) => {
  if (value == null) return null;
  if (value === LONG_MAX || (value === "-1" && /(\.ms|\.bytes|\.messages)$/.test(name))) return "unlimited";
  if (!/^\d+$/.test(value)) return null;
  const n = Number(value);
  if (/\.ms$/.test(name)) return SF.durationText(n);
  if (/\.bytes$|max\.message\.bytes$/.test(name)) return n >= 1024 ? SF.bytes(n) : `${n} B`;
  return null;
};

SF.banner = (message, kind = "error") => {
  const el = document.getElementById("banner");
  if (!message) { el.className = "banner hidden"; return; }
  el.className = `banner banner-${kind}`;
  el.textContent = message;
};

// ---------- router ----------
SF.route = (pattern, nav, render) => SF.routes.push({ pattern, nav, render });
SF.go = (path) => { history.pushState({}, "", path); SF.render(); };

SF.render = () => {
  if (typeof SF.cleanup === "function") SF.cleanup();
  SF.cleanup = null;
  SF.banner(null);
  const path = decodeURIComponent(location.pathname).replace(/\/+$/, "") || "/";
  const page = document.getElementById("page");
  page.innerHTML = "";
  for (const r of SF.routes) {
    const m = path.match(r.pattern);
    if (!m) continue;
    document.querySelectorAll("[data-nav]").forEach((a) => a.classList.toggle("active", a.dataset.nav === r.nav));
    SF.cleanup = r.render(m.slice(1), page, new URLSearchParams(location.search)) || null;
    return;
  }
  page.innerHTML = `<div class="empty">Nothing here. <a href="/" data-link>Back to the overview</a>.</div>`;
};

// Refresh a page's data every `ms` while it is shown; returns the cleanup.
SF.every = (ms, fn) => {
  let stopped = false;
  let timer = null;
  const tick = async () => {
    if (stopped) return;
    try { await fn(); } catch (e) { SF.banner(e.message); }
    if (!stopped) timer = setTimeout(tick, ms);
  };
  tick();
  return () => { stopped = true; clearTimeout(timer); };
};

// ---------- live stream ----------
SF.onLive = (fn) => { SF.liveHandlers.add(fn); return () => SF.liveHandlers.delete(fn); };

SF.loadLiveHistory = async () => {
  try {
    const initial = await SF.api("/api/live");
    SF.liveHistory = initial.history.slice(-LIVE_KEEP);
  } catch (_) { /* the stream fills the history */ }
};

SF.startLive = () => {
  const dot = document.getElementById("live-dot");
  const label = document.getElementById("live-label");
  const source = new EventSource("/api/live/stream");
  source.onopen = () => { dot.className = "dot dot-live"; label.textContent = "live"; };
  source.addEventListener("live", (ev) => {
    const snap = JSON.parse(ev.data);
    SF.liveHistory.push(snap);
    if (SF.liveHistory.length > LIVE_KEEP) SF.liveHistory.shift();
    dot.className = "dot dot-live";
    label.textContent = "live";
    SF.liveHandlers.forEach((fn) => fn(snap));
  });
  source.onerror = () => { dot.className = "dot dot-down"; label.textContent = "reconnecting…"; };
};

// ---------- charts ----------
const PALETTE = ["#2563eb", "#16a34a", "#f59e0b", "#dc2626", "#7c3aed", "#0891b2", "#db2777", "#65a30d"];
SF.palette = PALETTE;

// A time-series chart: series = [{label, color?, value: (snapshot) => number, fmt?}]
SF.liveChart = (el, title, series, fmt) => {
  el.innerHTML = `<div class="chart-title">${SF.esc(title)}</div><div class="chart-body"></div>`;
  const body = el.querySelector(".chart-body");
  const build = () => {
    const xs = SF.liveHistory.map((s) => s.ts_ms / 1000);
    return [xs, ...series.map((s) => SF.liveHistory.map((snap) => s.value(snap)))];
  };
  const opts = {
    width: Math.max(body.clientWidth, 300),
    height: 220,
    cursor: { drag: { x: false, y: false } },
    legend: { show: true, live: false },
    // At least a minute wide, so a freshly started broker does not get sub-second ticks.
    scales: { x: { time: true, range: (u, min, max) => (max == null ? [min, max] : [Math.min(min, max - 60), max]) }, y: { range: (u, min, max) => [0, Math.max(max * 1.15, 1)] } },
    axes: [
      { stroke: "#64748b", grid: { stroke: "#eef2f7" } },
      { stroke: "#64748b", grid: { stroke: "#eef2f7" }, size: 86, values: (u, vals) => vals.map((v) => (fmt || SF.compact)(v)) },
    ],
    series: [{}, ...series.map((s, i) => ({
      label: s.label,
      stroke: s.color || PALETTE[i % PALETTE.length],
      width: 2,
      fill: (s.color || PALETTE[i % PALETTE.length]) + "14",
      value: (u, v) => (v == null ? "–" : (fmt || SF.compact)(v)),
    }))],
  };
  const plot = new uPlot(opts, build(), body);
  const onResize = () => plot.setSize({ width: Math.max(body.clientWidth, 300), height: 220 });
  window.addEventListener("resize", onResize);
  const off = SF.onLive(() => plot.setData(build()));
  return () => { off(); window.removeEventListener("resize", onResize); plot.destroy(); };
};

// A static chart from arrays: xs numbers, series [{label, values}]
SF.staticChart = (el, title, xs, series, opts = {}) => {
  el.innerHTML = `<div class="chart-title">${SF.esc(title)}</div><div class="chart-body"></div>`;
  const body = el.querySelector(".chart-body");
  const plot = new uPlot({
    width: Math.max(body.clientWidth, 300),
    height: opts.height || 220,
    cursor: { drag: { x: false, y: false } },
    legend: { show: series.length > 1, live: false },
    scales: {
      x: opts.xRange ? { time: !!opts.time, range: () => opts.xRange } : opts.minSpan ? { time: !!opts.time, range: (u, min, max) => (max == null ? [min, max] : [Math.min(min, max - opts.minSpan), max]) } : { time: !!opts.time },
      y: { range: (u, min, max) => [0, Math.max(max * 1.15, 1)] },
    },
    axes: [
      { stroke: "#64748b", grid: { stroke: "#eef2f7" }, label: opts.xLabel, values: opts.xValues },
      { stroke: "#64748b", grid: { stroke: "#eef2f7" }, size: 70, label: opts.yLabel, values: (u, vals) => vals.map((v) => (opts.fmt || SF.compact)(v)) },
    ],
    series: [{ label: opts.xLabel || "x" }, ...series.map((s, i) => ({
      label: s.label, stroke: PALETTE[i % PALETTE.length], width: 2, fill: PALETTE[i % PALETTE.length] + "14",
      points: { show: xs.length < 30 },
      value: (u, v) => (v == null ? "–" : (opts.fmt || SF.compact)(v)),
    }))],
  }, [xs, ...series.map((s) => s.values)], body);
  return () => plot.destroy();
};

// ---------- modal ----------
// Shows a dialog; `onSubmit(form)` may throw to keep it open with the error shown.
SF.modal = (html, onSubmit, wide = false) => {
  const modal = document.getElementById("modal");
  const box = document.getElementById("modal-box");
  box.classList.toggle("modal-wide", wide);
  box.innerHTML = `<form class="modal-form">${html}<div class="modal-error hidden"></div></form>`;
  modal.classList.remove("hidden");
  const form = box.querySelector("form");
  const close = () => { modal.classList.add("hidden"); box.innerHTML = ""; };
  form.querySelectorAll("[data-cancel]").forEach((b) => b.addEventListener("click", (e) => { e.preventDefault(); close(); }));
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    const errEl = form.querySelector(".modal-error");
    const submit = form.querySelector("button[type=submit]");
    submit.disabled = true;
    try {
      await onSubmit(form);
      close();
    } catch (err) {
      errEl.textContent = err.message;
      errEl.classList.remove("hidden");
      submit.disabled = false;
    }
  });
  const first = form.querySelector("input");
  if (first) first.focus();
  return close;
};

// ---------- boot ----------
SF.refreshClusterFoot = async () => {
  try {
    const c = await SF.api("/api/cluster");
    SF.cluster = c;
    document.getElementById("cluster-foot").innerHTML =
      `${SF.esc(c.cluster_id)}<br>node ${c.node_id} · v${SF.esc(c.version)}<br>up ${SF.duration(c.uptime_ms)}`;
  } catch (_) { /* shown on the next refresh */ }
};

// The signed-in user and the logout button, when the dashboard asks for a login.
SF.showUser = async () => {
  try {
    const me = await SF.api("/api/whoami");
    if (!me.login_required) return;
    document.getElementById("user-name").textContent = me.user;
    document.getElementById("user-box").classList.remove("hidden");
  } catch (_) { /* a 401 already went to the login page */ }
};

SF.boot = async () => {
  document.addEventListener("click", (e) => {
    const a = e.target.closest("a[data-link]");
    if (!a || e.ctrlKey || e.metaKey || e.shiftKey || a.target === "_blank") return;
    e.preventDefault();
    SF.go(a.getAttribute("href"));
  });
  window.addEventListener("popstate", SF.render);
  document.getElementById("modal").addEventListener("click", (e) => {
    if (e.target.id === "modal") { e.target.classList.add("hidden"); document.getElementById("modal-box").innerHTML = ""; }
  });
  // Charts draw the recent history first, then follow the stream.
  await SF.loadLiveHistory();
  SF.render();
  SF.startLive();
  SF.refreshClusterFoot();
  SF.showUser();
  setInterval(SF.refreshClusterFoot, 10000);
};
