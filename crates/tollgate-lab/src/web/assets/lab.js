// The Tollgate lab page: parameters, the expectation, the SSE stream, the charts.
// Plain browser JavaScript, no build step; served from the tollgate binary.
'use strict';

const form = document.getElementById('params');
const statusLine = document.getElementById('status');
const errorLine = document.getElementById('error');
const startButton = document.getElementById('run-start');
const stopButton = document.getElementById('run-stop');
const LOG_ROWS = 200;
const COLORS = {
  admitted: '#1a7f37', rejected: '#cf222e', state: '#0969da', delay: '#8250df',
  limit: '#8250df', arrivals: '#8c959f',
};

// What the page knows about the current run; tests read it too.
const lab = window.lab = {
  fields: {}, plan: null, lanes: [], ticksReceived: 0, skipped: 0,
  report: null, state: 'idle', query: '', hasRedis: false, platform: null,
};
let source = null;
let drawPending = false;

function field(name) { return form.elements.namedItem(name); }

function setStatus(state, text) {
  lab.state = state;
  statusLine.dataset.state = state;
  statusLine.textContent = text;
}

function showError(message) {
  errorLine.textContent = message;
  errorLine.hidden = !message;
}

function mode() { return field('mode').value; }

function chosenAlgorithms() {
  if (mode() === 'compare') {
    return [...document.querySelectorAll('#algorithms input:checked')].map((c) => c.value);
  }
  return [field('algorithm').value];
}

// Shows the inputs that apply to the chosen mode, algorithms and traffic.
function updateVisibility() {
  const algorithms = chosenAlgorithms();
  const traffic = field('traffic').value;
  for (const el of form.querySelectorAll('[data-modes]')) {
    el.hidden = !el.dataset.modes.split(' ').includes(mode());
  }
  for (const el of form.querySelectorAll('[data-algorithms]')) {
    el.hidden = !el.dataset.algorithms.split(' ').some((a) => algorithms.includes(a));
  }
  for (const el of form.querySelectorAll('[data-traffic]')) {
    el.hidden = !el.dataset.traffic.split(' ').includes(traffic);
  }
  for (const el of form.querySelectorAll('[data-distribution]')) {
    el.hidden = el.dataset.distribution !== field('distribution').value;
  }
  // The platform view runs in memory only, and shows its own results.
  const platform = mode() === 'platform';
  document.getElementById('store-choice').hidden = !lab.hasRedis || platform;
  document.getElementById('platform').hidden = !platform;
  document.getElementById('run-results').hidden = platform;
  document.getElementById('sidecars-value').textContent = field('sidecars').value;
  document.getElementById('lease-value').textContent = field('lease_ms').value;
}

function isShown(el) {
  for (let node = el; node && node !== form; node = node.parentElement) {
    if (node.hidden) return false;
  }
  return true;
}

// The query string of the shown inputs, or an error naming the first bad field.
function buildQuery() {
  const params = new URLSearchParams();
  for (const el of form.querySelectorAll('input[name], select[name]')) {
    if (!isShown(el)) continue;
    if (el.type === 'file') continue;
    if (el.type === 'hidden' && el.value === '') {
      return { error: 'replay: upload a CSV of timestamps first' };
    }
    if (el.type === 'number' && !el.checkValidity()) {
      const f = lab.fields[el.name];
      const range = f ? ` (${f.min} to ${f.max}${f.fractional ? '' : ', whole numbers'})` : '';
      return { error: `${el.name}: ${el.value === '' ? 'is empty' : `${el.value} is out of range`}${range}` };
    }
    params.set(el.name, el.value);
  }
  if (mode() === 'compare') params.set('algorithms', chosenAlgorithms().join(','));
  if (mode() === 'platform') params.set('modes', platformModes().join(','));
  return { query: params.toString() };
}

async function fetchJson(url) {
  const response = await fetch(url);
  const body = await response.json().catch(() => ({ error: `HTTP ${response.status}` }));
  if (!response.ok) throw new Error(body.error || `HTTP ${response.status}`);
  return body;
}

const fmt = (n, digits = 0) => (n === null || n === undefined || Number.isNaN(n)) ? '' :
  Number(n).toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits });
const pct = (x) => `${fmt(x * 100, 1)}%`;

