/* global document, window, localStorage, EventSource, TextDecoder, setInterval, performance, Node, getComputedStyle, requestAnimationFrame */
// The cortex web console: one live feed (/admin/console/feed, server-sent events), the fleet's admin
// routes for actions, and the gateway's own Chat Completions API for the playground. No framework:
// every view is rebuilt from `state` when the feed says something changed.
'use strict';

const state = {
  title: '',
  fleet: null,
  fleetError: null,
  health: null,
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
  for (const child of children.flat())
    if (child !== null && child !== undefined && child !== false)
      node.append(child instanceof Node ? child : String(child));
  return node;
};
const mib = (bytes) =>
  bytes >= 1024 ** 3 ? `${(bytes / 1024 ** 3).toFixed(1)} GiB` : `${Math.round(bytes / 1024 ** 2)} MiB`;
const ms = (value) =>
  value === null || value === undefined
    ? '–'
    : value >= 10_000
      ? `${(value / 1000).toFixed(1)} s`
      : `${Math.round(value)} ms`;
const clock = (at) => new Date(at).toLocaleTimeString([], { hour12: false });
const pct = (fraction) => `${Math.round(fraction * 100)}%`;

// ---- presses ---------------------------------------------------------------------------------
/**
 * The feed re-renders the views several times a second, and a button replaced between a press and its
 * release takes no click. So while a pointer is down the feed's renders wait, and run once it is up
 * (after the click that the release makes); a press held longer than PRESS_HOLD_MS holds them no more.
 */
const PRESS_HOLD_MS = 2_000;
let pressedAt = null;
const heldRenders = new Set();
/**
 * A busy fleet sends many feed events a second (a request's finish, each load's progress): each view
 * renders at most once per frame, with the state of its last event, and not at all while the page is
 * hidden (the browser runs no frames then; the first frame after renders what it missed).
 */
const frameRenders = new Set();
let frameAsked = false;
const pressHeld = () => pressedAt !== null && performance.now() - pressedAt < PRESS_HOLD_MS;
function render(view) {
  if (pressHeld()) {
    heldRenders.add(view);
    return;
  }
  frameRenders.add(view);
  if (frameAsked) return;
  frameAsked = true;
  requestAnimationFrame(() => {
    frameAsked = false;
    const views = [...frameRenders];
    frameRenders.clear();
    // A press that began after the frame was asked for holds these too.
    for (const next of views) {
      if (pressHeld()) {
        heldRenders.add(next);
        continue;
      }
      // One view that fails must not keep the others of its frame from rendering.
      try {
        next();
      } catch (error) {
        toast(`render: ${error.message}`, true);
      }
    }
  });
}
document.addEventListener('pointerdown', () => (pressedAt = performance.now()), true);
function released() {
  if (pressedAt === null) return;
  pressedAt = null;
  setTimeout(() => {
    const views = [...heldRenders];
    heldRenders.clear();
    views.forEach(render);
  }, 0);
}
document.addEventListener('pointerup', released, true);
document.addEventListener('pointercancel', released, true);

// ---- theme and tabs -------------------------------------------------------------------------
$('#theme').addEventListener('click', () => {
  const next = document.documentElement.dataset.theme === 'dark' ? 'light' : 'dark';
  document.documentElement.dataset.theme = next;
  localStorage.setItem('cortex-console-theme', next);
  renderActivity();
});

function showTab(name) {
  for (const button of document.querySelectorAll('#tabs button'))
    button.setAttribute('aria-selected', String(button.dataset.tab === name));
  for (const section of document.querySelectorAll('main > section')) section.hidden = section.id !== name;
  if (window.location.hash !== `#${name}`) window.history.replaceState(null, '', `#${name}`);
  if (name === 'activity') renderActivity();
  if (name === 'keys') void loadKeys();
}
for (const button of document.querySelectorAll('#tabs button'))
  button.addEventListener('click', () => showTab(button.dataset.tab));

function toast(text, bad = false) {
  const note = el('div', { class: bad ? 'bad' : '' }, text);
  $('#toast').append(note);
  setTimeout(() => note.remove(), bad ? 8000 : 4000);
}

// ---- admin actions ----------------------------------------------------------------------------
/** A JSON request to the gateway (POST with a body, else GET); a refusal throws with its message. */
async function request(path, body) {
  const init =
    body === undefined
      ? {}
      : { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) };
  const response = await fetch(path, init);
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

const admin = (path, body) => request(`/admin/${path}`, body);

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

const TRIGGERS = {
  request: 'a request',
  pin: 'a pin',
  replica: 'replication',
  admin: 'an admin (cortex load)',
  console: 'the console',
};

/** "downloading 40% · ~3 s left": the real fraction of the phase the worker is in, and a straight-line estimate. */
function progressText(load) {
  return [
    `${load.phase === 'downloading' ? 'downloading' : 'loading'} ${pct(load.fraction)}`,
    load.etaMs !== null && load.fraction < 1 ? ` · ~${ms(load.etaMs)} left` : '',
  ].join('');
}

