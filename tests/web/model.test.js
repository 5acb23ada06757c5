// model.test.js: the viewer's pure data code (web/model.js), with node's test runner.
"use strict";
const test = require("node:test");
const assert = require("node:assert");
const Model = require("../../web/model.js");

const doc = {
  format: "memsnap-viewer-2",
  strings: ["", "keep_history", "train.py", "load_weights", "at::f<>()", "void at::f<int>(int)"],
  frames: [[0, 0, 0], [1, 2, 37], [3, 2, 12], [4, 0, 0, 5], [1, 2, 40, 1, 1]],
  stacks: { 5: [1], 6: [2] },
  leaks: [{ stack: 5 }, { stack: 6 }],
  oom: [{ stack: 6 }],
};

test("decode refuses another document", () => {
  assert.throws(() => Model.decode('{"format": "other"}'));
  assert.strictEqual(Model.decode(JSON.stringify(doc)).strings[1], "keep_history");
});

test("stack frames through the string table, innermost first", () => {
  assert.deepStrictEqual(Model.stackFrames(doc, 5), [{ name: "keep_history", file: "train.py", line: 37, full: "keep_history", inlined: false }]);
  assert.deepStrictEqual(Model.stackFrames(doc, 99), []);
});

test("frames: short names in lists, whole names on hover, inlined ones marked", () => {
  const [short, inlined] = Model.stackFrames({ ...doc, stacks: { 7: [3, 4] } }, 7);
  assert.strictEqual(Model.frameLine(short), "at::f<>()");
  assert.strictEqual(Model.frameLine(short, true), "void at::f<int>(int)");
  assert.strictEqual(Model.frameLine(inlined), "keep_history  (train.py:40, inlined)");
  assert.deepStrictEqual(Model.search({ ...doc, stacks: { 7: [3] }, leaks: [{ stack: 7 }], oom: [] }, "f<int>"), [{ kind: "leak", index: 0 }]);
});

test("retries and suggestions read as the text report has them; retries found by their stack", () => {
  const MiB = 1048576;
  const r = { requested_bytes: 700 * MiB, released_bytes: 600 * MiB, segments_released: 1, succeeded: true, released: "whole_cache", unmapped_bytes: 0, stack: 6 };
  assert.strictEqual(Model.retryLine(r, "4.0 ms"),
    "at 4.0 ms: 700.00 MiB requested; the allocator released 600.00 MiB of cached segments and retried: served (1 segment)");
  assert.strictEqual(Model.retryLine({ ...r, released: "oversize_blocks", succeeded: false, segments_released: 2, unmapped_bytes: 1 }, "1.0 s"),
    "at 1.0 s: 700.00 MiB requested; the allocator released 600.00 MiB of oversize cached blocks and retried: out of memory (2 segments, pages unmapped)");
  assert.deepStrictEqual(Model.search({ ...doc, retries: [r] }, "load_weights"), [{ kind: "leak", index: 1 }, { kind: "oom", index: 0 }, { kind: "retry", index: 0 }]);
  const s = { pytorch_cuda_alloc_conf: "expandable_segments:True", memory_fraction: null, peak_reserved_bytes: 100 * MiB, saved_bytes: 20 * MiB, fits: false };
  assert.strictEqual(Model.suggestionLine(s), "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True");
  assert.strictEqual(Model.suggestionEffect(s, 120 * MiB), "peak reserved 100.00 MiB, 20.00 MiB (16.7%) less");
  assert.strictEqual(Model.suggestionLine({ ...s, pytorch_cuda_alloc_conf: "garbage_collection_threshold:0.6", memory_fraction: 0.95 }),
    "PYTORCH_CUDA_ALLOC_CONF=garbage_collection_threshold:0.6 with torch.cuda.set_per_process_memory_fraction(0.95)");
  assert.strictEqual(Model.suggestionEffect({ ...s, fits: true, peak_reserved_bytes: 800 * MiB }, 400 * MiB),
    "the recorded out of memory does not happen; peak reserved 800.00 MiB");
});

test("resampling keeps every peak", () => {
  const t = [], lo = [], hi = [];
  for (let i = 0; i < 1000; i++) { t.push(i); lo.push(10); hi.push(i === 501 ? 999 : 10); }
  const r = Model.resample({ t, lo, hi }, 0, 1000, 7);
  assert.strictEqual(Math.max(...r.hi), 999); // one spike in 1000 buckets, 7 pixels: still there
  assert.strictEqual(Math.min(...r.lo), 10);
});

test("resampling carries the value into empty pixels", () => {
  const r = Model.resample({ t: [0, 100], lo: [5, 7], hi: [5, 7] }, 0, 200, 4);
  assert.deepStrictEqual(r.hi, [5, 5, 7, 7]);
});

test("value at a time", () => {
  const c = { t: [0, 10, 20], lo: [1, 2, 3], hi: [1, 5, 3] };
  assert.deepStrictEqual(Model.valueAt(c, 15), { lo: 2, hi: 5 });
  assert.strictEqual(Model.valueAt(c, -1), null);
});

test("search by frame name and file", () => {
  assert.deepStrictEqual(Model.search(doc, "KEEP"), [{ kind: "leak", index: 0 }]);
  assert.deepStrictEqual(Model.search(doc, "train.py").length, 3);
  assert.deepStrictEqual(Model.search(doc, "   "), []);
});

test("view state round-trips through the URL fragment and ignores junk", () => {
  const st = { t0: 100, t1: 2000, leak: 2 };
  assert.deepStrictEqual(Model.decodeState(Model.encodeState(st)), st);
  assert.deepStrictEqual(Model.decodeState("#t0=<script>&leak=1&x=5"), { leak: 1 });
});

test("formats like the CLI", () => {
  assert.strictEqual(Model.formatBytes(1536), "1.50 KiB");
  assert.strictEqual(Model.formatBytes(3 * 1048576), "3.00 MiB");
  assert.strictEqual(Model.formatTime(2500000), "2.5 ms");
});

