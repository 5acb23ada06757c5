// view.js: the report page's drawing and interaction (data code is in model.js).
// Everything that came from a snapshot reaches the page through textContent, never innerHTML.
"use strict";
(function () {
  const d = Model.decode(document.getElementById("memsnap-data").textContent);
  const tl = document.getElementById("timeline"), ov = document.getElementById("overview");
  const readout = document.getElementById("readout"), details = document.getElementById("details");
  const full = { t0: d.summary.first_ns, t1: Math.max(d.summary.last_ns, d.summary.first_ns + 1) };
  const st = Object.assign({ t0: full.t0, t1: full.t1, leak: null }, Model.decodeState(location.hash));
  st.t0 = Math.max(full.t0, Math.min(st.t0, full.t1)); // a link may hold any numbers: clamp them
  st.t1 = Math.min(full.t1, Math.max(st.t1, full.t0));
  if (!(st.t1 > st.t0)) { st.t0 = full.t0; st.t1 = full.t1; }

  const text = (el, s) => { el.textContent = s; return el; };
  const add = (parent, tag, s, cls) => { const e = document.createElement(tag); if (s !== undefined) text(e, s); if (cls) e.className = cls; parent.appendChild(e); return e; };

  text(document.getElementById("summary"),
    d.summary.path + " \u2014 pid " + d.summary.pid + " on " + d.summary.host + ", " + d.summary.events + " events" +
    (d.summary.dropped ? " (" + d.summary.dropped + " dropped: history truncated)" : "") +
    "; peak allocated " + Model.formatBytes(d.summary.peak_allocated) + ", reserved " + Model.formatBytes(d.summary.peak_reserved) +
    (d.iterations.length ? "; " + d.iterations.length + " iterations (" + d.summary.iteration_source + ")" : ""));

  const palette = ["#1e88e5", "#43a047", "#fb8c00", "#8e24aa", "#00897b", "#6d4c41", "#3949ab", "#c0ca33", "#d81b60", "#546e7a", "#7cb342", "#5e35b1"];
  function bandColor(k, selected) {
    if (selected) return "#e53935";
    return d.bands.sites[k] && d.bands.sites[k].other ? "#90a4ae" : palette[k % palette.length];
  }
  function selectedBand() { return st.leak === null ? -2 : d.bands.sites.findIndex((b) => b.leak === st.leak); }

  function maxOf(curve) { return curve.hi.reduce((m, v) => Math.max(m, v), 1); }
  const yMax = Math.max(maxOf(d.curves.reserved), maxOf(d.curves.allocated)) * 1.05;

  function plot(canvas, t0, t1, withBands) {
    const ctx = canvas.getContext("2d"), W = canvas.width, H = canvas.height;
    ctx.clearRect(0, 0, W, H);
    const x = (t) => ((t - t0) / (t1 - t0)) * W, y = (v) => H - (v / yMax) * (H - 4);
    if (withBands) d.iterations.forEach((it, i) => {
      ctx.fillStyle = i % 2 ? "#f4f6fb" : "#eaeef7";
      ctx.fillRect(x(it.start_ns), 0, Math.max(1, x(it.end_ns) - x(it.start_ns)), H);
      ctx.fillStyle = "#c62828";
      ctx.fillRect(x(it.peak_ns) - 1, y(it.peak_allocated), 3, 3); // the iteration's peak
    });
    const curves = withBands && d.bands.t.length ? [[d.curves.reserved, "#cfd8dc"]] : [[d.curves.reserved, "#b0bec5"], [d.curves.allocated, "#1e88e5"]];
    for (const [curve, color] of curves) {
      const r = Model.resample(curve, t0, t1, W);
      ctx.fillStyle = color;
      for (let px = 0; px < W; px++) ctx.fillRect(px, y(r.hi[px]), 1, H - y(r.hi[px]));
    }
    if (withBands && d.bands.t.length) { // allocated memory stacked by allocation site
      const cols = Model.bandColumns(d.bands, t0, t1, W);
      for (let px = 0; px < W; px++) {
        const i = cols[px];
        if (i < 0) continue;
        let base = 0;
        for (let k = 0; k < d.bands.bytes.length; k++) {
          const v = d.bands.bytes[k][i];
          if (!v) continue;
          ctx.fillStyle = bandColor(k, k === selectedBand());
          ctx.fillRect(px, y(base + v), 1, y(base) - y(base + v));
          base += v;
        }
      }
    }
    ctx.fillStyle = "#c62828";
    d.oom.forEach((o) => ctx.fillRect(x(o.time_ns), 0, 2, H));
    if (st.leak !== null && d.leaks[st.leak]) { // the selected leak: first and last allocation
      const l = d.leaks[st.leak];
      ctx.fillStyle = "rgba(255, 179, 0, 0.35)";
      ctx.fillRect(x(l.first_ns), 0, Math.max(2, x(l.last_ns) - x(l.first_ns)), H);
    }
  }

  function drawOverview() {
    plot(ov, full.t0, full.t1, false);
    const ctx = ov.getContext("2d"), W = ov.width, H = ov.height;
    const x = (t) => ((t - full.t0) / (full.t1 - full.t0)) * W;
    ctx.strokeStyle = "#37474f";
    ctx.lineWidth = 2;
    ctx.strokeRect(x(st.t0), 1, Math.max(2, x(st.t1) - x(st.t0)), H - 2);
  }

  function axes() { // the scale and the window shown (text made here, never from the snapshot)
    const ctx = tl.getContext("2d");
    ctx.fillStyle = "#37474f";
    ctx.font = "12px sans-serif";
    ctx.fillText(Model.formatBytes(Math.round(yMax)), 4, 14);
    ctx.fillText(Model.formatTime(Math.round(st.t0 - full.t0)), 4, tl.height - 4);
    const end = Model.formatTime(Math.round(st.t1 - full.t0));
    ctx.fillText(end, tl.width - ctx.measureText(end).width - 4, tl.height - 4);
  }

  function redraw() {
    plot(tl, st.t0, st.t1, true);
    axes();
    drawOverview();
    history.replaceState(null, "", Model.encodeState(st));
  }

  function showStack(title, stackId) {
    text(document.getElementById("details-title"), title);
    const frames = Model.stackFrames(d, stackId);
    text(details, frames.length ? frames.map((f) => f.name + (f.file ? "  (" + f.file + (f.line ? ":" + f.line : "") + ")" : "")).join("\n") : "(no stack recorded)");
  }

  const leakList = document.getElementById("leaks"), oomList = document.getElementById("ooms");
  function fillLists(filter) {
    leakList.textContent = "";
    oomList.textContent = "";
    const only = filter ? new Set(Model.search(d, filter).map((h) => h.kind + h.index)) : null;
    d.leaks.forEach((l, i) => {
      if (only && !only.has("leak" + i)) return;
      const top = Model.stackFrames(d, l.stack)[0];
      const li = add(leakList, "li", (l.kind === "growing" ? "growing +" + Model.formatBytes(l.bytes_per_iteration) + "/iteration, " : l.kind + ", ") +
        Model.formatBytes(l.live_bytes) + " in " + l.live_count + " \u2014 " + (top ? top.name : "?"), l.kind + (st.leak === i ? " selected" : ""));
      li.addEventListener("click", () => { st.leak = i; showStack("Leak candidate " + (i + 1), l.stack); fillLists(search.value); redraw(); });
    });
    d.oom.forEach((o, i) => {
      if (only && !only.has("oom" + i)) return;
      const li = add(oomList, "li", Model.formatTime(o.time_ns) + ": " + Model.formatBytes(o.requested) + " requested, " + Model.formatBytes(o.device_free) + " free");
      li.addEventListener("click", () => { showStack("Out of memory " + (i + 1), o.stack); st.t0 = Math.max(full.t0, o.time_ns - (full.t1 - full.t0) / 20); st.t1 = Math.min(full.t1, o.time_ns + (full.t1 - full.t0) / 20); redraw(); });
    });
    document.getElementById("no-ooms").hidden = d.oom.length > 0;
  }
  const search = document.getElementById("search");
  search.addEventListener("input", () => fillLists(search.value));

  const toTime = (canvas, ev, t0, t1) => { const r = canvas.getBoundingClientRect(); return t0 + ((ev.clientX - r.left) / r.width) * (t1 - t0); };
  tl.addEventListener("mousemove", (ev) => {
    if (drag) return;
    const t = toTime(tl, ev, st.t0, st.t1), a = Model.valueAt(d.curves.allocated, t), r = Model.valueAt(d.curves.reserved, t);
    const it = d.iterations.findIndex((x) => t >= x.start_ns && t < x.end_ns);
    let site = "";
    if (d.bands.t.length) { // the band under the cursor: its site, bytes and stack
      const rect = tl.getBoundingClientRect(), px = Math.floor(((ev.clientX - rect.left) / rect.width) * tl.width);
      const i = Model.bandColumns(d.bands, st.t0, st.t1, tl.width)[px];
      const v = ((rect.bottom - ev.clientY) / rect.height) * yMax;
      const k = i >= 0 ? Model.bandAt(d.bands, i, v) : -1;
      if (k >= 0) {
        const b = d.bands.sites[k], top = Model.stackFrames(d, b.stack)[0];
        site = "  site: " + (b.other ? "other sites" : top ? top.name : "?") + " " + Model.formatBytes(d.bands.bytes[k][i]);
        if (!b.other) showStack(b.leak >= 0 ? "Leak candidate " + (b.leak + 1) : "Allocation site", b.stack);
      }
    }
    text(readout, Model.formatTime(Math.max(0, t - full.t0)) + "  allocated " + (a ? Model.formatBytes(a.hi) : "-") + "  reserved " + (r ? Model.formatBytes(r.hi) : "-") + (it >= 0 ? "  iteration " + it : "") + site);
  });
  tl.addEventListener("wheel", (ev) => {
    ev.preventDefault();
    const t = toTime(tl, ev, st.t0, st.t1), k = ev.deltaY > 0 ? 1.25 : 0.8;
    const span = Math.max(1000, (st.t1 - st.t0) * k);
    st.t0 = Math.max(full.t0, t - (t - st.t0) * (span / (st.t1 - st.t0)));
    st.t1 = Math.min(full.t1, st.t0 + span);
    redraw();
  }, { passive: false });
  let drag = null;
  tl.addEventListener("mousedown", (ev) => { drag = { x: ev.clientX, t0: st.t0, t1: st.t1 }; });
  window.addEventListener("mouseup", () => { drag = null; });
  window.addEventListener("mousemove", (ev) => {
    if (!drag) return;
    const dt = ((ev.clientX - drag.x) / tl.getBoundingClientRect().width) * (drag.t1 - drag.t0);
    const span = drag.t1 - drag.t0;
    st.t0 = Math.min(Math.max(full.t0, drag.t0 - dt), full.t1 - span);
    st.t1 = st.t0 + span;
    redraw();
  });
  let brush = null;
  ov.addEventListener("mousedown", (ev) => { brush = toTime(ov, ev, full.t0, full.t1); });
  ov.addEventListener("mouseup", (ev) => {
    if (brush === null) return;
    const t = toTime(ov, ev, full.t0, full.t1);
    if (Math.abs(t - brush) > (full.t1 - full.t0) / 1000) { st.t0 = Math.min(brush, t); st.t1 = Math.max(brush, t); redraw(); }
    brush = null;
  });

  fillLists("");
  if (st.leak !== null && d.leaks[st.leak]) showStack("Leak candidate " + (st.leak + 1), d.leaks[st.leak].stack);
  else if (d.leaks.length) showStack("Leak candidate 1", d.leaks[0].stack);
  redraw();
})();
