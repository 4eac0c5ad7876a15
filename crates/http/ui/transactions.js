// The transactions page: the transaction coordinator's transactional ids with state, producer
// id and epoch, the partitions of the open transaction, timeout, start and age; an open one
// can be aborted (the coordinator aborts it as its timeout would, fencing the producer).
"use strict";

const TXN_STATE_KIND = { Ongoing: "warn", PrepareCommit: "warn", PrepareAbort: "warn", PrepareEpochFence: "warn", CompleteCommit: "ok", CompleteAbort: "neutral", Empty: "neutral", Dead: "bad" };

SF.abortTransactionDialog = (t, done) => {
  const enc = encodeURIComponent;
  SF.modal(`
    <h2>Abort the transaction of <code>${SF.esc(t.transactional_id)}</code></h2>
    <p class="warn-text">Its records on ${SF.num(t.partitions.reduce((n, tp) => n + tp.partitions.length, 0))} partition(s) are aborted and the producer
      (id ${t.producer_id}, epoch ${t.producer_epoch}) is fenced: its next request fails with PRODUCER_FENCED, as after a timeout.</p>
    <label class="check"><input type="checkbox" name="confirm" required> I want to abort this transaction</label>
    <div class="modal-actions"><button class="btn" data-cancel>Cancel</button><button class="btn btn-danger" type="submit">Abort transaction</button></div>`,
  async () => {
    const r = await SF.api(`/api/transactions/${enc(t.transactional_id)}/abort`, { method: "POST", body: "{}" });
    SF.banner(`The transaction of ${t.transactional_id} is aborted (state ${r.state}, producer epoch now ${r.producer_epoch}).`, "ok");
    done && done();
  });
};

SF.route(/^\/transactions$/, "transactions", (params, el, query) => {
  el.innerHTML = `<header class="page-head"><div><h1>Transactions</h1><div class="sub" id="tx-sub">&nbsp;</div></div></header>
    <section class="card">
      <div class="toolbar">
        <input id="tx-search" type="search" placeholder="Search transactional id or topic" value="${SF.esc(query.get("q") || "")}">
        <label class="check"><input type="checkbox" id="tx-all"> Show completed and idle ids</label>
      </div>
      <div id="tx-table"></div>
    </section>`;
  const search = el.querySelector("#tx-search");
  const all = el.querySelector("#tx-all");
  let latest = [];
  const partitionsText = (t) => t.partitions.map((tp) => tp.partitions.map((p) => `${tp.topic}-${p}`).join(", ")).join(", ");
  const draw = () => {
    const q = search.value.trim().toLowerCase();
    const rows = latest.filter((t) => (all.checked || t.open) &&
      (!q || t.transactional_id.toLowerCase().includes(q) || t.partitions.some((tp) => tp.topic.toLowerCase().includes(q))));
    const open = latest.filter((t) => t.open).length;
    el.querySelector("#tx-sub").textContent = `${SF.num(open)} open · ${SF.num(latest.length)} transactional id(s) known to the coordinator`;
    el.querySelector("#tx-table").innerHTML = rows.length === 0
      ? `<div class="empty" id="tx-empty">${latest.length === 0 ? "No transactional producer has used this broker yet." : all.checked ? "No transactional id matches." : "No open transactions."}</div>`
      : `<table class="transactions"><thead><tr><th>Transactional id</th><th>State</th><th class="r">Producer id</th><th class="r">Epoch</th>
        <th>Partitions</th><th class="r">Timeout</th><th>Started</th><th class="r">Age</th><th></th></tr></thead><tbody>
        ${rows.map((t) => {
          const overdue = t.timeout_left_ms != null && t.timeout_left_ms < 0;
          return `<tr data-txn="${SF.esc(t.transactional_id)}"${overdue ? ` class="row-warn"` : ""}>
          <td class="mono">${SF.esc(t.transactional_id)}</td>
          <td data-state>${SF.badge(t.state, TXN_STATE_KIND[t.state])}</td>
          <td class="r mono" data-producer-id>${t.producer_id}</td><td class="r" data-epoch>${t.producer_epoch}</td>
          <td class="mono" data-partitions>${SF.esc(partitionsText(t)) || "–"}</td>
          <td class="r" data-timeout>${SF.esc(SF.durationText(t.timeout_ms))}</td>
          <td data-start>${t.open ? SF.esc(SF.time(t.start_ms)) : "–"}</td>
          <td class="r" data-age title="${t.timeout_left_ms == null ? "" : overdue ? "past its timeout: the coordinator aborts it" : `aborted by the coordinator in ${SF.duration(t.timeout_left_ms)}`}">${t.age_ms == null ? "–" : SF.duration(t.age_ms)}</td>
          <td>${t.state === "Ongoing" ? `<button class="btn btn-danger btn-small" data-abort="${SF.esc(t.transactional_id)}">Abort</button>` : ""}</td></tr>`;
        }).join("")}</tbody></table>`;
    el.querySelectorAll("[data-abort]").forEach((b) => b.addEventListener("click", () => {
      const t = latest.find((x) => x.transactional_id === b.dataset.abort);
      if (t) SF.abortTransactionDialog(t, refresh);
    }));
  };
  const refresh = async () => {
    latest = await SF.api("/api/transactions");
    draw();
  };
  search.addEventListener("input", draw);
  all.addEventListener("change", draw);
  return SF.every(2000, refresh);
});
