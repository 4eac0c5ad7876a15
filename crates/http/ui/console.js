// Console actions: dialogs that change topics and groups. Every action goes to the broker,
// which checks it like the Kafka request; a refusal shows Kafka's error name and message.
"use strict";

const enc = encodeURIComponent;
const confirmBox = (text) => `<label class="check"><input type="checkbox" name="confirm" required> ${text}</label>`;
const actions = (label, kind = "primary") =>
  `<div class="modal-actions"><button class="btn" data-cancel>Cancel</button><button class="btn btn-${kind}" type="submit">${label}</button></div>`;

// ---------- topics ----------
SF.editConfigDialog = (topic, configs, preset, done) => {
  const options = configs.map((c) => `<option value="${SF.esc(c.name)}">${SF.esc(c.name)}</option>`).join("");
  SF.modal(`
    <h2>Edit config of <code>${SF.esc(topic)}</code></h2>
    <label>Config<select name="name">${options}</select></label>
    <label>Value<input name="value" autocomplete="off"></label>
    <div class="muted" id="cfg-hint">&nbsp;</div>
    <label class="check"><input type="checkbox" name="reset"> Remove the override (back to the broker default)</label>
    ${actions("Save")}`,
  async (form) => {
    const change = { name: form.name.value, value: form.reset.checked ? null : form.value.value.trim() };
    await SF.api(`/api/topics/${enc(topic)}/configs`, { method: "PATCH", body: JSON.stringify({ configs: [change] }) });
    SF.banner(`${change.name} of ${topic} ${change.value == null ? "reset to its default" : "set to " + change.value}.`, "ok");
    done && done();
  });
  const form = document.querySelector("#modal-box form");
  const show = () => {
    const c = configs.find((x) => x.name === form.name.value);
    form.value.value = c && c.value != null ? c.value : "";
    const human = c && SF.configHuman(c.name, c.value);
    form.querySelector("#cfg-hint").textContent = c ? `now ${c.value}${human ? " (" + human + ")" : ""} · ${c.is_default ? "broker default" : "set on this topic"}` : "";
  };
  if (preset) form.name.value = preset;
  form.name.addEventListener("change", show);
  form.value.addEventListener("input", () => {
    const human = SF.configHuman(form.name.value, form.value.value.trim());
    form.querySelector("#cfg-hint").textContent = human ? `= ${human}` : "\u00a0";
  });
  show();
  form.value.focus();
};

SF.addPartitionsDialog = (topic, current, done) => {
  SF.modal(`
    <h2>Add partitions to <code>${SF.esc(topic)}</code></h2>
    <p class="muted">It has ${current}. Partitions cannot be removed again, and keyed messages may map to other partitions afterwards.</p>
    <label>New total number of partitions<input name="count" type="number" value="${current + 1}" required></label>
    ${confirmBox("I want to add partitions")}
    ${actions("Add partitions")}`,
  async (form) => {
    const count = Number(form.count.value);
    await SF.api(`/api/topics/${enc(topic)}/partitions`, { method: "POST", body: JSON.stringify({ count }) });
    SF.banner(`${topic} now has ${count} partitions.`, "ok");
    done && done();
  });
};

SF.deleteRecordsDialog = (topic, partition, highWatermark, done) => {
  SF.modal(`
    <h2>Delete records of <code>${SF.esc(topic)}</code> partition ${partition}</h2>
    <p class="warn-text">Every record below the offset is deleted; consumers that have not read them lose them.</p>
    <label>Delete records before offset (high watermark: ${SF.num(highWatermark)})<input name="before" type="number" value="${highWatermark}" required></label>
    ${confirmBox("I want to delete these records")}
    ${actions("Delete records", "danger")}`,
  async (form) => {
    const r = await SF.api(`/api/topics/${enc(topic)}/partitions/${partition}/delete-records`, {
      method: "POST", body: JSON.stringify({ before_offset: Number(form.before.value) }),
    });
    SF.banner(`Records of ${topic}-${partition} before ${form.before.value} deleted; the log now starts at ${r.low_watermark}.`, "ok");
    done && done();
  });
};

// Headers as lines of `name=value` (a line without "=" is a header with a null value).
const parseHeaders = (text) => text.split("\n").map((l) => l.trim()).filter(Boolean).map((line) => {
  const i = line.indexOf("=");
  return i < 0 ? { key: line, value: null } : { key: line.slice(0, i).trim(), value: line.slice(i + 1) };
});

