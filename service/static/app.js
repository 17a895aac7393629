// The service's web page: send one image to POST /detect, draw the answer, filter it in the browser.
//
// The request asks for everything down to the model's score_threshold once; the threshold slider and
// the class boxes then filter that answer here, without sending the image again. What is drawn is
// published on the canvas as data-drawn (JSON) and in window.detectPage, so a test can compare it with
// the API's own answer.
"use strict";

const $ = (id) => document.getElementById(id);
const canvas = $("canvas");
const slider = $("threshold");
const PALETTE = [
  [230, 25, 75], [60, 180, 75], [255, 225, 25], [0, 130, 200], [245, 130, 48], [145, 30, 180],
  [70, 240, 240], [240, 50, 230], [210, 245, 60], [250, 190, 212], [0, 128, 128], [170, 110, 40],
];

const state = {
  models: [], // /v1/models entries
  model: null, // the selected entry
  blob: null, // the image to send
  bitmap: null, // the same image, decoded by the browser (EXIF orientation applied, as the server does)
  result: null, // the last /detect answer
  timings: [], // [{name, ms}] from its Server-Timing header
  roundTripMs: 0,
  requests: 0, // detect requests sent by this page
};

const colorOf = (classId) => PALETTE[classId % PALETTE.length];
const rgb = (c, alpha = 1) => `rgba(${c[0]}, ${c[1]}, ${c[2]}, ${alpha})`;

function authHeaders(extra = {}) {
  const key = $("api-key").value.trim();
  return key ? { ...extra, Authorization: `Bearer ${key}` } : extra;
}

function setStatus(text, isError = false) {
  $("status").textContent = text;
  $("status").classList.toggle("error", isError);
}

async function errorText(response) {
  try {
    const body = await response.json();
    return `${response.status}: ${body.error}${body.field ? ` (${body.field})` : ""}`;
  } catch {
    return `${response.status} ${response.statusText}`;
  }
}

// ------------------------------------------------------------------ models

const versionKey = (v) => (/^\d+$/.test(v) ? [1, Number(v)] : [0, v]);
function newestFirst(a, b) {
  const [ka, kb] = [versionKey(a), versionKey(b)];
  return ka[0] !== kb[0] ? kb[0] - ka[0] : ka[1] < kb[1] ? 1 : ka[1] > kb[1] ? -1 : 0;
}

function fillSelect(select, values, labelOf, selected) {
  select.replaceChildren(
    ...values.map((value) => {
      const option = new Option(labelOf(value), value);
      option.selected = value === selected;
      return option;
    }),
  );
}

async function loadModels() {
  const response = await fetch("/v1/models", { headers: authHeaders() });
  if (!response.ok) {
    setStatus(`Cannot list models: ${await errorText(response)}`, true);
    return;
  }
  const body = await response.json();
  state.models = body.models;
  const names = [...new Set(body.models.map((m) => m.name))].sort();
  const chosen = body.default_model ?? names[0];
  fillSelect($("model"), names, (n) => (n === body.default_model ? `${n} (default)` : n), chosen);
  selectModel();
}

function selectModel() {
  const name = $("model").value;
  const versions = state.models.filter((m) => m.name === name).map((m) => m.version).sort(newestFirst);
  fillSelect($("version"), versions, (v) => v, versions[0]);
  selectVersion();
}

