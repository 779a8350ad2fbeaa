/* global document, window, localStorage, EventSource, TextDecoder, setInterval, performance, Node, getComputedStyle */
// The cortex web console: one live feed (/admin/console/feed, server-sent events), the fleet's admin
// routes for actions, and the gateway's own Chat Completions API for the playground. No framework:
// every view is rebuilt from `state` when the feed says something changed.
'use strict';

const state = {
  title: '',
  fleet: null,
  fleetError: null,
  loads: new Map(),
  live: [],
  liveAt: 0,
  liveReceived: 0,
  activity: [],
  activitySource: 'feed',
  activityNote: null,
  timeline: [],
};

const $ = (selector) => document.querySelector(selector);
const el = (tag, attrs = {}, ...children) => {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (name === 'class') node.className = value;
    else if (name.startsWith('on')) node.addEventListener(name.slice(2), value);
    else node.setAttribute(name, value === true ? '' : String(value));
  }
  for (const child of children.flat()) if (child !== null && child !== undefined && child !== false) node.append(child instanceof Node ? child : String(child));
  return node;
};
const mib = (bytes) => (bytes >= 1024 ** 3 ? `${(bytes / 1024 ** 3).toFixed(1)} GiB` : `${Math.round(bytes / 1024 ** 2)} MiB`);
const ms = (value) => (value === null || value === undefined ? '–' : value >= 10_000 ? `${(value / 1000).toFixed(1)} s` : `${Math.round(value)} ms`);
const clock = (at) => new Date(at).toLocaleTimeString([], { hour12: false });
const pct = (fraction) => `${Math.round(fraction * 100)}%`;

// ---- theme and tabs -------------------------------------------------------------------------
$('#theme').addEventListener('click', () => {
  const next = document.documentElement.dataset.theme === 'dark' ? 'light' : 'dark';
  document.documentElement.dataset.theme = next;
  localStorage.setItem('cortex-console-theme', next);
  renderActivity();
});

function showTab(name) {
  for (const button of document.querySelectorAll('#tabs button')) button.setAttribute('aria-selected', String(button.dataset.tab === name));
  for (const section of document.querySelectorAll('main > section')) section.hidden = section.id !== name;
  if (window.location.hash !== `#${name}`) window.history.replaceState(null, '', `#${name}`);
  if (name === 'activity') renderActivity();
}
for (const button of document.querySelectorAll('#tabs button')) button.addEventListener('click', () => showTab(button.dataset.tab));
showTab((window.location.hash || '#fleet').slice(1).replace(/[^a-z]/g, '') || 'fleet');

function toast(text, bad = false) {
  const note = el('div', { class: bad ? 'bad' : '' }, text);
  $('#toast').append(note);
  setTimeout(() => note.remove(), bad ? 8000 : 4000);
}

