// The page's video tab: pick a running stream session, show its latest frame (boxes, labels and track ids
// drawn by the server: GET /v1/streams/{id}/snapshot.jpg) and the detections of its latest event, live
// (GET /v1/streams/{id}/events, Server-Sent Events read with fetch so the API key can be sent).
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
      `${info.url}: ${info.state}, ${info.processed_fps} of ${info.input_fps} fps processed, ` +
      `${info.dropped_frames} dropped, lag p50 / p99 ${lag}, ${info.reconnects} reconnects${error}`
    );
  }

  function selectStream(id) {
    stopEvents();
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

  function fillTable(detections) {
    $("tracks").tBodies[0].replaceChildren(
      ...detections.map((d) => {
        const row = document.createElement("tr");
        const cells = [d.track_id ?? "-", d.label, d.score.toFixed(2), d.box.map((v) => v.toFixed(1)).join(", ")];
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

  $("tab-image").addEventListener("click", () => showTab("image"));
  $("tab-video").addEventListener("click", () => showTab("video"));
  $("stream").addEventListener("change", (e) => selectStream(e.target.value));
  $("stream-refresh").addEventListener("click", loadStreams);
})();
