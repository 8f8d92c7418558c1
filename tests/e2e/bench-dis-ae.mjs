// The Dis-AE half of `flipside bench browser --dis-ae`: opens the app's "Generate in your
// browser" page at FLIPSIDE_URL twice, with one worker (`?workers=1`) and with the page's own
// choice (a worker per core), waits for the Dis-AE and the page's classifier (which loads on the
// same page and would otherwise share the cores), reproduces the JSON array BENCH_TEXTS with the
// target BENCH_LABEL once unmeasured and BENCH_RUNS times measured (timed around
// `window.flipsideReproduce`, beam 4, as the page calls it), and prints one JSON object: for the
// page's own choice the milliseconds of each run, the texts of the last, its workers and the load
// time; `one_worker`, the milliseconds and texts with one worker; the browser.
import { launchChromium, waitForScoring } from './chromium.mjs';

const url = process.env.FLIPSIDE_URL;
const texts = JSON.parse(process.env.BENCH_TEXTS ?? 'null');
const label = process.env.BENCH_LABEL;
const runs = Number(process.env.BENCH_RUNS ?? 3);
if (!url || !texts || !label) throw new Error('FLIPSIDE_URL, BENCH_TEXTS and BENCH_LABEL must be set (run `flipside bench browser --dis-ae`)');

/** Opens the page with `query` and times the Dis-AE there. */
async function timeGeneration(browser, query) {
  const page = await browser.newPage();
  const loadStart = Date.now();
  await page.goto(`${url}/${query}#/generate`);
  await page.waitForFunction(() => window.flipsideReproducerReady === true || window.flipsideReproducerError,
    null, { timeout: 300_000 });
  const error = await page.evaluate(() => window.flipsideReproducerError ?? null);
  if (error !== null) throw new Error(`the in-browser Dis-AE failed: ${error}`);
  const loadMs = Date.now() - loadStart;
  await waitForScoring(page, 300_000);
  const result = await page.evaluate(async ({ texts, label, runs }) => {
    let last = await window.flipsideReproduce(texts, label);
    const millis = [];
    for (let i = 0; i < runs; i++) {
      const start = performance.now();
      last = await window.flipsideReproduce(texts, label);
      millis.push(performance.now() - start);
    }
    return { millis, outputs: last.map((o) => o.text), workers: window.flipsideReproducerWorkers };
  }, { texts, label, runs });
  result.load_ms = loadMs;
  await page.close();
  return result;
}

const browser = await launchChromium();
try {
  const oneWorker = await timeGeneration(browser, '?workers=1');
  const result = await timeGeneration(browser, '');
  result.one_worker = { millis: oneWorker.millis, outputs: oneWorker.outputs };
  result.browser = `Chromium ${browser.version()}`;
  console.log(JSON.stringify(result));
} finally {
  await browser.close();
}
