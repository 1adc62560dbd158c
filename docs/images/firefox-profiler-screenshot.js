// Takes docs/images/firefox-profiler.png: opens a profile in a locally served Firefox Profiler with
// headless Chromium, waits for the call tree to render, arranges it, and saves a screenshot.
// Usage: node firefox-profiler-screenshot.js PROFILER_URL PROFILE_URL OUT.png [QUERY]
//   TOGGLE=a,b  open or close one level of the call-tree rows with these function names, in order
//   SELECT=name select this row (the sidebar shows it); HEIGHT=px viewport height (default 1000)
// Needs playwright-core (npm) and /usr/bin/chromium; see README.md beside this file.
const { chromium } = require('playwright-core');

async function main() {
  const [profilerUrl, profileUrl, out, query = ''] = process.argv.slice(2);
  if (!out) throw new Error('usage: firefox-profiler-screenshot.js PROFILER_URL PROFILE_URL OUT.png [QUERY]');
  const browser = await chromium.launch({
    executablePath: '/usr/bin/chromium',
    args: ['--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking',
           '--disable-component-update', '--disable-sync'],
  });
  const page = await browser.newPage({ viewport: { width: 1600, height: Number(process.env.HEIGHT || 1000) } });
  page.on('pageerror', (e) => console.log('page error:', e.message));
  await page.goto(`${profilerUrl}/from-url/${encodeURIComponent(profileUrl)}/calltree/${query}`);
  // The Profiler expands the heaviest path once the tree is there; let it settle before clicking.
  await page.waitForSelector('.treeViewRow', { timeout: 120000 });
  await page.waitForTimeout(1500);

  const rowNamed = async (name) => {
    for (const row of await page.$$('.treeViewRow')) {
      if ((await row.innerText()).split(/\s+/).includes(name)) return row;
    }
    throw new Error(`no call tree row named ${name}`);
  };
  for (const name of (process.env.TOGGLE || '').split(',').filter(Boolean)) {
    await (await (await rowNamed(name)).$('.treeRowToggleButton')).click();
    await page.waitForTimeout(300);
  }
  if (process.env.SELECT) {
    // Clicked right of the twisty, so the row is selected and not toggled.
    await (await rowNamed(process.env.SELECT)).click({ position: { x: 700, y: 5 } });
    await page.waitForTimeout(500);
  }
  const rows = await page.$$eval('.treeViewRow', (rs) => rs.map((r) => r.innerText.replace(/\s+/g, ' ')));
  console.log(rows.join('\n'));
  await page.screenshot({ path: out });
  await browser.close();
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
