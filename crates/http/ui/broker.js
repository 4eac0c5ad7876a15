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

// The brokers page: every registered broker (live or fenced), the controller, the metadata
// quorum, each broker's share of leaders and replicas, and the partitions that are
// under-replicated or without a leader.
SF.route(/^\/brokers$/, "brokers", (params, el) => {
  el.innerHTML = `<header class="page-head"><div><h1>Brokers</h1><div class="sub" id="bs-sub">&nbsp;</div></div></header>
    <section class="card"><div class="card-title">Brokers</div><div id="bs-brokers"></div></section>
    <section class="card"><div class="card-title">Metadata quorum</div><div id="bs-quorum"></div></section>
    <section class="card"><div class="card-title">Partitions needing attention</div><div id="bs-attention"></div></section>`;
  return SF.every(3000, async () => {
    const [c, topics] = await Promise.all([SF.api("/api/cluster"), SF.api("/api/topics")]);
    const leaders = {};
    const replicas = {};
    const attention = [];
    topics.forEach((t) => (t.partitions || []).forEach((p) => {
      if (p.leader >= 0) leaders[p.leader] = (leaders[p.leader] || 0) + 1;
      p.replicas.forEach((r) => { replicas[r] = (replicas[r] || 0) + 1; });
      if (p.leader < 0) attention.push({ t, p, what: SF.badge("offline", "bad") });
      else if (p.isr.length < p.replicas.length) attention.push({ t, p, what: SF.badge("under-replicated", "warn") });
    }));
    const fenced = c.brokers.filter((b) => b.fenced).length;
    el.querySelector("#bs-sub").textContent =
      `${c.brokers.length} broker(s) · ${fenced} fenced · controller ${c.controller_id} · this dashboard is served by node ${c.node_id}`;
    el.querySelector("#bs-brokers").innerHTML = `<table class="brokers"><thead><tr><th>ID</th><th>Address</th><th>Rack</th><th>State</th><th>Role</th>
      <th class="r">Leaders</th><th class="r">Replicas</th></tr></thead><tbody>
      ${c.brokers.map((b) => `<tr data-broker="${b.node_id}"><td>${b.node_id}</td><td class="mono">${SF.esc(`${b.host}:${b.port}`)}</td>
        <td>${SF.esc(b.rack || "–")}</td><td data-state>${b.fenced ? SF.badge("fenced", "bad") : SF.badge("live", "ok")}</td>
        <td data-role>${b.node_id === c.controller_id ? SF.badge("controller", "neutral") : ""}${b.node_id === c.node_id ? " <span class=\"muted\">(this broker)</span>" : ""}</td>
        <td class="r">${SF.num(leaders[b.node_id] || 0)}</td><td class="r">${SF.num(replicas[b.node_id] || 0)}</td></tr>`).join("")}</tbody></table>`;
    const q = c.quorum;
    el.querySelector("#bs-quorum").innerHTML = !q ? `<div class="empty">No quorum information.</div>` : `<div class="kv">
      <div class="kv-k">leader</div><div class="kv-v" id="bs-quorum-leader">${q.leader_id}</div>
      <div class="kv-k">epoch</div><div class="kv-v">${q.epoch}</div></div>
      <table><thead><tr><th>Voter</th><th>Status</th><th class="r">Lag (entries)</th></tr></thead><tbody>
      ${q.voters.map((v) => `<tr data-voter="${v.node_id}"><td>${v.node_id}</td><td>${v.node_id === q.leader_id ? "leader" : "follower"}</td>
        <td class="r">${v.lag == null ? "–" : SF.num(v.lag)}</td></tr>`).join("")}</tbody></table>`;
    el.querySelector("#bs-attention").innerHTML = attention.length === 0 ? `<div class="empty" id="bs-all-good">Every partition has a leader and its full ISR.</div>` :
      `<table><thead><tr><th>Partition</th><th></th><th class="r">Leader</th><th>Replicas</th><th>ISR</th></tr></thead><tbody>
      ${attention.map(({ t, p, what }) => `<tr data-partition="${SF.esc(`${t.name}-${p.partition}`)}"><td><a href="/topics/${encodeURIComponent(t.name)}" data-link>${SF.esc(t.name)}</a>-${p.partition}</td>
        <td>${what}</td><td class="r">${p.leader}</td><td>${p.replicas.join(", ")}</td><td>${p.isr.join(", ") || "none"}</td></tr>`).join("")}</tbody></table>`;
  });
});