test("band columns keep the peak bucket of each pixel and carry into empty pixels", () => {
  const bands = { t: [0, 1, 2, 3, 50], bytes: [[1, 1, 9, 1, 2], [1, 1, 1, 1, 2]] };
  const cols = Model.bandColumns(bands, 0, 100, 4); // pixel 0 covers t 0..24: buckets 0-3
  assert.strictEqual(cols[0], 2); // total 10 at bucket 2: the peak
  assert.deepStrictEqual(cols.slice(1), [2, 4, 4]);
});

test("band under a height", () => {
  const bands = { t: [0], bytes: [[5], [3], [2]] };
  assert.strictEqual(Model.bandAt(bands, 0, 0), 0);
  assert.strictEqual(Model.bandAt(bands, 0, 6), 1);
  assert.strictEqual(Model.bandAt(bands, 0, 9), 2);
  assert.strictEqual(Model.bandAt(bands, 0, 11), -1);
});

// Two sites in two bands; four listed allocations (0x1000: band 0, alive; 0x9000: band 1, freed
// at 30; 0x5000: band 0, from 20 to 40; 0x7000: band 1, from 50).
const detailed = {
  sites: [[5, 0, 0], [6, -1, 1]],
  bands: { t: [0, 25], tp: [10, 30], bytes: [[100, 160], [50, 0]] },
  detail: { alloc: [5, 8, 20, 50], free: [-1, 30, 40, -1], size: [100, 50, 60, 70], requested: [100, 50, 60, 70],
    addr: [0x1000, 0x9000, 0x5000, 0x7000], stream: [0, 0, 0, 0], site: [0, 1, 0, 1] },
};

test("allocations live in a band at a time, oldest first", () => {
  assert.deepStrictEqual(Model.liveInBand(detailed, 0, 25), [0, 2]);
  assert.deepStrictEqual(Model.liveInBand(detailed, 1, 25), [1]);
  assert.deepStrictEqual(Model.liveInBand(detailed, 1, 30), []); // freed at 30
  assert.deepStrictEqual(Model.liveInBand(detailed, 1, 60), [3]);
});

test("the allocation under the pointer, at the bucket's peak moment", () => {
  assert.deepStrictEqual(Model.allocationAt(detailed, 0, 0, 99), { alloc: 0 });
  assert.deepStrictEqual(Model.allocationAt(detailed, 0, 1, 10), { alloc: 1 });
  assert.deepStrictEqual(Model.allocationAt(detailed, 1, 0, 150), { alloc: 2 }); // tp 30: 0 and 2 live
  const d2 = JSON.parse(JSON.stringify(detailed));
  d2.bands.bytes[0][1] = 200; // 40 bytes of the band in allocations too small to list
  assert.deepStrictEqual(Model.allocationAt(d2, 1, 0, 170), { small: 40 });
  const a = Model.allocation(detailed, 2);
  assert.strictEqual(a.addr, 0x5000);
  assert.strictEqual(a.stack, 5);
  assert.strictEqual(a.leak, 0);
});

test("search by address: inside a listed allocation, hex or decimal", () => {
  assert.deepStrictEqual(Model.searchAddress(detailed, "0x5010"), [2]);
  assert.deepStrictEqual(Model.searchAddress(detailed, String(0x1000)), [0]);
  assert.deepStrictEqual(Model.searchAddress(detailed, "0x8fff"), []);
  assert.deepStrictEqual(Model.searchAddress(detailed, "load"), []);
  assert.strictEqual(Model.formatAddress(0x7f00aa000000), "0x7f00aa000000");
});

const cp = { t: 100, allocated: 150, reserved: 400, pending: 10, other: 5,
  segs: [0x1000, 300, 0, 0, 3, 0x9000, 100, 0, 0, 2],
  runs: [1, 100, 1, 0, 60, 1, 1, 140, 2, 2, 10, 1, 0, 90, 1],
  sites: [0, 100, 1, 45] };

test("a checkpoint's segments as runs, and its fragmentation", () => {
  const s = Model.segments(cp);
  assert.strictEqual(s.segs.length, 2);
  assert.deepStrictEqual(s.segs[0].runs.map((r) => [r.state, r.size, r.count, r.offset]),
    [["allocated", 100, 1, 0], ["free", 60, 1, 100], ["allocated", 140, 2, 160]]);
  assert.deepStrictEqual(s.segs[1].runs.map((r) => r.state), ["pending", "free"]);
  assert.strictEqual(s.freeBytes, 150);
  assert.strictEqual(s.pieces, 2);
  assert.strictEqual(s.largest, 90);
  assert.strictEqual(s.splitFree, 150); // both segments are partly used
  assert.strictEqual(s.splitPieces, 2);
  const whole = Model.segments({ segs: [0, 100, 0, 0, 1], runs: [0, 100, 1] }); // one wholly free segment
  assert.deepStrictEqual([whole.freeBytes, whole.splitFree, whole.splitPieces], [100, 0, 0]);
});

test("the checkpoint nearest a time", () => {
  const d = { checkpoints: [{ t: 10 }, { t: 50 }, { t: 90 }] };
  assert.strictEqual(Model.checkpointNear(d, 0), 0);
  assert.strictEqual(Model.checkpointNear(d, 69), 1);
  assert.strictEqual(Model.checkpointNear(d, 1e9), 2);
  assert.strictEqual(Model.checkpointNear({ checkpoints: [] }, 5), -1);
  // At one time, the checkpoint that names the event wins over a plain time, whatever the order.
  const tied = { checkpoints: [{ t: 10, kind: "time" }, { t: 20, kind: "time" }, { t: 20, kind: "peak" }, { t: 20, kind: "oom" }, { t: 20, kind: "time" }] };
  assert.strictEqual(Model.checkpointNear(tied, 20), 3);
  assert.strictEqual(Model.checkpointNear(tied, 19), 3);
  tied.checkpoints.splice(3, 1);
  assert.strictEqual(Model.checkpointNear(tied, 21), 2);
});

