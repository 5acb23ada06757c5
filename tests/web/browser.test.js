// browser.test.js: the report page in a real browser (Debian's chromium, driven by playwright-core
// from npm; scripts/install-deps.sh installs both). Pages are made from tests/analyzer/gen_snapshots.c's
// snapshots, whose answers are known, with the CLI in MEMSNAP_BUILD (default build/).
// Screenshots of every page go to MEMSNAP_ARTIFACTS (default build/web-artifacts/); those of three
// real GPU snapshots (tests/data/zoo) at 1280x800 and 1920x1080 too, one of which is the README's
// picture (make readme-picture copies it to docs/).
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

const HOSTILE_FILE = "<img src=x onerror=alert(4)>oom.db";
const HOSTILE_MODULE = "<img src=x onerror=alert(5)>&Model", HOSTILE_RUN = "<svg onload=alert(6)>e"; // a prediction's (no "/": a file name)
const ZOO = ["gpt2_eager-leak", "fsdp2-cxx-r1", "gpt2_oom_backward"];
// How a process died, as a snapshot written from its live mapping keeps it in its meta (untrusted text).
const HOSTILE_DEATH = "killed by <img src=x onerror=alert(7)>SIGKILL";
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
  // Long runs (tests/analyzer/gen_runlog.c): 400 iterations whose ring wrapped many times, and a
  // run without steps, by time: the whole run drawn above the window.
  for (const [name, args, env] of [["runlog", ["leak", "400"], { MEMSNAP_MAX_ENTRIES: "2000" }],
    ["runtime", ["time", "2.5"], { MEMSNAP_MAX_ENTRIES: "1000", MEMSNAP_LIVE_WATCH: "1" }]]) {
    execFileSync(path.join(build, "tests/gen_runlog"), [args[0], path.join(dir, name + ".db"), args[1]],
      { stdio: "ignore", env: Object.assign({}, process.env, env, { MEMSNAP_LIVE_DIR: dir }) });
    pages[name] = path.join(dir, name + ".html");
    execFileSync(path.join(build, "memsnap"), ["analyze", "--html", pages[name], path.join(dir, name + ".db")]);
  }
  // autograd graphs kept without a backward (gen_kept_graphs.c's eval.db), the model's name and the
  // evaluating function's hostile
  execFileSync(path.join(build, "tests/gen_kept_graphs"), [dir], { stdio: "ignore" });
  execFileSync("python3", ["-c", "import sqlite3, sys\nc = sqlite3.connect(sys.argv[1])\n" +
    "c.execute(\"update labels set text = replace(text, 'Net', ?)\", (sys.argv[2],))\n" +
    "c.execute(\"update frames set name = ? where name = 'evaluate'\", (sys.argv[3],))\nc.commit()",
    path.join(dir, "eval.db"), HOSTILE_MODULE, HOSTILE.keep_history]);
  pages.kept = path.join(dir, "kept.html");
  execFileSync(path.join(build, "memsnap"), ["analyze", "--html", pages.kept, path.join(dir, "eval.db")]);
  // leak.db as if written from its live mapping after its process died (meta's recovered, ended...)
  fs.copyFileSync(path.join(dir, "leak.db"), path.join(dir, "died.db"));
  execFileSync("python3", ["-c", "import sqlite3, sys\nc = sqlite3.connect(sys.argv[1])\n" +
    "c.executemany('insert or replace into meta values (?, ?)', [('recovered', 1), ('ended', sys.argv[2]), ('end_signal', 9), " +
    "('end_ns', 2500000000), ('last_alloc_ns', 2000000000), ('last_event_ns', 2100000000)])\nc.commit()",
    path.join(dir, "died.db"), HOSTILE_DEATH]);
  pages.died = path.join(dir, "died.html");
  execFileSync(path.join(build, "memsnap"), ["analyze", "--html", pages.died, path.join(dir, "died.db")]);
  pages.misuse = path.join(dir, "misuse.html"); // invalid frees
  execFileSync(path.join(build, "memsnap"), ["analyze", "--html", pages.misuse, path.join(dir, "misuse.db")]);
  // Real PyTorch snapshots (tests/data): resnet50_leak (C++ names hundreds of characters long,
  // 2.79 GiB reserved before its trace starts), cycle_oom (a site growing 512 MiB per iteration
  // until an OOM, the last event).
  for (const [name, file] of [["resnet", "resnet50_leak"], ["cycle", "cycle_oom"]]) {
    execFileSync(path.join(build, "memsnap"), ["import", path.join(root, "tests/data", file + ".pickle.gz"), "-o", path.join(dir, name + ".db")], { stdio: "ignore" });
    pages[name] = path.join(dir, name + ".html");
    execFileSync(path.join(build, "memsnap"), ["analyze", "--html", pages[name], path.join(dir, name + ".db")]);
  }
  // A GPT-2 run recorded on the GPU through the default path with the module record (run 60):
  // a forward hook keeps 12 MiB of hidden states a step.
  pages.modules = path.join(dir, "modules.html");
  execFileSync("sh", ["-c", 'xz -dc "$1" > "$2"', "xz", path.join(root, "tests/data/zoo/gpt2_leak_hook-cxx.db.xz"), path.join(dir, "modules.db")]);
  execFileSync(path.join(build, "memsnap"), ["analyze", "--html", pages.modules, path.join(dir, "modules.db")]);
  // Several documents in one page: two snapshots; a recording on two simulated devices; an
  // imported PyTorch snapshot of three devices (the first without entries; an OOM on the third).
  pages.both = path.join(dir, "both.html"); // the second one's file name is markup: it must show as text
  fs.copyFileSync(path.join(dir, "oom.db"), path.join(dir, HOSTILE_FILE));
  execFileSync(path.join(build, "memsnap"), ["analyze", "--html", pages.both, path.join(dir, "leak.db"), path.join(dir, HOSTILE_FILE)]);
  pages.devices = path.join(dir, "devices.html");
  execFileSync(path.join(build, "memsnap"), ["analyze", "--html", pages.devices, path.join(dir, "devices.db")]);
  execFileSync("python3", [path.join(root, "tests/analyzer/pytorch_pickles.py"), "multi", path.join(dir, "multi.pickle")]);
  execFileSync(path.join(build, "memsnap"), ["import", path.join(dir, "multi.pickle"), "-o", path.join(dir, "multi.db")], { stdio: "ignore" });
  pages.multi = path.join(dir, "multi.html");
  execFileSync(path.join(build, "memsnap"), ["analyze", "--html", pages.multi, path.join(dir, "multi.db")]);
  pages.cats = path.join(dir, "cats.html"); // the user's categories: the weights and the optimizer state named
  execFileSync(path.join(build, "memsnap"), ["analyze", "--html", pages.cats, "--category", "weights=load_weights",
    "--category", "state=make_optimizer_state", path.join(dir, "leak.db")]);
  // The allocator's own releases (tests/analyzer/gen_releases.c, a 1 GiB simulated card): a retry
  // (600 MiB released for a 700 MiB request); an out of memory that expandable segments avoid.
  fs.mkdirSync(path.join(dir, "releases"));
  execFileSync(path.join(build, "tests/gen_releases"), [path.join(dir, "releases")], { stdio: "ignore" });
  for (const name of ["retry", "frag_oom"]) {
    pages[name] = path.join(dir, name + ".html");
    execFileSync(path.join(build, "memsnap"), ["analyze", "--html", pages[name], path.join(dir, "releases", name + ".db")]);
  }
  // Real snapshots recorded on an H100 (tests/data/zoo/README.md): a GPT-2 leak, an FSDP2 rank, an
  // out of memory in backward. Analyzed from their directory, so the page names the file alone.
  for (const name of ZOO) {
    execFileSync("python3", ["-c", "import lzma, shutil, sys\nwith lzma.open(sys.argv[1]) as i, open(sys.argv[2], 'wb') as o: shutil.copyfileobj(i, o)",
      path.join(root, "tests/data/zoo", name + ".db.xz"), path.join(dir, name + ".db")]);
    pages["zoo-" + name] = path.join(dir, "zoo-" + name + ".html");
    execFileSync(path.join(build, "memsnap"), ["analyze", "--html", "zoo-" + name + ".html", name + ".db"], { cwd: dir });
  }
  // The page of a prediction (memsnap predict --html): tests/analyzer/gen_model.py's program at
  // batch 4 and 8, checkpointed, predicted at 16 and 32 on a 200 MiB card; and with --advise, from
  // runs whose module paths' root class and file names are markup.
  const gen = (out, ...args) => execFileSync("python3", [path.join(root, "tests/analyzer/gen_model.py"), path.join(dir, out), ...args], { stdio: "ignore" });
  for (const b of [4, 8]) {
    gen("p" + b + ".db", "--batch", String(b));
    gen(HOSTILE_RUN + b + ".db", "--batch", String(b), "--events", "--root", HOSTILE_MODULE);
  }
  pages.predict = path.join(dir, "predict.html");
  execFileSync(path.join(build, "memsnap"), ["predict", path.join(dir, "p4.db") + "=4", path.join(dir, "p8.db") + "=8", "--checkpoint", "Block",
    "--at", "16", "--at", "32", "--capacity", "200M", "--html", pages.predict]);
  pages.advise = path.join(dir, "advise.html");
  execFileSync(path.join(build, "memsnap"), ["predict", path.join(dir, HOSTILE_RUN + "4.db") + "=4", path.join(dir, HOSTILE_RUN + "8.db") + "=8",
    "--checkpoint", "blocks.*", "--at", "16", "--capacity", "200M", "--advise", "--html", pages.advise]);
  // One run's --shard page (issue 51): rank 0 at 2 and 4 ranks of FSDP2, beside the run as recorded.
  gen("shard.db", "--batch", "4", "--events", "--params", "--steps", "2");
  pages.shard = path.join(dir, "shard.html");
  execFileSync(path.join(build, "memsnap"), ["predict", path.join(dir, "shard.db"), "--shard", "fsdp2:2,4", "--html", pages.shard]);
  browser = await chromium.launch({ executablePath: chromiumPath, args: chromiumArgs });
});