/** Why a load runs and who waits on it: its trigger (from the worker) and the requests the router holds for it. */
function loadFacts(model, load) {
  const waiting = state.fleet?.waiting?.[model] ?? 0;
  return el(
    'span',
    { class: 'muted small', 'data-test': 'load-facts', 'data-trigger': load?.trigger ?? '', 'data-waiting': waiting },
    load?.trigger ? ` for ${TRIGGERS[load.trigger] ?? load.trigger}` : '',
    ` · ${waiting} waiting`,
  );
}

function cancelLoadButton(workerId, model) {
  return el(
    'button',
    {
      class: 'danger small',
      'data-test': 'cancel-load',
      onclick: act(`cancel the load of ${model} on ${workerId}`, 'load/cancel', { model, worker: workerId }),
    },
    'cancel load',
  );
}

function modelState(worker, model) {
  if (model.unreachable)
    return el(
      'span',
      {
        class: 'badge down',
        'data-test': 'unreachable',
        title: `since ${new Date(model.unreachable.since).toLocaleTimeString()}: ${model.unreachable.error}`,
      },
      'upstream failing',
    );
  if (model.state !== 'loading') return el('span', { class: `badge ${model.state}` }, model.state);
  const load = state.loads.get(`${worker.workerId}/${model.id}`);
  return el(
    'span',
    {},
    el('span', { class: 'badge loading', 'data-test': 'loading' }, load ? progressText(load) : 'loading'),
    loadFacts(model.id, load),
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
    const remote = worker.device.kind === 'remote';
    const capacity = worker.memory.budgetBytes || worker.device.totalBytes || 1;
    const segments = worker.models.map((model, i) =>
      el('span', {
        title: `${model.id}: ${mib(model.sizeBytes ?? 0)}`,
        style: `width:${Math.max(0.5, (100 * (model.sizeBytes ?? 0)) / capacity)}%;background:${SEGMENT_COLOURS[i % SEGMENT_COLOURS.length]}`,
      }),
    );
    const rows = worker.models.map((model, i) =>
      el(
        'tr',
        {
          'data-test': 'worker-model',
          'data-worker': worker.workerId,
          'data-model': model.id,
          'data-state': model.state,
        },
        el(
          'td',
          {},
          el('span', { style: `color:${SEGMENT_COLOURS[i % SEGMENT_COLOURS.length]}` }, '■ '),
          model.id,
          ' ',
          pinned.has(model.id) ? el('span', { class: 'badge pin', title: 'pinned: kept loaded' }, 'pinned') : '',
        ),
        el('td', {}, modelState(worker, model)),
        el('td', { class: 'num' }, `${model.inFlight}/${model.slots}`),
        el('td', { class: 'num' }, String(model.queued)),
        el('td', { class: 'num' }, model.sizeBytes ? mib(model.sizeBytes) : '–'),
        el(
          'td',
          {},
          model.state === 'loading'
            ? cancelLoadButton(worker.workerId, model.id)
            : el(
                'button',
                {
                  class: 'danger small',
                  'data-test': 'unload',
                  onclick: act(`unload ${model.id} from ${worker.workerId}`, 'unload', {
                    model: model.id,
                    worker: worker.workerId,
                  }),
                },
                'unload',
              ),
          ' ',
          pinned.has(model.id)
            ? el(
                'button',
                { class: 'ghost small', onclick: act(`unpin ${model.id}`, 'unpin', { model: model.id }) },
                'unpin',
              )
            : el(
                'button',
                { class: 'ghost small', onclick: act(`pin ${model.id}`, 'pin', { model: model.id }) },
                'pin',
              ),
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
          el(
            'span',
            { class: `badge ${status}` },
            status === 'down' ? `down ${Math.round(worker.lastSeenMs / 1000)}s` : status,
          ),
          el('span', { class: 'muted small' }, `${worker.host} · ${worker.device.kind}: ${worker.device.name}`),
        ),
        // A remote worker holds no weights: its models are served by their upstreams.
        remote ? null : el('div', { class: 'mem', title: 'memory by model' }, segments),
        el(
          'div',
          { class: 'muted small', 'data-test': 'worker-memory' },
          remote
            ? 'serves its models from their upstreams: no device memory'
            : `models ${mib(worker.memory.usedBytes)} · free ${mib(worker.memory.freeBytes)} · ${worker.memory.budgetBytes ? `budget ${mib(worker.memory.budgetBytes)}` : `device ${mib(worker.device.totalBytes)}`}`,
        ),
        worker.memory.promptCache?.length
          ? el(
              'div',
              { class: 'muted small', 'data-test': 'prompt-cache' },
              `prompt cache ${worker.memory.promptCache.map((t) => `${t.tier} ${mib(t.bytes)} of ${mib(t.maxBytes)}`).join(' · ')}`,
            )
          : null,
        rows.length
          ? el(
              'table',
              { class: 'grid' },
              el(
                'thead',
                {},
                el(
                  'tr',
                  {},
                  el('th', {}, 'model'),
                  el('th', {}, 'state'),
                  el('th', { class: 'num' }, 'in flight'),
                  el('th', { class: 'num' }, 'queued'),
                  el('th', { class: 'num' }, 'memory'),
                  el('th', {}, ''),
                ),
              ),
              el('tbody', {}, rows),
            )
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
      {
        'data-test': 'load-worker',
        'aria-label': `worker for ${model.id}`,
        onchange: (event) => loadChoice.set(model.id, event.currentTarget.value),
      },
      el('option', { value: '' }, 'any worker'),
      up.map((id) => el('option', { value: id }, id)),
    );
    // The fleet view is redrawn on every change: keep the worker chosen for each model across redraws.
    if (up.includes(loadChoice.get(model.id))) select.value = loadChoice.get(model.id);
    const load = (event) =>
      act(`load ${model.id}`, 'load', {
        model: model.id,
        from: 'console',
        ...(select.value && { worker: select.value }),
      })(event);
    body.append(
      el(
        'tr',
        { 'data-test': 'catalogue-model', 'data-model': model.id },
        el('td', {}, model.id),
        el(
          'td',
          {},
          model.kind ?? 'chat',
          model.upstream
            ? el(
                'div',
                { class: 'muted small', 'data-test': 'upstream' },
                `${model.upstream.api} upstream at ${model.upstream.host}`,
              )
            : null,
          model.fallback?.length
            ? el('div', { class: 'muted small', 'data-test': 'fallback' }, `falls back to ${model.fallback.join(', ')}`)
            : null,
        ),
        el(
          'td',
          {},
          model.locations
            .map((l) => `${l.workerId}:${l.state}${l.unreachable ? ' (upstream failing)' : ''}`)
            .join(', ') || el('span', { class: 'muted' }, 'not loaded'),
        ),
        el('td', {}, model.pinned ? el('span', { class: 'pin' }, 'pinned') : ''),
        el('td', { class: 'num' }, String(model.contextSize)),
        el('td', {}, select, ' ', el('button', { class: 'small', 'data-test': 'load', onclick: load }, 'load')),
      ),
    );
  }
  for (const [select, kind] of [
    ['#chat-model', 'chat'],
    ['#embed-model', 'embedding'],
    ['#rerank-model', 'ranking'],
  ]) {
    const models = $(select);
    const chosen = models.value;
    const ids = fleet.catalogue.filter((m) => (m.kind ?? 'chat') === kind).map((m) => m.id);
    // Rebuilt only when the list changes: a redraw must not close a list the user has open.
    if (models.dataset.ids === ids.join(',')) continue;
    models.dataset.ids = ids.join(',');
    models.replaceChildren(...ids.map((id) => el('option', { value: id }, id)));
    if (ids.includes(chosen)) models.value = chosen;
  }
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
            ` ${progressText(load)}`,
            loadFacts(load.model, load),
            ' ',
            cancelLoadButton(load.workerId, load.model),
          ),
        )
      : [el('p', { class: 'muted' }, 'none')]),
  );
}

