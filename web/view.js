// view.js: the report page's drawing and interaction (data code is in model.js).
// Everything that came from a snapshot reaches the page through textContent or canvas text,
// never innerHTML. One time cursor links the views: the timeline draws it, the allocator state
// and the flame graph show the checkpoint nearest to it. A page of several documents (snapshots,
// or the devices of one) shows one at a time: the selector in the header starts the views anew
// on another (showDocument), dropping the listeners of the one before (an AbortSignal).
"use strict";

// Memory curves (model.js's buckets of lowest and highest value) as filled columns, one a pixel,
// each [curve, colour] over those before it: between times t0 and t1, or on an event axis
// (Model.eventEdges), on a scale whose top is `top` bytes. The report's timeline and overview draw
// with it, and each timeline of a prediction's page (predict.js).
function fillCurves(canvas, curves, t0, t1, top, axis) {
  const ctx = canvas.getContext("2d"), W = canvas.width, H = canvas.height, y = (v) => H - (v / top) * (H - 4);
  for (const [curve, color] of curves) {
    const r = axis ? Model.resampleEdges(curve, axis) : Model.resample(curve, t0, t1, W);
    ctx.fillStyle = color;
    for (let px = 0; px < W; px++) ctx.fillRect(px, y(r.hi[px]), 1, H - y(r.hi[px]));
  }
}

// Tick labels on a timeline's axes (text made here, never from a snapshot): bytes at quarters of
// the scale `top`, and along the bottom tickLabel(k, px) at k = 0..6 (sevenths of the width; px the
// pixel column), each on a light backing so that it reads over the curves.
function timelineAxes(canvas, top, tickLabel) {
  const ctx = canvas.getContext("2d"), W = canvas.width, H = canvas.height;
  ctx.font = "11px sans-serif";
  const label = (s, x, y) => {
    const w = ctx.measureText(s).width;
    ctx.fillStyle = "rgba(255, 255, 255, 0.75)";
    ctx.fillRect(x - 2, y - 11, w + 4, 14);
    ctx.fillStyle = "#37474f";
    ctx.fillText(s, x, y);
  };
  for (let k = 1; k <= 4; k++) { // bytes: quarters of the scale
    const v = (top * k) / 4.2, yy = H - (v / top) * (H - 4);
    ctx.fillStyle = "rgba(55, 71, 79, 0.35)";
    ctx.fillRect(0, yy, 8, 1);
    label(Model.formatBytes(Math.round(v)), 10, yy + 4);
  }
  for (let k = 0; k <= 6; k++) { // time: sevenths of the window
    const xx = (k / 6) * W, s = tickLabel(k, Math.min(W - 1, Math.round(xx))), w = ctx.measureText(s).width;
    ctx.fillStyle = "rgba(55, 71, 79, 0.35)";
    ctx.fillRect(Math.min(W - 1, xx), H - 6, 1, 6);
    label(s, Math.max(2, Math.min(W - w - 2, xx - w / 2)), H - 8);
  }
}