test("memory by stack: a tree from the outermost frame, with the rest summed", () => {
  const d = Object.assign({}, doc, { sites: detailed.sites, stacks: { 5: [1, 2], 6: [2] } });
  const root = Model.flameTree(d, cp);
  assert.strictEqual(root.bytes, 150);
  assert.deepStrictEqual(root.children.map((c) => [c.name, c.bytes]), [["load_weights", 145], ["(smaller sites)", 5]]);
  assert.deepStrictEqual(root.children[0].children.map((c) => [c.name, c.line, c.bytes]), [["keep_history", 37, 100]]);
});

test("the view state round-trips through the URL fragment, ignoring junk", () => {
  const st = { t0: 5, t1: 99, leak: 2, cur: 50, pin: 7 };
  assert.deepStrictEqual(Model.decodeState(Model.encodeState(st)), st);
  assert.deepStrictEqual(Model.decodeState("#t0=1&pin=x&cur=<script>&evil=3"), { t0: 1 });
});

test("stepping: the allocator state after any event, from the state when the history starts", () => {
  const steps = { // a segment from before the history holding one block; then alloc, free, reuse
    t: [10, 20, 30, 40, 50, 60], kind: [4, 1, 2, 3, 1, 5], addr: [4096, 4096, 4096, 4096, 4096, 4096], size: [1024, 512, 512, 512, 256, 1024], site: [-1, 1, -1, -1, 2, -1],
    start: { allocated: 100, reserved: 1000, segments_known: true, blocks: [0, 100, 0], segs: [0, 1000, 0, 0] },
  };
  const s = Model.stepper({ steps, summary: { first_ns: 0 } });
  const at = (i) => { const c = s.at(i); return [c.allocated, c.reserved, c.pending, Model.segments(c).segs.map((g) => g.runs.map((r) => r.state[0] + r.size).join(" "))]; };
  assert.deepStrictEqual(at(-1), [100, 1000, 0, ["a100 f900"]]);
  assert.deepStrictEqual(at(1), [612, 2024, 0, ["a100 f900", "a512 f512"]]);
  assert.deepStrictEqual(at(2), [100, 2024, 512, ["a100 f900", "p512 f512"]]);
  assert.deepStrictEqual(at(3), [100, 2024, 0, ["a100 f900", "f1024"]]);
  assert.deepStrictEqual(at(0), [100, 2024, 0, ["a100 f900", "f1024"]]); // back: replayed again
  assert.deepStrictEqual(at(5), [356, 1000, 0, ["a100 f900"]]); // the segment freed (its block left outside it)
  assert.deepStrictEqual(s.at(4).sites, [2, 256, 0, 100]);
  assert.strictEqual(Model.stepAt({ steps }, 35), 2);
  assert.strictEqual(Model.stepAt({ steps }, 5), -1);
});

test("growth chart: a leak's live bytes per iteration on the scale that shows them", () => {
  const g = Model.growth({ per_iteration: [1 << 30, (1 << 30) + (2 << 20), (1 << 30) + (4 << 20)] });
  assert.strictEqual(g.perIteration, 2 << 20);
  assert.ok(g.min < 1 << 30 && g.min > (1 << 30) - (1 << 20), "the scale starts just under the lowest value: " + g.min);
  assert.strictEqual(Model.growth({ per_iteration: [] }), null);
  assert.strictEqual(Model.growth({}), null);
});

test("site labels: the frame that allocated, then the user's frame with file:line", () => {
  const f = (name, file, line) => ({ name, file, line, full: name });
  const torch = "/opt/venv/lib/python3.12/site-packages/torch/";
  assert.strictEqual(Model.siteLabel([f("at::native::clone()", "", 0), f("_multi_tensor_sgd", torch + "optim/sgd.py", 455), f("step", torch + "optim/optimizer.py", 80), f("train", "/home/u/train.py", 40)]),
    "at::native::clone() \u2190 train (train.py:40)");
  assert.strictEqual(Model.siteLabel([f("at::native::zeros_symint()", "", 0), f("<module>", "/work/capture_torch.py", 22)]), "at::native::zeros_symint() \u2190 (capture_torch.py:22)");
  assert.strictEqual(Model.siteLabel([f("keep_history", "tests/analyzer/gen_snapshots.c", 39), f("main", "tests/analyzer/gen_snapshots.c", 107)]), "keep_history (gen_snapshots.c:39)");
  assert.strictEqual(Model.siteLabel([f("at::f()", "Conv.cpp", 0)]), "at::f()");
  assert.strictEqual(Model.siteLabel([f("_init_group", torch + "optim/adam.py", 160)]), "_init_group (adam.py:160)"); // only library frames: the first with a line
  assert.strictEqual(Model.siteLabel([]), "(no stack recorded)");
});

test("event-index axis: pixels shared out by events, times mapped back to pixels", () => {
  const d = { steps: { t: [0, 1, 2, 3, 1000, 1001, 1002, 1003] } };
  const e = Model.eventEdges(d, 0, 1003, 8);
  assert.deepStrictEqual([...e], [0, 1, 2, 3, 1000, 1001, 1002, 1003]);
  assert.strictEqual(Model.pixelOf(e, 500), 3); // the quiet stretch is inside one event's pixel
  assert.strictEqual(Model.pixelOf(e, 1001), 5);
  assert.strictEqual(Model.pixelOf(e, -1), -1);
  assert.strictEqual(Model.pixelOf(e, 2000), 8);
  const r = Model.resampleEdges({ t: [0, 2, 1000], lo: [1, 5, 9], hi: [1, 5, 9] }, e);
  assert.deepStrictEqual(r.hi, [1, 1, 5, 5, 9, 9, 9, 9]);
  assert.strictEqual(Model.eventEdges({ steps: { t: [] } }, 0, 10, 4), null);
  assert.strictEqual(Model.eventEdges(d, 5, 6, 4), null);
});

