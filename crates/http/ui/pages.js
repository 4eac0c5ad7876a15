// Pages: overview, topics, topic, partition + message browser, consumer groups.
"use strict";

// ---------- overview ----------
SF.route(/^\/$/, "overview", (params, el) => {
  el.innerHTML = `
    <header class="page-head"><div><h1>Overview</h1><div class="sub" id="ov-sub">&nbsp;</div></div></header>
    <section class="stats" id="ov-stats"></section>
    <section class="grid2">
      <div class="card chart" id="ov-msgs"></div>
      <div class="card chart" id="ov-bytes"></div>
    </section>
    <section class="card chart" id="ov-reqs"></section>
    <section class="card" id="ov-apis-card"><div class="card-title">Requests by API <span class="muted">(rate: last second · latency: last 10 s)</span></div><div id="ov-apis"></div></section>
    <section class="card"><div class="card-title">Topics <span class="spacer"></span>
      <button class="btn btn-primary" id="ov-create">Create topic</button></div><div id="ov-topics"></div></section>`;
  const cleanups = [
    SF.liveChart(el.querySelector("#ov-msgs"), "Messages per second", [
      { label: "in", value: (s) => s.messages_in_per_sec },
      { label: "out", value: (s) => s.messages_out_per_sec },
    ]),
    SF.liveChart(el.querySelector("#ov-bytes"), "Bytes per second", [
      { label: "in", value: (s) => s.bytes_in_per_sec },
      { label: "out", value: (s) => s.bytes_out_per_sec },
    ], (v) => SF.bytes(v) + "/s"),
    SF.liveChart(el.querySelector("#ov-reqs"), "Requests per second and connections", [
      { label: "requests/s", value: (s) => s.requests_per_sec },
      { label: "connections", value: (s) => s.connections },
    ]),
  ];
  const drawStats = (s) => {
    s = s || {};
    const stat = (label, value, id) => `<div class="stat" data-stat="${id}"><div class="stat-label">${label}</div><div class="stat-value">${value}</div></div>`;
    el.querySelector("#ov-stats").innerHTML =
      stat("Messages in / s", SF.compact(s.messages_in_per_sec || 0), "msgs-in") +
      stat("Messages out / s", SF.compact(s.messages_out_per_sec || 0), "msgs-out") +
      stat("Bytes in / s", SF.bytes(s.bytes_in_per_sec || 0), "bytes-in") +
      stat("Bytes out / s", SF.bytes(s.bytes_out_per_sec || 0), "bytes-out") +
      stat("Requests / s", SF.compact(s.requests_per_sec || 0), "reqs") +
      stat("Connections", SF.num(s.connections || 0), "conns");
    const apis = (s.apis || []).filter((a) => a.requests_total > 0);
    el.querySelector("#ov-apis").innerHTML = apis.length === 0 ? `<div class="empty">No requests yet.</div>` : `
      <table><thead><tr><th>API</th><th class="r">req/s</th><th class="r">total</th><th class="r">p50</th><th class="r">p99</th><th class="r">p99.9</th><th class="r">max</th></tr></thead>
      <tbody>${apis.map((a) => `<tr><td>${SF.esc(a.api)}</td><td class="r">${SF.compact(a.requests_per_sec)}</td><td class="r">${SF.compact(a.requests_total)}</td>
        <td class="r">${SF.ms(a.p50_ms)}</td><td class="r">${SF.ms(a.p99_ms)}</td><td class="r">${SF.ms(a.p999_ms)}</td><td class="r">${SF.ms(a.max_ms)}</td></tr>`).join("")}</tbody></table>`;
  };
  drawStats(SF.liveHistory[SF.liveHistory.length - 1]);
  cleanups.push(SF.onLive(drawStats));
  el.querySelector("#ov-create").addEventListener("click", () => SF.createTopicDialog(() => loadTopics()));
  const loadTopics = async () => {
    const [cluster, topics] = await Promise.all([SF.api("/api/cluster"), SF.api("/api/topics")]);
    el.querySelector("#ov-sub").textContent =
      `Cluster ${cluster.cluster_id} · ${cluster.brokers.length} broker(s) · controller ${cluster.controller_id} · ` +
      `${cluster.topic_count} topics · ${cluster.partition_count} partitions · ${cluster.group_count} groups · up ${SF.duration(cluster.uptime_ms)}`;
    SF.topicsTable(el.querySelector("#ov-topics"), topics, loadTopics);
  };
  cleanups.push(SF.every(3000, loadTopics));
  return () => cleanups.forEach((c) => c());
});

// Topic rates from the latest live snapshot, by topic name.
SF.topicRates = () => {
  const s = SF.liveHistory[SF.liveHistory.length - 1];
  const map = {};
  (s ? s.topics : []).forEach((t) => { map[t.topic] = t; });
  return map;
};