// Fills the summary's expected columns from a plan.
function showPlan(plan) {
  const body = document.querySelector('#summary tbody');
  body.replaceChildren();
  const explanations = document.getElementById('explanations');
  explanations.replaceChildren();
  plan.lanes.forEach((lane, i) => {
    const e = lane.expectation;
    const row = document.createElement('tr');
    row.dataset.lane = i;
    const cells = [lane.label, fmt(e.expected_arrivals), fmt(e.ceiling), fmt(e.expected_admitted),
      pct(e.acceptance_rate), '', '', '', ''];
    const names = ['label', 'expected_arrivals', 'ceiling', 'expected_admitted', 'expected_acceptance',
      'arrivals', 'admitted', 'rejected', 'acceptance'];
    cells.forEach((text, c) => {
      const td = document.createElement(c === 0 ? 'th' : 'td');
      td.textContent = text;
      td.dataset.name = names[c];
      row.append(td);
    });
    body.append(row);
    const li = document.createElement('li');
    li.textContent = `${lane.label} (${lane.description}): ${e.explanation}`;
    explanations.append(li);
  });
  const storm = document.getElementById('storm');
  storm.hidden = plan.mode !== 'storm';
  document.querySelector('#storm-table tbody').replaceChildren();
  const fleet = document.getElementById('fleet');
  fleet.hidden = plan.mode !== 'fleet';
  if (plan.mode === 'fleet') {
    const [local, global] = plan.lanes;
    document.getElementById('fleet-configured').textContent = `${fmt(local.expectation.configured_rate, 2)} req/s`;
    document.getElementById('fleet-local-cap').textContent =
      `${fmt(local.expectation.effective_rate, 2)} req/s (cap × ${local.sidecars})`;
    document.getElementById('fleet-global-cap').textContent = `${fmt(global.expectation.effective_rate, 2)} req/s`;
    for (const id of ['fleet-local-rate', 'fleet-global-rate', 'fleet-leased-rate', 'fleet-leased-calls', 'fleet-leased-units',
      'fleet-quota-rate', 'fleet-quota-reports']) {
      document.getElementById(id).textContent = '';
    }
  }
}

function showReport(report) {
  report.lanes.forEach((lane, i) => {
    const row = document.querySelector(`#summary tr[data-lane="${i}"]`);
    if (!row) return;
    const set = (name, text, value) => {
      const cell = row.querySelector(`[data-name="${name}"]`);
      cell.textContent = text;
      cell.dataset.value = value;
    };
    set('arrivals', fmt(lane.arrivals), lane.arrivals);
    set('admitted', fmt(lane.admitted), lane.admitted);
    set('rejected', fmt(lane.denied + lane.exceeded), lane.denied + lane.exceeded);
    set('acceptance', pct(lane.acceptance_rate), lane.acceptance_rate);
  });
  if (lab.plan && lab.plan.mode === 'storm') {
    const body = document.querySelector('#storm-table tbody');
    body.replaceChildren(...report.lanes.map((lane) => {
      const row = document.createElement('tr');
      row.dataset.lane = lane.label;
      for (const [name, value] of [['label', lane.label], ['load', lane.arrivals], ['retries', lane.retries],
        ['dropped', lane.dropped_by_clients], ['gave_up', lane.gave_up], ['admitted', lane.admitted]]) {
        const td = document.createElement('td');
        td.dataset.name = name;
        td.textContent = typeof value === 'number' ? fmt(value) : value;
        if (typeof value === 'number') td.dataset.value = value;
        row.append(td);
      }
      return row;
    }));
  }
  if (lab.plan && lab.plan.mode === 'fleet') {
    document.getElementById('fleet-local-rate').textContent = `${fmt(report.lanes[0].admitted_rate, 2)} req/s`;
    document.getElementById('fleet-global-rate').textContent = `${fmt(report.lanes[1].admitted_rate, 2)} req/s`;
    const leased = report.lanes[2];
    if (leased) {
      document.getElementById('fleet-leased-rate').textContent = `${fmt(leased.admitted_rate, 2)} req/s`;
      const perDecision = leased.arrivals ? leased.store_calls / leased.arrivals : 0;
      document.getElementById('fleet-leased-calls').textContent = `1 / ${fmt(perDecision, 3)}`;
    }
    const quota = report.lanes[3];
    if (quota) {
      document.getElementById('fleet-quota-rate').textContent = `${fmt(quota.admitted_rate, 2)} req/s`;
      document.getElementById('fleet-quota-reports').textContent = fmt(quota.reports);
    }
  }
}

// Fetches the expectation for the current inputs (also the server's check of them).
let expectTimer = null;
function refreshExpectation() {
  clearTimeout(expectTimer);
  expectTimer = setTimeout(async () => {
    updateVisibility();
    const { query, error } = buildQuery();
    if (error) { showError(error); return; }
    // A platform run is checked when it starts (checking it is running it).
    if (mode() === 'platform') { showError(''); return; }
    try {
      const plan = await fetchJson(`/api/expect?${query}`);
      // Keep the figures of the run on screen while its parameters are unchanged.
      if (lab.state === 'running' || query === lab.query) return;
      showError('');
      showPlan(plan);
    } catch (e) {
      showError(e.message);
    }
  }, 150);
}

