// Drives Debian's chromium, headless, over the DevTools protocol
// (puppeteer-core from npm, pinned in package.json) for t/220-console.t.
//
// One command per line on stdin, one answer per line on stdout, both JSON:
//   {"op": "open", "url": U, "width": 1280, "height": 900}   a fresh page
//   {"op": "wait", "js": "expression"}      until it is truthy: its value
//   {"op": "eval", "js": "expression"}      its value (awaited)
//   {"op": "click", "sel": S} / {"op": "click", "text": T[, "within": S]}
//   {"op": "type", "sel": S, "text": T}
//   {"op": "key", "key": "Tab"}
//   {"op": "shot", "path": P[, "full": true]}
//   {"op": "report"}   console messages of level error, page errors, failed
//                      requests (no answer, or 4xx/5xx), requests to any
//                      other origin than the page's: everything since the
//                      last report
//   {"op": "close"}   the page and its connections
//   {"op": "quit"}
// Answers: {"ok": true, "value": ...} or {"ok": false, "error": "..."}.
// Every wait is for a condition in the page (waitForFunction), with a
// deadline, never a fixed sleep.

import puppeteer from 'puppeteer-core';
import readline from 'node:readline';

const chromium = process.env.TB_CHROMIUM || '/usr/bin/chromium';
const deadline = Number(process.env.TB_WAIT_MS || 10000);

const browser = await puppeteer.launch({
    executablePath: chromium,
    headless: true,
    // a fresh profile; no network of its own (updates, sync, metrics)
    args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage',
           '--disable-quic', '--no-first-run', '--no-default-browser-check',
           '--disable-background-networking', '--disable-component-update',
           '--disable-sync', '--disable-extensions', '--metrics-recording-only',
           '--disable-default-apps', '--mute-audio', '--password-store=basic'],
});

let page = null, origin = null;
let seen = { errors: [], failed: [], foreign: [], requests: 0 };

function watch(p) {
    p.on('console', m => {
        if (m.type() === 'error') {
            seen.errors.push('console: ' + m.text());
        }
    });
    p.on('pageerror', e => seen.errors.push('page: ' + (e && e.message ? e.message : String(e))));
    p.on('request', r => {
        const u = r.url();
        if (u.startsWith('data:') || u === 'about:blank') {
            return;
        }
        seen.requests++;
        if (origin && new URL(u).origin !== origin) {
            seen.foreign.push(r.method() + ' ' + u);
        }
    });
    p.on('requestfailed', r => {
        const f = r.failure();
        seen.failed.push(r.method() + ' ' + r.url() + ' ' + (f ? f.errorText : 'failed'));
    });
    p.on('response', r => {
        if (r.status() >= 400) {
            seen.failed.push(r.request().method() + ' ' + r.url() + ' ' + r.status());
        }
    });
}

async function run(c) {
    switch (c.op) {
    case 'open': {
        // a new context: its own storage, as a browser seen for the first
        // time; with "keep", the same storage in a new page
        const old = page;
        const ctx = c.keep && old ? old.browserContext() : await browser.createBrowserContext();
        page = await ctx.newPage();
        if (old) {
            await old.close();
            if (!c.keep) {
                await old.browserContext().close();
            }
        }
        await page.setViewport({ width: c.width || 1280, height: c.height || 900,
                                 deviceScaleFactor: 1, isMobile: !!c.mobile, hasTouch: !!c.mobile });
        origin = new URL(c.url).origin;
        watch(page);
        await page.goto(c.url, { waitUntil: 'load', timeout: deadline });
        return page.url();
    }
    case 'close':
        // its connections go with it: nginx then stops without waiting
        // for a socket the browser keeps open for its next request
        if (page) {
            const ctx = page.browserContext();
            await page.close();
            await ctx.close();
            page = null;
        }
        return true;
    case 'goto':
        await page.goto(c.url, { waitUntil: 'load', timeout: deadline });
        return page.url();
    case 'wait': {
        const h = await page.waitForFunction(c.js, { timeout: c.timeout || deadline, polling: 'mutation' })
                            .catch(async e => {
                                const text = await page.evaluate(() => document.body.innerText).catch(() => '');
                                throw new Error('waited ' + (c.timeout || deadline) + ' ms for ' + c.js +
                                                '; the page says: ' + text.slice(0, 1500));
                            });
        return await h.jsonValue();
    }
    case 'eval':
        return await page.evaluate(c.js);
    case 'click': {
        if (c.sel) {
            await page.waitForSelector(c.sel, { visible: true, timeout: deadline });
            await page.click(c.sel);
            return true;
        }
        // the first visible button or link whose text is (or starts with)
        // c.text; found again if the page redrew it meanwhile
        for (let tries = 0; ; tries++) {
            try {
                await clickText(c);
                return true;
            } catch (e) {
                if (tries < 3 && /detached|not clickable|no longer/i.test(String(e.message))) {
                    continue;
                }
                throw e;
            }
        }
    }
    case 'type':
        await page.waitForSelector(c.sel, { visible: true, timeout: deadline });
        await page.type(c.sel, c.text);
        return true;
    case 'key':
        await page.keyboard.press(c.key);
        return await page.evaluate(() => {
            const a = document.activeElement;
            return a ? { tag: a.tagName, text: a.textContent.trim().slice(0, 80), cls: a.className } : null;
        });
    case 'shot':
        await page.screenshot({ path: c.path, fullPage: !!c.full });
        return c.path;
    case 'report': {
        const r = seen;
        seen = { errors: [], failed: [], foreign: [], requests: 0 };
        return r;
    }
    case 'quit':
        await browser.close();
        process.stdout.write(JSON.stringify({ ok: true, value: 'bye' }) + '\n');
        process.exit(0);
    default:
        throw new Error('no op ' + c.op);
    }
}


async function clickText(c) {
    const h = await page.waitForFunction((text, within) => {
        const root = within ? document.querySelector(within) : document;
        if (!root) {
            return null;
        }
        for (const el of root.querySelectorAll('button, a, [role="button"], li[tabindex], tr.link')) {
            const t = el.textContent.trim();
            if ((t === text || t.startsWith(text)) && el.offsetParent !== null && !el.disabled) {
                return el;
            }
        }
        return null;
    }, { timeout: deadline, polling: 'mutation' }, c.text, c.within || null)
        .catch(() => { throw new Error('no clickable "' + c.text + '"'); });
    await h.asElement().click();
}

const rl = readline.createInterface({ input: process.stdin });
for await (const line of rl) {
    let out;
    try {
        out = { ok: true, value: await run(JSON.parse(line)) };
    } catch (e) {
        out = { ok: false, error: e && e.message ? e.message : String(e) };
    }
    if (out.value === undefined) {
        out.value = null;
    }
    process.stdout.write(JSON.stringify(out) + '\n');
}
await browser.close();
