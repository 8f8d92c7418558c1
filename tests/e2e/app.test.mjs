// Flipside's browser tests: the app served by a real `flipside serve` (started by
// tests/browser.rs, which passes FLIPSIDE_URL), in Debian's headless Chromium driven by
// playwright-core. Screenshots go to SCREENSHOT_DIR for review.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { launchChromium, launchChromiumProfile, measuredVisit, screenshot, waitForScoring } from './chromium.mjs';

const URL = process.env.FLIPSIDE_URL;
const SHOTS = process.env.SCREENSHOT_DIR ?? 'target/screenshots';
const ITEMS = process.env.ITEMS_CSV;
const NATIVE = JSON.parse(process.env.NATIVE_REPRODUCTIONS ?? 'null');
// The native classifier's probabilities for one text, with the compact weights the page gets.
const NATIVE_SCORE = JSON.parse(process.env.NATIVE_SCORE ?? 'null');
// The CLI-made admin: datasets and jobs belong to teams.
const ADMIN = { email: process.env.ADMIN_EMAIL, password: process.env.ADMIN_PASSWORD };
const TEXT = 'The film was wonderful and the cast superb.';
const LONG = 180_000;

let browser;

before(async () => {
  assert.ok(URL, 'FLIPSIDE_URL is not set: run these tests through `cargo test --test end_to_end browser`');
  mkdirSync(SHOTS, { recursive: true });
  browser = await launchChromium();
});

after(async () => browser?.close());

async function openApp(query = '', ready = 'demo-text', beforeLoad = async () => {}) {
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  await beforeLoad(page);
  await page.goto(`${URL}${query}`);
  await page.getByTestId(ready).waitFor();
  return { page, errors };
}

/** Waits for the in-browser classifier and scores `text` with it and with the server. */
async function scoreBothWays(page, text) {
  await waitForScoring(page, LONG);
  const browserScore = await page.evaluate((t) => window.flipsideScore(t), text);
  const server = await page.evaluate(async (t) => {
    const response = await fetch('/api/classify', {
      method: 'POST', headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ texts: [t] }),
    });
    return response.json();
  }, text);
  const diff = Math.max(...browserScore.probabilities.map((p, i) => Math.abs(p - server.probabilities[0][i])));
  return { browserScore, server, diff };
}

test('the edit demo makes a counterfactual and shows helpers, keywords, diff and score', { timeout: 600_000 }, async () => {
  const { page, errors } = await openApp();
  await page.getByTestId('demo-text').fill(TEXT);
  await page.getByTestId('demo-label').selectOption('positive');
  await page.getByTestId('demo-target').selectOption('negative');
  await page.getByTestId('demo-submit').click();
  await page.getByTestId('demo-result').waitFor({ timeout: LONG });

  const excerpts = await page.getByTestId('excerpt').count();
  assert.ok(excerpts >= 1, 'retrieved helper sentences are shown');
  assert.ok(await page.getByTestId('keyword-chip').count() >= 1, 'keywords are listed');
  assert.ok(await page.getByTestId('keyword').count() >= 1, 'keywords are highlighted in the helpers');
  const failed = await page.getByTestId('demo-failure').count();
  if (failed === 0) {
    const changes = await page.getByTestId('diff-added').count() + await page.getByTestId('diff-removed').count();
    assert.ok(changes >= 1, 'the diff marks the changed words');
    const probability = await page.getByTestId('demo-flip-probability').innerText();
    assert.match(probability, /\d\.\d{2,}|\d+(\.\d+)?%/, `a probability is shown: ${probability}`);
  } else {
    console.log(`# the LLM gave no usable edit: ${await page.getByTestId('demo-failure').innerText()}`);
  }
  await screenshot(page, join(SHOTS, 'demo.png'));

  // The same page at phone width: no sideways scrolling.
  await page.setViewportSize({ width: 375, height: 800 });
  const width = await page.evaluate(() => document.documentElement.scrollWidth);
  assert.ok(width <= 375, `the page is ${width} px wide at a 375 px viewport`);
  await screenshot(page, join(SHOTS, 'demo-phone.png'));
  assert.deepEqual(errors, []);
  await page.close();
});

