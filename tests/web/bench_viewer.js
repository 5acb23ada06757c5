// bench_viewer.js [EVENTS]: how fast the report page is on a large snapshot, in headless
// chromium (the browser tests' setup: Debian's chromium, playwright-core in tests/web).
//
//   node tests/web/bench_viewer.js 1000000      (MEMSNAP_BUILD: the build directory, default build/)
//
// Records a snapshot of about EVENTS events with tests/analyzer/gen_snapshots.c, writes its page with
// `memsnap analyze --html` (timed), opens it five times and reports the first paint (navigation
// start to the first frame after the page's first drawing) and, on the last load, the response
// to 30 hovers, 20 wheel zooms, 10 drags, 10 clicks (cursor and pin: the allocator state and
// the flame graph redrawn) and typing a search: each the time from dispatching the event in the
// page to the next frame, so it includes the handler, the drawing and the frame. Figures go to
// docs/BENCHMARKS.md.
"use strict";
const { execFileSync } = require("node:child_process");
const fs = require("node:fs");
const os = require("node:os");
const path = require("node:path");
const { chromium } = require("playwright-core");

const events = Number(process.argv[2] || 1000000);
const build = path.resolve(__dirname, "../..", process.env.MEMSNAP_BUILD || "build");
const dir = fs.mkdtempSync(path.join(os.tmpdir(), "memsnap-bench-"));
const quantile = (xs, q) => { const s = xs.slice().sort((a, b) => a - b); return s[Math.min(s.length - 1, Math.floor(q * s.length))]; };
const ms = (x) => x.toFixed(1) + " ms";

(async () => {
  try {
    execFileSync(path.join(build, "tests/gen_snapshots"), [dir, String(events)], { stdio: "ignore" });
    const db = path.join(dir, "big.db"), page = path.join(dir, "big.html");
    let t = process.hrtime.bigint();
    execFileSync(path.join(build, "memsnap"), ["analyze", "--html", page, db]);
    const writeMs = Number(process.hrtime.bigint() - t) / 1e6;
    const browser = await chromium.launch({ executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
      args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-background-networking"] });
    const paints = [];
    let tab;
    for (let i = 0; i < 5; i++) {
      if (tab) await tab.close();
      tab = await browser.newPage({ viewport: { width: 1600, height: 1300 } });
      const errors = [];
      tab.on("pageerror", (e) => errors.push(e.message));
      await tab.goto("file://" + page);
      await tab.waitForSelector("body[data-ready='1']", { timeout: 60000 });
      paints.push(await tab.evaluate(() => new Promise((r) => requestAnimationFrame(() => r(performance.now())))));
      if (errors.length) throw new Error("page error: " + errors.join("; "));
    }
    const summary = await tab.locator("#summary").textContent();
    // Dispatches events made by `make(i)` on element `id`, each timed to the next frame.
    const timed = (id, kind, n) => tab.evaluate(async ({ id, kind, n }) => {
      const el = document.getElementById(id), r = el.getBoundingClientRect(), out = [];
      const frame = () => new Promise((res) => requestAnimationFrame(() => res()));
      for (let i = 0; i < n; i++) {
        const x = r.left + r.width * (0.05 + 0.9 * ((i * 37) % n) / n), y = r.top + r.height * (0.3 + 0.6 * ((i * 13) % 7) / 7);
        await frame();
        const t0 = performance.now();
        const mouse = (type, dx) => el.dispatchEvent(new MouseEvent(type, { clientX: x + (dx || 0), clientY: y, bubbles: true }));
        if (kind === "hover") mouse("mousemove");
        else if (kind === "zoom") el.dispatchEvent(new WheelEvent("wheel", { clientX: x, clientY: y, deltaY: i % 4 === 3 ? 100 : -100, bubbles: true, cancelable: true }));
        else if (kind === "drag") { mouse("mousedown"); mouse("mousemove", 40); mouse("mousemove", 80); mouse("mouseup", 80); }
        else if (kind === "click") { mouse("mousedown"); mouse("mouseup"); }
        else if (kind === "search") { el.value = ["activation", "0x1000", "keep", ""][i % 4]; el.dispatchEvent(new Event("input")); }
        await frame();
        out.push(performance.now() - t0);
      }
      return out;
    }, { id, kind, n });
    const rows = [];
    for (const [what, id, kind, n] of [["hover the timeline", "timeline", "hover", 30], ["wheel zoom", "timeline", "zoom", 20],
      ["drag to pan", "timeline", "drag", 10], ["click: cursor, pin, state, flame", "timeline", "click", 10],
      ["hover the allocator state", "segments", "hover", 20], ["hover the flame graph", "flame", "hover", 20],
      ["search (type a query)", "search", "search", 8]]) {
      const xs = await timed(id, kind, n);
      rows.push([what, n, quantile(xs, 0.5), Math.max(...xs)]);
    }
    await browser.close();
    const size = fs.statSync(page).size;
    console.log("snapshot: " + summary.replace(/^.* \u2014 /, ""));
    console.log("page: " + (size / 1048576).toFixed(2) + " MiB, written by memsnap analyze --html in " + ms(writeMs));
    console.log("first paint (5 loads): median " + ms(quantile(paints, 0.5)) + ", worst " + ms(Math.max(...paints)));
    console.log("response to the next frame        n   median    worst");
    for (const [what, n, med, worst] of rows) console.log(what.padEnd(32) + String(n).padStart(3) + ms(med).padStart(10) + ms(worst).padStart(10));
    const ok = Math.max(...paints) <= 2000 && rows.every((r) => r[3] <= 100);
    console.log(ok ? "goals met: first paint <= 2 s, every response <= 100 ms" : "GOAL MISSED: first paint <= 2 s and every response <= 100 ms");
    process.exitCode = ok ? 0 : 1;
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
})().catch((e) => { console.error(e); process.exitCode = 2; });
