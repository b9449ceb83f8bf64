// Drives the tollgate lab page in headless Chromium and checks what a person would see.
//
// Usage: node tests/browser/lab.mjs URL SCREENSHOT_PATH
//
// Opens the page, checks that an out-of-range input gets a message naming the
// field, starts a compare run, waits for data and for the end, asserts that
// every chart received points and that the summary table shows the server's
// own figures (fetched from /api/summary with the same parameters), saves a
// screenshot, runs a shaper and checks its delay chart and the state line's
// legend (whose key it reads), runs the fleet (local, global and leased lanes)
// and checks the leased lane's figures, runs a retry storm and checks its
// table against the server, uploads a CSV trace from the page and replays it, then runs the
// platform view (every mode on the simulator's platform scenario) and checks its table. Exits
// non-zero with a message on the first failure.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium } from 'playwright-core';

const [url, screenshotPath] = process.argv.slice(2);
if (!url || !screenshotPath) {
  console.error('usage: node lab.mjs URL SCREENSHOT_PATH');
  process.exit(2);
}

const userDataDir = mkdtempSync(join(tmpdir(), 'tollgate-lab-chromium-'));
const executablePath = process.env.CHROMIUM || '/usr/bin/chromium';
const TIMEOUT = 30_000;

function check(condition, message) {
  if (!condition) throw new Error(message);
}

