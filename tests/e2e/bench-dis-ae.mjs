// The Dis-AE half of `flipside bench browser --dis-ae`: opens the app's "Generate in your
// browser" page at FLIPSIDE_URL, waits for the Dis-AE, reproduces the JSON array BENCH_TEXTS with
// the target BENCH_LABEL once unmeasured and BENCH_RUNS times measured (timed around
// `window.flipsideReproduce`, beam 4, as the page calls it), and prints one JSON object: the
// milliseconds of each run, the texts of the last, the browser and the load time.
import { launchChromium } from './chromium.mjs';

const url = process.env.FLIPSIDE_URL;
const texts = JSON.parse(process.env.BENCH_TEXTS ?? 'null');
const label = process.env.BENCH_LABEL;
const runs = Number(process.env.BENCH_RUNS ?? 3);
if (!url || !texts || !label) throw new Error('FLIPSIDE_URL, BENCH_TEXTS and BENCH_LABEL must be set (run `flipside bench browser --dis-ae`)');

const browser = await launchChromium();
try {
  const page = await browser.newPage();
  const loadStart = Date.now();
  await page.goto(`${url}#/generate`);
  await page.waitForFunction(() => window.flipsideReproducerReady === true || window.flipsideReproducerError,
    null, { timeout: 300_000 });
  const error = await page.evaluate(() => window.flipsideReproducerError ?? null);
  if (error !== null) throw new Error(`the in-browser Dis-AE failed: ${error}`);
  const loadMs = Date.now() - loadStart;
  const result = await page.evaluate(async ({ texts, label, runs }) => {
    let last = await window.flipsideReproduce(texts, label);
    const millis = [];
    for (let i = 0; i < runs; i++) {
      const start = performance.now();
      last = await window.flipsideReproduce(texts, label);
      millis.push(performance.now() - start);
    }
    return { millis, outputs: last.map((o) => o.text) };
  }, { texts, label, runs });
  result.browser = `Chromium ${browser.version()}`;
  result.load_ms = loadMs;
  console.log(JSON.stringify(result));
} finally {
  await browser.close();
}
