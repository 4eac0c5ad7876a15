// The message browser across every partition of a topic: filters on key, value, header and
// time, JSON pretty-printing in the details, and a download of what is shown.
"use strict";

SF.downloadJson = (filename, data) => {
  const blob = new Blob([JSON.stringify(data, null, 2)], { type: "application/json" });
  const a = document.createElement("a");
  a.href = URL.createObjectURL(blob);
  a.download = filename;
  document.body.appendChild(a);
  a.click();
  setTimeout(() => { URL.revokeObjectURL(a.href); a.remove(); }, 1000);
};

SF.route(/^\/messages$/, "messages", (params, el, query) => {
  el.innerHTML = `<header class="page-head"><div><h1>Messages</h1><div class="sub">Search a topic across all its partitions by key, value, header and time.</div></div></header>
    <section class="card"><form class="toolbar" id="mp-form">
      <label>Topic<select name="topic"></select></label>
      <label>Partition<select name="partition"></select></label>
      <label>From<select name="from"><option value="earliest">earliest</option><option value="latest">latest</option><option value="time">a time</option></select></label>
      <label class="mp-time hidden">Start (UTC)<input name="start" type="datetime-local" step="1"></label>
      <label>Until (UTC)<input name="until" type="datetime-local" step="1"></label>
      <label>Key contains<input name="key" autocomplete="off"></label>
      <label>Value contains<input name="value" autocomplete="off"></label>
      <label>Header (name or name=value)<input name="header" autocomplete="off"></label>
      <label>Limit<input name="limit" type="number" min="1" max="500" value="100"></label>
      <label>Show as<select name="format"><option value="auto">auto</option><option value="text">text</option><option value="hex">hex</option></select></label>
      <button class="btn btn-primary" type="submit">Search</button>
      <button class="btn" type="button" id="mp-download" disabled>Download JSON</button>
    </form></section>
    <section class="card" id="mp-browser"><div id="mp-info" class="muted">Pick a topic and search.</div><div id="mp-table"></div></section>`;
  const form = el.querySelector("#mp-form");
  let topics = [];
  let shown = null;
  const fillPartitions = () => {
    const t = topics.find((x) => x.name === form.topic.value);
    form.partition.innerHTML = `<option value="">all</option>` + (t ? t.partitions.map((p) => `<option>${p.partition}</option>`).join("") : "");
  };
  form.from.addEventListener("change", () => el.querySelector(".mp-time").classList.toggle("hidden", form.from.value !== "time"));
  SF.api("/api/topics").then((list) => {
    topics = list;
    form.topic.innerHTML = list.map((t) => `<option>${SF.esc(t.name)}</option>`).join("");
    if (query.get("topic")) form.topic.value = query.get("topic");
    fillPartitions();
  }).catch((e) => SF.banner(e.message));
  form.topic.addEventListener("change", fillPartitions);
  const search = async () => {
    if (!form.topic.value) throw new Error("Pick a topic.");
    const qs = new URLSearchParams({ limit: form.limit.value, format: form.format.value });
    if (form.from.value === "time") {
      if (!form.start.value) throw new Error("Pick a start time.");
      qs.set("timestamp", String(Date.parse(form.start.value + "Z")));
    } else qs.set("from", form.from.value);
    if (form.until.value) qs.set("until", String(Date.parse(form.until.value + "Z")));
    for (const f of ["key", "value", "header", "partition"]) if (form[f].value.trim()) qs.set(f, form[f].value.trim());
    const r = await SF.api(`/api/topics/${encodeURIComponent(form.topic.value)}/messages?${qs}`);
    shown = r;
    el.querySelector("#mp-download").disabled = r.messages.length === 0;
    el.querySelector("#mp-info").textContent = `${SF.num(r.messages.length)} message(s) found · ${SF.num(r.scanned_messages)} examined (${SF.bytes(r.scanned_bytes)})` +
      (r.scan_limited ? " · the search stopped at its per-request bound; narrow it with a time range or a partition" : "");
    SF.messagesTable(el.querySelector("#mp-table"), r.messages);
  };
  form.addEventListener("submit", (e) => { e.preventDefault(); search().catch((err) => SF.banner(err.message)); });
  el.querySelector("#mp-download").addEventListener("click", () => {
    if (shown) SF.downloadJson(`${shown.topic}-messages.json`, shown.messages);
  });
});