function selectVersion() {
  const model = state.models.find((m) => m.name === $("model").value && m.version === $("version").value);
  state.model = model;
  state.result = null;
  slider.min = String(model.score_threshold);
  slider.value = String(model.display_score_threshold ?? model.score_threshold);
  showThreshold();
  const ap = typeof model.metrics?.coco_ap === "number" ? `, COCO AP ${model.metrics.coco_ap.toFixed(3)}` : "";
  $("model-info").textContent =
    `${model.architecture}${model.backbone ? ` (${model.backbone})` : ""}, input ` +
    `${model.input.width}x${model.input.height} ${model.input.resize}, ${model.labels.length} classes` +
    `${model.has_masks ? ", masks" : ""}${ap}; ${model.backend ?? "loading"}`;
  const boxes = model.labels.map((label, index) => {
    const box = document.createElement("label");
    const input = Object.assign(document.createElement("input"), { type: "checkbox", checked: true });
    input.value = String(index);
    input.addEventListener("change", draw);
    const swatch = Object.assign(document.createElement("span"), { className: "swatch" });
    swatch.style.background = rgb(colorOf(index));
    const id = label.coco_id === null || label.coco_id === undefined ? "" : ` (${label.coco_id})`;
    box.append(input, swatch, `${label.name}${id}`);
    return box;
  });
  $("classes").replaceChildren(Object.assign(document.createElement("legend"), { textContent: "Classes" }), ...boxes);
  if (state.blob) detect();
  else draw();
}

// ------------------------------------------------------------------ images and requests

async function useImage(blob) {
  try {
    state.bitmap = await createImageBitmap(blob, { imageOrientation: "from-image" });
  } catch {
    state.bitmap = null; // the server will say what is wrong with it
  }
  state.blob = blob;
  await detect();
}

// A real photo's sample names the model that knows its content; it is selected when the server has it
// (the synthetic samples keep whatever model is selected).
function useModel(name) {
  if (!name || name === state.model?.name || !state.models.some((m) => m.name === name)) return;
  $("model").value = name;
  selectModel();
}

async function useSample(src) {
  const response = await fetch(src).catch(() => null);
  if (!response || !response.ok) {
    setStatus(`Cannot load ${src}: ${response ? response.status : "no answer"}`, true);
    return;
  }
  await useImage(await response.blob());
}

function parseServerTiming(header) {
  if (!header) return [];
  return header.split(",").map((entry) => {
    const [name, ...params] = entry.trim().split(";");
    const dur = params.map((p) => p.trim()).find((p) => p.startsWith("dur="));
    return { name, ms: dur ? Number(dur.slice(4)) : 0 };
  });
}

async function detect() {
  const model = state.model;
  if (!state.blob || !model) return;
  const params = new URLSearchParams({
    model: model.name,
    version: model.version,
    score_threshold: String(model.score_threshold), // everything the slider can reach, in one request
  });
  if ($("tiling").value) params.set("tiling", $("tiling").value);
  const type = ["image/jpeg", "image/png"].includes(state.blob.type) ? state.blob.type : "application/octet-stream";
  canvas.dataset.state = "busy";
  setStatus("Detecting…");
  state.requests += 1;
  const started = performance.now();
  let response;
  try {
    response = await fetch(`/detect?${params}`, {
      method: "POST",
      body: state.blob,
      headers: authHeaders({ "Content-Type": type }),
    });
  } catch (error) {
    canvas.dataset.state = "error";
    setStatus(`Request failed: ${error}`, true);
    return;
  }
  if (!response.ok) {
    state.result = null;
    canvas.dataset.state = "error";
    setStatus(await errorText(response), true);
    return;
  }
  state.result = await response.json();
  state.roundTripMs = performance.now() - started;
  state.timings = parseServerTiming(response.headers.get("Server-Timing"));
  draw();
}

// ------------------------------------------------------------------ drawing

function showThreshold() {
  $("threshold-value").textContent = Number(slider.value).toFixed(2);
}

function visibleDetections() {
  const threshold = Number(slider.value);
  const kept = new Set(
    [...$("classes").querySelectorAll("input:checked")].map((input) => Number(input.value)),
  );
  return state.result.detections.filter((d) => d.score >= threshold && kept.has(d.class_id));
}

