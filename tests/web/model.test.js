// model.test.js: the viewer's pure data code (web/model.js), with node's test runner.
"use strict";
const test = require("node:test");
const assert = require("node:assert");
const Model = require("../../web/model.js");

const doc = {
  format: "memsnap-viewer-1",
  strings: ["", "keep_history", "train.py", "load_weights"],
  frames: [[0, 0, 0], [1, 2, 37], [3, 2, 12]],
  stacks: { 5: [1], 6: [2] },
  leaks: [{ stack: 5 }, { stack: 6 }],
  oom: [{ stack: 6 }],
};

test("decode refuses another document", () => {
  assert.throws(() => Model.decode('{"format": "other"}'));
  assert.strictEqual(Model.decode(JSON.stringify(doc)).strings[1], "keep_history");
});

test("stack frames through the string table, innermost first", () => {
  assert.deepStrictEqual(Model.stackFrames(doc, 5), [{ name: "keep_history", file: "train.py", line: 37 }]);
  assert.deepStrictEqual(Model.stackFrames(doc, 99), []);
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