SF.topicsTable = (el, topics, reload, listId) => {
  if (topics.length === 0) { el.innerHTML = `<div class="empty">No topics yet. Create one, or let a producer auto-create it.</div>`; return; }
  const rates = SF.topicRates();
  const rate = (t, f) => (rates[t.name] || {})[f] || 0;
  const columns = { name: (t) => t.name, partitions: (t) => t.partition_count, messages: (t) => t.messages, size: (t) => t.size_bytes,
    in: (t) => rate(t, "messages_in_per_sec"), out: (t) => rate(t, "messages_out_per_sec") };
  const filterOf = (t, f) => (f === "internal" ? t.internal : f === "user" ? !t.internal : f === "empty" ? t.messages === 0 : true);
  const shown = listId ? SF.applyList(listId, topics, columns, (t) => t.name, filterOf) : topics;
  if (listId) SF.listCount(listId, shown.length, topics.length);
  const head = (key, label, cls) => (listId ? SF.sortHead(listId, key, label, cls) : `<th class="${cls || ""}">${label}</th>`);
  el.innerHTML = `<table class="topics"><thead><tr>${head("name", "Topic")}${head("partitions", "Partitions", "r")}${head("messages", "Messages", "r")}${head("size", "Size", "r")}
    ${head("in", "In (msg/s)", "r")}${head("out", "Out (msg/s)", "r")}<th></th></tr></thead><tbody>
    ${shown.length === 0 ? `<tr><td colspan="7" class="empty">No topic matches.</td></tr>` : ""}
    ${shown.map((t) => {
      const r = rates[t.name] || {};
      return `<tr data-topic="${SF.esc(t.name)}"><td><a href="/topics/${encodeURIComponent(t.name)}" data-link>${SF.esc(t.name)}</a>${t.internal ? " " + SF.badge("internal") : ""}</td>
      <td class="r">${t.partition_count}</td><td class="r">${SF.num(t.messages)}</td><td class="r">${SF.bytes(t.size_bytes)}${t.remote_size_bytes ? ` <span class="muted">+ ${SF.bytes(t.remote_size_bytes)} remote</span>` : ""}</td>
      <td class="r">${SF.compact(r.messages_in_per_sec || 0)}</td><td class="r">${SF.compact(r.messages_out_per_sec || 0)}</td>
      <td class="r nowrap"><a class="btn btn-small" href="/topics/${encodeURIComponent(t.name)}/partitions/0" data-link>Browse</a>
      ${t.internal ? "" : `<button class="btn btn-small btn-danger" data-delete="${SF.esc(t.name)}">Delete</button>`}</td></tr>`;
    }).join("")}</tbody></table>`;
  el.querySelectorAll("[data-delete]").forEach((b) => b.addEventListener("click", () => SF.deleteTopicDialog(b.dataset.delete, reload)));
  if (listId) SF.bindSort(el, listId, () => SF.topicsTable(el, topics, reload, listId));
};

SF.createTopicDialog = (done) => {
  SF.modal(`
    <h2>Create topic</h2>
    <label>Name<input name="name" required maxlength="249" pattern="[a-zA-Z0-9._\\-]+" placeholder="orders" autocomplete="off"></label>
    <div class="row"><label>Partitions<input name="partitions" type="number" min="1" max="10000" value="3" required></label>
    <label>Replication factor<input name="rf" type="number" min="1" value="1" required></label></div>
    <label>Retention (hours, empty = broker default)<input name="retention" type="number" min="1" placeholder="168"></label>
    <label class="check"><input type="checkbox" name="confirm" required> I want to create this topic</label>
    <div class="modal-actions"><button class="btn" data-cancel>Cancel</button><button class="btn btn-primary" type="submit">Create</button></div>`,
  async (form) => {
    const configs = {};
    if (form.retention.value) configs["retention.ms"] = String(Number(form.retention.value) * 3600 * 1000);
    await SF.api("/api/topics", { method: "POST", body: JSON.stringify({
      name: form.name.value.trim(), partitions: Number(form.partitions.value), replication_factor: Number(form.rf.value), configs,
    }) });
    SF.banner(`Topic ${form.name.value.trim()} created.`, "ok");
    done && done();
  });
};

