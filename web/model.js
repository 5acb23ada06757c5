// model.js: the viewer's data code, apart from drawing (tested with node: tests/web/model.test.js).
//
// The page's data is one JSON document embedded by `memsnap analyze --html` (analyzer/report/page.c,
// analyzer/analysis/timeline.c; docs/viewer.md describes it): curves as columns ({t: [...], lo: [...],
// hi: [...]}: per time bucket, the lowest and highest value, so a zoomed-out view never loses a
// peak), allocated memory by site as bands, the largest allocations one by one (detail),
// checkpoints of the allocator's state (segments as runs of blocks, live bytes by site),
// iterations, leak candidates, OOMs, the allocator's retries, the replay's suggestions, each
// segment's life (segment_spans), and stacks through a
// string table (the frames that matter, and the whole stacks behind them). Nothing here touches
// the DOM: view.js draws what these functions give.
"use strict";

const Model = {
  // Decodes the embedded JSON text into the model; throws on a document of another format.
  decode(text) {
    const d = JSON.parse(text);
    if (!d || d.format !== "memsnap-viewer-2") throw new Error("not a memsnap viewer document");
    // the candidates the page selects by index: those that grew (leaks), then what is held since
    // the start and does not grow (held); documents from before the split list all in leaks
    d.candidates = (d.leaks || []).concat(d.held || []);
    d.modules = d.modules || [];
    // the iterations before the ring's window (the run log's: `memsnap analyze --json`) go to the
    // whole run's strip (runStrip); every other view shows the window's
    const its = d.iterations || [];
    d.run_before = its.filter((it) => it.before_window === true);
    d.iterations = its.filter((it) => it.before_window !== true);
    return d;
  },

  // The whole run (the run log) as bars across `width` pixels: by iteration when the run has any,
  // else by second (no step recorded, and the history truncated or without iterations of its
  // own). Returns null when there is nothing the window does not show already (no iteration
  // before the window, and no more than a second by time); else {kind: "iterations" or
  // "seconds", total (units), bars: [{first, count, x0, x1, peak, reserved, end, skipped, told}], top
  // (the highest reserved or allocated peak), window: {x0, x1} or null (where the window lies)}.
  runStrip(d, width) {
    const run = d.run;
    if (!run) return null;
    const bars = [], num = (v) => (typeof v === "number" && isFinite(v) ? v : 0);
    // the roles told at an entry's peak (parameters, gradients, optimizer state), null when none
    const told = (e) => { const t = e.told_at_peak || {}, v = [num(t.parameter), num(t.gradient), num(t.optimizer_state)];
      return v[0] + v[1] + v[2] > 0 ? v : null; };
    let kind = "iterations", total = num(run.iterations), win = null;
    if (total > 0 && (d.run_before || []).length) {
      for (const it of d.run_before) bars.push({ first: num(it.run_index), count: Math.max(1, num(it.count)), peak: num(it.peak_allocated_bytes),
        reserved: num(it.peak_reserved_bytes), end: num(it.end_allocated_bytes), skipped: num(it.skipped_count), told: told(it) });
      if (run.window_first_iteration != null) {
        const first = num(run.window_first_iteration);
        d.iterations.forEach((it, i) => bars.push({ first: first + i, count: 1, peak: num(it.peak_allocated_bytes),
          reserved: num(it.peak_reserved_bytes), end: num(it.end_allocated_bytes), skipped: it.skipped ? 1 : 0 }));
        win = { first, last: first + d.iterations.length };
      }
    } else if (!total && (run.by_time || []).length > 1 && (!(d.iterations || []).length || (d.summary && d.summary.dropped_events))) {
      kind = "seconds";
      total = num(run.seconds);
      const t0 = d.summary ? num(d.summary.first_ns) : 0, t1 = d.summary ? num(d.summary.last_ns) : 0;
      for (const e of run.by_time) {
        const b = { first: num(e.first_second), count: Math.max(1, num(e.count)), peak: num(e.peak_allocated_bytes),
          reserved: num(e.peak_reserved_bytes), end: num(e.end_allocated_bytes), skipped: 0, told: told(e) };
        bars.push(b);
        if (num(e.end_ns) >= t0 && num(e.start_ns) <= t1) // the window's events fall in this entry
          win = win ? { first: win.first, last: b.first + b.count } : { first: b.first, last: b.first + b.count };
      }
    } else {
      return null;
    }
    total = Math.max(total, ...bars.map((b) => b.first + b.count), 1);
    const x = (u) => (u / total) * width;
    let top = 1;
    for (const b of bars) {
      b.x0 = x(b.first);
      b.x1 = Math.max(b.x0 + 1, x(b.first + b.count));
      top = Math.max(top, b.peak, b.reserved);
    }
    return { kind, total, bars, top, window: win ? { x0: x(win.first), x1: Math.max(x(win.first) + 2, x(win.last)) } : null };
  },

  // The bar of runStrip at pixel x, or null.
  runBarAt(strip, x) {
    return strip ? strip.bars.find((b) => x >= b.x0 && x < b.x1) || null : null;
  },

  // The module tree as an icicle: each module a box [x0, x1) of `width` in its depth's row, as
  // wide as what its calls made that was live at the peak (its submodules' inside it), roots side
  // by side. Returns [{m (index into d.modules), depth, x0, x1}], parents before children; none
  // when nothing was live at the peak by module.
  moduleBoxes(d, width) {
    const mods = d.modules || [], kids = mods.map(() => []), roots = [], out = [];
    mods.forEach((m, i) => { if (m.parent >= 0 && m.parent < mods.length) kids[m.parent].push(i); else roots.push(i); });
    const total = roots.reduce((s, i) => s + Math.max(0, mods[i].at_peak_bytes), 0);
    if (!(total > 0)) return out;
    const lay = (list, x0, scale, depth) => {
      let x = x0;
      for (const i of list) {
        const w = Math.max(0, mods[i].at_peak_bytes) * scale;
        if (w <= 0) continue;
        out.push({ m: i, depth, x0: x, x1: x + w });
        lay(kids[i], x, scale, depth + 1);
        x += w;
      }
    };
    lay(roots, 0, width / total, 0);
    return out;
  },

  // A module's name in its box: its last part, with the one before for an index ("h.3", "mlp").
  moduleLabel(m) {
    const parts = String(m.name).split(".");
    const last = parts.pop();
    return /^\d+$/.test(last) && parts.length ? parts.pop() + "." + last : last;
  },

  // The box of moduleBoxes at (x, depth), or null.
  moduleAt(boxes, x, depth) {
    return boxes.find((b) => b.depth === depth && x >= b.x0 && x < b.x1) || null;
  },

  // One module's figures as a line: "transformer.h.3: 42.00 MiB at the peak; parameters ...".
  moduleLine(m) {
    const f = (k, what) => (m[k] ? ", " + what + " " + Model.formatBytes(m[k]) : "");
    return m.name + ": " + Model.formatBytes(m.at_peak_bytes) + " at the peak" + f("parameter_bytes", "parameters") +
      f("gradient_bytes", "gradients") + f("activation_bytes", "activations") + f("saved_bytes", "saved for backward a call") +
      f("forward_peak_bytes", "forward peak") + f("backward_peak_bytes", "backward peak") +
      " (" + m.forward_calls + " forward, " + m.backward_calls + " backward calls)";
  },

  // Frames of a stack as {name, file, line, full, inlined}, innermost first ([] for an unknown
  // stack): name is the short one that lists show, full the whole name (the hover's). The frames
  // that matter, or with `whole` every frame (d.all_stacks holds the stacks that differ).
  stackFrames(d, stackId, whole) {
    const ids = (whole && d.all_stacks && d.all_stacks[stackId]) || d.stacks[stackId] || [];
    return ids.map((f) => {
      const fr = d.frames[f] || [0, 0, 0];
      const name = d.strings[fr[0]] || "";
      return { name, file: d.strings[fr[1]] || "", line: fr[2] || 0, full: fr.length > 3 ? d.strings[fr[3]] || name : name, inlined: fr[4] === 1 };
    });
  },

  // A frame as one line: "name  (file:line)", marked when inlined; with whole = true, its whole name.
  frameLine(f, whole) {
    const where = f.file ? "  (" + f.file + (f.line > 0 ? ":" + f.line : "") + (f.inlined ? ", inlined" : "") + ")" : "";
    return (whole ? f.full : f.name) + where;
  },

  // "file.py:12" for a frame with a line (the file's last component), else "".
  fileLine(f) { return f && f.file && f.line > 0 ? f.file.slice(f.file.lastIndexOf("/") + 1) + ":" + f.line : ""; },

  // The user's frame of a stack (frames innermost first): the first with a line whose file is not
  // a library's (site-packages, dist-packages, the interpreter's lib/python, torch/), else the first
  // with a line; null when none has one.
  userFrame(frames) {
    const lib = /(^|\/)(site-packages|dist-packages|lib\/python[0-9.]*|torch)\//;
    return frames.find((f) => f.line > 0 && f.file && !lib.test(f.file)) || frames.find((f) => f.line > 0 && f.file) || null;
  },

  // How lists name a site: the frame that allocated, then the user's frame with its file:line
  // ("at::native::clone() \u2190 train (train.py:40)"; a "<module>" frame reads as its file:line).
  siteLabel(frames) {
    const top = frames[0];
    if (!top) return "(no stack recorded)";
    const user = Model.userFrame(frames), where = (f) => (f.name === "<module>" ? "" : f.name + " ") + "(" + Model.fileLine(f) + ")";
    if (!user) return top.name;
    return user === top ? where(top) : top.name + " \u2190 " + where(user);
  },

  // How a growing candidate grew, as the text report says it: "+40.00 MiB every 4 iterations"
  // (growth in steps, leaks.c: its `every`), else "+1.00 MiB per iteration".
  growthText(l) {
    const e = l.every;
    if (!e) return "+" + Model.formatBytes(l.bytes_per_iteration) + " per iteration";
    return "+" + Model.formatBytes(e.bytes_per_step) + " every " + (e.min_iterations === e.max_iterations ? e.min_iterations : e.min_iterations + " to " + e.max_iterations) + " iterations";
  },

  // An autograd graph candidate (the JSON's kept_graphs: kept_graphs.c) in the text report's words:
  // its bytes and graphs, the forward's module and the line that called it, what keeps it (its
  // holders: what holds the tensor whose autograd graph it is), what to change.
  keptGraphText(g) {
    const at = g.forward_called_at, file = at ? (at.file || at.module || "") : "";
    const where = at ? " at " + at.short_name + " (" + file.slice(file.lastIndexOf("/") + 1) + (at.line > 0 ? ":" + at.line : "") + ")" : "";
    const module = g.forward_module ? " of " + g.forward_module.slice(g.forward_module.indexOf(".") + 1) : "";
    const iterations = g.first_iteration === g.last_iteration ? "iteration " + g.first_iteration : "iterations " + g.first_iteration + " to " + g.last_iteration;
    return Model.formatBytes(g.live_bytes) + " in " + g.graphs + " autograd graph" + (g.graphs === 1 ? "" : "s") + " kept alive: the forward" + module + where +
      " ran with grad enabled and no backward (" + iterations + "); what it returned " + (g.holders && g.holders.length ? "is kept by " + g.holders[0].kept_by : "(its loss or output) is still held") +
      ", and with it every tensor it saved for backward;" +
      " use torch.no_grad() for that forward, or keep loss.item() instead of the loss";
  },

  // Re-buckets a min/max curve for `width` pixels between t0 and t1, keeping every peak: each
  // pixel gets the lowest lo and the highest hi of the buckets it covers.
  resample(curve, t0, t1, width) {
    const span = t1 - t0 || 1;
    return Model.resampleBy(curve, width, (t) => Math.floor(((t - t0) / span) * width));
  },
  // The same with pixelOf(t) giving each time's pixel (< 0 before the first, >= width after).
  resampleBy(curve, width, pixelOf) {
    const lo = new Array(width).fill(Infinity), hi = new Array(width).fill(-Infinity);
    let last = -1;
    for (let i = 0; i < curve.t.length; i++) {
      const x = pixelOf(curve.t[i]);
      if (x < 0) { last = i; continue; }
      if (x >= width) break;
      lo[x] = Math.min(lo[x], curve.lo[i]);
      hi[x] = Math.max(hi[x], curve.hi[i]);
    }
    // Pixels without a bucket carry the value in force (the last bucket before them).
    let cur = last >= 0 ? curve.hi[last] : 0;
    for (let x = 0; x < width; x++) {
      if (hi[x] === -Infinity) { lo[x] = hi[x] = cur; } else { cur = hi[x]; }
    }
    return { lo, hi };
  },

  // The event-index axis (PyTorch's memory viz draws this way): for the window [t0, t1], the time
  // at the left edge of each of `width` pixels when the window's events (d.steps) are spread evenly
  // over the width, so a stretch with many events gets as many pixels as it has events, however
  // short. Null without events in the window.
  eventEdges(d, t0, t1, width) {
    const ts = d.steps && d.steps.t;
    if (!ts || !ts.length) return null;
    const a = Model.stepAt(d, t0 - 1) + 1, b = Model.stepAt(d, t1);
    if (b < a) return null;
    const n = b - a + 1, edges = new Array(width);
    for (let px = 0; px < width; px++) edges[px] = ts[a + Math.floor((px * n) / width)];
    edges[0] = Math.min(edges[0], t0);
    edges.end = t1;
    return edges;
  },

  // The pixel of time t on an axis given by its edges (eventEdges): -1 before it, width after it.
  pixelOf(edges, t) {
    if (t < edges[0]) return -1;
    if (t > edges.end) return edges.length;
    let a = 0, b = edges.length - 1;
    while (a < b) { const m = (a + b + 1) >> 1; if (edges[m] <= t) a = m; else b = m - 1; }
    return a;
  },

  // resample() and bandColumns() on an axis given by its edges.
  resampleEdges(curve, edges) { return Model.resampleBy(curve, edges.length, (t) => Model.pixelOf(edges, t)); },
  bandColumnsEdges(bands, edges) { return Model.bandColumnsBy(bands, edges.length, (t) => Model.pixelOf(edges, t)); },

  // For each of `width` pixels between t0 and t1, the bucket of `bands` to draw there: the one
  // whose total (all bands) is highest among the buckets in that pixel, so the stacked drawing
  // keeps every peak; a pixel without a bucket repeats the last one before it (-1: none yet).
  bandColumns(bands, t0, t1, width) {
    const span = t1 - t0 || 1;
    return Model.bandColumnsBy(bands, width, (t) => Math.floor(((t - t0) / span) * width));
  },
  bandColumnsBy(bands, width, pixelOf) {
    const cols = new Array(width).fill(-1), best = new Array(width).fill(-Infinity);
    let before = -1;
    for (let i = 0; i < bands.t.length; i++) {
      const x = pixelOf(bands.t[i]);
      if (x < 0) { before = i; continue; }
      if (x >= width) break;
      let total = 0;
      for (const col of bands.bytes) total += col[i];
      if (total > best[x]) { best[x] = total; cols[x] = i; }
    }
    let cur = before;
    for (let x = 0; x < width; x++) { if (cols[x] < 0) cols[x] = cur; else cur = cols[x]; }
    return cols;
  },

  // The band under height `v` (bytes from the bottom) in bucket i: its index, or -1 above them.
  bandAt(bands, i, v) {
    let sum = 0;
    for (let k = 0; k < bands.bytes.length; k++) {
      sum += bands.bytes[k][i];
      if (v < sum) return k;
    }
    return -1;
  },

  // The value of a curve at time t (the last bucket at or before t): {lo, hi} or null.
  valueAt(curve, t) {
    let a = 0, b = curve.t.length - 1, found = -1;
    while (a <= b) {
      const m = (a + b) >> 1;
      if (curve.t[m] <= t) { found = m; a = m + 1; } else { b = m - 1; }
    }
    return found < 0 ? null : { lo: curve.lo[found], hi: curve.hi[found] };
  },

  // Leak candidates, OOMs and retries whose stack mentions `text` (case-insensitive) in a frame's
  // name or file.
  search(d, text) {
    const q = String(text).trim().toLowerCase();
    if (!q) return [];
    const hits = [];
    const matches = (stackId) => Model.stackFrames(d, stackId).some(
      (f) => f.full.toLowerCase().includes(q) || f.file.toLowerCase().includes(q));
    (d.candidates || (d.leaks || []).concat(d.held || [])).forEach((l, i) => { if (matches(l.stack)) hits.push({ kind: "leak", index: i }); });
    d.oom.forEach((o, i) => { if (matches(o.stack)) hits.push({ kind: "oom", index: i }); });
    (d.retries || []).forEach((r, i) => { if (matches(r.stack)) hits.push({ kind: "retry", index: i }); });
    return hits;
  },

  // A request the allocator released cached memory for and retried (d.retries' entry), as the
  // text report says it, `at` the time as shown: "at 4.0 ms: 70.00 GiB requested; the allocator
  // released 60.13 GiB of cached segments and retried: served (3 segments)".
  retryLine(r, at) {
    const what = r.released === "oversize_blocks" ? "oversize cached blocks" : "cached segments";
    return "at " + at + ": " + Model.formatBytes(r.requested_bytes) + " requested; the allocator released " + Model.formatBytes(r.released_bytes) +
      " of " + what + " and retried: " + (r.succeeded ? "served" : "out of memory") + " (" + r.segments_released + " segment" +
      (r.segments_released === 1 ? "" : "s") + (r.unmapped_bytes ? ", pages unmapped" : "") + ")";
  },

  // A suggestion (d.suggestions' entry) as the line to set, and what it did in the replay against
  // `baseline` (the recorded settings' replayed peak reserved bytes).
  suggestionLine(s) {
    return "PYTORCH_CUDA_ALLOC_CONF=" + (s.pytorch_cuda_alloc_conf || "(unset: the defaults)") +
      (s.memory_fraction != null ? " with torch.cuda.set_per_process_memory_fraction(" + s.memory_fraction + ")" : "");
  },
  suggestionEffect(s, baseline) {
    if (s.fits) return "the recorded out of memory does not happen; peak reserved " + Model.formatBytes(s.peak_reserved_bytes);
    return "peak reserved " + Model.formatBytes(s.peak_reserved_bytes) + ", " + Model.formatBytes(s.saved_bytes) + " (" +
      (baseline > 0 ? ((100 * s.saved_bytes) / baseline).toFixed(1) : "0.0") + "%) less";
  },

  // The detailed allocations of band k live at time t, in allocation order (the order the band
  // stacks them in, oldest at the bottom): their indices into d.detail.
  liveInBand(d, k, t) {
    const dt = d.detail, out = [];
    for (let i = 0; i < dt.alloc.length && dt.alloc[i] <= t; i++) {
      if (dt.free[i] >= 0 && dt.free[i] <= t) continue;
      const site = d.sites[dt.site[i]];
      if (site && site[2] === k) out.push(i);
    }
    return out;
  },

  // What lies `offset` bytes above the bottom of band k in bucket i (drawn at the bucket's
  // peak moment bands.tp[i]): {alloc: index into d.detail}, or {small: bytes} for the part of
  // the band made of allocations too small to be listed one by one.
  allocationAt(d, i, k, offset) {
    const t = d.bands.tp ? d.bands.tp[i] : d.bands.t[i];
    let base = 0;
    for (const j of Model.liveInBand(d, k, t)) {
      base += d.detail.size[j];
      if (offset < base) return { alloc: j };
    }
    return { small: Math.max(0, d.bands.bytes[k][i] - base) };
  },

  // The allocation `j` of d.detail as plain values (times in ns; free -1: alive at the end).
  allocation(d, j) {
    const dt = d.detail, site = d.sites[dt.site[j]] || [0, -1, -1];
    return { index: j, alloc: dt.alloc[j], free: dt.free[j], size: dt.size[j], requested: dt.requested[j],
      addr: dt.addr[j], stream: dt.stream[j], stack: site[0], leak: site[1], band: site[2] };
  },

  // The checkpoint nearest to time t: its index, or -1 when there is none. Of checkpoints at one
  // time (an out of memory on an evenly spaced time, or on a peak in microsecond-resolution
  // PyTorch snapshots), the one that names what happened there: out of memory, then the peak,
  // an iteration's peak, the end, and a plain time last.
  checkpointNear(d, t) {
    const rank = { oom: 4, peak: 3, "iteration peak": 2, end: 1 };
    let best = -1, dist = Infinity;
    d.checkpoints.forEach((c, i) => {
      const x = Math.abs(c.t - t);
      if (x < dist || (x === dist && (rank[c.kind] || 0) > (rank[d.checkpoints[best].kind] || 0))) { dist = x; best = i; }
    });
    return best;
  },

  // A checkpoint's segments, each with its runs ({state: "free"|"allocated"|"pending", size,
  // count, offset}), and totals: cached free bytes, in how many pieces, the largest piece, and
  // of those the free bytes and pieces inside partly used segments (splitFree, splitPieces: the
  // fragmentation; a wholly free segment is not fragmented).
  segments(cp) {
    const states = ["free", "allocated", "pending"], segs = [];
    let r = 0, freeBytes = 0, pieces = 0, largest = 0, splitFree = 0, splitPieces = 0;
    for (let s = 0; s + 4 < cp.segs.length; s += 5) {
      const seg = { addr: cp.segs[s], size: cp.segs[s + 1], stream: cp.segs[s + 2], device: cp.segs[s + 3], runs: [] };
      let off = 0;
      for (let n = 0; n < cp.segs[s + 4] && r + 2 < cp.runs.length; n++, r += 3) {
        const run = { state: states[cp.runs[r]] || "free", size: cp.runs[r + 1], count: cp.runs[r + 2], offset: off };
        off += run.size;
        seg.runs.push(run);
        if (run.state === "free") { freeBytes += run.size; pieces++; largest = Math.max(largest, run.size); }
      }
      if (seg.runs.length > 1) for (const run of seg.runs) if (run.state === "free") { splitFree += run.size; splitPieces++; }
      segs.push(seg);
    }
    return { segs, freeBytes, pieces, largest, splitFree, splitPieces };
  },

  // Memory at a checkpoint by stack, as a tree for an icicle graph: {name, full, file, line,
  // inlined, bytes, children}, the root being everything live, children the outermost frames first;
  // with `whole`, every frame of the stacks (irrelevant frames not hidden).
  flameTree(d, cp, whole) {
    const root = { name: "all live memory", full: "all live memory", file: "", line: 0, bytes: 0, children: [], index: new Map() };
    const add = (path, bytes) => {
      let node = root;
      root.bytes += bytes;
      for (const f of path) {
        const key = (f.full || f.name) + "\u0000" + f.file + "\u0000" + f.line;
        let child = node.index.get(key);
        if (!child) {
          child = { key, name: f.name, full: f.full || f.name, file: f.file, line: f.line, inlined: !!f.inlined, bytes: 0, children: [], index: new Map() };
          node.index.set(key, child);
          node.children.push(child);
        }
        child.bytes += bytes;
        node = child;
      }
    };
    for (let i = 0; i + 1 < cp.sites.length; i += 2) {
      const site = d.sites[cp.sites[i]];
      const frames = site ? Model.stackFrames(d, site[0], whole).slice().reverse() : [];
      add(frames.length ? frames : [{ name: "(no stack recorded)", file: "", line: 0 }], cp.sites[i + 1]);
    }
    if (cp.other > 0) add([{ name: "(smaller sites)", file: "", line: 0 }], cp.other);
    const sort = (n) => { n.children.sort((a, b) => b.bytes - a.bytes); n.children.forEach(sort); };
    sort(root);
    return root;
  },

  // The allocator's state after event i of d.steps (the alloc, free and segment events, replayed
  // from the state when the history starts), as a checkpoint ({t, kind: "event", index: i,
  // allocated, reserved, pending, segs, runs, sites}) that segments() and flameTree() read.
  // A stepper keeps its replay: stepping forward replays only the new events.
  stepper(d) {
    const s = d.steps;
    let blocks, segs, allocated, reserved, pending, at;
    const reset = () => {
      blocks = new Map(); segs = []; at = -1;
      allocated = s.start.allocated; reserved = s.start.reserved; pending = 0;
      for (let i = 0; i + 2 < s.start.blocks.length; i += 3) blocks.set(s.start.blocks[i], { size: s.start.blocks[i + 1], site: s.start.blocks[i + 2], pending: false });
      for (let i = 0; i + 3 < s.start.segs.length; i += 4) segs.push({ addr: s.start.segs[i], size: s.start.segs[i + 1], stream: s.start.segs[i + 2], device: s.start.segs[i + 3] });
    };
    const cut = (addr, size) => { // unmapped pages leave what is around them
      const out = [];
      for (const g of segs) {
        const end = g.addr + g.size, cend = addr + size;
        if (cend <= g.addr || addr >= end) { out.push(g); continue; }
        if (addr > g.addr) out.push(Object.assign({}, g, { size: addr - g.addr }));
        if (cend < end) out.push(Object.assign({}, g, { addr: cend, size: end - cend }));
      }
      segs = out;
    };
    const apply = (i) => {
      const kind = s.kind[i], addr = s.addr[i], size = s.size[i];
      const b = blocks.get(addr);
      if (kind === 1) { // alloc (a pending block at the address is reused)
        if (b && b.pending) pending -= b.size;
        else if (b) allocated -= b.size;
        blocks.set(addr, { size, req: s.req ? s.req[i] : size, site: s.site[i], pending: false });
        allocated += size;
      } else if (kind === 2 && b && !b.pending) { b.pending = true; allocated -= b.size; pending += b.size; }
      else if (kind === 3 && b && b.pending) { blocks.delete(addr); pending -= b.size; }
      else if (kind === 4 || kind === 11) {
        reserved += size;
        const prev = segs.find((g) => g.addr + g.size === addr);
        if (kind === 11 && prev) prev.size += size;
        else segs.push({ addr, size, stream: 0, device: 0 });
      } else if (kind === 5) { reserved -= size; segs = segs.filter((g) => g.addr !== addr); }
      else if (kind === 12) { reserved -= size; cut(addr, size); }
    };
    reset();
    return {
      count: s.t.length,
      at(i) {
        i = Math.max(-1, Math.min(s.t.length - 1, i));
        if (i < at) reset();
        for (let k = at + 1; k <= i; k++) apply(k);
        at = i;
        return Model.layOut({ t: i >= 0 ? s.t[i] : d.summary.first_ns, kind: "event", index: i, allocated, reserved, pending }, blocks, segs);
      },
    };
  },

  // Fills a checkpoint's segs, runs and sites (the embedded checkpoints' form) from live blocks
  // (address -> {size, site, pending}) and segments ({addr, size, stream, device}).
  layOut(cp, blocks, segs) {
    const sorted = [...blocks.entries()].sort((a, b) => a[0] - b[0]), order = segs.slice().sort((a, b) => a.addr - b.addr);
    cp.segs = []; cp.runs = []; cp.sites = []; cp.other = 0; cp.omitted = 0;
    cp.rounding = 0; // allocated but not requested: internal fragmentation
    for (const [, blk] of sorted) if (!blk.pending && blk.req !== undefined && blk.req < blk.size) cp.rounding += blk.size - blk.req;
    let b = 0;
    for (const g of order) {
      const end = g.addr + g.size, runs = [];
      const run = (state, size) => {
        if (size <= 0) return;
        const last = runs[runs.length - 1];
        if (last && last[0] === state) { last[1] += size; last[2] += state ? 1 : 0; } else runs.push([state, size, state ? 1 : 0]);
      };
      let at = g.addr;
      while (b < sorted.length && sorted[b][0] < g.addr) b++;
      for (; b < sorted.length && sorted[b][0] < end; b++) {
        const [addr, blk] = sorted[b];
        if (addr < at || addr + blk.size > end) continue;
        run(0, addr - at);
        run(blk.pending ? 2 : 1, blk.size);
        at = addr + blk.size;
      }
      run(0, end - at);
      cp.segs.push(g.addr, g.size, g.stream, g.device, runs.length);
      for (const r of runs) cp.runs.push(r[0], r[1], r[2]);
    }
    const bySite = new Map();
    for (const [, blk] of sorted) if (!blk.pending) bySite.set(blk.site, (bySite.get(blk.site) || 0) + blk.size);
    [...bySite.entries()].sort((x, y) => y[1] - x[1]).forEach(([site, bytes]) => cp.sites.push(site, bytes));
    return cp;
  },

  // memray's temporal mode: what was allocated between t0 and t1 and not freed by t1, by site, as
  // a checkpoint's `sites` (for flameTree), from the embedded events.
  temporal(d, t0, t1) {
    const s = d.steps, live = new Map();
    for (let i = Model.stepAt(d, t0 - 1) + 1; i < s.t.length && s.t[i] <= t1; i++) {
      if (s.kind[i] === 1) live.set(s.addr[i], [s.site[i], s.size[i]]);
      else if (s.kind[i] === 2) live.delete(s.addr[i]);
    }
    const bySite = new Map();
    for (const [site, size] of live.values()) bySite.set(site, (bySite.get(site) || 0) + size);
    const cp = { t: t1, kind: "temporal", sites: [], other: 0 };
    [...bySite.entries()].sort((x, y) => y[1] - x[1]).forEach(([site, bytes]) => cp.sites.push(site, bytes));
    return cp;
  },

  // The table of sites (d.site_table) as rows {site, stack, label, frames, alloc, count, live,
  // blocks, thread, stream}, those whose frames or label mention `q` (case-insensitive), sorted by
  // column `col` (descending unless `asc`; labels alphabetically).
  siteRows(d, q, col, asc) {
    const needle = String(q || "").trim().toLowerCase();
    const rows = (d.site_table || []).map((r) => {
      const site = d.sites[r[0]] || [0, -1, -1], frames = Model.stackFrames(d, site[0]);
      return { site: r[0], stack: site[0], leak: site[1], frames, label: Model.siteLabel(frames), alloc: r[1], count: r[2], live: r[3], blocks: r[4], thread: r[5], stream: r[6] };
    }).filter((r) => !needle || r.label.toLowerCase().includes(needle) ||
      r.frames.some((f) => f.full.toLowerCase().includes(needle) || f.file.toLowerCase().includes(needle)));
    const key = col || "alloc", sign = asc ? 1 : -1;
    rows.sort((a, b) => (key === "label" ? sign * a.label.localeCompare(b.label) : sign * (a[key] - b[key])) || a.site - b.site);
    return rows;
  },

  // The segment timeline's index of d.segment_spans (each segment's life; PyTorch's memory viz
  // calls its view "Active Cached Segment Timeline"): the spans' starts and ends as events in
  // time order (ends first at one time), the reserved total after each, and each span's start
  // and end positions among them (end: Infinity while it lives). Null without spans.
  spanIndex(d) {
    const sp = d.segment_spans;
    if (!sp || !sp.addr || !sp.addr.length) return null;
    const n = sp.addr.length, ev = [];
    for (let i = 0; i < n; i++) {
      ev.push([sp.start[i], 1, i]);
      if (sp.end[i] >= 0) ev.push([sp.end[i], 0, i]);
    }
    ev.sort((a, b) => a[0] - b[0] || a[1] - b[1] || a[2] - b[2]);
    const t = new Float64Array(ev.length), total = new Float64Array(ev.length), spos = new Int32Array(n), epos = new Float64Array(n).fill(Infinity);
    let sum = 0;
    ev.forEach(([time, start, i], k) => {
      t[k] = time;
      sum += start ? sp.size[i] : -sp.size[i];
      total[k] = sum;
      if (start) spos[i] = k; else epos[i] = k;
    });
    // the lowest start position of spans i..n-1, to stop early (spans are in start order)
    const after = new Float64Array(n + 1).fill(Infinity);
    for (let i = n - 1; i >= 0; i--) after[i] = Math.min(spos[i], after[i + 1]);
    return { n, t, total, spos, epos, after, sp };
  },

  // For each column between consecutive times of `bounds` (W + 1 of them, the columns' edges),
  // the event position whose state the column shows: the one in the column with the highest
  // reserved total (so no peak is lost), else the last one before it (-1: none yet).
  spanColumns(ix, bounds) {
    const W = bounds.length - 1, pos = new Int32Array(W);
    let k = 0;
    while (k < ix.t.length && ix.t[k] < bounds[0]) k++;
    for (let px = 0; px < W; px++) {
      let best = -1;
      for (; k < ix.t.length && (ix.t[k] < bounds[px + 1] || (px === W - 1 && ix.t[k] <= bounds[W])); k++)
        if (best < 0 || ix.total[k] > ix.total[best]) best = k;
      pos[px] = best >= 0 ? best : k - 1; // none in the column: the state after the last event before it
    }
    return pos;
  },

  // The spans alive after event position p, bottom first (in start order): their indices.
  spansAt(ix, p) {
    const out = [];
    for (let i = 0; i < ix.n && ix.after[i] <= p; i++) if (ix.spos[i] <= p && ix.epos[i] > p) out.push(i);
    return out;
  },

  // Span i as plain values: {index, addr, size, start, end (-1: alive at the end), stream,
  // device, stack, before (from before the history), unknown (its ranges unknown)}.
  span(ix, i) {
    const sp = ix.sp, stack = sp.stack[i];
    return { index: i, addr: sp.addr[i], size: sp.size[i], start: sp.start[i], end: sp.end[i], stream: sp.stream[i], device: sp.device[i],
      stack: Math.max(0, stack), before: stack === -1, unknown: stack === -1 && sp.addr[i] === 0 };
  },

  // The span holding `addr` at time t (the one that started last when several do), or -1:
  // what allocated a segment of the allocator state.
  spanOf(ix, addr, t) {
    const sp = ix.sp;
    let found = -1;
    for (let i = 0; i < ix.n; i++)
      if (sp.addr[i] <= addr && addr < sp.addr[i] + sp.size[i] && sp.start[i] <= t && (sp.end[i] < 0 || sp.end[i] > t) &&
        !(sp.stack[i] === -1 && sp.addr[i] === 0)) found = i;
    return found;
  },

  // The last step at or before time t (-1: none).
  stepAt(d, t) {
    const ts = d.steps.t;
    let a = 0, b = ts.length - 1, found = -1;
    while (a <= b) { const m = (a + b) >> 1; if (ts[m] <= t) { found = m; a = m + 1; } else b = m - 1; }
    return found;
  },

  // A leak candidate's growth chart: its live bytes at the end of each iteration with the scale
  // that shows their differences (from just under the lowest to the highest), or null.
  growth(leak) {
    const v = leak && leak.per_iteration;
    if (!v || !v.length) return null;
    const lo = Math.min(...v), hi = Math.max(...v), pad = (hi - lo) * 0.1 || Math.max(hi * 0.1, 1);
    return { values: v, min: Math.max(0, lo - pad), max: hi, first: v[0], last: v[v.length - 1],
      perIteration: v.length > 1 ? (v[v.length - 1] - v[0]) / (v.length - 1) : 0 };
  },

  // What holds a leak candidate, as lines of text (the JSON's holders, reference_cycles, gc_frees
  // and cycles: docs/analysis-json.md): each holder chain with the blocks alike, then the reference
  // cycles' line and its fix, then the cycles the collector found holding its tensors. Empty when the snapshot says nothing of it.
  causeLines(leak) {  // a kept graph (kept_graphs) too: its holders alone
    const out = [];
    (leak && leak.holders || []).forEach((h, i) => {
      out.push((i ? "also held by: " : "held by: ") + h.holder + (h.blocks > 1 ? " (" + h.blocks + " blocks alike)" : ""));
    });
    if (leak && leak.reference_cycles) {
      const g = leak.gc_frees || {};
      out.push("held by reference cycles: " + (g.by_collector ? "only the garbage collector freed it (" + g.by_collector + " of " +
        g.frees + " frees, " + Model.formatBytes(g.bytes) + ", in " + g.runs + " runs)" : "its tensors are reachable only from objects that refer to each other") +
        "; fix: break the cycle where it is made, or call gc.collect() every N steps");
    }
    (leak && leak.cycles || []).forEach((c) => { // the cycles the collector found (MEMSNAP_GC_CYCLES)
      out.push("cycle: " + c.types + ": " + c.edges + " (" + c.cycles + " cycle" + (c.cycles === 1 ? "" : "s") + ", " + c.tensors +
        " CUDA tensor" + (c.tensors === 1 ? "" : "s") + ", " + Model.formatBytes(c.tensor_bytes) + ")");
    });
    return out;
  },

  // The garbage collector's runs that freed device memory, for the timeline's markers: [{t, label}].
  gcMarkers(d) {
    const runs = d.gc && d.gc.freeing_runs || [];
    return runs.map((r) => ({ t: r.start_ns, label: "gc " + r.generation + ": " + Model.formatBytes(r.freed_bytes) }));
  },

  // Detailed allocations whose address range holds the number `text` (hex with 0x, or decimal).
  searchAddress(d, text) {
    const q = String(text).trim().toLowerCase();
    if (!/^(0x[0-9a-f]+|\d+)$/.test(q)) return [];
    const a = Number(BigInt(q)); // BigInt reads both forms
    const hits = [];
    for (let j = 0; j < d.detail.addr.length && hits.length < 100; j++)
      if (a >= d.detail.addr[j] && a < d.detail.addr[j] + d.detail.size[j]) hits.push(j);
    return hits;
  },

  // ---- the page of a prediction (`memsnap predict --html`; predict.js draws it) -------------
  //
  // Its document (analyzer/report/page_predict.c, format memsnap-prediction-1): `answer`, the
  // --json answer; `recorded`, the run whose history is synthesised, with its curves; `predicted`,
  // each history drawn with its replay's curves and peaks; `card_bytes`, the card given or null.

  // Decodes the prediction page's JSON text; throws on a document of another format.
  decodePrediction(text) {
    const p = JSON.parse(text);
    if (!p || p.format !== "memsnap-prediction-1") throw new Error("not a memsnap prediction document");
    p.predicted = p.predicted || [];
    return p;
  },

  // A curve's highest value and the time of its first bucket that reaches it: {t, v}, or null.
  curvePeak(curve) {
    let best = -1;
    for (let i = 0; i < curve.hi.length; i++) if (best < 0 || curve.hi[i] > curve.hi[best]) best = i;
    return best < 0 ? null : { t: curve.t[best], v: curve.hi[best] };
  },

  // What the page's timelines share: the time window (the recorded run's span, which the predicted
  // histories keep: theirs are its events), one scale for all (the highest value any curve reaches,
  // and the card when it is within twice that: a card far above would flatten every curve, so it
  // is then named, not drawn), and the timelines, the recorded first, each with its title (text
  // for textContent), its curves, its peaks and the card line (bytes, or null).
  predictionView(p) {
    const all = [p.recorded].concat(p.predicted);
    let t0 = p.recorded.first_ns, t1 = p.recorded.last_ns, most = 1;
    for (const x of all)
      for (const c of [x.curves.allocated, x.curves.reserved]) {
        if (c.t.length) { t0 = Math.min(t0, c.t[0]); t1 = Math.max(t1, c.t[c.t.length - 1]); }
        for (const v of c.hi) most = Math.max(most, v);
      }
    if (!(t1 > t0)) t1 = t0 + 1;
    const cards = p.predicted.map((x) => x.capacity_bytes).filter((c) => c > 0);
    const card = p.card_bytes || (cards.length ? Math.max(...cards) : 0);
    const cardDrawn = card > 0 && card <= 2 * most;
    const top = Math.max(most, cardDrawn ? card : 0) * 1.05;
    const B = Model.formatBytes, rec = p.recorded, sized = Model.sized(p.answer || {});
    const timelines = [{
      kind: "recorded",
      title: "recorded: " + rec.path + (sized ? " at size " + rec.at : "") + (rec.devices > 1 ? ", device " + rec.device + " of " + rec.devices : ""),
      detail: "the run whose history is synthesised, as memsnap analyze draws it: peak allocated " + B(rec.peak_allocated_bytes) +
        (rec.peak_reserved_bytes > 0 ? ", peak reserved " + B(rec.peak_reserved_bytes) : "; no reserved memory recorded (no segment events)") +
        ", " + rec.events + " events",
      curves: rec.curves, allocated: rec.peak_allocated_bytes, reserved: rec.peak_reserved_bytes, card: null,
    }];
    for (const x of p.predicted)
      timelines.push({
        kind: "predicted",
        title: (sized ? "predicted at size " + x.at : "predicted at its own size") + ": " + (x.changed ? x.change : "the program as recorded") + "; settings " + x.setting +
          (p.recorded.devices > 1 ? "; device " + x.device : ""),
        detail: x.why + "; replayed through memsnap's allocator on " + B(x.capacity_bytes) + ": " +
          (x.error ? "failed: " + x.error : (x.fits ? "fits" : "does not fit") + "; peak allocated " + B(x.peak_allocated_bytes) +
            ", peak reserved " + B(x.peak_reserved_bytes) +
            (x.external_bytes > 0 ? " on the card, with up to " + B(x.external_bytes) + " outside the allocator (the table's peaks are the allocator's own)" : "") +
            (x.over_capacity ? " (what it needs: replayed again without a limit)" : "")),
        curves: x.curves, allocated: x.peak_allocated_bytes, reserved: x.peak_reserved_bytes, fits: x.fits,
        card: cardDrawn ? x.capacity_bytes : null,
      });
    return { t0, t1, top, card, cardDrawn, timelines };
  },

  // The answer's tables as rows of cells (text): the predictions (at, program, settings, peaks,
  // fragmentation, device allocations, fits), the largest sizes that fit per setting, and the
  // advice (rank, fits, peaks, the largest size with it, the change), each as the text report has it.
  // What sharding acts on (`memsnap predict --shard`), as the text report's head says it, then the
  // fewest ranks that fit the card per strategy: lines of text ([] without --shard).
  // Whether the answer's sizes are sizes: not for one run given without its size, whose size reads 1
  // (its own, unknown): the text report says "rec." and leaves "at N" out, as these do.
  sized(answer) {
    const runs = answer.runs || [];
    return !(runs.length === 1 && runs[0].size_given === false);
  },

  shardLines(answer) {
    const h = answer.shard, B = Model.formatBytes, out = [];
    if (!h) return out;
    const dt = (n) => (n === 2 ? "bf16/fp16" : n === 4 ? "fp32" : n + "-byte");
    out.push("parameters: " + h.parameter_blocks + " blocks (" + B(h.parameter_bytes) + ") in " + h.parameter_modules +
      " modules; gradients: " + h.gradient_blocks + " blocks (" + B(h.gradient_bytes) + "); optimizer state: " + h.state_blocks +
      " blocks (" + B(h.state_bytes) + (h.state_from_events ? ", tensor events" : ", made in a step, outliving it") + ")");
    out.push("FSDP2's units (" + h.unit_count + "): " + h.units_rule + ": " + (h.units || []).join(" ") +
      (h.unit_count > (h.units || []).length ? " ..." : ""));
    if (h.recorded_ranks) out.push("recorded: rank 0 of FSDP2 at " + h.recorded_ranks + " ranks" +
      (h.detected_ranks === h.recorded_ranks ? " (its all-gather outputs over its units' shards say so)" : ""));
    out.push("set-up: " + (h.init === "meta" ? "the model made on the meta device, sharded, then materialised: each parameter's " +
      "allocation is its shard's" : "the model made on the GPU as recorded, then sharded after its last parameter's allocation"));
    if (h.init === "meta" && h.setup_blocks && !h.recorded_ranks)
      out.push("left out with it (fsdp2, zero3): the " + h.setup_blocks + " blocks (" + B(h.setup_bytes) + ") the recording made " +
        "and freed before the first forward (the model's making on the GPU: a dtype conversion, initialisation's temporaries)");
    out.push("dtypes: parameters recorded in " + dt(h.recorded_element_bytes) + "; FSDP2's sharded " + dt(h.orig_element_bytes) +
      ", param " + dt(h.param_element_bytes) + ", reduce " + dt(h.reduce_element_bytes) + "; DDP's buckets " + h.bucket_mb + " MiB" +
      (h.gradient_as_bucket_view ? " (gradient_as_bucket_view)" : "") + "; ZeRO's reduce bucket " + h.reduce_bucket_size + " elements" +
      (h.overlap_comm ? " (two: overlap_comm)" : ""));
    if (h.autocast_cast_blocks)
      out.push("autocast's casts in the recording (" + h.autocast_cast_blocks + " blocks): left out under fsdp2; autocast's " +
        "activations stay as recorded: the model recorded in the param dtype answers closer");
    out.push("left out: " + h.left_out);
    const card = B(answer.capacity_bytes), sized = Model.sized(answer);
    for (const f of answer.smallest_fitting_ranks || []) {
      const searched = f.searched ? " (searched: " + f.tried.join(", ") + ")" : "", at = sized ? " at " + f.at : "";
      out.push(f.ranks != null ? "the smallest N that fits " + card + at + ": " + f.strategy + ":" + f.ranks + searched
        : "no N fits " + card + at + " with " + f.strategy + searched + (f.why ? ": " + f.why : ""));
    }
    return out;
  },

  predictionTables(answer) {
    const B = Model.formatBytes, setting = (r) => (r.pytorch_cuda_alloc_conf || "(defaults)") +
      (r.memory_fraction != null && r.memory_fraction !== 1 ? " (memory fraction " + r.memory_fraction + ")" : "");
    const rows = answer.predictions || [], swept = new Set(rows.map(setting)).size > 1 || (answer.largest_that_fits || []).length > 1;
    const conf = (r) => setting(r) + (swept && r.recorded_settings ? "  [recorded]" : ""); // marked where settings differ
    const sized = Model.sized(answer), predictions = rows.map((r) => [sized ? String(r.at) : "rec.", r.changed ? r.change : "as recorded", conf(r),
      r.error ? "failed" : B(r.peak_allocated_bytes), r.error ? r.error : B(r.peak_reserved_bytes), B(r.fragmentation_bytes),
      String(r.device_allocs), r.fits ? "yes" : "no"]);
    // with --shard, one group of rows per strategy and N, each ranked from 1 and its program before its setting
    const program = (r) => r.strategy && r.strategy !== "none" ? r.strategy + ":" + r.ranks : "";
    let rank = 0;
    const fits = (answer.largest_that_fits || []).map((r, i, all) => {
      rank = i > 0 && program(all[i - 1]) === program(r) ? rank + 1 : 1;
      return [String(rank), r.at == null ? "none" : String(r.at), r.at == null ? "-" : B(r.peak_allocated_bytes),
        r.at == null ? "-" : B(r.peak_reserved_bytes), (program(r) ? program(r) + ", " : "") + conf(r)];
    });
    const adv = answer.advice;
    const advice = adv ? adv.changes.map((c) => [String(c.rank), c.fits ? "yes" : "no", B(c.peak_allocated_bytes), B(c.peak_reserved_bytes),
      !adv.searched ? "-" : c.largest_that_fits ? String(c.largest_that_fits.at) : "none", c.description]) : [];
    return { predictions, fits, advice };
  },

  formatAddress(a) { return "0x" + Number(a).toString(16); },

  // Human-readable bytes, as the CLI prints them.
  formatBytes(n) {
    const a = Math.abs(n), s = n < 0 ? "-" : "";
    if (a < 1024) return s + a + " B";
    if (a < 1048576) return s + (a / 1024).toFixed(2) + " KiB";
    if (a < 1073741824) return s + (a / 1048576).toFixed(2) + " MiB";
    return s + (a / 1073741824).toFixed(2) + " GiB";
  },

  formatTime(ns) {
    if (ns < 1e3) return ns + " ns";
    if (ns < 1e6) return (ns / 1e3).toFixed(1) + " us";
    if (ns < 1e9) return (ns / 1e6).toFixed(1) + " ms";
    return (ns / 1e9).toFixed(2) + " s";
  },

  // The view state in the URL fragment ("#t0=..&t1=..&leak=..&cur=..&pin=..&ev=1&all=1&src=2&cat=1"):
  // the window, the selected leak, the time cursor, the pinned allocation, the event-index axis,
  // whole stacks (irrelevant frames shown), the document shown (snapshot or device) and the
  // timeline coloured by category; and back.
  stateKeys: ["t0", "t1", "leak", "cur", "pin", "ev", "all", "src", "cat"],

  // The iteration table: one row per iteration (at most `max`: the first and the last halves, with
  // `omitted` saying how many are not shown), each with its peaks and its categories at its peak,
  // largest first, as [name, bytes] with bytes > 0.
  iterationRows(d, max) {
    const its = d.iterations || [], n = its.length, keep = max && n > max ? max : n;
    const pick = keep === n ? its : its.slice(0, Math.ceil(keep / 2)).concat(its.slice(n - Math.floor(keep / 2)));
    const rows = pick.map((it) => ({
      index: it.index, start: it.start_ns, end: it.end_ns, peakAt: it.peak_allocated_ns, peakAllocated: it.peak_allocated_bytes,
      peakReserved: it.peak_reserved_bytes, endAllocated: it.end_allocated_bytes,
      categories: it.categories ? Object.keys(it.categories).filter((k) => it.categories[k] > 0)
        .map((k) => [k, it.categories[k]]).sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1)) : null,
    }));
    return { rows, omitted: n - keep, split: keep === n ? -1 : Math.ceil(keep / 2) };
  },

  // What the categories rest on, for the legend: each category's meaning, the categories without
  // evidence in this snapshot (with why), and the parameters at the peak by kind when FSDP's are
  // there. Everything from the analysis's JSON (categories.c).
  categoryNotes(d) {
    const meanings = d.category_meanings || {}, missing = d.categories_without_evidence || {}, p = d.parameters_at_peak || {};
    const fsdp = (p.fsdp_sharded || 0) + (p.fsdp_gathered || 0) > 0;
    return {
      meaning: (name) => (Object.prototype.hasOwnProperty.call(meanings, name) ? meanings[name] : ""),
      missing: Object.keys(missing).map((k) => [k, missing[k]]),
      parameters: fsdp ? Object.keys(p).map((k) => [k, p[k]]) : [],
    };
  },

  // How sure the analysis is of a category (category_evidence: "tensors", "stacks", "none"; a
  // user's --category has its pattern): a word or two for the table, and a sentence for the hover.
  evidenceText(kind, why) {
    if (kind === "tensors") return { word: "named by tensors", say: "named by the tensors themselves (recorded parameters, gradients, optimizer state)" };
    if (kind === "tensors and stacks") return { word: "tensors, then stacks", say: "named by the tensors themselves, the rest inferred from stacks and lifetimes" };
    if (kind === "stacks") return { word: "inferred from stacks", say: "inferred from the allocations' stacks and lifetimes" };
    if (kind === "pattern") return { word: "your pattern", say: "matched by a --category pattern" };
    if (kind === "none" && why) return { word: "not told", say: "this snapshot cannot tell it: " + why };
    return { word: "none seen", say: "nothing of this kind in this snapshot" };
  },

  // The categories as the page's table explains them: each one the snapshot knows (its meanings,
  // its bytes at the allocated peak, the bands' names), with its bytes at the peak, what it
  // means and how sure the analysis is of it, in the bands' order then the rest.
  categoryRows(d) {
    const meanings = d.category_meanings || {}, evidence = d.category_evidence || {}, missing = d.categories_without_evidence || {};
    const at = d.categories_at_peak || {}, has = (o, k) => Object.prototype.hasOwnProperty.call(o, k);
    const names = [];
    const seen = (n) => { if (!names.includes(n)) names.push(n); };
    ((d.bands && d.bands.categories && d.bands.categories.names) || []).forEach(seen);
    Object.keys(at).forEach(seen);
    Object.keys(meanings).forEach(seen);
    return names.map((name) => {
      const kind = has(missing, name) ? "none" : /^--category/.test(meanings[name] || "") ? "pattern" : has(evidence, name) ? evidence[name] : "none";
      const e = Model.evidenceText(kind, has(missing, name) ? missing[name] : "");
      return { name, bytes: has(at, name) ? at[name] : 0, meaning: has(meanings, name) ? meanings[name] : "", sure: kind, sureWord: e.word, sureText: e.say };
    });
  },

  // The first screen's three answers, from the analysis: what was live at the peak (the peak, its
  // time, the categories largest first), what grows (the first leak candidate when something grows,
  // else the verdict and the largest held; the kept autograd graphs beside), and what would fit (an out of memory and what avoids
  // it, the replay's best suggestion, or memsnap predict's line).
  glance(d) {
    const s = d.summary, at = d.categories_at_peak || {};
    const categories = Object.keys(at).filter((k) => at[k] > 0).map((k) => [k, at[k]]).sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1));
    const peak = { allocated: s.peak_allocated_bytes, reserved: s.peak_reserved_bytes, at: s.peak_allocated_ns, categories };
    const leaks = d.leaks || [], held = d.held || [];
    let grows;
    if ((s.growth === "growing" || s.growth === "released") && leaks.length) grows = { kind: "growing", leak: 0, candidate: leaks[0] };
    else if (s.growth === "none") grows = { kind: "none", iterations: (d.iterations || []).length, largest: held.length ? held[0] : null };
    else grows = { kind: "unknown", iterations: (d.iterations || []).length, largest: held.length ? held[0] : null };
    const sw = d.suggestions_sweep || { status: "not_asked" }, best = (d.suggestions || [])[0] || null;
    const oom = (d.oom || [])[0] || null;
    const fits = { oom, suggestion: best, baseline: sw.baseline_peak_reserved_bytes || 0, swept: sw.status === "done" };
    grows.graphs = d.kept_graphs || []; // autograd graphs kept without a backward, said beside it
    return { peak, grows, fits };
  },

  // The colour of category `name` (categories.c's built-in ones fixed, the user's by their order).
  categoryColors: { parameter: "#3949ab", gradient: "#8e24aa", optimizer_state: "#6d4c41", activation: "#fb8c00",
    temporary: "#c0ca33", autograd: "#00897b", other: "#90a4ae", external: "#546e7a" },
  categoryColor(name, k) {
    const extra = ["#1e88e5", "#43a047", "#d81b60", "#5e35b1", "#7cb342", "#00acc1"];
    return Object.prototype.hasOwnProperty.call(Model.categoryColors, name) ? Model.categoryColors[name] : extra[k % extra.length];
  },
  encodeState(st) {
    const parts = [];
    for (const k of Model.stateKeys) if (st[k] !== undefined && st[k] !== null) parts.push(k + "=" + Math.round(st[k]));
    return "#" + parts.join("&");
  },
  decodeState(hash) {
    const st = {};
    String(hash).replace(/^#/, "").split("&").forEach((p) => {
      const [k, v] = p.split("=");
      if (Model.stateKeys.includes(k) && /^-?\d+$/.test(v || "")) st[k] = Number(v);
    });
    return st;
  },
};

if (typeof module !== "undefined") module.exports = Model;
