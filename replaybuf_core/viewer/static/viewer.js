// replaybuf viewer: the page of `replaybuf serve`. Plain JavaScript, no libraries (nothing is fetched
// from the network). Views by URL hash: #/ (episode list), #/episode/I, #/stats, #/info.
"use strict";

const $ = (sel) => document.querySelector(sel);
const state = {
  summary: null, offset: 0, limit: 50, filters: {}, matched: 0,
  marks: new Set(), episode: null, series: null, step: 0, timer: null, loads: {},
};
const COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
                "#7f7f7f", "#bcbd22", "#17becf"];

async function api(path, options) {
  const r = await fetch(path, options);
  let body = null;
  try { body = await r.json(); } catch (e) { body = null; }
  if (!r.ok) throw new Error((body && body.error) || `${path}: HTTP ${r.status}`);
  return body;
}

function showError(message) { const e = $("#error"); e.textContent = message; e.hidden = false; }
function clearError() { const e = $("#error"); e.textContent = ""; e.hidden = true; }
function el(tag, attrs, text) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (text !== undefined && text !== null) e.textContent = text;
  return e;
}

// ------------------------------------------------------------------ marks (kept for this tab)
// marks are kept per tab and per store *state* (the summary's `state`: the episode ends and the edit
// generation): after an edit (or any commit) old marks would name other episodes, so they are not
// carried over, and a save sends the state they were made on (the server refuses it, 409, if the
// store moved since)
function marksKey() {
  const s = state.summary;
  return `replaybuf-marks:${s.path}:${s.state}`;
}
function loadMarks() {
  try { state.marks = new Set(JSON.parse(sessionStorage.getItem(marksKey()) || "[]")); } catch (e) { state.marks = new Set(); }
}
function setMark(ep, on) {
  if (on) state.marks.add(ep); else state.marks.delete(ep);
  sessionStorage.setItem(marksKey(), JSON.stringify([...state.marks]));
  const row = document.querySelector(`tr[data-episode="${ep}"]`);
  if (row) { row.classList.toggle("marked", on); row.querySelector("input.mark").checked = on; }
  updateMarkPanel();
}
function maskName() { return $("#mask-name").value.trim(); }
function sortedMarks() { return [...state.marks].sort((a, b) => a - b); }

let commandsTimer = null;
function updateMarkPanel() {
  $("#mark-count").textContent = `${state.marks.size} marked`;
  document.querySelectorAll(".mask-name").forEach((s) => { s.textContent = maskName(); });
  clearTimeout(commandsTimer);
  commandsTimer = setTimeout(showCommands, 150);
}
let commandsAsked = 0;  // a slower, older answer must not overwrite the newest marks' commands
async function showCommands() {
  const asked = ++commandsAsked;
  if (!state.marks.size) { $("#commands").textContent = ""; return; }
  try {
    const q = new URLSearchParams({ name: maskName(), episodes: sortedMarks().join(",") });
    const c = await api("/api/commands?" + q);
    if (asked !== commandsAsked) return;
    $("#commands").textContent = `# delete the marked episodes:\n${c.delete}\n# keep only them (after saving the mask):\n${c.keep}`;
  } catch (e) { if (asked === commandsAsked) $("#commands").textContent = e.message; }
}
async function saveMask() {
  const status = $("#save-status");
  if (state.summary.masks.includes(maskName())
      && !confirm(`meta/mask.${maskName()} exists: replace it with these ${state.marks.size} marks?`)) return;
  status.textContent = "saving…";
  try {
    const r = await api("/api/masks/" + encodeURIComponent(maskName()), {
      method: "POST", headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ episodes: sortedMarks(), state: state.summary.state }),
    });
    status.textContent = `saved ${r.saved}: ${r.marked} of ${r.n_episodes} episodes marked`;
    status.dataset.saved = r.saved;
    if (!state.summary.masks.includes(maskName())) { state.summary.masks.push(maskName()); fillMaskSelect(); }
  } catch (e) { status.textContent = ""; showError(e.message); }
}
async function loadMaskMarks() {
  try {
    const m = await api("/api/masks/" + encodeURIComponent(maskName()));
    state.marks = new Set(m.episodes);
    sessionStorage.setItem(marksKey(), JSON.stringify(m.episodes));
    clearError(); renderList();
  } catch (e) { showError(e.message); }
}

