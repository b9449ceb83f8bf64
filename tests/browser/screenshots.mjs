// Takes the screenshots of docs/lab.md: four scenarios, each opened from a link with autostart.
//
// Usage: node tests/browser/screenshots.mjs URL OUTPUT_DIR   (URL of a running `tollgate lab`)
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium } from 'playwright-core';

export const SCENARIOS = {
  'lab-bursty-api': 'algorithm=token_bucket&max_tokens=20&tokens_per_fill=10&fill_interval_ms=1000'
    + '&traffic=square&peak_rate=40&base_rate=4&wave_period_ms=10000&duty=0.3&duration_ms=30000&speed=0',
  'lab-login-attempts': 'algorithm=sliding_log&limit=5&window_ms=60000'
    + '&traffic=spike&base_rate=0.05&peak_rate=2&spike_at_ms=60000&spike_length_ms=30000'
    + '&duration_ms=240000&tick_ms=1000&speed=0',
  'lab-fixed-window-edge': 'mode=compare&algorithms=fixed_window,sliding_window,sliding_log&limit=100&window_ms=60000'
    + '&traffic=square&peak_rate=10&base_rate=0&wave_period_ms=60000&duty=0.3333&start=1700000030'
    + '&duration_ms=120000&tick_ms=1000&speed=0',
  'lab-fleet-drift': 'mode=fleet&algorithm=token_bucket&max_tokens=10&tokens_per_fill=10&fill_interval_ms=1000'
    + '&sidecars=6&traffic=poisson&arrival_rate=100&duration_ms=30000&speed=0',
};

const [url, outDir] = process.argv.slice(2);
if (!url || !outDir) {
  console.error('usage: node screenshots.mjs URL OUTPUT_DIR');
  process.exit(2);
}
const userDataDir = mkdtempSync(join(tmpdir(), 'tollgate-lab-shots-'));
let context;
try {
  context = await chromium.launchPersistentContext(userDataDir, {
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    headless: true,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking',
      '--disable-component-update', '--disable-sync', '--no-first-run'],
    viewport: { width: 1280, height: 860 },
  });
  const page = context.pages()[0] || await context.newPage();
  page.setDefaultTimeout(30_000);
  for (const [name, query] of Object.entries(SCENARIOS)) {
    await page.goto(`${url.replace(/\/$/, '')}/?${query}&autostart=1`);
    await page.waitForFunction(() => window.lab && window.lab.state === 'done');
    const path = join(outDir, `${name}.png`);
    await page.screenshot({ path });
    console.log(path);
  }
} catch (e) {
  console.error(`screenshots failed: ${e.message}`);
  process.exitCode = 1;
} finally {
  if (context) await context.close();
  rmSync(userDataDir, { recursive: true, force: true });
}
