// Opens hpd's Firefox export in the real Firefox Profiler (a build of its web app, served here on
// 127.0.0.1) with headless Chromium, reads its call tree from the page, and checks what it shows
// against the truth the recorded fixtures wrote of themselves. Run by bench/firefox_real_views.sh,
// which records the profiles; see that script's header for what it needs.
//
// node firefox_real_views.js --dist DIR --hpctl PATH [--shots DIR]
//     [--alloc PROFILE --alloc-truth FILE --alloc-mean BYTES]
//     [--cpu PROFILE --cpu-truth FILE] [--calls PROFILE --calls-truth FILE]
//     [--tail PROFILE --tail-report FILE]
//   --dist: the Profiler's built dist/ folder; each profile is served by `hpctl open --no-browser`
//   (the route /from-url/...); --shots: where to save screenshots (PNG), none when not given.
// Prints what it read and "N passed, N failed"; exits 1 when a check failed or the page reported an
// error.
const fs = require('fs');
const http = require('http');
const path = require('path');
const zlib = require('zlib');
const { spawn } = require('child_process');
const { chromium } = require('playwright-core');

const args = {};
for (let i = 2; i < process.argv.length; i += 2) args[process.argv[i].replace(/^--/, '')] = process.argv[i + 1];

let passed = 0;
let failed = 0;
function check(ok, what) {
  if (ok) passed += 1;
  else failed += 1;
  console.log(`${ok ? 'ok  ' : 'FAIL'} ${what}`);
}

// The Profiler's dist/ with every path that is not a file answered by index.html (it routes
// /from-url/... in the page).
const TYPES = {
  '.html': 'text/html', '.js': 'text/javascript', '.mjs': 'text/javascript', '.css': 'text/css',
  '.json': 'application/json', '.wasm': 'application/wasm', '.svg': 'image/svg+xml',
  '.png': 'image/png', '.jpg': 'image/jpeg', '.woff2': 'font/woff2', '.map': 'application/json',
  '.ftl': 'text/plain',
};
function serveDist(dist) {
  const server = http.createServer((req, res) => {
    const rel = decodeURIComponent(req.url.split('?')[0]);
    if (rel === '/sw.js' && !fs.existsSync(path.join(dist, 'sw.js'))) {
      // A dist/ built without the service worker (workbox's step): the page registers one all the
      // same; an empty one does nothing.
      res.writeHead(200, { 'Content-Type': 'text/javascript' });
      res.end('');
      return;
    }
    let file = path.join(dist, path.normalize(rel));
    if (!file.startsWith(dist) || !fs.existsSync(file) || fs.statSync(file).isDirectory()) {
      file = path.join(dist, 'index.html');
    }
    res.writeHead(200, { 'Content-Type': TYPES[path.extname(file)] || 'application/octet-stream' });
    fs.createReadStream(file).pipe(res);
  });
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve(server)));
}

// `hpctl open --no-browser`: the profile on a port of its own; resolves to the Profiler URL it prints.
function hpctlOpen(hpctl, profilerUrl, profile) {
  const child = spawn(hpctl, ['open', '--no-browser', '--profiler-url', profilerUrl, profile],
                      { stdio: ['ignore', 'pipe', 'inherit'] });
  return new Promise((resolve, reject) => {
    let out = '';
    child.stdout.on('data', (d) => {
      out += d;
      const m = out.match(/Firefox Profiler: (\S+)/);
      if (m) resolve({ child, url: m[1] });
    });
    child.on('exit', (code) => reject(new Error(`hpctl open exited ${code}: ${out}`)));
  });
}

function readProfile(file) {
  let bytes = fs.readFileSync(file);
  if (bytes[0] === 0x1f && bytes[1] === 0x8b) bytes = zlib.gunzipSync(bytes);
  return JSON.parse(bytes.toString('utf8'));
}

