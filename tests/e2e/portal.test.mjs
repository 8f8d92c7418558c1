// The team portal in headless Chromium (started by tests/browser.rs, which passes FLIPSIDE_URL,
// the CLI-made admin's credentials, a finished job and a queue of originals to write for): the
// admin signs in, invites a teammate and makes a queue of the job's counterfactuals; both review
// it side by side by keyboard only; the admin writes a counterfactual with retrieved excerpts.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { launchChromium, screenshot } from './chromium.mjs';

const URL = process.env.FLIPSIDE_URL;
const SHOTS = process.env.SCREENSHOT_DIR ?? 'target/screenshots';
const ADMIN = { email: process.env.ADMIN_EMAIL, password: process.env.ADMIN_PASSWORD };
const JOB = process.env.JOB_ID;
const AUTHOR_QUEUE = process.env.AUTHOR_QUEUE; // `TEAM/QUEUE`
const WRITTEN = 'The plot was gripping and the jokes delightful.';
const LONG = 120_000;

let browser;

before(async () => {
  assert.ok(URL && JOB && AUTHOR_QUEUE, 'run through `cargo test --test end_to_end browser`');
  mkdirSync(SHOTS, { recursive: true });
  browser = await launchChromium();
});

after(async () => browser?.close());

/** A page in a browser context of its own (its own cookies: another person). */
async function person() {
  const context = await browser.newContext({ viewport: { width: 1100, height: 900 } });
  const page = await context.newPage();
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  return { page, errors };
}