// ---- admin actions ----------------------------------------------------------------------------
async function admin(path, body) {
  const response = await fetch(`/admin/${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  const text = await response.text();
  let data;
  try {
    data = JSON.parse(text);
  } catch {
    data = { error: { message: text } };
  }
  if (!response.ok) throw new Error(data?.error?.message ?? `HTTP ${response.status}`);
  return data;
}

function act(label, path, body) {
  return (event) => {
    const button = event.currentTarget;
    button.disabled = true;
    admin(path, body)
      .then(() => toast(`${label}: done`))
      .catch((error) => toast(`${label}: ${error.message}`, true))
      .finally(() => {
        button.disabled = false;
      });
  };
}

// ---- fleet ------------------------------------------------------------------------------------
const SEGMENT_COLOURS = ['#2f6fde', '#1f8a4c', '#b86e00', '#7a4fd6', '#c83232', '#118a8a'];

function modelState(worker, model) {
  if (model.state !== 'loading') return el('span', { class: `badge ${model.state}` }, model.state);
  const load = state.loads.get(`${worker.workerId}/${model.id}`);
  if (!load) return el('span', { class: 'badge loading' }, 'loading');
  return el(
    'span',
    { class: 'badge loading', 'data-test': 'loading' },
    `${load.phase ?? 'loading'} ${pct(load.fraction)}`,
    load.etaMs !== null && load.fraction < 1 ? ` · ~${ms(load.etaMs)} left` : '',
  );
}

function renderFleet() {
  const fleet = state.fleet;
  const error = $('#fleet-error');
  error.hidden = !state.fleetError;
  error.textContent = state.fleetError ? `No router answered for the fleet view: ${state.fleetError}` : '';
  const workers = $('#workers');
  workers.replaceChildren();
  if (!fleet) return;
  const pinned = new Set(fleet.catalogue.filter((m) => m.pinned).map((m) => m.id));
  if (fleet.workers.length === 0) workers.append(el('p', { class: 'muted' }, 'No workers yet.'));
  for (const worker of fleet.workers) {
    const status = !worker.up ? 'down' : worker.draining ? 'draining' : 'up';
    const capacity = worker.memory.budgetBytes || worker.device.totalBytes || 1;
    const segments = worker.models.map((model, i) =>
      el('span', { title: `${model.id}: ${mib(model.sizeBytes ?? 0)}`, style: `width:${Math.max(0.5, (100 * (model.sizeBytes ?? 0)) / capacity)}%;background:${SEGMENT_COLOURS[i % SEGMENT_COLOURS.length]}` }),
    );
    const rows = worker.models.map((model, i) =>
      el(
        'tr',
        { 'data-test': 'worker-model', 'data-worker': worker.workerId, 'data-model': model.id, 'data-state': model.state },
        el('td', {}, el('span', { style: `color:${SEGMENT_COLOURS[i % SEGMENT_COLOURS.length]}` }, '■ '), model.id, ' ', pinned.has(model.id) ? el('span', { class: 'badge pin', title: 'pinned: kept loaded' }, 'pinned') : ''),
        el('td', {}, modelState(worker, model)),
        el('td', { class: 'num' }, `${model.inFlight}/${model.slots}`),
        el('td', { class: 'num' }, String(model.queued)),
        el('td', { class: 'num' }, model.sizeBytes ? mib(model.sizeBytes) : '–'),
        el(
          'td',
          {},
          el('button', { class: 'danger small', 'data-test': 'unload', onclick: act(`unload ${model.id} from ${worker.workerId}`, 'unload', { model: model.id, worker: worker.workerId }) }, 'unload'),
          ' ',
          pinned.has(model.id)
            ? el('button', { class: 'ghost small', onclick: act(`unpin ${model.id}`, 'unpin', { model: model.id }) }, 'unpin')
            : el('button', { class: 'ghost small', onclick: act(`pin ${model.id}`, 'pin', { model: model.id }) }, 'pin'),
        ),
      ),
    );
    workers.append(
      el(
        'article',
        { class: 'worker', 'data-test': 'worker', 'data-worker': worker.workerId },
        el(
          'header',
          {},
          el('strong', {}, worker.workerId),
          el('span', { class: `badge ${status}` }, status === 'down' ? `down ${Math.round(worker.lastSeenMs / 1000)}s` : status),
          el('span', { class: 'muted small' }, `${worker.host} · ${worker.device.kind}: ${worker.device.name}`),
        ),
        el('div', { class: 'mem', title: 'memory by model' }, segments),
        el('div', { class: 'muted small' }, `models ${mib(worker.memory.usedBytes)} · free ${mib(worker.memory.freeBytes)} · ${worker.memory.budgetBytes ? `budget ${mib(worker.memory.budgetBytes)}` : `device ${mib(worker.device.totalBytes)}`}`),
        rows.length
          ? el('table', { class: 'grid' }, el('thead', {}, el('tr', {}, el('th', {}, 'model'), el('th', {}, 'state'), el('th', { class: 'num' }, 'in flight'), el('th', { class: 'num' }, 'queued'), el('th', { class: 'num' }, 'memory'), el('th', {}, ''))), el('tbody', {}, rows))
          : el('p', { class: 'muted small' }, 'no models loaded'),
      ),
    );
  }
  renderCatalogue();
  renderLoads();
}

const loadChoice = new Map();

function renderCatalogue() {
  const fleet = state.fleet;
  const body = $('#catalogue tbody');
  body.replaceChildren();
  if (!fleet) return;
  const up = fleet.workers.filter((w) => w.up && !w.draining).map((w) => w.workerId);
  for (const model of fleet.catalogue) {
    const select = el(
      'select',
      { 'data-test': 'load-worker', 'aria-label': `worker for ${model.id}`, onchange: (event) => loadChoice.set(model.id, event.currentTarget.value) },
      el('option', { value: '' }, 'any worker'),
      up.map((id) => el('option', { value: id }, id)),
    );
    // The fleet view is redrawn on every change: keep the worker chosen for each model across redraws.
    if (up.includes(loadChoice.get(model.id))) select.value = loadChoice.get(model.id);
    const load = (event) => act(`load ${model.id}`, 'load', { model: model.id, ...(select.value && { worker: select.value }) })(event);
    body.append(
      el(
        'tr',
        { 'data-test': 'catalogue-model', 'data-model': model.id },
        el('td', {}, model.id),
        el('td', {}, model.kind ?? 'chat'),
        el('td', {}, model.locations.map((l) => `${l.workerId}:${l.state}`).join(', ') || el('span', { class: 'muted' }, 'not loaded')),
        el('td', {}, model.pinned ? el('span', { class: 'pin' }, 'pinned') : ''),
        el('td', { class: 'num' }, String(model.contextSize)),
        el('td', {}, select, ' ', el('button', { class: 'small', 'data-test': 'load', onclick: load }, 'load')),
      ),
    );
  }
  const models = $('#chat-model');
  const chosen = models.value;
  models.replaceChildren(...fleet.catalogue.filter((m) => (m.kind ?? 'chat') === 'chat').map((m) => el('option', { value: m.id }, m.id)));
  if (chosen) models.value = chosen;
}

function renderLoads() {
  const box = $('#loads');
  const loads = [...state.loads.values()];
  box.replaceChildren(
    ...(loads.length
      ? loads.map((load) =>
          el(
            'div',
            { 'data-test': 'load-progress', 'data-model': load.model },
            `${load.model} on ${load.workerId}${load.phase === 'downloading' ? ' (downloading)' : ''} `,
            el('span', { class: 'bar' }, el('i', { style: `width:${pct(load.fraction)}` })),
            ` ${pct(load.fraction)}`,
            load.etaMs !== null && load.fraction < 1 ? ` · ~${ms(load.etaMs)} left` : '',
          ),
        )
      : [el('p', { class: 'muted' }, 'none')]),
  );
}

// ---- live -------------------------------------------------------------------------------------
function renderLive() {
  const body = $('#live-table tbody');
  const since = performance.now() - state.liveReceived;
  $('#live-count').textContent = String(state.live.length);
  body.replaceChildren(
    ...state.live.map((row) =>
      el(
        'tr',
        { 'data-test': 'live-row', 'data-run': row.runId, 'data-model': row.model ?? '', 'data-tokens': row.tokens },
        el('td', { class: 'muted small' }, row.runId.slice(0, 14)),
        el('td', {}, el('span', { class: `badge ${row.state === 'generating' ? 'ready' : 'loading'}` }, row.state)),
        el('td', {}, row.model ?? '?'),
        el('td', {}, row.workerId ?? '?'),
        el('td', { class: 'num' }, String(row.promptTokens)),
        el('td', { class: 'num', 'data-test': 'tokens' }, String(row.tokens)),
        el('td', { class: 'num' }, row.tokensPerSecond === null ? '–' : row.tokensPerSecond.toFixed(1)),
        el('td', { class: 'num' }, ms(row.elapsedMs + since)),
        el('td', {}, row.workerId ? el('button', { class: 'danger small', 'data-test': 'cancel', onclick: act(`cancel ${row.runId}`, 'requests/cancel', { runId: row.runId, workerId: row.workerId }) }, 'cancel') : ''),
      ),
    ),
  );
  if (state.live.length === 0) body.append(el('tr', {}, el('td', { colspan: 9, class: 'muted' }, 'Nothing in flight.')));
}
setInterval(() => {
  if (state.live.length && !$('#live').hidden) renderLive();
}, 500);

// ---- activity ---------------------------------------------------------------------------------
function filtered() {
  const model = $('#filter-model').value;
  const status = $('#filter-status').value;
  return state.activity.filter((a) => (!model || a.model === model) && (!status || (status === 'ok') === (a.status < 400 && !a.errorCode)));
}

function drawChart(canvas, values, colour) {
  const ratio = window.devicePixelRatio || 1;
  const width = canvas.clientWidth || 480;
  const height = canvas.clientHeight || 90;
  canvas.width = width * ratio;
  canvas.height = height * ratio;
  const g = canvas.getContext('2d');
  g.scale(ratio, ratio);
  g.clearRect(0, 0, width, height);
  const points = values.filter((v) => Number.isFinite(v));
  const style = getComputedStyle(document.documentElement);
  g.fillStyle = style.getPropertyValue('--muted');
  g.font = '11px system-ui';
  if (!points.length) {
    g.fillText('no data yet', 8, height / 2);
    return;
  }
  const max = Math.max(...points) || 1;
  g.fillText(max.toFixed(max < 10 ? 1 : 0), 0, 11);
  g.fillText('0', 0, height - 2);
  // At least 30 slots: a handful of requests draws as bars, not as one block.
  const step = (width - 30) / Math.max(30, values.length);
  g.fillStyle = colour || style.getPropertyValue('--accent');
  values.forEach((v, i) => {
    if (!Number.isFinite(v)) return;
    const h = Math.max(1, (v / max) * (height - 16));
    g.fillRect(30 + i * step + 1, height - h, Math.max(1, step - 2), h);
  });
}

function renderActivity() {
  const models = $('#filter-model');
  const chosen = models.value;
  const names = [...new Set(state.activity.map((a) => a.model))].sort();
  models.replaceChildren(el('option', { value: '' }, 'all'), ...names.map((n) => el('option', { value: n }, n)));
  models.value = names.includes(chosen) ? chosen : '';
  $('#activity-source').textContent =
    state.activitySource === 'events-stream'
      ? 'Recent requests from the fleet’s events stream (kept across gateway restarts), newest first.'
      : `Recent requests heard since this page opened. ${state.activityNote ?? ''}`;
  const rows = filtered().slice().reverse();
  const body = $('#activity-table tbody');
  body.replaceChildren(
    ...rows.slice(0, 100).map((a) =>
      el(
        'tr',
        { 'data-test': 'activity-row', 'data-request': a.requestId, 'data-model': a.model, 'data-status': a.status },
        el('td', {}, clock(a.finishedAt)),
        el('td', {}, a.dialect),
        el('td', {}, a.model),
        el('td', {}, a.workerId ?? '–'),
        el('td', { class: a.status >= 400 || a.errorCode ? 'status-bad' : '' }, `${a.status}${a.finishReason ? ` ${a.finishReason}` : ''}`),
        el('td', { class: 'num' }, String(a.usage?.promptTokens ?? '–')),
        el('td', { class: 'num' }, String(a.usage?.cachedPromptTokens ?? '–')),
        el('td', { class: 'num' }, String(a.usage?.completionTokens ?? '–')),
        el('td', { class: 'num' }, ms(a.timings?.ttftMs)),
        el('td', { class: 'num' }, a.timings ? a.timings.decodeTokensPerSecond.toFixed(1) : '–'),
        el('td', { class: 'num' }, ms(a.durationMs)),
        el('td', { class: 'status-bad' }, a.errorCode ?? ''),
      ),
    ),
  );
  if (!rows.length) body.append(el('tr', {}, el('td', { colspan: 12, class: 'muted' }, 'No requests yet.')));
  if (!$('#activity').hidden) {
    const chartRows = filtered().slice(-60);
    drawChart($('#chart-tps'), chartRows.map((a) => a.timings?.decodeTokensPerSecond ?? NaN));
    drawChart($('#chart-ttft'), chartRows.map((a) => a.timings?.ttftMs ?? NaN), getComputedStyle(document.documentElement).getPropertyValue('--load'));
  }
  renderTimeline();
}
$('#filter-model').addEventListener('change', renderActivity);
$('#filter-status').addEventListener('change', renderActivity);

/** Models swapped in and out at least 3 times within 10 minutes are marked: they thrash. */
function thrashing() {
  const marked = new Set();
  const loads = new Map();
  for (const entry of state.timeline) {
    if (entry.kind !== 'loaded' || !entry.model) continue;
    const times = (loads.get(entry.model) ?? []).filter((at) => entry.at - at < 600_000);
    times.push(entry.at);
    loads.set(entry.model, times);
    if (times.length >= 3 && state.timeline.some((e) => e.kind === 'unloaded' && e.model === entry.model && e.detail !== 'admin')) marked.add(entry.model);
  }
  return marked;
}

function renderTimeline() {
  const marked = thrashing();
  const words = { loaded: 'loaded on', unloaded: 'unloaded from', load_failed: 'failed to load on', worker_up: 'up', worker_down: 'down' };
  $('#timeline').replaceChildren(
    ...state.timeline
      .slice()
      .reverse()
      .map((e) =>
        el(
          'li',
          { 'data-test': 'timeline-entry', 'data-kind': e.kind },
          `${clock(e.at)}  `,
          e.model ? `${e.model} ${words[e.kind]} ${e.workerId}` : `worker ${e.workerId} ${words[e.kind]}`,
          e.detail ? ` (${e.detail})` : '',
          e.model && marked.has(e.model) ? el('span', { class: 'thrash', title: 'loaded 3 or more times in 10 minutes with evictions between' }, '  ⟲ swapping repeatedly') : '',
        ),
      ),
  );
  if (!state.timeline.length) $('#timeline').append(el('li', { class: 'muted' }, 'No loads or evictions yet.'));
}

// ---- feed -------------------------------------------------------------------------------------
function applySnapshot(snapshot) {
  state.title = snapshot.title;
  state.fleet = snapshot.fleet;
  state.fleetError = snapshot.fleetError;
  state.loads = new Map(snapshot.loads.map((l) => [`${l.workerId}/${l.model}`, l]));
  state.live = snapshot.live;
  state.liveReceived = performance.now();
  state.activity = snapshot.activity;
  state.activitySource = snapshot.activitySource;
  state.activityNote = snapshot.activityNote;
  state.timeline = snapshot.timeline;
  $('#title').textContent = snapshot.title;
  renderFleet();
  renderLive();
  renderActivity();
}

function connect() {
  const conn = $('#conn');
  const source = new EventSource('/admin/console/feed');
  const on = (name, handle) =>
    source.addEventListener(name, (message) => {
      try {
        handle(JSON.parse(message.data));
      } catch (error) {
        toast(`feed: ${error.message}`, true);
      }
    });
  source.onopen = () => {
    conn.className = 'conn up';
    conn.textContent = 'live';
  };
  source.onerror = () => {
    conn.className = 'conn down';
    conn.textContent = 'reconnecting…';
  };
  on('snapshot', applySnapshot);
  on('fleet', (fleet) => {
    state.fleet = fleet;
    state.fleetError = null;
    renderFleet();
  });
  on('fleet_error', ({ message }) => {
    state.fleetError = message;
    renderFleet();
  });
  on('load', (load) => {
    state.loads.set(`${load.workerId}/${load.model}`, load);
    renderFleet();
  });
  on('loads', (loads) => {
    state.loads = new Map(loads.map((l) => [`${l.workerId}/${l.model}`, l]));
    renderFleet();
  });
  on('live', ({ rows }) => {
    state.live = rows;
    state.liveReceived = performance.now();
    renderLive();
  });
  on('finished', (event) => {
    state.activity.push(event);
    if (state.activity.length > 200) state.activity.shift();
    renderActivity();
  });
  on('timeline', (entry) => {
    state.timeline.push(entry);
    if (state.timeline.length > 100) state.timeline.shift();
    renderTimeline();
  });
}
connect();

// ---- playground -------------------------------------------------------------------------------
const WEATHER_TOOL = {
  type: 'function',
  function: { name: 'get_weather', description: 'The weather in a city', parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } },
};
let chatAbort = null;

$('#chat-stop').addEventListener('click', () => chatAbort?.abort());
$('#chat-form').addEventListener('submit', async (event) => {
  event.preventDefault();
  const text = $('#chat-input').value.trim();
  const model = $('#chat-model').value;
  if (!text || !model) return;
  const log = $('#chat-log');
  log.prepend(el('div', { class: 'msg user' }, el('span', { class: 'who' }, 'you'), text));
  const reasoning = el('div', { class: 'reasoning', hidden: true, 'data-test': 'chat-reasoning' });
  const answer = el('div', { 'data-test': 'chat-answer' });
  const calls = el('div', {});
  const reply = el('div', { class: 'msg' }, el('span', { class: 'who' }, model), reasoning, answer, calls);
  log.prepend(reply);
  const body = { model, stream: true, stream_options: { include_usage: true }, max_tokens: Number($('#chat-max').value) || 256, messages: [{ role: 'user', content: text }] };
  if ($('#chat-tools').checked) body.tools = [WEATHER_TOOL];
  chatAbort = new AbortController();
  $('#chat-send').disabled = true;
  $('#chat-stop').disabled = false;
  const started = performance.now();
  const toolCalls = [];
  try {
    const response = await fetch('/v1/chat/completions', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body), signal: chatAbort.signal });
    if (!response.ok) throw new Error((await response.json().catch(() => null))?.error?.message ?? `HTTP ${response.status}`);
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let buffer = '';
    let usage = null;
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, { stream: true });
      let cut;
      while ((cut = buffer.indexOf('\n\n')) !== -1) {
        const frame = buffer.slice(0, cut);
        buffer = buffer.slice(cut + 2);
        const data = frame
          .split('\n')
          .filter((line) => line.startsWith('data:'))
          .map((line) => line.slice(5).trimStart())
          .join('\n');
        if (!data || data === '[DONE]') continue;
        const chunk = JSON.parse(data);
        if (chunk.usage) usage = chunk.usage;
        const delta = chunk.choices?.[0]?.delta ?? {};
        if (delta.reasoning_content) {
          reasoning.hidden = false;
          reasoning.textContent += delta.reasoning_content;
        }
        if (delta.content) answer.textContent += delta.content;
        for (const call of delta.tool_calls ?? []) {
          const known = toolCalls[call.index] ?? (toolCalls[call.index] = { name: '', arguments: '', node: calls.appendChild(el('div', { class: 'tool-call', 'data-test': 'chat-tool-call' })) });
          if (call.function?.name) known.name += call.function.name;
          if (call.function?.arguments) known.arguments += call.function.arguments;
          known.node.textContent = `call ${known.name}(${known.arguments})`;
        }
      }
    }
    const seconds = (performance.now() - started) / 1000;
    $('#chat-stats').textContent = usage ? `${usage.prompt_tokens} prompt · ${usage.completion_tokens} generated · ${seconds.toFixed(2)} s` : `${seconds.toFixed(2)} s`;
  } catch (error) {
    answer.append(el('span', { class: 'status-bad' }, error.name === 'AbortError' ? ' [stopped]' : ` [${error.message}]`));
  } finally {
    $('#chat-send').disabled = false;
    $('#chat-stop').disabled = true;
    chatAbort = null;
  }
});