// An AutoCAD answer as `POST /api/edit` gives it, the record from a run of the AutoCAD
// ablation: the page is handed this fixed answer, so that its display of masks and fills is
// checked against known values (the server's own AutoCAD, with the infiller Flipside ships, is
// tested in tests/server.rs).
const AUTOCAD_ORIGINAL = 'The script is very poor with nothing special at all.';
const AUTOCAD_EDITED = 'The film is very good with nothing were. at all.';
const AUTOCAD_MASKED = 'The <extra_id_0> is very <extra_id_1> with nothing <extra_id_2> at all.';
const AUTOCAD_TIMING = { context_ms: 70.1, edit_ms: 61.3, judge_ms: 12.0, prompt_tokens: 0, completion_tokens: 0 };
const AUTOCAD_ANSWER = {
  method: 'autocad', original: AUTOCAD_ORIGINAL, label: 'negative', target: 'positive', keywords: [],
  record: {
    key: 'demo→positive', item: 'demo', method: 'autocad', original: AUTOCAD_ORIGINAL,
    edited: AUTOCAD_EDITED, label: 'negative', target: 'positive', model: 'infiller-ul-saliency',
    seed: 0, attempt: 1, timing: AUTOCAD_TIMING, prediction: 'positive', target_probability: 0.91,
    flipped: true,
    provenance: {
      kind: 'autocad', masked: AUTOCAD_MASKED, spans: ['script', 'poor', 'special'],
      fills: ['film', 'good', 'were.'], rationales: 'saliency',
      reply: '<extra_id_0>film<extra_id_1> good<extra_id_2> were.',
    },
  },
  failures: [], labels: ['negative', 'positive'], original_probabilities: [0.97, 0.03],
  edited_probabilities: [0.09, 0.91], model: 'infiller-ul-saliency', timing: AUTOCAD_TIMING,
};

test('the demo offers the methods, disables those the server cannot run, and shows an AutoCAD edit\'s masks and fills', { timeout: 600_000 }, async () => {
  // The server's /api/info as a server whose infiller was trained without retrieved keywords
  // gives it (this test server's can run every method).
  const GUIDED_UNAVAILABLE = 'the infiller plain was trained without retrieved keywords';
  const served = [];
  const { page, errors } = await openApp('', 'demo-text', (p) => p.route('**/api/info', async (route) => {
    const info = await (await route.fetch()).json();
    for (const method of info.methods) {
      served.push([method.id, method.unavailable]);
      if (method.id === 'autocad-retrieval') method.unavailable = GUIDED_UNAVAILABLE;
    }
    await route.fulfill({ json: info });
  }));
  assert.ok(served.length > 0 && served.every(([, why]) => why === undefined), `every method runs on this server: ${JSON.stringify(served)}`);
  const picker = page.getByTestId('demo-method');
  const values = await picker.locator('option').evaluateAll((options) => options.map((o) => o.value));
  assert.deepEqual(values, ['core', 'llm-only', 'retrieve-only', 'autocad', 'autocad-retrieval', 'lass']);
  assert.ok(!(await picker.locator('option[value="lass"]').isDisabled()), 'the server has a Dis-AE');
  assert.equal(await picker.inputValue(), 'core', 'the server\'s default is selected');
  assert.ok(!(await picker.locator('option[value="autocad"]').isDisabled()), 'the server ships an infiller');
  const guided = picker.locator('option[value="autocad-retrieval"]');
  assert.ok(await guided.isDisabled(), 'a method the server cannot run is disabled');
  assert.match(await guided.getAttribute('title'), /trained without retrieved keywords/);
  await picker.selectOption('llm-only');
  assert.match(await page.getByTestId('demo-method-description').innerText(), /LLM alone/);

  // The edit stream, as the server sends it for an editor that writes no reply: the result.
  await page.route('**/api/edit/stream', (route) => route.fulfill({
    status: 200,
    contentType: 'text/event-stream',
    body: `event: result\ndata: ${JSON.stringify(AUTOCAD_ANSWER)}\n\n`,
  }));
  await page.getByTestId('demo-text').fill(AUTOCAD_ORIGINAL);
  await page.getByTestId('demo-label').selectOption('negative');
  await page.getByTestId('demo-submit').click();
  await page.getByTestId('demo-infilled').waitFor({ timeout: LONG });
  assert.equal(await page.getByTestId('demo-masked').innerText(), AUTOCAD_MASKED);
  const fills = await page.getByTestId('demo-infilled').locator('li').allInnerTexts();
  assert.deepEqual(fills, ['<extra_id_0> script → film', '<extra_id_1> poor → good', '<extra_id_2> special → were.']);
  assert.ok(await page.getByTestId('diff-added').count() >= 1, 'the diff marks the fills');
  assert.equal(await page.getByTestId('excerpt').count(), 0, 'no helpers for a method that does not retrieve');
  await screenshot(page, join(SHOTS, 'demo-autocad.png'));
  assert.deepEqual(errors, []);
  await page.close();
});

