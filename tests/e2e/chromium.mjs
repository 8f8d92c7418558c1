// Debian's Chromium, headless, with WebGPU on SwiftShader (a CPU adapter) so that both of the
// app's classifier backends can run; playwright-core never downloads a browser.
import { chromium } from 'playwright-core';

export function launchChromium() {
  return chromium.launch({
    executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium',
    args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage', '--no-first-run',
      '--enable-unsafe-webgpu', '--use-webgpu-adapter=swiftshader'],
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
 * screenshot waits for that thread: taken mid-scoring, it can time out.
 */
export async function screenshot(page, path) {
  const idle = 120_000;
  await page.waitForFunction(() => !document.querySelector('[data-testid="browser-score"] .spinner'),
    null, { timeout: idle });
  await page.screenshot({ path, fullPage: true, timeout: idle });
}