function laneElement(lane, i) {
  const div = document.createElement('div');
  div.className = 'lane';
  div.dataset.lane = i;
  const chart = (name, caption, keys) => `<figure><figcaption>${caption} ${keys}</figcaption>
    <canvas data-chart="${name}" data-points="0" width="600" height="150"></canvas></figure>`;
  const key = (color, text) => `<span class="key" style="background:${color}"></span>${text}`;
  div.innerHTML = `<h3></h3><p></p>
    ${chart('rates', 'Per tick:', key(COLORS.admitted, 'admitted') + key(COLORS.rejected, 'rejected'))}
    ${chart('state', 'State:', key(COLORS.state, '<span class="meaning"></span>') + key(COLORS.limit, 'limit'))}
    ${lane.shaper ? chart('delay', 'Shaper:', key(COLORS.delay, 'longest delay given in the tick (s)')) : ''}
    ${chart('cumulative', 'Cumulative:', key(COLORS.admitted, 'admitted') + key(COLORS.limit, 'ceiling') + key(COLORS.arrivals, 'arrivals'))}`;
  div.querySelector('h3').textContent = lane.label;
  div.querySelector('p').textContent = lane.description;
  // What the state line reads, and whose: one client's key (averaged over a fleet's sidecars).
  div.querySelector('.meaning').textContent = `${lane.state_meaning} — ${lane.state_of}`;
  return div;
}

function startRun(event) {
  if (event) event.preventDefault();
  clearTimeout(expectTimer);
  stopRun('stopped');
  updateVisibility();
  const { query, error } = buildQuery();
  if (error) { showError(error); setStatus('error', 'Fix the parameter above.'); return; }
  if (mode() === 'platform') { runPlatform(query); return; }
  fetchJson(`/api/expect?${query}`).then((plan) => {
    showError('');
    open(query, plan);
  }, (e) => {
    showError(e.message);
    setStatus('error', 'Fix the parameter above.');
  });
}

function open(query, plan) {
  lab.query = query;
  lab.plan = plan;
  lab.report = null;
  lab.ticksReceived = 0;
  lab.skipped = 0;
  lab.lanes = plan.lanes.map(() => ({ x: [], admitted: [], rejected: [], state: [], delay: [], cumAdmitted: [], cumArrivals: [] }));
  showPlan(plan);
  document.querySelector('#log tbody').replaceChildren();
  document.getElementById('lanes').replaceChildren(...plan.lanes.map(laneElement));
  setStatus('running', 'Running…');
  startButton.disabled = true;
  stopButton.disabled = false;
  source = new EventSource(`/api/run?${query}`);
  source.addEventListener('tick', (e) => onTick(JSON.parse(e.data)));
  source.addEventListener('end', (e) => onEnd(JSON.parse(e.data)));
  source.addEventListener('failed', (e) => {
    stopRun('error');
    setStatus('error', JSON.parse(e.data).error);
  });
  source.addEventListener('error', () => {
    if (lab.state === 'running') {
      stopRun('error');
      setStatus('error', 'The stream broke off (is the lab still running?).');
    }
  });
}

function stopRun(state) {
  if (source) { source.close(); source = null; }
  startButton.disabled = false;
  stopButton.disabled = true;
  if (state === 'stopped' && lab.state === 'running') setStatus('stopped', 'Stopped.');
}

function onTick(tick) {
  lab.ticksReceived += 1;
  lab.skipped = tick.skipped;
  const seconds = tick.end_ns / 1e9;
  tick.lanes.forEach((t, i) => {
    const lane = lab.lanes[i];
    lane.x.push(seconds);
    lane.admitted.push(t.admitted);
    lane.rejected.push(t.denied + t.exceeded);
    lane.state.push(t.state_level);
    lane.delay.push(t.max_delay_ns / 1e9);
    lane.cumAdmitted.push(t.total.admitted);
    lane.cumArrivals.push(t.total.arrivals);
  });
  const leased = tick.lanes[2];
  if (lab.plan.mode === 'fleet' && leased && leased.leased_units !== undefined) {
    document.getElementById('fleet-leased-units').textContent = fmt(leased.leased_units);
  }
  logSamples(tick);
  setStatus('running', `Running… ${fmt(seconds, 1)} s of ${fmt(lab.plan.duration_ns / 1e9, 1)} s` +
    (tick.skipped ? ` (${tick.skipped} ticks skipped to keep up)` : ''));
  scheduleDraw();
}