// The page's CPU backend multiplies the encoder's layers in int8 — with relaxed SIMD where the
// browser has it (Chromium does), SIMD128 on `?int8=simd128` (what the others run) — WebGPU in f32.
// With the page's kernels native computes the encoder exactly as the page does, on every CPU: the
// same integer sums and roundings in the int8 products (checked bit for bit below on two test
// layers), and the f32 steps between them in a fixed order without fused multiply-adds
// (shared/src/ops/portable.rs). Only the classifier's head comes after the last int8
// product: burn's f32 dense layer (gemm, fused natively, not in the page) and tanh (two libms),
// a few roundings of f32, far below 1e-6. (Before the encoder was portable, one activation
// rounded across a quantisation step on one CPU and not on another set off every later layer:
// 44 of 100 sentences moved by up to 1.2e-3 between AVX-512 and AVX2.) WebGPU's f32 sums come
// in another order.
for (const [name, query, int8, tolerance] of [
  ['cpu', '?backend=cpu', 'relaxedsimd', 1e-6],
  ['cpu, SIMD128', '?backend=cpu&int8=simd128', 'simd128', 1e-6],
  ['webgpu', '?backend=webgpu', null, 1e-3],
]) {
  test(`the in-browser classifier (${name}) matches native to ${tolerance}`, { timeout: 600_000 }, async () => {
    assert.ok(NATIVE_SCORE, 'NATIVE_SCORE is not set');
    const { page, errors } = await openApp(query);
    const { browserScore, diff } = await scoreBothWays(page, NATIVE_SCORE.text);
    assert.equal(browserScore.backend, int8 ? 'cpu' : 'webgpu');
    assert.equal(browserScore.int8, int8);
    const expected = int8 ? NATIVE_SCORE.int8[int8].probabilities : NATIVE_SCORE.probabilities;
    const native = Math.max(...browserScore.probabilities.map((p, i) => Math.abs(p - expected[i])));
    console.log(`# ${name}: max |p_browser - p_native| = ${native.toExponential(2)} (same compact weights${int8 ? `, int8; native int8 vs f32 ${NATIVE_SCORE.int8[int8].vs_f32.toExponential(2)}` : ''}), against the server's full weights ${diff.toExponential(2)}; ${browserScore.millis.toFixed(1)} ms`);
    assert.ok(native <= tolerance, `browser and native differ by ${native}`);
    if (int8) {
      const parity = await page.evaluate(() => window.flipsideInt8Parity());
      assert.equal(parity.kernel, int8);
      assert.equal(parity.digest, NATIVE_SCORE.int8[int8].parity, 'the page\'s int8 products are native\'s, bit for bit');
      // Closer to native int8 than int8 is to f32: the page did multiply in int8.
      const vsF32 = NATIVE_SCORE.int8[int8].vs_f32;
      assert.ok(native < vsF32 / 10, `page ${native} from native int8, which is ${vsF32} from f32`);
    }
    assert.deepEqual(errors, []);
    await page.close();
  });
}

