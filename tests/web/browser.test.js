// browser.test.js: the report page in a real browser (Debian's chromium, driven by playwright-core
// from npm; scripts/install-deps.sh installs both). Pages are made from tests/gen_snapshots.c's
// snapshots, whose answers are known, with the CLI in MEMSNAP_BUILD (default build/).
// Screenshots of every page go to MEMSNAP_ARTIFACTS (default build/web-artifacts/).
"use strict";
const { test, before, after } = require("node:test");
const assert = require("node:assert");
const { execFileSync } = require("node:child_process");
const fs = require("node:fs");
const os = require("node:os");
const path = require("node:path");
const { chromium } = require("playwright-core");

const root = path.resolve(__dirname, "../..");
const build = path.resolve(root, process.env.MEMSNAP_BUILD || "build");
const artifacts = path.resolve(process.env.MEMSNAP_ARTIFACTS || path.join(build, "web-artifacts"));
const chromiumPath = process.env.CHROMIUM || "/usr/bin/chromium";
// Headless, and nothing of its own on the network (updates, safe browsing, metrics).
const chromiumArgs = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-background-networking",
  "--disable-component-update", "--disable-default-apps", "--disable-sync", "--metrics-recording-only", "--no-first-run",
  "--disable-features=Translate,OptimizationHints,MediaRouter"];

// Frame names a snapshot might carry to attack the page: each must show as text, never run.
const HOSTILE = { keep_history: "<script>alert(1)</script>", activation: "\"><img src=x onerror=alert(2)>", load_weights: "</script><script>alert(3)</script>" };

let dir, browser;
const pages = {};

before(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), "memsnap-web-"));
  fs.mkdirSync(artifacts, { recursive: true });
  execFileSync(path.join(build, "tests/gen_snapshots"), [dir], { stdio: "ignore" });
  fs.copyFileSync(path.join(dir, "leak.db"), path.join(dir, "hostile.db"));
  execFileSync("python3", ["-c", "import json, sqlite3, sys\nc = sqlite3.connect(sys.argv[1])\n" +
    "for old, new in json.loads(sys.argv[2]).items(): c.execute('update frames set name = ? where name = ?', (new, old))\nc.commit()",
    path.join(dir, "hostile.db"), JSON.stringify(HOSTILE)]);
  for (const name of ["leak", "oom", "hostile", "released", "late"]) {
    pages[name] = path.join(dir, name + ".html");
    execFileSync(path.join(build, "memsnap"), ["analyze", "--html", pages[name], path.join(dir, name + ".db")]);
  }
  pages.misuse = path.join(dir, "misuse.html"); // invalid frees
  execFileSync(path.join(build, "memsnap"), ["analyze", "--html", pages.misuse, path.join(dir, "misuse.db")]);
  // A real PyTorch snapshot (tests/data): C++ names hundreds of characters long.
  execFileSync(path.join(build, "memsnap"), ["import", path.join(root, "tests/data/resnet50_leak.pickle.gz"), "-o", path.join(dir, "resnet.db")], { stdio: "ignore" });
  pages.resnet = path.join(dir, "resnet.html");
  execFileSync(path.join(build, "memsnap"), ["analyze", "--html", pages.resnet, path.join(dir, "resnet.db")]);
  browser = await chromium.launch({ executablePath: chromiumPath, args: chromiumArgs });
});

after(async () => {
  if (browser) await browser.close();
  if (dir) fs.rmSync(dir, { recursive: true, force: true });
});

// Opens a page and watches it: console output, errors, dialogs and every request it makes.
async function open(name, hash = "") {
  const page = await browser.newPage({ viewport: { width: 1600, height: 1300 } });
  const seen = { console: [], errors: [], dialogs: [], requests: [] };
  page.on("console", (m) => seen.console.push(m.type() + ": " + m.text()));
  page.on("pageerror", (e) => seen.errors.push(e.message));
  page.on("dialog", (d) => { seen.dialogs.push(d.message()); d.dismiss(); });
  page.on("request", (r) => seen.requests.push(r.url()));
  const url = "file://" + pages[name] + hash;
  await page.goto(url);
  await page.waitForSelector("body[data-ready='1']", { timeout: 15000 });
  return { page, seen, url };
}