SF.deleteTopicDialog = (name, done) => {
  SF.modal(`
    <h2>Delete topic <code>${SF.esc(name)}</code>?</h2>
    <p class="warn-text">All its messages are deleted. This cannot be undone.</p>
    <label>Type the topic name to confirm<input name="confirm" required autocomplete="off"></label>
    <div class="modal-actions"><button class="btn" data-cancel>Cancel</button><button class="btn btn-danger" type="submit">Delete topic</button></div>`,
  async (form) => {
    if (form.confirm.value !== name) throw new Error("The name does not match.");
    await SF.api(`/api/topics/${encodeURIComponent(name)}?confirm=${encodeURIComponent(form.confirm.value)}`, { method: "DELETE" });
    SF.banner(`Topic ${name} deleted.`, "ok");
    done && done();
  });
};

// ---------- topics list ----------
SF.route(/^\/topics$/, "topics", (params, el) => {
  el.innerHTML = `<header class="page-head"><div><h1>Topics</h1><div class="sub">Every topic on the cluster, internal ones last.</div></div>
    <button class="btn btn-primary" id="tp-create">Create topic</button></header><section class="card"><div id="tp-tools"></div><div id="tp-list"></div></section>`;
  let last = [];
  const draw = () => SF.topicsTable(el.querySelector("#tp-list"), last, load, "topics");
  SF.listToolbar(el.querySelector("#tp-tools"), "topics", "Search topics", [["", "all topics"], ["user", "user topics"], ["internal", "internal topics"], ["empty", "without messages"]], draw);
  const load = async () => { last = await SF.api("/api/topics"); draw(); };
  el.querySelector("#tp-create").addEventListener("click", () => SF.createTopicDialog(load));
  return SF.every(3000, load);
});