// Shows document d (the `src`-th of the page) in every view; its listeners end with `signal`.
function showDocument(d, signal, src) {
  const $ = (id) => document.getElementById(id);
  const on = (el, type, fn, opts) => el.addEventListener(type, fn, Object.assign({ signal }, opts));
  const tl = $("timeline"), ov = $("overview"), segCanvas = $("segments"), flame = $("flame"), growthCanvas = $("growth");
  const stepper = d.steps ? Model.stepper(d) : null; // the allocator state at any event (arrow keys)
  const readout = $("readout"), details = $("details");
  const full = { t0: d.summary.first_ns, t1: Math.max(d.summary.last_ns, d.summary.first_ns + 1) };
  const st = Object.assign({ t0: full.t0, t1: full.t1, leak: null, cur: d.summary.peak_allocated_ns, pin: null }, Model.decodeState(location.hash));
  st.t0 = Math.max(full.t0, Math.min(st.t0, full.t1)); // a link may hold any numbers: clamp them
  st.t1 = Math.min(full.t1, Math.max(st.t1, full.t0));
  if (!(st.t1 > st.t0)) { st.t0 = full.t0; st.t1 = full.t1; }
  if (st.leak !== null && !d.candidates[st.leak]) st.leak = null;
  if (st.pin !== null && !(st.pin >= 0 && st.pin < d.detail.alloc.length)) st.pin = null;
  st.cur = Math.max(full.t0, Math.min(st.cur || full.t0, full.t1));
  st.step = null; // the event the allocator state shows (arrow keys, clicks); null: the nearest checkpoint
  st.src = src ? src : null;
  st.all = st.all === 1 ? 1 : null; // whole stacks: irrelevant frames shown
  st.temporal = false;
  const spanIx = Model.spanIndex(d); // each segment's life: the segment timeline
  const retries = d.retries || []; // requests the allocator released its cache for (documents before them have none)

  const text = (el, s) => { el.textContent = s; return el; };
  const add = (parent, tag, s, cls) => { const e = document.createElement(tag); if (s !== undefined) text(e, s); if (cls) e.className = cls; parent.appendChild(e); return e; };
  const rel = (t) => Model.formatTime(Math.max(0, Math.round(t - full.t0))); // times shown from the start

  text($("summary"),
    d.summary.path + " \u2014 pid " + (d.summary.pid == null ? "unknown" : d.summary.pid) + " on " + (d.summary.host || "unknown host") +
    ", " + d.summary.events + " events" +
    (d.summary.dropped_events ? " (" + d.summary.dropped_events + " dropped: history truncated)" : "") +
    "; peak allocated " + Model.formatBytes(d.summary.peak_allocated_bytes) + ", reserved " + Model.formatBytes(d.summary.peak_reserved_bytes) +
    (d.iterations.length ? "; " + d.iterations.length + " iterations (" + d.summary.iteration_source + ")" : "") +
    "; " + d.detail.alloc.length + " of " + d.detail.allocations + " allocations listed one by one" +
    (d.detail.min_size ? " (those of " + Model.formatBytes(d.detail.min_size) + " or more)" : ""));

  // how the process died, when this snapshot was written from its live mapping afterwards
  const death = $("death");
  death.hidden = !d.summary.death;
  const exited = d.summary.death && d.summary.death.exit_status !== null && d.summary.death.signal === null; // ended without its snapshot
  text(death, d.summary.death ? (exited ? "ended: " : "died: ") + d.summary.death.description + " (this snapshot was written from its live mapping afterwards)" : "");

  const palette = ["#1e88e5", "#43a047", "#fb8c00", "#8e24aa", "#00897b", "#6d4c41", "#3949ab", "#c0ca33", "#d81b60", "#546e7a", "#7cb342", "#5e35b1"];
  function bandColor(k, selected) {
    if (selected) return "#e53935";
    return d.bands.sites[k] && d.bands.sites[k].other ? "#90a4ae" : palette[k % palette.length];
  }
  function selectedBand() { return st.leak === null ? -2 : d.bands.sites.findIndex((b) => b.leak === st.leak); }
  // The timeline's stacked bands: by site, or by category (the same buckets, split by category).
  const byCategory = () => !!(st.cat && d.bands.categories && d.bands.categories.names.length);
  const catBands = () => ({ t: d.bands.t, tp: d.bands.tp, bytes: d.bands.categories.bytes });

  function maxOf(curve) { return curve.hi.reduce((m, v) => Math.max(m, v), 1); }
  const yMax = Math.max(maxOf(d.curves.reserved), maxOf(d.curves.allocated)) * 1.05; // the overview's scale
  let yTop = yMax; // the timeline's: the highest reserved or allocated value in the window, rescaled on every zoom and pan
  function windowTop() {
    const r = Model.resample(d.curves.reserved, st.t0, st.t1, tl.width), a = Model.resample(d.curves.allocated, st.t0, st.t1, tl.width);
    let m = 1;
    for (let i = 0; i < tl.width; i++) m = Math.max(m, r.hi[i], a.hi[i]);
    return m * 1.05;
  }

  // ---- the timeline -----------------------------------------------------------------------

  let cols = null; // the band bucket drawn in each pixel of the timeline (for hover)
  // The timeline's axis: null for time, else the time at each pixel's left edge (event index).
  let edges = null, hovered = null; // hovered: the allocation under the pointer (index into d.detail)
  // The axes' labels (on their light backing) go over the plot; the markers of the allocator's
  // events (retries, OOMs, the collector's runs) then over them, so that one at the window's edge
  // stays a full-height line.
  function drawTimeline() { const markers = plot(tl, st.t0, st.t1, true, yTop, edges); axes(); markers(); }
  function plot(canvas, t0, t1, withBands, top, axis) {
    const ctx = canvas.getContext("2d"), W = canvas.width, H = canvas.height;
    ctx.clearRect(0, 0, W, H);
    const x = axis ? (t) => Model.pixelOf(axis, t) : (t) => ((t - t0) / (t1 - t0)) * W, y = (v) => H - (v / top) * (H - 4);
    if (withBands) d.iterations.forEach((it, i) => {
      ctx.fillStyle = i % 2 ? "#f4f6fb" : "#eaeef7";
      ctx.fillRect(x(it.start_ns), 0, Math.max(1, x(it.end_ns) - x(it.start_ns)), H);
    });
    if (st.leak !== null) { // the selected leak: from its first to its last allocation,
      // behind the bands, whose own colour shows its allocations
      const l = d.candidates[st.leak];
      ctx.fillStyle = "rgba(255, 179, 0, 0.3)";
      ctx.fillRect(x(l.first_seen_ns), 0, Math.max(2, x(l.last_seen_ns) - x(l.first_seen_ns)), H);
    }
    const banded = withBands && d.bands.t.length;
    fillCurves(canvas, banded ? [[d.curves.reserved, "#cfd8dc"]] : [[d.curves.reserved, "#b0bec5"], [d.curves.allocated, "#1e88e5"]], t0, t1, top, axis);
    if (banded) { // allocated memory stacked by allocation site
      cols = axis ? Model.bandColumnsEdges(d.bands, axis) : Model.bandColumns(d.bands, t0, t1, W);
      const sel = selectedBand(), cats = byCategory(), bytes = cats ? d.bands.categories.bytes : d.bands.bytes;
      for (let px = 0; px < W; px++) {
        const i = cols[px];
        if (i < 0) continue;
        let base = 0;
        for (let k = 0; k < bytes.length; k++) {
          const v = bytes[k][i];
          if (!v) continue;
          ctx.fillStyle = cats ? Model.categoryColor(d.bands.categories.names[k], k) : bandColor(k, k === sel);
          ctx.fillRect(px, y(base + v), 1, y(base) - y(base + v));
          base += v;
        }
      }
    }
    if (withBands) d.iterations.forEach((it) => { // each iteration's peak
      ctx.fillStyle = "#c62828";
      ctx.fillRect(x(it.peak_allocated_ns) - 1, y(it.peak_allocated_bytes), 3, 3);
    });
    // A full-height line at time t and, over the bands, a flag with its label; both kept inside the
    // canvas when t is at its edge (an OOM is often the last event).
    const marker = (t, color, lw, label, fy, fw) => {
      const mx = x(t);
      if (mx < -3 || mx > W + 3) return;
      const lx = Math.round(Math.max(0, Math.min(W - lw, mx))); // whole pixels: the cursor's 1 px never blends all of it
      ctx.fillStyle = color;
      ctx.fillRect(lx, 0, lw, H);
      if (!withBands) return;
      const fx = lx > W - fw - 6 ? lx - fw : lx + lw;
      ctx.fillRect(fx, fy, fw, 16);
      ctx.fillStyle = "#fff";
      ctx.font = "bold 11px sans-serif";
      ctx.fillText(label, fx + 5, fy + 12);
    };
    const cursor = () => {
      ctx.fillStyle = "#000";
      ctx.fillRect(x(st.cur), 0, 1, H); // the cursor
    };
    const markers = () => {
      retries.forEach((r) => marker(r.time_ns, "#ef6c00", 3, "retry", 20, 40)); // the allocator released its cache for a request (under an OOM's)
      d.oom.forEach((o) => marker(o.time_ns, "#c62828", 3, "OOM", 2, 34));
      Model.gcMarkers(d).forEach((g) => marker(g.t, "#2e7d32", 2, "gc", 38, 24)); // the collector's runs that freed memory
    };
    markers();
    if (withBands && hovered !== null && hovered !== st.pin) { // the allocation under the pointer: outlined
      const a = Model.allocation(d, hovered), end = a.free >= 0 ? a.free : full.t1;
      ctx.strokeStyle = "#37474f";
      ctx.lineWidth = 1.5;
      ctx.setLineDash([4, 3]);
      ctx.strokeRect(x(a.alloc), 1, Math.max(2, x(end) - x(a.alloc)), H - 2);
      ctx.setLineDash([]);
    }
    if (withBands && st.pin !== null) { // the pinned allocation's lifetime
      const a = Model.allocation(d, st.pin), end = a.free >= 0 ? a.free : full.t1;
      ctx.strokeStyle = "#212121";
      ctx.lineWidth = 2;
      ctx.strokeRect(x(a.alloc), 1, Math.max(2, x(end) - x(a.alloc)), H - 2);
      ctx.fillStyle = "rgba(33, 33, 33, 0.12)";
      ctx.fillRect(x(a.alloc), 0, Math.max(2, x(end) - x(a.alloc)), H);
    }
    if (withBands) {
      ctx.fillStyle = "#78909c"; // checkpoints: where the allocator state is known
      d.checkpoints.forEach((c) => ctx.fillRect(x(c.t) - 1, 0, 3, 4));
      cursor();
    }
    return () => { markers(); if (withBands) cursor(); }; // drawn again by the caller over what it adds (drawTimeline's axes)
  }

  function drawOverview() {
    plot(ov, full.t0, full.t1, false, yMax);
    const ctx = ov.getContext("2d"), W = ov.width, H = ov.height;
    const x = (t) => ((t - full.t0) / (full.t1 - full.t0)) * W;
    ctx.strokeStyle = "#37474f";
    ctx.lineWidth = 2;
    ctx.strokeRect(x(st.t0), 1, Math.max(2, x(st.t1) - x(st.t0)), H - 2);
  }

  function axes() { // time, or event index: "#event time"
    timelineAxes(tl, yTop, (k, px) => {
      const t = edges ? (k === 6 ? edges.end : edges[px]) : st.t0 + ((st.t1 - st.t0) * k) / 6;
      return (edges ? "#" + (Model.stepAt(d, t) + 1) + " " : "") + rel(t);
    });
  }

  // ---- reserved memory by segment (PyTorch's "Active Cached Segment Timeline") --------------

  // Each segment a band, stacked in the order they were made, over the timeline's window and
  // axis and on its scale: a column shows the state at its highest reserved moment.
  const spansCanvas = $("spans");
  let spanCols = null, hoveredSpan = -1; // the event position each column shows; the span under the pointer
  $("spans-panel").hidden = !spanIx;
  if (spanIx) {
    const sp = d.segment_spans, before = sp.stack.filter((k) => k === -1).length;
    text($("spans-title"), spanIx.n + " segment" + (spanIx.n === 1 ? "" : "s") + " over the history" + (before ? " (" + before + " from before it)" : "") +
      (sp.omitted ? "; " + sp.omitted + " later ones not drawn (too many to embed)" : "") + ", in the order they were made");
  }
  const spanColor = (i) => (spanIx.sp.stack[i] === -1 && spanIx.sp.addr[i] === 0 ? "#b0bec5" : palette[(i * 5) % palette.length]);
  function drawRun() { drawRunStrip(d, signal); }
  function drawSpans() {
    if (!spanIx) return;
    const ctx = spansCanvas.getContext("2d"), W = spansCanvas.width, H = spansCanvas.height, y = (v) => H - (v / yTop) * (H - 4);
    ctx.clearRect(0, 0, W, H);
    const bounds = new Array(W + 1);
    for (let px = 0; px <= W; px++) bounds[px] = edges ? (px < W ? edges[px] : edges.end) : st.t0 + ((st.t1 - st.t0) * px) / W;
    spanCols = Model.spanColumns(spanIx, bounds);
    for (let px = 0, next; px < W; px = next) { // columns showing the same state are drawn at once
      for (next = px + 1; next < W && spanCols[next] === spanCols[px];) next++;
      let base = 0, top = H; // top: the highest row drawn in these columns so far
      for (const i of spanCols[px] >= 0 ? Model.spansAt(spanIx, spanCols[px]) : []) {
        base += spanIx.sp.size[i];
        const y1 = Math.round(y(base));
        if (y1 >= top) continue; // under a pixel: drawn with the next one
        ctx.fillStyle = i === hoveredSpan ? "#37474f" : spanColor(i);
        ctx.fillRect(px, y1, next - px, top - y1);
        if (top - y1 >= 4) { ctx.fillStyle = "#fff"; ctx.fillRect(px, y1, next - px, 1); } // where one segment ends and the next starts
        top = y1;
      }
    }
    ctx.fillStyle = "#000";
    ctx.fillRect(edges ? Model.pixelOf(edges, st.cur) : ((st.cur - st.t0) / (st.t1 - st.t0)) * W, 0, 1, H); // the cursor
    ctx.font = "11px sans-serif";
    ctx.fillStyle = "#263238"; // not the hovered segment's colour
    ctx.fillText(Model.formatBytes(Math.round(yTop / 1.05)), 4, 14);
  }
  function spanAt(ev) { // the span under the pointer: its index, or -1
    if (!spanCols) return -1;
    const r = spansCanvas.getBoundingClientRect(), W = spansCanvas.width, H = spansCanvas.height;
    const p = spanCols[Math.max(0, Math.min(W - 1, Math.floor(((ev.clientX - r.left) / r.width) * W)))];
    const v = (((r.bottom - ev.clientY) / r.height) * H * yTop) / (H - 4);
    let base = 0;
    if (p >= 0) for (const i of Model.spansAt(spanIx, p)) { base += spanIx.sp.size[i]; if (v < base) return i; }
    return -1;
  }
  function describeSpan(g) {
    return (g.unknown ? "reserved before the history, its ranges unknown: " + Model.formatBytes(g.size) :
      "segment " + Model.formatAddress(g.addr) + " (" + Model.formatBytes(g.size) + ", stream " + Model.formatAddress(g.stream) + ", device " + g.device + ")") +
      (g.before ? ", allocated before recording started" : ", allocated at " + rel(g.start)) + (g.end >= 0 ? ", released at " + rel(g.end) : ", still reserved at the end");
  }
  function showSpan(g) { // its stack in the side panel
    showStack(g.unknown ? "Reserved before the history" : "Segment " + Model.formatAddress(g.addr), g.stack, describeSpan(g) + "\n\n",
      g.before ? "(allocated before recording started)" : "(no stack recorded)");
  }

  // ---- the allocator state and the flame graph at the cursor ------------------------------

  let shownCheckpoint = -1, segLayout = null, flameLayout = null;
  const flameTitle = (title) => (st.temporal && d.steps ? "allocated from " + rel(st.t0) + " to " + rel(st.t1) + " (the window) and not freed by its end" : title);
  function checkpointTitle(c) {
    const why = c.kind === "iteration peak" ? "peak of iteration " + c.index : c.kind === "oom" ? "out of memory " + (c.index + 1) :
      c.kind === "time" ? "nearest checkpoint" : c.kind;
    return "at " + rel(c.t) + " (" + why + (c.t !== st.cur ? "; cursor at " + rel(st.cur) : "") + ")";
  }

  function drawSegments(c) {
    const ctx = segCanvas.getContext("2d"), W = segCanvas.width;
    const info = Model.segments(c);
    const count = (n, word) => n + " " + word + (n === 1 ? "" : "s");
    text($("state-summary"), count(info.segs.length, "segment") + ", reserved " + Model.formatBytes(c.reserved) + ", allocated " + Model.formatBytes(c.allocated) +
      (c.pending ? ", pending " + Model.formatBytes(c.pending) : "") + "; cached free " + Model.formatBytes(info.freeBytes) + " in " + count(info.pieces, "piece") +
      ", the largest " + Model.formatBytes(info.largest) + "; fragmentation (free inside partly used segments): " +
      Model.formatBytes(info.splitFree) + " in " + count(info.splitPieces, "piece") +
      (c.rounding !== undefined ? "; rounding inside allocated blocks (internal fragmentation): " + Model.formatBytes(c.rounding) : "") +
      (c.omitted ? "; " + c.omitted + " more segments not drawn (too many blocks to embed)" : ""));
    // Segments one after another, folded into rows; each at least 2 px so none disappears.
    const total = info.segs.reduce((s, g) => s + g.size, 0) || 1, rowH = 16, rows = Math.max(1, Math.min(12, Math.ceil(info.segs.length / 40)));
    const bpp = total / (W * rows - 2 * info.segs.length || 1);
    segLayout = { segs: info.segs, starts: [], widths: [], W, rowH, t: c.t };
    let at = 0;
    for (const g of info.segs) { const w = Math.max(2, g.size / bpp); segLayout.starts.push(at); segLayout.widths.push(w); at += w + 2; }
    const nrows = Math.max(1, Math.ceil(at / W));
    segCanvas.height = nrows * (rowH + 4);
    ctx.clearRect(0, 0, W, segCanvas.height);
    const span = (p, w, color) => { // a horizontal span from global pixel p, folded into rows
      while (w > 0) {
        const row = Math.floor(p / W), x = p - row * W, len = Math.min(w, W - x);
        ctx.fillStyle = color;
        ctx.fillRect(x, row * (rowH + 4), Math.max(len, 0.5), rowH);
        p += len; w -= len;
      }
    };
    const color = { allocated: "#1e88e5", pending: "#fb8c00", free: "#e0e0e0" };
    info.segs.forEach((g, s) => {
      const p = segLayout.starts[s], w = segLayout.widths[s];
      for (const r of g.runs) span(p + (r.offset / g.size) * w, (r.size / g.size) * w, color[r.state]);
    });
  }

  function segmentAt(ev) {
    if (!segLayout) return null;
    const rect = segCanvas.getBoundingClientRect();
    const x = ((ev.clientX - rect.left) / rect.width) * segCanvas.width, y = ((ev.clientY - rect.top) / rect.height) * segCanvas.height;
    const p = Math.floor(y / (segLayout.rowH + 4)) * segLayout.W + x;
    const s = segLayout.starts.findIndex((start, i) => p >= start && p < start + segLayout.widths[i]);
    if (s < 0) return null;
    const g = segLayout.segs[s], off = ((p - segLayout.starts[s]) / segLayout.widths[s]) * g.size;
    return { seg: g, off, run: g.runs.find((r) => off >= r.offset && off < r.offset + r.size) };
  }

  let search = null;
  let flameZoom = []; // the path (frame keys from the root) of the frame the icicle graph is zoomed into
  function drawFlame(c) {
    if (st.temporal && d.steps) c = Model.temporal(d, st.t0, st.t1);
    let root = Model.flameTree(d, c, !!st.all);
    const path = [];
    for (const key of flameZoom) { // as deep as the zoom's frames still exist at this state
      const next = root.index.get(key);
      if (!next) break;
      root = next;
      path.push(key);
    }
    const ctx = flame.getContext("2d"), W = flame.width, rowH = 18;
    let depth = 0;
    const measure = (n, k) => { depth = Math.max(depth, k); n.children.forEach((ch) => measure(ch, k + 1)); };
    measure(root, 1);
    flame.height = depth * rowH;
    ctx.clearRect(0, 0, W, flame.height);
    ctx.font = "11px sans-serif";
    const q = search && search.value.trim().toLowerCase();
    flameLayout = [];
    const draw = (n, x, k, w, at) => {
      if (w < 1) return;
      const hit = q && (n.full.toLowerCase().includes(q) || n.file.toLowerCase().includes(q));
      ctx.fillStyle = hit ? "#ffb300" : k === 0 ? "#90a4ae" : ["#ef9a9a", "#f48fb1", "#ffcc80", "#ffab91"][k % 4];
      ctx.fillRect(x, k * rowH, w - 1, rowH - 1);
      flameLayout.push({ x, w, k, node: n, path: at });
      if (w > 40) {
        ctx.fillStyle = "#212121";
        const at = Model.fileLine(n), label = n.name + (at ? " (" + at + ")" : "") + " " + Model.formatBytes(n.bytes);
        let s = label;
        while (s.length > 1 && ctx.measureText(s).width > w - 6) s = s.slice(0, Math.max(1, Math.floor(s.length * 0.8)));
        ctx.fillText(s === label ? s : s + "\u2026", x + 3, k * rowH + 13);
      }
      let cx = x;
      for (const ch of n.children) { const cw = root.bytes ? (ch.bytes / root.bytes) * W : 0; draw(ch, cx, k + 1, cw, at.concat([ch.key])); cx += cw; }
    };
    draw(root, 0, 0, W, path);
    $("flame-zoom").hidden = !path.length;
    text($("flame-zoom"), path.length ? "zoomed into " + root.name + " (" + Model.formatBytes(root.bytes) + "): click the top row to zoom out" : "");
    flameLayout.total = root.bytes;
  }

  function unpin() { // the side panel goes back to the selected leak, or says nothing is pinned
    st.pin = null;
    if (st.leak !== null) showStack(candidateTitle(st.leak), d.candidates[st.leak].stack);
    else { shownStack = null; text($("details-title"), "Stack"); text(details, "hover an allocation; click to pin it"); }
    redraw();
  }

  function showCheckpoint() {
    const i = Model.checkpointNear(d, st.cur);
    if (i < 0) { text($("state-title"), "(no checkpoints)"); return; }
    const c = d.checkpoints[i];
    text($("state-title"), checkpointTitle(c));
    text($("flame-title"), flameTitle(checkpointTitle(c)));
    if (i === shownCheckpoint && !showCheckpoint.force) return;
    shownCheckpoint = i;
    showCheckpoint.force = false;
    drawSegments(c);
    drawFlame(c);
  }
  // The state after step st.step (an event of d.steps), replayed; else the nearest checkpoint.
  function showState() {
    if (st.step === null || !stepper) { showCheckpoint(); return; }
    const c = stepper.at(st.step), i = st.step, s = d.steps;
    const kinds = { 1: "alloc", 2: "free requested", 3: "free completed", 4: "segment alloc", 5: "segment free", 11: "segment map", 12: "segment unmap" };
    const title = i < 0 ? "when the history starts (" + rel(full.t0) + ")" :
      "after event " + (i + 1) + " of " + s.t.length + " at " + rel(s.t[i]) + ": " + kinds[s.kind[i]] + " " + Model.formatBytes(s.size[i]) + " at " + Model.formatAddress(s.addr[i]);
    text($("state-title"), title);
    text($("flame-title"), flameTitle(title));
    shownCheckpoint = -1;
    drawSegments(c);
    drawFlame(c);
  }
  // The selected leak candidate's live bytes at the end of each iteration, on their own scale.
  function drawGrowth() {
    const g = st.leak === null ? null : Model.growth(d.candidates[st.leak]);
    $("growth-panel").hidden = !g;
    if (!g) return;
    const ctx = growthCanvas.getContext("2d"), W = growthCanvas.width, H = growthCanvas.height, n = g.values.length;
    ctx.clearRect(0, 0, W, H);
    const left = 90, bw = (W - left - 10) / n, y = (v) => H - 18 - ((v - g.min) / (g.max - g.min || 1)) * (H - 36);
    ctx.font = "11px sans-serif";
    ctx.fillStyle = "#37474f";
    ctx.fillText(Model.formatBytes(g.max), 4, 14);
    ctx.fillText(Model.formatBytes(Math.round(g.min)), 4, H - 20);
    g.values.forEach((v, k) => {
      ctx.fillStyle = "#e53935";
      ctx.fillRect(left + k * bw + 1, y(v), Math.max(1, bw - 2), H - 18 - y(v));
      if (n <= 40 || k % Math.ceil(n / 40) === 0) { ctx.fillStyle = "#37474f"; ctx.fillText(String(k), left + k * bw + 1, H - 4); }
    });
    text($("growth-title"), "leak candidate " + (st.leak + 1) + ": live bytes at the end of each iteration (own scale, from " +
      Model.formatBytes(Math.round(g.min)) + "): " + Model.formatBytes(g.first) + " after iteration 0, " + Model.formatBytes(g.last) +
      " after iteration " + (n - 1) + " (" + (g.perIteration >= 0 ? "+" : "") + Model.formatBytes(Math.round(g.perIteration)) + " per iteration)");
  }

  // The legend: by site (the page's static one), or each category as a swatch and its name; its
  // bytes at the allocated peak, what it means and how sure the analysis is of it on hover (the
  // Categories table below says the same for every category, the "?" goes there).
  const catRows = Model.categoryRows(d), catRow = (name) => catRows.find((r) => r.name === name);
  const catTitle = (name) => { const r = catRow(name); return r ? name + ": " + Model.formatBytes(r.bytes) + " at the peak; " + (r.meaning || "a category") + " (" + r.sureText + ")" : name; };
  function showLegend() {
    const cats = byCategory(), box = $("legend-categories");
    $("colour-by").value = cats ? "categories" : "sites";
    $("legend").hidden = cats;
    box.hidden = !cats;
    if (!cats || box.dataset.filled) return;
    box.dataset.filled = "1";
    box.textContent = "";
    d.bands.categories.names.forEach((name, k) => {
      const item = add(box, "span", undefined, "item");
      item.dataset.category = name;
      item.title = catTitle(name);
      add(item, "span", undefined, "key").style.background = Model.categoryColor(name, k);
      add(item, "span", name);
    });
    const help = add(box, "button", "?", "help");
    help.type = "button";
    help.title = "what each category means: the Categories table";
    on(help, "click", () => $("categories-panel").scrollIntoView());
  }

  // The Categories table: each category's colour, bytes at the allocated peak, meaning, and how
  // sure the analysis is of it (named by tensors, inferred from stacks, or not told and why).
  function fillCategories() {
    const body = document.querySelector("#category-table tbody"), panel = $("categories-panel");
    body.textContent = "";
    for (const n of panel.querySelectorAll(".category-note")) n.remove();
    panel.hidden = !catRows.length;
    const names = d.bands.categories ? d.bands.categories.names : [];
    catRows.forEach((r, k) => {
      const tr = add(body, "tr");
      tr.dataset.category = r.name;
      const name = add(tr, "td");
      add(name, "span", undefined, "key").style.background = Model.categoryColor(r.name, names.includes(r.name) ? names.indexOf(r.name) : k);
      add(name, "span", r.name);
      add(tr, "td", Model.formatBytes(r.bytes), "num");
      add(tr, "td", r.meaning || "-");
      add(tr, "td", r.sureWord, "sure").title = r.sureText;
    });
    const notes = Model.categoryNotes(d);
    if (notes.parameters.length)
      add(panel, "p", "the parameters at the peak: " + notes.parameters.map(([k, v]) => Model.formatBytes(v) + " " + k).join(", "), "muted category-note");
    for (const [name, why] of notes.missing) add(panel, "p", "no " + name + " told: " + why, "muted category-note");
  }

  // At a glance: the three questions users come with, answered before the details.
  function fillGlance() {
    const g = Model.glance(d);
    const line = (id) => { const el = $(id).querySelector(".glance-text"); el.textContent = ""; return el; };
    const peak = line("glance-peak");
    add(peak, "span", Model.formatBytes(g.peak.allocated) + " allocated (" + Model.formatBytes(g.peak.reserved) + " reserved) at " + rel(g.peak.at) +
      (g.peak.categories.length ? ": " : ""));
    const names = d.bands.categories ? d.bands.categories.names : [];
    g.peak.categories.forEach(([name, bytes], k) => {
      const c = add(peak, "span", undefined, "glance-cat");
      c.dataset.category = name;
      c.title = catTitle(name);
      add(c, "span", undefined, "key").style.background = Model.categoryColor(name, names.includes(name) ? names.indexOf(name) : k);
      add(c, "span", name + " " + Model.formatBytes(bytes));
      peak.appendChild(document.createTextNode(" "));
    });
    const grows = line("glance-grows"), gr = g.grows;
    if (gr.kind === "growing") {
      const l = gr.candidate;
      add(grows, "span", Model.growthText(l) + (l.kind === "growing_released" ? ", released at " + rel(l.released_ns) : "") + ", " +
        Model.formatBytes(l.live_bytes) + " live at the end: ");
      const a = add(grows, "a", Model.siteLabel(Model.stackFrames(d, l.stack)));
      a.title = "select the first leak candidate";
      on(a, "click", () => selectCandidate(0, false));
    } else {
      add(grows, "span", gr.kind === "none" ? "nothing: no growth across " + gr.iterations + " iterations" :
        "cannot be told: " + (gr.iterations ? "one iteration" : "no iterations") + " (two are needed)");
      if (gr.largest) {
        const l = gr.largest;
        add(grows, "span", "; the largest held: " + (l.held_category ? l.held_category + " " : "") + Model.formatBytes(l.live_bytes) + " at ");
        add(grows, "span", Model.siteLabel(Model.stackFrames(d, l.stack)));
      }
    }
    if (gr.graphs.length) { // the largest kept graph: what holds the growth, in a few words
      const k = gr.graphs[0], a = add(grows, "a", "G1");
      grows.insertBefore(document.createTextNode("; " + Model.formatBytes(k.live_bytes) + " in " + k.graphs + " autograd graph" + (k.graphs === 1 ? "" : "s") +
        " kept alive without a backward" + (gr.graphs.length > 1 ? " (and " + (gr.graphs.length - 1) + " more)" : "") + ": "), a);
      a.title = Model.keptGraphText(k);
      on(a, "click", () => showStack("Kept graph G1: its largest site (" + Model.formatBytes(k.largest_site_bytes) + ")", k.stack, Model.keptGraphText(k) + "\n\n"));
    }
    const fits = line("glance-fits"), f = g.fits;
    if (f.oom) {
      add(fits, "span", "out of memory at " + rel(f.oom.time_ns) + ": " + Model.formatBytes(f.oom.requested_bytes) + " requested with " +
        Model.formatBytes(f.oom.live_bytes) + " live; ");
      if (f.suggestion && f.suggestion.fits) { add(fits, "code", Model.suggestionLine(f.suggestion)); add(fits, "span", " avoids it in the replay; "); }
      add(fits, "span", "what fits this card: ");
      add(fits, "code", "memsnap predict small.db=SIZE large.db=SIZE --capacity CARD_MEMORY --sweep");
    } else if (f.suggestion) {
      add(fits, "code", Model.suggestionLine(f.suggestion));
      add(fits, "span", ": " + Model.suggestionEffect(f.suggestion, f.baseline) + " (the replay's sweep); at other sizes: ");
      add(fits, "code", "memsnap predict");
    } else {
      add(fits, "span", (f.swept ? "no allocator setting of the replay's sweep lowers peak reserved memory by 5% or more; " : "") + "at other sizes or on another card: ");
      add(fits, "code", "memsnap predict A.db=SIZE B.db=SIZE --capacity CARD_MEMORY");
    }
  }

  // The iterations (the training steps, or the outermost repeated unit of the program): each one's
  // peaks and what was live at its peak by category.
  function fillIterations() {
    const body = document.querySelector("#iteration-table tbody"), it = Model.iterationRows(d, 200);
    body.textContent = "";
    it.rows.forEach((r, i) => {
      if (i === it.split) add(add(body, "tr"), "td", "... " + it.omitted + " iterations not shown", "muted").colSpan = 6;
      const tr = add(body, "tr");
      add(tr, "td", String(r.index), "num");
      add(tr, "td", rel(r.start), "num");
      add(tr, "td", Model.formatBytes(r.peakAllocated), "num");
      add(tr, "td", Model.formatBytes(r.peakReserved), "num");
      add(tr, "td", Model.formatBytes(r.endAllocated), "num");
      const cats = add(tr, "td");
      if (!r.categories) text(cats, "-");
      else r.categories.forEach(([name, bytes], k) => {
        const key = add(cats, "span", undefined, "key");
        key.style.background = Model.categoryColor(name, d.bands.categories ? d.bands.categories.names.indexOf(name) : k);
        const c = add(cats, "span", name + " " + Model.formatBytes(bytes) + " ");
        c.title = catTitle(name);
        c.dataset.category = name;
      });
      on(tr, "click", () => { // the cursor to its peak: the allocator's state there
        st.cur = r.peakAt;
        st.step = stepper ? Model.stepAt(d, st.cur) : null;
        if (st.cur < st.t0 || st.cur > st.t1) { const span = st.t1 - st.t0; st.t0 = Math.max(full.t0, st.cur - span / 2); st.t1 = Math.min(full.t1, st.t0 + span); }
        redraw();
      });
    });
    text($("iterations-title"), d.iterations.length ? d.iterations.length + " (" + d.summary.iteration_source + ": " +
      d.summary.iteration_label + "); growth: " + d.summary.growth : "none found");
  }

  function redraw() {
    yTop = windowTop();
    edges = st.ev ? Model.eventEdges(d, st.t0, st.t1, tl.width) : null;
    $("event-axis").checked = !!edges;
    showLegend();
    drawTimeline();
    drawOverview();
    drawSpans();
    if (st.temporal) showCheckpoint.force = true; // follows the window
    showState();
    drawGrowth();
    history.replaceState(null, "", Model.encodeState(st));
  }

  // ---- details and lists -----------------------------------------------------------------

  // The side panel: `head` then the stack, a line a frame with short names (the frames that
  // matter, or every frame when irrelevant frames are not hidden); hovering a line shows the
  // frame's whole name; `note` says why a stack is empty ("(no stack recorded)").
  let shownStack = null; // what the panel shows, to show again when the frames toggle
  // A candidate's title: those that grew are leak candidates, the rest held since the start.
  const candidateTitle = (i) => (i < d.leaks.length ? "Leak candidate " + (i + 1) : "Held since the start " + (i - d.leaks.length + 1));

  function showStack(title, stackId, head, note) {
    shownStack = [title, stackId, head, note];
    text($("details-title"), title);
    const frames = Model.stackFrames(d, stackId, !!st.all);
    text(details, head || "");
    for (const f of frames) add(details, "span", Model.frameLine(f) + "\n").title = Model.frameLine(f, true);
    if (!frames.length) add(details, "span", note || "(no stack recorded)");
  }
  function describe(a) {
    return Model.formatBytes(a.size) + " at " + Model.formatAddress(a.addr) + ", stream " + Model.formatAddress(a.stream) +
      ", allocated at " + rel(a.alloc) + (a.free >= 0 ? ", freed at " + rel(a.free) + " (held " + Model.formatTime(a.free - a.alloc) + ")" : ", alive at the end") +
      (a.requested && a.requested !== a.size ? ", " + Model.formatBytes(a.requested) + " requested" : "");
  }
  function showAllocation(j, pinned) {
    const a = Model.allocation(d, j);
    showStack((pinned ? "Pinned allocation" : "Allocation") + (a.leak >= 0 ? " (leak candidate " + (a.leak + 1) + ")" : ""), a.stack, describe(a) + "\n\n");
  }
  function pin(j, zoom) { // zoom (from search): also move the window and the cursor to it
    st.pin = j;
    if (j !== null) {
      const a = Model.allocation(d, j);
      if (zoom) {
        st.cur = a.alloc;
        const end = a.free >= 0 ? a.free : full.t1, pad = Math.max((end - a.alloc) * 0.25, 1000);
        st.t0 = Math.max(full.t0, a.alloc - pad);
        st.t1 = Math.min(full.t1, end + pad);
      }
      showAllocation(j, true);
    }
    redraw();
  }

  const leakList = $("leaks"), graphList = $("kept-graphs"), heldList = $("held"), oomList = $("ooms"), results = $("results");
  const shownAll = { leaks: false, held: false }; // lists show their first ten until "show all" is clicked
  // the verdict over the list: nothing grows (what is listed is held, not leaking), or too few
  // iterations to tell
  text($("growth-verdict"), d.summary.growth === "none" ? "no growth across " + d.iterations.length + " iterations: what is listed is held, not growing"
    : d.summary.growth === "unknown" && (d.leaks.length || d.held && d.held.length) ? "growth cannot be told: " + (d.iterations.length ? "one iteration" : "no iterations") + " (two are needed)" : "");
  // Selects candidate i (a click on it in a list: `toggle` unselects it when selected already).
  function selectCandidate(i, toggle) {
    const l = d.candidates[i];
    st.leak = st.leak === i && toggle ? null : i;
    const causes = Model.causeLines(l).join("\n");
    showStack(candidateTitle(i), l.stack, ((l.held_module || l.module) ? "in module " + (l.held_module || l.module) + "\n" : "") +
      (causes ? causes + "\n" : "") + ((l.held_module || l.module || causes) ? "\n" : "") || undefined);
    fillLists(search.value);
    redraw();
    if (st.leak !== null && selectedBand() < 0) // only the largest sites have a band of their own
      text(readout, "leak candidate " + (i + 1) + " has no band of its own: it is inside \u201cother sites\u201d (grey); its span is shaded");
  }
  function fillLists(filter) {
    leakList.textContent = "";
    graphList.textContent = "";
    (d.kept_graphs || []).forEach((g, i) => { // autograd graphs kept without a backward, before the sites
      const li = add(graphList, "li", undefined, "kept-graph");
      add(li, "strong", "G" + (i + 1) + ". ");
      add(li, "span", Model.keptGraphText(g));
      li.title = "the site that holds most of it: " + Model.siteLabel(Model.stackFrames(d, g.stack));
      for (const line of Model.causeLines(g)) add(li, "div", line, "holder"); // what keeps it (text only)
      on(li, "click", () => showStack("Kept graph G" + (i + 1) + ": its largest site (" + Model.formatBytes(g.largest_site_bytes) + ")", g.stack, Model.keptGraphText(g) + "\n\n"));
    });
    heldList.textContent = "";
    oomList.textContent = "";
    results.textContent = "";
    const only = filter ? new Set(Model.search(d, filter).map((h) => h.kind + h.index)) : null;
    const listed = { leaks: 0, held: 0 }, more = { leaks: 0, held: 0 };
    d.candidates.forEach((l, i) => {
      if (only && !only.has("leak" + i)) return;
      const which = i < d.leaks.length ? "leaks" : "held";
      if (!only && !shownAll[which] && listed[which] >= 10) { more[which]++; return; }
      listed[which]++;
      const frames = Model.stackFrames(d, l.stack), top = frames[0], grew = "growing " + (l.every ? Model.growthText(l) : "+" + Model.formatBytes(l.bytes_per_iteration) + "/iteration") + ", ";
      const held = l.held_category ? l.kind + " " + l.held_category + ", " : l.kind + ", ";
      const what = l.kind === "growing" ? grew : l.kind === "growing_released" ? grew + "released at " + rel(l.released_ns) + ", " : held;
      const li = add(which === "leaks" ? leakList : heldList, "li", what + Model.formatBytes(l.live_bytes) + " in " + l.live_count + " \u2014 " +
        Model.siteLabel(frames) + ((l.held_module || l.module) ? " \u00b7 in " + (l.held_module || l.module) : "") +
        (l.kept_graph !== null && l.kept_graph !== undefined ? " \u00b7 " + Model.formatBytes(l.kept_graph_bytes) + " in kept graph G" + (l.kept_graph + 1) : ""),
        (l.kind === "growing_released" ? "growing released" : l.kind) + (st.leak === i ? " selected" : ""));
      if (top) li.title = Model.frameLine(top, true);
      for (const line of Model.causeLines(l)) add(li, "div", line, "holder"); // what holds it (text only)
      if (l.held_category) li.dataset.category = l.held_category;
      on(li, "click", () => selectCandidate(i, true));
    });
    for (const which of ["leaks", "held"]) // the rest of a long list, one click away
      if (more[which]) {
        const li = add(which === "leaks" ? leakList : heldList, "li", "show all " + (listed[which] + more[which]) + " (" + more[which] + " more)", "more");
        on(li, "click", () => { shownAll[which] = true; fillLists(search.value); });
      }
    $("no-held").hidden = d.held === undefined || d.held.length > 0;
    d.oom.forEach((o, i) => {
      if (only && !only.has("oom" + i)) return;
      const li = add(oomList, "li", rel(o.time_ns) + ": " + Model.formatBytes(o.requested_bytes) + " requested, " + Model.formatBytes(o.device_free_bytes) + " free on the device, " +
        Model.formatBytes(o.cached_unallocated_bytes) + " cached, " + Model.formatBytes(o.live_bytes) + " live");
      on(li, "click", () => {
        showStack("Out of memory " + (i + 1), o.stack);
        st.cur = o.time_ns;
        st.t0 = Math.max(full.t0, o.time_ns - (full.t1 - full.t0) / 20);
        st.t1 = Math.min(full.t1, o.time_ns + (full.t1 - full.t0) / 20);
        redraw();
      });
    });
    $("no-ooms").hidden = d.oom.length > 0;
    $("oom-predict").hidden = d.oom.length === 0; // memsnap predict: what would fit (docs/predict.md)
    $("retries").textContent = "";
    retries.forEach((r, i) => {
      if (only && !only.has("retry" + i)) return;
      const li = add($("retries"), "li", Model.retryLine(r, rel(r.time_ns)) + " \u2014 " + Model.siteLabel(Model.stackFrames(d, r.stack)));
      on(li, "click", () => { // its stack; the cursor and the window to it, as an OOM's
        showStack("Retry " + (i + 1), r.stack, Model.retryLine(r, rel(r.time_ns)) + "\n\n");
        st.cur = r.time_ns;
        st.t0 = Math.max(full.t0, r.time_ns - (full.t1 - full.t0) / 20);
        st.t1 = Math.min(full.t1, r.time_ns + (full.t1 - full.t0) / 20);
        redraw();
      });
    });
    const found = filter ? Model.searchAddress(d, filter) : [];
    for (const j of found) {
      const li = add(results, "li", "allocation " + describe(Model.allocation(d, j)));
      on(li, "click", () => pin(j, true));
    }
    if (filter && !found.length && /^\s*(0x[0-9a-f]+|\d+)\s*$/i.test(filter))
      add(results, "li", "no listed allocation holds this address" +
        (d.detail.min_size ? " (only allocations of " + Model.formatBytes(d.detail.min_size) + " or more are listed)" : ""), "muted");
  }
  // The allocator's other releases, by cause (the retries are listed above).
  const R = d.releases, count = (c, what) => (c && c.segments ? c.calls + " " + what + (c.calls === 1 ? "" : "s") + ", " + Model.formatBytes(c.bytes) : "");
  const released = R ? R.retries.segments + R.empty_cache.segments + R.garbage_collection.segments + R.private_pool.segments + R.other.segments : 0;
  text($("releases-summary"), !released ? "none: the allocator released no cached memory" :
    [R.retries.count > retries.length ? (R.retries.count - retries.length) + " more retries not listed" : "",
      count(R.empty_cache, "empty_cache call"), count(R.garbage_collection, "garbage collection"), count(R.private_pool, "private pool emptied"),
      R.other.segments ? "other releases (shutdown, the driver's pool): " + Model.formatBytes(R.other.bytes) : "",
      R.unmaps.count ? "of them, pages unmapped: " + Model.formatBytes(R.unmaps.bytes) : "",
      R.reasons === "inferred" ? "(reasons inferred from the events' pattern)" : ""].filter(Boolean).join("; "));
  // The replay's suggestions (memsnap analyze's sweep of allocator settings): the line to set, best first.
  const sw = d.suggestions_sweep || { status: "not_asked" }, suggestions = d.suggestions || [];
  $("suggestions").textContent = "";
  $("suggestions-box").hidden = sw.status === "not_asked" || sw.status === "disabled" || sw.status === "nothing_to_replay";
  suggestions.forEach((g) => {
    const li = add($("suggestions"), "li");
    add(li, "code", Model.suggestionLine(g));
    add(li, "div", Model.suggestionEffect(g, sw.baseline_peak_reserved_bytes), "muted");
  });
  text($("suggestions-note"), [sw.note || "", sw.time_limit_reached ? "the sweep's time limit came first: " + sw.settings_replayed + " of " + sw.settings +
    " settings replayed (memsnap replay --sweep replays them all)" : ""].filter(Boolean).join("; "));
  // Invalid frees (frees of pointers the allocator did not own), by site: shown when there are any.
  const invalidFrees = (d.invalid_frees && d.invalid_frees.sites) || [];
  $("invalid-frees").textContent = "";
  $("invalid-frees-box").hidden = invalidFrees.length === 0;
  text($("invalid-frees-count"), invalidFrees.length ? "(" + invalidFrees.reduce((n, f) => n + f.count, 0) + ")" : "");
  invalidFrees.forEach((f, i) => {
    const top = Model.stackFrames(d, f.stack)[0];
    const li = add($("invalid-frees"), "li", f.count + " \u00d7 " + f.kind.replace("_", " ") + " at " + Model.formatAddress(f.address) + ", first at " + rel(f.first_ns) +
      " \u2014 " + (top ? top.name : "(no stack recorded)"));
    if (top) li.title = Model.frameLine(top, true);
    on(li, "click", () => { showStack("Invalid free " + (i + 1) + " (" + f.kind.replace("_", " ") + ")", f.stack); st.cur = f.first_ns; redraw(); });
  });

  // The sortable table of sites, filtered by the search box (at most 200 rows shown).
  const table = { col: "alloc", asc: false };
  function fillTable() {
    const rows = Model.siteRows(d, search.value, table.col, table.asc), body = document.querySelector("#site-table tbody");
    body.textContent = "";
    const who = (v, word) => (v === -1 ? "several" : v === 0 && word === "thread" ? "-" : word === "stream" ? Model.formatAddress(v) : String(v));
    for (const r of rows.slice(0, 200)) {
      const tr = add(body, "tr");
      add(tr, "td", r.label).title = r.frames.length ? Model.frameLine(r.frames[0], true) : "";
      add(tr, "td", Model.formatBytes(r.alloc), "num");
      add(tr, "td", String(r.count), "num");
      add(tr, "td", Model.formatBytes(r.live), "num");
      add(tr, "td", String(r.blocks), "num");
      add(tr, "td", who(r.thread, "thread"), "num");
      add(tr, "td", who(r.stream, "stream"), "num");
      on(tr, "click", () => showStack(r.leak >= 0 ? "Leak candidate " + (r.leak + 1) : "Allocation site", r.stack));
    }
    document.querySelectorAll("#site-table th").forEach((th) => th.classList.toggle("sorted", th.dataset.col === table.col));
    text($("sites-title"), rows.length + " of " + (d.site_table || []).length + " sites" + (rows.length > 200 ? ", the first 200 shown" : "") +
      "; sorted by " + table.col + (table.asc ? " (ascending)" : " (descending)") + "; click a column to sort, the search box filters");
  }
  document.querySelectorAll("#site-table th").forEach((th) => on(th, "click", () => {
    if (table.col === th.dataset.col) table.asc = !table.asc;
    else { table.col = th.dataset.col; table.asc = th.dataset.col === "label"; }
    fillTable();
  }));
  search = $("search");
  on(search, "input", () => { fillLists(search.value); fillTable(); showCheckpoint.force = true; showCheckpoint(); });

  // ---- interaction -----------------------------------------------------------------------

  const toTime = (canvas, ev, t0, t1) => {
    const r = canvas.getBoundingClientRect(), f = (ev.clientX - r.left) / r.width;
    if ((canvas === tl || canvas === spansCanvas) && edges) return edges[Math.max(0, Math.min(edges.length - 1, Math.floor(f * edges.length)))];
    return t0 + f * (t1 - t0);
  };
  // What is under the pointer on the timeline: {t, band, alloc or small}.
  function hit(ev) {
    const t = toTime(tl, ev, st.t0, st.t1), out = { t, band: -1 };
    if (!d.bands.t.length || !cols) return out;
    const rect = tl.getBoundingClientRect(), px = Math.floor(((ev.clientX - rect.left) / rect.width) * tl.width);
    const i = cols[Math.max(0, Math.min(tl.width - 1, px))];
    const v = ((rect.bottom - ev.clientY) / rect.height) * yTop * (tl.height / (tl.height - 4));
    if (i < 0) return out;
    if (byCategory()) { // a category's band: its bytes at the bucket's peak moment
      const c = Model.bandAt(catBands(), i, v);
      return c < 0 ? out : Object.assign(out, { category: c, bucket: i });
    }
    const k = Model.bandAt(d.bands, i, v);
    if (k < 0) return out;
    let base = 0;
    for (let j = 0; j < k; j++) base += d.bands.bytes[j][i];
    return Object.assign(out, { band: k, bucket: i }, Model.allocationAt(d, i, k, v - base));
  }

  on(tl, "mousemove", (ev) => {
    if (drag && drag.moved) return;
    const h = hit(ev), a = Model.valueAt(d.curves.allocated, h.t), r = Model.valueAt(d.curves.reserved, h.t);
    const it = d.iterations.findIndex((x) => h.t >= x.start_ns && h.t < x.end_ns);
    let what = "";
    const under = h.alloc !== undefined ? h.alloc : null;
    if (under !== hovered) { hovered = under; drawTimeline(); }
    if (h.category !== undefined) {
      what = "\n" + d.bands.categories.names[h.category] + ": " + Model.formatBytes(d.bands.categories.bytes[h.category][h.bucket]) +
        " at " + rel(d.bands.tp[h.bucket]) + " (the bucket's peak)";
    } else if (h.alloc !== undefined) {
      what = "\n" + describe(Model.allocation(d, h.alloc));
      if (st.pin === null) showAllocation(h.alloc, false);
    } else if (h.band >= 0) {
      const b = d.bands.sites[h.band], top = Model.stackFrames(d, b.stack)[0];
      what = "\n" + (b.other ? "other sites" : top ? top.name : "?") + ": " + Model.formatBytes(h.small) + " in allocations under " + Model.formatBytes(d.detail.min_size);
      if (st.pin === null && !b.other) showStack(b.leak >= 0 ? "Leak candidate " + (b.leak + 1) : "Allocation site", b.stack);
    }
    text(readout, rel(h.t) + "  allocated " + (a ? Model.formatBytes(a.hi) : "-") + "  reserved " + (r ? Model.formatBytes(r.hi) : "-") + (it >= 0 ? "  iteration " + it : "") + what);
  });
  on(tl, "mouseleave", () => { if (hovered !== null) { hovered = null; drawTimeline(); } });
  on(tl, "wheel", (ev) => {
    ev.preventDefault();
    const t = toTime(tl, ev, st.t0, st.t1), k = ev.deltaY > 0 ? 1.25 : 0.8;
    const span = Math.min(full.t1 - full.t0, Math.max(1000, (st.t1 - st.t0) * k));
    st.t0 = Math.max(full.t0, t - (t - st.t0) * (span / (st.t1 - st.t0)));
    st.t1 = Math.min(full.t1, st.t0 + span);
    st.t0 = Math.max(full.t0, st.t1 - span);
    redraw();
  }, { passive: false });
  let drag = null;
  on(tl, "mousedown", (ev) => { drag = { x: ev.clientX, t0: st.t0, t1: st.t1, moved: false }; });
  on(window, "mouseup", (ev) => {
    if (drag && !drag.moved && ev.target === tl) { // a click: the cursor, and pin what is there
      const h = hit(ev);
      st.cur = h.t;
      st.step = stepper ? Model.stepAt(d, h.t) : null;
      if (h.alloc !== undefined && st.pin !== h.alloc) pin(h.alloc, false);
      else if (st.pin !== null) unpin();
      else redraw();
    }
    drag = null;
  });
  on(window, "mousemove", (ev) => {
    if (!drag || Math.abs(ev.clientX - drag.x) < 3 && !drag.moved) return;
    drag.moved = true;
    const dt = ((ev.clientX - drag.x) / tl.getBoundingClientRect().width) * (drag.t1 - drag.t0);
    const span = drag.t1 - drag.t0;
    st.t0 = Math.min(Math.max(full.t0, drag.t0 - dt), full.t1 - span);
    st.t1 = st.t0 + span;
    redraw();
  });
  on(window, "keydown", (ev) => {
    if (ev.key === "Escape" && st.pin !== null) unpin();
    if ((ev.key !== "ArrowLeft" && ev.key !== "ArrowRight") || ev.target === search) return;
    ev.preventDefault();
    const by = (ev.key === "ArrowRight" ? 1 : -1) * (ev.shiftKey ? 10 : 1);
    if (stepper) { // event by event
      st.step = Math.max(-1, Math.min(stepper.count - 1, (st.step === null ? Model.stepAt(d, st.cur) : st.step) + by));
      st.cur = st.step >= 0 ? d.steps.t[st.step] : full.t0;
    } else if (d.checkpoints.length) { // checkpoint by checkpoint
      const at = Model.checkpointNear(d, st.cur), last = d.checkpoints.length - 1;
      let i = Math.max(0, Math.min(last, at + by));
      while (i > 0 && i < last && d.checkpoints[i].t === d.checkpoints[at].t) i += Math.sign(by); // past those at the same time
      st.cur = d.checkpoints[i].t;
    }
    if (st.cur < st.t0 || st.cur > st.t1) { const span = st.t1 - st.t0; st.t0 = Math.max(full.t0, st.cur - span / 2); st.t1 = Math.min(full.t1, st.t0 + span); }
    redraw();
  });
  let brush = null;
  on(ov, "mousedown", (ev) => { brush = toTime(ov, ev, full.t0, full.t1); });
  on(ov, "mouseup", (ev) => {
    if (brush === null) return;
    const t = toTime(ov, ev, full.t0, full.t1);
    if (Math.abs(t - brush) > (full.t1 - full.t0) / 1000) { st.t0 = Math.min(brush, t); st.t1 = Math.max(brush, t); redraw(); }
    brush = null;
  });
  on(segCanvas, "mousemove", (ev) => {
    const h = segmentAt(ev);
    if (!h) return;
    const g = h.seg, r = h.run, i = spanIx ? Model.spanOf(spanIx, g.addr + h.off, segLayout.t) : -1, sg = i >= 0 ? Model.span(spanIx, i) : null;
    const by = sg && sg.stack ? Model.siteLabel(Model.stackFrames(d, sg.stack)) : "";
    text($("state-readout"), "segment " + Model.formatAddress(g.addr) + " (" + Model.formatBytes(g.size) + ", stream " + Model.formatAddress(g.stream) + ", device " + g.device + ")" +
      (r ? ": " + r.state + " " + Model.formatBytes(r.size) + (r.count > 1 ? " in " + r.count + " blocks" : "") + " at +" + Model.formatAddress(r.offset) : "") +
      (sg ? "; allocated " + (sg.before ? "before recording started" : "at " + rel(sg.start) + (by ? " by " + by : "")) : ""));
    if (sg && st.pin === null) showSpan(sg); // the stack that allocated the segment
  });
  // ---- memory by module: the module tree as an icicle, at the allocated peak ----------------
  const modCanvas = $("modules"), modRow = 18;
  const modBoxes = Model.moduleBoxes(d, modCanvas.width);
  $("modules-panel").hidden = !d.modules.length;
  function drawModules() {
    const depth = modBoxes.reduce((m, b) => Math.max(m, b.depth + 1), 0);
    modCanvas.height = Math.max(1, depth) * modRow;
    const ctx = modCanvas.getContext("2d");
    ctx.clearRect(0, 0, modCanvas.width, modCanvas.height);
    ctx.font = "12px sans-serif";
    for (const b of modBoxes) {
      const m = d.modules[b.m], y = b.depth * modRow, w = b.x1 - b.x0;
      ctx.fillStyle = Model.categoryColor("module", b.depth);
      ctx.fillRect(b.x0, y, Math.max(1, w - 1), modRow - 1);
      if (w > 40) {
        ctx.fillStyle = "#000";
        ctx.save();
        ctx.beginPath();
        ctx.rect(b.x0, y, w - 2, modRow);
        ctx.clip();
        ctx.fillText(Model.moduleLabel(m) + " " + Model.formatBytes(m.at_peak_bytes), b.x0 + 3, y + 13);
        ctx.restore();
      }
    }
    text($("modules-title"), d.modules.length ? "at the allocated peak, " + d.modules.length + " modules (hover for each one's parameters, activations and peaks)" : "");
  }
  on(modCanvas, "mousemove", (ev) => {
    const rect = modCanvas.getBoundingClientRect(), x = ((ev.clientX - rect.left) / rect.width) * modCanvas.width;
    const b = Model.moduleAt(modBoxes, x, Math.floor(((ev.clientY - rect.top) / rect.height) * modCanvas.height / modRow));
    text($("modules-readout"), b ? Model.moduleLine(d.modules[b.m]) : initial["modules-readout"]);
  });
  drawModules();

  on(flame, "mousemove", (ev) => {
    if (!flameLayout) return;
    const rect = flame.getBoundingClientRect(), x = ((ev.clientX - rect.left) / rect.width) * flame.width, k = Math.floor(((ev.clientY - rect.top) / rect.height) * flame.height / 18);
    const n = flameLayout.find((b) => b.k === k && x >= b.x && x < b.x + b.w);
    if (n) text($("flame-readout"), Model.frameLine(n.node, true) + ": " +
      Model.formatBytes(n.node.bytes) + " (" + (flameLayout.total ? (100 * n.node.bytes / flameLayout.total).toFixed(1) : "0") + "%)");
  });

  $("event-axis").disabled = !d.steps;
  $("colour-by").disabled = !(d.bands.categories && d.bands.categories.names.length);
  on($("colour-by"), "change", (ev) => { st.cat = ev.target.value === "categories" ? 1 : null; redraw(); });
  on($("event-axis"), "change", (ev) => { st.ev = ev.target.checked ? 1 : null; redraw(); });
  on(flame, "click", (ev) => { // click-to-zoom: a frame fills the width; the top row zooms out
    if (!flameLayout) return;
    const rect = flame.getBoundingClientRect(), x = ((ev.clientX - rect.left) / rect.width) * flame.width, k = Math.floor(((ev.clientY - rect.top) / rect.height) * flame.height / 18);
    const n = flameLayout.find((b) => b.k === k && x >= b.x && x < b.x + b.w);
    if (!n) return;
    flameZoom = k === 0 ? flameZoom.slice(0, -1) : n.path;
    showCheckpoint.force = true;
    showState();
  });
  on(spansCanvas, "mousemove", (ev) => {
    const i = spanAt(ev);
    if (i !== hoveredSpan) { hoveredSpan = i; drawSpans(); }
    if (i < 0) return;
    const g = Model.span(spanIx, i);
    text($("spans-readout"), describeSpan(g));
    if (st.pin === null) showSpan(g);
  });
  on(spansCanvas, "mouseleave", () => { if (hoveredSpan >= 0) { hoveredSpan = -1; drawSpans(); } });
  on(spansCanvas, "click", (ev) => { // the cursor, as a click on the timeline (nothing pinned)
    st.cur = toTime(spansCanvas, ev, st.t0, st.t1);
    st.step = stepper ? Model.stepAt(d, st.cur) : null;
    redraw();
  });
  // Irrelevant frames (allocator, dispatcher, interpreter: frames.c's folding) hidden or shown,
  // in the icicle graph and the stack panel.
  $("hide-frames").checked = !st.all;
  $("hide-frames").disabled = !d.all_stacks || !Object.keys(d.all_stacks).length;
  on($("hide-frames"), "change", (ev) => {
    st.all = ev.target.checked ? null : 1;
    flameZoom = [];
    if (shownStack) showStack(...shownStack);
    showCheckpoint.force = true;
    redraw();
  });
  $("temporal").checked = false;
  $("temporal").disabled = !d.steps;
  on($("temporal"), "change", (ev) => { st.temporal = ev.target.checked; showCheckpoint.force = true; redraw(); });
  fillLists("");
  fillTable();
  fillIterations();
  fillCategories();
  fillGlance();
  $("legend-categories").dataset.filled = "";
  const legendHelp = $("legend").querySelector("button.help");
  on(legendHelp, "click", () => { $("legend-help").hidden = !$("legend-help").hidden; legendHelp.setAttribute("aria-expanded", String(!$("legend-help").hidden)); });
  drawRun();
  if (st.pin !== null) showAllocation(st.pin, true);
  else if (st.leak !== null) showStack(candidateTitle(st.leak), d.candidates[st.leak].stack);
  else if (d.candidates.length) showStack(candidateTitle(0), d.candidates[0].stack);
  redraw();
  document.body.dataset.src = String(src);
  document.body.dataset.ready = "1"; // the first paint is done (the browser tests wait for it)
}