function onEnd(end) {
  lab.report = end.report;
  lab.skipped = end.skipped;
  stopRun('done');
  showReport(end.report);
  setStatus('done', `Done: ${fmt(end.report.arrivals)} requests in ${end.report.ticks} ticks` +
    (end.skipped ? `, ${end.skipped} ticks skipped by the display` : '') + '.');
  scheduleDraw();
}

function logSamples(tick) {
  const body = document.querySelector('#log tbody');
  const rows = [];
  tick.lanes.forEach((t, i) => {
    for (const d of t.samples) {
      const row = document.createElement('tr');
      const cells = [lab.plan.lanes[i].label, fmt(d.offset_ns / 1e9, 3), d.client, d.sidecar, d.outcome,
        d.remaining, d.retry_after_ns === null ? '' : `${fmt(d.retry_after_ns / 1e9, 3)} s`,
        d.delay_ns ? `${fmt(d.delay_ns / 1e9, 3)} s` : ''];
      cells.forEach((text, c) => {
        const td = document.createElement('td');
        td.textContent = text;
        if (c === 4) td.className = d.outcome;
        row.append(td);
      });
      rows.push(row);
    }
  });
  body.prepend(...rows.reverse());
  while (body.rows.length > LOG_ROWS) body.deleteRow(-1);
}

function scheduleDraw() {
  if (drawPending) return;
  drawPending = true;
  requestAnimationFrame(() => { drawPending = false; drawAll(); });
}

function drawAll() {
  if (!lab.plan) return;
  const duration = lab.plan.duration_ns / 1e9;
  lab.plan.lanes.forEach((plan, i) => {
    const lane = lab.lanes[i];
    const panel = document.querySelector(`.lane[data-lane="${i}"]`);
    if (!panel) return;
    const e = plan.expectation;
    const copies = lab.plan.clients * plan.sidecars;
    drawChart(panel.querySelector('[data-chart="rates"]'), lane.x, [
      { values: lane.admitted, color: COLORS.admitted },
      { values: lane.rejected, color: COLORS.rejected },
    ], duration);
    drawChart(panel.querySelector('[data-chart="state"]'), lane.x, [
      { values: lane.state, color: COLORS.state },
      { values: lane.x.map(() => plan.limit), color: COLORS.limit, dashed: true },
    ], duration);
    if (plan.shaper) {
      drawChart(panel.querySelector('[data-chart="delay"]'), lane.x, [
        { values: lane.delay, color: COLORS.delay },
      ], duration);
    }
    const ceiling = lane.x.map((t) => Math.min(e.ceiling, copies * (e.initial_allowance + e.configured_rate * t)));
    drawChart(panel.querySelector('[data-chart="cumulative"]'), lane.x, [
      { values: lane.cumArrivals, color: COLORS.arrivals },
      { values: ceiling, color: COLORS.limit, dashed: true },
      { values: lane.cumAdmitted, color: COLORS.admitted },
    ], duration);
  });
}

// The smallest round value at or above v whose quarters are round too (the axis has four steps).
function niceCeiling(v) {
  const power = 10 ** Math.floor(Math.log10(v));
  for (const m of [1, 1.2, 1.6, 2, 2.4, 3.2, 4, 6, 8, 10]) if (m * power >= v) return m * power;
  return 10 * power;
}