// ------------------------------------------------------------------ the episode list
function fillMaskSelect() {
  const sel = document.querySelector("#filters select[name=mask]");
  const chosen = sel.value;
  sel.replaceChildren(el("option", { value: "" }, "(any)"));
  for (const m of state.summary.masks) sel.append(el("option", { value: m }, m));
  sel.value = chosen;
}

async function renderList() {
  const q = new URLSearchParams({ offset: state.offset, limit: state.limit });
  for (const [k, v] of Object.entries(state.filters)) if (v !== "" && v !== null) q.set(k, v);
  if (!state.filters.mask) q.delete("marked");
  let page;
  try { page = await api("/api/episodes?" + q); } catch (e) { showError(e.message); return; }
  clearError();
  if (page.state !== state.summary.state) {
    showError(`the store changed since this page was loaded (${state.summary.n_episodes} episodes then, ${page.total} now`
              + (page.total === state.summary.n_episodes ? ", other episodes" : "")
              + "): reload the page before marking (saving refuses marks made on the old list)");
  }
  state.matched = page.matched;
  const metaNames = page.episodes.length ? Object.keys(page.episodes[0].meta) : [];
  const head = el("tr");
  const textual = new Set(["task", ...metaNames.filter((m) => page.episodes.some((e) => typeof e.meta[m] === "string"))]);
  for (const h of ["mark", "episode", "first row", "length", "duration (s)", "task", ...metaNames]) {
    head.append(el("th", { class: textual.has(h) ? "text" : "" }, h));
  }
  $("#episodes thead").replaceChildren(head);
  const rows = page.episodes.map((e) => {
    const tr = el("tr", { class: "episode-row", "data-episode": e.index });
    const box = el("input", { type: "checkbox", class: "mark", "data-episode": e.index, title: "mark" });
    box.checked = state.marks.has(e.index);
    box.addEventListener("change", () => setMark(e.index, box.checked));
    const td = el("td"); td.append(box); tr.append(td);
    const link = el("a", { href: `#/episode/${e.index}` }, e.index);
    const tdl = el("td"); tdl.append(link); tr.append(tdl);
    tr.append(el("td", {}, e.start), el("td", {}, e.length), el("td", {}, e.duration ?? "–"),
              el("td", { class: "text" }, e.task ?? ""));
    for (const m of metaNames) {
      const v = e.meta[m];
      tr.append(el("td", { class: typeof v === "string" ? "text" : "" }, typeof v === "number" && !Number.isInteger(v) ? v.toPrecision(4) : String(v)));
    }
    tr.classList.toggle("marked", state.marks.has(e.index));
    return tr;
  });
  $("#episodes tbody").replaceChildren(...rows);
  const last = Math.min(page.offset + page.episodes.length, page.matched);
  $("#range").textContent = page.matched
    ? `episodes ${page.offset + 1}–${last} of ${page.matched} shown (${page.total} in the store)`
    : `no episode matches (${page.total} in the store)`;
  $("#prev").disabled = page.offset === 0;
  $("#next").disabled = last >= page.matched;
  updateMarkPanel();
}

// ------------------------------------------------------------------ one episode
function frameUrl(ep, key, step) {
  return `/api/episodes/${ep}/frames/${encodeURIComponent(key)}/${step}?format=png`;
}

function drawFrame(canvas, ep, key, step) {
  const token = (state.loads[key] || 0) + 1;
  state.loads[key] = token;
  const img = new Image();
  img.onload = () => {
    if (state.loads[key] !== token) return;  // a later step was asked for meanwhile
    canvas.getContext("2d").drawImage(img, 0, 0);
    canvas.dataset.step = step;
  };
  img.onerror = async () => {  // the server's reason (the store gone: 410; a step out of range: 404)
    if (state.loads[key] !== token) return;
    let why = `frame ${step} of ${key} could not be loaded`;
    try { await api(img.src); } catch (e) { why += `: ${e.message}`; }
    if (state.loads[key] === token) showError(why);
  };
  img.src = frameUrl(ep, key, step);
}

