// Benchmark page: start a run with chosen parameters, follow it live, see results and history.
"use strict";

SF.route(/^\/bench(?:\/(\d+))?$/, "bench", ([selected], el) => {
  el.innerHTML = `<header class="page-head"><div><h1>Benchmarks</h1><div class="sub">Produce and consume against this broker and measure throughput and latency.</div></div></header>
    <section class="grid-bench">
      <div class="card"><div class="card-title">New run</div>
        <form id="bn-form" class="stack">
          <div class="row"><label>Messages<input name="messages" type="number" min="1" value="100000" required></label>
          <label>Partitions<input name="partitions" type="number" min="1" max="1000" value="3" required></label></div>
          <div class="row"><label>Batch size (messages)<input name="batch_size" type="number" min="1" value="1000" required></label>
          <label>Message size (bytes)<input name="message_size" type="number" min="8" value="100" required></label></div>
          <label>Acks<select name="acks"><option value="1">1 (leader)</option><option value="all">all</option><option value="0">0 (none)</option></select></label>
          <button class="btn btn-primary" type="submit" id="bn-start">Start benchmark</button>
          <div id="bn-unavailable" class="muted hidden">This broker was started without a benchmark runner.</div>
        </form></div>
      <div class="card" id="bn-current"><div class="card-title">Run</div><div class="empty">Start a run, or pick one from the history.</div></div>
    </section>
    <section class="card"><div class="card-title">History</div><div id="bn-history"></div></section>`;
  const form = el.querySelector("#bn-form");
  let shownId = selected ? Number(selected) : null;
  let cleanupCharts = [];
  let lastRendered = null;

  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    const body = {
      messages: Number(form.messages.value), partitions: Number(form.partitions.value),
      batch_size: Number(form.batch_size.value), message_size: Number(form.message_size.value), acks: form.acks.value,
    };
    try {
      const { id } = await SF.api("/api/bench", { method: "POST", body: JSON.stringify(body) });
      shownId = id;
      history.replaceState({}, "", `/bench/${id}`);
      await refresh();
    } catch (err) { SF.banner(err.message); }
  });

  const paramsText = (p) => `${SF.num(p.messages)} msgs · ${p.partitions} partitions · batch ${SF.num(p.batch_size)} · ${SF.bytes(p.message_size)} · acks=${p.acks === -1 ? "all" : p.acks}`;
  const statusBadge = (s) => SF.badge(s, { running: "warn", succeeded: "ok", failed: "bad" }[s]);

  const renderRun = (run) => {
    const box = el.querySelector("#bn-current");
    const key = JSON.stringify([run.id, run.status, run.progress.messages_done, run.progress.phase]);
    if (key === lastRendered) return;
    lastRendered = key;
    cleanupCharts.forEach((c) => c());
    cleanupCharts = [];
    const p = run.progress;
    const pct = p.messages_total ? Math.min(100, (100 * p.messages_done) / p.messages_total) : 0;
    box.innerHTML = `<div class="card-title">Run #${run.id} ${statusBadge(run.status)}<span class="spacer"></span><span class="muted">${SF.esc(SF.time(run.started_at_ms))}</span></div>
      <div class="muted">${paramsText(run.params)}</div>
      ${run.status === "running" ? `<div class="progress"><div class="progress-bar" style="width:${pct.toFixed(1)}%"></div></div>
        <div class="muted" id="bn-progress">${SF.esc(p.phase)}: ${SF.num(p.messages_done)} / ${SF.num(p.messages_total)} messages · ${SF.bytes(p.bytes_done)} · ${(p.elapsed_ms / 1000).toFixed(1)} s</div>` : ""}
      ${run.error ? `<div class="banner banner-error">${SF.esc(run.error)}</div>` : ""}
      <div class="chart" id="bn-progress-chart"></div>
      ${run.report ? `<div class="grid2"><div><div class="card-title">Results</div><table class="results"><tbody>
        ${run.report.rows.map((r) => `<tr><td>${SF.esc(r.metric)}</td><td class="r mono">${SF.num(r.value, r.value < 100 ? 2 : 0)}</td><td class="muted">${SF.esc(r.unit)}</td></tr>`).join("")}
        </tbody></table></div><div class="chart" id="bn-latency"></div></div>
        <details><summary>Full result</summary><pre>${SF.esc(JSON.stringify(run.report.details, null, 2))}</pre></details>` : ""}`;
    const series = run.progress_series || [];
    if (series.length > 1) {
      // Rate between consecutive samples of the same phase; a new phase counts from zero.
      const xs = series.map((s) => s.t_ms / 1000);
      const rates = series.map((s, i) => {
        const prev = i > 0 ? series[i - 1] : null;
        const base = prev && prev.phase === s.phase ? prev.messages_done : 0;
        const dt = prev ? Math.max(0.05, (s.t_ms - prev.t_ms) / 1000) : Math.max(0.05, s.t_ms / 1000);
        return Math.max(0, s.messages_done - base) / dt;
      });
      cleanupCharts.push(SF.staticChart(box.querySelector("#bn-progress-chart"), "Progress (messages per second, all phases)", xs,
        [{ label: "msg/s", values: rates }], { xLabel: "seconds since start", height: 180 }));
    }
    if (run.report && run.report.latency_percentiles.length > 0) {
      const lp = run.report.latency_percentiles;
      cleanupCharts.push(SF.staticChart(box.querySelector("#bn-latency"), "Latency by percentile (ms)", lp.map((_, i) => i),
        [{ label: "ms", values: lp.map((x) => x.latency_ms) }],
        { xLabel: "percentile", fmt: (v) => SF.num(v, 2), height: 200, xValues: (u, vals) => vals.map((v) => (lp[v] ? "p" + lp[v].percentile : "")) }));
    }
  };

  const refresh = async () => {
    const list = await SF.api("/api/bench");
    el.querySelector("#bn-start").disabled = !list.available || list.runs.some((r) => r.status === "running");
    el.querySelector("#bn-unavailable").classList.toggle("hidden", list.available);
    const hist = el.querySelector("#bn-history");
    hist.innerHTML = list.runs.length === 0 ? `<div class="empty">No runs yet.</div>` :
      `<table><thead><tr><th class="r">#</th><th>Started</th><th>Parameters</th><th>Status</th><th>Headline</th><th class="r">Duration</th></tr></thead><tbody>
      ${list.runs.map((r) => `<tr class="clickable ${r.id === shownId ? "selected" : ""}" data-run="${r.id}"><td class="r">${r.id}</td><td class="nowrap">${SF.esc(SF.time(r.started_at_ms))}</td>
        <td>${paramsText(r.params)}</td><td>${statusBadge(r.status)}</td>
        <td>${r.report && r.report.rows[0] ? `${SF.esc(r.report.rows[0].metric)}: <b>${SF.num(r.report.rows[0].value)}</b> ${SF.esc(r.report.rows[0].unit)}` : SF.esc(r.error || "")}</td>
        <td class="r">${r.finished_at_ms ? SF.duration(r.finished_at_ms - r.started_at_ms) : "…"}</td></tr>`).join("")}</tbody></table>`;
    hist.querySelectorAll("[data-run]").forEach((tr) => tr.addEventListener("click", () => {
      shownId = Number(tr.dataset.run);
      history.replaceState({}, "", `/bench/${shownId}`);
      refresh();
    }));
    if (shownId == null && list.runs.length > 0) shownId = list.runs[0].id;
    const run = list.runs.find((r) => r.id === shownId);
    if (run) renderRun(run);
  };

  const stop = SF.every(700, refresh);
  return () => { stop(); cleanupCharts.forEach((c) => c()); };
});