test("site table: rows filtered by frames and sorted by any column", () => {
  const d = { ...doc, sites: [[5, 0, 0], [6, 1, 1]], site_table: [[0, 100, 3, 10, 1, 7, 0], [1, 50, 9, 40, 2, -1, 0]] };
  const cols = (rows) => rows.map((r) => r.site);
  assert.deepStrictEqual(cols(Model.siteRows(d, "", "alloc", false)), [0, 1]);
  assert.deepStrictEqual(cols(Model.siteRows(d, "", "count", false)), [1, 0]);
  assert.deepStrictEqual(cols(Model.siteRows(d, "", "live", true)), [0, 1]);
  assert.deepStrictEqual(cols(Model.siteRows(d, "", "label", true)), [0, 1]); // keep_history before load_weights
  assert.deepStrictEqual(cols(Model.siteRows(d, "", "label", false)), [1, 0]);
  assert.deepStrictEqual(cols(Model.siteRows(d, "LOAD_W", "alloc", false)), [1]);
  assert.deepStrictEqual(cols(Model.siteRows(d, "train.py", "alloc", false)), [0, 1]);
  assert.strictEqual(Model.siteRows(d, "", "alloc", false)[1].thread, -1);
  assert.deepStrictEqual(Model.siteRows({ ...doc, sites: [] }, "", "alloc", false), []);
});

test("stepping: internal fragmentation, the bytes allocated beyond the requests", () => {
  const steps = { t: [1, 2, 3], kind: [4, 1, 1], addr: [0, 0, 600], size: [2048, 512, 1024], site: [-1, 0, 0], req: [2048, 500, 1000],
    start: { allocated: 0, reserved: 0, segments_known: true, blocks: [], segs: [] } };
  const s = Model.stepper({ steps, summary: { first_ns: 0 } });
  assert.strictEqual(s.at(1).rounding, 12);
  assert.strictEqual(s.at(2).rounding, 36);
});

// Segment spans: a segment from before the history (0..60), one made at 10 and kept, one made
// and released inside [20, 30), and a range of unknown layout from before the history.
const spans = { segment_spans: { omitted: 0, addr: [4096, 8192, 16384, 0], size: [100, 200, 400, 50], start: [0, 10, 22, 0], end: [60, -1, 24, -1],
  stream: [0, 0, 7, 0], device: [0, 0, 0, 0], stack: [-1, 5, 6, -1] } };

test("segment spans: stacked in the order they were made, each column at its highest reserved moment", () => {
  const ix = Model.spanIndex(spans);
  assert.strictEqual(ix.n, 4);
  const pos = Model.spanColumns(ix, [0, 10, 20, 30, 40, 60, 70]);
  const live = [...pos].map((p) => Model.spansAt(ix, p));
  assert.deepStrictEqual(live, [[0, 3], [0, 1, 3], [0, 1, 2, 3], [0, 1, 3], [0, 1, 3], [1, 3]]); // [20, 30): the short-lived one kept
  const total = (l) => l.reduce((s, i) => s + spans.segment_spans.size[i], 0);
  assert.deepStrictEqual(live.map(total), [150, 350, 750, 350, 350, 250]);
  assert.deepStrictEqual(Model.spansAt(ix, -1), []);
  assert.strictEqual(Model.spanIndex({ segment_spans: { addr: [] } }), null);
  assert.strictEqual(Model.spanIndex({}), null);
});

test("segment spans: a segment of the allocator state found by address and time, with its stack", () => {
  const ix = Model.spanIndex(spans);
  assert.strictEqual(Model.spanOf(ix, 16384 + 100, 23), 2); // inside it, while it lives
  assert.strictEqual(Model.spanOf(ix, 16384 + 100, 25), -1); // released at 24
  assert.strictEqual(Model.spanOf(ix, 10, 5), -1); // the unknown range is no segment
  assert.deepStrictEqual(Model.span(ix, 0), { index: 0, addr: 4096, size: 100, start: 0, end: 60, stream: 0, device: 0, stack: 0, before: true, unknown: false });
  assert.strictEqual(Model.span(ix, 3).unknown, true);
  assert.strictEqual(Model.span(ix, 2).stack, 6);
});

test("whole stacks: the frames that matter, or every frame behind them", () => {
  const d = { ...doc, stacks: { 5: [1, 2] }, all_stacks: { 5: [3, 1, 4, 2] } };
  assert.deepStrictEqual(Model.stackFrames(d, 5).map((f) => f.name), ["keep_history", "load_weights"]);
  assert.deepStrictEqual(Model.stackFrames(d, 5, true).map((f) => f.name), ["at::f<>()", "keep_history", "keep_history", "load_weights"]);
  assert.deepStrictEqual(Model.stackFrames({ ...doc, stacks: { 6: [2] } }, 6, true).map((f) => f.name), ["load_weights"]); // nothing hidden: the same
  const cp6 = { sites: [0, 10], other: 0 }, sites = [[5, -1, 0]];
  assert.deepStrictEqual(Model.flameTree({ ...d, sites }, cp6).children.map((c) => c.name), ["load_weights"]);
  const whole = Model.flameTree({ ...d, sites }, cp6, true);
  assert.deepStrictEqual([whole.children[0].name, whole.children[0].children[0].name], ["load_weights", "keep_history"]);
  let depth = 0;
  for (let n = whole; n.children.length; n = n.children[0]) depth++;
  assert.strictEqual(depth, 4);
});

test("the view state keeps the frames toggle and the document shown", () => {
  const st = { t0: 5, t1: 99, all: 1, src: 2 };
  assert.deepStrictEqual(Model.decodeState(Model.encodeState(st)), st);
  assert.strictEqual(Model.encodeState({ src: null, all: null }), "#");
});

