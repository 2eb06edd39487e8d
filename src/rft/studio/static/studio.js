// rft studio: the config generator (/config) and the run view (/run). Plain JavaScript, no build step.
"use strict";

const $ = (sel) => document.querySelector(sel);
const el = (tag, attrs = {}, ...children) => {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") node.className = v;
    else if (k === "text") node.textContent = v;
    else if (v !== undefined && v !== null && v !== false) node.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children) node.append(c);
  return node;
};
const api = async (path, body) => {
  const response = await fetch(path, body === undefined ? {} : {
    method: "POST", headers: {"Content-Type": "application/json"}, body: JSON.stringify(body)});
  const data = await response.json();
  if (!response.ok) throw new Error(data.error || response.statusText);
  return data;
};

// ------------------------------------------------------------------------------------------ config generator
const config = {kind: "rl", form: null, values: {}, view: "beginner", timer: null, seq: 0};

function shown(value) {  // a default or value as the form shows it (YAML flow for lists / mappings)
  if (value === null || value === undefined) return "";
  if (typeof value === "object") return JSON.stringify(value).replace(/"([^"]*)"/g, "$1");
  return String(value);
}

function parsed(field, input) {  // the value the form sends for one input
  if (field.type === "bool") return input.checked;
  if (field.type === "choice") return JSON.parse(input.value);
  const text = input.value.trim();
  if (field.type === "yaml") return text;
  if (text === "") return field.nullable ? null : "";
  if (field.type === "int" && /^-?\d+$/.test(text)) return parseInt(text, 10);
  if (field.type === "float" && /^-?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$/.test(text)) return parseFloat(text);
  return text;  // not a number: sent as typed, and the validation names the key
}

function fieldRow(field) {
  const id = "f-" + field.key;
  const current = field.key in config.values ? config.values[field.key] : field.default;
  let input;
  if (field.type === "bool") {
    input = el("input", {type: "checkbox", id});
    input.checked = Boolean(current);
  } else if (field.type === "choice") {
    input = el("select", {id});
    for (const choice of field.choices) {
      const option = el("option", {value: JSON.stringify(choice), text: choice === null ? "null" : String(choice)});
      if (JSON.stringify(choice) === JSON.stringify(current)) option.selected = true;
      input.append(option);
    }
  } else {
    input = el("input", {type: "text", id, placeholder: field.nullable ? "null" : ""});
    input.value = field.key in config.values && field.type === "yaml" ? current : shown(current);
  }
  input.dataset.key = field.key;
  if (field.unsupported) input.disabled = true;
  input.addEventListener(field.type === "bool" || field.type === "choice" ? "change" : "input", () => {
    config.values[field.key] = parsed(field, input);
    row.classList.toggle("changed", true);
    scheduleValidation();
  });
  const help = field.help + (field.unsupported ? ` Not supported by rft yet (${field.unsupported}).` : "") +
    ` Default: ${field.default === null ? "null" : shown(field.default)}.`;
  const row = el("div", {class: "field" + (field.unsupported ? " unsupported" : "") +
                                 (field.key in config.values ? " changed" : "")},
    el("label", {for: id, text: field.key}), input, el("div", {class: "help", text: help}));
  return row;
}

function renderForm() {
  const form = $("#form");
  form.replaceChildren();
  const filter = $("#filter").value.trim().toLowerCase();
  const fields = config.form.fields.filter((f) => config.view === "expert"
    ? (!filter || f.key.toLowerCase().includes(filter) || f.help.toLowerCase().includes(filter)) : f.beginner);
  if (config.view === "beginner") {
    const box = el("fieldset", {}, el("legend", {text: `The keys a first ${config.form.command} sets`}));
    for (const f of fields) box.append(fieldRow(f));
    form.append(box);
    return;
  }
  const helpOf = Object.fromEntries(config.form.sections.map((s) => [s.key, s.help]));
  const groups = new Map();
  for (const f of fields) {
    const top = f.key.includes(".") ? f.key.split(".")[0] : "(top level)";
    if (!groups.has(top)) groups.set(top, []);
    groups.get(top).push(f);
  }
  for (const [top, items] of groups) {
    const box = el("details", {open: Boolean(filter) || items.some((f) => f.key in config.values)},
      el("summary", {text: `${top} (${items.length})` + (helpOf[top] ? ` \u2014 ${helpOf[top]}` : "")}));
    for (const f of items) box.append(fieldRow(f));
    form.append(box);
  }
}