// "NAME BLOCKS SIZE LEAKED" lines (tests/collect/calls/alloc_fixture.c).
function readAllocTruth(file) {
  const truth = {};
  for (const line of fs.readFileSync(file, 'utf8').split('\n').filter(Boolean)) {
    const [name, blocks, size, leaked] = line.split(' ');
    truth[name] = { blocks: Number(blocks), size: Number(size), leaked: Number(leaked) };
  }
  return truth;
}

// tests/support/alloc_truth.cpp alloc_allowed_error: five standard deviations of the byte sampling's
// estimate of `blocks` blocks of `size` bytes at mean `mean`, plus a byte.
function allowedError(blocks, size, mean) {
  const p = -Math.expm1(-size / mean);
  return 5 * size * Math.sqrt((blocks * (1 - p)) / p) + 1;
}

// Waits until the page has drawn what the last action changed: until the call tree's or marker
// table's rows are the same two frames apart (conditions, not delays: the machine may be loaded).
async function settle(page) {
  await page.evaluate(async () => {
    const frames = () => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)));
    let last = null;
    for (;;) {
      await frames();
      const body = document.querySelector('.treeViewBody');
      const now = body ? body.innerHTML : '';
      if (now === last) return;
      last = now;
    }
  });
}

// The call tree's rows as the page shows them: the scrolled half of each row carries the tree
// level and the Profiler's own description of the node ("NAME, total size is X bytes (P%), self
// size is Y bytes", or "... running count is ..." for samples); the category square its colour.
async function treeRows(page) {
  const size = page.viewportSize();
  await page.setViewportSize({ width: size.width, height: 4000 });
  await settle(page);
  const rows = await page.$$eval('.treeViewRowScrolledColumns', (rows) => rows.map((r) => {
    const label = r.getAttribute('aria-label') || '';
    const m = label.match(/^(.*), (?:total size|running count|running time) is (.+?) (?:bytes|samples?|ms) \((.+?)%\), self (?:size|count|time) is (.+?)(?: bytes| samples?|ms)?$/);
    const num = (s) => (s === undefined || s === '—' ? 0 : Number(s.replace(/,/g, '')));
    const square = r.querySelector('.colored-square');
    return {
      level: Number(r.getAttribute('aria-level')),
      name: m ? m[1] : label,
      total: m ? num(m[2]) : NaN,
      percent: m ? Number(m[3]) : NaN,
      self: m ? num(m[4]) : NaN,
      color: square ? (square.className.match(/category-color-(\S+)/) || [])[1] : undefined,
    };
  }));
  await page.setViewportSize(size);
  return rows;
}

async function setStrategy(page, strategy) {
  await page.selectOption('select.stackSettingsSelect', strategy);
  await page.waitForFunction((s) => document.querySelector('select.stackSettingsSelect').value === s, strategy);
  await settle(page);
}

async function setCheckbox(page, label, on) {
  const box = page.locator('label', { hasText: label }).locator('input[type=checkbox]');
  if ((await box.isChecked()) !== on) await box.click();
  await settle(page);
}

// Opens every node of the first root: selects it and presses '*' (the Profiler's toggle of a node
// and all its descendants) until the root is expanded.
async function expandAll(page) {
  const first = page.locator('.treeViewRowScrolledColumns').first();
  await first.click({ position: { x: 400, y: 5 } });
  await page.focus('.treeViewBody');
  for (let i = 0; i < 2; ++i) {
    await page.keyboard.press('*');
    await settle(page);
    if ((await first.getAttribute('aria-expanded')) === 'true') break;
  }
}

async function openProfile(browser, profilerUrl, hpctl, profile, query) {
  const { child, url } = await hpctlOpen(hpctl, profilerUrl, profile);
  const page = await browser.newPage({ viewport: { width: 1400, height: 760 } });
  const problems = [];
  page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
  page.on('console', (m) => {
    if (m.type() === 'error' || m.type() === 'warning') problems.push(`console ${m.type()}: ${m.text()}`);
  });
  const target = url.replace('/?', `/calltree/?${query ? `${query}&` : ''}`);
  await page.goto(target);
  try {
    await page.waitForSelector('.treeViewRow', { timeout: 120000 });
  } catch (e) {
    const text = await page.innerText('body').catch(() => '');
    throw new Error(`the call tree never showed; the page says: ${text.slice(0, 800)}\n${problems.join('\n')}`);
  }
  // The Profiler opens the heaviest path by itself once the tree is there.
  await settle(page);
  return { page, child, problems };
}