async function shot(page, name) { await page.screenshot({ path: path.join(artifacts, name + ".png"), fullPage: true }); }

// The pointer over the timeline at fractions (fx of its width, fy of its height from the top).
async function overTimeline(page, fx, fy) {
  const b = await page.locator("#timeline").boundingBox();
  await page.mouse.move(b.x + b.width * fx, b.y + b.height * fy);
}

const hashState = async (page) => Object.fromEntries(new URL(page.url()).hash.slice(1).split("&").filter(Boolean).map((p) => p.split("=").map((x, i) => (i ? Number(x) : x))));

test("the page loads offline: no request but itself, no console output, no error", async () => {
  const { page, seen } = await open("leak");
  await page.waitForTimeout(300);
  assert.deepStrictEqual(seen.requests.filter((u) => !u.startsWith("file://" + pages.leak)), []);
  assert.deepStrictEqual(seen.console, []);
  assert.deepStrictEqual(seen.errors, []);
  assert.match(await page.locator("#summary").textContent(), /6 iterations \(marks\)/);
  await shot(page, "leak");
  await page.close();
});

test("the leak list names the known leak site first", async () => {
  const { page } = await open("leak");
  const first = await page.locator("#leaks li").first().textContent();
  assert.match(first, /^growing \+1\.00 MiB\/iteration, 6\.00 MiB in 6 \u2014 keep_history$/);
  await page.close();
});

test("growth released before the snapshot is listed first, with when it was released", async () => {
  const { page } = await open("released");
  const first = await page.locator("#leaks li").first().textContent();
  assert.match(first, /^growing \+1\.00 MiB\/iteration, released at [0-9.]+ [mu]?s, 0 B in 0 \u2014 keep_history$/);
  assert.match(await page.locator("#leaks li").first().getAttribute("class"), /growing/);
  await page.close();
});

test("blocks allocated before recording started say so in the leak list", async () => {
  const { page } = await open("late");
  const items = await page.locator("#leaks li").allTextContents();
  assert.ok(items.some((t) => /^retained, 96\.00 MiB in 1 \u2014 \(allocated before recording started\)$/.test(t)), items.join("\n"));
  assert.ok(!items.some((t) => /\u2014 \?$/.test(t)), items.join("\n"));
  await page.close();
});

