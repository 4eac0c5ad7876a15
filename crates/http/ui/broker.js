// The broker page: version, uptime, data directory and disk use, listeners, configs.
"use strict";

SF.route(/^\/broker$/, "broker", (params, el) => {
  el.innerHTML = `<header class="page-head"><div><h1>Broker</h1><div class="sub" id="br-sub">&nbsp;</div></div></header>
    <section class="stats" id="br-stats"></section>
    <section class="card"><div class="card-title">Storage</div><div id="br-storage"></div></section>
    <section class="card"><div class="card-title">Configuration</div><div id="br-configs"></div></section>`;
  return SF.every(5000, async () => {
    const b = await SF.api("/api/broker");
    el.querySelector("#br-sub").textContent = `node ${b.node_id} · ${b.listeners.join(" · ")}`;
    const stat = (label, value, id) => `<div class="stat" data-stat="${id}"><div class="stat-label">${label}</div><div class="stat-value">${value}</div></div>`;
    const used = b.disk_total_bytes == null ? null : b.disk_total_bytes - b.disk_free_bytes;
    el.querySelector("#br-stats").innerHTML = stat("Version", SF.esc(b.version), "version") + stat("Uptime", SF.duration(b.uptime_ms), "uptime") +
      stat("Log data", SF.bytes(b.log_bytes), "log-bytes") +
      stat("Disk used", used == null ? "–" : `${Math.round((100 * used) / Math.max(1, b.disk_total_bytes))} %`, "disk");
    el.querySelector("#br-storage").innerHTML = `<div class="kv">
      <div class="kv-k">data directory</div><div class="kv-v mono" id="br-data-dir">${SF.esc(b.data_dir)}</div>
      <div class="kv-k">partition logs</div><div class="kv-v">${SF.bytes(b.log_bytes)}</div>
      <div class="kv-k">disk</div><div class="kv-v">${b.disk_total_bytes == null ? "unknown" : `${SF.bytes(used)} used of ${SF.bytes(b.disk_total_bytes)} · ${SF.bytes(b.disk_free_bytes)} free`}</div>
      <div class="kv-k">started</div><div class="kv-v">${SF.esc(SF.time(b.started_at_ms))}</div></div>`;
    el.querySelector("#br-configs").innerHTML = `<table class="configs"><thead><tr><th>Name</th><th>Value</th></tr></thead><tbody>
      ${b.configs.map((c) => {
        const human = SF.configHuman(c.name, c.value);
        return `<tr data-config="${SF.esc(c.name)}"><td>${SF.esc(c.name)}</td><td>${human ? `<span class="human">${SF.esc(human)}</span> <span class="muted mono">${SF.esc(c.value)}</span>` : `<span class="mono">${SF.esc(c.value)}</span>`}</td></tr>`;
      }).join("")}</tbody></table>`;
  });
});
