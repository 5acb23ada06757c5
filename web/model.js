// model.js: the viewer's data code, apart from drawing (tested with node: tests/web/model.test.js).
//
// The page's data is one JSON document embedded by `memsnap analyze --html` (analyzer/html.c):
// curves as columns ({t: [...], lo: [...], hi: [...]}: per time bucket, the lowest and highest
// value, so a zoomed-out view never loses a peak), iterations, leak candidates, OOMs, and stacks
// through a string table. Nothing here touches the DOM: view.js draws what these functions give.
"use strict";

const Model = {
  // Decodes the embedded JSON text into the model; throws on a document of another format.
  decode(text) {
    const d = JSON.parse(text);
    if (!d || d.format !== "memsnap-viewer-1") throw new Error("not a memsnap viewer document");
    return d;
  },

  // Frames of a stack as {name, file, line}, innermost first; [] for an unknown stack.
  stackFrames(d, stackId) {
    const ids = d.stacks[stackId] || [];
    return ids.map((f) => {
      const fr = d.frames[f] || [0, 0, 0];
      return { name: d.strings[fr[0]] || "", file: d.strings[fr[1]] || "", line: fr[2] || 0 };
    });
  },

  // Re-buckets a min/max curve for `width` pixels between t0 and t1, keeping every peak: each
  // pixel gets the lowest lo and the highest hi of the buckets it covers.
  resample(curve, t0, t1, width) {
    const lo = new Array(width).fill(Infinity), hi = new Array(width).fill(-Infinity);
    const span = t1 - t0 || 1;
    let last = -1;
    for (let i = 0; i < curve.t.length; i++) {
      const x = Math.floor(((curve.t[i] - t0) / span) * width);
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

  // For each of `width` pixels between t0 and t1, the bucket of `bands` to draw there: the one
  // whose total (all bands) is highest among the buckets in that pixel, so the stacked drawing
  // keeps every peak; a pixel without a bucket repeats the last one before it (-1: none yet).
  bandColumns(bands, t0, t1, width) {
    const span = t1 - t0 || 1, cols = new Array(width).fill(-1), best = new Array(width).fill(-Infinity);
    let before = -1;
    for (let i = 0; i < bands.t.length; i++) {
      const x = Math.floor(((bands.t[i] - t0) / span) * width);
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

  // Leak candidates and OOMs whose stack mentions `text` (case-insensitive) in a frame's name
  // or file, or whose address range holds the number `text` (hex or decimal).
  search(d, text) {
    const q = String(text).trim().toLowerCase();
    if (!q) return [];
    const hits = [];
    const matches = (stackId) => Model.stackFrames(d, stackId).some(
      (f) => f.name.toLowerCase().includes(q) || f.file.toLowerCase().includes(q));
    d.leaks.forEach((l, i) => { if (matches(l.stack)) hits.push({ kind: "leak", index: i }); });
    d.oom.forEach((o, i) => { if (matches(o.stack)) hits.push({ kind: "oom", index: i }); });
    return hits;
  },

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

  // The view state in the URL fragment ("#t0=..&t1=..&leak=.."), and back.
  encodeState(st) {
    const parts = [];
    for (const k of ["t0", "t1", "leak"]) if (st[k] !== undefined && st[k] !== null) parts.push(k + "=" + Math.round(st[k]));
    return "#" + parts.join("&");
  },
  decodeState(hash) {
    const st = {};
    String(hash).replace(/^#/, "").split("&").forEach((p) => {
      const [k, v] = p.split("=");
      if (["t0", "t1", "leak"].includes(k) && /^-?\d+$/.test(v || "")) st[k] = Number(v);
    });
    return st;
  },
};

if (typeof module !== "undefined") module.exports = Model;
