// Takes docs/images/firefox-profiler-call-latency.png: opens a Firefox Profiler URL (a marker chart
// or table) in headless Chromium, waits for SELECTOR, and saves a screenshot.
// Usage: node firefox-profiler-markers.js URL OUT.png SELECTOR
// Needs playwright-core (npm) and /usr/bin/chromium; see README.md beside this file.
const { chromium } = require('playwright-core');

async function main() {
  const [url, out, selector] = process.argv.slice(2);
  if (!selector) throw new Error('usage: firefox-profiler-markers.js URL OUT.png SELECTOR');
  const browser = await chromium.launch({ executablePath: '/usr/bin/chromium', args: ['--no-sandbox', '--disable-gpu'] });
  const page = await browser.newPage({ viewport: { width: 1600, height: 640 } });
  await page.goto(url);
  await page.waitForSelector(selector, { timeout: 120000 });
  await page.waitForTimeout(2000);  // the chart draws after the selector appears
  console.log((await page.innerText('body')).slice(0, 3000));
  await page.screenshot({ path: out });
  await browser.close();
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