// ---- live -------------------------------------------------------------------------------------
/**
 * The live table's rows by run id. Each render updates them in place rather than building the table
 * anew: the view re-renders several times a second (every token count, every 500 ms), and a cancel
 * button replaced between a press and its release takes no click.
 */
const liveRows = new Map();
const nothingLive = el('tr', {}, el('td', { colspan: 10, class: 'muted' }, 'Nothing in flight.'));

function liveCells(row, since) {
  return [
    el('td', { class: 'muted small' }, row.runId.slice(0, 14)),
    el(
      'td',
      {},
      el(
        'span',
        {
          class: `badge ${row.state === 'generating' ? 'ready' : row.state === 'queued' || row.state === 'tool' ? 'draining' : 'loading'}`,
          'data-test': 'live-state',
          ...(row.tool && { title: `waiting on the MCP tool ${row.tool}` }),
        },
        row.state === 'tool' ? `tool ${row.tool}` : row.state,
      ),
    ),
    el('td', {}, row.model ?? '?'),
    el('td', {}, row.workerId ?? '–'),
    el(
      'td',
      { 'data-test': 'live-owner' },
      row.keyId ? `${row.keyId} · ${row.account ?? ''}` : el('span', { class: 'muted' }, '–'),
    ),
    el('td', { class: 'num' }, String(row.promptTokens)),
    el('td', { class: 'num', 'data-test': 'tokens' }, String(row.tokens)),
    el('td', { class: 'num' }, row.tokensPerSecond === null ? '–' : row.tokensPerSecond.toFixed(1)),
    el('td', { class: 'num' }, ms(row.elapsedMs + since)),
  ];
}

