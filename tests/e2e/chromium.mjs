// Debian's Chromium, headless, with WebGPU on SwiftShader (a CPU adapter) so that both of the
// app's classifier backends can run; playwright-core never downloads a browser.
import { chromium } from 'playwright-core';

// CHROMIUM_JS_FLAGS: V8 flags (`flipside bench browser --js-flags`).
const CHROMIUM_ARGS = ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage', '--no-first-run',
  '--enable-unsafe-webgpu', '--use-webgpu-adapter=swiftshader',
  ...(process.env.CHROMIUM_JS_FLAGS ? [`--js-flags=${process.env.CHROMIUM_JS_FLAGS}`] : [])];

export function launchChromium() {
  return chromium.launch({
    executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium',
    args: CHROMIUM_ARGS,
  });
}

/** Waits until the app's in-browser classifier is loaded; throws its error if it failed. */
export async function waitForScoring(page, timeout) {
  await page.waitForFunction(() => window.flipsideScoringReady === true || window.flipsideScoringError,
    null, { timeout });
  const error = await page.evaluate(() => window.flipsideScoringError ?? null);
  if (error !== null) throw new Error(`the in-browser classifier failed: ${error}`);
}

/**
 * A full-page screenshot once the in-browser classifier is idle. Its loading and scoring run on
 * the page's main thread (unoptimised wasm in the tests, on cores shared with other tests), and a
 * screenshot waits for that thread: taken mid-scoring, it can time out. Two portal pages scoring
 * at once beside the qemu and AutoCAD tests stayed busy over 120 s on a 2-core AVX2 machine.
 */
export async function screenshot(page, path) {
  const idle = 300_000;
  await page.waitForFunction(() => !document.querySelector('[data-testid="browser-score"] .spinner'),
    null, { timeout: idle });
  await page.screenshot({ path, fullPage: true, timeout: idle });
}

/**
 * Chromium with a profile of its own in `userDataDir`, and so a disk cache as a user's browser
 * has (a context of `launchChromium` caches in memory, and only small files).
 */
export function launchChromiumProfile(userDataDir) {
  return chromium.launchPersistentContext(userDataDir, {
    executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium',
    args: CHROMIUM_ARGS,
  });
}

/**
 * Opens `url` in a new page of `context`, waits for `ready(page)`, closes the page and says what
 * crossed the network meanwhile, and how long it took (`millis`): `bytes` (headers and bodies as received, Chromium's
 * `encodedDataLength`), `requests`, those served from the cache, and each response's URL, status,
 * `content-encoding`, `cache-control` and bytes.
 */
export async function measuredVisit(context, url, ready) {
  const page = await context.newPage();
  const cdp = await context.newCDPSession(page);
  await cdp.send('Network.enable');
  const visit = { bytes: 0, requests: 0, fromCache: 0, responses: new Map() };
  const header = (headers, name) =>
    Object.entries(headers).find(([key]) => key.toLowerCase() === name)?.[1] ?? null;
  cdp.on('Network.requestWillBeSent', () => { visit.requests += 1; });
  cdp.on('Network.requestServedFromCache', () => { visit.fromCache += 1; });
  cdp.on('Network.responseReceived', ({ requestId, response }) => {
    visit.responses.set(requestId, {
      url: response.url,
      status: response.status,
      encoding: header(response.headers, 'content-encoding'),
      cacheControl: header(response.headers, 'cache-control'),
      bytes: 0,
    });
  });
  cdp.on('Network.loadingFinished', ({ requestId, encodedDataLength }) => {
    visit.bytes += encodedDataLength;
    const response = visit.responses.get(requestId);
    if (response) response.bytes = encodedDataLength;
  });
  const start = Date.now();
  await page.goto(url);
  await ready(page);
  const millis = Date.now() - start;
  await page.close();
  return { ...visit, millis, responses: [...visit.responses.values()] };
}