test('a first visit gets the app\'s files gzipped, and a second takes them from the cache', { timeout: 600_000 }, async () => {
  const profile = mkdtempSync(join(tmpdir(), 'flipside-profile-'));
  const context = await launchChromiumProfile(profile);
  try {
    const ready = (page) => waitForScoring(page, LONG);
    const first = await measuredVisit(context, URL, ready);
    const second = await measuredVisit(context, URL, ready);
    const kB = (bytes) => `${(bytes / 1024).toFixed(1)} kB`;
    console.log(`# first visit: ${kB(first.bytes)} in ${first.requests} requests; second: ${kB(second.bytes)} in ${second.requests} (${second.fromCache} from the cache)`);
    const hashed = first.responses.filter((r) => /-[0-9a-f]{12,16}(_bg)?\.(wasm|js|css)$/.test(r.url));
    assert.ok(hashed.some((r) => r.url.endsWith('_bg.wasm')), JSON.stringify(first.responses));
    for (const file of hashed) {
      assert.equal(file.status, 200, file.url);
      assert.equal(file.encoding, 'gzip', file.url);
      assert.equal(file.cacheControl, 'public, max-age=31536000, immutable', file.url);
    }
    const wasm = hashed.find((r) => r.url.endsWith('_bg.wasm'));
    const wasmAgain = second.responses.find((r) => r.url === wasm.url);
    assert.ok(wasmAgain, 'the second visit loads the same wasm');
    assert.equal(wasmAgain.bytes, 0, 'the wasm comes from the cache');
    assert.ok(second.bytes * 20 < first.bytes, `second visit ${second.bytes} B, first ${first.bytes} B`);
  } finally {
    await context.close();
    rmSync(profile, { recursive: true, force: true });
  }
});