function renderLive() {
  const body = $('#live-table tbody');
  const since = performance.now() - state.liveReceived;
  $('#live-count').textContent = String(state.live.length);
  const shown = new Set();
  let previous = null;
  for (const row of state.live) {
    shown.add(row.runId);
    let entry = liveRows.get(row.runId);
    if (!entry) {
      entry = {
        tr: el('tr', { 'data-test': 'live-row', 'data-run': row.runId }),
        workerId: undefined,
        cancel: el('td'),
      };
      liveRows.set(row.runId, entry);
    }
    const { tr } = entry;
    tr.dataset.model = row.model ?? '';
    tr.dataset.tokens = String(row.tokens);
    tr.dataset.state = row.state;
    // The cells that change are replaced; the cancel cell is never taken out of the row.
    const cells = liveCells(row, since);
    if (tr.children.length === 0) tr.append(...cells, entry.cancel);
    else cells.forEach((cell, index) => tr.children[index].replaceWith(cell));
    // The button stays the same element while the run stays on its worker (a move makes a new one).
    if (entry.workerId !== row.workerId) {
      entry.workerId = row.workerId;
      entry.cancel.replaceChildren(
        row.workerId
          ? el(
              'button',
              {
                class: 'danger small',
                'data-test': 'cancel',
                onclick: act(`cancel ${row.runId}`, 'requests/cancel', { runId: row.runId, workerId: row.workerId }),
              },
              'cancel',
            )
          : '',
      );
    }
    const next = previous ? previous.nextSibling : body.firstChild;
    if (next !== tr) body.insertBefore(tr, next);
    previous = tr;
  }
  for (const [runId, entry] of liveRows) {
    if (shown.has(runId)) continue;
    entry.tr.remove();
    liveRows.delete(runId);
  }
  if (state.live.length === 0) body.append(nothingLive);
  else nothingLive.remove();
}
setInterval(() => {
  if (state.live.length && !$('#live').hidden) render(renderLive);
}, 500);

// ---- activity ---------------------------------------------------------------------------------
function filtered() {
  const model = $('#filter-model').value;
  const status = $('#filter-status').value;
  return state.activity.filter(
    (a) => (!model || a.model === model) && (!status || (status === 'ok') === (a.status < 400 && !a.errorCode)),
  );
}

function chartFrame(canvas) {
  const ratio = window.devicePixelRatio || 1;
  const width = canvas.clientWidth || 480;
  const height = canvas.clientHeight || 90;
  canvas.width = width * ratio;
  canvas.height = height * ratio;
  const g = canvas.getContext('2d');
  g.scale(ratio, ratio);
  g.clearRect(0, 0, width, height);
  const style = getComputedStyle(document.documentElement);
  g.fillStyle = style.getPropertyValue('--muted');
  g.font = '11px system-ui';
  return { g, width, height, style };
}