SF.produceDialog = (topic, partitions, done) => {
  SF.modal(`
    <h2>Produce a message to <code>${SF.esc(topic)}</code></h2>
    <label>Partition<select name="partition"><option value="">by key (Kafka's default partitioner)</option>
      ${partitions.map((p) => `<option value="${p}">${p}</option>`).join("")}</select></label>
    <label>Key (empty = null)<input name="key" autocomplete="off"></label>
    <label>Value<textarea name="value" rows="5" placeholder='{"id": 1}'></textarea></label>
    <label>Headers (one <code>name=value</code> per line)<textarea name="headers" rows="3"></textarea></label>
    ${actions("Produce")}`,
  async (form) => {
    const body = {
      partition: form.partition.value === "" ? null : Number(form.partition.value),
      key: form.key.value === "" ? null : form.key.value,
      value: form.value.value,
      headers: parseHeaders(form.headers.value),
    };
    const r = await SF.api(`/api/topics/${enc(topic)}/messages`, { method: "POST", body: JSON.stringify(body) });
    SF.banner(`Produced to ${topic} partition ${r.partition} at offset ${r.offset}.`, "ok");
    done && done(r);
  }, true);
};

// A topic's consumer groups and their lag (topic page).
SF.topicConsumers = async (el, topic) => {
  const list = await SF.api(`/api/topics/${enc(topic)}/consumers`);
  el.innerHTML = list.length === 0 ? `<div class="empty">No consumer group has offsets on this topic.</div>` :
    `<table><thead><tr><th>Group</th><th>State</th><th class="r">Members</th><th class="r">Lag</th><th>Per partition (committed / lag)</th></tr></thead><tbody>
    ${list.map((g) => `<tr data-consumer="${SF.esc(g.group_id)}"><td><a href="/groups/${enc(g.group_id)}" data-link>${SF.esc(g.group_id)}</a></td><td>${SF.stateBadge(g.state)}</td>
      <td class="r">${g.member_count}</td><td class="r lag">${SF.num(g.lag)}</td>
      <td class="small">${g.partitions.map((p) => `${p.partition}: ${SF.num(p.committed_offset)} / ${p.lag == null ? "–" : SF.num(p.lag)}`).join(" · ") || "–"}</td></tr>`).join("")}</tbody></table>`;
};

// ---------- groups ----------
const topicOptions = (offsets) => [...new Set(offsets.map((o) => o.topic))].map((t) => `<option>${SF.esc(t)}</option>`).join("");
const partitionPicker = (form, offsets) => {
  const fill = () => {
    const ps = offsets.filter((o) => o.topic === form.topic.value).map((o) => o.partition);
    form.partition.innerHTML = `<option value="">all partitions</option>` + ps.map((p) => `<option>${p}</option>`).join("");
  };
  form.topic.addEventListener("change", fill);
  fill();
};

SF.resetOffsetsDialog = (group, offsets, done) => {
  SF.modal(`
    <h2>Reset offsets of <code>${SF.esc(group)}</code></h2>
    <p class="muted">Only while the group has no active members (stop its consumers first), as with <code>kafka-consumer-groups --reset-offsets</code>.</p>
    <div class="row"><label>Topic<select name="topic">${topicOptions(offsets)}</select></label>
    <label>Partition<select name="partition"></select></label></div>
    <div class="row"><label>To<select name="to"><option value="earliest">earliest</option><option value="latest">latest</option>
      <option value="offset">offset</option><option value="timestamp">date and time</option></select></label>
    <label class="rs-offset hidden">Offset<input name="offset" type="number" min="0" value="0"></label>
    <label class="rs-time hidden">Time (UTC)<input name="time" type="datetime-local" step="1"></label></div>
    ${confirmBox("I want to move this group's offsets")}
    ${actions("Reset offsets")}`,
  async (form) => {
    const body = { topic: form.topic.value, partitions: form.partition.value === "" ? [] : [Number(form.partition.value)], to: form.to.value };
    if (form.to.value === "offset") body.value = Number(form.offset.value);
    if (form.to.value === "timestamp") {
      if (!form.time.value) throw new Error("Pick a date and time.");
      body.value = Date.parse(form.time.value + "Z");
    }
    const r = await SF.api(`/api/groups/${enc(group)}/reset-offsets`, { method: "POST", body: JSON.stringify(body) });
    SF.banner(`Offsets of ${group} reset: ${r.offsets.map((o) => `${o.topic}-${o.partition} → ${o.offset}`).join(", ")}.`, "ok");
    done && done();
  });
  const form = document.querySelector("#modal-box form");
  partitionPicker(form, offsets);
  const sync = () => {
    form.querySelector(".rs-offset").classList.toggle("hidden", form.to.value !== "offset");
    form.querySelector(".rs-time").classList.toggle("hidden", form.to.value !== "timestamp");
  };
  form.to.addEventListener("change", sync);
  sync();
};