function reportProblems(what, problems) {
  // The Profiler logs no error or warning when a profile loads cleanly; an upgrader's or a
  // processing's complaint about hpd's file is a failure.
  for (const p of problems) console.log(`  ${p}`);
  check(problems.length === 0, `${what}: no page error, console error or warning (${problems.length})`);
}

async function checkAlloc(browser, profilerUrl) {
  const truth = readAllocTruth(args['alloc-truth']);
  const mean = Number(args['alloc-mean']);
  const profile = readProfile(args.alloc);
  const thread = profile.threads.findIndex((t) => t.nativeAllocations && t.nativeAllocations.length > 0);
  check(thread >= 0, 'the export has a thread with native allocations');
  const { page, child, problems } = await openProfile(browser, profilerUrl, args.hpctl, args.alloc, `thread=${thread}`);
  try {
    const offered = await page.$$eval('select.stackSettingsSelect option', (os) => os.map((o) => o.value));
    console.log(`summary strategies offered: ${offered.join(', ')}`);
    for (const s of ['native-allocations', 'native-retained-allocations', 'native-deallocations-memory',
                     'native-deallocations-sites']) {
      check(offered.includes(s), `the call tree offers "${s}"`);
    }
    const allBytes = Object.values(truth).reduce((a, t) => a + t.blocks * t.size, 0);

    // Inverted, the roots are the functions that called the allocator: their bytes are self bytes.
    await setCheckbox(page, 'Invert call stack', true);
    const views = {};
    for (const s of ['native-retained-allocations', 'native-allocations', 'native-deallocations-memory']) {
      await setStrategy(page, s);
      const roots = (await treeRows(page)).filter((r) => r.level === 1);
      views[s] = roots;
      console.log(`${s} (inverted), roots: ${roots.map((r) => `${r.name} ${r.total} B ${r.percent}%`).join('; ')}`);
    }
    const root = (s, name) => views[s].find((r) => r.name === name);
    // Deallocation sites: frees carry no stack (docs/memory.md), so the view has no call node.
    await setStrategy(page, 'native-deallocations-sites');
    const sites = await treeRows(page);
    check(sites.length === 0, `deallocation sites: no call node (${sites.map((r) => r.name).join(', ')})`);

    // Retained memory: the leaking function leads, with the bytes it leaked; the others kept nothing.
    const retained = views['native-retained-allocations'];
    for (const [name, t] of Object.entries(truth)) {
      const row = root('native-retained-allocations', name);
      if (t.leaked > 0) {
        const want = t.leaked * t.size;
        const err = allowedError(t.leaked, t.size, mean);
        check(retained.length > 0 && retained[0].name === name, `retained memory: ${name} leads (first: ${retained[0] && retained[0].name})`);
        check(row && Math.abs(row.total - want) <= err,
              `retained memory: ${name} ${row && row.total} B, the fixture leaked ${want} B (allowed +-${Math.round(err)})`);
      } else {
        check(!row, `retained memory: ${name}, which freed all it allocated, is absent (${row ? row.total : 'absent'})`);
      }
    }
    // Allocations: each function's bytes and share of all bytes.
    for (const [name, t] of Object.entries(truth)) {
      const row = root('native-allocations', name);
      const want = t.blocks * t.size;
      const err = allowedError(t.blocks, t.size, mean);
      check(row && Math.abs(row.total - want) <= err,
            `allocations: ${name} ${row && row.total} B, the fixture allocated ${want} B (allowed +-${Math.round(err)})`);
      const share = (100 * want) / allBytes;
      check(row && Math.abs(row.percent - share) <= 3,
            `allocations: ${name} ${row && row.percent}% of all bytes, the fixture's share ${share.toFixed(1)}% (allowed +-3 points)`);
    }
    // Deallocated memory by allocation site: what the freeing functions allocated, nothing of the leak.
    for (const [name, t] of Object.entries(truth)) {
      const row = root('native-deallocations-memory', name);
      if (t.leaked > 0) {
        check(!row, `deallocated memory: ${name} freed nothing (${row ? row.total : 'absent'})`);
      } else {
        // The Profiler shows deallocated bytes as negative numbers.
        const alloc = root('native-allocations', name);
        check(row && alloc && row.total === -alloc.total,
              `deallocated memory: ${name} ${row && row.total} B, all it allocated (${alloc && alloc.total} B)`);
      }
    }

    // Not inverted, expanded: the roots hold every byte (stacks reach the program's entry).
    await setCheckbox(page, 'Invert call stack', false);
    await setStrategy(page, 'native-retained-allocations');
    await expandAll(page);
    const tree = await treeRows(page);
    console.log('retained memory, call tree:\n' + tree.map((r) => `  ${'  '.repeat(r.level - 1)}${r.name} ${r.total} B (${r.percent}%) self ${r.self} B`).join('\n'));
    const leakName = Object.keys(truth).find((n) => truth[n].leaked > 0);
    const leakRow = tree.find((r) => r.name === leakName);
    const sumRoots = tree.filter((r) => r.level === 1).reduce((a, r) => a + r.total, 0);
    check(leakRow && leakRow.total === root('native-retained-allocations', leakName).total,
          `retained memory, call tree: ${leakName} ${leakRow && leakRow.total} B, as inverted`);
    check(tree.length > 0 && tree[0].level === 1 && tree[0].percent === 100 && sumRoots === tree[0].total,
          `retained memory, call tree: one root with every retained byte (${tree[0] && tree[0].name} ${sumRoots} B)`);
    if (args.shots) {
      await page.setViewportSize({ width: 1300, height: 420 });
      await page.locator('.treeViewRowScrolledColumns', { hasText: leakName }).first().click({ position: { x: 300, y: 5 } });
      await settle(page);
      await page.screenshot({ path: path.join(args.shots, 'firefox-profiler-retained-memory.png') });
      await setStrategy(page, 'native-allocations');
      await setCheckbox(page, 'Invert call stack', true);
      const biggest = views['native-allocations'][0].name;
      await page.locator('.treeViewRowScrolledColumns', { hasText: biggest }).first().click({ position: { x: 300, y: 5 } });
      await settle(page);
      await page.screenshot({ path: path.join(args.shots, 'firefox-profiler-allocations.png') });
    }
    reportProblems('allocation profile', problems);
  } finally {
    child.kill('SIGTERM');
    await page.close();
  }
}

