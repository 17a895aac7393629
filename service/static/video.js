// The page's video tab: pick a running stream session, show its latest frame (boxes, labels and track ids
// drawn by the server: GET /v1/streams/{id}/snapshot.jpg) and the detections of its latest event, live
// (GET /v1/streams/{id}/events, Server-Sent Events read with fetch so the API key can be sent); or upload
// a clip to POST /detect and see each processed frame's detections with track ids as the NDJSON answer
// streams in, drawn over the clip as it plays.
// What is shown is published in window.detectVideo, so a test can compare it with the API.
"use strict";

(() => {
  const $ = (id) => document.getElementById(id);
  const SNAPSHOT_EVERY_MS = 200; // at most 5 snapshots a second, whatever the stream's fps
  const INFO_EVERY_MS = 1000; // the stream's state and rates, once a second
  const video = {
    streams: [], // GET /v1/streams entries
    stream: null, // the selected id
    events: 0, // frame events received for it
    lastEvent: null, // the latest one
    snapshots: 0, // snapshots shown
    abort: null, // stops the current event stream
    clip: null, // an uploaded clip: {frames: [NDJSON frame lines], summary, done, error}
  };
  window.detectVideo = video;

  function headers() {
    const key = $("api-key").value.trim();
    return key ? { Authorization: `Bearer ${key}` } : {};
  }

  function status(text, isError = false) {
    $("video-status").textContent = text;
    $("video-status").classList.toggle("error", isError);
  }

  async function failure(response) {
    try {
      const body = await response.json();
      return `${response.status}: ${body.error}`;
    } catch {
      return `${response.status} ${response.statusText}`;
    }
  }

  function showTab(name) {
    for (const tab of ["image", "video"]) {
      $(`tab-${tab}`).setAttribute("aria-selected", String(tab === name));
      $(`${tab}-tab`).hidden = tab !== name;
    }
    if (name === "video") loadStreams();
    else stopEvents();
  }

  async function loadStreams() {
    const response = await fetch("/v1/streams", { headers: headers() });
    if (!response.ok) {
      video.streams = [];
      $("stream").replaceChildren();
      status(`No streams: ${await failure(response)}`, true);
      return;
    }
    video.streams = (await response.json()).streams;
    const select = $("stream");
    const keep = video.stream;
    select.replaceChildren(
      ...video.streams.map((s) => new Option(`${s.id} (${s.state}, ${s.model})`, s.id, false, s.id === keep)),
    );
    if (!video.streams.length) {
      status("No stream is open on this server (POST /v1/streams opens one).");
      return;
    }
    selectStream(select.value);
  }

  function describe(info) {
    const lag = info.lag_ms_p50 === null ? "-" : `${info.lag_ms_p50} / ${info.lag_ms_p99} ms`;
    const error = info.last_error ? `; last error: ${info.last_error}` : "";
    return (
      `${info.url}: ${info.state}, ${info.processed_fps} of ${info.input_fps} fps answered ` +
      `(${info.detected_fps} detected, ${info.predicted_fps} predicted), ` +
      `${info.dropped_frames} dropped, lag p50 / p99 ${lag}, ${info.reconnects} reconnects${error}`
    );
  }

  function selectStream(id) {
    stopEvents();
    $("clip-view").hidden = true;
    $("clip-step").hidden = true;
    video.clip = null;
    video.stream = id;
    video.events = 0;
    video.lastEvent = null;
    const info = video.streams.find((s) => s.id === id);
    $("stream-info").textContent = info ? describe(info) : "";
    if (id) readEvents(id);
  }

  function stopEvents() {
    if (video.abort) video.abort.abort();
    video.abort = null;
  }

  // Server-Sent Events over fetch: "event: frame\ndata: {...}\n\n" blocks.
  async function readEvents(id) {
    const controller = new AbortController();
    video.abort = controller;
    status(`Waiting for frames of ${id}...`);
    let response;
    try {
      response = await fetch(`/v1/streams/${encodeURIComponent(id)}/events`, {
        headers: headers(),
        signal: controller.signal,
      });
    } catch (error) {
      if (!controller.signal.aborted) status(`Events failed: ${error}`, true);
      return;
    }
    if (!response.ok) {
      status(`Events failed: ${await failure(response)}`, true);
      return;
    }
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    try {
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += value;
        let end;
        while ((end = buffer.indexOf("\n\n")) >= 0) {
          handleBlock(id, buffer.slice(0, end));
          buffer = buffer.slice(end + 2);
        }
      }
      if (video.stream === id) status(`Stream ${id} ended.`);
    } catch (error) {
      if (!controller.signal.aborted) status(`Events stopped: ${error}`, true);
    }
  }

  function handleBlock(id, block) {
    const lines = block.split("\n");
    const kind = lines.find((l) => l.startsWith("event: "))?.slice(7);
    const data = lines.find((l) => l.startsWith("data: "))?.slice(6);
    if (kind !== "frame" || !data || video.stream !== id) return;
    const event = JSON.parse(data);
    video.events += 1;
    video.lastEvent = event;
    status(
      `${id}: frame ${event.frame}, ${event.detections.length} detections, lag ${event.lag_ms} ms ` +
        `(${video.events} events received)`,
    );
    fillTable(event.detections);
    refreshSnapshot(id);
    refreshInfo(id);
  }

  let infoAt = 0;
  async function refreshInfo(id) {
    const now = performance.now();
    if (now - infoAt < INFO_EVERY_MS) return;
    infoAt = now;
    const response = await fetch(`/v1/streams/${encodeURIComponent(id)}`, { headers: headers() });
    if (response.ok && video.stream === id) $("stream-info").textContent = describe(await response.json());
  }

  // Streams send boxes as [x1, y1, x2, y2]; /detect answers {x1, y1, x2, y2}.
  const corners = (box) => (Array.isArray(box) ? box : [box.x1, box.y1, box.x2, box.y2]);

  function fillTable(detections) {
    $("tracks").tBodies[0].replaceChildren(
      ...detections.map((d) => {
        const row = document.createElement("tr");
        const box = corners(d.box).map((v) => v.toFixed(1)).join(", ");
        const cells = [d.track_id ?? "-", d.label, d.score.toFixed(2), box];
        row.replaceChildren(...cells.map((text) => Object.assign(document.createElement("td"), { textContent: text })));
        return row;
      }),
    );
  }

  let snapshotBusy = false;
  let snapshotAt = 0;
  async function refreshSnapshot(id) {
    const now = performance.now();
    if (snapshotBusy || now - snapshotAt < SNAPSHOT_EVERY_MS) return;
    snapshotBusy = true;
    snapshotAt = now;
    try {
      const response = await fetch(`/v1/streams/${encodeURIComponent(id)}/snapshot.jpg`, { headers: headers() });
      if (response.ok && video.stream === id) {
        const img = $("snapshot");
        const old = img.src;
        img.src = URL.createObjectURL(await response.blob());
        img.hidden = false;
        if (old.startsWith("blob:")) URL.revokeObjectURL(old);
        video.snapshots += 1;
      }
    } finally {
      snapshotBusy = false;
    }
  }

  // ------------------------------------------------------------ a clip

  // POST /detect with the clip: NDJSON, one line per processed frame (with track ids), then a summary.
  async function detectClip(file) {
    stopEvents();
    video.stream = null;
    $("snapshot").hidden = true;
    const clip = { name: file.name, frames: [], summary: null, done: false, error: null };
    video.clip = clip;
    const player = $("clip-video");
    if (player.src.startsWith("blob:")) URL.revokeObjectURL(player.src);
    player.src = URL.createObjectURL(file);
    $("clip-view").hidden = false;
    status(`Sending ${file.name}...`);
    const params = new URLSearchParams();
    const model = document.getElementById("model").value;
    if (model) params.set("model", model);
    const every = Number.parseInt($("clip-detect-every").value, 10);
    if (every > 1) params.set("detect_every", String(every));
    const query = params.size ? `?${params}` : "";
    try {
      const response = await fetch(`/detect${query}`, {
        method: "POST",
        body: file,
        headers: { ...headers(), "Content-Type": file.type || "video/mp4" },
      });
      if (!response.ok) throw new Error(await failure(response));
      const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
      let buffer = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += value;
        let end;
        while ((end = buffer.indexOf("\n")) >= 0) {
          const line = buffer.slice(0, end).trim();
          buffer = buffer.slice(end + 1);
          if (line) clipLine(clip, JSON.parse(line));
        }
      }
      if (buffer.trim()) clipLine(clip, JSON.parse(buffer));
    } catch (error) {
      clip.error = String(error.message ?? error);
      status(`The clip failed: ${clip.error}`, true);
    }
    clip.done = true;
    drawClipFrame(clip.frames[clip.frames.length - 1]);
  }

  function clipLine(clip, line) {
    if (video.clip !== clip) return;
    if (line.summary) {
      clip.summary = line;
      status(
        `${clip.name}: ${line.frames_processed} frames processed of ${line.frames_read} read, ` +
          `${line.tracks} tracks (${line.codec}, ${line.container})`,
      );
      return;
    }
    if (line.error) {
      clip.error = line.error;
      status(`The clip failed: ${line.error}`, true);
      return;
    }
    clip.frames.push(line);
    status(`${clip.name}: frame ${line.frame} at ${line.pts.toFixed(2)} s, ${line.detections.length} detections`);
    fillTable(line.detections);
  }

  // The processed frame at the player's time (or the one the slider picks), its boxes drawn over the
  // playing clip; on their own, on a blank frame, when the browser cannot play the clip.
  function frameAtPlayerTime() {
    const clip = video.clip;
    let shown = clip.frames[0];
    for (const frame of clip.frames) if (frame.pts <= $("clip-video").currentTime + 1e-3) shown = frame;
    return shown;
  }

  function drawClipFrame(shown = null) {
    const clip = video.clip;
    if (!clip || !clip.frames.length) return;
    const player = $("clip-video");
    const playable = player.videoWidth > 0 && !player.error;
    shown = shown ?? (playable ? frameAtPlayerTime() : clip.frames[Number($("clip-frame").value)] ?? clip.frames[0]);
    $("clip-view").classList.toggle("boxes-only", !playable);
    const overlay = $("clip-overlay");
    overlay.width = playable ? player.clientWidth : Math.min(shown.width, 640);
    overlay.height = playable ? player.clientHeight : Math.round((overlay.width * shown.height) / shown.width);
    const scale = overlay.width / shown.width;
    const ctx = overlay.getContext("2d");
    ctx.clearRect(0, 0, overlay.width, overlay.height);
    ctx.lineWidth = 2;
    ctx.font = "12px system-ui, sans-serif";
    // Boxes of a frame the detector did not see (the tracks advanced to it) are drawn dashed.
    ctx.setLineDash(shown.source === "predicted" ? [6, 4] : []);
    for (const d of shown.detections) {
      const [x1, y1, x2, y2] = corners(d.box).map((v) => v * scale);
      const color = `hsl(${(d.class_id * 67) % 360}, 85%, 45%)`;
      ctx.strokeStyle = color;
      ctx.strokeRect(x1, y1, x2 - x1, y2 - y1);
      const caption = `${d.track_id !== undefined && d.track_id !== null ? `#${d.track_id} ` : ""}${d.label}`;
      ctx.fillStyle = color;
      ctx.fillRect(x1, Math.max(0, y1 - 15), ctx.measureText(caption).width + 6, 15);
      ctx.fillStyle = "#fff";
      ctx.fillText(caption, x1 + 3, Math.max(11, y1 - 4));
    }
    const index = clip.frames.indexOf(shown);
    const slider = $("clip-frame");
    $("clip-step").hidden = false;
    slider.max = String(clip.frames.length - 1);
    slider.value = String(index);
    $("clip-frame-value").textContent = `frame ${shown.frame} at ${shown.pts.toFixed(2)} s`;
    video.clipShownFrame = shown.frame;
    fillTable(shown.detections);
  }

  function stepClip() {
    const clip = video.clip;
    if (!clip || !clip.frames.length) return;
    const shown = clip.frames[Number($("clip-frame").value)];
    const player = $("clip-video");
    if (player.videoWidth > 0 && !player.error) player.currentTime = shown.pts;
    drawClipFrame(shown);
  }

  $("clip").addEventListener("change", (e) => e.target.files[0] && detectClip(e.target.files[0]));
  for (const name of ["timeupdate", "loadeddata", "seeked", "error"]) {
    $("clip-video").addEventListener(name, () => drawClipFrame());
  }
  $("clip-frame").addEventListener("input", stepClip);

  $("tab-image").addEventListener("click", () => showTab("image"));
  $("tab-video").addEventListener("click", () => showTab("video"));
  $("stream").addEventListener("change", (e) => selectStream(e.target.value));
  $("stream-refresh").addEventListener("click", loadStreams);
})();