function setStep(step) {
  const ep = state.episode;
  if (!ep) return;
  step = Math.max(0, Math.min(ep.length - 1, step));
  state.step = step;
  $("#step").value = step;
  const t = state.summary.fps ? ` · ${(step / state.summary.fps).toFixed(2)} s` : "";
  $("#step-label").textContent = `step ${step} (0–${ep.length - 1})${t} · row ${ep.start + step}`;
  for (const c of document.querySelectorAll("#cameras canvas")) drawFrame(c, ep.index, c.dataset.key, step);
  drawPlots();
}

function play() {
  if (state.timer) { clearInterval(state.timer); state.timer = null; $("#play").textContent = "▶ play"; return; }
  const fps = state.summary.fps || 10;
  if (state.step >= state.episode.length - 1) setStep(0);  // at the end: play from the start
  $("#play").textContent = "❚❚ pause";
  state.timer = setInterval(() => {
    if (state.step >= state.episode.length - 1) { play(); return; }
    setStep(state.step + 1);
  }, 1000 / fps);
}

function drawPlot(canvas, s) {
  const ctx = canvas.getContext("2d");
  const W = canvas.width, H = canvas.height, pad = 4;
  ctx.clearRect(0, 0, W, H);
  const steps = state.series.steps, n = state.episode.length;
  const xOf = (step) => pad + (W - 2 * pad) * (n > 1 ? step / (n - 1) : 0.5);
  let lo = Infinity, hi = -Infinity;
  for (const col of [...s.values, ...(s.low || []), ...(s.high || [])]) {
    for (const v of col) if (v !== null) { lo = Math.min(lo, v); hi = Math.max(hi, v); }
  }
  if (!Number.isFinite(lo)) { lo = 0; hi = 1; }
  if (hi === lo) { hi += 0.5; lo -= 0.5; }
  const yOf = (v) => H - pad - (H - 2 * pad) * (v - lo) / (hi - lo);
  if (s.pad) {  // *_is_pad: shade the padded steps
    ctx.fillStyle = "rgba(220, 60, 60, 0.18)";
    s.values[0].forEach((v, i) => { if (v) ctx.fillRect(xOf(steps[i]) - 1, 0, Math.max(2, (W - 2 * pad) / n), H); });
  }
  if (s.low && s.high) {  // every k-th step drawn: shade each point's min..max over its k steps
    s.low.forEach((lows, c) => {
      ctx.strokeStyle = COLORS[c % COLORS.length] + "55";
      ctx.beginPath();
      lows.forEach((lo, i) => {
        const hi = s.high[c][i];
        if (lo === null || hi === null) return;
        const x = xOf(steps[i]);
        ctx.moveTo(x, yOf(lo)); ctx.lineTo(x, yOf(hi) - 0.5);
      });
      ctx.stroke();
    });
  }
  s.values.forEach((col, c) => {
    ctx.strokeStyle = COLORS[c % COLORS.length];
    ctx.lineWidth = 1;
    ctx.beginPath();
    let pen = false;
    col.forEach((v, i) => {
      if (v === null) { pen = false; return; }
      const x = xOf(steps[i]), y = yOf(v);
      if (pen) ctx.lineTo(x, y); else ctx.moveTo(x, y);
      pen = true;
    });
    ctx.stroke();
  });
  ctx.strokeStyle = "#000";  // the frame cursor
  ctx.beginPath(); ctx.moveTo(xOf(state.step), 0); ctx.lineTo(xOf(state.step), H); ctx.stroke();
  ctx.fillStyle = "#555"; ctx.font = "10px sans-serif";
  ctx.fillText(hi.toPrecision(4), pad + 2, 10); ctx.fillText(lo.toPrecision(4), pad + 2, H - 4);
}

function drawPlots() {
  if (!state.series) return;
  const i = Math.min(Math.floor(state.step / state.series.stride), state.series.steps.length - 1);
  document.querySelectorAll("#plots .plot").forEach((div, j) => {
    const s = state.series.series[j];
    drawPlot(div.querySelector("canvas"), s);
    div.querySelectorAll(".legend span").forEach((sp, c) => {  // each component's value at the cursor
      const v = s.values[c][i];
      sp.textContent = `■ ${s.names ? s.names[c] : c}: ${v === null ? "–" : fmt(v)}  `;
    });
  });
}