function threadIndex(profile, name) {
  return profile.threads.findIndex((t) => t.name === name);
}

// cpu_wait's lines: "cpu_wait: NAME tid N cpu_ns N wall_ns N ...".
function readCpuTruth(file) {
  const out = {};
  for (const line of fs.readFileSync(file, 'utf8').split('\n')) {
    const m = line.match(/^cpu_wait: (\S+) (.*)$/);
    if (!m) continue;
    const f = m[2].split(' ');
    const rec = {};
    for (let i = 0; i + 1 < f.length; i += 2) rec[f[i]] = Number(f[i + 1]);
    out[m[1]] = rec;
  }
  return out;
}

async function checkCpu(browser, profilerUrl) {
  const profile = readProfile(args.cpu);
  const truth = readCpuTruth(args['cpu-truth']);
  const intervalMs = profile.meta.interval;
  for (const name of ['spin_a', 'sleeper']) {
    const thread = threadIndex(profile, name);
    check(thread >= 0, `the CPU export has a thread ${name}`);
    if (thread < 0) continue;
    const { page, child, problems } = await openProfile(browser, profilerUrl, args.hpctl, args.cpu, `thread=${thread}`);
    try {
      const selected = await page.innerText('.timelineTrackRow.selected');
      check(selected.split('\n')[0].trim() === name, `${name}: its track is the selected one (${selected.split('\n')[0]})`);
      await setCheckbox(page, 'Include idle samples', true);
      await expandAll(page);
      const withIdle = await treeRows(page);
      await setCheckbox(page, 'Include idle samples', false);
      await expandAll(page);
      const cpuOnly = await treeRows(page);
      const total = (rows) => rows.filter((r) => r.level === 1).reduce((a, r) => a + r.total, 0);
      const idleNames = /^\[(blocked|waiting for CPU)\]$/;
      const idleRows = withIdle.filter((r) => idleNames.test(r.name));
      if (process.env.VERBOSE) console.log(withIdle.map((r) => `  ${'  '.repeat(r.level - 1)}${r.name} ${r.total} ${r.color}`).join('\n'));
      console.log(`${name}: ${total(withIdle)} samples with idle ones (${idleRows.map((r) => `${r.name} ${r.total}`).join(', ')}), ${total(cpuOnly)} without`);
      const t = truth[name];
      // What the thread did (its own clocks over its whole life): CPU time, and the rest off the CPU.
      const cpuSamples = t.life_cpu_ns / 1e6 / intervalMs;
      const lifeSamples = t.life_wall_ns / 1e6 / intervalMs;
      check(idleRows.length > 0, `${name}: idle samples shown ([blocked] / [waiting for CPU] nodes)`);
      // Off the CPU: waiting for a CPU is the kernel's runqueue wait, blocked the rest of its life.
      const idleSum = (n) => idleRows.filter((r) => r.name === n).reduce((a, r) => a + r.total, 0);
      const waitSamples = t.life_run_delay_ns / 1e6 / intervalMs;
      const blockedSamples = (t.life_wall_ns - t.life_cpu_ns - t.life_run_delay_ns) / 1e6 / intervalMs;
      check(Math.abs(idleSum('[waiting for CPU]') - waitSamples) <= 0.1 * waitSamples + 5,
            `${name}: [waiting for CPU] ${idleSum('[waiting for CPU]')} samples, the thread's runqueue wait ${waitSamples.toFixed(1)} intervals`);
      check(Math.abs(idleSum('[blocked]') - blockedSamples) <= 0.1 * blockedSamples + 5,
            `${name}: [blocked] ${idleSum('[blocked]')} samples, the rest of the thread's life ${blockedSamples.toFixed(1)} intervals`);
      check(!cpuOnly.some((r) => idleNames.test(r.name)), `${name}: "Include idle samples" unticked removes every [blocked] / [waiting for CPU] node`);
      // Sampling at a fixed interval: within 10% and 5 samples of the thread's CPU time.
      check(Math.abs(total(cpuOnly) - cpuSamples) <= 0.1 * cpuSamples + 5,
            `${name}: CPU samples without idle ones ${total(cpuOnly)}, the thread's CPU time ${cpuSamples.toFixed(1)} intervals`);
      check(total(withIdle) >= total(cpuOnly) && Math.abs(total(withIdle) - lifeSamples) <= 0.1 * lifeSamples + 5,
            `${name}: samples with idle ones ${total(withIdle)}, the thread's life ${lifeSamples.toFixed(1)} intervals`);
      const grey = cpuOnly.filter((r) => r.color === 'grey');
      check(grey.length === 0, `${name}: no CPU call node is grey (${grey.map((r) => r.name).join(', ')})`);
      const greyIdle = withIdle.filter((r) => r.color === 'grey');
      check(greyIdle.length === 0, `${name}: no call node is grey with idle samples included (${greyIdle.map((r) => r.name).join(', ')})`);
      reportProblems(`CPU profile, ${name}`, problems);
    } finally {
      child.kill('SIGTERM');
      await page.close();
    }
  }
}