// ---------- topic ----------
SF.route(/^\/topics\/([^/]+)$/, "topics", ([name], el) => {
  el.innerHTML = `<header class="page-head"><div><div class="crumbs"><a href="/topics" data-link>Topics</a> /</div><h1>${SF.esc(name)}</h1><div class="sub" id="t-sub">&nbsp;</div></div>
    <div class="head-actions"><button class="btn btn-primary" id="t-produce">Produce message</button><button class="btn" id="t-add-parts">Add partitions</button>
    <button class="btn btn-danger" id="t-delete">Delete topic</button></div></header>
    <section class="stats" id="t-stats"></section>
    <section class="card chart" id="t-chart"></section>
    <section class="card"><div class="card-title">Partitions</div><div id="t-parts"></div></section>
    <section class="card"><div class="card-title">Consumers</div><div id="t-consumers"></div></section>
    <section class="card"><div class="card-title">Configuration <span class="spacer"></span><button class="btn btn-small" id="t-edit-config">Edit config</button></div><div id="t-configs"></div></section>`;
  const rate = (s, field) => { const t = (s.topics || []).find((x) => x.topic === name); return t ? t[field] : 0; };
  const cleanups = [SF.liveChart(el.querySelector("#t-chart"), "Messages per second", [
    { label: "in", value: (s) => rate(s, "messages_in_per_sec") },
    { label: "out", value: (s) => rate(s, "messages_out_per_sec") },
  ])];
  el.querySelector("#t-delete").addEventListener("click", () => SF.deleteTopicDialog(name, () => SF.go("/topics")));
  let configsShown = false;
  let current = null;
  const reloadConfigs = () => { configsShown = false; refresh().catch((e) => SF.banner(e.message)); };
  el.querySelector("#t-edit-config").addEventListener("click", () => current && SF.editConfigDialog(name, current.configs, null, reloadConfigs));
  el.querySelector("#t-add-parts").addEventListener("click", () => current && SF.addPartitionsDialog(name, current.partition_count, () => refresh().catch((e) => SF.banner(e.message))));
  el.querySelector("#t-produce").addEventListener("click", () => current && SF.produceDialog(name, current.partitions.map((p) => p.partition), () => refresh().catch((e) => SF.banner(e.message))));
  const refresh = async () => {
    let t;
    try { t = await SF.api(`/api/topics/${encodeURIComponent(name)}`); } catch (e) {
      if (e.status === 404) { el.querySelector("#t-parts").innerHTML = `<div class="empty">Topic ${SF.esc(name)} does not exist.</div>`; return; }
      throw e;
    }
    el.querySelector("#t-sub").innerHTML = `${t.topic_id ? "id " + SF.esc(t.topic_id) + " · " : ""}replication factor ${t.replication_factor}${t.internal ? " · " + SF.badge("internal") : ""}`;
    current = t;
    ["#t-delete", "#t-add-parts", "#t-produce"].forEach((b) => el.querySelector(b).classList.toggle("hidden", t.internal));
    SF.topicConsumers(el.querySelector("#t-consumers"), name).catch((e) => SF.banner(e.message));
    const stat = (label, value) => `<div class="stat"><div class="stat-label">${label}</div><div class="stat-value">${value}</div></div>`;
    el.querySelector("#t-stats").innerHTML = stat("Partitions", t.partition_count) + stat("Messages", SF.num(t.messages)) +
      stat("Size on disk", SF.bytes(t.size_bytes)) + stat("In object store", t.remote_size_bytes == null ? "off" : SF.bytes(t.remote_size_bytes));
    el.querySelector("#t-parts").innerHTML = `<table><thead><tr><th>Partition</th><th class="r">Leader</th><th class="r">Epoch</th><th>Replicas</th><th>ISR</th><th>Replication lag</th>
      <th class="r">Log start</th><th class="r">Log end</th><th class="r">High watermark</th><th class="r">Messages</th><th class="r">Size</th><th class="r">Remote</th><th></th></tr></thead><tbody>
      ${t.partitions.map((p) => { const r = SF.replicaSets(p); return `<tr data-partition="${p.partition}" class="${r.under ? "under-replicated" : ""}">
        <td><a href="/topics/${encodeURIComponent(name)}/partitions/${p.partition}" data-link>${p.partition}</a>${r.under ? " " + SF.badge("under-replicated", "warn") : ""}</td>
        <td class="r">${p.leader}</td><td class="r">${p.leader_epoch}</td><td class="p-replicas">${r.replicas.join(", ")}</td>
        <td class="p-isr">${r.isr.length < r.replicas.length ? SF.badge(r.isr.join(", ") || "none", "warn") : r.isr.join(", ")}</td>
        <td class="p-lag">${SF.replicationLag(p)}</td>
        <td class="r">${SF.num(p.log_start_offset)}</td><td class="r">${SF.num(p.log_end_offset)}</td><td class="r">${SF.num(p.high_watermark)}</td>
        <td class="r">${SF.num(Math.max(0, p.high_watermark - p.log_start_offset))}</td><td class="r">${SF.bytes(p.size_bytes)}</td>
        <td class="r">${p.remote_size_bytes == null ? "–" : SF.bytes(p.remote_size_bytes)}</td>
        <td class="r"><a class="btn btn-small" href="/topics/${encodeURIComponent(name)}/partitions/${p.partition}" data-link>Browse</a></td></tr>`; }).join("")}</tbody></table>`;
    if (!configsShown) {
      configsShown = true;
      // Human-readable first ("1 h"), the raw value beside it.
      const value = (c) => {
        if (c.sensitive) return "••••••";
        const human = SF.configHuman(c.name, c.value);
        return human ? `<span class="human">${SF.esc(human)}</span> <span class="muted mono raw">${SF.esc(c.value)}</span>` : `<span class="mono">${SF.esc(c.value ?? "null")}</span>`;
      };
      const edit = (c) => (t.internal ? "" : `<button class="btn btn-small" data-edit-config="${SF.esc(c.name)}">Edit</button>`);
      const rows = (list) => list.map((c) => `<tr class="${c.is_default ? "" : "strong"}" data-config="${SF.esc(c.name)}"><td>${SF.esc(c.name)}</td><td class="cfg-value">${value(c)}</td><td class="muted">${SF.esc(c.source)}</td><td class="r">${edit(c)}</td></tr>`).join("");
      const set = t.configs.filter((c) => !c.is_default);
      const defaults = t.configs.filter((c) => c.is_default);
      const head = `<thead><tr><th>Name</th><th>Value</th><th>Source</th><th></th></tr></thead>`;
      el.querySelector("#t-configs").innerHTML = t.configs.length === 0 ? `<div class="empty">No configs reported.</div>` :
        (set.length ? `<table class="configs">${head}<tbody>${rows(set)}</tbody></table>` : `<div class="muted">Every config has its broker default.</div>`) +
        (defaults.length ? `<details class="config-defaults"><summary>Broker defaults (${defaults.length})</summary><table class="configs">${head}<tbody>${rows(defaults)}</tbody></table></details>` : "");
      el.querySelectorAll("[data-edit-config]").forEach((b) => b.addEventListener("click", () => SF.editConfigDialog(name, t.configs, b.dataset.editConfig, reloadConfigs)));
    }
  };
  cleanups.push(SF.every(3000, refresh));
  return () => cleanups.forEach((c) => c());
});

// The replicas and ISR that count for a partition: the leader's own while it tracks followers
// (fresher than the metadata image), else the image's. Under-replicated: led here with a short ISR.
SF.replicaSets = (p) => {
  const r = p.replication || p;
  return { replicas: r.replicas, isr: r.isr, under: Boolean(p.led_here) && r.isr.length < r.replicas.length };
};