test("the iteration table: peaks and categories at each iteration's peak, largest first; the middle left out past the limit", () => {
  const its = Array.from({ length: 5 }, (_, k) => ({
    index: k, start_ns: 10 * k, end_ns: 10 * k + 9, peak_allocated_ns: 10 * k + 5, peak_allocated_bytes: 100 + k,
    peak_reserved_bytes: 200, end_allocated_bytes: 50, categories: { parameter: 60, gradient: 0, activation: 40 + k },
  }));
  const all = Model.iterationRows({ iterations: its }, 0);
  assert.strictEqual(all.rows.length, 5);
  assert.strictEqual(all.omitted, 0);
  assert.deepStrictEqual(all.rows[4].categories, [["parameter", 60], ["activation", 44]]);
  assert.strictEqual(all.rows[2].peakAt, 25);
  const some = Model.iterationRows({ iterations: its }, 3);
  assert.deepStrictEqual(some.rows.map((r) => r.index), [0, 1, 4]);
  assert.strictEqual(some.omitted, 2);
  assert.strictEqual(some.split, 2);
  assert.strictEqual(Model.iterationRows({ iterations: [{ ...its[0], categories: null }] }).rows[0].categories, null);
});

test("category notes: meanings, what cannot be told, the parameters by kind only with FSDP's", () => {
  const d = { category_meanings: { gradient: "made by a backward pass..." }, categories_without_evidence: { activation: "no backward pass recorded" },
    parameters_at_peak: { module: 10, fsdp_sharded: 0, fsdp_gathered: 0 } };
  const n = Model.categoryNotes(d);
  assert.strictEqual(n.meaning("gradient"), "made by a backward pass...");
  assert.strictEqual(n.meaning("toString"), "");
  assert.deepStrictEqual(n.missing, [["activation", "no backward pass recorded"]]);
  assert.deepStrictEqual(n.parameters, []);
  const fsdp = Model.categoryNotes({ parameters_at_peak: { module: 0, fsdp_sharded: 5, fsdp_gathered: 7 } });
  assert.deepStrictEqual(fsdp.parameters, [["module", 0], ["fsdp_sharded", 5], ["fsdp_gathered", 7]]);
  assert.deepStrictEqual(Model.categoryNotes({}).missing, []);
});

test("category rows: each category the snapshot knows, its bytes at the peak, its meaning and how sure", () => {
  const d = {
    bands: { categories: { names: ["parameter", "temporary", "weights"] } },
    categories_at_peak: { parameter: 5, temporary: 0, weights: 7, gradient: 0 },
    category_meanings: { parameter: "a module's parameters", gradient: "made by a backward pass", weights: "--category: a frame matches load_weights" },
    category_evidence: { parameter: "tensors", temporary: "stacks", gradient: "none", weights: "stacks" },
    categories_without_evidence: { gradient: "no backward pass recorded" },
  };
  const rows = Model.categoryRows(d);
  assert.deepStrictEqual(rows.map((r) => r.name), ["parameter", "temporary", "weights", "gradient"]);
  assert.deepStrictEqual(rows.map((r) => r.sureWord), ["named by tensors", "inferred from stacks", "your pattern", "not told"]);
  assert.strictEqual(rows[3].sureText, "this snapshot cannot tell it: no backward pass recorded");
  assert.deepStrictEqual([rows[0].bytes, rows[0].meaning, rows[1].meaning], [5, "a module's parameters", ""]);
  assert.strictEqual(Model.evidenceText("none", "").word, "none seen");
  assert.strictEqual(Model.evidenceText("tensors and stacks").word, "tensors, then stacks");
  assert.deepStrictEqual(Model.categoryRows({}), []);
});

test("at a glance: the peak by category, the first growing leak or the verdict, what would fit", () => {
  const summary = { peak_allocated_bytes: 10, peak_reserved_bytes: 12, peak_allocated_ns: 3, growth: "growing" };
  const leak = { stack: 1, bytes_per_iteration: 4 }, held = { stack: 2, held_category: "parameter" };
  const d = { summary, categories_at_peak: { other: 2, activation: 8, gradient: 0 }, leaks: [leak], held: [held], iterations: [{}, {}],
    suggestions: [{ pytorch_cuda_alloc_conf: "expandable_segments:True" }], suggestions_sweep: { status: "done", baseline_peak_reserved_bytes: 12 }, oom: [] };
  const g = Model.glance(d);
  assert.deepStrictEqual(g.peak, { allocated: 10, reserved: 12, at: 3, categories: [["activation", 8], ["other", 2]] });
  assert.deepStrictEqual(g.grows, { kind: "growing", leak: 0, candidate: leak, graphs: [] });
  assert.deepStrictEqual(Model.glance({ ...d, kept_graphs: [{ graphs: 3 }] }).grows.graphs, [{ graphs: 3 }]);
  assert.deepStrictEqual([g.fits.oom, g.fits.suggestion.pytorch_cuda_alloc_conf, g.fits.baseline, g.fits.swept], [null, "expandable_segments:True", 12, true]);
  const flat = Model.glance({ ...d, summary: { ...summary, growth: "none" }, leaks: [], suggestions: [], oom: [{ time_ns: 9 }] });
  assert.deepStrictEqual(flat.grows, { kind: "none", iterations: 2, largest: held, graphs: [] });
  assert.deepStrictEqual([flat.fits.oom.time_ns, flat.fits.suggestion], [9, null]);
  assert.strictEqual(Model.glance({ summary: { ...summary, growth: "unknown" } }).grows.kind, "unknown");
});

test("growth read as the text report has it: per iteration, or in steps every k iterations", () => {
  const MiB = 1048576;
  assert.strictEqual(Model.growthText({ bytes_per_iteration: MiB, every: null }), "+1.00 MiB per iteration");
  const every = (min, max) => ({ bytes_per_iteration: 3, every: { iterations: 4, min_iterations: min, max_iterations: max, steps: 3, bytes_per_step: 700 * MiB } });
  assert.strictEqual(Model.growthText(every(4, 4)), "+700.00 MiB every 4 iterations");
  assert.strictEqual(Model.growthText(every(3, 5)), "+700.00 MiB every 3 to 5 iterations");
});

