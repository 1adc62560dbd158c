// Takes docs/images/firefox-profiler-source-view.png: opens the URL `hpctl open --no-browser` printed
// (pointed at a locally served Firefox Profiler with --profiler-url) in headless Chromium, selects a
// function in the call tree and opens its source view, which asks hpctl's symbol-server API for the
// file, then saves a screenshot once the source lines with their sample counts are there.
// Usage: FUNCTION=name node firefox-profiler-source-view.js URL OUT.png
//   THREAD=n selects that thread first (URL query `thread`); QUERY=... more of the URL's query (e.g.
//   `&hideIdleSamples`); HEIGHT=px viewport height (default 900)
// Needs playwright-core (npm) and /usr/bin/chromium; see README.md beside this file.
const { chromium } = require('playwright-core');

async function main() {
  const [url, out] = process.argv.slice(2);
  const fn = process.env.FUNCTION;
  if (!out || !fn) throw new Error('usage: FUNCTION=name firefox-profiler-source-view.js URL OUT.png');
  const browser = await chromium.launch({
    executablePath: '/usr/bin/chromium',
    args: ['--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking',
           '--disable-component-update', '--disable-sync'],
  });
  const page = await browser.newPage({ viewport: { width: 1600, height: Number(process.env.HEIGHT || 900) } });
  page.on('pageerror', (e) => console.log('page error:', e.message));
  page.on('requestfailed', (r) => console.log('request failed:', r.url(), r.failure().errorText));
  // The printed URL ends in `/?symbolServer=...`: open the call tree of the chosen thread, inverted
  // so that the function with the self time is a root row.
  const [base, query] = url.split('?');
  const thread = process.env.THREAD ? `&thread=${process.env.THREAD}` : '';
  const more = process.env.QUERY || '';
  await page.goto(`${base.replace(/\/$/, '')}/calltree/?${query}${thread}${more}&invertCallstack`);
  await page.waitForSelector('.treeViewRow', { timeout: 120000 });
  await page.waitForTimeout(1500);
  let target = null;
  for (const row of await page.$$('.treeViewRow')) {
    if (!target && (await row.innerText()).split(/\s+/).includes(fn)) target = row;
  }
  if (!target) throw new Error(`no call tree row named ${fn}`);
  // A double click on a call-tree row opens the bottom box with the function's source.
  await target.dblclick({ position: { x: 700, y: 5 } });
  await page.waitForSelector('.cm-line', { timeout: 60000 });
  await page.waitForTimeout(2000);
  const lines = await page.$$eval('.cm-line', (ls) => ls.slice(0, 12).map((l) => l.innerText));
  console.log(lines.join('\n'));
  const error = await page.$$eval('.sourceView .codeLoadingOverlay, .sourceView .codeErrorOverlay', (es) =>
    es.map((e) => e.innerText));
  if (error.length) console.log('overlay:', error.join(' | '));
  await page.screenshot({ path: out });
  await browser.close();
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