function buildPlots() {
  const box = $("#plots");
  box.replaceChildren();
  for (const s of state.series.series) {
    const div = el("div", { class: "plot" });
    const shown = s.values.length;
    const more = shown < s.components ? ` (first ${shown} of ${s.components} components)` : "";
    const every = state.series.stride > 1 ? ` — every ${state.series.stride}th step drawn, with the min..max of each ${state.series.stride} steps shaded` : "";
    div.append(el("div", {}, `${s.key} ${JSON.stringify(s.shape)} ${s.dtype}${more}${every}${s.pad ? " — padded steps shaded" : ""}`));
    const canvas = el("canvas", { width: 900, height: s.components > 1 ? 120 : 64, "data-key": s.key });
    canvas.addEventListener("click", (ev) => {
      const r = canvas.getBoundingClientRect();
      const f = (ev.clientX - r.left) / r.width;
      setStep(Math.round(f * (state.episode.length - 1)));
    });
    div.append(canvas);
    {  // one component too: the legend holds the value at the cursor
      const legend = el("div", { class: "legend" });
      for (let c = 0; c < shown; c++) {
        const sp = el("span", {}, `■ ${s.names ? s.names[c] : c}  `);
        sp.style.color = COLORS[c % COLORS.length];
        legend.append(sp);
      }
      div.append(legend);
    }
    box.append(div);
  }
}

async function renderEpisode(ep) {
  if (state.timer) play();
  let detail, series;
  try {
    [detail, series] = await Promise.all([api(`/api/episodes/${ep}`), api(`/api/episodes/${ep}/series`)]);
  } catch (e) {
    $("#episode-title").textContent = `episode ${ep}`;
    $("#cameras").replaceChildren(); $("#plots").replaceChildren();
    showError(e.message);
    return;
  }
  clearError();
  state.episode = detail; state.series = series; state.loads = {};
  const dur = detail.duration !== null ? `, ${detail.duration} s` : "";
  $("#episode-title").textContent = `episode ${ep}: ${detail.length} steps${dur}` + (detail.task ? ` — ${detail.task}` : "");
  $("#ep-prev").href = `#/episode/${Math.max(0, ep - 1)}`;
  $("#ep-next").href = `#/episode/${Math.min(state.summary.n_episodes - 1, ep + 1)}`;
  const box = $("#ep-mark");
  box.checked = state.marks.has(ep);
  box.onchange = () => setMark(ep, box.checked);
  $("#step").max = detail.length - 1;
  const cams = detail.cameras.map((c) => {
    const [h, w] = c.shape;
    const fig = el("figure");
    const canvas = el("canvas", { width: w, height: h, "data-key": c.key, id: "camera-" + c.key });
    const scale = Math.max(1, Math.floor(320 / w));
    canvas.style.width = `${w * scale}px`;
    const r = c.display_range;  // uint8: null, shown as stored; other dtypes: one range per camera
    const note = r ? ` ${c.dtype}, ${fmt(r[0])}..${fmt(r[1])} shown as 0..255` : "";
    fig.append(canvas, el("figcaption", {}, `${c.key} ${h}×${w}${note}`));
    return fig;
  });
  $("#cameras").replaceChildren(...cams);
  $("#episode-meta").textContent = JSON.stringify(detail.meta_full, null, 1);
  buildPlots();
  setStep(0);
}

// ------------------------------------------------------------------ statistics, store summary
function fmt(v) { return typeof v === "number" ? (Number.isInteger(v) ? String(v) : v.toPrecision(4)) : String(v); }

const STATS_COLUMNS = 64;