// "1.5ms", "950μs", "2.0s", "10,033,803ns": milliseconds.
function durationMs(text) {
  const m = text.trim().match(/^([\d,.]+)\s*(ns|μs|µs|us|ms|s)$/);
  if (!m) return NaN;
  const scale = { ns: 1e-6, 'μs': 1e-3, 'µs': 1e-3, us: 1e-3, ms: 1, s: 1e3 }[m[2]];
  return Number(m[1].replace(/,/g, '')) * scale;
}

// The latency fixture's lines (tests/collect/calls/calls_latency.c): "name calls avg_ns p95_ns outer_ns".
function readLatencyTruth(file) {
  const out = {};
  for (const line of fs.readFileSync(file, 'utf8').split('\n').filter(Boolean)) {
    const [name, calls, avg, p95, outer] = line.split(' ');
    out[name] = { calls: Number(calls), avgNs: Number(avg), p95Ns: Number(p95), outerNs: Number(outer) };
  }
  return out;
}

// The selected track's Marker Table as the page shows it, once a row's label matches `label`: each
// row's name (its fixed half is start, duration and name) and label (the scrolled half).
async function markerTableRows(page, label) {
  await page.locator('.tabBarTab', { hasText: 'Marker Table' }).click();
  await page.waitForFunction((source) => [...document.querySelectorAll('.treeViewRowScrolledColumns')]
    .some((r) => new RegExp(source).test(r.innerText)), label.source, { timeout: 30000 });
  const size = page.viewportSize();
  await page.setViewportSize({ width: size.width, height: 4000 });
  await settle(page);
  const text = (sel) => page.$$eval(sel, (rs) => rs.map((r) => r.innerText.replace(/\s+/g, ' ').trim()));
  const fixed = await text('.treeViewRowFixedColumns');
  const labels = await text('.treeViewRowScrolledColumns');
  await page.setViewportSize(size);
  return fixed.map((f, i) => ({ name: f.split(' ').slice(2).join(' '), label: labels[i] }));
}