test("a kept autograd graph in the text report's words: bytes, graphs, the forward's module and caller, the fix", () => {
  const g = { graphs: 3, live_bytes: 480 * 1048576, forward_module: "GPT2LMHeadModel.transformer", first_iteration: 3, last_iteration: 11,
    forward_called_at: { short_name: "evaluate", file: "/home/u/train.py", line: 15 } };
  assert.strictEqual(Model.keptGraphText(g), "480.00 MiB in 3 autograd graphs kept alive: the forward of transformer at evaluate (train.py:15) ran with " +
    "grad enabled and no backward (iterations 3 to 11); what it returned (its loss or output) is still held, and with it every tensor it saved " +
    "for backward; use torch.no_grad() for that forward, or keep loss.item() instead of the loss");
  const one = Model.keptGraphText({ ...g, graphs: 1, forward_module: "Net", last_iteration: 3, forward_called_at: null });
  assert.ok(one.startsWith("480.00 MiB in 1 autograd graph kept alive: the forward of Net ran with grad enabled and no backward (iteration 3);"), one);
  // its holders: what keeps the tensor whose graph it is, in the sentence and as lines under it
  const held = { ...g, holders: [{ root: "autograd", kept_by: "global `eval_outputs` of train.py -> list[2] -> tensor () float32", blocks: 9,
    holder: "global `eval_outputs` of train.py -> list[2] -> tensor () float32 -> through its autograd graph (grad_fn NllLossBackward0) -> saved `self` of NllLossBackward0" }] };
  assert.ok(Model.keptGraphText(held).includes("(iterations 3 to 11); what it returned is kept by global `eval_outputs` of train.py -> list[2] -> tensor () float32, " +
    "and with it every tensor it saved for backward;"), Model.keptGraphText(held));
  assert.deepStrictEqual(Model.causeLines(held), ["held by: " + held.holders[0].holder + " (9 blocks alike)"]);
});

// The page of a prediction (memsnap predict --html): its document's parts the data code reads.
const MiB = 1048576;
const curve = (t, hi) => ({ t, lo: hi.map(() => 0), hi });
const prediction = {
  format: "memsnap-prediction-1", card_bytes: 200 * MiB,
  recorded: { path: "<b>p8.db", at: 8, device: 0, devices: 1, events: 810, first_ns: 0, last_ns: 800, peak_allocated_bytes: 50 * MiB, peak_reserved_bytes: 0,
    curves: { allocated: curve([0, 400, 800], [10 * MiB, 50 * MiB, 0]), reserved: curve([], []) } },
  predicted: [{ at: 16, why: "--at 16", change: "checkpoint every module call found (6)", changed: true, setting: "(defaults)", device: 0,
    capacity_bytes: 200 * MiB, fits: true, over_capacity: false, peak_allocated_bytes: 80 * MiB, peak_reserved_bytes: 100 * MiB, error: null,
    curves: { allocated: curve([0, 200, 810], [20 * MiB, 80 * MiB, 80 * MiB]), reserved: curve([0, 200], [30 * MiB, 100 * MiB]) } }],
  answer: { predictions: [{ at: 16, changed: false, change: "none", pytorch_cuda_alloc_conf: "", memory_fraction: 1, recorded_settings: true,
    peak_allocated_bytes: MiB, peak_reserved_bytes: 2 * MiB, fragmentation_bytes: MiB, device_allocs: 3, fits: false, error: null }],
  largest_that_fits: [], notes: [] },
};

test("a prediction's document: refused when another; a curve's peak is its first highest bucket", () => {
  assert.throws(() => Model.decodePrediction(JSON.stringify({ format: "memsnap-viewer-2" })));
  assert.deepStrictEqual(Model.decodePrediction(JSON.stringify({ ...prediction, predicted: undefined })).predicted, []);
  assert.deepStrictEqual(Model.curvePeak(curve([1, 2, 3, 4], [5, 9, 9, 1])), { t: 2, v: 9 });
  assert.strictEqual(Model.curvePeak(curve([], [])), null);
});

test("a prediction's timelines: the recorded first, one scale and window for all, the card drawn when near, named when far", () => {
  const v = Model.predictionView(prediction);
  assert.deepStrictEqual([v.t0, v.t1], [0, 810]); // the predicted history's last bucket widens the window
  assert.strictEqual(v.top, 200 * MiB * 1.05); // the card, within twice the highest value, sets the scale
  assert.deepStrictEqual(v.timelines.map((t) => [t.kind, t.card]), [["recorded", null], ["predicted", 200 * MiB]]);
  assert.strictEqual(v.timelines[0].title, "recorded: <b>p8.db at size 8"); // text, for textContent
  assert.match(v.timelines[0].detail, /no reserved memory recorded/);
  assert.strictEqual(v.timelines[1].title, "predicted at size 16: checkpoint every module call found (6); settings (defaults)");
  assert.strictEqual(v.timelines[1].detail, "--at 16; replayed through memsnap's allocator on 200.00 MiB: fits; peak allocated 80.00 MiB, peak reserved 100.00 MiB");
  const far = Model.predictionView({ ...prediction, card_bytes: 80 * 1024 * MiB });
  assert.deepStrictEqual([far.cardDrawn, far.top, far.timelines[1].card], [false, 100 * MiB * 1.05, null]);
  // memory outside the allocator (memsnap run's interposer): the timeline's peaks are the card's, said so beside the table's
  const ext = Model.predictionView({ ...prediction, predicted: [{ ...prediction.predicted[0], external_bytes: 128 * MiB }] });
  assert.strictEqual(ext.timelines[1].detail, "--at 16; replayed through memsnap's allocator on 200.00 MiB: fits; peak allocated 80.00 MiB, " +
    "peak reserved 100.00 MiB on the card, with up to 128.00 MiB outside the allocator (the table's peaks are the allocator's own)");
});

