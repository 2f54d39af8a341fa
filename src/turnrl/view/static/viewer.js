/* turnrl view: metric curves, per-task/tier breakdowns and a token-level trajectory viewer.
 *
 * Data comes either from the local server (`turnrl view RUN`: api/runs, api/step) or from JSON
 * embedded in the page (`turnrl view RUN --export FILE.html`). Charts are Plotly (vendored).
 * Routes live in the URL hash: #curves, #breakdown, #trajectories, #config,
 * #traj=RUN/STEP/I (one episode) and #group=RUN/STEP/GROUP (a group side by side). */
"use strict";
(function () {
  performance.mark("turnrl-script");
  const CFG = window.TURNRL || { mode: "serve" };
  const COLORS = ["#2f5bd3", "#d9480f", "#2b8a3e", "#862e9c", "#c92a2a", "#0b7285", "#e67700", "#5c940d"];
  const DASH = ["solid", "dash", "dot", "dashdot", "longdash"];
  const END_COLORS = { done: "#2b8a3e", max_turns: "#e67700", context_limit: "#862e9c", timeout: "#c92a2a", env_error: "#5f3dc4", parse_errors: "#d6336c" };
  const PLOT_CONFIG = { displaylogo: false, responsive: true };
  const PANELS = [
    ["Reward", ["reward/mean"]],
    ["Success: true, proxy (tests the agent could see), held-out eval", ["success/true", "success/proxy", "eval/success"]],
    ["Hack, flagged and truncation rates", ["hack_rate", "screen/flagged_rate", "truncation_rate"]],
    ["Turns per episode", ["episode/turns_mean", "eval/turns"]],
    ["Tokens per episode", ["episode/tokens_mean", "episode/action_tokens_mean"]],
    ["Loss", ["loss"]],
    ["KL", ["kl"]],
    ["Entropy", ["entropy"]],
    ["Clip fraction and mean ratio", ["train/clipfrac", "train/ratio_mean"]],
    ["Gradient norm", ["train/grad_norm"]],
    ["|advantage| on action tokens", ["adv/abs_mean"]],
    ["Seconds per step", ["time/rollout_s", "time/train_s"]],
    ["Staleness (async)", ["async/staleness_mean", "async/staleness_max"]],
  ];

  let RUNS = [];
  const SHOWN = new Set();
  const stepCache = new Map();
  const RECS = new Map(); // token-view id -> record, for the hover tip
  const $ = (id) => document.getElementById(id);

  // ---------------------------------------------------------------- data
  function getJSON(url) {
    return fetch(url).then((r) => {
      if (!r.ok) throw new Error(url + ": HTTP " + r.status);
      return r.json();
    });
  }
  // An export embeds its data as JSON script elements, one per step of records, each parsed
  // when first opened.
  const embedded = (id) => {
    const el = document.getElementById(id);
    return el ? JSON.parse(el.textContent) : null;
  };
  const api = {
    runs() {
      if (CFG.mode === "embedded") return Promise.resolve(embedded("turnrl-runs"));
      const early = CFG.runs; // the page's own early request, used once
      CFG.runs = null;
      return early ? early.then((r) => { if (!r.ok) throw new Error("api/runs: HTTP " + r.status); return r.json(); }) : getJSON("api/runs");
    },
    step(run, step) {
      const key = run + ":" + step;
      if (CFG.mode === "embedded") {
        if (!stepCache.has(key)) stepCache.set(key, Promise.resolve(embedded("turnrl-step-" + run + "-" + step)));
        return stepCache.get(key);
      }
      if (!stepCache.has(key)) stepCache.set(key, getJSON("api/step?run=" + run + "&step=" + step));
      return stepCache.get(key);
    },
  };
  const shown = () => RUNS.map((_, i) => i).filter((i) => SHOWN.has(i));
  const color = (i) => COLORS[i % COLORS.length];

  // ---------------------------------------------------------------- helpers
  function esc(s) {
    return String(s).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
  }
  function num(x, d) {
    if (x === null || x === undefined || Number.isNaN(x)) return "—";
    return Number(x).toFixed(d === undefined ? 3 : d);
  }
  function signed(x, d) {
    if (x === null || x === undefined) return "—";
    return (x > 0 ? "+" : "") + Number(x).toFixed(d === undefined ? 3 : d);
  }
  function layout(title, extra) {
    return Object.assign(
      {
        title: { text: title, font: { size: 13 }, x: 0.01 },
        margin: { l: 52, r: 12, t: 34, b: 36 },
        height: 300,
        hovermode: "x unified",
        xaxis: { title: { text: "step", font: { size: 11 } } },
        legend: { orientation: "h", y: -0.18, font: { size: 11 } },
        showlegend: true,
      },
      extra || {}
    );
  }
  // Charts below the fold are drawn when scrolled to: a page of a dozen charts then opens as
  // fast as the few on screen.
  const pending = new Map();
  const observer = "IntersectionObserver" in window ? new IntersectionObserver((entries) => {
    for (const en of entries) {
      if (!en.isIntersecting || !pending.has(en.target)) continue;
      const [traces, lay] = pending.get(en.target);
      pending.delete(en.target);
      observer.unobserve(en.target);
      Plotly.react(en.target, traces, lay, PLOT_CONFIG);
    }
  }, { rootMargin: "300px" }) : null;
  function plot(div, traces, lay) {
    const xmax = Math.max(0, ...traces.map((t) => (t.x && t.x.length && typeof t.x[0] === "number" ? t.x[t.x.length - 1] : 0)));
    if (lay.xaxis && lay.xaxis.title && xmax <= 12) lay.xaxis.dtick = 1; // steps are whole numbers
    if (observer && div.getBoundingClientRect().top > window.innerHeight) {
      if (!pending.has(div)) observer.observe(div);
      pending.set(div, [traces, lay]);
      return;
    }
    if (pending.delete(div)) observer.unobserve(div);
    Plotly.react(div, traces, lay, PLOT_CONFIG);
  }
  function newPlotDiv(parent, id) {
    const d = document.createElement("div");
    d.className = "plot";
    if (id) d.id = id;
    parent.appendChild(d);
    return d;
  }

  // ---------------------------------------------------------------- curves
  function curveTraces(keys) {
    const runs = shown();
    const multi = runs.length > 1;
    const out = [];
    runs.forEach((ri) => {
      const run = RUNS[ri];
      keys.forEach((k, ki) => {
        const c = run.curves[k];
        if (!c) return;
        const isEval = k.startsWith("eval/");
        const t = {
          x: c.x,
          y: c.y,
          name: (multi ? run.name + " · " : "") + k,
          type: "scatter",
          mode: isEval || c.x.length < 30 ? "lines+markers" : "lines",
          line: {
            color: multi ? color(ri) : color(ki),
            // proxy success is dashed so it never hides under true success
            dash: multi ? DASH[ki % DASH.length] : k === "success/proxy" ? "dash" : isEval ? "dot" : "solid",
            width: 2,
          },
          marker: { size: isEval ? 7 : 4 },
        };
        const se = run.curves[k + "_stderr"];
        if (se && se.y.length === c.y.length) t.error_y = { type: "data", array: se.y, visible: true, thickness: 1 };
        out.push(t);
      });
    });
    return out;
  }
  function renderCurves() {
    const box = $("curve-grid");
    box.innerHTML = "";
    for (const [title, keys] of PANELS) {
      const traces = curveTraces(keys);
      if (!traces.length) continue;
      const extra = {};
      if (keys[0] === "kl" && traces.every((t) => t.y.every((v) => Math.abs(v) < 1e-6))) {
        // float noise around 0 would otherwise fill the panel with a meaningless curve
        extra.yaxis = { range: [-1e-3, 1e-3] };
        extra.annotations = [{ text: "|KL| < 1e-6 at every step", showarrow: false, xref: "paper", yref: "paper", x: 0.5, y: 0.9 }];
      }
      plot(newPlotDiv(box), traces, layout(title, extra));
    }
    const sel = $("custom-keys");
    const keys = new Set();
    shown().forEach((ri) => Object.keys(RUNS[ri].curves).forEach((k) => keys.add(k)));
    const picked = new Set(Array.from(sel.selectedOptions).map((o) => o.value));
    sel.innerHTML = Array.from(keys)
      .sort()
      .map((k) => "<option" + (picked.has(k) ? " selected" : "") + ">" + esc(k) + "</option>")
      .join("");
    renderCustom();
  }
  function renderCustom() {
    const keys = Array.from($("custom-keys").selectedOptions).map((o) => o.value);
    const traces = curveTraces(keys);
    plot($("plot-custom"), traces, layout(keys.length ? keys.join(", ") : "pick metrics above"));
  }

  // ---------------------------------------------------------------- breakdown
  function episodeRows(ri, from, to) {
    const e = RUNS[ri].episodes;
    const rows = [];
    for (let j = 0; j < e.step.length; j++) {
      if ((from !== null && e.step[j] < from) || (to !== null && e.step[j] > to)) continue;
      rows.push(j);
    }
    return rows;
  }
  function rate(e, idx) {
    let s = 0, n = 0;
    for (const j of idx) {
      if (e.success[j] === null || e.success[j] === undefined) continue;
      s += e.success[j];
      n += 1;
    }
    return [n ? s / n : null, n];
  }
  function groupBy(e, idx, key) {
    const m = new Map();
    for (const j of idx) {
      const k = e[key][j] === null || e[key][j] === undefined ? "(none)" : String(e[key][j]);
      if (!m.has(k)) m.set(k, []);
      m.get(k).push(j);
    }
    return m;
  }
  function numOrNull(id) {
    const v = $(id).value;
    return v === "" ? null : Number(v);
  }
  function renderBreakdown() {
    const box = $("breakdown-grid");
    box.innerHTML = "";
    const from = numOrNull("bd-from"), to = numOrNull("bd-to");
    const runs = shown().filter((ri) => RUNS[ri].episodes.step.length);
    if (!runs.length) {
      box.innerHTML = "<p class='note'>No episode rows (episodes.jsonl) in the selected runs.</p>";
      return;
    }
    // success per tier
    const tierTraces = runs.map((ri) => {
      const e = RUNS[ri].episodes;
      const g = groupBy(e, episodeRows(ri, from, to), "tier");
      const tiers = Array.from(g.keys()).sort();
      return {
        type: "bar", name: RUNS[ri].name, marker: { color: color(ri) },
        x: tiers.map((t) => "tier " + t), y: tiers.map((t) => rate(e, g.get(t))[0]),
        text: tiers.map((t) => rate(e, g.get(t))[1] + " episodes"), textposition: "none", hovertemplate: "%{x}: %{y:.3f} (%{text})<extra>%{fullData.name}</extra>",
      };
    });
    const noTiers = tierTraces.every((t) => t.x.length === 1 && t.x[0] === "tier (none)");
    plot(newPlotDiv(box, "plot-tier"), tierTraces, layout(noTiers ? "Success (this env's tasks have no tiers)" : "Success per tier", { hovermode: "closest", xaxis: {}, yaxis: { range: [0, 1] } }));
    // success per tier over steps
    const overTime = [];
    runs.forEach((ri) => {
      const e = RUNS[ri].episodes;
      const g = groupBy(e, episodeRows(ri, from, to), "tier");
      Array.from(g.keys()).sort().forEach((tier, k) => {
        const bySteps = groupBy(e, g.get(tier), "step");
        const steps = Array.from(bySteps.keys()).map(Number).sort((a, b) => a - b);
        overTime.push({
          type: "scatter", mode: "lines", name: (runs.length > 1 ? RUNS[ri].name + " · " : "") + "tier " + tier,
          x: steps, y: steps.map((s) => rate(e, bySteps.get(String(s)))[0]),
          line: { color: runs.length > 1 ? color(ri) : color(k), dash: runs.length > 1 ? DASH[k % DASH.length] : "solid" },
        });
      });
    });
    plot(newPlotDiv(box, "plot-tier-steps"), overTime, layout("Success per tier over steps", { yaxis: { range: [-0.02, 1.02] } }));
    // endings and flags per step, one chart per run
    runs.forEach((ri) => {
      const e = RUNS[ri].episodes;
      const idx = episodeRows(ri, from, to);
      const bySteps = groupBy(e, idx, "step");
      const steps = Array.from(bySteps.keys()).map(Number).sort((a, b) => a - b);
      const ends = Array.from(new Set(idx.map((j) => e.end[j]))).sort();
      const endTraces = ends.map((end, k) => ({
        type: "bar", name: end, marker: { color: END_COLORS[end] || COLORS[k % COLORS.length] },
        x: steps, y: steps.map((s) => { const ix = bySteps.get(String(s)); return ix.filter((j) => e.end[j] === end).length / ix.length; }),
      }));
      plot(newPlotDiv(box, "plot-end-" + ri), endTraces, layout("Ending reasons per step: " + RUNS[ri].name, { barmode: "stack", yaxis: { range: [0, 1] } }));
      const flags = Array.from(new Set(idx.flatMap((j) => e.flags[j] || []))).sort();
      const d = newPlotDiv(box, "plot-flags-" + ri);
      if (!flags.length) {
        d.innerHTML = "<h3 style='padding:8px'>Flags: " + esc(RUNS[ri].name) + "</h3><p class='note' style='padding:0 8px'>No episode of these steps was flagged.</p>";
        return;
      }
      const flagTraces = flags.map((f, k) => ({
        type: "bar", name: f, marker: { color: COLORS[(k + 4) % COLORS.length] },
        x: steps, y: steps.map((s) => bySteps.get(String(s)).filter((j) => (e.flags[j] || []).includes(f)).length),
      }));
      plot(d, flagTraces, layout("Flagged episodes per step: " + RUNS[ri].name, { barmode: "stack" }));
    });
    // success per task (the most frequent 40 tasks of the first run)
    const first = RUNS[runs[0]].episodes;
    const byTask = groupBy(first, episodeRows(runs[0], from, to), "task");
    const tasks = Array.from(byTask.keys()).sort((a, b) => byTask.get(b).length - byTask.get(a).length).slice(0, 40);
    tasks.sort((a, b) => (rate(first, byTask.get(a))[0] || 0) - (rate(first, byTask.get(b))[0] || 0));
    const taskTraces = runs.map((ri) => {
      const e = RUNS[ri].episodes;
      const g = groupBy(e, episodeRows(ri, from, to), "task");
      return {
        type: "bar", orientation: "h", name: RUNS[ri].name, marker: { color: color(ri) },
        y: tasks, x: tasks.map((t) => (g.has(t) ? rate(e, g.get(t))[0] : null)),
        text: tasks.map((t) => (g.has(t) ? g.get(t).length : 0) + " episodes"), textposition: "none",
        hovertemplate: "%{y}: %{x:.3f} (%{text})<extra>%{fullData.name}</extra>",
      };
    });
    const wide = newPlotDiv(box, "plot-task");
    wide.classList.add("wide");
    plot(wide, taskTraces, layout("Success per task" + (byTask.size > 40 ? " (40 most frequent)" : ""), {
      hovermode: "closest", height: Math.max(300, 60 + 18 * tasks.length * runs.length), xaxis: { range: [0, 1] },
      yaxis: { automargin: true, tickfont: { size: 10 } }, margin: { l: 10, r: 12, t: 34, b: 36 },
    }));
  }

  // ---------------------------------------------------------------- trajectory list
  function fillFilters() {
    const runSel = $("f-run");
    const keep = runSel.value;
    runSel.innerHTML = RUNS.map((r, i) => "<option value='" + i + "'>" + esc(r.name) + "</option>").join("");
    if (keep && Number(keep) < RUNS.length) runSel.value = keep;
    const e = RUNS[Number(runSel.value) || 0].episodes;
    const flags = Array.from(new Set(e.flags.flat())).sort();
    const fSel = $("f-flag"), fKeep = fSel.value;
    fSel.innerHTML = ["<option value=''>any</option>", "<option value='*'>flagged</option>", "<option value='-'>not flagged</option>"]
      .concat(flags.map((f) => "<option>" + esc(f) + "</option>")).join("");
    fSel.value = fKeep;
    const eSel = $("f-end"), eKeep = eSel.value;
    eSel.innerHTML = ["<option value=''>any</option>"].concat(Array.from(new Set(e.end)).sort().map((x) => "<option>" + esc(x) + "</option>")).join("");
    eSel.value = eKeep;
    $("f-tasks").innerHTML = Array.from(new Set(e.task)).sort().slice(0, 500).map((t) => "<option value='" + esc(t) + "'>").join("");
  }
  function renderList() {
    const ri = Number($("f-run").value) || 0;
    const e = RUNS[ri].episodes;
    const smin = numOrNull("f-step-min"), smax = numOrNull("f-step-max");
    const rmin = numOrNull("f-rew-min"), rmax = numOrNull("f-rew-max");
    const task = $("f-task").value.trim(), flag = $("f-flag").value, end = $("f-end").value;
    const hits = [];
    const kept = new Set(RUNS[ri].record_steps); // thinning may have removed older steps
    let total = 0;
    for (let j = e.step.length - 1; j >= 0; j--) {
      if (smin !== null && e.step[j] < smin) continue;
      if (smax !== null && e.step[j] > smax) continue;
      if (rmin !== null && e.reward[j] < rmin) continue;
      if (rmax !== null && e.reward[j] > rmax) continue;
      if (task && !String(e.task[j]).includes(task)) continue;
      const f = e.flags[j] || [];
      if (flag === "*" && !f.length) continue;
      if (flag === "-" && f.length) continue;
      if (flag && flag !== "*" && flag !== "-" && !f.includes(flag)) continue;
      if (end && e.end[j] !== end) continue;
      total += 1;
      if (e.rec[j] && kept.has(e.step[j])) hits.push(j);
    }
    const shownRows = hits.slice(0, 300);
    $("f-count").textContent = total + " episodes match; " + hits.length + " of them have token records" +
      (hits.length > shownRows.length ? " (newest 300 listed)" : "") + ". Click a row to open it.";
    $("traj-list").tBodies[0].innerHTML = shownRows.map((j) => {
      const href = "#traj=" + ri + "/" + e.step[j] + "/" + e.i[j];
      return "<tr data-href='" + href + "'><td>" + e.step[j] + "</td><td>" + esc(e.task[j]) + "</td><td>" + esc(e.tier[j] === null ? "" : e.tier[j]) +
        "</td><td>" + esc(e.group[j]) + "</td><td>" + num(e.reward[j]) + "</td><td>" + num(e.success[j], 0) + "</td><td><span class='end'>" + esc(e.end[j]) +
        "</span></td><td>" + (e.flags[j] || []).map((f) => "<span class='flag'>" + esc(f) + "</span>").join("") + "</td><td>" + (e.turns ? e.turns[j] : "") + "</td></tr>";
    }).join("");
  }

  // ---------------------------------------------------------------- token view
  function segments(rec) {
    const n = rec.ids.length, segs = [];
    const push = (kind, turn, a, b) => { if (b > a) segs.push({ kind, turn, a, b }); };
    let pos = Math.min(rec.prompt_len, n);
    push("prompt", -1, 0, pos);
    rec.turns.forEach((u, k) => {
      push("other", k, pos, u.action[0]);
      push("act", k, u.action[0], u.action[1]);
      push("other", k, u.action[1], u.obs[0]);
      push("obs", k, Math.max(u.obs[0], u.action[1]), u.obs[1]);
      pos = Math.max(pos, u.action[1], u.obs[1]);
    });
    push("other", rec.turns.length, pos, n);
    return segs;
  }
  function tokenText(s) {
    if (s === "") return "∅";
    return esc(s).replace(/\n/g, "↵\n").replace(/\t/g, "→\t");
  }
  function advColor(a, scale) {
    if (a === null || a === undefined || a === 0) return "rgba(125,155,232,0.20)";
    const alpha = (0.18 + 0.6 * Math.min(1, Math.abs(a) / scale)).toFixed(2);
    return a > 0 ? "rgba(34,160,70," + alpha + ")" : "rgba(220,60,50," + alpha + ")";
  }
  function callsText(calls) {
    return calls.map((c) => c.name + "(" + JSON.stringify(c.arguments) + ")").join(", ");
  }
  const SEG_NAMES = { prompt: "prompt · environment", act: "action · sampled by the policy, trained", obs: "observation · environment", other: "chat template · environment" };
  function tokenView(rec, key) {
    RECS.set(key, rec);
    const scale = rec.advantages.reduce((m, a) => Math.max(m, Math.abs(a || 0)), 1e-9);
    const parts = ["<div class='tokens' data-rec='" + esc(key) + "'>"];
    let lastTurn = -2;
    for (const s of segments(rec)) {
      if (s.turn !== lastTurn && s.turn >= 0 && s.turn < rec.turns.length) {
        const u = rec.turns[s.turn];
        const bits = ["<b>Turn " + (s.turn + 1) + "</b>", "reward " + num(u.reward)];
        if (u.calls.length) bits.push("calls <span class='calls'>" + esc(callsText(u.calls)) + "</span>");
        if (u.parse_error) bits.push("<span class='neg'>parse error: " + esc(u.parse_error) + "</span>");
        if (u.malformed) bits.push("<span class='neg'>malformed (no positive credit)</span>");
        if (u.anchor !== null) bits.push("anchor " + esc(u.anchor.length > 80 ? u.anchor.slice(0, 80) + "…" : u.anchor));
        if (u.version >= 0) bits.push("policy v" + u.version);
        parts.push("<div class='turn'>" + bits.join(" · ") + "</div>");
      }
      lastTurn = s.turn;
      parts.push("<div class='seg " + s.kind + "'><span class='segname'>" + SEG_NAMES[s.kind] + "</span>");
      for (let k = s.a; k < s.b; k++) {
        const sampled = rec.mask[k] === 1;
        parts.push(sampled
          ? "<span class='t s' data-k='" + k + "' style='background:" + advColor(rec.advantages[k], scale) + "'>" + tokenText(rec.text[k]) + "</span>"
          : "<span class='t e' data-k='" + k + "'>" + tokenText(rec.text[k]) + "</span>");
      }
      parts.push("</div>");
    }
    parts.push("</div>");
    return parts.join("");
  }
  function tipText(rec, k) {
    const sampled = rec.mask[k] === 1;
    const seg = segments(rec).find((s) => k >= s.a && k < s.b);
    const where = seg ? (seg.kind === "prompt" ? "prompt" : seg.kind === "act" ? "action of turn " + (seg.turn + 1) : seg.kind === "obs" ? "observation of turn " + (seg.turn + 1) : "chat template") : "";
    const lines = [
      "token " + k + " of " + rec.ids.length + " · id " + rec.ids[k],
      "text             " + JSON.stringify(rec.text[k]),
      sampled ? "sampled (" + where + ")" : "environment (" + where + "): not trained",
    ];
    if (sampled) {
      lines.push(
        "behaviour logprob " + num(rec.behavior_lp[k], 4),
        "trainer logprob   " + num(rec.trainer_logprobs[k], 4),
        "ratio             " + num(rec.ratios[k], 4),
        "advantage         " + signed(rec.advantages[k], 4),
        "policy version    " + rec.versions[k]
      );
      if (rec.trainer_logprobs[k] === null) lines.push("(row not trained: all its advantages were 0)");
    }
    return lines.join("\n");
  }
  function flagsHtml(flags) {
    return (flags || []).map((f) => "<span class='flag'>" + esc(f) + "</span>").join("") || "none";
  }
  function endingHtml(rec) {
    return "<div class='ending'><b>Ending:</b> <span class='end'>" + esc(rec.end) + "</span> · final reward " + num(rec.reward) +
      " · success " + num(rec.success, 0) + (rec.proxy !== null && rec.proxy !== undefined ? " · proxy " + num(rec.proxy) : "") +
      " · flags " + flagsHtml(rec.flags) + (rec.error ? " · <span class='neg'>error: " + esc(rec.error) + "</span>" : "") + "</div>";
  }
  const LEGEND = "<div class='legend'><span><span class='t s' style='background:rgba(34,160,70,.6)'>sampled</span> positive advantage</span>" +
    "<span><span class='t s' style='background:rgba(220,60,50,.6)'>sampled</span> negative advantage</span>" +
    "<span><span class='t s' style='background:rgba(125,155,232,.2)'>sampled</span> zero</span>" +
    "<span><span class='t e'>environment</span> prompt, observations, template (no loss)</span><span>hover a token for its numbers</span></div>";
  function missing(ri, step) {
    return "<p class='note'>Step " + step + " of " + esc(RUNS[ri] ? RUNS[ri].name : "?") + " has no trajectory records here" +
      (CFG.mode === "embedded" ? " (this export embeds only the newest records; open the run with <code>turnrl view</code>)." : " (not recorded, or thinned to keep the run directory under logging.records_mb).") + "</p>";
  }
  function renderTraj(ri, step, i) {
    const box = $("traj");
    box.innerHTML = "<p class='note'>loading…</p>";
    return api.step(ri, step).then((recs) => {
      const rec = (recs || []).find((r) => r.i === i);
      if (!rec) { box.innerHTML = missing(ri, step); return; }
      const groupHref = "#group=" + ri + "/" + step + "/" + encodeURIComponent(rec.group);
      box.innerHTML = "<h2>" + esc(RUNS[ri].name) + " · step " + step + " · episode " + i + "</h2>" +
        "<div class='meta'><span><b>task</b>" + esc(rec.task) + "</span><span><b>tier</b>" + esc(rec.tier === null ? "—" : rec.tier) + "</span>" +
        "<span><b>group</b><a href='" + groupHref + "'>" + esc(rec.group) + " (side by side)</a></span><span><b>reward</b>" + num(rec.reward) + "</span>" +
        "<span><b>advantage</b>" + signed(rec.advantage) + "</span><span><b>ending</b><span class='end'>" + esc(rec.end) + "</span></span>" +
        "<span><b>flags</b>" + flagsHtml(rec.flags) + "</span><span><b>tokens</b>" + rec.ids.length + " (" + rec.mask.reduce((a, b) => a + b, 0) + " sampled)</span></div>" +
        LEGEND + tokenView(rec, "t" + ri + ":" + step + ":" + i) + endingHtml(rec);
      box.dataset.ready = "1";
    });
  }
  function renderGroup(ri, step, group) {
    const box = $("group");
    box.innerHTML = "<p class='note'>loading…</p>";
    return api.step(ri, step).then((recs) => {
      const members = (recs || []).filter((r) => r.group === group).sort((a, b) => a.i - b.i);
      if (!members.length) { box.innerHTML = missing(ri, step); return; }
      const e = RUNS[ri].episodes;
      let size = 0;
      for (let j = 0; j < e.step.length; j++) if (e.step[j] === step && e.group[j] === group) size += 1;
      box.innerHTML = "<h2>" + esc(RUNS[ri].name) + " · step " + step + " · group " + esc(group) + "</h2>" +
        "<p class='note'>" + members.length + " of " + (size || members.length) + " episodes of this group recorded. " +
        "GRPO compares them with each other: advantage = (reward − group mean) / group std.</p>" +
        "<div class='plot' id='plot-group'></div>" + LEGEND + "<div class='group'>" +
        members.map((r) => "<div class='member'><h3><a href='#traj=" + ri + "/" + step + "/" + r.i + "'>episode " + r.i + "</a></h3>" +
          "<div class='meta'><span><b>reward</b>" + num(r.reward) + "</span><span><b>advantage</b><span class='" + (r.advantage > 0 ? "pos" : r.advantage < 0 ? "neg" : "") + "'>" +
          signed(r.advantage) + "</span></span><span><b>ending</b>" + esc(r.end) + "</span><span><b>turns</b>" + r.turns.length + "</span><span><b>flags</b>" + flagsHtml(r.flags) + "</span></div>" +
          tokenView(r, "g" + ri + ":" + step + ":" + r.i) + "</div>").join("") + "</div>";
      const x = members.map((r) => "episode " + r.i);
      plot($("plot-group"), [
        { type: "bar", name: "reward", x, y: members.map((r) => r.reward), marker: { color: "#2f5bd3" } },
        { type: "bar", name: "advantage (mean over action tokens)", x, y: members.map((r) => r.advantage), marker: { color: "#e67700" } },
      ], layout("Rewards and advantages in the group", { hovermode: "closest", xaxis: {}, barmode: "group", height: 260 }));
      box.dataset.ready = "1";
    });
  }

  // ---------------------------------------------------------------- config and audit
  function renderConfig() {
    const box = $("config-box");
    box.innerHTML = "";
    shown().forEach((ri) => {
      const run = RUNS[ri];
      const sec = document.createElement("div");
      let h = "<h2 style='color:" + color(ri) + "'>" + esc(run.name) + "</h2><p class='note'>" + esc(run.path) + "</p>";
      if (run.audit) h += "<h3>Reward drift: proxy vs true success and the audit's prediction</h3>" + run.audit.html;
      sec.innerHTML = h;
      box.appendChild(sec);
      if (run.audit && run.audit.c !== null) {
        const c = run.audit.c, traces = [];
        [["success/true", "success/proxy", "train rollouts", "lines"], ["eval/success", "eval/proxy_success", "held-out eval", "lines+markers"]].forEach(([tk, pk, where, mode]) => {
          const t = run.curves[tk], p = run.curves[pk];
          if (!t || !p) return;
          traces.push({ x: p.x, y: p.y, name: "proxy, " + where, mode, line: { color: COLORS[0] } });
          traces.push({ x: t.x, y: t.y, name: "true, " + where, mode, line: { color: COLORS[1] } });
          traces.push({ x: t.x, y: t.y.map((v) => v + (1 - v) * (1 - c)), name: "predicted proxy, " + where, mode, line: { color: COLORS[2], dash: "dash" } });
        });
        if (traces.length) plot(newPlotDiv(sec), traces, layout("proxy vs true success; predicted p + (1 − p)(1 − c), c = " + c.toFixed(2), { yaxis: { range: [-0.02, 1.02] } }));
      }
      const pre = document.createElement("pre");
      pre.className = "config";
      pre.textContent = run.config || "(no config.yaml)";
      sec.appendChild(pre);
    });
  }

  // ---------------------------------------------------------------- chrome and routing
  function renderChips() {
    $("runs").innerHTML = RUNS.map((r, i) =>
      "<label class='chip' title='" + esc(r.path) + "'><input type='checkbox' data-run='" + i + "'" + (SHOWN.has(i) ? " checked" : "") +
      "><i style='background:" + color(i) + "'></i>" + esc(r.name) + "</label>").join("");
  }
  function route() {
    const h = decodeURIComponent(location.hash.slice(1)) || "curves";
    let page = h.split("=")[0];
    if (!["traj", "group", "breakdown", "trajectories", "config"].includes(page)) page = "curves";
    document.body.dataset.ready = "";
    // show the section first: Plotly sizes a chart by its container, which must be visible
    document.querySelectorAll("main > section").forEach((s) => s.classList.toggle("on", s.id === "page-" + page));
    document.querySelectorAll("nav a").forEach((a) => a.classList.toggle("on", a.dataset.page === page || (a.dataset.page === "trajectories" && (page === "traj" || page === "group"))));
    let done = Promise.resolve();
    if (page === "traj") {
      const [ri, step, i] = h.slice(5).split("/").map(Number);
      done = renderTraj(ri, step, i);
    } else if (page === "group") {
      const rest = h.slice(6), a = rest.indexOf("/"), b = rest.indexOf("/", a + 1);
      done = renderGroup(Number(rest.slice(0, a)), Number(rest.slice(a + 1, b)), rest.slice(b + 1));
    } else if (page === "breakdown") renderBreakdown();
    else if (page === "trajectories") { fillFilters(); renderList(); }
    else if (page === "config") renderConfig();
    else renderCurves();
    done.then(() => { document.body.dataset.ready = "1"; window.turnrlReadyMs = performance.now(); }, (err) => {
      document.querySelector("main > section.on").insertAdjacentHTML("afterbegin", "<p class='neg'>" + esc(err) + "</p>");
      document.body.dataset.ready = "1";
    });
  }
  function load() {
    return api.runs().then((runs) => {
      performance.mark("turnrl-data");
      RUNS = runs;
      if (!SHOWN.size) RUNS.forEach((_, i) => SHOWN.add(i));
      renderChips();
      route();
    });
  }

  document.addEventListener("DOMContentLoaded", () => {
    $("runs").addEventListener("change", (ev) => {
      const i = Number(ev.target.dataset.run);
      if (ev.target.checked) SHOWN.add(i); else SHOWN.delete(i);
      route();
    });
    $("custom-keys").addEventListener("change", renderCustom);
    ["bd-from", "bd-to"].forEach((id) => $(id).addEventListener("input", renderBreakdown));
    $("f-run").addEventListener("change", () => { fillFilters(); renderList(); });
    ["f-step-min", "f-step-max", "f-task", "f-rew-min", "f-rew-max", "f-flag", "f-end"].forEach((id) => $(id).addEventListener("input", renderList));
    $("traj-list").addEventListener("click", (ev) => {
      const tr = ev.target.closest("tr[data-href]");
      if (tr) location.hash = tr.dataset.href;
    });
    // one delegated listener serves every token of every view
    const tip = $("tip");
    document.addEventListener("mouseover", (ev) => {
      const t = ev.target.closest && ev.target.closest(".t[data-k]");
      if (!t) { tip.hidden = true; return; }
      const rec = RECS.get(t.closest(".tokens").dataset.rec);
      tip.textContent = tipText(rec, Number(t.dataset.k));
      tip.hidden = false;
      const r = t.getBoundingClientRect();
      tip.style.left = Math.min(r.left, window.innerWidth - 430) + "px";
      tip.style.top = (r.bottom + 6 + 170 > window.innerHeight ? r.top - tip.offsetHeight - 6 : r.bottom + 6) + "px";
    });
    window.addEventListener("hashchange", route);
    if (CFG.mode !== "embedded") {
      $("reload").hidden = false;
      $("reload").addEventListener("click", () => { stepCache.clear(); load(); });
    }
    load().catch((err) => { document.querySelector("main").innerHTML = "<p class='neg'>" + esc(err) + "</p>"; });
  });
})();