/** Bars, one per value; the values are kept on the canvas (data-values) for whoever reads the page. */
function drawChart(canvas, values, colour) {
  canvas.dataset.values = JSON.stringify(values.map((v) => (Number.isFinite(v) ? Math.round(v * 100) / 100 : null)));
  const { g, width, height, style } = chartFrame(canvas);
  const points = values.filter((v) => Number.isFinite(v));
  if (!points.length || Math.max(...points) === 0) {
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

/** One line per series over the same sample times; the legend names each series in its colour. */
function drawLines(canvas, series, legend) {
  const names = Object.keys(series);
  canvas.dataset.max = JSON.stringify(Object.fromEntries(names.map((n) => [n, Math.max(0, ...series[n])])));
  const { g, width, height } = chartFrame(canvas);
  legend.replaceChildren(
    ...names.map((n, i) => el('span', { style: `color:${SEGMENT_COLOURS[i % SEGMENT_COLOURS.length]}` }, `■ ${n}`)),
  );
  const max = Math.max(0, ...names.flatMap((n) => series[n]));
  if (!names.length || max === 0) {
    g.fillText(names.length ? 'nothing queued' : 'no data yet', 8, height / 2);
    if (!max) return;
  }
  g.fillText(String(max), 0, 11);
  g.fillText('0', 0, height - 2);
  names.forEach((n, i) => {
    const values = series[n];
    const step = (width - 30) / Math.max(1, QUEUE_SAMPLES - 1);
    g.strokeStyle = SEGMENT_COLOURS[i % SEGMENT_COLOURS.length];
    g.lineWidth = 1.5;
    g.beginPath();
    values.forEach((v, j) => {
      const x = 30 + (QUEUE_SAMPLES - values.length + j) * step;
      const y = height - 2 - (v / max) * (height - 16);
      if (j === 0) g.moveTo(x, y);
      else g.lineTo(x, y);
    });
    g.stroke();
  });
}

const MINUTES = 30;
/** Requests finished and tokens generated per minute, over the last MINUTES minutes. */
function perMinute(rows, now) {
  const requests = new Array(MINUTES).fill(0);
  const tokens = new Array(MINUTES).fill(0);
  const end = Math.floor(now / 60_000);
  for (const a of rows) {
    const slot = MINUTES - 1 - (end - Math.floor(a.finishedAt / 60_000));
    if (slot < 0 || slot >= MINUTES) continue;
    requests[slot] += 1;
    tokens[slot] += a.usage?.completionTokens ?? 0;
  }
  return { requests, tokensPerSecond: tokens.map((t) => t / 60) };
}

/** Requests waiting per model (on workers' queues and for loads), sampled on every fleet view: the page's own memory. */
const QUEUE_SAMPLES = 120;
const queueDepth = { at: [], series: {} };
function sampleQueues() {
  if (!state.fleet) return;
  const depth = {};
  for (const model of state.fleet.catalogue) depth[model.id] = 0;
  for (const worker of state.fleet.workers)
    for (const model of worker.models) depth[model.id] = (depth[model.id] ?? 0) + model.queued;
  for (const [model, count] of Object.entries(state.fleet.waiting ?? {})) depth[model] = (depth[model] ?? 0) + count;
  queueDepth.at.push(Date.now());
  for (const [model, count] of Object.entries(depth))
    (queueDepth.series[model] ??= new Array(queueDepth.at.length - 1).fill(0)).push(count);
  for (const [model, values] of Object.entries(queueDepth.series)) {
    if (values.length < queueDepth.at.length) values.push(0);
    if (values.length > QUEUE_SAMPLES) values.shift();
    // A model nobody queued for in the whole window is left off the chart.
    if (values.every((v) => v === 0) && values.length >= QUEUE_SAMPLES) delete queueDepth.series[model];
  }
  if (queueDepth.at.length > QUEUE_SAMPLES) queueDepth.at.shift();
  if (!$('#activity').hidden) drawQueue();
}
function drawQueue() {
  const shown = Object.fromEntries(Object.entries(queueDepth.series).filter(([, values]) => values.some((v) => v > 0)));
  drawLines($('#chart-queue'), shown, $('#queue-legend'));
}
setInterval(sampleQueues, 2_000);

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
        el(
          'td',
          { class: a.status >= 400 || a.errorCode ? 'status-bad' : '' },
          `${a.status}${a.finishReason ? ` ${a.finishReason}` : ''}`,
        ),
        el('td', { class: 'num' }, String(a.usage?.promptTokens ?? '–')),
        el(
          'td',
          {
            class: 'num',
            title: a.usage?.restoredPromptTokens
              ? `${a.usage.restoredPromptTokens} restored from the prompt cache`
              : undefined,
          },
          a.usage ? `${a.usage.cachedPromptTokens}${a.usage.restoredPromptTokens ? ' ↺' : ''}` : '–',
        ),
        el('td', { class: 'num' }, String(a.usage?.completionTokens ?? '–')),
        el('td', { class: 'num' }, ms(a.timings?.ttftMs)),
        el('td', { class: 'num' }, a.timings ? a.timings.decodeTokensPerSecond.toFixed(1) : '–'),
        el('td', { class: 'num' }, ms(a.durationMs)),
        el('td', { class: 'status-bad error' }, a.errorCode ?? ''),
      ),
    ),
  );
  if (!rows.length) body.append(el('tr', {}, el('td', { colspan: 12, class: 'muted' }, 'No requests yet.')));
  if (!$('#activity').hidden) {
    const minutes = perMinute(filtered(), Date.now());
    drawChart($('#chart-rpm'), minutes.requests);
    drawChart(
      $('#chart-tps'),
      minutes.tokensPerSecond,
      getComputedStyle(document.documentElement).getPropertyValue('--ok'),
    );
    drawChart(
      $('#chart-ttft'),
      filtered()
        .slice(-60)
        .map((a) => a.timings?.ttftMs ?? NaN),
      getComputedStyle(document.documentElement).getPropertyValue('--load'),
    );
    drawQueue();
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
    if (
      times.length >= 3 &&
      state.timeline.some((e) => e.kind === 'unloaded' && e.model === entry.model && e.detail !== 'admin')
    )
      marked.add(entry.model);
  }
  return marked;
}

function renderTimeline() {
  const marked = thrashing();
  const words = {
    loaded: 'loaded on',
    unloaded: 'unloaded from',
    load_failed: 'failed to load on',
    worker_up: 'up',
    worker_down: 'down',
  };
  $('#timeline').replaceChildren(
    ...state.timeline
      .slice()
      .reverse()
      .map((e) =>
        el(
          'li',
          { 'data-test': 'timeline-entry', 'data-kind': e.kind },
          `${clock(e.at)}  `,
          e.model
            ? `${e.model} ${words[e.kind]} ${e.workerId}`
            : `worker ${e.workerId} ${e.detail === 'left' ? 'left' : words[e.kind]}`,
          e.detail && e.detail !== 'left' ? ` (${e.detail})` : '',
          e.model && marked.has(e.model)
            ? el(
                'span',
                { class: 'thrash', title: 'loaded 3 or more times in 10 minutes with evictions between' },
                '  ⟲ swapping repeatedly',
              )
            : '',
        ),
      ),
  );
  if (!state.timeline.length) $('#timeline').append(el('li', { class: 'muted' }, 'No loads or evictions yet.'));
}