// Draws lines over x in [0, xMax] on a canvas, with a y axis from 0, and
// labelled vertical marks at marks[k].x.
function drawChart(canvas, x, series, xMax, marks = []) {
  // Draw at the size the canvas is shown, so text is not stretched.
  if (canvas.clientWidth > 0 && canvas.width !== canvas.clientWidth) {
    canvas.width = canvas.clientWidth;
    canvas.height = canvas.clientHeight;
  }
  const ctx = canvas.getContext('2d');
  const w = canvas.width;
  const h = canvas.height;
  const left = 48;
  const bottom = 18;
  ctx.clearRect(0, 0, w, h);
  let yMax = 1;
  for (const s of series) for (const v of s.values) if (v > yMax) yMax = v;
  yMax = niceCeiling(yMax * 1.05);
  ctx.font = '11px system-ui, sans-serif';
  ctx.fillStyle = '#59636e';
  ctx.strokeStyle = '#d1d9e0';
  ctx.lineWidth = 1;
  for (let k = 0; k <= 4; k++) {
    const y = (h - bottom) * (1 - k / 4);
    ctx.beginPath(); ctx.moveTo(left, y + 0.5); ctx.lineTo(w, y + 0.5); ctx.stroke();
    ctx.fillText(fmt((yMax * k) / 4, yMax < 10 ? 1 : 0), 2, Math.max(10, y - 2));
  }
  for (let k = 0; k <= 4; k++) {
    const px = left + ((w - left - 4) * k) / 4;
    ctx.fillText(`${fmt((xMax * k) / 4, xMax < 10 ? 1 : 0)} s`, Math.min(px, w - 30), h - 4);
  }
  const sx = (t) => left + ((w - left - 4) * t) / xMax;
  const sy = (v) => (h - bottom) * (1 - v / yMax);
  for (const s of series) {
    ctx.strokeStyle = s.color;
    ctx.lineWidth = 1.6;
    ctx.setLineDash(s.dashed ? [5, 4] : []);
    ctx.beginPath();
    s.values.forEach((v, k) => { if (k === 0) ctx.moveTo(sx(x[k]), sy(v)); else ctx.lineTo(sx(x[k]), sy(v)); });
    ctx.stroke();
  }
  ctx.strokeStyle = COLORS.arrivals;
  ctx.fillStyle = COLORS.arrivals;
  ctx.lineWidth = 1;
  ctx.setLineDash([2, 3]);
  for (const m of marks) {
    ctx.beginPath(); ctx.moveTo(sx(m.x), 0); ctx.lineTo(sx(m.x), h - bottom); ctx.stroke();
    ctx.fillText(m.label, Math.min(sx(m.x) + 3, w - 40), 12);
  }
  ctx.setLineDash([]);
  canvas.dataset.points = String(x.length);
  canvas.dataset.marks = String(marks.length);
}

// Sets the inputs' ranges and defaults from the server, then any values in the page's URL.
async function init() {
  const { fields, platform_fields: platformFields, stores } = await fetchJson('/api/fields');
  // Started with --redis: runs may choose Redis (the default) or memory.
  lab.hasRedis = (stores || []).includes('redis');
  for (const f of [...fields, ...platformFields]) {
    lab.fields[f.name] = f;
    for (const el of form.querySelectorAll(`[name="${f.name}"]`)) {
      el.min = f.min;
      el.max = f.max;
      el.step = f.fractional ? 'any' : '1';
      el.required = true;
      if (el.type !== 'hidden') el.value = f.default;
    }
  }
  const given = new URLSearchParams(location.search);
  for (const [name, value] of given) {
    if (name === 'algorithms') {
      const names = value.split(',');
      for (const c of document.querySelectorAll('#algorithms input')) c.checked = names.includes(c.value);
    } else if (name === 'modes') {
      const names = value.split(',');
      for (const c of document.querySelectorAll('#platform-modes input')) c.checked = names.includes(c.value);
    } else if (field(name) && name !== 'autostart') {
      field(name).value = value;
    }
  }
  updateVisibility();
  refreshExpectation();
  if (given.get('autostart') === '1') startRun();
}

// Uploads a CSV of timestamps; the trace's id then rides in the query as replay=ID.
async function uploadReplay(file) {
  const info = document.getElementById('replay-info');
  try {
    const response = await fetch('/api/replays', { method: 'POST', body: await file.text() });
    const body = await response.json().catch(() => ({ error: `replay: HTTP ${response.status} (is the file too large?)` }));
    if (!response.ok) throw new Error(body.error);
    field('replay').value = body.id;
    const spanMs = Math.ceil(body.span_ns / 1e6);
    const duration = field('duration_ms');
    duration.value = Math.min(Number(duration.max), Math.max(Number(duration.min), spanMs));
    info.textContent = `${file.name}: ${fmt(body.len)} timestamps over ${fmt(body.span_ns / 1e9, 1)} s (trace ${body.id}).`;
    showError('');
    refreshExpectation();
  } catch (e) {
    field('replay').value = '';
    showError(e.message);
  }
}

document.getElementById('replay-file').addEventListener('change', (e) => {
  if (e.target.files.length) uploadReplay(e.target.files[0]);
});
form.addEventListener('submit', startRun);
form.addEventListener('input', (e) => {
  updateVisibility();
  // In fleet mode the sidecar and lease sliders rerun, so the drift shows as they change.
  if ((e.target.name === 'sidecars' || e.target.name === 'lease_ms') && lab.plan && lab.plan.mode === 'fleet' && lab.state !== 'idle') {
    startRun();
  } else if (lab.state !== 'running') {
    refreshExpectation();
  }
});
form.addEventListener('change', () => { if (lab.state !== 'running') refreshExpectation(); });
stopButton.addEventListener('click', () => stopRun('stopped'));
init().catch((e) => showError(`cannot load the lab's fields: ${e.message}`));