// COCO compressed RLE (pycocotools' rleFrString): run lengths, alternately background and mask, of
// the column-major pixels; each count is LEB128-like in 6-bit characters, after the second a delta.
function decodeRleCounts(text) {
  const counts = [];
  let p = 0;
  while (p < text.length) {
    let x = 0;
    let k = 0;
    let more = true;
    while (more) {
      const c = text.charCodeAt(p) - 48;
      x += (c & 0x1f) * 32 ** k;
      more = (c & 0x20) !== 0;
      p += 1;
      k += 1;
      if (!more && c & 0x10) x -= 32 ** k; // sign extension
    }
    if (counts.length > 2) x += counts[counts.length - 2];
    counts.push(x);
  }
  return counts;
}

// Paints the mask into ``pixels`` (RGBA, width x height); returns its area in pixels.
function paintMask(rle, pixels, width, color) {
  const height = rle.size[0];
  const counts = decodeRleCounts(rle.counts);
  let position = 0;
  let area = 0;
  counts.forEach((run, i) => {
    if (i % 2 === 1) {
      for (let j = position; j < position + run; j++) {
        const offset = ((j % height) * width + Math.floor(j / height)) * 4;
        pixels[offset] = color[0];
        pixels[offset + 1] = color[1];
        pixels[offset + 2] = color[2];
        pixels[offset + 3] = 115;
      }
      area += run;
    }
    position += run;
  });
  return area;
}

function drawMasks(ctx, detections, width, height) {
  const areas = new Map();
  const withMasks = detections.filter((d) => d.mask);
  if (!withMasks.length) return areas;
  const layer = new ImageData(width, height);
  for (const d of withMasks) areas.set(d, paintMask(d.mask, layer.data, width, colorOf(d.class_id)));
  const overlay = Object.assign(document.createElement("canvas"), { width, height });
  overlay.getContext("2d").putImageData(layer, 0, 0);
  ctx.drawImage(overlay, 0, 0);
  return areas;
}

// The tiles a tiled request was cut into (result.tiles, original pixels): thin white frames.
function drawTiles(ctx, tiles, width, height) {
  ctx.lineWidth = Math.max(2, Math.round(Math.max(width, height) / 500));
  ctx.strokeStyle = "rgba(255, 255, 255, 0.9)";
  for (const t of tiles) ctx.strokeRect(t.x1, t.y1, t.x2 - t.x1, t.y2 - t.y1);
}

function drawBoxes(ctx, detections, width, height) {
  const line = Math.max(2, Math.round(Math.max(width, height) / 250));
  const font = Math.max(12, Math.round(Math.max(width, height) / 40));
  ctx.lineWidth = line;
  ctx.font = `${font}px system-ui, sans-serif`;
  ctx.textBaseline = "top";
  const ordered = [...detections].reverse(); // lowest score first: the best box and caption end on top
  for (const d of ordered) {
    ctx.strokeStyle = rgb(colorOf(d.class_id));
    ctx.strokeRect(d.box.x1, d.box.y1, d.box.x2 - d.box.x1, d.box.y2 - d.box.y1);
  }
  for (const d of ordered) {
    const text = `${d.label} ${d.score.toFixed(2)}`;
    const w = ctx.measureText(text).width + 2 * line;
    const h = font + line;
    const x = Math.min(Math.max(0, d.box.x1 - line / 2), Math.max(0, width - w));
    const y = d.box.y1 - h >= 0 ? d.box.y1 - h : d.box.y1;
    ctx.fillStyle = rgb(colorOf(d.class_id), 0.85);
    ctx.fillRect(x, y, w, h);
    ctx.fillStyle = "#fff";
    ctx.fillText(text, x + line, y + line / 2);
  }
}

function fillDetectionsTable(detections) {
  const rows = detections.map((d, i) => {
    const row = document.createElement("tr");
    const swatch = `<span class="swatch" style="background:${rgb(colorOf(d.class_id))}"></span>`;
    const box = [d.box.x1, d.box.y1, d.box.x2, d.box.y2].map((v) => v.toFixed(1)).join(", ");
    row.innerHTML = `<td>${i + 1}</td><td>${swatch}</td><td>${d.class_id}</td>` +
      `<td>${d.category_id ?? ""}</td><td>${d.score.toFixed(3)}</td><td>${box}</td>`;
    row.children[1].append(d.label); // as text: labels come from a manifest
    return row;
  });
  $("detections").tBodies[0].replaceChildren(...rows);
}