// Per-follower lag in messages (leader's log end minus the follower's) where this broker leads
// with followers; on a follower its lag to the leader's high watermark; else a dash.
SF.replicationLag = (p) => {
  if (p.replication) {
    if (p.replication.followers.length === 0) return "–";
    return p.replication.followers.map((f) => {
      const lag = f.lag_messages == null ? "not fetched yet" : SF.num(f.lag_messages);
      const title = `broker ${f.broker_id}: ${f.in_sync ? "in sync" : "out of sync"}, caught up ${SF.num(f.time_since_caught_up_ms)} ms ago`;
      return `<span class="follower-lag" data-follower="${f.broker_id}" title="${SF.esc(title)}">${SF.badge(`${f.broker_id}: ${lag}`, f.in_sync ? "ok" : "warn")}</span>`;
    }).join(" ");
  }
  if (p.fetcher_lag != null) return `<span class="fetcher-lag">follower, ${SF.num(p.fetcher_lag)} behind the leader's HW</span>`;
  return "–";
};

// ---------- partition + message browser ----------
SF.route(/^\/topics\/([^/]+)\/partitions\/(\d+)$/, "topics", ([name, partition], el, query) => {
  el.innerHTML = `<header class="page-head"><div><div class="crumbs"><a href="/topics" data-link>Topics</a> / <a href="/topics/${encodeURIComponent(name)}" data-link>${SF.esc(name)}</a> /</div>
    <h1>Partition ${partition}</h1><div class="sub" id="p-sub">&nbsp;</div></div>
    <button class="btn btn-danger" id="p-delete-records">Delete records</button></header>
    <section class="stats" id="p-stats"></section>
    <section class="card" id="p-browser"></section>`;
  let hw = 0;
  el.querySelector("#p-delete-records").addEventListener("click", () => SF.deleteRecordsDialog(name, Number(partition), hw, () => SF.render()));
  const cleanups = [SF.every(3000, async () => {
    const p = await SF.api(`/api/topics/${encodeURIComponent(name)}/partitions/${partition}`);
    hw = p.high_watermark;
    const r = SF.replicaSets(p);
    el.querySelector("#p-sub").textContent = `leader ${p.leader} · epoch ${p.leader_epoch} · replicas ${r.replicas.join(", ")} · ISR ${r.isr.join(", ")}${r.under ? " · under-replicated" : ""}`;
    const stat = (label, value) => `<div class="stat"><div class="stat-label">${label}</div><div class="stat-value">${value}</div></div>`;
    el.querySelector("#p-stats").innerHTML = stat("Log start offset", SF.num(p.log_start_offset)) + stat("High watermark", SF.num(p.high_watermark)) +
      stat("Log end offset", SF.num(p.log_end_offset)) + stat("Messages", SF.num(p.messages)) + stat("Size on disk", SF.bytes(p.size_bytes));
  })];
  SF.messageBrowser(el.querySelector("#p-browser"), name, Number(partition), query);
  return () => cleanups.forEach((c) => c());
});

// Message browser for one partition; `query` may preset from/offset/timestamp/limit/format.
SF.messageBrowser = (el, topic, partition, query) => {
  el.innerHTML = `<div class="card-title">Messages</div>
    <form class="toolbar" id="mb-form">
      <label>Start at<select name="mode"><option value="earliest">earliest</option><option value="latest">latest</option><option value="offset">offset</option><option value="timestamp">time</option></select></label>
      <label class="mb-offset hidden">Offset<input name="offset" type="number" min="0" value="0"></label>
      <label class="mb-time hidden">Time (UTC)<input name="time" type="datetime-local" step="1"></label>
      <label>Limit<input name="limit" type="number" min="1" max="500" value="50"></label>
      <label>Show as<select name="format"><option value="auto">auto</option><option value="text">text</option><option value="hex">hex</option></select></label>
      <button class="btn btn-primary" type="submit">Load</button>
      <button class="btn" type="button" id="mb-next" disabled>Next page →</button>
      <button class="btn" type="button" id="mb-download" disabled>Download JSON</button>
    </form>
    <div id="mb-info" class="muted"></div><div id="mb-table"></div>`;
  const form = el.querySelector("#mb-form");
  const sync = () => {
    el.querySelector(".mb-offset").classList.toggle("hidden", form.mode.value !== "offset");
    el.querySelector(".mb-time").classList.toggle("hidden", form.mode.value !== "timestamp");
  };
  if (query.get("offset")) { form.mode.value = "offset"; form.offset.value = query.get("offset"); }
  if (query.get("from")) form.mode.value = query.get("from");
  if (query.get("limit")) form.limit.value = query.get("limit");
  form.mode.addEventListener("change", sync);
  sync();
  let next = null;
  const load = async (startOffset) => {
    const qs = new URLSearchParams({ limit: form.limit.value, format: form.format.value });
    if (startOffset != null) qs.set("offset", startOffset);
    else if (form.mode.value === "offset") qs.set("offset", form.offset.value || "0");
    else if (form.mode.value === "timestamp") {
      if (!form.time.value) throw new Error("Pick a time to start from.");
      qs.set("timestamp", String(Date.parse(form.time.value + "Z")));
    } else qs.set("from", form.mode.value);
    const page = await SF.api(`/api/topics/${encodeURIComponent(topic)}/partitions/${partition}/messages?${qs}`);
    next = page.next_offset;
    el.querySelector("#mb-next").disabled = page.next_offset >= page.high_watermark;
    el.querySelector("#mb-info").textContent = page.messages.length === 0
      ? `No messages from there (log start ${page.log_start_offset}, high watermark ${page.high_watermark}).`
      : `Offsets ${page.messages[0].offset} – ${page.messages[page.messages.length - 1].offset} of ${page.log_start_offset} – ${page.high_watermark - 1}`;
    SF.messagesTable(el.querySelector("#mb-table"), page.messages);
    shown = page;
    el.querySelector("#mb-download").disabled = page.messages.length === 0;
  };
  const run = (start) => load(start).catch((e) => SF.banner(e.message));
  form.addEventListener("submit", (e) => { e.preventDefault(); run(null); });
  el.querySelector("#mb-next").addEventListener("click", () => run(next));
  let shown = null;
  el.querySelector("#mb-download").addEventListener("click", () => {
    if (shown) SF.downloadJson(`${topic}-${partition}-from-${shown.messages[0].offset}.json`, shown.messages);
  });
  run(null);
};