test("a prediction's tables read as the text report's: settings marked recorded only where they differ", () => {
  const t = Model.predictionTables(prediction.answer);
  assert.deepStrictEqual(t.predictions, [["16", "as recorded", "(defaults)", "1.00 MiB", "2.00 MiB", "1.00 MiB", "3", "no"]]);
  assert.deepStrictEqual([t.fits, t.advice], [[], []]);
  const two = { ...prediction.answer, predictions: prediction.answer.predictions.concat([{ ...prediction.answer.predictions[0], recorded_settings: false,
    pytorch_cuda_alloc_conf: "expandable_segments:True" }]) };
  assert.deepStrictEqual(Model.predictionTables(two).predictions.map((r) => r[2]), ["(defaults)  [recorded]", "expandable_segments:True"]);
  const adv = Model.predictionTables({ advice: { searched: true, changes: [{ rank: 1, fits: true, peak_allocated_bytes: MiB, peak_reserved_bytes: MiB,
    largest_that_fits: { at: 17 }, description: "checkpoint 3 of 6 (<img>.blocks.5)" }] } }).advice;
  assert.deepStrictEqual(adv, [["1", "yes", "1.00 MiB", "1.00 MiB", "17", "checkpoint 3 of 6 (<img>.blocks.5)"]]);
  // the largest sizes with --shard: a group per strategy and N, each ranked from 1, the program before the setting
  const row = (strategy, ranks, at) => ({ strategy, ranks, at, peak_allocated_bytes: MiB, peak_reserved_bytes: MiB, pytorch_cuda_alloc_conf: "" });
  const groups = Model.predictionTables({ largest_that_fits: [row("fsdp2", 2, 5), row("fsdp2", 2, 4), row("fsdp2", 8, 6)] }).fits;
  assert.deepStrictEqual(groups.map((r) => [r[0], r[1], r[4]]), [["1", "5", "fsdp2:2, (defaults)"], ["2", "4", "fsdp2:2, (defaults)"],
    ["1", "6", "fsdp2:8, (defaults)"]]);
  assert.deepStrictEqual(Model.predictionTables({ largest_that_fits: [row("none", 1, 3)] }).fits.map((r) => r[4]), ["(defaults)"]);
});

test("runStrip: the whole run's bars, the window placed; nothing when the window is the whole run; hostile numbers read as 0", () => {
  const it = (i, extra) => Object.assign({ run_index: i, count: 1, peak_allocated_bytes: 100 + i, peak_reserved_bytes: 200, end_allocated_bytes: 50,
    skipped_count: 0, before_window: true, told_at_peak: { parameter: 10, gradient: 0, optimizer_state: 20 } }, extra);
  const doc = (its, run) => Model.decode(JSON.stringify({ format: "memsnap-viewer-2", summary: { first_ns: 0, last_ns: 10 }, iterations: its, run }));
  const d = doc([it(0), it(1, { count: 2 }), { index: 0, before_window: false, peak_allocated_bytes: 400, peak_reserved_bytes: 500, end_allocated_bytes: 60 }],
    { iterations: 4, window_first_iteration: 3, by_time: [] });
  assert.strictEqual(d.iterations.length, 1, "the window's iterations alone stay in d.iterations");
  const s = Model.runStrip(d, 400);
  assert.deepStrictEqual(s.bars.map((b) => [b.first, b.count, b.x0, b.x1]), [[0, 1, 0, 100], [1, 2, 100, 300], [3, 1, 300, 400]]);
  assert.deepStrictEqual(s.window, { x0: 300, x1: 400 });
  assert.deepStrictEqual([s.kind, s.total, s.top, s.bars[0].told], ["iterations", 4, 500, [10, 0, 20]]);
  assert.strictEqual(Model.runBarAt(s, 150).first, 1);
  assert.strictEqual(Model.runStrip(doc([{ index: 0, before_window: false }], { iterations: 1, window_first_iteration: 0, by_time: [] }), 400), null);
  assert.strictEqual(Model.runStrip(doc([], null), 400), null);
  const h = Model.runStrip(doc([it(0, { run_index: "x", peak_allocated_bytes: null, count: -5 })], { iterations: 1, window_first_iteration: null }), 100);
  assert.deepStrictEqual([h.bars[0].first, h.bars[0].count, h.bars[0].peak, h.window], [0, 1, 0, null]);
  const t = Model.runStrip(doc([], { iterations: 0, seconds: 3, by_time: [
    { first_second: 0, count: 1, start_ns: 0, end_ns: 5, peak_allocated_bytes: 1, peak_reserved_bytes: 2, end_allocated_bytes: 1 },
    { first_second: 1, count: 2, start_ns: 20, end_ns: 30, peak_allocated_bytes: 3, peak_reserved_bytes: 4, end_allocated_bytes: 1 }] }), 300);
  assert.deepStrictEqual([t.kind, t.total, t.window], ["seconds", 3, { x0: 0, x1: 100 }]);
});

test("what holds a leak: holder chains, reference cycles and the collector's runs on the timeline", () => {
  const leak = { holders: [{ root: "global", holder: "global `features` of train.py -> list[3] -> tensor", blocks: 3 },
    { root: "hook", holder: "forward hook of GPT2LMHeadModel.transformer.h.5 -> <img src=x onerror=alert(1)>", blocks: 1 }],
  reference_cycles: true, gc_frees: { frees: 4, by_collector: 4, bytes: 20 << 20, runs: 2 } };
  const lines = Model.causeLines(leak);
  assert.deepStrictEqual(lines.slice(0, 2), ["held by: global `features` of train.py -> list[3] -> tensor (3 blocks alike)",
    "also held by: forward hook of GPT2LMHeadModel.transformer.h.5 -> <img src=x onerror=alert(1)>"]); // text, shown with textContent
  assert.ok(lines[2].startsWith("held by reference cycles: only the garbage collector freed it (4 of 4 frees, 20.00 MiB, in 2 runs)"), lines[2]);
  assert.ok(lines[2].includes("gc.collect()"), lines[2]);
  // the cycles the collector found holding its tensors (MEMSNAP_GC_CYCLES), after the cycles' line
  const cyc = { ...leak, cycles: [{ types: "2 Node, 1 Tensor", edges: "Node.data -> Tensor; Node.next -> Node", objects: 3, cycles: 4, tensors: 4,
    tensor_bytes: 20 << 20, generation: 2 }] };
  assert.deepStrictEqual(Model.causeLines(cyc).slice(3), ["cycle: 2 Node, 1 Tensor: Node.data -> Tensor; Node.next -> Node (4 cycles, 4 CUDA tensors, 20.00 MiB)"]);
  assert.deepStrictEqual(Model.causeLines({ holders: [], reference_cycles: false }), []);
  assert.deepStrictEqual(Model.causeLines({}), []); // a page of an older snapshot
  assert.deepStrictEqual(Model.gcMarkers({ gc: { freeing_runs: [{ start_ns: 5, generation: 2, freed_bytes: 1 << 20 }] } }),
    [{ t: 5, label: "gc 2: 1.00 MiB" }]);
  assert.deepStrictEqual(Model.gcMarkers({}), []);
});