function fillTimingsTable() {
  const total = state.timings.find((t) => t.name === "total");
  const scale = Math.max(total ? total.ms : 0, ...state.timings.map((t) => t.ms), 1e-9);
  const entries = [...state.timings, { name: "round trip (browser)", ms: state.roundTripMs }];
  const rows = entries.map((t) => {
    const row = document.createElement("tr");
    const width = Math.min(100, (100 * t.ms) / scale);
    row.innerHTML = `<td></td><td>${t.ms.toFixed(1)}</td><td class="bar"><span style="width:${width}%"></span></td>`;
    row.children[0].textContent = t.name;
    return row;
  });
  $("timings").tBodies[0].replaceChildren(...rows);
}

// Shown as large as the column allows (small images up to 3x), without distorting it.
function fitCanvas(width, height) {
  const room = canvas.parentElement.clientWidth - 2;
  const scale = Math.min(room / width, (0.72 * window.innerHeight) / height, 3);
  canvas.style.width = `${Math.floor(width * scale)}px`;
  canvas.style.height = `${Math.floor(height * scale)}px`;
}

function draw() {
  showThreshold();
  const result = state.result;
  if (!result) {
    canvas.width = 0;
    canvas.height = 0;
    fillDetectionsTable([]);
    return;
  }
  const { width, height } = result; // original pixels (after EXIF orientation): boxes map 1:1
  canvas.width = width;
  canvas.height = height;
  fitCanvas(width, height);
  const ctx = canvas.getContext("2d");
  if (state.bitmap) ctx.drawImage(state.bitmap, 0, 0, width, height);
  const shown = visibleDetections();
  if ($("tile-grid").checked) drawTiles(ctx, result.tiles ?? [], width, height);
  const areas = drawMasks(ctx, shown, width, height);
  drawBoxes(ctx, shown, width, height);
  fillDetectionsTable(shown);
  fillTimingsTable();
  const drawn = shown.map((d) => ({
    class_id: d.class_id,
    category_id: d.category_id ?? null,
    label: d.label,
    score: d.score,
    box: d.box,
    ...(areas.has(d) ? { mask_area: areas.get(d) } : {}),
  }));
  canvas.dataset.drawn = JSON.stringify(drawn);
  canvas.dataset.state = "done";
  window.detectPage = { result, drawn, requests: state.requests };
  const tiled = result.tiles ? `, ${result.tiles.length} tiles` : "";
  setStatus(
    `${drawn.length} of ${result.detections.length} detections shown (score ≥ ${Number(slider.value).toFixed(2)}); ` +
      `${result.model} version ${result.version}, ${width}x${height} px${tiled}`,
  );
}

// ------------------------------------------------------------------ wiring

$("model").addEventListener("change", selectModel);
$("api-key").addEventListener("change", loadModels);
$("version").addEventListener("change", selectVersion);
slider.addEventListener("input", draw);
$("tiling").addEventListener("change", detect);
$("tile-grid").addEventListener("change", draw);
window.addEventListener("resize", () => {
  if (state.result) fitCanvas(state.result.width, state.result.height);
});
for (const button of document.querySelectorAll(".sample")) {
  button.addEventListener("click", () => {
    useModel(button.dataset.model);
    useSample(button.dataset.src);
  });
}
$("file").addEventListener("change", (event) => {
  if (event.target.files.length) useImage(event.target.files[0]);
});
const drop = $("drop");
drop.addEventListener("dragover", (event) => {
  event.preventDefault();
  drop.classList.add("over");
});
drop.addEventListener("dragleave", () => drop.classList.remove("over"));
drop.addEventListener("drop", (event) => {
  event.preventDefault();
  drop.classList.remove("over");
  if (event.dataTransfer.files.length) useImage(event.dataTransfer.files[0]);
});
loadModels();