SF.payload = (p) => (p == null ? `<span class="muted">null</span>` :
  `<span class="payload ${p.encoding === "hex" ? "hex" : ""}" title="${p.size_bytes} bytes${p.encoding === "hex" ? ", hex" : ""}">${SF.esc(p.data.length > 160 ? p.data.slice(0, 160) + "…" : p.data)}</span>`);

SF.messageDetail = (m) => {
  const b = m.batch;
  const kv = (k, v) => `<div class="kv-k">${k}</div><div class="kv-v">${v}</div>`;
  const full = (p) => {
    if (p == null) return `<span class="muted">null</span>`;
    const pretty = SF.prettyJson(p);
    return `<pre class="${pretty ? "json" : ""}">${SF.esc(pretty || p.data)}</pre><div class="muted small">${pretty ? "JSON, " : ""}${p.encoding}, ${SF.num(p.size_bytes)} bytes${p.truncated ? ", cut for display" : ""}</div>`;
  };
  return `<div class="detail-grid">
    <div><div class="detail-title">Key</div>${full(m.key)}<div class="detail-title">Value</div>${full(m.value)}
      <div class="detail-title">Headers</div>${m.headers.length ? m.headers.map((h) => `<div><code>${SF.esc(h.key)}</code> = ${h.value ? SF.esc(h.value.data) : "null"}</div>`).join("") : `<span class="muted">none</span>`}</div>
    <div><div class="detail-title">Record batch</div><div class="kv">
      ${kv("offsets", `${b.base_offset} – ${b.last_offset}`)}${kv("size", SF.bytes(b.size_bytes))}${kv("compression", SF.esc(b.compression))}
      ${kv("timestamp type", SF.esc(b.timestamp_type))}${kv("timestamp", `${SF.esc(SF.time(m.timestamp_ms))} (${m.timestamp_ms})`)}
      ${kv("leader epoch", b.partition_leader_epoch)}${kv("producer id / epoch", `${b.producer_id} / ${b.producer_epoch}`)}
      ${kv("base sequence", b.base_sequence)}${kv("transactional", b.transactional)}</div></div></div>`;
};