/** The fleet's verdict in the header, as GET /health gives it; its reasons and unservable models on hover. */
function renderHealth() {
  const badge = $('#health');
  const health = state.health;
  badge.hidden = !health;
  if (!health) return;
  badge.className = `health ${health.status}`;
  badge.textContent = health.status;
  const unservable = health.unservable.length ? [`cannot be served: ${health.unservable.join(', ')}`] : [];
  const lines = [...health.reasons, ...unservable];
  badge.title = lines.length ? lines.join('\n') : 'every worker up; every model can be served';
}

// ---- feed -------------------------------------------------------------------------------------
function applySnapshot(snapshot) {
  state.title = snapshot.title;
  state.fleet = snapshot.fleet;
  state.fleetError = snapshot.fleetError;
  state.health = snapshot.health;
  state.loads = new Map(snapshot.loads.map((l) => [`${l.workerId}/${l.model}`, l]));
  state.live = snapshot.live;
  state.liveReceived = performance.now();
  state.activity = snapshot.activity;
  state.activitySource = snapshot.activitySource;
  state.activityNote = snapshot.activityNote;
  state.timeline = snapshot.timeline;
  // The fleet's name after the product's; none when the title is the product's name (see consoleHeading).
  $('#title').textContent = snapshot.title;
  $('#title').hidden = !snapshot.title;
  renderHealth();
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
    render(renderFleet);
    sampleQueues();
  });
  on('health', (health) => {
    state.health = health;
    renderHealth();
  });
  on('fleet_error', ({ message }) => {
    state.fleetError = message;
    render(renderFleet);
  });
  on('load', (load) => {
    state.loads.set(`${load.workerId}/${load.model}`, load);
    render(renderFleet);
  });
  on('loads', (loads) => {
    state.loads = new Map(loads.map((l) => [`${l.workerId}/${l.model}`, l]));
    render(renderFleet);
  });
  on('live', ({ rows }) => {
    state.live = rows;
    state.liveReceived = performance.now();
    render(renderLive);
  });
  on('finished', (event) => {
    state.activity.push(event);
    if (state.activity.length > 200) state.activity.shift();
    render(renderActivity);
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
  function: {
    name: 'get_weather',
    description: 'The weather in a city',
    parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
  },
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
  const body = {
    model,
    stream: true,
    stream_options: { include_usage: true },
    max_tokens: Number($('#chat-max').value) || 256,
    messages: [{ role: 'user', content: text }],
  };
  if ($('#chat-tools').checked) body.tools = [WEATHER_TOOL];
  chatAbort = new AbortController();
  $('#chat-send').disabled = true;
  $('#chat-stop').disabled = false;
  const started = performance.now();
  const toolCalls = [];
  try {
    const response = await fetch('/v1/chat/completions', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(body),
      signal: chatAbort.signal,
    });
    if (!response.ok)
      throw new Error((await response.json().catch(() => null))?.error?.message ?? `HTTP ${response.status}`);
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
          const known =
            toolCalls[call.index] ??
            (toolCalls[call.index] = {
              name: '',
              arguments: '',
              node: calls.appendChild(el('div', { class: 'tool-call', 'data-test': 'chat-tool-call' })),
            });
          if (call.function?.name) known.name += call.function.name;
          if (call.function?.arguments) known.arguments += call.function.arguments;
          known.node.textContent = `call ${known.name}(${known.arguments})`;
        }
      }
    }
    const seconds = (performance.now() - started) / 1000;
    $('#chat-stats').textContent = usage
      ? `${usage.prompt_tokens} prompt · ${usage.completion_tokens} generated · ${seconds.toFixed(2)} s`
      : `${seconds.toFixed(2)} s`;
  } catch (error) {
    answer.append(
      el('span', { class: 'status-bad' }, error.name === 'AbortError' ? ' [stopped]' : ` [${error.message}]`),
    );
  } finally {
    $('#chat-send').disabled = false;
    $('#chat-stop').disabled = true;
    chatAbort = null;
  }
});

// ---- playground: embeddings and rerank -------------------------------------------------------
$('#play-mode').addEventListener('change', (event) => {
  const mode = event.currentTarget.value;
  $('#chat-form').hidden = mode !== 'chat';
  $('#chat-log').hidden = mode !== 'chat';
  $('#embed-form').hidden = mode !== 'embeddings';
  $('#rerank-form').hidden = mode !== 'rerank';
});

const lines = (text) =>
  text
    .split('\n')
    .map((line) => line.trim())
    .filter(Boolean);

function cosine(a, b) {
  let dot = 0;
  let na = 0;
  let nb = 0;
  for (let i = 0; i < a.length; i++) {
    dot += a[i] * b[i];
    na += a[i] * a[i];
    nb += b[i] * b[i];
  }
  return na && nb ? dot / Math.sqrt(na * nb) : 0;
}