function scheduleValidation() {
  clearTimeout(config.timer);
  $("#validation").className = "status pending";
  $("#validation").textContent = "validating\u2026";
  config.timer = setTimeout(validate, 250);
}

async function validate() {
  const seq = ++config.seq;
  let result;
  try {
    result = await api("/api/validate", {kind: config.kind, values: config.values});
  } catch (e) {
    result = {ok: false, error: e.message, notes: [], yaml: "", command: ""};
  }
  if (seq !== config.seq) return;  // a newer edit is being validated
  const box = $("#validation");
  box.className = "status " + (result.ok ? "ok" : "bad");
  box.textContent = result.ok ? `\u2713 valid: ${config.form.command} accepts this config`
                              : `\u2717 rft: error: ${result.error}`;
  $("#notes").replaceChildren(...result.notes.map((n) => el("li", {text: n})));
  $("#yaml").textContent = result.yaml || "# nothing changed yet: every key at its default";
  $("#command").textContent = result.command || "";
  $("#write").disabled = $("#start").disabled = !result.ok;
}

async function loadForm() {
  config.form = await api(`/api/form?kind=${config.kind}`);
  renderForm();
  validate();
}

async function writeConfig(start) {
  const action = $("#action");
  try {
    const path = $("#path").value.trim();
    await api("/api/write", {kind: config.kind, values: config.values, path});
    if (!start) {
      action.replaceChildren(el("span", {text: `wrote ${path}`}));
      return;
    }
    const run = await api("/api/start", {kind: config.kind, path});
    action.replaceChildren(el("span", {text: `started (pid ${run.pid}): `}),
      el("a", {href: `/run?dir=${encodeURIComponent(run.run_dir)}`, text: `follow ${run.run_dir}`}));
  } catch (e) {
    action.replaceChildren(el("span", {class: "error", text: e.message}));
  }
}

function initConfig() {
  $("#config-page").hidden = false;
  $("#nav-config").classList.add("active");
  $("#kind").addEventListener("change", () => {
    config.kind = $("#kind").value;
    config.values = {};
    loadForm();
  });
  for (const radio of document.querySelectorAll("input[name=view]")) {
    radio.addEventListener("change", () => { config.view = radio.value; renderForm(); });
  }
  $("#filter").addEventListener("input", () => { if (config.view === "expert") renderForm(); });
  $("#write").addEventListener("click", () => writeConfig(false));
  $("#start").addEventListener("click", () => writeConfig(true));
  loadForm();
}

// ------------------------------------------------------------------------------------------------- run view
const COLORS = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#4d7c0f", "#be185d"];
const CHARTS = [["reward", "Reward (training)"], ["accuracy", "Validation accuracy"],
                ["length", "Response length"], ["kl", "KL"]];
const run = {dir: "", timer: null};

function fmt(x) {
  if (x === null || x === undefined) return "";
  const a = Math.abs(x);
  return a !== 0 && (a < 1e-3 || a >= 1e4) ? x.toExponential(2) : String(Math.round(x * 1000) / 1000);
}