async function checkCalls(browser, profilerUrl) {
  const truth = readLatencyTruth(args['calls-truth']);
  const { page, child, problems } = await openProfile(browser, profilerUrl, args.hpctl, args.calls, '');
  try {
    // As a user would: select the process's calls track, then the marker table.
    await page.locator('.timelineTrackLocalRow', { hasText: 'calls (exact)' }).first().click();
    await settle(page);
    const selected = await page.innerText('.timelineTrackRow.selected');
    check(selected.trim() === 'calls (exact)', `the calls track is the selected one (${selected.trim()})`);
    const rows = await markerTableRows(page, / calls, avg /);
    console.log('calls track, marker table:\n' + rows.map((r) => `  ${r.name}: ${r.label}`).join('\n'));
    const marker = (name) => {
      const row = rows.find((r) => r.name === name);
      const m = row && row.label.match(/^(\d[\d,]*) calls, avg (\S+), p95 (\S+), max (\S+), total (\S+)$/);
      check(!!m, `calls track: a latency marker for ${name} (${row && row.label})`);
      return m && { calls: Number(m[1].replace(/,/g, '')), avg: m[2], p95: m[3], total: m[5] };
    };
    // tests/collect/calls/calls_record_test.cpp LatencyMatchesWhatTheProgramMeasured: the average
    // within 5%, the 95th percentile within 10% of the program's own measurement.
    const near = (shown, ns, fraction) => Math.abs(durationMs(shown) - ns / 1e6) <= fraction * (ns / 1e6);
    for (const name of ['spin_for', 'sleep_for']) {
      const t = truth[name];
      const m = marker(name);
      if (!m) continue;
      check(m.calls === t.calls, `${name}: ${m.calls} calls, the fixture made ${t.calls}`);
      check(near(m.avg, t.avgNs, 0.05), `${name}: avg ${m.avg}, the fixture measured ${(t.avgNs / 1e6).toFixed(3)}ms (allowed 5%)`);
      check(near(m.p95, t.p95Ns, 0.1), `${name}: p95 ${m.p95}, the fixture measured ${(t.p95Ns / 1e6).toFixed(3)}ms (allowed 10%)`);
    }
    // rec recurses 10 deep: every level is a call; its total counts each outermost call once.
    const rec = marker('rec');
    if (rec) {
      check(rec.calls === 10 * truth.rec.calls, `rec: ${rec.calls} calls, the fixture made ${truth.rec.calls} outer calls 10 deep`);
      check(near(rec.total, truth.rec.outerNs, 0.05),
            `rec: total ${rec.total}, the fixture measured ${(truth.rec.outerNs / 1e6).toFixed(3)}ms around its outer calls (allowed 5%)`);
    }
    reportProblems('calls profile', problems);
  } finally {
    child.kill('SIGTERM');
    await page.close();
  }
}