/** Invites `email` as `role` from the team page; returns the link, which is shown once. */
async function invite(page, email, role) {
  await page.getByTestId('invite-email').fill(email);
  await page.getByTestId('invite-role').selectOption(role);
  const link = page.getByTestId('invite-link');
  // The link shown before (if any), read before the click: the new one replaces it.
  const previous = (await link.count()) ? await link.textContent() : null;
  await page.getByTestId('invite-create').click();
  await page.waitForFunction((was) => {
    const now = document.querySelector('[data-testid="invite-link"]');
    return now && now.textContent !== was;
  }, previous);
  const text = await link.textContent();
  assert.match(text, /#\/invite\/[0-9a-f]{64}$/);
  return text;
}

/** The shown item's id, or 'finished' when nothing is left. */
async function current(page) {
  await page.locator('[data-testid="review-item"], [data-testid="review-finished"]').first()
    .waitFor({ timeout: LONG });
  if (await page.getByTestId('review-finished').count()) return 'finished';
  return page.getByTestId('review-item').getAttribute('data-item-id');
}

/** Decides the shown item by keyboard; returns once the page shows the next one. */
async function decide(page) {
  const before = await current(page);
  const machine = await page.getByTestId('review-machine').textContent();
  // An edit the classifier says does not flip is flagged (an annotator cannot accept it).
  await page.keyboard.press(machine.includes('does not flip') ? 'g' : 'a');
  await page.waitForFunction((id) => {
    const item = document.querySelector('[data-testid="review-item"]');
    return document.querySelector('[data-testid="review-finished"]')
      || (item && item.getAttribute('data-item-id') !== id);
  }, before, { timeout: LONG });
  return before;
}

test('an admin invites a teammate and both review a job by keyboard; an author writes with excerpts',
  { timeout: 600_000 }, async () => {
    const ada = await person();
    await ada.page.goto(`${URL}#/review`);
    await ada.page.getByTestId('login-email').fill(ADMIN.email);
    await ada.page.getByTestId('login-password').fill(ADMIN.password);
    await ada.page.getByTestId('login-submit').click();
    await ada.page.getByTestId('team-name').waitFor();

    // Invite Bob; the link is shown once.
    const link = await invite(ada.page, 'bob@lab.org', 'annotator');

    // A queue of the job's counterfactuals, two people per item.
    await ada.page.getByTestId('queue-job').selectOption(JOB);
    await ada.page.getByTestId('queue-overlap').fill('2');
    await ada.page.getByTestId('queue-create').click();
    await ada.page.getByTestId('queue-row').first().waitFor();
    await screenshot(ada.page, join(SHOTS, 'portal-team.png'));

    const bob = await person();
    await bob.page.goto(link);
    await bob.page.getByTestId('invite-name').fill('Bob');
    await bob.page.getByTestId('invite-password').fill('a long enough password');
    await bob.page.getByTestId('invite-submit').click();
    await bob.page.getByTestId('team-name').waitFor();

    for (const { page } of [ada, bob]) {
      await page.getByTestId('open-queue').filter({ hasText: 'Review of' }).first().click();
      await current(page);
    }
    await screenshot(ada.page, join(SHOTS, 'portal-review-ada.png'));
    await screenshot(bob.page, join(SHOTS, 'portal-review-bob.png'));

    // Keys never fire while typing: an "a" typed into the text box stays text.
    const first = await current(bob.page);
    await bob.page.keyboard.press('f');
    await bob.page.keyboard.type(' a');
    assert.equal(await current(bob.page), first);
    assert.match(await bob.page.getByTestId('demo-hand-edit').inputValue(), / a$/);
    await bob.page.keyboard.press('Escape');
    // Reject, then undo: the same item comes back with the verdict taken back.
    await bob.page.keyboard.press('r');
    await bob.page.waitForFunction((id) => {
      const item = document.querySelector('[data-testid="review-item"]');
      return document.querySelector('[data-testid="review-finished"]')
        || (item && item.getAttribute('data-item-id') !== id);
    }, first, { timeout: LONG });
    await bob.page.keyboard.press('u');
    await bob.page.getByTestId('review-previous').waitFor();
    assert.equal(await current(bob.page), first);

    // Side by side, by keyboard, until neither has anything left.
    const decided = { ada: [], bob: [] };
    while ((await current(ada.page)) !== 'finished' || (await current(bob.page)) !== 'finished') {
      if ((await current(ada.page)) !== 'finished') decided.ada.push(await decide(ada.page));
      if ((await current(bob.page)) !== 'finished') decided.bob.push(await decide(bob.page));
    }
    assert.ok(decided.ada.length >= 1);
    assert.deepEqual([...decided.ada].sort(), [...decided.bob].sort(),
      'with two people per item, both decide every item');
    // Ready is when the stats show, within LONG: under a loaded CI machine the page's load
    // event alone has taken more than Playwright's 30 s.
    await ada.page.reload({ waitUntil: 'commit' });
    await ada.page.getByTestId('review-stats').filter({ hasText: `${decided.ada.length} of ${decided.ada.length} decided` })
      .waitFor({ timeout: LONG });
    await screenshot(ada.page, join(SHOTS, 'portal-finished.png'));

    // The second pass: the admin accepts every outcome (over the classifier where it disagrees),
    // one key each.
    await ada.page.getByTestId('second-pass-toggle').click();
    for (let i = 0; i < decided.ada.length; i += 1) {
      const item = ada.page.getByTestId('second-pass-item');
      await item.waitFor({ timeout: LONG });
      const id = await item.getAttribute('data-item-id');
      await ada.page.keyboard.press('o');
      await ada.page.waitForFunction((was) => {
        const shown = document.querySelector('[data-testid="second-pass-item"]');
        return document.querySelector('[data-testid="second-pass-finished"]')
          || (shown && shown.getAttribute('data-item-id') !== was);
      }, id, { timeout: LONG });
    }
    await ada.page.getByTestId('second-pass-finished').waitFor({ timeout: LONG });
    await ada.page.getByTestId('second-pass-toggle').click();
    await ada.page.getByTestId('review-stats').filter({ hasText: `${decided.ada.length} reviewed` })
      .waitFor({ timeout: LONG });

    // The export the team page links to holds the kept items for `classifier train`.
    await ada.page.goto(`${URL}#/review`);
    const href = await ada.page.getByTestId('export-classifier').first().getAttribute('href');
    const exported = await ada.page.evaluate(async (url) => (await fetch(url)).text(), href);
    const rows = exported.trim().split('\n').filter(Boolean);
    assert.equal(rows.length, decided.ada.length, exported);
    for (const line of rows) {
      const row = JSON.parse(line);
      assert.ok(row.text && row.label, line);
    }

    // An admin adds items to a queue from a CSV file.
    const row = ada.page.getByTestId('queue-row').filter({ hasText: 'originals to write for' });
    await row.getByTestId('queue-upload').setInputFiles({
      name: 'more.csv', mimeType: 'text/csv',
      buffer: Buffer.from('original,label,target\nA dull film.,negative,positive\n'),
    });
    await row.locator('td', { hasText: /^2$/ }).waitFor({ timeout: LONG });

    // Writing a counterfactual for an original, with label-flipped excerpts (key e).
    await ada.page.goto(`${URL}#/review/${AUTHOR_QUEUE}`);
    await current(ada.page);
    await ada.page.keyboard.press('e');
    await ada.page.getByTestId('review-excerpt').first().waitFor({ timeout: LONG });
    await ada.page.keyboard.press('f');
    await ada.page.getByTestId('demo-hand-edit').fill(WRITTEN);
    await screenshot(ada.page, join(SHOTS, 'portal-author.png'));
    await ada.page.keyboard.press('Control+Enter');
    // Next, the uploaded original (the keys are live again, not in the text box): skipped, and
    // nothing is left.
    await ada.page.getByTestId('review-original').filter({ hasText: 'A dull film.' }).waitFor({ timeout: LONG });
    await ada.page.keyboard.press('s');
    await ada.page.getByTestId('review-finished').waitFor({ timeout: LONG });

    // An invitation for someone with an account never asks for a password: signed in, Bob
    // joins with one click (and becomes a reviewer, who may export); signed out, he signs in on
    // the invitation's page first.
    await ada.page.goto(`${URL}#/review`);
    const promotion = await invite(ada.page, 'bob@lab.org', 'reviewer');
    await bob.page.goto(promotion);
    assert.equal(await bob.page.getByTestId('invite-name').count(), 0);
    await bob.page.getByTestId('invite-join').click();
    await bob.page.getByTestId('export-classifier').first().waitFor({ timeout: LONG });
    const again = await invite(ada.page, 'bob@lab.org', 'annotator');
    const elsewhere = await person();
    await elsewhere.page.goto(again);
    await elsewhere.page.getByTestId('login-email').fill('bob@lab.org');
    await elsewhere.page.getByTestId('login-password').fill('a long enough password');
    await elsewhere.page.getByTestId('login-submit').click();
    await elsewhere.page.getByTestId('invite-join').click();
    await elsewhere.page.getByTestId('team-name').waitFor();
    assert.equal(await elsewhere.page.getByTestId('export-classifier').count(), 0);

    assert.deepEqual(ada.errors, []);
    assert.deepEqual(bob.errors, []);
    assert.deepEqual(elsewhere.errors, []);
  });