function chart(name, title, series, boundaries) {
  const W = 440, H = 230, L = 52, R = 12, T = 10, B = 28;
  const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
  svg.dataset.chart = name;
  const add = (tag, attrs, text) => {
    const node = document.createElementNS("http://www.w3.org/2000/svg", tag);
    for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
    if (text !== undefined) node.textContent = text;
    svg.append(node);
    return node;
  };
  const points = series.flatMap((s) => s.points);
  const box = el("div", {class: "chart"}, el("h4", {text: title}), svg);
  if (!points.length) {
    add("text", {x: W / 2, y: H / 2, "text-anchor": "middle", class: "empty"}, "no data yet");
    return box;
  }
  const xs = points.map((p) => p[0]), ys = points.map((p) => p[1]);
  const x0 = Math.min(0, ...xs), x1 = Math.max(1, ...xs, ...boundaries.map((b) => b.x));
  let y0 = Math.min(...ys), y1 = Math.max(...ys);
  if (y0 === y1) { y0 -= Math.abs(y0) * 0.1 || 0.5; y1 += Math.abs(y1) * 0.1 || 0.5; }
  const px = (x) => L + (x - x0) / (x1 - x0) * (W - L - R);
  const py = (y) => T + (1 - (y - y0) / (y1 - y0)) * (H - T - B);
  for (let i = 0; i <= 4; i++) {
    const y = y0 + (y1 - y0) * i / 4;
    add("line", {x1: L, x2: W - R, y1: py(y), y2: py(y), stroke: "#eceef2"});
    add("text", {x: L - 4, y: py(y) + 4, "text-anchor": "end", "font-size": 10, fill: "#5b6475"}, fmt(y));
  }
  const xstep = Math.max(1, Math.ceil((x1 - x0) / 5));  // whole steps only
  for (let x = Math.ceil(x0); x <= x1; x += xstep) {
    add("text", {x: px(x), y: H - 10, "text-anchor": "middle", "font-size": 10, fill: "#5b6475"}, String(x));
  }
  add("line", {x1: L, x2: L, y1: T, y2: H - B, stroke: "#9aa3b5"});
  add("line", {x1: L, x2: W - R, y1: H - B, y2: H - B, stroke: "#9aa3b5"});
  for (const b of boundaries) {
    add("line", {x1: px(b.x), x2: px(b.x), y1: T, y2: H - B, stroke: "#9aa3b5", "stroke-dasharray": "4 3"});
    add("text", {x: px(b.x) + 3, y: T + 10, "font-size": 10, fill: "#5b6475"}, b.name);
  }
  const legend = el("div", {class: "legend"});
  series.forEach((s, i) => {
    const color = COLORS[i % COLORS.length];
    const line = add("polyline", {fill: "none", stroke: color, "stroke-width": 1.8, class: "series",
                                  points: s.points.map((p) => `${px(p[0])},${py(p[1])}`).join(" ")});
    line.dataset.name = s.name;
    line.dataset.points = s.points.length;
    if (s.points.length <= 60) {
      for (const p of s.points) add("circle", {cx: px(p[0]), cy: py(p[1]), r: 2.2, fill: color});
    }
    const last = s.points[s.points.length - 1];
    legend.append(el("span", {}, el("i", {style: `background:${color}`}), `${s.name}: ${fmt(last[1])}`));
  });
  box.append(legend);
  return box;
}

function table(header, rows) {
  return el("table", {}, el("tr", {}, ...header.map((h) => el("th", {text: h}))),
    ...rows.map((r) => el("tr", {}, ...r.map((c) => c instanceof Node ? el("td", {class: "barcell"}, c)
      : el("td", {class: typeof c === "number" ? "num" : "", text: typeof c === "number" ? fmt(c) : String(c)})))));
}