$('#embed-form').addEventListener('submit', async (event) => {
  event.preventDefault();
  const input = lines($('#embed-input').value);
  const result = $('#embed-result');
  if (!input.length) return;
  $('#embed-send').disabled = true;
  const started = performance.now();
  try {
    const answer = await request('/v1/embeddings', { model: $('#embed-model').value, input });
    const vectors = answer.data.map((d) => d.embedding);
    $('#embed-stats').textContent =
      `${vectors.length} vectors of ${vectors[0]?.length ?? 0} dimensions · ${answer.usage?.prompt_tokens ?? '?'} tokens · ${((performance.now() - started) / 1000).toFixed(2)} s`;
    // Cosine similarity of every pair: what an embedding is for.
    result.replaceChildren(
      el(
        'table',
        { class: 'grid', 'data-test': 'embed-similarity' },
        el(
          'thead',
          {},
          el('tr', {}, el('th', {}, 'cosine'), ...input.map((_, j) => el('th', { class: 'num' }, `#${j + 1}`))),
        ),
        el(
          'tbody',
          {},
          input.map((text, i) =>
            el(
              'tr',
              {},
              el('td', { class: 'wrap' }, `#${i + 1} ${text}`),
              ...vectors.map((v, j) =>
                el('td', { class: 'num', 'data-test': `sim-${i}-${j}` }, cosine(vectors[i], v).toFixed(3)),
              ),
            ),
          ),
        ),
      ),
    );
  } catch (error) {
    result.replaceChildren(el('p', { class: 'status-bad' }, error.message));
  } finally {
    $('#embed-send').disabled = false;
  }
});

$('#rerank-form').addEventListener('submit', async (event) => {
  event.preventDefault();
  const documents = lines($('#rerank-docs').value);
  const result = $('#rerank-result');
  if (!documents.length) return;
  $('#rerank-send').disabled = true;
  const started = performance.now();
  try {
    const answer = await request('/v1/rerank', {
      model: $('#rerank-model').value,
      query: $('#rerank-query').value,
      documents,
    });
    $('#rerank-stats').textContent =
      `${answer.results.length} documents ranked · ${((performance.now() - started) / 1000).toFixed(2)} s`;
    result.replaceChildren(
      el(
        'ol',
        { class: 'ranked' },
        answer.results.map((r) =>
          el(
            'li',
            { 'data-test': 'rerank-row', 'data-index': r.index },
            el('code', {}, r.relevance_score.toFixed(3)),
            ' ',
            documents[r.index],
          ),
        ),
      ),
    );
  } catch (error) {
    result.replaceChildren(el('p', { class: 'status-bad' }, error.message));
  } finally {
    $('#rerank-send').disabled = false;
  }
});

// ---- keys and usage ---------------------------------------------------------------------------
function describeLimits(limits) {
  const parts = [];
  if (limits.requests_per_minute !== undefined) parts.push(`${limits.requests_per_minute} req/min`);
  if (limits.tokens_per_minute !== undefined) parts.push(`${limits.tokens_per_minute} tok/min`);
  if (limits.concurrent_requests !== undefined) parts.push(`${limits.concurrent_requests} at once`);
  if (limits.token_budget)
    parts.push(
      `${limits.token_budget.tokens} tokens ${limits.token_budget.window === 'balance' ? 'in all' : `a ${limits.token_budget.window}`}`,
    );
  if (limits.money_budget)
    parts.push(
      `${limits.money_budget.amount}${currency ? ` ${currency}` : ''} ${limits.money_budget.window === 'balance' ? 'in all' : `a ${limits.money_budget.window}`}`,
    );
  return parts.join(', ') || 'no limits';
}

/** billing.currency, as the usage answers name it. */
let currency = '';
/** An amount of money as the budgets count it (to the billionth), without trailing zeros past the cents. */
function money(amount) {
  const fixed = (amount ?? 0).toFixed(9).replace(/0+$/, '');
  return fixed.endsWith('.') ? `${fixed}00` : fixed.replace(/\.\d$/, (cents) => `${cents}0`);
}

/** A money budget's "spent (with what running requests reserve) / limit currency", marked from 80% like `use`. */
function moneyUse(shown, limit) {
  const used = (shown?.spent ?? 0) + (shown?.reserved ?? 0);
  const high = used / limit >= 0.8;
  return el(
    'span',
    { class: `use${high ? ' high' : ''}`, 'data-test': 'money-budget' },
    `${money(used)} / ${money(limit)} ${shown?.currency ?? currency}`,
  );
}

/** "value / limit", marked when at least 80% of the limit is used (`left`: the value is what remains). */
function use(value, limit, test, left = false) {
  if (limit === undefined || limit === null)
    return el(
      'span',
      { class: 'muted', 'data-test': test },
      value === null || value === undefined ? '–' : String(value),
    );
  const used = left ? limit - value : value;
  const high = limit > 0 && used / limit >= 0.8;
  return el('span', { class: `use${high ? ' high' : ''}`, 'data-test': test }, `${value} / ${limit}`);
}