test("a sharded prediction's head: what sharding acts on, the set-up left out, and the fewest ranks per strategy", () => {
  const shard = { root: "M", units_rule: "the root and each instance of the repeated block: blocks.* (2)", unit_count: 3,
    units: ["M", "M.blocks.0", "M.blocks.1"], parameter_blocks: 7, parameter_bytes: 7 * MiB, parameter_modules: 3, gradient_blocks: 14,
    gradient_bytes: 14 * MiB, state_blocks: 14, state_bytes: 14 * MiB, state_from_events: true, autocast_cast_blocks: 0,
    setup_blocks: 7, setup_bytes: 14 * MiB, recorded_ranks: 0, init: "meta", detected_ranks: 0, recorded_element_bytes: 2,
    orig_element_bytes: 4, param_element_bytes: 2, reduce_element_bytes: 4, bucket_mb: 25, gradient_as_bucket_view: false,
    reduce_bucket_size: 500000000, overlap_comm: false, left_out: "NCCL's own buffers" };
  const answer = { capacity_bytes: 80 * 1024 * MiB, shard, smallest_fitting_ranks: [
    { strategy: "fsdp2", at: 8, ranks: 4, searched: true, tried: [1, 2, 4], stopped: "fits", why: "fsdp2:4 fits" },
    { strategy: "ddp", at: 8, ranks: null, searched: true, tried: [1, 2, 4], stopped: "peak_not_falling", why: "DDP keeps a whole replica" }] };
  const lines = Model.shardLines(answer);
  assert.ok(lines[0].startsWith("parameters: 7 blocks (7.00 MiB) in 3 modules"), lines[0]);
  assert.ok(lines.some((l) => l.includes("FSDP2's units (3)") && l.includes("M.blocks.1")));
  assert.ok(lines.some((l) => l.startsWith("left out with it (fsdp2, zero3): the 7 blocks (14.00 MiB)")));
  assert.ok(lines.some((l) => l.startsWith("dtypes: parameters recorded in bf16/fp16; FSDP2's sharded fp32, param bf16/fp16, reduce fp32")));
  assert.ok(lines.includes("the smallest N that fits 80.00 GiB at 8: fsdp2:4 (searched: 1, 2, 4)"), lines.join("\n"));
  assert.ok(lines.includes("no N fits 80.00 GiB at 8 with ddp (searched: 1, 2, 4): DDP keeps a whole replica"));
  assert.ok(!lines.some((l) => l.startsWith("autocast")));
  // made on the GPU: the set-up is the recording's, nothing left out with it
  assert.ok(!Model.shardLines({ ...answer, shard: { ...shard, init: "gpu" } }).some((l) => l.startsWith("left out with it")));
  assert.deepStrictEqual(Model.shardLines({ predictions: [] }), []);
});

test("one run given without its size: the tables, the fewest ranks and the timelines say its own size, not size 1", () => {
  const answer = { runs: [{ path: "r.db", at: 1, base: true, size_given: false }], capacity_bytes: 1 << 30,
    predictions: [{ at: 1, changed: false, peak_allocated_bytes: 1, peak_reserved_bytes: 2, fragmentation_bytes: 1, device_allocs: 1, fits: true }],
    smallest_fitting_ranks: [{ strategy: "fsdp2", at: 1, ranks: 2, searched: false, tried: [2], why: "" }],
    shard: { parameter_blocks: 1, parameter_bytes: 1, parameter_modules: 1, gradient_blocks: 1, gradient_bytes: 1, state_blocks: 0,
      state_bytes: 0, units: [], unit_count: 1, units_rule: "r", init: "gpu", recorded_element_bytes: 4, orig_element_bytes: 4,
      param_element_bytes: 4, reduce_element_bytes: 4, bucket_mb: 25, reduce_bucket_size: 1, left_out: "x" } };
  assert.strictEqual(Model.predictionTables(answer).predictions[0][0], "rec.");
  assert.ok(Model.shardLines(answer).includes("the smallest N that fits 1.00 GiB: fsdp2:2"), Model.shardLines(answer).join("\n"));
  const curve = { t: [0, 1], lo: [0, 1], hi: [0, 1] };
  const p = { answer, recorded: { path: "r.db", at: 1, devices: 1, first_ns: 0, last_ns: 1, curves: { allocated: curve, reserved: curve } },
    predicted: [{ at: 1, changed: false, setting: "(defaults)", why: "its own size", curves: { allocated: curve, reserved: curve }, capacity_bytes: 0 }] };
  const v = Model.predictionView(p);
  assert.strictEqual(v.timelines[0].title, "recorded: r.db");
  assert.ok(v.timelines[1].title.startsWith("predicted at its own size: "), v.timelines[1].title);
  // given with its size (r.db=8), or two runs: sizes
  const sizedAnswer = { ...answer, runs: [{ ...answer.runs[0], at: 8, size_given: true }] };
  assert.strictEqual(Model.predictionTables({ ...sizedAnswer, predictions: [{ ...answer.predictions[0], at: 8 }] }).predictions[0][0], "8");
  assert.ok(Model.predictionView({ ...p, answer: sizedAnswer }).timelines[0].title.endsWith(" at size 1"));
});