// A JSON object or array value, pretty-printed; null for anything else.
SF.prettyJson = (p) => {
  if (!p || p.encoding !== "text" || p.truncated || !/^\s*[[{]/.test(p.data)) return null;
  try { return JSON.stringify(JSON.parse(p.data), null, 2); } catch (_) { return null; }
};

SF.messagesTable = (el, messages) => {
  if (messages.length === 0) { el.innerHTML = ""; return; }
  const withPartition = messages.some((m) => m.partition != null);
  el.innerHTML = `<table class="messages"><thead><tr>${withPartition ? `<th class="r">Partition</th>` : ""}<th class="r">Offset</th><th>Timestamp</th><th>Key</th><th>Value</th><th>Headers</th><th>Batch</th></tr></thead><tbody>
    ${messages.map((m, i) => `<tr class="msg" data-i="${i}">${withPartition ? `<td class="r mono">${m.partition}</td>` : ""}<td class="r mono">${m.offset}</td><td class="nowrap mono">${SF.esc(SF.time(m.timestamp_ms))}</td>
      <td>${SF.payload(m.key)}</td><td>${SF.payload(m.value)}</td>
      <td>${m.headers.length ? m.headers.map((h) => `<span class="hdr">${SF.esc(h.key)}=${h.value ? SF.esc(h.value.data.slice(0, 40)) : "null"}</span>`).join(" ") : `<span class="muted">–</span>`}</td>
      <td class="nowrap muted">${m.batch.base_offset}${m.batch.last_offset !== m.batch.base_offset ? "–" + m.batch.last_offset : ""} · ${SF.esc(m.batch.compression)}</td></tr>
      <tr class="msg-detail hidden" data-d="${i}"><td colspan="${withPartition ? 7 : 6}">${SF.messageDetail(m)}</td></tr>`).join("")}</tbody></table>`;
  el.querySelectorAll("tr.msg").forEach((tr) => tr.addEventListener("click", () =>
    el.querySelector(`tr[data-d="${tr.dataset.i}"]`).classList.toggle("hidden")));
};

// ---------- consumer groups ----------
SF.route(/^\/groups$/, "groups", (params, el) => {
  el.innerHTML = `<header class="page-head"><div><h1>Consumer groups</h1><div class="sub">Groups with their state and how far behind they are.</div></div></header>
    <section class="card"><div id="g-tools"></div><div id="g-list"></div></section>`;
  let groups = [];
  const columns = { id: (g) => g.group_id, state: (g) => g.state, members: (g) => g.member_count, generation: (g) => g.generation, lag: (g) => g.total_lag };
  const draw = () => {
    const list = el.querySelector("#g-list");
    if (groups.length === 0) { list.innerHTML = `<div class="empty">No consumer groups yet.</div>`; return; }
    const shown = SF.applyList("groups", groups, columns, (g) => g.group_id + " " + g.offsets.map((o) => o.topic).join(" "), (g, f) => g.state === f);
    SF.listCount("groups", shown.length, groups.length);
    const h = (k, label, cls) => SF.sortHead("groups", k, label, cls);
    list.innerHTML = `<table><thead><tr>${h("id", "Group")}${h("state", "State")}${h("members", "Members", "r")}<th>Protocol</th>${h("generation", "Generation", "r")}${h("lag", "Total lag", "r")}</tr></thead><tbody>
      ${shown.length === 0 ? `<tr><td colspan="6" class="empty">No group matches.</td></tr>` : ""}
      ${shown.map((g) => `<tr data-group="${SF.esc(g.group_id)}"><td><a href="/groups/${encodeURIComponent(g.group_id)}" data-link>${SF.esc(g.group_id)}</a></td><td>${SF.stateBadge(g.state)}</td>
        <td class="r">${g.member_count}</td><td>${SF.esc(g.protocol_type)}${g.protocol ? " / " + SF.esc(g.protocol) : ""}</td><td class="r">${g.generation}</td>
        <td class="r lag">${SF.num(g.total_lag)}</td></tr>`).join("")}</tbody></table>`;
    SF.bindSort(list, "groups", draw);
  };
  SF.listToolbar(el.querySelector("#g-tools"), "groups", "Search groups or topics", [["", "any state"], ["Stable", "Stable"], ["Empty", "Empty"],
    ["PreparingRebalance", "PreparingRebalance"], ["CompletingRebalance", "CompletingRebalance"]], draw);
  return SF.every(2000, async () => { groups = await SF.api("/api/groups"); draw(); });
});

SF.route(/^\/groups\/([^/]+)$/, "groups", ([id], el) => {
  el.innerHTML = `<header class="page-head"><div><div class="crumbs"><a href="/groups" data-link>Consumer groups</a> /</div><h1>${SF.esc(id)}</h1><div class="sub" id="gd-sub">&nbsp;</div></div>
    <div class="head-actions"><button class="btn" id="gd-reset">Reset offsets</button><button class="btn btn-danger" id="gd-delete-offsets">Delete offsets</button>
    <button class="btn btn-danger" id="gd-delete">Delete group</button></div></header>
    <section class="stats" id="gd-stats"></section>
    <section class="card chart" id="gd-chart"></section>
    <section class="card"><div class="card-title">Lag by partition</div><div id="gd-offsets"></div></section>
    <section class="card"><div class="card-title">Members</div><div id="gd-members"></div></section>`;
  let lagChart = null;
  let offsets = [];
  const cleanups = [() => lagChart && lagChart()];
  // Any topic can get offsets, not only those the group has committed on.
  el.querySelector("#gd-reset").addEventListener("click", async () => {
    try {
      const topics = await SF.api("/api/topics");
      const known = topics.filter((t) => !t.internal).flatMap((t) => t.partitions.map((p) => ({ topic: t.name, partition: p.partition })));
      SF.resetOffsetsDialog(id, offsets.length ? offsets.concat(known.filter((k) => !offsets.some((o) => o.topic === k.topic))) : known, () => {});
    } catch (e) { SF.banner(e.message); }
  });
  el.querySelector("#gd-delete-offsets").addEventListener("click", () => SF.deleteOffsetsDialog(id, offsets, () => {}));
  el.querySelector("#gd-delete").addEventListener("click", () => SF.deleteGroupDialog(id, () => SF.go("/groups")));
  // The broker keeps the lag history (one point per 10 s, last hour), so a reload keeps it.
  const drawLag = async () => {
    const h = await SF.api(`/api/groups/${encodeURIComponent(id)}/lag-history`);
    const chartEl = el.querySelector("#gd-chart");
    chartEl.dataset.points = h.points.length;
    if (lagChart) lagChart();
    lagChart = SF.staticChart(chartEl, `Total lag (last hour, one point per ${h.interval_ms / 1000} s, kept by the broker)`, h.points.map((p) => p.ts_ms / 1000),
      [{ label: "lag", values: h.points.map((p) => p.total_lag) }],
      { time: true, height: 180, xRange: [Date.now() / 1000 - (h.interval_ms * h.points_max) / 1000, Date.now() / 1000] });
  };
  cleanups.push(SF.every(10000, drawLag));
  cleanups.push(SF.every(2000, async () => {
    let g;
    try { g = await SF.api(`/api/groups/${encodeURIComponent(id)}`); } catch (e) {
      if (e.status === 404) { el.querySelector("#gd-offsets").innerHTML = `<div class="empty">Group ${SF.esc(id)} does not exist.</div>`; return; }
      throw e;
    }
    el.querySelector("#gd-sub").innerHTML = `${SF.stateBadge(g.state)} · ${SF.esc(g.protocol_type || "–")}${g.protocol ? " / " + SF.esc(g.protocol) : ""} · generation ${g.generation} · coordinator ${g.coordinator}`;
    const stat = (label, value, id2) => `<div class="stat" data-stat="${id2}"><div class="stat-label">${label}</div><div class="stat-value">${value}</div></div>`;
    el.querySelector("#gd-stats").innerHTML = stat("Total lag", SF.num(g.total_lag), "lag") + stat("Members", g.member_count, "members") +
      stat("Partitions", g.offsets.length, "partitions") + stat("State", SF.esc(g.state), "state");
    offsets = g.offsets;
    const maxLag = Math.max(1, ...g.offsets.map((o) => o.lag || 0));
    const owner = {};
    g.members.forEach((m) => m.assignment.forEach((a) => a.partitions.forEach((p) => { owner[a.topic + "/" + p] = m.client_id || m.member_id; })));
    el.querySelector("#gd-offsets").innerHTML = g.offsets.length === 0 ? `<div class="empty">No committed offsets.</div>` :
      `<table><thead><tr><th>Topic</th><th class="r">Partition</th><th class="r">Committed</th><th class="r">High watermark</th><th class="r">Lag</th><th class="lagbar-col"></th><th>Consumer</th></tr></thead><tbody>
      ${g.offsets.map((o) => `<tr><td><a href="/topics/${encodeURIComponent(o.topic)}" data-link>${SF.esc(o.topic)}</a></td><td class="r">${o.partition}</td>
        <td class="r">${SF.num(o.committed_offset)}</td><td class="r">${o.high_watermark == null ? "–" : SF.num(o.high_watermark)}</td>
        <td class="r lag">${o.lag == null ? "–" : SF.num(o.lag)}</td><td><div class="lagbar"><div style="width:${Math.round(100 * (o.lag || 0) / maxLag)}%"></div></div></td>
        <td class="muted">${SF.esc(owner[o.topic + "/" + o.partition] || "–")}</td></tr>`).join("")}</tbody></table>`;
    el.querySelector("#gd-members").innerHTML = g.members.length === 0 ? `<div class="empty">No active members.</div>` :
      `<table><thead><tr><th>Member</th><th>Client</th><th>Host</th><th>Assignment</th></tr></thead><tbody>
      ${g.members.map((m) => `<tr><td class="mono small">${SF.esc(m.member_id)}${m.group_instance_id ? " " + SF.badge("static: " + m.group_instance_id) : ""}</td><td>${SF.esc(m.client_id)}</td>
        <td>${SF.esc(m.client_host)}</td><td>${m.assignment.map((a) => `${SF.esc(a.topic)}: ${a.partitions.join(", ")}`).join("<br>") || "–"}</td></tr>`).join("")}</tbody></table>`;
  }));
  return () => cleanups.forEach((c) => c());
});