SF.deleteOffsetsDialog = (group, offsets, done) => {
  SF.modal(`
    <h2>Delete committed offsets of <code>${SF.esc(group)}</code></h2>
    <p class="muted">The group starts that topic again from its <code>auto.offset.reset</code> position. Kafka refuses this while the group consumes the topic.</p>
    <div class="row"><label>Topic<select name="topic">${topicOptions(offsets)}</select></label>
    <label>Partition<select name="partition"></select></label></div>
    ${confirmBox("I want to delete these offsets")}
    ${actions("Delete offsets", "danger")}`,
  async (form) => {
    const body = { topic: form.topic.value, partitions: form.partition.value === "" ? [] : [Number(form.partition.value)] };
    await SF.api(`/api/groups/${enc(group)}/offsets`, { method: "DELETE", body: JSON.stringify(body) });
    SF.banner(`Offsets of ${group} on ${body.topic} deleted.`, "ok");
    done && done();
  });
  partitionPicker(document.querySelector("#modal-box form"), offsets);
};

SF.deleteGroupDialog = (group, done) => {
  SF.modal(`
    <h2>Delete group <code>${SF.esc(group)}</code>?</h2>
    <p class="warn-text">Its committed offsets are deleted. Kafka refuses this while the group has members.</p>
    <label>Type the group id to confirm<input name="confirm" required autocomplete="off"></label>
    ${actions("Delete group", "danger")}`,
  async (form) => {
    if (form.confirm.value !== group) throw new Error("The group id does not match.");
    await SF.api(`/api/groups/${enc(group)}?confirm=${enc(group)}`, { method: "DELETE" });
    SF.banner(`Group ${group} deleted.`, "ok");
    done && done();
  });
};

// ---------- lists: search, filter and sort ----------
// state: {q, filter, sort, desc}; columns: {key: (row) => value}. Returns the rows to show.
SF.listState = {};
SF.applyList = (id, rows, columns, textOf, filterOf) => {
  const st = SF.listState[id] || (SF.listState[id] = { q: "", filter: "", sort: null, desc: false });
  const q = st.q.trim().toLowerCase();
  let out = rows.filter((r) => (!q || textOf(r).toLowerCase().includes(q)) && (!st.filter || filterOf(r, st.filter)));
  if (st.sort && columns[st.sort]) {
    const key = columns[st.sort];
    out = [...out].sort((a, b) => {
      const x = key(a), y = key(b);
      const c = typeof x === "number" && typeof y === "number" ? x - y : String(x).localeCompare(String(y));
      return st.desc ? -c : c;
    });
  }
  return out;
};
// Header cells that sort on click; `cls` adds classes (e.g. "r").
SF.sortHead = (id, key, label, cls = "") => {
  const st = SF.listState[id] || {};
  const arrow = st.sort === key ? (st.desc ? " ▼" : " ▲") : "";
  return `<th class="sortable ${cls}" data-sort="${key}" data-list="${id}">${label}${arrow}</th>`;
};
SF.bindSort = (el, id, redraw) => {
  el.querySelectorAll(`th[data-list="${id}"]`).forEach((th) => th.addEventListener("click", () => {
    const st = SF.listState[id];
    if (st.sort === th.dataset.sort) st.desc = !st.desc; else { st.sort = th.dataset.sort; st.desc = false; }
    redraw();
  }));
};
// A search box and a filter select above a list; `redraw` runs on every change.
SF.listToolbar = (el, id, placeholder, filters, redraw) => {
  const st = SF.listState[id] || (SF.listState[id] = { q: "", filter: "", sort: null, desc: false });
  el.innerHTML = `<div class="toolbar list-toolbar"><input type="search" name="q" placeholder="${SF.esc(placeholder)}" value="${SF.esc(st.q)}" data-search="${id}">
    <select name="filter" data-filter="${id}">${filters.map(([v, label]) => `<option value="${v}" ${v === st.filter ? "selected" : ""}>${SF.esc(label)}</option>`).join("")}</select>
    <span class="muted" data-count="${id}"></span></div>`;
  el.querySelector("input").addEventListener("input", (e) => { st.q = e.target.value; redraw(); });
  el.querySelector("select").addEventListener("change", (e) => { st.filter = e.target.value; redraw(); });
};
SF.listCount = (id, shown, total) => {
  const c = document.querySelector(`[data-count="${id}"]`);
  if (c) c.textContent = shown === total ? `${total}` : `${shown} of ${total}`;
};