test("long C++ names read short in the lists and the icicle graph, whole on hover", async () => {
  const { page, seen } = await open("resnet");
  const items = await page.locator("#leaks li").allTextContents();
  assert.ok(items.every((t) => t.length < 160), items.join("\n"));
  const i = items.findIndex((t) => t.endsWith("\u2014 at::native::cudnn_convolution_backward_weight()"));
  assert.ok(i >= 0, items.join("\n"));
  assert.match(await page.locator("#leaks li").nth(i).getAttribute("title"), /^at::native::cudnn_convolution_backward_weight\(char const\*, c10::ArrayRef<long>, /);
  await page.locator("#leaks li").nth(i).click();
  const lines = (await page.locator("#details").textContent()).split("\n").filter(Boolean);
  assert.ok(lines.length >= 2 && lines.every((l) => l.length < 160), lines.join("\n"));
  const flame = await page.locator("#flame").boundingBox();
  await page.mouse.move(flame.x + 3, flame.y + 18 * 1.5); // the first frame under the root
  assert.ok((await page.locator("#flame-readout").textContent()).length > 0);
  assert.deepStrictEqual(seen.errors, []);
  await shot(page, "resnet");
  await page.close();
});

test("hovering an allocation shows its size, address, times and stack", async () => {
  const { page } = await open("leak");
  await overTimeline(page, 0.5, 0.9); // low in the stack: the 96 MiB weights, alive all along
  assert.match(await page.locator("#readout").textContent(), /96\.00 MiB at 0x[0-9a-f]+, stream 0x0, allocated at .*, alive at the end/);
  const details = await page.locator("#details").textContent();
  assert.match(details, /^96\.00 MiB at 0x/);
  assert.match(details, /load_weights {2}\(.*gen_snapshots\.c:\d+\)/);
  await page.close();
});

test("wheel zooms: the window shrinks around the pointer and is kept in the URL", async () => {
  const { page } = await open("leak");
  const before = await hashState(page);
  await overTimeline(page, 0.5, 0.5);
  for (let i = 0; i < 5; i++) await page.mouse.wheel(0, -100);
  await page.waitForFunction((t1) => /t1=/.test(location.hash) && Number(/t1=(\d+)/.exec(location.hash)[1]) < t1, before.t1);
  const after = await hashState(page);
  assert.ok(after.t1 - after.t0 < (before.t1 - before.t0) * 0.5, JSON.stringify({ before, after }));
  assert.ok(after.t0 > before.t0 && after.t1 < before.t1);
  await shot(page, "leak-zoomed");
  await page.close();
});

// Pixels of the timeline in the selected site's colour.
const selectedPixels = (page) => page.evaluate(() => {
  const c = document.getElementById("timeline"), px = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
  let n = 0;
  for (let i = 0; i < px.length; i += 4) if (px[i] === 0xe5 && px[i + 1] === 0x39 && px[i + 2] === 0x35) n++;
  return n;
});

test("selecting a leak highlights its allocations and the URL reopens the selection", async () => {
  const { page } = await open("leak");
  assert.strictEqual(await selectedPixels(page), 0);
  await page.locator("#leaks li").first().click();
  assert.match(await page.locator("#leaks li").first().getAttribute("class"), /selected/);
  assert.ok(await selectedPixels(page) > 50, "the growing site's band is drawn in the selection colour");
  const url = page.url();
  assert.match(url, /leak=0/);
  await shot(page, "leak-selected");
  const again = await browser.newPage({ viewport: { width: 1600, height: 1300 } });
  await again.goto(url);
  await again.waitForSelector("body[data-ready='1']");
  assert.match(await again.locator("#leaks li").first().getAttribute("class"), /selected/);
  assert.ok(await selectedPixels(again) > 50);
  await again.close();
  await page.close();
});

test("clicking pins an allocation: the cursor moves there and the views follow it", async () => {
  const { page } = await open("leak");
  await overTimeline(page, 0.5, 0.9);
  await page.mouse.down();
  await page.mouse.up();
  assert.match(await page.locator("#details-title").textContent(), /^Pinned allocation \(leak candidate 2\)$/);
  await overTimeline(page, 0.5, 0.1); // elsewhere: the pinned one stays shown
  assert.match(await page.locator("#details").textContent(), /load_weights/);
  const st = await hashState(page);
  assert.ok(st.pin >= 0 && st.cur >= 0);
  const data = await page.evaluate(() => JSON.parse(document.getElementById("memsnap-data").textContent).summary);
  const clicked = data.first_ns + 0.5 * (data.last_ns - data.first_ns); // the cursor is where we clicked
  assert.ok(Math.abs(st.cur - clicked) < (data.last_ns - data.first_ns) / 100, JSON.stringify({ st, clicked }));
  assert.match(await page.locator("#state-title").textContent(), /^at .*cursor at/);
  await page.keyboard.press("Escape");
  assert.ok(!("pin" in (await hashState(page))));
  assert.doesNotMatch(await page.locator("#details-title").textContent(), /Pinned/);
  await page.close();
});

test("allocator state at the cursor: segments and their blocks, with a readout", async () => {
  const { page } = await open("leak");
  const summary = await page.locator("#state-summary").textContent();
  assert.match(summary, /^\d+ segments, reserved [\d.]+ MiB, allocated 182\.00 MiB; cached free /); // at the peak
  const b = await page.locator("#segments").boundingBox();
  await page.mouse.move(b.x + 5, b.y + 5);
  assert.match(await page.locator("#state-readout").textContent(), /^segment 0x[0-9a-f]+ \([\d.]+ MiB, stream 0x0, device 0\): allocated/);
  await page.close();
});

test("memory by stack at the cursor: the icicle graph names the sites", async () => {
  const { page } = await open("leak");
  const b = await page.locator("#flame").boundingBox();
  await page.mouse.move(b.x + 10, b.y + b.height - 5); // the innermost row, leftmost: the largest site
  assert.match(await page.locator("#flame-readout").textContent(), /^load_weights {2}\(.*gen_snapshots\.c:\d+\): 96\.00 MiB \(52\.7%\)$/);
  await page.close();
});

test("search by frame name filters the lists; by address finds the allocation and pins it", async () => {
  const { page } = await open("leak");
  await page.locator("#search").fill("make_optimizer");
  assert.strictEqual(await page.locator("#leaks li").count(), 1);
  assert.match(await page.locator("#leaks li").first().textContent(), /make_optimizer_state/);
  const addr = await page.evaluate(() => {
    const d = JSON.parse(document.getElementById("memsnap-data").textContent);
    const j = d.detail.size.indexOf(64 * 1048576);
    return "0x" + (d.detail.addr[j] + 4096).toString(16); // inside the block, not at its start
  });
  await page.locator("#search").fill(addr);
  assert.strictEqual(await page.locator("#results li").count(), 1);
  await page.locator("#results li").first().click();
  assert.match(await page.locator("#details").textContent(), /^64\.00 MiB at 0x[\s\S]*make_optimizer_state/);
  await page.close();
});

test("out of memory: listed with its report; selecting it moves the cursor to it", async () => {
  const { page, seen } = await open("oom");
  const li = page.locator("#ooms li");
  assert.strictEqual(await li.count(), 1);
  assert.match(await li.first().textContent(), /40\.00 MiB requested/);
  await li.first().click();
  assert.match(await page.locator("#state-title").textContent(), /out of memory 1/);
  assert.deepStrictEqual(seen.errors, []);
  await shot(page, "oom");
  await page.close();
});

test("hostile frame names show as text and run nothing", async () => {
  const { page, seen } = await open("hostile");
  await overTimeline(page, 0.5, 0.9);
  await page.locator("#leaks li").first().click();
  const flame = await page.locator("#flame").boundingBox();
  await page.mouse.move(flame.x + 10, flame.y + flame.height - 5);
  await page.waitForTimeout(300);
  assert.deepStrictEqual(seen.dialogs, []);
  assert.deepStrictEqual(seen.console, []);
  assert.deepStrictEqual(seen.errors, []);
  assert.deepStrictEqual(seen.requests.filter((u) => !u.startsWith("file://" + pages.hostile)), []); // no img src=x
  assert.strictEqual(await page.locator("img").count(), 0);
  assert.strictEqual(await page.locator("script").count(), 3);
  // Lists show names shortened as C++ names are ("alert(1)" reads "alert()"); the hover, whole.
  const short = (name) => name.replace(/\(\d\)/g, "()");
  const leaks = await page.locator("#leaks").textContent();
  assert.ok(leaks.includes(short(HOSTILE.keep_history)) && leaks.includes(short(HOSTILE.load_weights)), leaks);
  const titles = await page.locator("#leaks li").evaluateAll((items) => items.map((li) => li.title));
  assert.ok(titles.some((t) => t.startsWith(HOSTILE.keep_history)) && titles.some((t) => t.startsWith(HOSTILE.load_weights)), titles.join("\n"));
  assert.ok((await page.locator("#details").textContent()).includes(short(HOSTILE.keep_history)));
  const lines = await page.locator("#details span").evaluateAll((spans) => spans.map((s) => s.title));
  assert.ok(lines.some((t) => t.startsWith(HOSTILE.keep_history)), lines.join("\n"));
  assert.ok((await page.locator("#flame-readout").textContent()).includes(HOSTILE.load_weights));
  await shot(page, "hostile");
  await page.close();
});

test("invalid frees: listed by site with their kind; selecting one shows where it was freed", async () => {
  const { page, seen } = await open("misuse");
  const li = page.locator("#invalid-frees li");
  assert.strictEqual(await li.count(), 4);
  assert.strictEqual(await page.locator("#invalid-frees-count").textContent(), "(4)");
  assert.match(await li.nth(2).textContent(), /1 \u00d7 interior pointer at 0x100000300000/);
  await li.nth(2).click();
  assert.match(await page.locator("#details").textContent(), /free_inside/);
  assert.deepStrictEqual(seen.errors, []);
  const leak = await open("leak");
  assert.strictEqual(await leak.page.locator("#invalid-frees-box").isHidden(), true);
  await leak.page.close();
  await shot(page, "invalid-frees");
  await page.close();
});