// The whole run (the run log: every iteration since recording started, or every second) above the
// timeline, which details the window the ring kept: peaks reserved (grey) and allocated (blue) a bar
// per entry, allocated at each end (a dark dot), skipped steps in orange, the window shaded and
// framed. Hidden when the window is the whole run.
function drawRunStrip(d, signal) {
  const $ = (id) => document.getElementById(id), canvas = $("run"), readout = $("run-readout");
  const strip = Model.runStrip(d, canvas.width);
  $("run-panel").hidden = !strip;
  if (!strip) return;
  const unit = strip.kind === "iterations" ? "iteration" : "second";
  $("run-title").textContent = strip.total + " " + unit + "s since recording started" +
    (d.run.iterations_per_entry > 1 && strip.kind === "iterations" ? ", " + d.run.iterations_per_entry + " a bar at the coarsest" : "") +
    (strip.window ? "; the shaded part is the timeline's window" : "");
  const ctx = canvas.getContext("2d"), W = canvas.width, H = canvas.height, y = (v) => H - 14 - (v / strip.top) * (H - 20);
  ctx.clearRect(0, 0, W, H);
  if (strip.window) {
    ctx.fillStyle = "rgba(255, 193, 7, 0.22)";
    ctx.fillRect(strip.window.x0, 0, strip.window.x1 - strip.window.x0, H - 14);
    ctx.strokeStyle = "#f9a825";
    ctx.lineWidth = 2;
    ctx.strokeRect(strip.window.x0 + 1, 1, Math.max(1, strip.window.x1 - strip.window.x0 - 2), H - 16);
  }
  for (const b of strip.bars) {
    const x0 = Math.floor(b.x0), w = Math.max(1, Math.floor(b.x1) - x0);
    ctx.fillStyle = "#cfd8dc";
    ctx.fillRect(x0, y(b.reserved), w, H - 14 - y(b.reserved));
    ctx.fillStyle = b.skipped ? "#fb8c00" : "#1e88e5";
    ctx.fillRect(x0, y(b.peak), w, H - 14 - y(b.peak));
    ctx.fillStyle = "#263238";
    ctx.fillRect(x0 + w / 2 - 1, y(b.end) - 1, 2, 2);
  }
  ctx.font = "11px sans-serif";
  ctx.fillStyle = "#37474f";
  for (let k = 0; k <= 6; k++) { // units along the bottom (text made here, never from a snapshot)
    const u = Math.round((strip.total * k) / 6), s = unit + " " + u, w = ctx.measureText(s).width;
    ctx.fillText(s, Math.max(2, Math.min(W - w - 2, (k / 6) * W - w / 2)), H - 2);
  }
  ctx.fillText(Model.formatBytes(Math.round(strip.top)), 4, 11);
  const initial = readout.textContent;
  canvas.addEventListener("mousemove", (e) => {
    const r = canvas.getBoundingClientRect(), b = Model.runBarAt(strip, ((e.clientX - r.left) / r.width) * W);
    if (!b) { readout.textContent = initial; return; }
    const last = b.first + b.count - 1;
    readout.textContent = (b.count > 1 ? unit + "s " + b.first + "-" + last : unit + " " + b.first) + ": peak allocated " +
      Model.formatBytes(b.peak) + ", peak reserved " + Model.formatBytes(b.reserved) + ", allocated at the end " + Model.formatBytes(b.end) +
      (b.told ? "; at the peak, as told: parameters " + Model.formatBytes(b.told[0]) + ", gradients " + Model.formatBytes(b.told[1]) +
        ", optimizer state " + Model.formatBytes(b.told[2]) + ", the rest " + Model.formatBytes(Math.max(0, b.peak - b.told[0] - b.told[1] - b.told[2])) : "") +
      (b.skipped ? "; " + b.skipped + " skipped step" + (b.skipped > 1 ? "s" : "") : "");
  }, { signal });
}