let keysLoading = null;
function loadKeys() {
  keysLoading ??= (async () => {
    try {
      const [keys, accounts, byKey, byAccount] = await Promise.all([
        request('/admin/keys'),
        request('/admin/accounts'),
        request('/admin/usage?group_by=key'),
        request('/admin/usage?group_by=account'),
      ]);
      // Use against limits, read where the limits are kept (as `cortex keys show` does); the first 100 keys.
      const shown = keys.data.slice(0, 100);
      const details = await Promise.all(
        shown.map((k) => request(`/admin/keys/${encodeURIComponent(k.id)}`).catch(() => null)),
      );
      currency = byKey.currency ?? '';
      renderKeys(shown, details, accounts.data, byKey.data, byAccount.data);
      $('#keys-note').textContent =
        `${keys.data.length} stored keys${keys.data.length > shown.length ? ` (the first ${shown.length} shown)` : ''} · read ${clock(Date.now())}; keys from the config file's auth.api_keys are not stored and not listed`;
    } catch (error) {
      $('#keys-note').textContent = `could not read keys: ${error.message}`;
    } finally {
      keysLoading = null;
    }
  })();
  return keysLoading;
}
$('#keys-refresh').addEventListener('click', () => void loadKeys());

function renderKeys(keys, details, accounts, byKey, byAccount) {
  const spentByKey = new Map(byKey.map((row) => [row.key_id, row]));
  const spentByAccount = new Map(byAccount.map((row) => [row.account, row]));
  $('#keys-table tbody').replaceChildren(
    ...keys.map((key, i) => {
      const usage = details[i]?.usage ?? {};
      const budget = key.limits.token_budget;
      const moneyBudget = key.limits.money_budget;
      const spent = spentByKey.get(key.id);
      return el(
        'tr',
        { 'data-test': 'key-row', 'data-key': key.id },
        el('td', {}, key.name, ' ', el('span', { class: 'muted small' }, key.prefix)),
        el('td', {}, key.account),
        el('td', {}, el('span', { class: `badge ${key.state === 'active' ? 'ready' : 'down'}` }, key.state)),
        el('td', { class: 'wrap' }, describeLimits(key.limits)),
        el(
          'td',
          { class: 'num' },
          use(
            usage.requests_remaining ?? key.limits.requests_per_minute,
            key.limits.requests_per_minute,
            'requests-left',
            true,
          ),
        ),
        el(
          'td',
          { class: 'num' },
          use(usage.concurrent_requests_running ?? 0, key.limits.concurrent_requests, 'running'),
        ),
        el(
          'td',
          { class: 'num' },
          budget
            ? use((usage.token_budget?.spent ?? 0) + (usage.token_budget?.reserved ?? 0), budget.tokens, 'budget')
            : el('span', { class: 'muted' }, '–'),
        ),
        el(
          'td',
          { class: 'num' },
          moneyBudget ? moneyUse(usage.money_budget, moneyBudget.amount) : el('span', { class: 'muted' }, '–'),
        ),
        el('td', { class: 'num', 'data-test': 'key-requests' }, String(spent?.requests ?? 0)),
        el('td', { class: 'num', 'data-test': 'key-tokens' }, String(spent?.total_tokens ?? 0)),
        el('td', { class: 'num', 'data-test': 'key-cost' }, `${money(spent?.cost)} ${currency}`),
      );
    }),
  );
  if (!keys.length)
    $('#keys-table tbody').append(
      el('tr', {}, el('td', { colspan: 11, class: 'muted' }, 'No stored keys (`cortex keys create` makes one).')),
    );
  const names = [...new Set([...accounts.map((a) => a.name), ...keys.map((k) => k.account)])].sort();
  const limitsOf = new Map(accounts.map((a) => [a.name, a.limits]));
  $('#accounts-table tbody').replaceChildren(
    ...names.map((name) => {
      const spent = spentByAccount.get(name);
      return el(
        'tr',
        { 'data-test': 'account-row', 'data-account': name },
        el('td', {}, name),
        el('td', { class: 'wrap' }, describeLimits(limitsOf.get(name) ?? {})),
        el('td', { class: 'num' }, String(keys.filter((k) => k.account === name).length)),
        el('td', { class: 'num' }, String(spent?.requests ?? 0)),
        el('td', { class: 'num', 'data-test': 'account-tokens' }, String(spent?.total_tokens ?? 0)),
        el('td', { class: 'num', 'data-test': 'account-cost' }, `${money(spent?.cost)} ${currency}`),
      );
    }),
  );
}

// Last: every view and its state exist by now.
showTab((window.location.hash || '#fleet').slice(1).replace(/[^a-z]/g, '') || 'fleet');