let context;
try {
  context = await chromium.launchPersistentContext(userDataDir, {
    executablePath,
    headless: true,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking',
      '--disable-component-update', '--disable-sync', '--no-first-run'],
    viewport: { width: 1400, height: 1100 },
  });
  const page = context.pages()[0] || await context.newPage();
  page.setDefaultTimeout(TIMEOUT);
  const consoleErrors = [];
  page.on('console', (m) => { if (m.type() === 'error') consoleErrors.push(m.text()); });
  page.on('pageerror', (e) => consoleErrors.push(e.message));

  await page.goto(url);
  // The inputs carry the server's ranges.
  await page.waitForFunction(() => document.querySelector('input[name=sidecars]').max === '15');

  // An out-of-range value is refused with a message naming the field.
  await page.fill('input[name=max_tokens]', '0');
  await page.click('#run-start');
  await page.waitForFunction(() => !document.getElementById('error').hidden);
  const error = await page.textContent('#error');
  check(error.startsWith('max_tokens:'), `the error names the field: ${error}`);
  check(await page.getAttribute('#status', 'data-state') === 'error', 'no run starts with a bad value');
  await page.fill('input[name=max_tokens]', '10');

  // A compare run: the fixed window's edge against the sliding ones, played fast.
  await page.selectOption('select[name=mode]', 'compare');
  await page.fill('input[name=limit]', '20');
  await page.fill('input[name=window_ms]', '2000');
  await page.selectOption('select[name=traffic]', 'poisson');
  await page.fill('input[name=arrival_rate]', '30');
  await page.fill('input[name=duration_ms]', '20000');
  await page.fill('input[name=speed]', '40');
  await page.fill('input[name=seed]', '5');
  await page.click('#run-start');
  await page.waitForFunction(() => window.lab.ticksReceived > 0);
  await page.waitForFunction(() => window.lab.state === 'done', null, { timeout: TIMEOUT });
  const errorShown = await page.isVisible('#error');
  check(!errorShown, `no error after the run: ${await page.textContent('#error')}`);

  // Every chart of every lane drew points.
  const points = await page.$$eval('#lanes canvas[data-chart]', (cs) => cs.map((c) => Number(c.dataset.points)));
  check(points.length === 9, `three charts for each of three lanes, got ${points.length}`);
  check(points.every((n) => n > 0), `every chart has points: ${points}`);
  const logRows = await page.$$eval('#log tbody tr', (rows) => rows.length);
  check(logRows > 0, 'the decision log has rows');

  // The summary shows the server's figures for the same parameters.
  const query = await page.evaluate(() => window.lab.query);
  const summary = await page.evaluate(async (q) => (await fetch(`/api/summary?${q}`)).json(), query);
  const shown = await page.$$eval('#summary tbody tr', (rows) => rows.map((row) => {
    const value = (name) => Number(row.querySelector(`[data-name="${name}"]`).dataset.value);
    return { arrivals: value('arrivals'), admitted: value('admitted'), rejected: value('rejected') };
  }));
  check(shown.length === summary.lanes.length, `one summary row per lane: ${shown.length}`);
  summary.lanes.forEach((lane, i) => {
    const expected = { arrivals: lane.arrivals, admitted: lane.admitted, rejected: lane.denied + lane.exceeded };
    check(JSON.stringify(shown[i]) === JSON.stringify(expected),
      `lane ${lane.label}: the page shows ${JSON.stringify(shown[i])}, the server says ${JSON.stringify(expected)}`);
  });
  const expectedColumns = await page.$$eval('#summary tbody tr [data-name="expected_arrivals"]', (cells) => cells.map((c) => c.textContent));
  check(expectedColumns.every((t) => t.length > 0), 'the expectation sits beside the actual figures');

  await page.screenshot({ path: screenshotPath, fullPage: true });
  const legends = await page.$$eval('[data-chart="state"]', (cs) => cs.map((c) => c.parentElement.querySelector('figcaption').textContent));
  check(legends.every((t) => t.includes("client 0's key")), `the state legends say whose state they show: ${legends}`);

  // A shaper draws the delays it gives beside its queue; the state line reads the chosen client.
  await page.selectOption('select[name=mode]', 'single');
  await page.selectOption('select[name=algorithm]', 'leaky_bucket');
  await page.selectOption('select[name=leaky_mode]', 'shaper');
  await page.fill('input[name=rate]', '5');
  await page.fill('input[name=burst]', '10');
  await page.fill('input[name=arrival_rate]', '20');
  await page.fill('input[name=duration_ms]', '5000');
  await page.fill('input[name=clients]', '2');
  await page.fill('input[name=state_client]', '1');
  await page.click('#run-start');
  await page.waitForFunction(() => window.lab.state === 'done' && window.lab.plan.mode === 'single');
  const delayChart = await page.$('canvas[data-chart="delay"]');
  check(delayChart !== null, 'a shaper lane has a delay chart');
  const delayPoints = Number(await delayChart.getAttribute('data-points'));
  check(delayPoints > 0, `the delay chart has points: ${delayPoints}`);
  const delayLegend = await page.$eval('canvas[data-chart="delay"]', (c) => c.parentElement.querySelector('figcaption').textContent);
  check(delayLegend.includes('longest delay given in the tick (s)'), `the delay chart says what it draws: ${delayLegend}`);
  const drawn = await page.evaluate(() => ({ delay: window.lab.lanes[0].delay, state: window.lab.lanes[0].state }));
  check(drawn.delay.some((d) => d > 0) && drawn.state.some((q) => q > 0), `the shaper delays and queues: ${JSON.stringify(drawn)}`);
  const stateLegend = await page.$eval('canvas[data-chart="state"]', (c) => c.parentElement.querySelector('figcaption').textContent);
  check(stateLegend.includes("units queued (still draining) — client 1's key"), `the queue line names its key: ${stateLegend}`);
  await page.fill('input[name=clients]', '1');
  await page.fill('input[name=state_client]', '0');

  // The fleet: local sidecars, one global limit, and instances leasing from it.
  await page.selectOption('select[name=mode]', 'fleet');
  await page.selectOption('select[name=algorithm]', 'fixed_window');
  await page.fill('input[name=limit]', '100');
  await page.fill('input[name=window_ms]', '1000');
  await page.selectOption('select[name=traffic]', 'steady');
  await page.fill('input[name=arrival_rate]', '400');
  await page.fill('input[name=duration_ms]', '10000');
  await page.click('#run-start');
  await page.waitForFunction(() => window.lab.state === 'done' && window.lab.plan.mode === 'fleet');
  const fleetLabels = await page.evaluate(() => window.lab.plan.lanes.map((l) => l.label));
  check(JSON.stringify(fleetLabels) === JSON.stringify(['local ×4', 'global', 'leased ×4', 'RLQS ×4']),
    `the fleet runs local, global, leased and RLQS lanes: ${fleetLabels}`);
  const fleetQuery = await page.evaluate(() => window.lab.query);
  check(fleetQuery.includes('lease_ms=1000'), `the lease period is a parameter: ${fleetQuery}`);
  const fleetSummary = await page.evaluate(async (q) => (await fetch(`/api/summary?${q}`)).json(), fleetQuery);
  const [, fleetGlobal, fleetLeased] = fleetSummary.lanes;
  check(fleetLeased.admitted <= fleetGlobal.admitted,
    `the leased lane never admits more than the global one: ${fleetLeased.admitted} > ${fleetGlobal.admitted}`);
  const calls = await page.textContent('#fleet-leased-calls');
  const perDecision = Number(calls.split('/')[1]);
  check(perDecision > 0 && perDecision < 0.2, `the leased lane calls the store on a few decisions: ${calls}`);
  check((await page.textContent('#fleet-leased-rate')).endsWith('req/s'), 'the leased rate is shown');
  const fleetQuota = fleetSummary.lanes[3];
  check(fleetQuota.reports > 0 && (await page.textContent('#fleet-quota-rate')).endsWith('req/s'),
    `the RLQS lane reports usage and its rate is shown: ${JSON.stringify(fleetQuota)}`);

  // A retry storm: the same limit, three kinds of clients.
  await page.selectOption('select[name=mode]', 'storm');
  await page.selectOption('select[name=algorithm]', 'fixed_window');
  await page.fill('input[name=limit]', '50');
  await page.fill('input[name=window_ms]', '10000');
  await page.fill('input[name=arrival_rate]', '20');
  await page.fill('input[name=duration_ms]', '60000');
  await page.fill('input[name=max_retries]', '5');
  await page.click('#run-start');
  await page.waitForFunction(() => window.lab.state === 'done' && window.lab.plan.mode === 'storm');
  check(await page.isVisible('#storm-table'), 'the storm table is shown');
  const storm = await page.$$eval('#storm-table tbody tr', (rows) => rows.map((row) => ({
    label: row.dataset.lane,
    load: Number(row.querySelector('[data-name="load"]').dataset.value),
    admitted: Number(row.querySelector('[data-name="admitted"]').dataset.value),
  })));
  check(storm.length === 3, `three kinds of clients: ${JSON.stringify(storm)}`);
  const stormQuery = await page.evaluate(() => window.lab.query);
  const stormSummary = await page.evaluate(async (q) => (await fetch(`/api/summary?${q}`)).json(), stormQuery);
  stormSummary.lanes.forEach((lane, i) => {
    check(storm[i].load === lane.arrivals && storm[i].admitted === lane.admitted,
      `storm lane ${lane.label}: the page shows ${JSON.stringify(storm[i])}, the server says ${lane.arrivals}/${lane.admitted}`);
  });
  check(storm[0].load > storm[1].load && storm[1].load > storm[2].load,
    `retrying at once loads the limiter most, adaptive clients least: ${JSON.stringify(storm)}`);
  // Staggered windows: the same storm over 10 keys whose windows start apart.
  await page.fill('input[name=clients]', '10');
  await page.selectOption('select[name=stagger]', 'on');
  await page.click('#run-start');
  await page.waitForFunction(() => window.lab.state === 'done' && window.lab.query.includes('stagger=on'));
  check(!(await page.isVisible('#error')), `no error with staggered windows: ${await page.textContent('#error')}`);
  await page.selectOption('select[name=stagger]', 'off');
  await page.fill('input[name=clients]', '1');

  // A replayed trace: upload a CSV from the page, run it, and compare with the server.
  const times = Array.from({ length: 300 }, (_, k) => (1_700_000_000 + k * 0.02 + (k % 7) * 0.001).toFixed(3));
  await page.selectOption('select[name=mode]', 'single');
  await page.selectOption('select[name=algorithm]', 'token_bucket');
  await page.selectOption('select[name=traffic]', 'replay');
  await page.setInputFiles('#replay-file', {
    name: 'trace.csv', mimeType: 'text/csv', buffer: Buffer.from(`timestamp\n${times.join('\n')}\n`),
  });
  await page.waitForFunction(() => document.getElementById('replay-info').textContent.includes('300 timestamps'));
  await page.click('#run-start');
  await page.waitForFunction(() => window.lab.state === 'done' && window.lab.plan.mode === 'single' && window.lab.query.includes('traffic=replay'));
  const replayQuery = await page.evaluate(() => window.lab.query);
  check(replayQuery.includes('traffic=replay') && /(^|&)replay=\d+/.test(replayQuery), `the run replays the upload: ${replayQuery}`);
  const replaySummary = await page.evaluate(async (q) => (await fetch(`/api/summary?${q}`)).json(), replayQuery);
  const replayShown = await page.$eval('#summary tbody tr [data-name="admitted"]', (c) => Number(c.dataset.value));
  check(replaySummary.arrivals === 300, `all 300 uploaded requests arrive: ${replaySummary.arrivals}`);
  check(replayShown === replaySummary.lanes[0].admitted,
    `the replay's admitted figure on the page (${replayShown}) is the server's (${replaySummary.lanes[0].admitted})`);

  // The platform view: the simulator's platform scenario, every mode a lane, as the server reports it.
  await page.selectOption('select[name=mode]', 'platform');
  check(await page.isVisible('input[name=keys]'), 'the platform view shows its fields');
  check(!(await page.isVisible('input[name=arrival_rate]')), "the one-key traffic fields are hidden");
  await page.fill('input[name=keys]', '2000');
  await page.fill('input[name=instances]', '4');
  await page.fill('input[name=platform_rate]', '15000');
  await page.fill('input[name=offered_rate]', '20000');
  await page.fill('input[name=duration_s]', '5');
  // A bound only the server knows: the error names the parameter.
  const errorsBefore = consoleErrors.length;
  await page.fill('input[name=scale]', '2s=65');
  await page.click('#run-start');
  await page.waitForFunction(() => window.lab.state === 'error');
  // The browser logs the refused request itself; that one is expected.
  consoleErrors.push(...consoleErrors.splice(errorsBefore).filter((m) => !m.includes('status of 400')));
  const platformError = await page.textContent('#error');
  check(platformError.startsWith('scale: 65 instances is more than 64'), `the server's bound is named: ${platformError}`);
  await page.fill('input[name=scale]', '2s=6,4s=3');
  await page.click('#run-start');
  await page.waitForFunction(() => window.lab.state === 'done' && window.lab.plan.mode === 'platform');
  check(!(await page.isVisible('#error')), `no error after the platform run: ${await page.textContent('#error')}`);
  const platformQuery = await page.evaluate(() => window.lab.query);
  check(platformQuery.includes('modes=exact%2Cleased%2Cshares%2Clocal') && platformQuery.includes('scale=2s%3D6%2C4s%3D3'),
    `the run carries the modes and the schedule: ${platformQuery}`);
  const platformShown = await page.$$eval('#platform-table tbody tr', (rows) => rows.map((row) => {
    const value = (name) => Number(row.querySelector(`[data-name="${name}"]`).dataset.value);
    return { mode: row.dataset.mode, admitted: value('admitted'), over: value('over_admitted'),
      calls: value('calls_per_decision'), p99: value('p99_wait_us') };
  }));
  const platformAnswer = await page.evaluate(async (q) => (await fetch(`/api/platform?${q}`)).json(), platformQuery);
  check(JSON.stringify(platformShown.map((l) => l.mode)) === JSON.stringify(['exact', 'leased', 'shares', 'local']),
    `one row per mode: ${JSON.stringify(platformShown)}`);
  platformAnswer.lanes.forEach((lane, i) => {
    const expected = { mode: lane.mode, admitted: lane.admitted, over: lane.over_admitted,
      calls: lane.calls_per_decision, p99: lane.p99_wait_us };
    check(JSON.stringify(platformShown[i]) === JSON.stringify(expected),
      `mode ${lane.mode}: the page shows ${JSON.stringify(platformShown[i])}, the server says ${JSON.stringify(expected)}`);
  });
  check(platformShown[2].over === 0 && platformShown[3].over > 0, `shares keep the limits, local does not: ${JSON.stringify(platformShown)}`);
  const platformChart = await page.$eval('canvas[data-chart="platform"]', (c) => ({ points: Number(c.dataset.points), marks: Number(c.dataset.marks) }));
  check(platformChart.points === 5 && platformChart.marks === 2, `a point per second and a mark per scale change: ${JSON.stringify(platformChart)}`);
  const platformLegend = await page.textContent('#platform-legend');
  check(['exact', 'leased', 'shares', 'local', 'platform cap'].every((t) => platformLegend.includes(t)), `the legend names every line: ${platformLegend}`);
  await page.screenshot({ path: screenshotPath.replace(/\.png$/, '-platform.png'), fullPage: true });
  check(consoleErrors.length === 0, `no errors in the console: ${consoleErrors.join('; ')}`);
  console.log(JSON.stringify({ ok: true, lanes: summary.lanes.length, arrivals: summary.arrivals, points, platformLanes: platformShown.length, screenshot: screenshotPath }));
} catch (e) {
  console.error(`lab browser test failed: ${e.message}`);
  process.exitCode = 1;
} finally {
  if (context) await context.close();
  rmSync(userDataDir, { recursive: true, force: true });
}
