// predict.js: the page of a prediction (`memsnap predict --html`; analyzer/report/page_predict.c):
// the answer's tables, then the recorded run's memory over time above each predicted history's, on
// one scale and one time window, drawn with view.js's timeline drawing (fillCurves, timelineAxes)
// from model.js's data (Model.predictionView, Model.predictionTables). Text from the snapshots
// (paths, module names) reaches the page through textContent only, never innerHTML.
"use strict";

(function () {
  const $ = (id) => document.getElementById(id);
  const data = $("memsnap-prediction");
  if (!data) return;
  const p = Model.decodePrediction(data.textContent), a = p.answer, B = Model.formatBytes;
  const add = (parent, tag, s, cls) => {
    const e = document.createElement(tag);
    if (s !== undefined) e.textContent = s;
    if (cls) e.className = cls;
    parent.appendChild(e);
    return e;
  };

  // The head: the runs and how well they aligned, as the text report's first lines say it.
  const runs = (a.runs || []).map((r) => r.path + " at " + r.at + (r.base ? " (its history is synthesised)" : "")).join(", ");
  const card = "card " + B(a.capacity_bytes) + " per device; recorded settings: " + (a.recorded_pytorch_cuda_alloc_conf || "(defaults)");
  if ((a.runs || []).length === 1) // one run: no law of the size, the run's own history changed (as the text report says)
    $("summary").textContent = "prediction from one run of the program (" + a.runs[0].path + "): its own history, changed as the " +
      "table says and replayed; the size stays the recorded one (another size needs the program recorded at two sizes); " + card;
  else
    $("summary").textContent = "prediction from " + a.runs.length + " runs: " + runs +
      "; each allocation's request " + (a.fit === "quadratic" ? "a polynomial of degree 2" : "linear") + " in the size; " +
      (100 * a.aligned_share).toFixed(1) + "% of the runs' bytes aligned; " + card;

  // The answer's tables.
  const tables = Model.predictionTables(a);
  const fill = (id, rows, numeric, wrap) => {
    const body = document.querySelector("#" + id + " tbody");
    body.textContent = "";
    for (const row of rows) {
      const tr = add(body, "tr");
      row.forEach((cell, k) => {
        const cls = numeric.includes(k) ? "num" : wrap.includes(k) ? "wrap" : cell === "yes" || cell === "no" ? cell : "";
        add(tr, "td", cell, cls);
      });
    }
  };
  fill("prediction-table", tables.predictions, [0, 3, 4, 5, 6], [1]);
  $("prediction-table").hidden = !tables.predictions.length;
  const shard = Model.shardLines(a);
  $("shard-box").hidden = !shard.length;
  for (const line of shard) add($("shard-lines"), "li", line);
  $("fit-box").hidden = !tables.fits.length;
  fill("fit-table", tables.fits, [0, 1, 2, 3], []);
  if (tables.fits.length) {
    $("fit-title").textContent = "in " + B(a.fit_capacity_bytes) + " per device, the most first";
    const sharded = a.best_fit && a.best_fit.strategy && a.best_fit.strategy !== "none";
    $("fit-best").textContent = a.best_fit ? "best" + (sharded ? " with " + a.best_fit.strategy + ":" + a.best_fit.ranks : "") + ": " +
      a.best_fit.at + " with PYTORCH_CUDA_ALLOC_CONF=" + (a.best_fit.pytorch_cuda_alloc_conf || "(unset: the defaults)")
      : "nothing fits: not even size 1 under any setting on this card";
  }
  $("advice-box").hidden = !a.advice;
  fill("advice-table", tables.advice, [0, 2, 3, 4], [5]);
  if (a.advice) {
    $("advice-title").textContent = "at " + a.advice.at + " on " + B(a.advice.capacity_bytes) + " per device: those that fit first, the smallest first";
    const best = a.advice.best;
    $("advice-best").textContent = best ? "smallest change that fits: " + best.description +
      (best.largest_that_fits ? "; with it the largest size that fits is " + best.largest_that_fits.at : "") : "nothing tried makes " + a.advice.at + " fit";
  }
  for (const note of a.notes || []) add($("notes"), "li", "note: " + note);

  // The timelines, one above the other: each a title, a line of figures and a canvas.
  const view = Model.predictionView(p), box = $("timelines"), canvases = [];
  $("scale-note").textContent = "one scale for every timeline: " + B(Math.round(view.top / 1.05)) + " at the top" +
    (view.card && !view.cardDrawn ? "; the card (" + B(view.card) + ") is far above it and not drawn" : "") +
    "; time from the recorded run's start (" + Model.formatTime(view.t1 - view.t0) + "), which the predicted histories keep: they are its events";
  view.timelines.forEach((tl, i) => {
    add(box, "h3", tl.title, tl.kind);
    add(box, "p", tl.detail, "detail");
    const c = add(box, "canvas");
    c.width = 1200;
    c.height = i ? 170 : 150;
    c.dataset.kind = tl.kind;
    c.setAttribute("aria-label", tl.title);
    canvases.push(c);
    draw(c, tl);
  });

  function draw(c, tl) {
    const ctx = c.getContext("2d"), W = c.width, H = c.height, top = view.top;
    const x = (t) => ((t - view.t0) / (view.t1 - view.t0)) * W, y = (v) => H - (v / top) * (H - 4);
    ctx.clearRect(0, 0, W, H);
    fillCurves(c, [[tl.curves.reserved, "#b0bec5"], [tl.curves.allocated, "#1e88e5"]], view.t0, view.t1, top);
    if (tl.card) { // the card: a dashed line across, labelled
      ctx.strokeStyle = "#c62828";
      ctx.lineWidth = 1.5;
      ctx.setLineDash([6, 4]);
      ctx.beginPath();
      ctx.moveTo(0, y(tl.card));
      ctx.lineTo(W, y(tl.card));
      ctx.stroke();
      ctx.setLineDash([]);
      ctx.font = "bold 11px sans-serif";
      ctx.fillStyle = "#c62828";
      const s = "card " + B(tl.card), w = ctx.measureText(s).width;
      ctx.fillText(s, W - w - 6, y(tl.card) - 4 < 12 ? y(tl.card) + 13 : y(tl.card) - 4); // under the line near the top
    }
    // The peaks: a dot where each curve reaches its highest, with the replay's (or the analysis's) figure.
    const marks = [[tl.curves.reserved, tl.reserved, "peak reserved "], [tl.curves.allocated, tl.allocated, "peak allocated "]];
    let lastY = -100;
    marks.forEach(([curve, value, word]) => {
      const pk = Model.curvePeak(curve);
      if (!pk || !(value > 0)) return; // none recorded (a snapshot without segment events has no reserved memory)
      const px = Math.max(3, Math.min(W - 3, x(pk.t))), py = y(pk.v);
      ctx.fillStyle = "#c62828";
      ctx.beginPath();
      ctx.arc(px, py, 4, 0, 2 * Math.PI);
      ctx.fill();
      ctx.font = "bold 11px sans-serif";
      const s = word + B(value), w = ctx.measureText(s).width;
      let ly = Math.max(12, py - 6);
      if (Math.abs(ly - lastY) < 13) ly = lastY + 13; // the two labels apart when the peaks are close
      lastY = ly;
      const lx = px + 8 + w > W ? px - 8 - w : px + 8;
      ctx.fillStyle = "rgba(255, 255, 255, 0.85)";
      ctx.fillRect(lx - 2, ly - 11, w + 4, 14);
      ctx.fillStyle = "#b71c1c";
      ctx.fillText(s, lx, ly);
    });
    timelineAxes(c, top, (k) => Model.formatTime(Math.round(((view.t1 - view.t0) * k) / 6)));
  }

  // Hover: every timeline's figures at that time, and a cursor across all of them.
  canvases.forEach((c) => c.addEventListener("mousemove", (ev) => {
    const r = c.getBoundingClientRect(), f = Math.max(0, Math.min(1, (ev.clientX - r.left) / r.width)), t = view.t0 + f * (view.t1 - view.t0);
    const lines = view.timelines.map((tl) => {
      const al = Model.valueAt(tl.curves.allocated, t), rs = Model.valueAt(tl.curves.reserved, t);
      return (tl.kind === "recorded" ? "recorded" : "predicted") + ": allocated " + (al ? B(al.hi) : "-") + ", reserved " + (rs ? B(rs.hi) : "-");
    });
    $("readout").textContent = Model.formatTime(Math.round(t - view.t0)) + "\n" + lines.join("\n");
    canvases.forEach((o, i) => {
      draw(o, view.timelines[i]);
      const ctx = o.getContext("2d");
      ctx.fillStyle = "#000";
      ctx.fillRect(Math.round(f * o.width), 0, 1, o.height);
    });
  }));
  document.body.dataset.ready = "1"; // the first paint is done (the browser tests wait for it)
})();