// The tail_calls fixture (tests/fixtures/tail_calls.c) recorded into a capture and converted: its
// thread's Marker Table has the HpdTailCall marker of main -> spin with the samples the capture's
// report (`hpctl report --json --callers spin`, --tail-report) gives the marked edge and their share
// of the thread's, no marker for the ordinary edges, and the call tree has no node of hpd's for it.
async function checkTailCalls(browser, profilerUrl) {
  const report = JSON.parse(fs.readFileSync(args['tail-report'], 'utf8'));
  const marked = report.tree.children.filter((c) => c.name === 'main' && c.tail_call);
  check(marked.length === 1, `the capture's report marks spin <- [tail call] main (${marked.length})`);
  if (marked.length !== 1) return;
  const samples = marked[0].samples;
  const { page, child, problems } = await openProfile(browser, profilerUrl, args.hpctl, args.tail, '');
  try {
    const tree = await treeRows(page);
    check(tree.length > 0 && !tree.some((r) => /tail call/.test(r.name)),
          `the call tree has no tail-call node (${tree.length} rows)`);
    // The marker table's search keeps the thread's many off-CPU markers out of the way.
    await page.locator('.tabBarTab', { hasText: 'Marker Table' }).click();
    await page.fill('.markerSettingsSearchField input', 'tail call');
    const rows = await markerTableRows(page, /on-CPU samples, /);
    console.log('tail_calls thread, marker table searched for "tail call":\n' +
                rows.map((r) => `  ${r.name}: ${r.label}`).join('\n'));
    const row = rows.find((r) => r.name === 'main \u2192 spin (tail call)');
    const m = row && row.label.match(/^(\d[\d,]*) on-CPU samples, ([\d.]+)% of the thread's$/);
    check(!!m, `a tail-call marker "main \u2192 spin (tail call)" (${row && row.label})`);
    if (m) {
      const shown = Number(m[1].replace(/,/g, ''));
      check(shown === samples, `main \u2192 spin: ${shown} samples, the capture's report marks ${samples}`);
      // formatPercent: two significant digits.
      const percent = (100 * samples) / report.all_samples;
      check(Math.abs(Number(m[2]) - percent) <= 0.5,
            `main \u2192 spin: ${m[2]}% of the thread's samples, the report ${percent.toFixed(2)}%`);
    }
    check(!rows.some((r) => /direct/.test(r.name)), 'no tail-call marker for the ordinary edges through direct');
    reportProblems('tail-call profile', problems);
  } finally {
    child.kill('SIGTERM');
    await page.close();
  }
}

async function main() {
  const dist = path.resolve(args.dist);
  const server = await serveDist(dist);
  const profilerUrl = `http://127.0.0.1:${server.address().port}`;
  const userDataDir = fs.mkdtempSync('/tmp/hpd-ffreal-chromium-');
  const context = await chromium.launchPersistentContext(userDataDir, {
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    headless: true,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
           '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
  const browser = { newPage: (opts) => context.newPage().then(async (p) => { await p.setViewportSize(opts.viewport); return p; }) };
  try {
    if (args.alloc) await checkAlloc(browser, profilerUrl);
    if (args.cpu) await checkCpu(browser, profilerUrl);
    if (args.calls) await checkCalls(browser, profilerUrl);
    if (args.tail) await checkTailCalls(browser, profilerUrl);
  } finally {
    await context.close();
    server.close();
    fs.rmSync(userDataDir, { recursive: true, force: true });
  }
  console.log(`${passed} passed, ${failed} failed`);
  process.exit(failed === 0 ? 0 : 1);
}

main().catch((e) => {
  console.error(e);
  console.log(`${passed} passed, ${failed + 1} failed`);
  process.exit(1);
});