test('the Dis-AE generates in the browser as it does natively; the page flips, highlights and downloads', { timeout: 600_000 }, async () => {
  assert.ok(NATIVE, 'NATIVE_REPRODUCTIONS is not set');
  const { page, errors } = await openApp('#/generate', 'generate-texts');
  const button = page.getByTestId('generate-button');
  await page.waitForFunction(() => window.flipsideReproducerReady === true || window.flipsideReproducerError, null, { timeout: LONG });
  assert.equal(await page.evaluate(() => window.flipsideReproducerError ?? null), null);
  // A worker per core (at most 4), each with the whole model.
  const [workers, cores] = await page.evaluate(() => [window.flipsideReproducerWorkers, navigator.hardwareConcurrency]);
  assert.equal(workers, Math.min(Math.max(cores, 1), 4));

  // The same parents and beam search give the same texts as the native Dis-AE, the texts split
  // between the workers.
  const started = Date.now();
  const outputs = await page.evaluate(([texts, label]) => window.flipsideReproduce(texts, label), [NATIVE.texts, NATIVE.label]);
  const seconds = (Date.now() - started) / 1000;
  console.log(`# Dis-AE in the browser (CPU wasm): ${NATIVE.texts.length} texts in ${seconds.toFixed(2)} s`);
  assert.deepEqual(outputs.map((o) => o.text), NATIVE.outputs.map((o) => o.text));
  outputs.forEach((o, i) => assert.ok(Math.abs(o.log_prob - NATIVE.outputs[i].log_prob) < 1e-3, `log-prob ${o.log_prob} vs ${NATIVE.outputs[i].log_prob}`));

  // The page: positive toy reviews made negative, each scored by the in-browser classifier.
  await page.getByTestId('generate-texts').fill(NATIVE.texts.join('\n'));
  await page.getByTestId('generate-target').selectOption('negative');
  await button.waitFor({ state: 'visible' });
  await page.waitForFunction(() => !document.querySelector('[data-testid=generate-button]').disabled, null, { timeout: LONG });
  await button.click();
  await page.getByTestId('generate-download').waitFor({ timeout: LONG });
  const rows = page.getByTestId('generated-row');
  assert.equal(await rows.count(), NATIVE.texts.length);
  for (let i = 0; i < NATIVE.texts.length; i++) {
    const shown = (await rows.nth(i).getByTestId('generated-text').innerText()).replace(/\s+/g, ' ').trim();
    assert.ok(shown.includes(NATIVE.outputs[i].text.split(' ').pop()), `row ${i} shows ${shown}`);
  }
  const summary = await page.getByTestId('generate-summary').innerText();
  assert.match(summary, /of 3 flipped/);
  assert.match(summary, new RegExp(`CPU wasm, ${workers} workers?\\)`));
  const href = await page.getByTestId('generate-download').getAttribute('href');
  const lines = decodeURIComponent(href.slice(href.indexOf(',') + 1)).trim().split('\n').map((l) => JSON.parse(l));
  assert.deepEqual(lines.map((l) => l.edited), NATIVE.outputs.map((o) => o.text));
  assert.ok(lines.every((l) => l.target === 'negative' && l.method === 'lass'));
  await screenshot(page, join(SHOTS, 'generate-in-browser.png'));
  assert.deepEqual(errors, []);
  await page.close();
});

test('the jobs page signs in, uploads a dataset, runs a job to the end and lists its results', { timeout: 900_000 }, async () => {
  assert.ok(ITEMS && ADMIN.email, 'ITEMS_CSV or ADMIN_EMAIL is not set');
  // Jobs are a team's: the page asks who you are first.
  const { page, errors } = await openApp('#/jobs', 'login-email');
  await page.getByTestId('login-email').fill(ADMIN.email);
  await page.getByTestId('login-password').fill(ADMIN.password);
  await page.getByTestId('login-submit').click();
  await page.getByTestId('upload-file').waitFor();
  await page.getByTestId('upload-file').setInputFiles(ITEMS);
  await page.getByTestId('upload-submit').click();
  await page.getByTestId('upload-result').waitFor({ timeout: 60_000 });
  const uploaded = await page.getByTestId('dataset-select').locator('option', { hasText: 'items' }).first();
  await page.getByTestId('dataset-select').selectOption(await uploaded.getAttribute('value'));
  await page.getByTestId('job-method').selectOption('core');
  await page.getByTestId('job-limit').fill('3');
  await page.getByTestId('job-start').click();
  await page.locator('[data-testid=job-row][data-status=done]').first().waitFor({ timeout: 600_000 });
  await page.locator('[data-testid=job-row][data-status=done]').first().click();
  await page.getByTestId('records-table').waitFor({ timeout: 60_000 });
  const rows = await page.getByTestId('record-row').count();
  assert.ok(rows >= 1, 'the finished job lists its records');
  const href = await page.getByTestId('download-jsonl').getAttribute('href');
  assert.match(href, /\/api\/teams\/team-[0-9a-f]+\/jobs\/job-[0-9a-f]+\/records\.jsonl$/);
  await screenshot(page, join(SHOTS, 'jobs.png'));
  // The job has finished, so its dataset can go.
  const datasetId = await uploaded.getAttribute('value');
  const row = page.locator(`[data-testid=dataset-item][data-dataset-id="${datasetId}"]`);
  await row.getByTestId('dataset-delete').click();
  await row.waitFor({ state: 'detached', timeout: 30_000 });
  assert.deepEqual(errors, []);
  await page.close();
});