function renderRun(view) {
  const status = $("#run-status");
  if (!view.exists) {
    status.className = "status bad";
    status.textContent = `${view.folder}: no such folder`;
    $("#charts").replaceChildren();
    return;
  }
  const parts = view.parts;
  const now = parts.length ? parts[parts.length - 1] : null;
  const progress = now ? ` \u2014 ${now.name}: step ${now.last_step}` + (now.total_steps ? `/${now.total_steps}` : "") : "";
  const demo = view.demo ? ` \u2014 held-out accuracy ${fmt(view.demo.sft_accuracy)} after SFT, ` +
    `${fmt(view.demo.rl_accuracy)} after GRPO` : "";
  status.className = "status " + ({failed: "bad", finished: "ok"}[view.status] || "pending");
  const where = view.running_on ? ` on ${view.running_on}` : "";  // a lock held on another host
  status.textContent = `${view.folder}: ${view.status}${where}${progress}${demo}`;
  status.dataset.status = view.status;
  const error = $("#run-error");
  error.hidden = !view.error;
  error.textContent = view.error ? `rft: error: ${view.error}` : "";

  // stages share one step axis, one after the other (an explorer part runs beside the trainer, on its steps)
  const boundaries = [], merged = {};
  let offset = 0;
  for (const part of parts) {
    const shift = part.name === "explorer" ? 0 : offset;
    if (parts.length > 1 && part.name !== "explorer") boundaries.push({x: shift, name: part.name});
    for (const [chartName, series] of Object.entries(part.charts)) {
      merged[chartName] = merged[chartName] || {};
      for (const [name, points] of Object.entries(series)) {
        const key = part.name === "explorer" ? `${name} (explorer)` : name;
        merged[chartName][key] = (merged[chartName][key] || []).concat(points.map((p) => [p[0] + shift, p[1]]));
      }
    }
    if (part.name !== "explorer") offset += part.last_step;
  }
  $("#charts").replaceChildren(...CHARTS.map(([name, title]) => chart(name, title,
    Object.entries(merged[name] || {}).map(([n, points]) => ({name: n, points})), boundaries)));

  const timed = parts.filter((p) => p.timings.length);
  const latest = timed.length ? timed[timed.length - 1] : null;
  const slowest = latest ? Math.max(...latest.timings.map((t) => t.mean)) : 1;
  $("#timings").replaceChildren(latest ? table(["phase (" + latest.name + ")", "last step", "mean", ""],
    latest.timings.map((t) => [t.phase, t.last, t.mean, el("div", {style: `width:${100 * t.mean / slowest}%`})]))
    : el("p", {text: "no steps yet"}));
  const ckpts = parts.flatMap((p) => p.checkpoints.map((c) => [p.name, c.name + (c.latest ? " (latest)" : "") +
    (c.damaged ? " (damaged)" : ""), `${(c.bytes / 1e6).toFixed(1)} MB`]));
  const models = parts.filter((p) => p.model).map((p) => [p.name, "model/ (Hugging Face folder)", ""]);
  $("#checkpoints").replaceChildren(ckpts.length || models.length ? table(["part", "checkpoint", "size"],
    [...ckpts, ...models]) : el("p", {text: "none yet"}));
  const gens = parts.filter((p) => p.generations);
  const g = gens.length ? gens[gens.length - 1] : null;
  $("#generations-title").textContent = "Latest validation generations" + (g ? ` (${g.name}, step ${g.generations.step})` : "");
  $("#generations").replaceChildren(g ? table(["prompt", "response", "score"],
    g.generations.samples.map((s) => [s.prompt, s.response, s.score]))
    : el("p", {text: "none (trainer.log_val_generations > 0 keeps them)"}));
  $("#log").textContent = view.log ? view.log.join("\n") : "(no studio.log: this run was not started by rft studio)";
}

async function refreshRun() {
  clearTimeout(run.timer);
  if (!run.dir) return;
  try {
    renderRun(await api(`/api/run?dir=${encodeURIComponent(run.dir)}`));
  } catch (e) {
    $("#run-status").className = "status bad";
    $("#run-status").textContent = e.message;
  }
  if ($("#follow").checked) run.timer = setTimeout(refreshRun, 2000);
}

function openRun(dir) {
  run.dir = dir;
  $("#run-dir").value = dir;
  history.replaceState(null, "", `/run?dir=${encodeURIComponent(dir)}`);
  refreshRun();
}

async function initRun() {
  $("#run-page").hidden = false;
  $("#nav-run").classList.add("active");
  $("#open-run").addEventListener("click", () => openRun($("#run-dir").value.trim()));
  $("#run-dir").addEventListener("keydown", (e) => { if (e.key === "Enter") openRun($("#run-dir").value.trim()); });
  $("#follow").addEventListener("change", refreshRun);
  const list = $("#run-list");
  list.addEventListener("change", () => { if (list.value) openRun(list.value); });
  try {
    const found = await api("/api/runs");
    for (const dir of found.runs) list.append(el("option", {value: dir, text: dir}));
  } catch (e) { /* the list is a convenience */ }
  const dir = new URLSearchParams(location.search).get("dir");
  if (dir) openRun(dir);
  else $("#run-status").textContent = "choose a run folder";
}

if (location.pathname.startsWith("/run")) initRun(); else initConfig();