// The page's documents: one, or several with a selector in the header (memsnap-sources lists
// them: snapshots, or a snapshot's devices). The one shown is `src` in the URL fragment.
(function () {
  const $ = (id) => document.getElementById(id);
  if (!$("memsnap-data")) return; // another page that draws with the functions above (a prediction's)
  const list = $("memsnap-sources"), sources = list ? JSON.parse(list.textContent) : [""];
  const initial = {}; // the texts a document's views start from
  for (const id of ["readout", "state-readout", "flame-readout", "spans-readout", "details", "modules-readout", "run-readout"]) initial[id] = $(id).textContent;
  let controller = null;
  function show(k) {
    if (controller) controller.abort();
    controller = new AbortController();
    for (const [id, s] of Object.entries(initial)) $(id).textContent = s;
    $("details-title").textContent = "Stack";
    $("search").value = "";
    showDocument(Model.decode($(k ? "memsnap-data-" + k : "memsnap-data").textContent), controller.signal, k);
  }
  let k = Model.decodeState(location.hash).src;
  if (!(k >= 0 && k < sources.length)) k = 0;
  const select = $("source");
  $("source-box").hidden = sources.length < 2;
  sources.forEach((name, i) => { const o = document.createElement("option"); o.value = String(i); o.textContent = name; select.appendChild(o); });
  select.value = String(k);
  select.addEventListener("change", () => {
    history.replaceState(null, "", "#src=" + select.value);
    show(Number(select.value));
  });
  show(k);
})();