async function renderStats() {
  $("#stats").textContent = "computing (first time on a store without stored statistics: a pass over the data)…";
  let stats;
  try { stats = await api("/api/stats"); } catch (e) { $("#stats").textContent = ""; showError(e.message); return; }
  const keys = Object.entries(stats.keys);
  if (!keys.length) { $("#stats").textContent = "no statistics: the store has no episodes (or no numeric key)"; return; }
  const out = [];
  for (const [key, st] of keys) {
    const div = el("div", { class: "stats-key" });
    const flat = {};
    for (const [name, v] of Object.entries(st)) flat[name] = [v].flat(Infinity);
    const total = Math.max(...Object.values(flat).map((v) => v.length));
    const width = Math.min(STATS_COLUMNS, total);
    const camera = stats.cameras.includes(key);
    const notes = [JSON.stringify(stats.shapes[key])];
    if (camera) notes.push("per channel, on x / 255 (0..1), as LeRobot normalises");
    if (width < total) notes.push(`first ${width} of ${total} components`);
    div.append(el("h3", {}, `${key} `), el("span", { class: "note" }, notes.join(" · ")));
    const names = stats.names[key];
    const t = el("table");
    const head = el("tr"); head.append(el("th", {}, ""));
    for (let i = 0; i < width; i++) head.append(el("th", {}, names ? names[i] : (camera ? ["R", "G", "B", "A"][i] ?? i : i)));
    t.append(head);
    for (const [name, vals] of Object.entries(flat)) {
      const tr = el("tr"); tr.append(el("th", {}, name));
      for (let i = 0; i < width; i++) tr.append(el("td", {}, i < vals.length ? fmt(vals[i]) : ""));
      t.append(tr);
    }
    const scroll = el("div", { class: "scroll" }); scroll.append(t);
    div.append(scroll);
    out.push(div);
  }
  $("#stats").replaceChildren(...out);
}

async function renderInfo() {
  try { $("#info").textContent = JSON.stringify(await api("/api/info"), null, 1); } catch (e) { showError(e.message); }
}

// ------------------------------------------------------------------ routing
function show(view) {
  for (const v of ["list", "episode", "stats", "info"]) $(`#${v}-view`).hidden = v !== view;
}

function route() {
  clearError();
  const h = location.hash.replace(/^#/, "") || "/";
  let m;
  if (h === "/") { show("list"); renderList(); }
  else if ((m = h.match(/^\/episode\/(-?\d+)$/))) { show("episode"); renderEpisode(Number(m[1])); }
  else if (h === "/stats") { show("stats"); renderStats(); }
  else if (h === "/info") { show("info"); renderInfo(); }
  else { show(null); showError(`no page ${h}: see the episode list`); }
}

async function start() {
  try { state.summary = await api("/api/summary"); } catch (e) { showError(e.message); return; }
  const s = state.summary;
  $("#store").textContent = `${s.path} — ${s.n_episodes} episodes, ${s.n_steps} steps` + (s.fps ? `, ${s.fps} fps` : "")
    + (s.writable ? "" : " (read-only)");
  loadMarks();
  fillMaskSelect();
  const maskSelect = document.querySelector("#filters select[name=mask]");
  const markedSelect = document.querySelector("#filters select[name=marked]");
  const syncMarked = () => { markedSelect.disabled = !maskSelect.value; };
  maskSelect.addEventListener("change", syncMarked);
  syncMarked();
  const save = $("#save-mask");
  save.disabled = !s.writable;
  if (!s.writable) save.title = "start the viewer with --writable to save marks";
  $("#filters").addEventListener("submit", (ev) => {
    ev.preventDefault();
    state.filters = Object.fromEntries(new FormData(ev.target).entries());
    state.offset = 0;
    renderList();
  });
  $("#prev").onclick = () => { state.offset = Math.max(0, state.offset - state.limit); renderList(); };
  $("#next").onclick = () => { state.offset += state.limit; renderList(); };
  $("#mask-name").addEventListener("input", updateMarkPanel);
  $("#save-mask").onclick = saveMask;
  $("#load-mask").onclick = loadMaskMarks;
  $("#clear-marks").onclick = () => { state.marks.clear(); sessionStorage.removeItem(marksKey()); renderList(); };
  $("#step").addEventListener("input", () => setStep(Number($("#step").value)));
  $("#play").onclick = play;
  document.addEventListener("keydown", (ev) => {
    // the slider moves itself on ← → when it has the focus (its input event sets the step): not twice
    if ($("#episode-view").hidden || ev.target.tagName === "INPUT") return;
    if (ev.key === "ArrowRight") setStep(state.step + 1);
    if (ev.key === "ArrowLeft") setStep(state.step - 1);
  });
  window.addEventListener("hashchange", route);
  route();
}

start();
