// The browser half of `flipside bench browser`: opens the app at FLIPSIDE_URL with the
// classifier on BENCH_BACKEND (cpu or webgpu; BENCH_QUERY is added to the query), scores
// BENCH_TEXT BENCH_WARMUP times unmeasured and BENCH_RUNS times measured, and prints one JSON
// object: the per-call milliseconds (timed around `window.flipsideScore`, as a page would call
// it), the probabilities, the page's int8 kernel and the browser; first, in a new profile, what
// a first visit and a second one transfer until the classifier is loaded.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { launchChromiumProfile, measuredVisit, waitForScoring } from './chromium.mjs';

const url = process.env.FLIPSIDE_URL;
const text = process.env.BENCH_TEXT;
const backend = process.env.BENCH_BACKEND ?? 'cpu';
const query = process.env.BENCH_QUERY ?? '';
const runs = Number(process.env.BENCH_RUNS ?? 50);
const warmup = Number(process.env.BENCH_WARMUP ?? 5);
if (!url || !text) throw new Error('FLIPSIDE_URL and BENCH_TEXT must be set (run `flipside bench browser`)');

const profile = mkdtempSync(join(tmpdir(), 'flipside-bench-'));
const context = await launchChromiumProfile(profile);
try {
  const pageUrl = `${url}?backend=${backend}${query}`;
  const ready = (page) => waitForScoring(page, 300_000);
  const visits = [];
  for (let i = 0; i < 2; i++) {
    const { bytes, requests, fromCache, millis } = await measuredVisit(context, pageUrl, ready);
    visits.push({ bytes, requests, from_cache: fromCache, millis });
  }
  const page = await context.newPage();
  await page.goto(pageUrl);
  await ready(page);
  const result = await page.evaluate(async ({ text, runs, warmup }) => {
    let last;
    for (let i = 0; i < warmup; i++) last = await window.flipsideScore(text);
    const millis = [];
    for (let i = 0; i < runs; i++) {
      const start = performance.now();
      last = await window.flipsideScore(text);
      millis.push(performance.now() - start);
    }
    return { millis, probabilities: last.probabilities, backend: last.backend, int8: last.int8 };
  }, { text, runs, warmup });
  result.browser = `Chromium ${context.browser()?.version() ?? ''}`.trim();
  result.load_ms = visits[0].millis;
  result.visits = visits;
  console.log(JSON.stringify(result));
} finally {
  await context.close();
  rmSync(profile, { recursive: true, force: true });
}