after(async () => {
  if (browser) await browser.close();
  if (dir) fs.rmSync(dir, { recursive: true, force: true });
});

// Opens a page and watches it: console output, errors, dialogs and every request it makes.
async function open(name, hash = "", viewport = { width: 1600, height: 1300 }) {
  const page = await browser.newPage({ viewport });
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
  assert.ok(await page.locator("#oom-predict").isHidden()); // named under an out of memory only
  await shot(page, "leak");
  await page.close();
});

test("a long run: the whole run above the timeline, every iteration since recording started, the window shaded; by time without steps", async () => {
  const { page, seen } = await open("runlog", "", { width: 1280, height: 900 });
  assert.ok(await page.locator("#run-panel").isVisible(), "the whole run's panel is shown");
  assert.match(await page.locator("#run-title").textContent(), /^400 iterations since recording started; the shaded part is the timeline's window/);
  const strip = await page.evaluate(() => { const s = Model.runStrip(Model.decode(document.getElementById("memsnap-data").textContent), 1200);
    return { n: s.bars.length, first: s.bars[0].first, last: s.bars[s.bars.length - 1].first, window: s.window, total: s.total }; });
  assert.deepStrictEqual([strip.n, strip.first, strip.last, strip.total], [400, 0, 399, 400]);
  assert.ok(strip.window.x0 > 1000 && strip.window.x1 >= 1195, "the window is the run's last iterations: " + JSON.stringify(strip.window));
  const b = await page.locator("#run").boundingBox();
  await page.mouse.move(b.x + b.width * 0.002, b.y + b.height * 0.5);
  assert.match(await page.locator("#run-readout").textContent(), /^iteration 0: peak allocated 130\.00 MiB, peak reserved 160\.00 MiB, allocated at the end 129\.57 MiB; at the peak, as told: parameters 32\.00 MiB, gradients 0 B, optimizer state 64\.00 MiB, the rest 34\.00 MiB$/);
  assert.strictEqual(await page.locator("#iteration-table tbody tr").count(), 54, "the table details the window's iterations only");
  await shot(page, "runlog");
  assert.deepStrictEqual(seen.errors, []);
  await page.close();
  const t = await open("runtime", "", { width: 1280, height: 900 });
  assert.ok(await t.page.locator("#run-panel").isVisible());
  assert.match(await t.page.locator("#run-title").textContent(), /^[23] seconds since recording started/);
  const tb = await t.page.locator("#run").boundingBox();
  await t.page.mouse.move(tb.x + tb.width * 0.05, tb.y + tb.height * 0.5);
  assert.match(await t.page.locator("#run-readout").textContent(), /^second 0: peak allocated/);
  await shot(t.page, "runtime");
  assert.deepStrictEqual(t.seen.errors, []);
  await t.page.close();
  const l = await open("leak", ""); // a complete history: the window is the whole run, nothing above it
  assert.ok(await l.page.locator("#run-panel").isHidden());
  await l.page.close();
});

test("the leak list names the known leak site first", async () => {
  const { page } = await open("leak");
  const first = await page.locator("#leaks li").first().textContent();
  assert.match(first, /^growing \+1\.00 MiB\/iteration, 6\.00 MiB in 6 \u2014 keep_history \(gen_snapshots\.c:\d+\)$/);
  await page.close();
});

test("growth released before the snapshot is listed first, with when it was released", async () => {
  const { page } = await open("released");
  const first = await page.locator("#leaks li").first().textContent();
  assert.match(first, /^growing \+1\.00 MiB\/iteration, released at [0-9.]+ [mu]?s, 0 B in 0 \u2014 keep_history \(gen_snapshots\.c:\d+\)$/);
  assert.match(await page.locator("#leaks li").first().getAttribute("class"), /growing/);
  await page.close();
});

test("blocks allocated before recording started say so in the leak list", async () => {
  const { page } = await open("late");
  const items = await page.locator("#held li").allTextContents(); // held since the start, not growing: apart from the candidates
  assert.ok(items.some((t) => /^retained other, 96\.00 MiB in 1 \u2014 \(allocated before recording started\)$/.test(t)), items.join("\n"));
  assert.ok(!items.some((t) => /\u2014 \?$/.test(t)), items.join("\n"));
  await page.close();
});

test("long C++ names read short in the lists and the icicle graph, whole on hover", async () => {
  const { page, seen } = await open("resnet");
  const items = await page.locator("#held li").allTextContents();
  assert.ok(items.every((t) => t.length < 160), items.join("\n"));
  const i = items.findIndex((t) => t.endsWith("\u2014 ConvolutionBackward0")); // a backward allocation reads as its autograd node
  assert.ok(i >= 0, items.join("\n"));
  assert.match(await page.locator("#held li").nth(i).getAttribute("title"), /^torch::autograd::generated::ConvolutionBackward0(::apply|_apply_functional)\(std::vector<at::Tensor, /);
  await page.locator("#held li").nth(i).click();
  const lines = (await page.locator("#details").textContent()).split("\n").filter(Boolean);
  assert.ok(lines.length >= 1 && lines.every((l) => l.length < 160), lines.join("\n"));
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
  // The allocator state follows the click: the state right after the last event at or before it.
  const steps = await page.evaluate(() => JSON.parse(document.getElementById("memsnap-data").textContent).steps.t);
  const last = steps.filter((t) => t <= st.cur).length;
  assert.match(await page.locator("#state-title").textContent(), new RegExp("^after event " + last + " of " + steps.length + " at "));
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
  assert.strictEqual(await page.locator("#leaks li").count() + await page.locator("#held li").count(), 1);
  assert.match(await page.locator("#held li").first().textContent(), /make_optimizer_state/);
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
  assert.match(await page.locator("#oom-predict").textContent(), /memsnap predict small\.db=SIZE large\.db=SIZE --capacity/);
  assert.ok(await page.locator("#oom-predict").isVisible());
  assert.deepStrictEqual(seen.errors, []);
  await shot(page, "oom");
  await page.close();
});

test("kept autograd graphs: listed above the leak candidates in the text report's words, hostile names as text", async () => {
  const { page, seen } = await open("kept");
  const graphs = await page.locator("#kept-graphs li").allTextContents();
  assert.strictEqual(graphs.length, 1, graphs.join("\n"));
  assert.ok(graphs[0].startsWith("G1. 480.00 MiB in 3 autograd graphs kept alive: the forward of " + HOSTILE_MODULE + " at "), graphs[0]);
  assert.ok(graphs[0].includes(" at <script>alert()</script> (gen_kept_graphs.c:"), graphs[0]); // its caller, renamed
  assert.match(graphs[0], /\(gen_kept_graphs\.c:\d+\) ran with grad enabled and no backward \(iterations 3 to 11\);.*torch\.no_grad\(\).*loss\.item\(\)/);
  const leaks = await page.locator("#leaks li").allTextContents();
  assert.strictEqual(leaks.filter((l) => /^growing \+40\.00 MiB every 4 iterations, 120\.00 MiB in 3 \u2014 .* \u00b7 120\.00 MiB in kept graph G1$/.test(l)).length, 4, leaks.join("\n"));
  const glance = await page.locator("#glance-grows .glance-text").textContent();
  assert.match(glance, /^\+40\.00 MiB every 4 iterations, 120\.00 MiB live at the end: .*; 480\.00 MiB in 3 autograd graphs kept alive without a backward: G1$/, glance);
  await page.locator("#kept-graphs li").first().click();
  assert.match(await page.locator("#details-title").textContent(), /^Kept graph G1: its largest site \(120\.00 MiB\)$/);
  assert.ok((await page.locator("#details").textContent()).startsWith("480.00 MiB in 3 autograd graphs"));
  await shot(page, "kept-graphs");
  assert.deepStrictEqual(seen.dialogs, []);
  assert.deepStrictEqual(seen.errors, []);
  assert.strictEqual(await page.locator("img").count(), 0);
  assert.deepStrictEqual(seen.requests.filter((u) => !u.startsWith("file://" + pages.kept)), []);
  await page.close();
});

test("a snapshot written after its process died says how and when in the header; its own snapshot says nothing", async () => {
  const { page, seen } = await open("died");
  const death = page.locator("#death");
  assert.ok(await death.isVisible());
  assert.strictEqual(await death.textContent(), "died: " + HOSTILE_DEATH + " at 2.50 s, 500.0 ms after its last allocation " +
    "(this snapshot was written from its live mapping afterwards)");
  await page.waitForTimeout(300);
  assert.deepStrictEqual(seen.dialogs, []);
  assert.deepStrictEqual(seen.errors, []);
  assert.strictEqual(await page.locator("img").count(), 0); // the meta's markup shows as text
  assert.deepStrictEqual(seen.requests.filter((u) => !u.startsWith("file://" + pages.died)), []);
  await shot(page, "died");
  await page.close();
  const plain = await open("leak");
  assert.ok(await plain.page.locator("#death").isHidden());
  assert.strictEqual(await plain.page.locator("#death").textContent(), "");
  await plain.page.close();
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
  const leaks = (await page.locator("#leaks").textContent()) + (await page.locator("#held").textContent());
  assert.ok(leaks.includes(short(HOSTILE.keep_history)) && leaks.includes(short(HOSTILE.load_weights)), leaks);
  const titles = await page.locator("#leaks li, #held li").evaluateAll((items) => items.map((li) => li.title));
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

// ---- real PyTorch snapshots: what must hold (issue 17) -----------------------------------

// Pixels of an exact colour in a canvas, per column of x (from x0, w columns wide).
async function colourColumns(page, id, rgb, x0, w) {
  return page.evaluate(([id, rgb, x0, w]) => {
    const c = document.getElementById(id), data = c.getContext("2d").getImageData(x0, 0, w, c.height).data, cols = new Array(w).fill(0);
    for (let i = 0; i < data.length; i += 4)
      if (data[i] === rgb[0] && data[i + 1] === rgb[1] && data[i + 2] === rgb[2]) cols[(i / 4) % w]++;
    return cols;
  }, [id, rgb, x0, w]);
}

test("real cycle_oom: selecting the growing leak candidate shows its growth, bar by bar per iteration", async () => {
  const { page, seen } = await open("cycle");
  assert.ok(await page.locator("#growth-panel").isHidden());
  const first = page.locator("#leaks li").first();
  assert.match(await first.textContent(), /^growing \+512\.00 MiB\/iteration/);
  await first.click();
  assert.ok(await page.locator("#growth-panel").isVisible());
  assert.match(await page.locator("#growth-title").textContent(), /\+512\.00 MiB per iteration/);
  // 15 iterations: each bar (its middle column) taller than the one before, by about the same.
  const n = 15, W = 1200, left = 90, bw = (W - left - 10) / n;
  const heights = [];
  for (let k = 0; k < n; k++) heights.push((await colourColumns(page, "growth", [0xe5, 0x39, 0x35], Math.floor(left + k * bw + bw / 2), 1))[0]);
  for (let k = 1; k < n; k++) assert.ok(heights[k] > heights[k - 1], "bar heights " + heights.join(","));
  const steps = heights.slice(1).map((h, k) => h - heights[k]);
  assert.ok(Math.max(...steps) - Math.min(...steps) <= 2, "steady growth per iteration: " + steps.join(","));
  await shot(page, "pytorch-cycle_oom-leak");
  await first.click(); // unselected: the chart goes
  assert.ok(await page.locator("#growth-panel").isHidden());
  assert.deepStrictEqual(seen.errors, []);
  await page.close();
});

test("real cycle_oom: the OOM is marked though it is the last event, before and after clicking it", async () => {
  const { page, seen } = await open("cycle");
  const red = [0xc6, 0x28, 0x28], H = 320;
  const marked = async () => (await colourColumns(page, "timeline", red, 1160, 40)).filter((c) => c >= H - 30).length; // a line the height of the timeline (tick labels may cover its foot)
  assert.ok(await marked() >= 2, "a full-height red line at the right edge");
  await page.locator("#ooms li").first().click();
  assert.ok(await marked() >= 2, "still there once the OOM is clicked");
  const flag = (await colourColumns(page, "timeline", red, 1120, 76)).map((c) => Math.min(c, 16)); // left of the line
  assert.ok(flag.reduce((a, b) => a + b, 0) >= 250, "the OOM flag (34 x 16 px, its text cut out): " + flag.join(","));
  await shot(page, "pytorch-cycle_oom-oom");
  assert.deepStrictEqual(seen.errors, []);
  await page.close();
});

test("real resnet50: the arrow keys step the allocator state event by event", async () => {
  const { page, seen } = await open("resnet");
  await overTimeline(page, 0.5, 0.5);
  await page.mouse.down();
  await page.mouse.up();
  const title = async () => page.locator("#state-title").textContent();
  const summary = async () => page.locator("#state-summary").textContent();
  const start = await title();
  assert.match(start, /^after event (\d+) of 10052 at /);
  const n0 = Number(start.match(/^after event (\d+)/)[1]);
  const seenStates = new Set([await summary()]);
  for (let k = 1; k <= 6; k++) {
    await page.keyboard.press("ArrowRight");
    assert.match(await title(), new RegExp("^after event " + (n0 + k) + " of 10052 at .*: (alloc|free requested|free completed|segment alloc|segment free) "));
    seenStates.add(await summary());
  }
  assert.ok(seenStates.size >= 3, "the state moved: " + [...seenStates].join("\n"));
  assert.match(await summary(), /; rounding inside allocated blocks \(internal fragmentation\): [\d.]+ [KMG]?i?B/);
  await page.keyboard.press("Shift+ArrowLeft");
  assert.match(await title(), new RegExp("^after event " + (n0 - 4) + " of 10052 "));
  // Back at the history's first instant: what predates it (2.79 GiB reserved) is there.
  await page.keyboard.press("Home");
  for (let k = 0; k < 3; k++) await page.keyboard.press("Shift+ArrowLeft");
  await page.evaluate(() => { for (let i = 0; i < 1200; i++) window.dispatchEvent(new KeyboardEvent("keydown", { key: "ArrowLeft", shiftKey: true })); });
  assert.match(await title(), /^when the history starts/);
  assert.match(await summary(), /reserved 2\.79 GiB, allocated 149\.23 MiB/);
  await shot(page, "pytorch-resnet50-start");
  assert.deepStrictEqual(seen.errors, []);
  await page.close();
});

test("real resnet50: memory from before the history is drawn from the start, under the reserved curve", async () => {
  const { page, seen } = await open("resnet");
  // A pixel column near the start (8 ms in, clear of the tick labels): allocated (bands) from the
  // bottom, and reserved above them; neither has been added to since the history's first instant.
  const col = await page.evaluate(() => {
    const c = document.getElementById("timeline"), data = c.getContext("2d").getImageData(30, 0, 1, c.height).data, out = [];
    for (let i = 0; i < data.length; i += 4) out.push([data[i], data[i + 1], data[i + 2]]);
    return out;
  });
  const grey = ([r, g, b]) => r === 0xcf && g === 0xd8 && b === 0xdc;
  const shade = ([r, g, b]) => (r === 0xea && g === 0xee && b === 0xf7) || (r === 0xf4 && g === 0xf6 && b === 0xfb) || (r === g && g === b);
  const H = col.length, yMax = 3623878656 * 1.05, top = col.findIndex(grey);
  const reservedAtStart = ((H - top) / (H - 4)) * yMax;
  assert.ok(top >= 0 && reservedAtStart >= 2996830208 * 0.98, "reserved drawn from 2.79 GiB at the start: top row " + top + " = " + reservedAtStart);
  const bands = col.filter((c) => !grey(c) && !shade(c)).length;
  assert.ok(bands >= 10, "the allocations from before the history (149 MiB) drawn from the start: " + bands + " px");
  await shot(page, "pytorch-resnet50");
  assert.deepStrictEqual(seen.errors, []);
  await page.close();
});

test("real resnet50: the event-index axis gives each iteration its share of the width", async () => {
  const { page, seen } = await open("resnet");
  // Columns holding the iteration peaks' red dots (nothing else on this timeline is that red).
  const reds = () => page.evaluate(() => {
    const c = document.getElementById("timeline"), px = c.getContext("2d").getImageData(0, 0, c.width, c.height).data, xs = new Set();
    for (let i = 0; i < px.length; i += 4) if (px[i] === 0xc6 && px[i + 1] === 0x28 && px[i + 2] === 0x28) xs.add((i / 4) % c.width);
    return [...xs];
  });
  // Where each peak belongs on the event axis: its event's index over the events, times the width.
  const expected = await page.evaluate(() => {
    const d = JSON.parse(document.getElementById("memsnap-data").textContent), ts = d.steps.t;
    return d.iterations.map((it) => ((ts.filter((t) => t <= it.peak_allocated_ns).length - 1) / ts.length) * 1200);
  });
  const near = (xs, e) => xs.some((x) => Math.abs(x - e) <= 3);
  const timeAxis = await reds();
  assert.ok(!near(timeAxis, expected[0]) && !near(timeAxis, expected[1]), "time axis: " + timeAxis.join(","));
  await page.locator("#event-axis").check();
  const eventAxis = await reds();
  for (const e of expected) assert.ok(near(eventAxis, e), "event axis: a peak near " + e + " in " + eventAxis.join(","));
  // evenly spread: five iterations, each about a fifth of the width
  assert.ok(expected[1] - expected[0] > 150 && expected[4] - expected[3] > 150, expected.join(","));
  assert.strictEqual((await hashState(page)).ev, 1);
  await shot(page, "pytorch-resnet50-events");
  assert.deepStrictEqual(seen.errors, []);
  await page.close();
});

test("real resnet50: icicle click-to-zoom, temporal mode, hovered allocation outlined", async () => {
  const { page, seen } = await open("resnet");
  const fb = await page.locator("#flame").boundingBox();
  const readFrame = async (x, row) => { await page.mouse.move(fb.x + x, fb.y + row * 18 + 9); return page.locator("#flame-readout").textContent(); };
  const second = await readFrame(50, 2);
  assert.match(second, /^forward {2}\(.*resnet\.py:285\): /);
  await page.mouse.click(fb.x + 50, fb.y + 2 * 18 + 9); // zoom into it: it becomes the top row, full width
  assert.match(await page.locator("#flame-zoom").textContent(), /^zoomed into forward \(/);
  const fb2 = await page.locator("#flame").boundingBox();
  await page.mouse.move(fb2.x + fb2.width - 5, fb2.y + 9);
  assert.match(await page.locator("#flame-readout").textContent(), /^forward {2}\(.*resnet\.py:285\): /);
  await page.mouse.click(fb2.x + 5, fb2.y + 9); // the top row: one level out
  await page.mouse.click(fb2.x + 5, fb2.y + 9); // and out again: the whole
  assert.ok(await page.locator("#flame-zoom").isHidden());
  // Temporal: what the window allocated and did not free; zoomed into the last iteration, the
  // gradients and momentum buffers (allocated in the first iteration) are not in it.
  await page.locator("#temporal").check();
  assert.match(await page.locator("#flame-title").textContent(), /^allocated from 0 ns to 328\.2 ms \(the window\) and not freed by its end$/);
  await page.mouse.move(fb.x + 5, fb.y + 9);
  const whole = Number((await page.locator("#flame-readout").textContent()).match(/: ([\d.]+) MiB/)[1]);
  assert.ok(Math.abs(whole - (385.03 - 149.23)) < 0.05, "all the history allocated and kept: " + whole); // at the snapshot, less what predates it
  // Hover an allocation: it is outlined (dashed, dark) on the timeline.
  const dark = () => page.evaluate(() => { const c = document.getElementById("timeline"), px = c.getContext("2d").getImageData(0, 0, c.width, c.height).data; let n = 0;
    for (let i = 0; i < px.length; i += 4) if (px[i] === 0x37 && px[i + 1] === 0x47 && px[i + 2] === 0x4f) n++; return n; });
  const before = await dark();
  const b = await page.locator("#timeline").boundingBox();
  await page.mouse.move(b.x + b.width * 0.62, b.y + b.height * 0.9);
  assert.match(await page.locator("#readout").textContent(), /\n[\d.]+ [KMG]i?B at 0x/);
  assert.ok(await dark() > before + 50, "outline drawn: " + before + " -> " + (await dark()));
  await shot(page, "pytorch-resnet50-temporal");
  assert.deepStrictEqual(seen.errors, []);
  await page.close();
});

test("real resnet50: the iteration table, one row per optimizer step with its categories; a click moves the cursor to its peak", async () => {
  const { page, seen } = await open("resnet");
  const rows = page.locator("#iteration-table tbody tr");
  assert.strictEqual(await rows.count(), 5);
  assert.match(await page.locator("#iterations-title").textContent(), /^5 \(ranges: Optimizer\.step#SGD\.step\); growth: none$/);
  assert.strictEqual(await page.locator("#growth-verdict").textContent(), "no growth across 5 iterations: what is listed is held, not growing");
  assert.match(await page.locator("#held li").nth(2).textContent(), /^retained gradient, 95\.04 MiB in 53/);
  assert.strictEqual(await page.locator("#leaks li").count(), 0); // nothing grows: every candidate is held
  const last = await rows.nth(4).textContent();
  assert.match(last, /activation [0-9.]+ [GM]iB/);
  assert.match(last, /gradient [0-9.]+ MiB/);
  const before = await page.locator("#state-title").textContent();
  await rows.nth(2).click();
  await page.waitForFunction((b) => document.querySelector("#state-title").textContent !== b, before);
  assert.match(await page.locator("#state-title").textContent(), /peak of iteration 2|at /);
  await shot(page, "iterations");
  assert.deepStrictEqual(seen.errors, []);
  await page.close();
});

test("real resnet50: the table of sites sorts by any column and follows the search", async () => {
  const { page, seen } = await open("resnet");
  const rows = page.locator("#site-table tbody tr");
  const column = async (i) => rows.evaluateAll((trs, i) => trs.map((tr) => tr.children[i].textContent), i);
  const bytes = (s) => { const [v, u] = s.split(" "); return Number(v) * { B: 1, KiB: 1024, MiB: 1048576, GiB: 1073741824 }[u]; };
  const sortedDesc = (xs) => xs.every((x, i) => i === 0 || xs[i - 1] >= x);
  assert.ok(await rows.count() > 50);
  assert.ok(sortedDesc((await column(1)).map(bytes)), "by bytes allocated, largest first");
  await page.locator("#site-table th[data-col=live]").click();
  const live = (await column(3)).map(bytes);
  assert.ok(sortedDesc(live) && live[0] > 140 * 1048576, "by live bytes: " + live.slice(0, 3)); // before the history: 149.23 MiB
  assert.match((await column(0))[0], /^\(allocated before recording started\)$/);
  await page.locator("#site-table th[data-col=count]").click();
  await page.locator("#site-table th[data-col=count]").click(); // again: ascending
  const counts = (await column(2)).map(Number);
  assert.ok(counts.every((x, i) => i === 0 || counts[i - 1] <= x), "by allocations, ascending: " + counts.slice(0, 5));
  await page.fill("#search", "sgd.py");
  const labels = await column(0);
  assert.ok(labels.length >= 1 && labels.length < 20, labels.join("\n"));
  await rows.first().click();
  assert.match(await page.locator("#details").textContent(), /sgd\.py/);
  assert.match(await page.locator("#sites-title").textContent(), new RegExp("^" + labels.length + " of \\d+ sites"));
  await shot(page, "pytorch-resnet50-sites");
  assert.deepStrictEqual(seen.errors, []);
  await page.close();
});

// ---- the segment timeline, whole stacks, several documents (issue 17's last items) -----------

// The rows of a canvas column (x), each as [r, g, b].
const canvasColumn = (page, id, x) => page.evaluate(([id, x]) => {
  const c = document.getElementById(id), data = c.getContext("2d").getImageData(x, 0, 1, c.height).data, out = [];
  for (let i = 0; i < data.length; i += 4) out.push([data[i], data[i + 1], data[i + 2], data[i + 3]]);
  return out;
}, [id, x]);
// The topmost painted row of a column of the segment timeline (white and transparent are not).
const topRow = (col) => col.findIndex(([r, g, b, a]) => a > 0 && !(r === 255 && g === 255 && b === 255));

test("real resnet50: reserved memory by segment, from before the history to the end, each segment's stack on hover", async () => {
  const { page, seen } = await open("resnet");
  assert.match(await page.locator("#spans-title").textContent(), /^109 segments over the history \(82 from before it\), in the order they were made$/);
  // Stacked segments reach reserved memory: 2.79 GiB at the first instant, 3.38 GiB at the end
  // (the scale: the window's highest, 3.38 GiB, plus 5%; the canvas is 140 px, 4 left at the top).
  const H = 140, yTop = 3623878656 * 1.05, row = (v) => Math.round(H - (v / yTop) * (H - 4));
  const first = topRow(await canvasColumn(page, "spans", 1)), last = topRow(await canvasColumn(page, "spans", 1198));
  assert.ok(Math.abs(first - row(2996830208)) <= 1, "top of the first column: row " + first + ", 2.79 GiB is row " + row(2996830208));
  assert.ok(Math.abs(last - row(3623878656)) <= 1, "top of the last column: row " + last + ", 3.38 GiB is row " + row(3623878656));
  // Low in the first column: a segment from before the history, with no stack of its own.
  const b = await page.locator("#spans").boundingBox();
  await page.mouse.move(b.x + 2, b.y + b.height - 3);
  assert.match(await page.locator("#spans-readout").textContent(), /^segment 0x[0-9a-f]+ \([\d.]+ MiB, stream 0x0, device 0\), allocated before recording started, still reserved at the end$/);
  assert.match(await page.locator("#details").textContent(), /\(allocated before recording started\)$/);
  // The top of the last column: the last segment made, with the stack that allocated it, drawn
  // dark from when it was made (and not before).
  await page.mouse.move(b.x + b.width - 2, b.y + (last + 1) * (b.height / H));
  const readout = await page.locator("#spans-readout").textContent();
  const made = readout.match(/^segment 0x[0-9a-f]+ \([\d.]+ MiB, stream 0x0, device 0\), allocated at ([\d.]+) ms, still reserved at the end$/);
  assert.ok(made, readout);
  assert.match(await page.locator("#details-title").textContent(), /^Segment 0x[0-9a-f]+$/);
  const frames = (await page.locator("#details span").allTextContents()).filter((l) => l.trim());
  assert.ok(frames.length >= 1 && /^[A-Za-z]+Backward0 /.test(frames[0]), frames.join("")); // made in a backward pass: its autograd node
  const dark = await colourColumns(page, "spans", [0x37, 0x47, 0x4f], 0, 1200);
  const from = dark.findIndex((n) => n > 0), span = 328.2; // ms, the whole history
  assert.ok(from > 0 && Math.abs(from - (Number(made[1]) / span) * 1200) <= 3, "drawn dark from column " + from + ", made at " + made[1] + " ms");
  assert.ok(dark.slice(from).every((n) => n > 0), "and to the end");
  await shot(page, "pytorch-resnet50-segments");
  assert.deepStrictEqual(seen.errors, []);
  await page.close();
});

test("real resnet50: the allocator state shows the stack that allocated a segment", async () => {
  const { page, seen } = await open("resnet");
  const b = await page.locator("#segments").boundingBox();
  await page.mouse.move(b.x + 5, b.y + 5); // at the peak: the first segment, made during the first iteration
  assert.match(await page.locator("#state-readout").textContent(), /^segment 0x7f3120000000 \(156\.00 MiB, .*; allocated at 192\.3 ms by ConvolutionBackward0$/);
  assert.match(await page.locator("#details-title").textContent(), /^Segment 0x7f3120000000$/);
  assert.match(await page.locator("#details").textContent(), /allocated at 192\.3 ms[\s\S]*ConvolutionBackward0/);
  // Stepped back to the history's first instant: a segment from before it says so.
  await page.evaluate(() => { for (let i = 0; i < 1200; i++) window.dispatchEvent(new KeyboardEvent("keydown", { key: "ArrowLeft", shiftKey: true })); });
  assert.match(await page.locator("#state-title").textContent(), /^when the history starts/);
  await page.mouse.move(b.x + 5, b.y + 5);
  assert.match(await page.locator("#state-readout").textContent(), /; allocated before recording started$/);
  assert.match(await page.locator("#details").textContent(), /\(allocated before recording started\)$/);
  assert.deepStrictEqual(seen.errors, []);
  await page.close();
});

test("real resnet50: hiding irrelevant frames, in the icicle graph and the stack panel", async () => {
  const { page, seen } = await open("resnet");
  const toggle = page.locator("#hide-frames");
  assert.ok(await toggle.isChecked() && !(await toggle.isDisabled()));
  const frameAt = async (row) => { const fb = await page.locator("#flame").boundingBox(); await page.mouse.move(fb.x + 3, fb.y + row * 18 + 9); return page.locator("#flame-readout").textContent(); };
  const hidden = { height: (await page.locator("#flame").boundingBox()).height, second: await frameAt(2) };
  assert.match(hidden.second, /^forward {2}\(.*resnet\.py:285\)/);
  const leak = page.locator("#held li").filter({ hasText: "ConvolutionBackward0" }).first();
  await leak.click();
  const panel = async () => (await page.locator("#details span").allTextContents()).map((l) => l.trim()).filter(Boolean);
  const few = await panel();
  assert.ok(!few.some((l) => /CUDACachingAllocator|autograd::Engine/.test(l)), few.join("\n"));
  await toggle.uncheck(); // whole stacks: the allocator's and the interpreter's frames too
  assert.strictEqual((await hashState(page)).all, 1);
  const all = await panel();
  assert.ok(all.length > few.length + 10, few.length + " -> " + all.length);
  assert.ok(all.some((l) => /CUDACachingAllocator/.test(l)) && all.some((l) => /autograd::Engine::thread_main/.test(l)), all.join("\n"));
  const shown = { height: (await page.locator("#flame").boundingBox()).height, second: await frameAt(2) };
  assert.ok(shown.height > hidden.height * 2, "deeper: " + hidden.height + " -> " + shown.height);
  assert.match(shown.second, /^_wrapped_call_impl {2}\(.*torch\/nn\/modules\/module\.py:1779\)/); // PyTorch's module-call plumbing
  await shot(page, "pytorch-resnet50-whole-stacks");
  await toggle.check();
  assert.deepStrictEqual(await panel(), few);
  assert.strictEqual((await page.locator("#flame").boundingBox()).height, hidden.height);
  assert.deepStrictEqual(seen.errors, []);
  await page.close();
});

test("several snapshots in one page: the selector switches every view, and the URL keeps it", async () => {
  const { page, seen } = await open("both");
  assert.ok(await page.locator("#source-box").isVisible());
  assert.deepStrictEqual((await page.locator("#source option").allTextContents()).map((t) => path.basename(t)), ["leak.db", HOSTILE_FILE]);
  assert.match(await page.locator("#summary").textContent(), /leak\.db \u2014 .* 6 iterations \(marks\)/);
  assert.match(await page.locator("#leaks li").first().textContent(), /^growing \+1\.00 MiB\/iteration/);
  assert.strictEqual(await page.locator("#ooms li").count(), 0);
  await page.selectOption("#source", "1");
  await page.waitForFunction(() => document.body.dataset.src === "1");
  assert.ok((await page.locator("#summary").textContent()).includes(HOSTILE_FILE + " \u2014 "));
  assert.strictEqual(await page.locator("#ooms li").count(), 1);
  assert.match(await page.locator("#ooms li").first().textContent(), /40\.00 MiB requested/);
  assert.ok(!(await page.locator("#leaks").textContent()).includes("growing"));
  assert.match(await page.locator("#state-summary").textContent(), /allocated 40\.00 MiB/);
  const url = page.url();
  assert.strictEqual((await hashState(page)).src, 1);
  // The views answer for the snapshot shown, and nothing of the first one is left listening.
  await overTimeline(page, 0.5, 0.5);
  await page.keyboard.press("ArrowRight");
  assert.match(await page.locator("#state-title").textContent(), /^after event \d+ of [1-9] at /);
  await shot(page, "two-snapshots");
  const again = await browser.newPage({ viewport: { width: 1600, height: 1300 } });
  await again.goto(url);
  await again.waitForSelector("body[data-ready='1']");
  assert.ok((await again.locator("#summary").textContent()).includes(HOSTILE_FILE + " \u2014 "));
  assert.strictEqual(await again.locator("#source").inputValue(), "1");
  await again.close();
  const one = await open("leak"); // a page of one snapshot has no selector
  assert.ok(await one.page.locator("#source-box").isHidden());
  await one.page.close();
  assert.deepStrictEqual(seen.errors, []);
  assert.deepStrictEqual(seen.console, []);
  assert.deepStrictEqual(seen.dialogs, []);
  assert.strictEqual(await page.locator("img").count(), 0);
  assert.deepStrictEqual(seen.requests.filter((u) => !u.startsWith("file://" + pages.both)), []);
  await page.close();
});

test("a snapshot on several devices: a document per device, the selector switches every view", async () => {
  const { page, seen } = await open("devices"); // recorded on two simulated devices
  assert.deepStrictEqual((await page.locator("#source option").allTextContents()).map((t) => path.basename(t)), ["devices.db, device 0", "devices.db, device 1"]);
  const state = async () => { const b = await page.locator("#segments").boundingBox(); await page.mouse.move(b.x + 5, b.y + 5); return page.locator("#state-readout").textContent(); };
  assert.match(await page.locator("#leaks li").first().textContent(), /^growing \+1\.00 MiB\/iteration, 4\.00 MiB in 4 \u2014 keep_history/);
  assert.match(await state(), /, device 0\)/);
  assert.match(await page.locator("#summary").textContent(), /; peak allocated 100\.00 MiB/);
  await page.selectOption("#source", "1");
  await page.waitForFunction(() => document.body.dataset.src === "1");
  assert.match(await page.locator("#summary").textContent(), /devices\.db, device 1 \u2014 .*; peak allocated 40\.00 MiB/);
  assert.match(await state(), /, device 1\)/);
  assert.ok(!(await page.locator("#leaks").textContent()).includes("keep_history"));
  assert.match(await page.locator("#spans-title").textContent(), /^2 segments over the history, in the order they were made$/);
  await shot(page, "devices-1");
  assert.deepStrictEqual(seen.errors, []);
  await page.close();
  const multi = await open("multi"); // imported: devices 1 and 2 hold memory, the OOM is on 2
  assert.deepStrictEqual((await multi.page.locator("#source option").allTextContents()).map((t) => path.basename(t)), ["multi.db, device 1", "multi.db, device 2"]);
  assert.strictEqual(await multi.page.locator("#ooms li").count(), 0);
  await multi.page.selectOption("#source", "1");
  await multi.page.waitForFunction(() => document.body.dataset.src === "1");
  assert.strictEqual(await multi.page.locator("#ooms li").count(), 1);
  assert.deepStrictEqual(multi.seen.errors, []);
  await multi.page.close();
});

test("the timeline coloured by category: a legend with each category's bytes at the peak, hover names the category, the URL keeps it", async () => {
  const { page, seen } = await open("cats");
  assert.strictEqual(await page.locator("#legend-categories").isHidden(), true);
  await page.locator("#colour-by").selectOption("categories");
  assert.strictEqual(await page.locator("#legend").isHidden(), true);
  // the legend: a swatch and a name each; the bytes at the peak, the meaning and how sure on hover
  const items = await page.locator("#legend-categories .item").evaluateAll((els) => els.map((e) => [e.textContent, e.title]));
  const item = (name) => (items.find(([t]) => t === name) || [name, ""])[1];
  // the two 8 MiB activations made and freed inside each step (no backward pass: temporaries), the
  // kept history (other), and the user's categories
  assert.match(item("temporary"), /^temporary: 16\.00 MiB at the peak; freed by the operation that made it/);
  assert.match(item("other"), /^other: 6\.00 MiB at the peak/);
  assert.match(item("weights"), /^weights: 96\.00 MiB at the peak; --category: a frame matches load_weights \(matched by a --category pattern\)$/);
  assert.match(item("state"), /^state: 64\.00 MiB at the peak/);
  // the Categories table says the same for every category, and what this snapshot cannot tell
  const rows = Object.fromEntries(await page.locator("#category-table tbody tr").evaluateAll((trs) =>
    trs.map((tr) => [tr.dataset.category, [...tr.children].map((td) => td.textContent)])));
  assert.deepStrictEqual(rows.temporary.slice(1, 2), ["16.00 MiB"]);
  assert.match(rows.temporary[2], /^freed by the operation that made it/);
  assert.deepStrictEqual(rows.weights.slice(1), ["96.00 MiB", "--category: a frame matches load_weights", "your pattern"]);
  assert.strictEqual(rows.gradient[3], "not told");
  assert.match(await page.locator("#categories-panel").textContent(), /no gradient told: no backward pass recorded/);
  assert.strictEqual((await hashState(page)).cat, 1);
  // at the end, the weights' band lies above the 6 MiB of other memory, below the state's
  await overTimeline(page, 0.985, 0.62);
  assert.match(await page.locator("#readout").textContent(), /\nweights: 96\.00 MiB at /);
  await shot(page, "categories");
  const again = await open("cats", new URL(page.url()).hash);
  assert.strictEqual(await again.page.locator("#colour-by").inputValue(), "categories");
  assert.strictEqual(await again.page.locator("#legend-categories").isHidden(), false);
  assert.deepStrictEqual(seen.errors, []);
  await again.page.close();
  await page.close();
});

test("the allocator's retry: listed with what it released, marked on the timeline; selecting it shows the request's stack", async () => {
  const { page, seen } = await open("retry");
  const li = page.locator("#retries li");
  assert.strictEqual(await li.count(), 1);
  assert.match(await li.first().textContent(), /^at [0-9.]+ [mu]?s: 700\.00 MiB requested; the allocator released 600\.00 MiB of cached segments and retried: served \(1 segment\) \u2014 big_request/);
  const amber = [0xef, 0x6c, 0x00], H = 320;
  const marked = async (least) => (await colourColumns(page, "timeline", amber, 0, 1200)).filter((c) => c >= least).length;
  // Where the retry falls in the whole run varies with the recording's timing: the axis labels
  // on their light backing may cover part of the line there.
  assert.ok(await marked(H / 2) >= 1, "an amber line where the cache was released");
  await li.first().click();
  assert.strictEqual(await page.locator("#details-title").textContent(), "Retry 1");
  assert.match(await page.locator("#details").textContent(), /700\.00 MiB requested[\s\S]*big_request/);
  await shot(page, "retry");
  assert.ok(await marked(H - 30) >= 1, "in the window around it (the retry in the middle), full height (tick labels may cover its foot): " +
    (await colourColumns(page, "timeline", amber, 0, 1200)).filter((c) => c > 0).join(","));
  assert.deepStrictEqual(seen.errors, []);
  await page.close();
});

test("suggestions: the exact PYTORCH_CUDA_ALLOC_CONF line to set, best first, with what it does; none said so", async () => {
  const { page, seen } = await open("frag_oom");
  assert.ok(await page.locator("#suggestions-box").isVisible());
  const li = page.locator("#suggestions li");
  assert.ok(await li.count() >= 1);
  assert.strictEqual(await li.first().locator("code").textContent(), "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True");
  assert.strictEqual(await li.first().locator("div").textContent(), "the recorded out of memory does not happen; peak reserved 800.00 MiB");
  assert.strictEqual(await page.locator("#retries li").count(), 0); // the split segment could not be released: no retry
  assert.strictEqual(await page.locator("#releases-summary").textContent(), "none: the allocator released no cached memory");
  await shot(page, "suggestions");
  assert.deepStrictEqual(seen.errors, []);
  await page.close();
  const other = await open("retry"); // no setting saves 5%: the box says so
  assert.strictEqual(await other.page.locator("#suggestions li").count(), 0);
  assert.match(await other.page.locator("#suggestions-note").textContent(), /no setting of the sweep lowers peak reserved memory by 5% or more/);
  await other.page.close();
  const several = await open("both"); // several snapshots: the sweep is not run (memsnap replay --sweep is), no box
  assert.ok(await several.page.locator("#suggestions-box").isHidden());
  await several.page.close();
});

// The legends drawn on the page: for each, whether its items sit on one line and nothing of it
// overflows its box ([{id, lines, overflow}]).
const legendLines = (page) => page.evaluate(() => [...document.querySelectorAll(".legend")].filter((e) => e.offsetParent !== null).map((e) => {
  const centres = [...e.children].map((c) => { const r = c.getBoundingClientRect(); return r.top + r.height / 2; });
  const lines = centres.reduce((n, y, i) => n + (i && Math.abs(y - centres[i - 1]) > 6 ? 1 : 0), centres.length ? 1 : 0);
  return { id: e.id, lines, overflow: e.scrollWidth > e.clientWidth + 1 };
}));
// Every category the page shows (a [data-category] anywhere) with its row of the Categories table:
// [name, what it is, how sure], "" where the table lacks it.
const categoriesShown = (page) => page.evaluate(() => {
  const rows = {};
  for (const tr of document.querySelectorAll("#category-table tbody tr")) rows[tr.dataset.category] = [tr.children[2].textContent, tr.children[3].textContent];
  const shown = new Set([...document.querySelectorAll("[data-category]")].filter((e) => !e.closest("#category-table")).map((e) => e.dataset.category));
  return { panel: !document.getElementById("categories-panel").hidden, shown: [...shown].map((n) => [n].concat(rows[n] || ["", ""])) };
});

test("the page explains itself: one-line legends at 1280 pixels, every category shown explained, a question under each heading", async () => {
  for (const name of ["leak", "cats", "oom", "resnet", "modules", "zoo-gpt2_eager-leak", "zoo-fsdp2-cxx-r1", "zoo-gpt2_oom_backward"]) {
    const { page, seen } = await open(name, "", { width: 1280, height: 800 });
    for (const colour of ["sites", "categories"]) {
      if (colour === "categories" && await page.locator("#colour-by").isDisabled()) continue;
      await page.locator("#colour-by").selectOption(colour);
      const legends = await legendLines(page);
      assert.ok(legends.length >= 2, name + ": the timeline's and the allocator state's legends");
      for (const l of legends) assert.ok(l.lines === 1 && !l.overflow, name + " (" + colour + "): legend #" + l.id + " takes " + l.lines + " lines" + (l.overflow ? ", overflowing" : ""));
    }
    const c = await categoriesShown(page);
    assert.ok(c.shown.length === 0 || c.panel, name + ": categories shown, and their table");
    for (const [cat, meaning, sure] of c.shown) assert.ok(meaning && meaning !== "-" && sure, name + ": category '" + cat + "' is shown but not explained");
    // each section opens with the question it answers
    const unanswered = await page.evaluate(() => [...document.querySelectorAll("h2")].filter((h) => h.id !== "details-title" &&
      !(h.nextElementSibling && h.nextElementSibling.classList.contains("question"))).map((h) => h.textContent));
    assert.deepStrictEqual(unanswered, [], name);
    assert.deepStrictEqual(seen.errors, [], name);
    await page.close();
  }
});

test("the chart's explanation is a \"?\" away; the category legend's \"?\" leads to the Categories table", async () => {
  const { page, seen } = await open("zoo-gpt2_eager-leak", "", { width: 1280, height: 800 });
  assert.ok(await page.locator("#legend-help").isHidden());
  assert.match(await page.locator("#legend .item").first().getAttribute("title"), /leak candidates and the largest sites/);
  await page.locator("#legend button.help").click();
  assert.ok(await page.locator("#legend-help").isVisible());
  assert.match(await page.locator("#legend-help").textContent(), /checkpoints/);
  await page.locator("#colour-by").selectOption("categories");
  await page.locator("#legend-categories button.help").click();
  assert.ok(await page.locator("#categories-panel").isVisible());
  const top = await page.locator("#categories-panel").evaluate((e) => e.getBoundingClientRect().top);
  assert.ok(top > -2 && top < 800, "scrolled to the table: " + top);
  assert.deepStrictEqual(seen.errors, []);
  await page.close();
});

test("real GPU snapshots: the first screen answers what was live at the peak, what grows, what would fit (screenshots at 1280x800 and 1920x1080)", async () => {
  const want = {
    // the GPT-2 leak: a view of every step's logits kept, 786 MiB a step (tests/data/zoo/README.md)
    "gpt2_eager-leak": [/^10\.19 GiB allocated \(11\.13 GiB reserved\) at [\d.]+ ms: other 4\.67 GiB activation 2\.94 GiB/,
      /^\+786\.00 MiB per iteration, 4\.61 GiB live at the end: .*gpt2_train\.py:42/, /^PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True: peak reserved/],
    // an FSDP2 rank: nothing grows; the largest held is the optimizer's state
    "fsdp2-cxx-r1": [/^13\.43 GiB allocated \(16\.44 GiB reserved\) at [\d.]+ s: activation 8\.16 GiB/,
      /^nothing: no growth across 8 iterations; the largest held: optimizer_state /, /^PYTORCH_CUDA_ALLOC_CONF=/],
    // out of memory in the first backward pass: memsnap predict says what fits
    "gpt2_oom_backward": [/^12\.26 GiB allocated \(12\.38 GiB reserved\) at [\d.]+ ms: activation 11\.70 GiB/,
      /^cannot be told: no iterations/, /^out of memory at [\d.]+ ms: 1\.53 GiB requested .*memsnap predict small\.db=SIZE large\.db=SIZE --capacity CARD_MEMORY --sweep$/],
  };
  for (const name of ZOO)
    for (const [width, height] of [[1280, 800], [1920, 1080]]) {
      const { page, seen } = await open("zoo-" + name, "", { width, height });
      const lines = await page.locator("#glance .glance-text").allTextContents();
      want[name].forEach((re, i) => assert.match(lines[i], re, name + " at " + width));
      // the three answers are on the first screen, above the details
      const bottom = await page.locator("#glance").evaluate((e) => e.getBoundingClientRect().bottom);
      assert.ok(bottom < height / 3, name + ": the glance ends at " + bottom);
      await page.screenshot({ path: path.join(artifacts, "zoo-" + name + "-" + width + "x" + height + ".png") });
      if (width === 1280) await shot(page, "zoo-" + name + "-full");
      assert.deepStrictEqual(seen.errors, [], name);
      await page.close();
    }
});

test("real GPT-2 leak: the glance's leak selects the first leak candidate", async () => {
  const { page, seen } = await open("zoo-gpt2_eager-leak", "", { width: 1280, height: 800 });
  await page.locator("#glance-grows a").click();
  assert.strictEqual((await hashState(page)).leak, 0);
  assert.strictEqual(await page.locator("#details-title").textContent(), "Leak candidate 1");
  assert.ok(await page.locator("#growth-panel").isVisible());
  assert.deepStrictEqual(seen.errors, []);
  await page.close();
});

test("real GPT-2 with the module record: the leak and its module, what is held apart (ten, the rest a click away), memory by module", async () => {
  const { page, seen } = await open("modules");
  const leaks = await page.locator("#leaks li").allTextContents();
  assert.strictEqual(leaks.length, 1, leaks.join("\n"));
  // the operator first (the block's residual add, named from at::_ops::add_Tensor::call), then the
  // program's line; no kept graph (the last step's output, held after its backward, is none)
  assert.match(leaks[0], /^growing \+12\.00 MiB\/iteration, 72\.00 MiB in 6 \u2014 aten::add \u2190 \(gpt2_train\.py:51\) \u00b7 in GPT2LMHeadModel\.transformer\.h\.5$/);
  assert.strictEqual(await page.locator("#kept-graphs li").count(), 0);
  const held = page.locator("#held li");
  assert.strictEqual(await held.count(), 11); // ten, and "show all"
  assert.match(await held.nth(10).textContent(), /^show all 19 \(9 more\)$/);
  await held.nth(10).click();
  assert.strictEqual(await page.locator("#held li").count(), 19);
  assert.ok(!(await page.locator("#held").textContent()).includes("growing"));
  assert.ok(!(await page.locator("#modules-panel").isHidden()));
  assert.match(await page.locator("#modules-title").textContent(), /^at the allocated peak, 80 modules/);
  await page.locator("#modules").scrollIntoViewIfNeeded();
  const box = await page.locator("#modules").boundingBox();
  const rows = await page.evaluate(() => document.getElementById("modules").height / 18); // the canvas is scaled to the page
  await page.mouse.move(box.x + 3, box.y + (3.5 / rows) * box.height); // the fourth row: the first block
  assert.match(await page.locator("#modules-readout").textContent(), /^GPT2LMHeadModel\.transformer\.h\.0: [\d.]+ [MG]iB at the peak, parameters [\d.]+ MiB, .*forward peak .* \(6 forward, 6 backward calls\)$/);
  await shot(page, "gpt2-modules");
  assert.deepStrictEqual(seen.errors, []);
  await page.close();
});

// The pixels of a canvas drawn in colour (r, g, b), counted in its lower part or whole.
const pixels = (page, selector, rgb) => page.locator(selector).evaluateAll((cs, rgb) => cs.map((c) => {
  const d = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
  let n = 0;
  for (let i = 0; i < d.length; i += 4) if (d[i] === rgb[0] && d[i + 1] === rgb[1] && d[i + 2] === rgb[2]) n++;
  return n;
}), rgb);

test("the page of a prediction: the answer's table, the recorded run above each predicted history, drawn on one scale; offline, no console output", async () => {
  const { page, seen } = await open("predict", "", { width: 1400, height: 1000 });
  await page.waitForTimeout(200);
  assert.deepStrictEqual(seen.requests.filter((u) => !u.startsWith("file://" + pages.predict)), []);
  assert.deepStrictEqual(seen.console, []);
  assert.deepStrictEqual(seen.errors, []);
  const rows = await page.locator("#prediction-table tbody tr").evaluateAll((trs) => trs.map((tr) => [...tr.cells].map((td) => td.textContent)));
  assert.deepStrictEqual(rows.map((r) => [r[0], r[1], r[7]]), [["16", "as recorded", "no"], ["16", "checkpoint every module call found (6)", "yes"],
    ["32", "as recorded", "no"], ["32", "checkpoint every module call found (6)", "yes"]]);
  assert.strictEqual(await page.locator("#fit-box").isVisible(), true); // the card's largest size
  const kinds = await page.locator("#timelines canvas").evaluateAll((cs) => cs.map((c) => c.dataset.kind));
  assert.deepStrictEqual(kinds, ["recorded", "predicted", "predicted"]);
  const titles = await page.locator("#timelines h3").allTextContents();
  assert.match(titles[0], /^recorded: .*p8\.db at size 8$/);
  assert.match(titles[1], /^predicted at size 16: checkpoint every module call found \(6\); settings \(defaults\)$/);
  // Every timeline draws its allocated memory (blue); the predicted ones their reserved (grey) and
  // the card (red, dashed); the recorded run has no segment events, so no reserved memory.
  const blue = await pixels(page, "#timelines canvas", [0x1e, 0x88, 0xe5]), grey = await pixels(page, "#timelines canvas", [0xb0, 0xbe, 0xc5]);
  const red = await pixels(page, "#timelines canvas", [0xc6, 0x28, 0x28]);
  assert.ok(blue.every((n) => n > 10000), blue.join());
  assert.ok(grey[0] === 0 && grey[1] > 10000 && grey[2] > grey[1], grey.join()); // 32 reserves more than 16, on the same scale
  assert.ok(red[0] > 0 && red[1] > 500 && red[2] > 500, red.join());
  // Hover: each timeline's figures at that time, a cursor across all of them.
  const b = await page.locator("#timelines canvas").nth(1).boundingBox();
  await page.mouse.move(b.x + b.width * 0.5, b.y + b.height * 0.5);
  const lines = (await page.locator("#readout").textContent()).split("\n");
  assert.strictEqual(lines.length, 4);
  assert.match(lines[1], /^recorded: allocated [\d.]+ [KMG]?i?B, reserved 0 B$/);
  assert.match(lines[2], /^predicted: allocated [\d.]+ [KMG]iB, reserved [\d.]+ [KMG]iB$/);
  assert.deepStrictEqual(seen.errors, []);
  await shot(page, "prediction");
  await page.close();
});

test("the page of one run's --shard prediction: what one run means, a row and a timeline per N, rank 0's", async () => {
  const { page, seen } = await open("shard", "", { width: 1400, height: 1000 });
  await page.waitForTimeout(200);
  assert.deepStrictEqual([seen.console, seen.errors], [[], []]);
  assert.match(await page.locator("#summary").textContent(), /^prediction from one run of the program \(.*shard\.db\): its own history, changed as the table says and replayed;/);
  const rows = await page.locator("#prediction-table tbody tr").evaluateAll((trs) => trs.map((tr) => tr.cells[1].textContent));
  assert.deepStrictEqual(rows, ["as recorded", "fsdp2:2 (rank 0)", "fsdp2:4 (rank 0)"]);
  const titles = await page.locator("#timelines h3").allTextContents();
  assert.strictEqual(titles.length, 4, titles.join(" | ")); // the recording, as recorded, then each N
  assert.match(titles[2], /fsdp2:2/);
  assert.match(titles[3], /fsdp2:4/);
  const blue = await pixels(page, "#timelines canvas", [0x1e, 0x88, 0xe5]);
  assert.ok(blue.every((n) => n > 10000), blue.join());
  await shot(page, "prediction-shard");
  await page.close();
});

test("the page of a prediction with --advise: the changes tried, the size as recorded and with the smallest change; hostile names as text", async () => {
  const { page, seen } = await open("advise", "", { width: 1400, height: 1000 });
  await page.waitForTimeout(200);
  assert.deepStrictEqual(seen.dialogs, []);
  assert.deepStrictEqual(seen.console, []);
  assert.deepStrictEqual(seen.errors, []);
  assert.deepStrictEqual(seen.requests.filter((u) => !u.startsWith("file://" + pages.advise)), []); // no img src=x
  assert.strictEqual(await page.locator("img").count(), 0);
  assert.strictEqual(await page.locator("svg").count(), 0);
  assert.strictEqual(await page.locator("script").count(), 4); // the data block and the three scripts
  assert.ok(await page.locator("#prediction-table").isHidden());
  const advice = await page.locator("#advice-table tbody tr").count();
  assert.ok(advice > 20, String(advice));
  assert.ok((await page.locator("#advice-table").textContent()).includes(HOSTILE_MODULE + ".blocks.5"));
  assert.ok((await page.locator("#advice-best").textContent()).startsWith("smallest change that fits: checkpoint "));
  const titles = await page.locator("#timelines h3").allTextContents();
  assert.strictEqual(titles.length, 3);
  assert.ok(titles[0].includes(HOSTILE_RUN + "8.db"), titles[0]);
  assert.ok(titles[2].includes(HOSTILE_MODULE + ".blocks.5"), titles[2]);
  assert.ok((await page.locator("#summary").textContent()).includes(HOSTILE_RUN + "4.db"));
  const details = await page.locator("#timelines p.detail").allTextContents();
  assert.match(details[1], /^--advise: the size as recorded; .*: does not fit; .*\(what it needs: replayed again without a limit\)$/);
  assert.match(details[2], /^--advise: the smallest change that fits; .*: fits; /);
  await shot(page, "prediction-advise");
  await page.close();
});
