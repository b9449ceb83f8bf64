// The lab page's platform view: the scenario of `tollgate simulate --modes`
// run by the server (/api/platform), shown per mode as the simulator reports
// it, with admitted per second per mode against the platform cap and the
// scale changes. Loaded after lab.js, whose helpers it uses.
'use strict';

const MODE_COLORS = { exact: '#0969da', leased: '#bf8700', shares: '#1a7f37', local: '#cf222e' };

// The modes ticked on the form, in the order shown.
function platformModes() {
  return [...document.querySelectorAll('#platform-modes input:checked')].map((c) => c.value);
}

async function runPlatform(query) {
  lab.query = query;
  lab.plan = { mode: 'platform', lanes: [] };
  lab.platform = null;
  lab.report = null;
  startButton.disabled = true;
  setStatus('running', 'Running the platform scenario on the server…');
  try {
    const view = await fetchJson(`/api/platform?${query}`);
    // A newer run started meanwhile: its answer is the one to show.
    if (lab.query !== query) return;
    lab.platform = view;
    showError('');
    showPlatform(view);
    setStatus('done', `Done: ${fmt(view.arrivals)} requests over ${fmt(view.seconds)} s simulated, ` +
      `every mode deciding each, in ${fmt(view.wall_seconds, 1)} s of wall time.`);
  } catch (e) {
    showError(e.message);
    setStatus('error', 'Fix the parameter above.');
  } finally {
    startButton.disabled = false;
  }
}

function showPlatform(view) {
  document.getElementById('platform-totals').textContent =
    `${fmt(view.arrivals)} requests offered; the exact limiter admitted ${fmt(view.exact_admitted)}. ` +
    `${fmt(view.decisions_per_second_simulated)} decisions per second simulated over all modes.`;
  const body = document.querySelector('#platform-table tbody');
  body.replaceChildren(...view.lanes.map((lane) => {
    const row = document.createElement('tr');
    row.dataset.mode = lane.mode;
    const cells = [
      ['mode', lane.mode, null],
      ['decisions', fmt(lane.decisions), lane.decisions],
      ['admitted', fmt(lane.admitted), lane.admitted],
      ['under_admission_pct', `${fmt(lane.under_admission_pct, 3)}%`, lane.under_admission_pct],
      ['over_admitted', fmt(lane.over_admitted), lane.over_admitted],
      ['worst_over_second', fmt(lane.worst_over_second), lane.worst_over_second],
      ['calls_per_decision', fmt(lane.calls_per_decision, 4), lane.calls_per_decision],
      ['calls_per_second', fmt(lane.calls_per_second), lane.calls_per_second],
      ['keys_per_call', fmt(lane.keys_per_call, 1), lane.keys_per_call],
      ['p99_wait_us', `${fmt(lane.p99_wait_us)} µs`, lane.p99_wait_us],
    ];
    cells.forEach(([name, text, value], c) => {
      const td = document.createElement(c === 0 ? 'th' : 'td');
      td.dataset.name = name;
      td.textContent = text;
      if (value !== null) td.dataset.value = value;
      if (name === 'over_admitted' && value > 0) td.className = 'over';
      row.append(td);
    });
    return row;
  }));
  const key = (color, text) => `<span class="key" style="background:${color}"></span>${text}`;
  const legend = document.getElementById('platform-legend');
  legend.innerHTML = 'Admitted per second:' +
    view.lanes.map((l) => key(MODE_COLORS[l.mode], l.mode)).join('') +
    (view.platform_rate ? key(COLORS.limit, 'platform cap') : '');
  drawPlatform(view);
}

function drawPlatform(view) {
  // Each second's count drawn at its middle.
  const seconds = Math.ceil(view.seconds);
  const x = Array.from({ length: seconds }, (_, k) => k + 0.5);
  const series = view.lanes.map((lane) => ({
    values: x.map((_, k) => lane.admitted_per_second[k] || 0),
    color: MODE_COLORS[lane.mode],
  }));
  if (view.platform_rate) {
    series.push({ values: x.map(() => view.platform_rate), color: COLORS.limit, dashed: true });
  }
  const marks = view.scale.map((s) => ({ x: s.at_s, label: `×${s.instances}` }));
  drawChart(document.querySelector('canvas[data-chart="platform"]'), x, series, seconds, marks);
}
