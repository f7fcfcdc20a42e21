/*
 * The tokenbiryani console: plain JavaScript on the admin API, no build
 * step, no framework, nothing fetched from any host but this gateway.
 *
 * The admin key stays in this browser (localStorage) and travels only in
 * the x-api-key header.  Every string from the gateway reaches the page as
 * text (textContent, createTextNode), never as markup.  Time is the primary
 * axis: countdowns tick once a second and are the only animation.
 */

'use strict';

(function () {

const KEY_STORE = 'tokenbiryani.key';
const THEME_STORE = 'tokenbiryani.theme';
const ADMIN = '/admin/';

const S = {
    key: null,          /* the admin key; null in open mode */
    open: false,        /* the gateway has no keys: it asks for none */
    page: null,         /* the page's cleanup */
    timers: [],         /* the page's polls */
    status: null,       /* the last /admin/status, and when it came */
    statusAt: 0,
    offline: 0,         /* failed polls in a row */
};

/* the building blocks: console-dom.js */
const {
    load, save, h, s, set, add, clear, put, fill, $,
    fmtInt, fmtTokens, fmtUsd, fmtPct, fmtClock, fmtSpan, fmtMs, fmtAgo,
    parseTime, countdown, since, tick,
} = TBUI;

/* ---- the admin API ---- */

class ApiError extends Error {
    constructor(status, message, body) {
        super(message);
        this.status = status;
        this.body = body;
    }
}

async function api(method, path, body) {
    const headers = { 'accept': 'application/json' };
    if (S.key) {
        headers['x-api-key'] = S.key;
    }
    const init = { method: method, headers: headers, cache: 'no-store', credentials: 'omit' };
    if (body !== undefined) {
        headers['content-type'] = 'application/json';
        init.body = JSON.stringify(body);
    }
    let res;
    try {
        res = await fetch(ADMIN + path, init);
    } catch (e) {
        offline(true);
        throw new ApiError(0, 'the gateway did not answer', null);
    }
    offline(false);
    let data = null;
    try { data = await res.json(); } catch (e) { data = null; }
    if (!res.ok) {
        const msg = data && data.error && data.error.message
                    ? data.error.message : 'HTTP ' + res.status;
        if (res.status === 401 || (res.status === 403 && S.key && /admin/.test(msg))) {
            signedOut(msg, res.status);
        }
        throw new ApiError(res.status, msg, data);
    }
    return data;
}

function offline(yes) {
    const el = $('conn');
    if (!el) { return; }
    if (yes) {
        S.offline++;
        el.className = 'conn offline';
        el.textContent = '✕ the gateway is not answering — retrying';
    } else if (S.offline) {
        S.offline = 0;
        el.className = 'conn';
        el.textContent = '';
    }
}

/* a poll that backs off while the gateway does not answer (at most 30 s) */
function poll(fn, ms) {
    let stopped = false, handle = null;
    const run = async () => {
        if (stopped) { return; }
        if (!document.hidden) {
            try { await fn(); } catch (e) { /* shown where it belongs */ }
        }
        if (!stopped) {
            const wait = S.offline ? Math.min(30000, ms * Math.pow(2, S.offline)) : ms;
            handle = setTimeout(run, wait);
        }
    };
    S.timers.push(() => { stopped = true; clearTimeout(handle); });
    run();
}

/* ---- signing in ---- */

async function start() {
    applyTheme(load(THEME_STORE) || 'dark');

    /* a one-time ticket from `tokenbiryani console`, in the fragment (never
     * sent to a server by the browser); it is redeemed once and removed */
    const m = /^#ticket=([0-9a-f]{32})$/.exec(location.hash);
    if (m) {
        history.replaceState(null, '', location.pathname + '#/');
        try {
            const res = await fetch('ticket', {
                method: 'POST', cache: 'no-store', credentials: 'omit',
                headers: { 'content-type': 'application/json' },
                body: JSON.stringify({ ticket: m[1] }),
            });
            const j = await res.json();
            if (!res.ok) {
                throw new Error(j && j.error ? j.error.message : 'HTTP ' + res.status);
            }
            if (j.open) {
                save(KEY_STORE, null);
            } else {
                save(KEY_STORE, j.key);
            }
        } catch (e) {
            gate('This sign-in link was used or has expired (' + e.message
                 + '). Run tokenbiryani console again, or paste the admin key.');
            return;
        }
    }

    S.key = load(KEY_STORE);

    /* no key here: ask one only of a gateway that has keys */
    if (!S.key) {
        let mode = null;
        try {
            const res = await fetch('mode', { cache: 'no-store', credentials: 'omit' });
            mode = await res.json();
        } catch (e) {
            gate('The gateway did not answer: is it running?');
            return;
        }
        if (!mode.open) {
            gate(null);
            return;
        }
    }
    await signIn();
}

async function signIn() {
    try {
        const st = await api('GET', 'status');
        S.open = !S.key;
        S.status = st;
        S.statusAt = Date.now();
    } catch (e) {
        gate(e.status === 0 ? 'The gateway did not answer: is it running?' : refusal(e));
        return;
    }
    $('gate').hidden = true;
    $('app').hidden = false;
    $('signout').hidden = S.open;
    if (S.open) {
        $('conn').textContent = 'open mode: this gateway asks no key on this machine';
    }
    if (!location.hash || location.hash === '#/') {
        location.replace('#/' + (S.status.accounts.length ? 'overview' : 'welcome'));
    }
    route();
}

function refusal(e) {
    if (e.status === 401) {
        return 'This key was refused: ' + e.message + '.';
    }
    if (e.status === 403) {
        return 'This key is not an admin key (' + e.message + '): the console needs a key with admin: true.';
    }
    return 'The gateway answered ' + e.status + ': ' + e.message;
}

function gate(message) {
    stopPage();
    $('app').hidden = true;
    $('gate').hidden = false;
    $('gate-error').textContent = message || '';
    $('gate-key').focus();
}

function signedOut(message, status) {
    save(KEY_STORE, null);
    S.key = null;
    gate(refusal({ status: status, message: message }));
}

/* ---- pages ---- */

function stopPage() {
    for (const t of S.timers) { t(); }
    S.timers = [];
    if (S.page) { S.page(); S.page = null; }
}

function route() {
    if ($('app').hidden) { return; }
    stopPage();
    const parts = location.hash.replace(/^#\/?/, '').split('/');
    const name = PAGES[parts[0]] ? parts[0] : 'overview';
    for (const a of document.querySelectorAll('#nav a')) {
        if (a.dataset.page === name) {
            a.setAttribute('aria-current', 'page');
            /* on a phone the tabs scroll sideways: this one in sight */
            if ($('nav').scrollWidth > $('nav').clientWidth) {
                a.scrollIntoView({ block: 'nearest', inline: 'center' });
            }
        } else {
            a.removeAttribute('aria-current');
        }
    }
    const main = clear($('main'));
    document.title = TITLES[name] + ' · tokenbiryani';
    const r = PAGES[name](main, parts.slice(1).map(decodeURIComponent));
    S.page = typeof r === 'function' ? r : null;
}

function head(title, ...extra) {
    return h('div', { class: 'page-head' }, h('h1', { text: title }), h('span', { class: 'spacer' }), extra);
}

function problem(el, e, what) {
    clear(el);
    el.appendChild(h('div', { class: 'banner bad', role: 'alert' },
        (what ? what + ': ' : '') + (e && e.message ? e.message : String(e))));
}

function tableOf(cols, rows, opts) {
    opts = opts || {};
    const thead = h('thead', null, h('tr', null, cols.map(c =>
        h('th', { class: c.n ? 'n' : null, scope: 'col', text: c.t }))));
    const tbody = h('tbody');
    for (const r of rows) {
        const tr = h('tr', null, cols.map(c => {
            const v = c.f(r);
            return h('td', { class: c.n ? 'n' : (c.cls || null) }, v);
        }));
        if (opts.open) {
            const go = () => opts.open(r);
            tr.className = 'link';
            tr.tabIndex = 0;
            tr.addEventListener('click', (ev) => {
                if (!ev.target.closest('button, a')) { go(); }
            });
            tr.addEventListener('keydown', (ev) => {
                if (ev.key === 'Enter' && ev.target === tr) { go(); }
            });
        }
        tbody.appendChild(tr);
    }
    if (opts.total) {
        tbody.appendChild(h('tr', { class: 'total' }, cols.map(c =>
            h('td', { class: c.n ? 'n' : null }, c.total ? c.total(opts.total) : ''))));
    }
    const t = h('table', null, opts.caption ? h('caption', { class: 'muted', text: opts.caption }) : null, thead, tbody);
    if (!rows.length && opts.empty) {
        tbody.appendChild(h('tr', null, h('td', { colspan: String(cols.length), class: 'muted', text: opts.empty })));
    }
    return h('div', { class: 'scroll' }, t);
}

const STATE_SYM = { ready: '●', cooling: '◐', exhausted: '◌', disabled: '○', failing: '✕' };

function statePill(a) {
    const st = a.state || 'disabled';
    if (needsBilling(a)) {
        /* no countdown: it comes back when someone pays, not in an hour */
        return h('span', { class: 'pill st-failing', title: a.reason }, STATE_SYM.exhausted, ' needs billing action');
    }
    const pill = h('span', { class: 'pill st-' + st, title: a.reason || st },
        STATE_SYM[st] || '•', ' ', st);
    if (a.until_in !== null && a.until_in !== undefined && st !== 'ready') {
        pill.appendChild(document.createTextNode(' '));
        pill.appendChild(countdown(a.until_in));
    }
    return pill;
}

/* the remaining part of a window, or null when nothing was observed */
function level(w) {
    if (!w || w.limit === null || w.limit === undefined || w.remaining === null || !w.limit) {
        return null;
    }
    return Math.max(0, Math.min(1, w.remaining / w.limit));
}

/* one meter: what is left (f, 0..1, or null: not known), labelled k */
function meterRow(k, f, label, title) {
    const bar = h('span');
    const m = h('div', {
        class: 'meter' + (f === null ? ' unknown' : f < 0.05 ? ' empty' : f < 0.2 ? ' low' : ''),
        role: 'meter', 'aria-label': k + ' ' + label,
        'aria-valuemin': '0', 'aria-valuemax': '100',
        'aria-valuenow': f === null ? null : String(Math.round(f * 100)),
        title: title,
    }, bar);
    bar.style.width = f === null ? '0' : (f * 100).toFixed(1) + '%';
    return [h('span', { class: 'k', text: k }), m, h('span', { class: 'num', text: f === null ? '—' : fmtPct(f) })];
}

/* the operator's subscription: its 5-hour and 7-day windows, what is left */
function subscriptionMeters(sub) {
    const wins = sub.windows || {};
    return h('div', { class: 'meters subscription' }, [['5h', wins['5h']], ['7d', wins['7d']]].map(([k, w]) => {
        const u = w && w.utilization !== null && w.utilization !== undefined ? w.utilization : null;
        return meterRow(k, u === null ? null : Math.max(0, Math.min(1, 1 - u)), 'window left',
                        u === null ? 'not seen yet'
                                   : fmtPct(u) + ' used' + (w.status ? ' (' + w.status + ')' : '')
                                     + (w.resets_in ? ', resets in ' + fmtClock(w.resets_in) : ''));
    }));
}

function meters(a) {
    const lim = a.limits || {};
    if (a.subscription) {
        return subscriptionMeters(a.subscription);
    }
    if (lim.observable === false) {
        /* Bedrock, Vertex: no headers to read; empty is not full */
        return h('div', { class: 'meters unobservable', title: lim.unobservable || '',
                          text: 'limits unobservable' + (a.concurrency && a.concurrency.learned
                                ? ' · learned concurrency ' + a.concurrency.learned : '') });
    }
    const rows = [['req', lim.requests], ['in', lim.input_tokens], ['out', lim.output_tokens]];
    return h('div', { class: 'meters' }, rows.map(([k, w]) => {
        const f = level(w);
        return meterRow(k, f, 'headroom', f === null ? 'not observed yet'
                                                     : fmtInt(w.remaining) + ' of ' + fmtInt(w.limit) + ' left');
    }));
}

function soonestReset(a) {
    const lim = a.limits || {};
    let best = null;
    for (const w of [lim.requests, lim.input_tokens, lim.output_tokens]) {
        if (w && w.reset_in !== null && w.reset_in !== undefined && w.reset_in > 0) {
            best = best === null ? w.reset_in : Math.min(best, w.reset_in);
        }
    }
    return best;
}

/* the spend window every spend figure of an account or key is over */
function spendHours(accounts) {
    const a = (accounts || []).find(x => x.usage && x.usage.window_hours);
    return a ? a.usage.window_hours : 24;
}

/* an account's spend: its cap's window, in flight included (as the API,
 * the command and the cap count it) */
function spendCell(a) {
    if (!a.usage) { return '—'; }
    return h('span', { title: 'in the last ' + a.usage.window_hours + ' h, ' + fmtUsd(a.usage.in_flight_usd) + ' of it in flight; ' +
                               fmtUsd(a.usage.cost_usd) + ' since nginx started', text: fmtUsd(a.usage.window_usd) });
}

function accountLink(id) {
    return id ? h('a', { href: '#/accounts/' + encodeURIComponent(id), text: id }) : h('span', { class: 'muted', text: '—' });
}

function requestLink(id) {
    return h('a', { href: '#/requests/' + encodeURIComponent(id), class: 'mono', text: id.replace(/^tbr_/, '').slice(0, 10) + '…' });
}

async function refreshStatus() {
    S.status = await api('GET', 'status');
    S.statusAt = Date.now();
    return S.status;
}

/* ---- Overview ---- */

function pageOverview(main) {
    const answer = h('div', { class: 'card' });
    const tiles = h('div', { class: 'tiles' });
    const horizon = h('div', { class: 'card' });
    const accounts = h('div', { class: 'card' });
    const feed = h('ul', { class: 'feed', 'aria-label': 'Live requests, newest first' });
    const feedCard = h('div', { class: 'card' }, h('h2', { text: 'Live requests' }),
        h('p', { class: 'muted', text: 'Newest first, from the gateway\'s event ring; a row opens the inspector.' }), feed);
    put(main, head('Overview'), answer, tiles, h('div', { class: 'cards' }, horizon, feedCard), accounts);

    let day = null;

    const draw = (st, hz) => {
        const pool = st.pool;
        clear(answer);
        if (!pool.total) {
            put(answer, h('div', { class: 'answer no' }, h('span', { class: 'big', text: '○' }),
                h('div', null, h('strong', { text: 'No account yet. ' }),
                  'The pool is empty: ', h('a', { href: '#/welcome', text: 'add a credential' }), ' to serve requests.')));
        } else if (pool.ready) {
            put(answer, h('div', { class: 'answer yes' }, h('span', { class: 'big', text: '●' }),
                h('div', null, h('strong', { text: 'Yes, a request can go now. ' }),
                  pool.ready + ' of ' + pool.total + ' account' + (pool.total > 1 ? 's' : '') + ' ready' +
                  (st.queue.depth ? ', ' + st.queue.depth + ' waiting in the queue' : '') + '.',
                  pool.failing ? [' ', failingSentence(st)] : null)));
        } else if (pool.failing) {
            put(answer, h('div', { class: 'answer failing' }, h('span', { class: 'big', text: '✕' }),
                h('div', null, h('strong', { text: 'Not now. ' }), failingSentence(st),
                  ' Requests are still tried on them (one at a time while a circuit is half-open); while they fail, clients get ' +
                  '502 or 504, and 429 with retry-after while a circuit is open.')));
        } else {
            let soon = null;
            for (const a of st.accounts) {
                if (a.state !== 'disabled' && a.until_in !== null) {
                    soon = soon === null ? a.until_in : Math.min(soon, a.until_in);
                }
            }
            /* what clients get: a wait they will sit through, or a 429 */
            const limit = st.queue.max_wait_seconds;
            put(answer, h('div', { class: 'answer wait' }, h('span', { class: 'big', text: '◐' }),
                h('div', null, h('strong', { text: 'Not now. ' }),
                  soon === null ? 'Every account is disabled: enable one on the Accounts page.'
                  : limit !== undefined && soon > limit
                  ? ['Capacity comes back in ', countdown(soon), ', longer than a request may wait in the queue (' +
                     fmtClock(limit) + '): until then clients get 429 with retry-after.']
                  : ['Capacity comes back in ', countdown(soon), '; requests wait in the queue until then.'])));
        }

        const cache = day && day.totals ? day.totals.cache_hit_rate : poolCacheRate(st);
        /* the history's last 24 h (answered requests); without a store,
         * the accounts' cap windows (in flight included), said as such */
        const spend = day && day.totals ? day.totals.cost_usd : st.accounts.reduce((t, a) => t + (a.usage ? a.usage.window_usd : 0), 0);
        fill(tiles, 
            tile('Ready now', hz.accounts.counted ? fmtTokens(hz.now.input_tokens) : '—',
                 hz.accounts.counted ? 'input tokens, ' + fmtInt(hz.now.requests) + ' requests'
                                     : 'no limits observed yet'),
            tile('Next reset', hz.next_reset_seconds === null ? '—' : countdown(hz.next_reset_seconds),
                 hz.next_reset_seconds === null ? 'no window is draining' : 'a window refills'),
            tile('Queue', fmtInt(st.queue.depth), st.queue.interactive + ' interactive · ' + st.queue.batch + ' batch'),
            tile('Cache hit', fmtPct(cache), day ? 'of prompt tokens, last 24 h' : 'of prompt tokens, since start'),
            tile('Spend', fmtUsd(spend), day ? 'last 24 h, answered requests' : 'last ' + spendHours(st.accounts) + ' h, in flight included'),
            tile('Accounts', pool.ready + ' / ' + pool.total, (pool.failing ? pool.failing + ' failing · ' : '') +
                 pool.cooling + ' cooling · ' + pool.exhausted + ' exhausted · ' + pool.disabled + ' off'));

        fill(horizon, h('h2', { text: 'Capacity horizon, next hour' }),
            hz.accounts.counted ? horizonChart(hz) : h('p', { class: 'muted',
                text: 'No account has reported its limits yet: the horizon appears once an answer carries them.' }),
            h('p', { class: 'muted', text: hz.summary }));

        fill(accounts, h('h2', { text: 'Accounts' }), accountsTable(st.accounts, false));
    };

    /* the pool every 5 s; the last day's spend and cache from the history
     * every 30 s, read with the first */
    let dayAt = 0;
    poll(async () => {
        const [st, hz] = await Promise.all([refreshStatus(), api('GET', 'horizon')]);
        if (hasHistory() && Date.now() - dayAt > 30000) {
            try { day = await api('GET', 'usage?range=24h'); dayAt = Date.now(); } catch (e) { day = null; }
        }
        draw(st, hz);
    }, 5000);

    liveFeed(feed, null);
}

/* "3 of 4 accounts failing: no answer: connect error, reset or TLS
 * failure, for 2 min; last success 2 min ago." */
function failingSentence(st) {
    const bad = st.accounts.filter(a => a.state === 'failing');
    const why = bad.every(a => a.reason === bad[0].reason) ? bad[0].reason.replace(/^circuit open after \d+ failures in a row: /, '') : null;
    let longest = null, last = null;
    for (const a of bad) {
        if (a.failing_for !== null && a.failing_for !== undefined) { longest = Math.max(longest || 0, a.failing_for); }
    }
    for (const a of st.accounts) {
        if (a.last_success_ago !== null && a.last_success_ago !== undefined) { last = last === null ? a.last_success_ago : Math.min(last, a.last_success_ago); }
    }
    return bad.length + ' of ' + st.pool.total + ' account' + (st.pool.total > 1 ? 's' : '') + ' failing' +
        (why ? ': ' + why : '') + (longest !== null ? ', for ' + fmtAgo(longest).replace(/ ago$/, '') : '') + '; ' +
        (last !== null ? 'last success ' + fmtAgo(last) + '.' : 'no request has succeeded since the gateway started.');
}

/* the usage history is the store's: a gateway without one has none */
function hasHistory() {
    return !S.status || S.status.store.backend !== 'memory';
}

function noHistory() {
    return h('div', { class: 'banner note', text: 'Not available: the usage history is kept in the store, and this gateway runs without one (store.backend: memory). Set store.backend: sqlite in the YAML file to keep it.' });
}

function tile(label, value, sub) {
    return h('div', { class: 'tile' }, h('div', { class: 'label', text: label }),
        h('div', { class: 'value' }, value), h('div', { class: 'sub', text: sub }));
}

function poolCacheRate(st) {
    let read = 0, all = 0;
    for (const a of st.accounts) {
        if (!a.usage) { continue; }
        read += a.usage.cache_read_tokens;
        all += a.usage.input_tokens + a.usage.cache_read_tokens + a.usage.cache_write_tokens;
    }
    return all ? read / all : null;
}

function accountsTable(list, manage) {
    const cols = [
        { t: 'Account', f: a => h('div', null, accountLink(a.id), a.name && a.name !== a.id ? h('div', { class: 'muted', text: a.name }) : null) },
        { t: 'State', f: a => h('div', null, statePill(a), a.reason && a.state !== 'ready' ? h('div', { class: 'muted', text: a.reason }) : null) },
        { t: 'Headroom', f: a => meters(a) },
        { t: 'Reset', n: true, f: a => countdown(soonestReset(a)) },
        { t: 'In flight', n: true, f: a => fmtInt(a.inflight) },
        { t: 'Attempt errors', n: true, f: a => h('span', { title: 'of its last 50 attempts (a request that failed over counts here, and is one answered request in Usage)', text: fmtPct(a.error_rate) }) },
        { t: 'Cache', n: true, f: a => fmtPct(a.usage ? a.usage.cache_hit_rate : null) },
        { t: 'Spend, ' + spendHours(list) + ' h', n: true, f: a => spendCell(a) },
    ];
    return tableOf(cols, list, { empty: 'No account yet.' });
}

/*
 * A chart's width in its own units: what the page has room for (its labels
 * then keep their size on a phone, where a fixed width would shrink them
 * to a few pixels), never more than def
 */
function chartW(def) {
    const m = $('main');
    const room = m && m.clientWidth ? m.clientWidth - 64 : def;
    return Math.round(Math.max(300, Math.min(def, room)));
}

function horizonChart(hz) {
    const pts = hz.next_hour;
    const W = chartW(560), H = 150, L = 44, B = 22, T = 8;
    const max = Math.max(1, ...pts.map(p => p.input_tokens));
    const bw = (W - L - 8) / pts.length;
    const svg = s('svg', { class: 'chart', viewBox: `0 0 ${W} ${H}`, role: 'img',
        'aria-label': 'Input tokens available over the next hour, every 5 minutes' });
    for (const f of [0, 0.5, 1]) {
        const y = T + (H - T - B) * (1 - f);
        put(svg, s('line', { class: 'grid', x1: L, x2: W - 4, y1: y, y2: y }),
                   s('text', { x: L - 4, y: y + 3, 'text-anchor': 'end' }, fmtTokens(max * f)));
    }
    pts.forEach((p, i) => {
        const hgt = (H - T - B) * p.input_tokens / max;
        const x = L + i * bw + 2;
        put(svg, s('rect', { x: x, y: H - B - hgt, width: Math.max(1, bw - 4), height: hgt, class: 'fill-cap' },
            s('title', null, `in ${fmtClock(p.in_seconds)}: ${fmtInt(p.input_tokens)} input tokens, ${fmtInt(p.requests)} requests, ${fmtInt(p.output_tokens)} output tokens`)));
        if (i % 3 === 0) {
            put(svg, s('text', { x: x + bw / 2 - 2, y: H - 6, 'text-anchor': 'middle' }, i === 0 ? 'now' : '+' + (p.in_seconds / 60) + 'm'));
        }
    });
    put(svg, s('line', { class: 'now', x1: L + 1, x2: L + 1, y1: T, y2: H - B }));
    return svg;
}

/* a batch's or a file's event: what became of it, in a few words */
function objectEvent(ev) {
    const id = ev.batch_id || ev.file_id || '';
    const what = [h('span', { class: 'mono', text: ev.type + ' ' + id.slice(0, 18) + (id.length > 18 ? '…' : '') }), ' ', ev.stage];
    if (ev.type === 'batch') {
        const c = ev.request_counts || {};
        const n = ['processing', 'succeeded', 'errored', 'canceled', 'expired'].reduce((a, k) => a + (c[k] || 0), 0);
        what.push(h('span', { class: 'muted', text: ' · ' + ev.processing_status.replace('_', ' ') + ', ' + n + ' request' + (n === 1 ? '' : 's') +
            (ev.stage === 'charged' || ev.stage === 'forgotten' || ev.stage === 'deleted' ? ', charged ' + fmtUsd(ev.charged_usd)
             : ev.held_usd ? ', holds ' + fmtUsd(ev.held_usd) : '') }));
    }
    if (ev.account) { what.push(h('span', { class: 'muted', text: ' on ' + ev.account })); }
    return what;
}

/* the live feed: /admin/events, polled; settlements, refusals, batches and
 * files */
function liveFeed(list, account) {
    let next = null;
    const rows = [];
    poll(async () => {
        if (next === null) {
            const first = await api('GET', 'events?since=0&limit=1');
            next = Math.max(0, (first.last || 0) - 200);
        }
        const j = await api('GET', 'events?since=' + next + '&limit=1000');
        next = j.next;
        for (const ev of j.events) {
            if (account && ev.account !== account) { continue; }
            if (ev.type === 'settlement' || ev.type === 'refusal' || ev.type === 'batch' || ev.type === 'file'
                || (ev.type === 'admission' && ev.decision !== 'admit')) {
                rows.unshift(ev);
            }
        }
        rows.splice(60);
        clear(list);
        if (!rows.length) {
            put(list, h('li', { class: 'muted', text: 'No request yet: they appear here as they end.' }));
        }
        for (const ev of rows) {
            const ok = ev.type === 'settlement' && ev.status >= 200 && ev.status < 300;
            /* a key refused at the door: by its name when it had one */
            const obj = ev.type === 'batch' || ev.type === 'file';
            const what = obj ? objectEvent(ev)
                : ev.type === 'refusal'
                ? [h('span', { class: 'no', text: ev.status + ' ' + ev.reason }), ' · ',
                   ev.key ? h('span', null, 'key ', h('strong', { text: ev.key })) : h('span', { class: 'muted', text: 'no key of this gateway' })]
                : ev.type === 'settlement'
                ? [ev.account, ' → ', h('span', { class: ok ? 'yes' : 'no', text: (ev.status || '—') + ' ' + ev.class }),
                   ev.next && ev.next !== 'done' ? h('span', { class: 'muted', text: ' · then ' + ev.next }) : null]
                : [h('span', { class: 'no', text: ev.decision }), ' · ', ev.reason || ''];
            /* an object's event by no request (the gateway's own poll)
             * opens nothing */
            const rid = ev.request_id;
            const li = h('li', rid ? { tabIndex: 0, title: 'open ' + rid } : null,
                h('span', { class: 'when' }, since(parseTime(ev.at) || Date.now())),
                h('span', null, rid ? h('span', { class: 'mono', text: rid.replace(/^tb[rp]_/, '').slice(0, 8) + ' ' }) : null, what),
                h('span', { class: 'num muted', text: ev.latency_ms !== undefined ? fmtMs(ev.latency_ms) : '' }));
            if (!rid) {
                put(list, li);
                continue;
            }
            const go = () => { location.hash = '#/requests/' + encodeURIComponent(rid); };
            li.addEventListener('click', go);
            li.addEventListener('keydown', e => { if (e.key === 'Enter') { go(); } });
            put(list, li);
        }
    }, 2000);
}

/* ---- Accounts ---- */

function pageAccounts(main, args) {
    if (args[0]) {
        return pageAccount(main, args[0]);
    }
    const msg = h('div');
    const body = h('div', { class: 'card' });
    const testAll = h('button', { type: 'button', text: 'Test all', on: { click: async () => {
        testAll.disabled = true;
        try {
            const st = await refreshStatus();
            const out = [];
            for (const a of st.accounts) {
                try {
                    const t = await api('POST', 'accounts/' + encodeURIComponent(a.id) + '/test', {});
                    out.push(h('li', null, h('strong', { text: a.id }), ': ', probeLine(t)));
                } catch (e) {
                    out.push(h('li', null, h('strong', { text: a.id }), ': ', h('span', { class: 'no', text: e.message })));
                }
            }
            fill(msg, h('div', { class: 'banner note' }, h('strong', { text: 'Every account tested' }), h('ul', null, out)));
            load1();
        } finally {
            testAll.disabled = false;
        }
    } } });
    put(main, head('Accounts', testAll, h('a', { class: 'button primary', href: '#/welcome', text: 'Add an account' })), msg, body);

    const load1 = async () => {
        try {
            const j = await api('GET', 'accounts');
            fill(body, manageTable(j.accounts, msg, load1),
                h('p', { class: 'muted', text: j.accounts.length + ' of at most ' + j.max_accounts + ' accounts. The YAML file\'s are locked: change the file and reload (Settings).' }));
        } catch (e) {
            problem(body, e, 'the accounts could not be read');
        }
    };
    /* every 5 s, unless the operator is in the table or a dialog: a table
     * redrawn under the keyboard's focus would lose it */
    poll(() => (body.contains(document.activeElement) || $('dialog').open) ? null : load1(), 5000);
}

function probeLine(t) {
    const ok = t.ok;
    return h('span', null, h('span', { class: ok ? 'yes' : 'no', text: ok ? '✓ ' : '✕ ' }),
        (t.status ? t.status + ' ' : '') + (t.error ? t.error + ' · ' : '') +
        (t.latency_ms !== undefined ? fmtMs(t.latency_ms) + ' · ' : '') + (t.consequence || ''));
}

/* what needs a person, not a clock: a billing refusal does not heal */
function needsBilling(a) {
    return a.state === 'exhausted' && /^billing_error/.test(a.reason || '');
}

/*
 * An account's own actions, wherever it is shown: Test; Enable or
 * Disable; for a rest the operator knows to be over (cooling, exhausted,
 * failing) "Retry now", and for a billing refusal "Billing fixed: clear";
 * both clear what the gateway decided, as Enable does
 */
function accountActions(a, act) {
    const id = encodeURIComponent(a.id);
    const btns = [h('button', { type: 'button', class: 'small', text: 'Test', on: { click: () =>
        act(() => api('POST', 'accounts/' + id + '/test', {}), t => [h('strong', { text: a.id + ': ' }), probeLine(t)]) } })];
    if (needsBilling(a)) {
        btns.push(h('button', { type: 'button', class: 'small primary', text: 'Billing fixed: clear', on: { click: () =>
            act(() => api('POST', 'accounts/' + id + '/enable'), () => a.id + ' cleared: it takes requests again (a 402 would rest it again)') } }));
    } else if (a.state === 'cooling' || a.state === 'exhausted' || a.state === 'failing') {
        btns.push(h('button', { type: 'button', class: 'small', text: 'Retry now', on: { click: () =>
            act(() => api('POST', 'accounts/' + id + '/enable'), () => a.id + ' cleared: the next request may go to it') } }));
    }
    if (a.state === 'disabled' && a.disabled_reason !== 'disabled in config') {
        btns.push(h('button', { type: 'button', class: 'small', text: 'Enable', on: { click: () =>
            act(() => api('POST', 'accounts/' + id + '/enable'), () => a.id + ' enabled') } }));
    } else if (a.state !== 'disabled') {
        btns.push(h('button', { type: 'button', class: 'small', text: 'Disable', on: { click: () =>
            act(() => api('POST', 'accounts/' + id + '/disable'), () => a.id + ' disabled: it takes no new request until enabled') } }));
    }
    return btns;
}

function manageTable(list, msg, reload) {
    const say = (cls, ...what) => fill(msg, h('div', { class: 'banner ' + cls, role: 'status' }, what));
    const act = async (fn, done) => {
        try { const r = await fn(); say('good', done(r)); } catch (e) { say('bad', e.message); }
        reload();
    };
    const cols = [
        { t: 'Account', f: a => h('div', null, accountLink(a.id), a.name && a.name !== a.id ? h('div', { class: 'muted', text: a.name }) : null) },
        { t: 'Type', f: a => a.type },
        { t: 'Source', f: a => a.source === 'file' ? h('span', { class: 'tag lock', text: 'file · locked', title: 'change the YAML file and reload' }) : h('span', { class: 'tag', text: 'added here' }) },
        { t: 'State', f: a => statePill(a) },
        { t: 'Credential', f: a => h('span', { class: 'mono', text: a.credential || '—' }) },
        { t: 'Priority', n: true, f: a => String(a.priority) },
        { t: 'Tier', n: true, f: a => String(a.cost_tier) },
        { t: 'Spend, ' + spendHours(list) + ' h', n: true, f: a => spendCell(a) },
        { t: '', cls: 'actions', f: a => {
            const id = encodeURIComponent(a.id);
            const btns = accountActions(a, act);
            if (a.source !== 'file') {
                btns.push(h('button', { type: 'button', class: 'small', text: 'Edit', on: { click: () => editAccount(a, say, reload) } }),
                          h('button', { type: 'button', class: 'small', text: 'Rotate', on: { click: () => rotateAccount(a, say, reload) } }),
                          h('button', { type: 'button', class: 'small danger', text: 'Delete', on: { click: () =>
                              confirmDialog('Delete ' + a.id + '?', 'Its stored credential is removed and its conversations are routed afresh. Requests already on it finish.', 'Delete', () =>
                                  act(() => api('DELETE', 'accounts/' + id), () => a.id + ' deleted')) } }));
            }
            return btns;
        } },
    ];
    return tableOf(cols, list, { empty: 'No account yet: add one.' });
}

function dialog(title, body, buttons) {
    const d = $('dialog');
    fill(d, h('h2', { text: title }), body, h('div', { class: 'buttons' }, buttons));
    if (!d.open) { d.showModal(); }
    return d;
}

function closeDialog() {
    const d = $('dialog');
    if (d.open) { d.close(); }
}

function confirmDialog(title, text, verb, fn) {
    dialog(title, h('p', { text: text }), [
        h('button', { type: 'button', text: 'Cancel', on: { click: closeDialog } }),
        h('button', { type: 'button', class: 'danger', text: verb, on: { click: () => { closeDialog(); fn(); } } }),
    ]);
}

let fieldIds = 0;

function field(label, input) {
    if (!input.id) { input.id = 'f-' + (++fieldIds); }
    return h('div', { class: 'field' }, h('label', { for: input.id, text: label }), input);
}

function editAccount(a, say, reload) {
    const name = h('input', { value: a.name || '' });
    const prio = h('input', { type: 'number', value: String(a.priority), step: '1' });
    const tier = h('input', { type: 'number', value: String(a.cost_tier), min: '1', step: '1' });
    const conc = h('input', { type: 'number', value: String(a.max_concurrency), min: '1', step: '1' });
    const cap = h('input', { type: 'number', value: a.spend_cap_usd === null ? '' : String(a.spend_cap_usd), min: '0', step: '0.01', placeholder: 'none' });
    const models = h('input', { value: (a.models || ['*']).join(', ') });
    const err = h('p', { class: 'error', role: 'alert' });
    dialog('Edit ' + a.id, h('div', { class: 'form-grid' }, field('Name', name), field('Priority (lower goes first)', prio),
        field('Cost tier', tier), field('Max concurrency', conc), field('Spend cap, USD per window', cap), field('Models (patterns)', models), err), [
        h('button', { type: 'button', text: 'Cancel', on: { click: closeDialog } }),
        h('button', { type: 'button', class: 'primary', text: 'Save', on: { click: async () => {
            const body = { name: name.value, priority: Number(prio.value), cost_tier: Number(tier.value),
                           max_concurrency: Number(conc.value), spend_cap_usd: cap.value === '' ? null : Number(cap.value),
                           models: splitList(models.value) };
            try {
                await api('PATCH', 'accounts/' + encodeURIComponent(a.id), body);
                closeDialog();
                say('good', a.id + ' saved');
                reload();
            } catch (e) { err.textContent = e.message; }
        } } }),
    ]);
}

function rotateAccount(a, say, reload) {
    const key = h('input', { type: 'password', autocomplete: 'off', spellcheck: 'false' });
    const err = h('p', { class: 'error', role: 'alert' });
    dialog('Rotate the credential of ' + a.id, [h('p', { text: 'The new credential is probed before it replaces ' + (a.credential || 'the old one') + '; the account keeps its limits, leases and conversations.' }),
        field('New API key', key), err], [
        h('button', { type: 'button', text: 'Cancel', on: { click: closeDialog } }),
        h('button', { type: 'button', class: 'primary', text: 'Test and rotate', on: { click: async (ev) => {
            ev.target.disabled = true;
            try {
                await api('PATCH', 'accounts/' + encodeURIComponent(a.id), { api_key: key.value });
                closeDialog();
                say('good', a.id + ': the new credential was accepted and replaces the old one');
                reload();
            } catch (e) {
                err.textContent = e.message;
                ev.target.disabled = false;
            }
        } } }),
    ]);
}

function splitList(v) {
    return v.split(',').map(x => x.trim()).filter(x => x.length);
}

function pageAccount(main, id) {
    const body = h('div');
    const msg = h('div');
    const acts = h('span', { class: 'toolbar' });
    put(main, head('Account ' + id, acts, h('a', { class: 'button', href: '#/accounts', text: 'All accounts' })), msg, body);
    const say = (cls, ...what) => fill(msg, h('div', { class: 'banner ' + cls, role: 'status' }, what));
    const act = async (fn, done) => {
        try { const r = await fn(); say('good', done(r)); } catch (e) { say('bad', e.message); }
        draw();
    };
    const draw = async () => {
        let a, reqs;
        try {
            [a, reqs] = await Promise.all([api('GET', 'accounts/' + encodeURIComponent(id)), api('GET', 'requests?limit=1000')]);
        } catch (e) {
            problem(body, e, e.status === 404 ? 'no such account' : 'the account could not be read');
            return;
        }
        const lim = a.limits || {};
        const win = (name, w) => ({ name: name, w: w || {} });
        const windows = [win('requests', lim.requests), win('input tokens', lim.input_tokens), win('output tokens', lim.output_tokens)];
        const tells = [];
        if (a.observable_limits === false || lim.observable === false) {
            tells.push('Limits unobservable: it sends no anthropic-ratelimit-* headers (Bedrock and Vertex never do), so its meters cannot say what is left. The router reads it as ' +
                       'its assumed headroom, never as full, and admits it by its concurrency' +
                       (a.concurrency && a.concurrency.learned ? ', now the ' + a.concurrency.learned + ' its 429s taught,' : '') +
                       ' and by what its 429s teach: each one cools it and lowers the concurrency it is given.');
        } else if (lim.observed_ago === null || lim.observed_ago === undefined) {
            tells.push('No answer has carried its limits yet: its meters say nothing until one does, and the horizon does not count it.');
        } else {
            tells.push('Limits last read ' + fmtAgo(lim.observed_ago) + ' from its answers\' anthropic-ratelimit-* headers.');
        }
        for (const x of windows) {
            if (x.w.replenishment === 'token_bucket') {
                tells.push('The ' + x.name + ' window refills continuously (a token bucket): the meter rises between answers.');
            } else if (x.w.replenishment === 'fixed_window') {
                tells.push('The ' + x.name + ' window comes back whole at its reset (a fixed window).');
            }
        }
        tells.push('The output meter counts finished requests\' output; a request still streaming is counted by its lease.');
        if (a.organization_id === null) {
            tells.push('Its organisation is not known yet (no answer named it).');
        }

        fill(acts, accountActions(a, act));
        const outcomes = Object.entries(a.outcomes || {}).sort((x, y) => y[1] - x[1]);
        const maxOut = Math.max(1, ...outcomes.map(o => o[1]));
        const mine = (reqs.requests || []).filter(r => r.account === id || (r.attempts || []).some(t => t.account === id));

        fill(body, 
            h('div', { class: 'cards' },
                h('div', { class: 'card' }, h('h2', { text: 'State' }),
                    h('p', null, statePill(a), a.reason ? ' ' + a.reason : ''),
                    h('dl', { class: 'kv' },
                        h('dt', { text: 'Name' }), h('dd', { text: a.name || a.id }),
                        h('dt', { text: 'Type' }), h('dd', { text: a.type }),
                        h('dt', { text: 'Base URL' }), h('dd', { class: 'mono', text: a.base_url }),
                        h('dt', { text: 'Credential' }), h('dd', null, h('span', { class: 'mono', text: a.credential || '—' }), ' ',
                            a.source === 'file' ? 'from the YAML file (change it there and reload)'
                                                : 'added here, sealed in the store (AES-256-GCM)'),
                        h('dt', { text: 'Breaker' }), h('dd', { text: a.breaker.state + ', ' + a.breaker.failures + ' failures in a row, opened ' + a.breaker.opened_total + ' times' }),
                        h('dt', { text: 'Error rate' }), h('dd', { text: fmtPct(a.error_rate) + ' of the last 50 attempts' }),
                        h('dt', { text: 'Priority / tier' }), h('dd', { text: a.priority + ' / ' + a.cost_tier }),
                        h('dt', { text: 'In flight' }), h('dd', { text: a.inflight + ' (' + a.leases + ' leases)' }),
                        h('dt', { text: 'Spend' }), h('dd', { text: fmtUsd(a.usage.window_usd) + ' in the last ' + a.usage.window_hours + ' h (its cap\'s window' +
                            (a.usage.in_flight_usd ? ', ' + fmtUsd(a.usage.in_flight_usd) + ' of it in flight' : '') + ')' +
                            (a.spend_cap_usd !== null ? ' of its ' + fmtUsd(a.spend_cap_usd) + ' cap' : '') + ' · ' + fmtUsd(a.usage.cost_usd) + ' since nginx started' }),
                        h('dt', { text: 'Models refused' }), h('dd', { text: a.rejected_models.length ? a.rejected_models.join(', ') : 'none' }))),
                h('div', { class: 'card' }, h('h2', { text: 'Limits' }),
                    tableOf([
                        { t: 'Window', f: x => x.name },
                        { t: 'Limit', n: true, f: x => fmtInt(x.w.limit) },
                        { t: 'Remaining', n: true, f: x => fmtInt(x.w.remaining) },
                        { t: 'Reset', n: true, f: x => countdown(x.w.reset_in) },
                        { t: 'Refill', f: x => x.w.replenishment || '—' },
                    ], windows),
                    h('h3', { text: 'What the meters can and cannot tell' }),
                    h('ul', null, tells.map(t => h('li', { text: t }))))),
            h('div', { class: 'cards' },
                h('div', { class: 'card' }, h('h2', { text: 'Attempts by class' }),
                    outcomes.length ? tableOf([
                        { t: 'Class', f: o => o[0] },
                        { t: 'Attempts', n: true, f: o => fmtInt(o[1]) },
                        { t: '', f: o => { const b = h('span'); b.style.width = (100 * o[1] / maxOut) + '%'; return h('div', { class: 'bar' }, b); } },
                    ], outcomes) : h('p', { class: 'muted', text: 'No attempt yet.' })),
                null),
            h('div', { class: 'card' }, h('h2', { text: 'Its recent requests' }),
                requestsTable(mine.slice(0, 20), 'None of the requests the inspector holds went to it.')));
    };
    draw();
    poll(draw, 5000);
}

/* ---- Usage ---- */

const KINDS = [
    ['input_tokens', 'input', 'Input'],
    ['cache_write_tokens', 'write', 'Cache write'],
    ['cache_read_tokens', 'read', 'Cache read'],
    ['output_tokens', 'output', 'Output'],
];

/* a group keeps its colour slot from the first time it is seen */
const SLOTS = new Map();

function slotOf(name) {
    if (!SLOTS.has(name)) {
        if (SLOTS.size >= 8) { return 'other'; }
        SLOTS.set(name, 's' + (SLOTS.size + 1));
    }
    return SLOTS.get(name);
}

function pageUsage(main) {
    const q = new URLSearchParams(location.hash.split('?')[1] || '');
    let range = q.get('range') || '24h', by = q.get('by') || 'account';
    const body = h('div');
    const seg = h('div', { class: 'seg', role: 'group', 'aria-label': 'Range' });
    for (const r of ['1h', '24h', '7d', '30d']) {
        put(seg, h('button', { type: 'button', text: r, 'aria-pressed': String(r === range), on: { click: () => {
            range = r;
            for (const b of seg.children) { b.setAttribute('aria-pressed', String(b.textContent === r)); }
            draw();
        } } }));
    }
    const sel = h('select', { 'aria-label': 'Group by', on: { change: () => { by = sel.value; draw(); } } },
        ['account', 'model', 'key'].map(g => h('option', { value: g, text: 'by ' + g, selected: g === by })));
    put(main, head('Usage', seg, sel), body);

    const draw = async () => {
        let u;
        if (!hasHistory()) {
            fill(body, noHistory());
            return;
        }
        try {
            u = await api('GET', 'usage?range=' + range + '&by=' + by);
        } catch (e) {
            problem(body, e, e.status === 503 ? 'not available' : 'the usage could not be read');
            return;
        }
        const step = u.step_seconds * 1000;
        const from = parseTime(u.from);
        const now = Date.now();
        const n = Math.max(1, Math.ceil((now - from) / step));
        const buckets = [];
        for (let i = 0; i < n; i++) {
            buckets.push({ t: from + i * step, groups: {} });
        }
        for (const g of u.groups) {
            for (const p of g.series) {
                const i = Math.floor((p.t * 1000 - from) / step);
                if (i >= 0 && i < n) { buckets[i].groups[g.name] = p; }
            }
        }
        const sum = (b, f) => Object.values(b.groups).reduce((t, p) => t + (p[f] || 0), 0);
        const T = u.totals;
        const priced = T.cost_usd > 0 || T.unpriced_requests === 0;
        const tokensAll = KINDS.reduce((t, k) => t + T[k[0]], 0);
        const names = u.groups.map(g => g.name);
        names.forEach(slotOf);

        const tokenChart = stacked(buckets, KINDS.map(k => ({ name: k[2], cls: k[1], v: b => sum(b, k[0]) })), fmtTokens, step, chartW(720));
        const costChart = stacked(buckets, names.map(nm => ({ name: nm || '(none)', cls: slotOf(nm), v: b => (b.groups[nm] || {}).cost_usd || 0 })), fmtUsd, step, chartW(460));
        const rateChart = lineChart(buckets, b => {
            const read = sum(b, 'cache_read_tokens'), all = sum(b, 'input_tokens') + read + sum(b, 'cache_write_tokens');
            return all ? read / all : null;
        }, step, chartW(460));

        fill(body, 
            h('div', { class: 'tiles' },
                tile('Requests', fmtInt(T.requests), fmtInt(T.errors) + ' failed (answered requests, not attempts)'),
                tile('Tokens', fmtTokens(tokensAll), fmtTokens(T.input_tokens) + ' in · ' + fmtTokens(T.output_tokens) + ' out'),
                tile('Cost', priced ? fmtUsd(T.cost_usd) : '—', T.unpriced_requests ? T.unpriced_requests + ' unpriced answers not in it' : 'prices of ' + (u.prices_as_of || 'the file')),
                tile('Cache hit', fmtPct(T.cache_hit_rate), 'of prompt tokens read from a cache')),
            T.requests === 0 ? h('div', { class: 'banner note', text: 'No request in this range yet.' }) : null,
            h('div', { class: 'card' }, h('h2', { text: 'Tokens by kind' }), legend(KINDS.map(k => [k[2], k[1]])), tokenChart),
            h('div', { class: 'cards' },
                h('div', { class: 'card' }, h('h2', { text: 'Cost by ' + by }),
                    priced ? [legend(names.map(nm => [nm || '(none)', slotOf(nm)])), costChart]
                           : h('p', { class: 'muted', text: 'No price applies to these models: their cost is unknown (never counted as $0). Set pricing: builtin or price them in the YAML file.' })),
                h('div', { class: 'card' }, h('h2', { text: 'Cache hit rate' }), legend([['read from a cache / all prompt tokens', 'cache']]), rateChart)),
            h('p', { class: 'muted', text: 'Buckets of ' + fmtSpan(u.step_seconds) + '; the last one is still filling (drawn faded). The table counts it. History written through ' + (u.written_through || '—') + '.' }),
            h('div', { class: 'card' }, h('h2', { text: 'Totals by ' + by }),
                tableOf([
                    { t: by[0].toUpperCase() + by.slice(1), f: g => g.name ? h('span', { class: 'c-' + slotOf(g.name) }, g.name) : h('span', { class: 'muted', text: '(none answered)' }), total: () => 'All' },
                    { t: 'Requests', n: true, f: g => fmtInt(g.totals.requests), total: t => fmtInt(t.requests) },
                    { t: 'Errors', n: true, f: g => fmtInt(g.totals.errors), total: t => fmtInt(t.errors) },
                    { t: 'Input', n: true, f: g => fmtTokens(g.totals.input_tokens), total: t => fmtTokens(t.input_tokens) },
                    { t: 'Output', n: true, f: g => fmtTokens(g.totals.output_tokens), total: t => fmtTokens(t.output_tokens) },
                    { t: 'Cache read', n: true, f: g => fmtTokens(g.totals.cache_read_tokens), total: t => fmtTokens(t.cache_read_tokens) },
                    { t: 'Cache write', n: true, f: g => fmtTokens(g.totals.cache_write_tokens), total: t => fmtTokens(t.cache_write_tokens) },
                    { t: 'Cache hit', n: true, f: g => fmtPct(g.totals.cache_hit_rate), total: t => fmtPct(t.cache_hit_rate) },
                    { t: 'Cost', n: true, f: g => fmtUsd(g.totals.cost_usd) + (g.totals.unpriced_requests ? ' +' + g.totals.unpriced_requests + ' unpriced' : ''), total: t => fmtUsd(t.cost_usd) },
                ], u.groups, { total: T, empty: 'Nothing in this range.' })));
    };
    draw();
    poll(draw, 30000);
}

function legend(items) {
    return h('div', { class: 'legend' }, items.map(([name, cls]) => h('span', { class: 'c-' + cls, text: name })));
}

function axisLabel(t, step) {
    const d = new Date(t);
    if (step >= 86400000) { return (d.getMonth() + 1) + '/' + d.getDate(); }
    return String(d.getHours()).padStart(2, '0') + ':' + String(d.getMinutes()).padStart(2, '0');
}

function frame(buckets, max, fmt, step, aria, W) {
    const H = W > 600 ? 180 : 150, L = 52, B = 22, T = 8;
    const svg = s('svg', { class: 'chart', viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-label': aria });
    for (const f of [0, 0.5, 1]) {
        const y = T + (H - T - B) * (1 - f);
        put(svg, s('line', { class: 'grid', x1: L, x2: W - 4, y1: y, y2: y }),
                   s('text', { x: L - 4, y: y + 3, 'text-anchor': 'end' }, fmt(max * f)));
    }
    const bw = (W - L - 8) / buckets.length;
    /* as many labels as fit: one per 48 units, 3 to 8 */
    const every = Math.max(1, Math.ceil(buckets.length / Math.max(3, Math.min(8, Math.floor((W - L) / 48)))));
    buckets.forEach((b, i) => {
        if (i % every === 0) {
            put(svg, s('text', { x: L + i * bw + bw / 2, y: H - 6, 'text-anchor': 'middle' }, axisLabel(b.t, step)));
        }
    });
    return { svg: svg, x: i => L + i * bw, bw: bw, y: v => T + (H - T - B) * (1 - v / max), base: H - B };
}

function stacked(buckets, parts, fmt, step, W) {
    let max = 0;
    for (const b of buckets) { max = Math.max(max, parts.reduce((t, p) => t + p.v(b), 0)); }
    const f = frame(buckets, max || 1, fmt, step, 'stacked bars: ' + parts.map(p => p.name).join(', '), W || 720);
    const last = buckets.length - 1;
    buckets.forEach((b, i) => {
        let y = f.base;
        const tip = [axisLabel(b.t, step)];
        for (const p of parts) {
            const v = p.v(b);
            if (!v) { continue; }
            const hgt = f.base - f.y(v);
            y -= hgt;
            tip.push(p.name + ': ' + fmt(v));
            put(f.svg, s('rect', { x: f.x(i) + 1, y: y, width: Math.max(1, f.bw - 2), height: hgt,
                                     class: 'fill-' + p.cls + (i === last ? ' partial' : '') },
                s('title', null, tip.join('\n'))));
        }
    });
    return f.svg;
}

function lineChart(buckets, val, step, W) {
    const f = frame(buckets, 1, fmtPct, step, 'cache hit rate per bucket', W || 720);
    let d = '';
    buckets.forEach((b, i) => {
        const v = val(b);
        if (v === null) { return; }
        const x = f.x(i) + f.bw / 2, y = f.y(v);
        d += (d ? 'L' : 'M') + x.toFixed(1) + ' ' + y.toFixed(1);
        put(f.svg, s('circle', { cx: x, cy: y, r: 2.5, class: 'dot' + (i === buckets.length - 1 ? ' partial' : '') },
            s('title', null, axisLabel(b.t, step) + ': ' + fmtPct(v))));
    });
    if (d) { f.svg.insertBefore(s('path', { d: d, class: 'line' }), f.svg.firstChild.nextSibling); }
    return f.svg;
}

/* ---- Requests ---- */

function requestsTable(list, empty) {
    return tableOf([
        { t: 'When', f: r => since(parseTime(r.started_at) || Date.now()) },
        { t: 'Request', f: r => requestLink(r.request_id) },
        { t: 'Key', f: r => r.key || '—' },
        { t: 'Model', f: r => r.model || '—' },
        { t: 'Status', n: true, f: r => h('span', { class: r.status >= 200 && r.status < 300 ? 'yes' : 'no', text: String(r.status) }) },
        { t: 'Route', f: r => chain(r.attempts, true) },
        { t: 'Tokens', n: true, f: r => r.usage.input_tokens < 0 ? '—' : fmtTokens(r.usage.input_tokens + r.usage.cache_read_input_tokens + r.usage.cache_creation_input_tokens) + ' → ' + fmtTokens(r.usage.output_tokens) },
        { t: 'Cost', n: true, f: r => fmtUsd(r.cost.usd) },
        { t: 'Latency', n: true, f: r => fmtMs(r.latency_ms) },
    ], list, { empty: empty, open: r => { location.hash = '#/requests/' + encodeURIComponent(r.request_id); } });
}

function chain(attempts, short) {
    const el = h('span', { class: short ? 'mono' : 'chain' });
    if (!attempts || !attempts.length) {
        put(el, h('span', { class: 'muted', text: 'no attempt' }));
        return el;
    }
    attempts.forEach((t, i) => {
        const ok = t.status >= 200 && t.status < 300;
        if (i) { put(el, short ? ' → ' : h('span', { text: '→' })); }
        /* the time between two attempts: its backoff (or a wait in the queue) */
        if (i && !short && t.waited_ms) {
            put(el, h('span', { class: 'hop wait', title: 'between the attempt before and this one: its backoff, a wait in the queue, the decision', text: '⏱ ' + fmtMs(t.waited_ms) }), h('span', { text: '→' }));
        }
        if (short) {
            put(el, t.account + ' ', h('span', { class: ok ? 'yes' : 'no', text: String(t.status || t.kind) }));
        } else {
            put(el, h('span', { class: 'hop' }, t.account), h('span', { text: '→' }),
                h('span', { class: 'hop ' + (ok ? 'ok' : 'bad') }, (t.status || '—') + ' ' + (ok ? '' : t.kind + ' ') + '(' + fmtMs(t.latency_ms) + ')'));
        }
    });
    return el;
}

function pageRequests(main, args) {
    if (args[0]) {
        return pageRequest(main, args[0]);
    }
    const filter = h('input', { type: 'search', placeholder: 'filter: key, account, model, status', 'aria-label': 'Filter the requests' });
    const body = h('div', { class: 'card' });
    put(main, head('Requests', filter), body);
    let list = [];
    const show = () => {
        const f = filter.value.trim().toLowerCase();
        const rows = f ? list.filter(r => [r.key, r.account, r.model, String(r.status), r.request_id].concat((r.attempts || []).map(t => t.account))
            .some(x => x && String(x).toLowerCase().includes(f))) : list;
        fill(body, requestsTable(rows, list.length ? 'No request matches.' : 'No request yet: send one and it appears here once it ends.'),
            h('p', { class: 'muted', text: rows.length + ' of the ' + list.length + ' most recent requests the inspector holds.' }));
    };
    filter.addEventListener('input', show);
    poll(async () => {
        try {
            list = (await api('GET', 'requests?limit=200')).requests;
            show();
        } catch (e) { problem(body, e, 'the requests could not be read'); }
    }, 5000);
}

function pageRequest(main, id) {
    const body = h('div');
    put(main, head('Request', h('span', { class: 'mono', text: id }), h('a', { class: 'button', href: '#/requests', text: 'All requests' })), body);
    (async () => {
        let r;
        try {
            r = await api('GET', 'requests/' + encodeURIComponent(id));
        } catch (e) {
            problem(body, e.status === 404 ? new Error('this request is not in the inspector: it keeps the most recent ones, and records a request once it has ended') : e, null);
            return;
        }
        const u = r.usage, d = r.decision || {};
        const notices = [];
        if (r.affinity === 'broken') {
            notices.push(h('div', { class: 'banner bad', text: 'Affinity broke: the conversation moved although the account holding its cache could serve; its prompt was written to a cache again.' }));
        } else if (r.affinity === 'forced_break') {
            notices.push(h('div', { class: 'banner note', text: 'Affinity broke, forced: the account holding this conversation\'s cache could not serve it, so it moved and wrote its prompt to a cache again.' }));
        }
        const unused = r.lease && u.output_tokens >= 0 ? r.lease.output_tokens - u.output_tokens : null;
        const cands = d.candidates || [];
        const termNames = [];
        for (const c of cands) { for (const k in (c.terms || {})) { if (!termNames.includes(k)) { termNames.push(k); } } }

        fill(body, notices,
            h('div', { class: 'card' }, h('h2', { text: 'Routing decision' }), chain(r.attempts, false),
                (r.attempts || []).length > 1 ? tableOf([
                    { t: 'Attempt', n: true, f: (t) => String(r.attempts.indexOf(t) + 1) },
                    { t: 'Account', f: t => accountLink(t.account) },
                    { t: 'Chosen among', n: true, f: t => t.eligible + ' eligible' },
                    { t: 'Score', n: true, f: t => t.score === undefined ? '—' : t.score.toFixed(4) },
                    { t: 'Waited before it', n: true, f: t => t.waited_ms === null || t.waited_ms === undefined ? '—' : fmtMs(t.waited_ms) },
                    { t: 'Answer', f: t => (t.status || 'none') + ' ' + t.kind + ' (' + fmtMs(t.latency_ms) + ')' },
                ], r.attempts) : null,
                h('p', { class: 'muted', text: 'Decided by ' + (d.strategy || '—') + ' among ' + (d.accounts || 0) + ' accounts; chose ' + (d.chosen || 'none') +
                    (d.soonest_available_in ? '; capacity was due back in ' + fmtClock(d.soonest_available_in) : '') + '.' +
                    ((r.attempts || []).length > 1 ? ' Every candidate of the last attempt\'s decision:' : '') }),
                tableOf([
                    { t: 'Account', f: c => accountLink(c.account) },
                    { t: 'Verdict', f: c => h('span', { class: c.verdict === 'chosen' ? 'yes' : c.verdict.startsWith('filtered') ? 'muted' : null,
                                                         text: c.verdict + (c.limits === 'unobservable' ? ' (limits unobservable)' : '') }) },
                    { t: 'Score', n: true, f: c => c.score === undefined ? '—' : c.score.toFixed(4) },
                ].concat(termNames.map(k => ({ t: k, n: true, f: c => c.terms && c.terms[k] !== undefined ? c.terms[k].toFixed(4) : '' }))), cands, { empty: 'No decision recorded (refused before routing).' })),
            h('div', { class: 'cards' },
                h('div', { class: 'card' }, h('h2', { text: 'The request' }), h('dl', { class: 'kv' },
                    h('dt', { text: 'Status' }), h('dd', { text: String(r.status) }),
                    h('dt', { text: 'Started' }), h('dd', null, since(parseTime(r.started_at) || Date.now()), ' (' + r.started_at + ')'),
                    h('dt', { text: 'Key' }), h('dd', { text: r.key || '—' }),
                    h('dt', { text: 'Model' }), h('dd', { text: r.model || '—' }),
                    h('dt', { text: 'Conversation' }), h('dd', { class: 'mono', text: r.session || '—' }),
                    h('dt', { text: 'Affinity' }), h('dd', { text: { honored: 'honoured: stayed on the account holding its cache', broken: 'broken', forced_break: 'broken (forced)', none: 'none (a first turn)' }[r.affinity] || r.affinity }),
                    h('dt', { text: 'Streamed' }), h('dd', { text: r.streamed ? 'yes' : 'no' }),
                    h('dt', { text: 'Latency' }), h('dd', { text: fmtMs(r.latency_ms) }),
                    h('dt', { text: 'Time to first token' }), h('dd', { text: fmtMs(r.ttft_ms) }),
                    h('dt', { text: 'Queued' }), h('dd', { text: fmtMs(r.queued_ms) + ' (' + r.priority + ')' }),
                    h('dt', { text: 'Worker' }), h('dd', { class: 'mono', text: String(r.worker) }))),
                h('div', { class: 'card' }, h('h2', { text: 'Tokens and cost' }), h('dl', { class: 'kv' },
                    h('dt', { text: 'Input' }), h('dd', { text: fmtInt(u.input_tokens < 0 ? null : u.input_tokens) }),
                    h('dt', { text: 'Cache read' }), h('dd', { text: fmtInt(u.cache_read_input_tokens < 0 ? null : u.cache_read_input_tokens) }),
                    h('dt', { text: 'Cache write' }), h('dd', { text: fmtInt(u.cache_creation_input_tokens < 0 ? null : u.cache_creation_input_tokens) +
                        (u.cache_creation_1h_input_tokens > 0 ? ' (' + fmtInt(u.cache_creation_1h_input_tokens) + ' for 1 h)' : '') }),
                    h('dt', { text: 'Output' }), h('dd', { text: fmtInt(u.output_tokens < 0 ? null : u.output_tokens) }),
                    h('dt', { text: 'Cost' }), h('dd', { text: r.cost.usd === null ? 'unknown: ' + r.cost.why : fmtUsd(r.cost.usd) + ' (' + r.cost.prices + ' prices' + (r.cost.prices_as_of ? ' of ' + r.cost.prices_as_of : '') + ')' }),
                    h('dt', { text: 'Leased' }), h('dd', { text: r.lease ? fmtInt(r.lease.input_tokens) + ' input, ' + fmtInt(r.lease.output_tokens) + ' output (max_tokens ' + fmtInt(r.lease.max_tokens) + ')' : '—' }),
                    h('dt', { text: 'Output reserved, unused' }), h('dd', { text: unused === null ? '—' : fmtInt(Math.max(0, unused)) }),
                    r.queue ? [h('dt', { text: 'Waits' }), h('dd', { text: r.queue.waits + ', ' + fmtMs(r.queue.waited_ms) + (r.queue.woken_ms !== null ? ', granted ' + fmtMs(r.queue.woken_ms) + ' after capacity came back' : '') })] : null))));
    })();
}

/* ---- Efficiency ---- */

function pageEfficiency(main) {
    const sessions = h('div', { class: 'card' }, h('h2', { text: 'The costliest conversations' }));
    const estimator = h('div', { class: 'card' }, h('h2', { text: 'What the output estimator has learned' }));
    const reserved = h('div', { class: 'card' }, h('h2', { text: 'Output reserved but never used' }));
    const cache = h('div', { class: 'card' }, h('h2', { text: 'Is the prompt cache used?' }));
    const batches = h('div', { class: 'card' }, h('h2', { text: 'Batches' }));
    const pace = h('div', { class: 'card' }, h('h2', { text: 'Will the budget last?' }));
    const again = h('button', { type: 'button', text: 'Read again', on: { click: () => draw() } });
    put(main, head('Efficiency', again),
        h('p', { class: 'muted', text: 'Read when the page opens, not polled: conversations and the inspector are walked in full.' }),
        pace, sessions, estimator, h('div', { class: 'cards' }, reserved, cache), batches);

    const draw = () => {
        /* every budget and spend cap against its pace: the tightest said
         * first, then each with its verdict */
        api('GET', 'pacing').then(j => {
            const bad = v => v === 'reached' || v === 'runs out';
            fill(pace, h('h2', { text: 'Will the budget last?' }),
                j.tightest ? h('p', { class: bad(j.readings.find(x => x.scope === j.tightest.scope && x.name === j.tightest.name).verdict) ? 'no' : '', text: j.tightest.says })
                           : h('p', { class: 'muted', text: 'No weekly budget and no spend cap to pace.' }),
                j.week.budget ? h('p', { class: 'muted', text: 'Weekly budget: ' + j.week.budget + '.' })
                              : h('p', { class: 'muted', text: 'The budget week starts ' + j.week.starts + ' (' + j.week.time_zone + '); pacing is ' + j.mode + '.' }),
                tableOf([
                    { t: 'Budget or cap', f: x => x.scope === 'pool' ? 'the pool\'s week' : x.scope + ' ' + x.name },
                    { t: 'Used', n: true, f: x => x.used_usd === null ? fmtPct(x.utilization) + ' of the window' : fmtUsd(x.used_usd) + ' of ' + fmtUsd(x.limit_usd) },
                    { t: 'Rate', n: true, f: x => fmtUsd(x.rate_usd_per_hour) + '/h' },
                    { t: 'Verdict', f: x => h('span', { class: bad(x.verdict) ? 'no' : x.verdict === 'ahead' ? '' : 'yes', text: x.verdict }) },
                    { t: 'In words', f: x => x.says },
                ], j.readings, { empty: 'Nothing to pace: set pacing.weekly_budget_usd, or a spend cap on a key or an account.' }));
        }).catch(e => problem(pace, e, 'pacing'));

        api('GET', 'sessions?limit=20').then(j => {
            fill(sessions, h('h2', { text: 'The costliest conversations' }),
                h('p', { class: 'muted', text: j.total + ' conversations tracked over ' + j.window_hours + ' h; a runaway is one past ' + j.runaway_turns + ' turns' +
                    (j.runaway_spend_usd !== null ? ' or ' + fmtUsd(j.runaway_spend_usd) : '') + '.' }),
                tableOf([
                    { t: 'Conversation', f: x => h('span', { class: 'mono', text: x.session }) },
                    { t: 'Key', f: x => x.key },
                    { t: 'Account', f: x => accountLink(x.account) },
                    { t: 'Turns', n: true, f: x => fmtInt(x.turns) },
                    { t: 'Cost', n: true, f: x => fmtUsd(x.cost_usd) },
                    { t: 'Cache read', n: true, f: x => fmtTokens(x.cache_read_tokens) },
                    { t: 'Last turn', n: true, f: x => fmtAgo(x.last_seen_ago_seconds) },
                    { t: 'Runaway', f: x => x.runaway ? h('span', { class: 'no', text: '⚠ ' + x.why }) : h('span', { class: 'muted', text: 'no' }) },
                ], j.sessions, { empty: j.tracking ? 'No conversation yet.' : 'Conversations are not tracked (sessions.tracking: false).' }));
        }).catch(e => problem(sessions, e, 'conversations'));

        api('GET', 'estimation').then(j => {
            const rows = Object.entries(j.models || {});
            fill(estimator, h('h2', { text: 'What the output estimator has learned' }),
                h('p', { class: 'muted', text: 'Mode ' + j.mode + ': a lease reserves the ' + Math.round(j.quantile * 100) + 'th percentile of a model\'s recent output once ' +
                    j.min_samples + ' answers are in and it is beaten at most ' + fmtPct(j.max_undershoot) + ' of the time; max_tokens until then.' }),
                tableOf([
                    { t: 'Model', f: x => x[0] },
                    { t: 'Samples', n: true, f: x => fmtInt(x[1].samples) },
                    { t: 'Predicting', f: x => x[1].predicting ? h('span', { class: 'yes', text: '✓ yes' }) : h('span', { class: 'muted', text: 'not yet' }) },
                    { t: 'Median', n: true, f: x => fmtInt(x[1].median) },
                    { t: 'p' + Math.round(j.quantile * 100), n: true, f: x => fmtInt(x[1].p95) },
                    { t: 'Max', n: true, f: x => fmtInt(x[1].max) },
                    { t: 'Beaten', n: true, f: x => fmtPct(x[1].undershoot_rate) },
                    { t: 'Input / kB', n: true, f: x => x[1].input && x[1].input.tokens_per_kb !== null ? x[1].input.tokens_per_kb.toFixed(1) : '—' },
                ], rows, { empty: 'Nothing learned yet: no answer has come back.' }));
        }).catch(e => problem(estimator, e, 'the estimator'));

        api('GET', 'requests?limit=1000').then(j => {
            const by = {};
            for (const r of j.requests) {
                if (!r.lease || r.usage.output_tokens < 0 || !r.model) { continue; }
                const m = by[r.model] || (by[r.model] = { model: r.model, n: 0, leased: 0, used: 0 });
                m.n++;
                m.leased += r.lease.output_tokens;
                m.used += r.usage.output_tokens;
            }
            const rows = Object.values(by).sort((a, b) => (b.leased - b.used) - (a.leased - a.used));
            fill(reserved, h('h2', { text: 'Output reserved but never used' }),
                h('p', { class: 'muted', text: 'Over the ' + j.requests.length + ' most recent requests the inspector holds: what their leases held of the output window against what the answers used. Reserved and unused output is capacity other requests waited for.' }),
                tableOf([
                    { t: 'Model', f: x => x.model },
                    { t: 'Answers', n: true, f: x => fmtInt(x.n) },
                    { t: 'Reserved', n: true, f: x => fmtTokens(x.leased) },
                    { t: 'Used', n: true, f: x => fmtTokens(x.used) },
                    { t: 'Unused', n: true, f: x => fmtTokens(Math.max(0, x.leased - x.used)) + ' (' + fmtPct(x.leased ? Math.max(0, x.leased - x.used) / x.leased : null) + ')' },
                ], rows, { empty: 'No answered request in the inspector yet.' }));
        }).catch(e => problem(reserved, e, 'the inspector'));

        /* the inspector's requests by key and model: does the client ask
         * for a cache, and does it serve (/admin/cache-advice) */
        api('GET', 'cache-advice').then(j => {
            const cls = v => v === 'working' ? 'yes' : v === 'too small' || v === null ? 'muted' : 'no';
            fill(cache, h('h2', { text: 'Is the prompt cache used?' }),
                h('p', { class: 'muted', text: 'By key and model over the ' + j.requests_read + ' requests the inspector holds; a verdict once ' + j.min_requests + ' are in. No breakpoint on a large prefix is the client\'s to fix; breakpoints that are not read are a routing problem.' }),
                tableOf([
                    { t: 'Key', f: g => g.key || '(none)' },
                    { t: 'Model', f: g => g.model },
                    { t: 'Requests', n: true, f: g => fmtInt(g.requests) },
                    { t: 'Breakpoints', n: true, f: g => fmtPct(g.breakpoint_rate) },
                    { t: 'Prefix', n: true, f: g => fmtTokens(g.mean_prefix_tokens) },
                    { t: 'Cache hit', n: true, f: g => fmtPct(g.cache_hit_rate) },
                    { t: 'Verdict', f: g => h('span', { class: cls(g.verdict), text: g.says }) },
                ], j.groups, { empty: 'No answered Message in the inspector yet.' }));
        }).catch(e => problem(cache, e, 'cache advice'));

        api('GET', 'batches?limit=20').then(j => {
            const counts = c => c.processing === null ? '—'
                : fmtInt(c.succeeded) + ' of ' + fmtInt(c.processing + c.succeeded + c.errored + c.canceled + c.expired) +
                  (c.errored ? ', ' + fmtInt(c.errored) + ' errored' : '');
            fill(batches, h('h2', { text: 'Batches' }),
                h('p', { class: 'muted', text: 'The newest message batches of the pool (batch.api and the spill lane), each on the account that holds it. A batch holds its estimate on its key\'s and its account\'s caps until its results are charged, at half the Messages price, by the client that reads them or by the gateway itself.' }),
                tableOf([
                    { t: 'Batch', f: b => h('span', { class: 'mono', text: b.id.replace(/^msgbatch_/, '').slice(0, 12) + '…' }) },
                    { t: 'Key', f: b => b.key || '(open)' },
                    { t: 'Account', f: b => accountLink(b.account) },
                    { t: 'State', f: b => b.processing_status.replace('_', ' ') },
                    { t: 'Succeeded', n: true, f: b => counts(b.request_counts) },
                    { t: 'Held', n: true, f: b => b.held_usd ? fmtUsd(b.held_usd) : '—' },
                    { t: 'Charged', n: true, f: b => b.charged ? fmtUsd(b.charged_usd) : h('span', { class: 'muted', text: 'not yet' }) },
                    { t: 'Made', n: true, f: b => since(parseTime(b.created_at) || Date.now()) },
                ], j.batches, { empty: 'No batch: batch.api and the spill lane are off, or nothing was sent as a batch yet.' }));
        }).catch(e => problem(batches, e, 'the batches'));
    };
    draw();
}

/* ---- Keys ---- */

function pageKeys(main) {
    const msg = h('div');
    const minted = h('div');
    const body = h('div', { class: 'card' });
    const name = h('input', { required: true, pattern: '[A-Za-z0-9_\\-][A-Za-z0-9._\\-]{0,63}', placeholder: 'ci-bot' });
    const admin = h('input', { type: 'checkbox' });
    const models = h('input', { placeholder: '* (every model)' });
    const pool = h('input', { placeholder: 'every account' });
    const rpm = h('input', { type: 'number', min: '1', step: '1', placeholder: 'no limit' });
    const cap = h('input', { type: 'number', min: '0', step: '0.01', placeholder: 'no cap' });
    const days = h('input', { type: 'number', min: '1', step: '1', placeholder: 'never' });
    const err = h('p', { class: 'error', role: 'alert' });
    const form = h('form', { class: 'card' }, h('h2', { text: 'Mint a key' }),
        h('div', { class: 'form-grid' }, field('Name', name), field('Models (patterns, comma-separated)', models),
          field('Accounts it may use (ids, comma-separated)', pool), field('Requests per minute', rpm),
          field('Spend cap, USD per window', cap), field('Expires in (days)', days)),
        h('label', { class: 'inline' }, admin, 'admin: may use /admin and this console'),
        h('div', null, h('button', { type: 'submit', class: 'primary', text: 'Mint' })), err);
    form.addEventListener('submit', async (ev) => {
        ev.preventDefault();
        err.textContent = '';
        const b = { name: name.value.trim() };
        if (admin.checked) { b.admin = true; }
        if (models.value.trim()) { b.models = splitList(models.value); }
        if (pool.value.trim()) { b.pool = splitList(pool.value); }
        if (rpm.value) { b.rpm = Number(rpm.value); }
        if (cap.value) { b.spend_cap_usd = Number(cap.value); }
        if (days.value) { b.expires_in_seconds = Number(days.value) * 86400; }
        try {
            const j = await api('POST', 'keys', b);
            fill(minted, showSecret(j.key, 'Key “' + j.record.name + '” minted'));
            form.reset();
            draw();
        } catch (e) { err.textContent = e.message; }
    });
    put(main, head('Keys'), msg, minted, form, body);

    const say = (cls, text) => fill(msg, h('div', { class: 'banner ' + cls, role: 'status', text: text }));
    const draw = async () => {
        let j, st;
        try {
            [j, st] = await Promise.all([api('GET', 'keys'), refreshStatus()]);
        } catch (e) { problem(body, e, 'the keys could not be read'); return; }
        const live = {};
        for (const k of st.keys || []) { live[k.name] = k; }
        if (!j.keys.length) { admin.checked = true; }
        fill(body, h('h2', { text: 'Keys' }),
            !j.keys.length ? h('p', { class: 'banner note', text: 'No key yet: the gateway is in open mode (this machine only). The first key minted must be an admin key; it ends open mode.' }) : null,
            tableOf([
                { t: 'Name', f: k => h('strong', { text: k.name }) },
                { t: 'Source', f: k => k.source === 'file' ? h('span', { class: 'tag lock', text: 'file · locked', title: 'change the YAML file and reload' }) : h('span', { class: 'tag', text: 'minted' }) },
                { t: 'Admin', f: k => k.admin ? 'yes' : 'no' },
                { t: 'Models', f: k => (k.models || []).join(', ') },
                { t: 'Accounts', f: k => k.pool && k.pool.length ? k.pool.join(', ') : 'all' },
                { t: 'RPM', n: true, f: k => (live[k.name] ? fmtInt(live[k.name].rpm_used) : '—') + ' / ' + (k.rpm === null ? '∞' : fmtInt(k.rpm)) },
                { t: 'Spend, ' + spendHours(st.accounts) + ' h', n: true, f: k => { const sp = live[k.name] && live[k.name].spend; return sp ? fmtUsd(sp.window_usd) + (k.spend_cap_usd !== null ? ' / ' + fmtUsd(k.spend_cap_usd) : '') : '—'; } },
                { t: 'Expires', n: true, f: k => k.expires_at ? countdown(k.expires_at - Date.now() / 1000) : 'never' },
                { t: 'Last used', n: true, f: k => k.last_used_at ? since(parseTime(k.last_used_at)) : h('span', { class: 'muted', text: 'not since start' }) },
                { t: '', cls: 'actions', f: k => k.source === 'file' ? h('span', { class: 'muted', text: 'change the file' }) : [
                    h('button', { type: 'button', class: 'small', text: 'Rescope', on: { click: () => rescope(k, say, draw) } }),
                    h('button', { type: 'button', class: 'small danger', text: 'Revoke', on: { click: () =>
                        confirmDialog('Revoke ' + k.name + '?', 'Every worker refuses it from its next request. This cannot be undone: mint another key instead.', 'Revoke', async () => {
                            try {
                                await api('DELETE', 'keys/' + encodeURIComponent(k.name));
                                say('good', k.name + ' revoked: it is refused from now on');
                                /* its secret, if still on screen, is of no use to anyone now */
                                const card = minted.querySelector('.secret');
                                if (card && card.dataset.keyName === k.name) { clear(minted); }
                            } catch (e) { say('bad', e.message); }
                            draw();
                        }) } })] },
            ], j.keys, { empty: 'No key.' }),
            h('p', { class: 'muted', text: 'Keys are stored as their SHA-256 only: a key\'s secret is shown once, when it is minted.' }),
            (j.revoked || []).length ? [h('h2', { text: 'Revoked' }),
                h('p', { class: 'muted', text: 'Keys revoked since the gateway started, and whether anything still sends them (each is refused with 401 and shown in the live feed).' }),
                tableOf([
                    { t: 'Name', f: k => h('strong', { text: k.name }) },
                    { t: 'Revoked', n: true, f: k => since(parseTime(k.revoked_at)) },
                    { t: 'Still sent', n: true, f: k => k.refused ? h('span', { class: 'no', text: fmtInt(k.refused) + ' times' }) : 'no' },
                    { t: 'Last sent', n: true, f: k => k.last_refused_at ? since(parseTime(k.last_refused_at)) : '—' },
                ], j.revoked)] : null);
    };
    draw();
}

function rescope(k, say, reload) {
    const models = h('input', { value: (k.models || ['*']).join(', ') });
    const pool = h('input', { value: (k.pool || []).join(', '), placeholder: 'every account' });
    const rpm = h('input', { type: 'number', min: '1', value: k.rpm === null ? '' : String(k.rpm), placeholder: 'no limit' });
    const cap = h('input', { type: 'number', min: '0', step: '0.01', value: k.spend_cap_usd === null ? '' : String(k.spend_cap_usd), placeholder: 'no cap' });
    const prio = h('select', null, ['interactive', 'batch'].map(p => h('option', { value: p, text: p, selected: p === k.priority })));
    const err = h('p', { class: 'error', role: 'alert' });
    dialog('Rescope ' + k.name, [h('div', { class: 'form-grid' }, field('Models', models), field('Accounts', pool),
        field('Requests per minute', rpm), field('Spend cap, USD', cap), field('Priority', prio)), err], [
        h('button', { type: 'button', text: 'Cancel', on: { click: closeDialog } }),
        h('button', { type: 'button', class: 'primary', text: 'Save', on: { click: async () => {
            try {
                await api('PATCH', 'keys/' + encodeURIComponent(k.name), {
                    models: splitList(models.value).length ? splitList(models.value) : ['*'],
                    pool: splitList(pool.value), rpm: rpm.value ? Number(rpm.value) : null,
                    spend_cap_usd: cap.value ? Number(cap.value) : null, priority: prio.value });
                closeDialog();
                say('good', k.name + ' rescoped: every worker applies it from its next request');
                reload();
            } catch (e) { err.textContent = e.message; }
        } } }),
    ]);
}

function copyButton(text) {
    const b = h('button', { type: 'button', class: 'small', text: 'Copy' });
    b.addEventListener('click', async () => {
        try {
            await navigator.clipboard.writeText(text);
            b.textContent = 'Copied ✓';
        } catch (e) {
            const sel = window.getSelection();
            const pre = b.parentNode.querySelector('pre, code');
            if (pre && sel) {
                const range = document.createRange();
                range.selectNodeContents(pre);
                sel.removeAllRanges();
                sel.addRange(range);
                b.textContent = 'Selected: press Ctrl+C';
            }
        }
    });
    return b;
}

function exportLines(key) {
    return 'export ANTHROPIC_BASE_URL=' + location.origin + '\n' +
           'export ANTHROPIC_AUTH_TOKEN=' + key;
}

/* a key's secret, once; with its export lines unless the caller shows them */
function showSecret(key, title, noLines) {
    const lines = exportLines(key);
    return h('div', { class: 'card secret', role: 'status', 'data-key-name': title.replace(/^Key “|”.*$/g, '') },
        h('h2', { text: title + ': its secret, shown once' }),
        h('div', { class: 'copyrow' }, h('pre', { class: 'code', 'data-secret': '1', text: key }), copyButton(key)),
        h('p', { class: 'muted', text: 'Copy it now: the gateway keeps only its SHA-256 and cannot show it again.' + (noLines ? '' : ' For a client on this machine:') }),
        noLines ? null : h('div', { class: 'copyrow' }, h('pre', { class: 'code', text: lines }), copyButton(lines)));
}

/* ---- Settings ---- */

function pageSettings(main) {
    const msg = h('div');
    const body = h('div');
    const reload = h('button', { type: 'button', text: 'Reload the YAML file', on: { click: async () => {
        reload.disabled = true;
        fill(msg, h('div', { class: 'banner note', text: 'Reloading…' }));
        try {
            const j = await api('POST', 'reload', {});
            fill(msg, h('div', { class: 'banner good', role: 'status' },
                h('strong', { text: 'The file loaded; nginx is reloading. ' }),
                'Accounts: ' + j.accounts.join(', ') + '. ',
                j.added.length ? 'Added: ' + j.added.join(', ') + '. ' : '',
                j.removed.length ? 'Removed: ' + j.removed.join(', ') + '. ' : '',
                'Strategy: ' + j.strategy + '.'));
            setTimeout(draw, 1500);
        } catch (e) {
            /* the gateway's words may say it already: once is enough */
            fill(msg, h('div', { class: 'banner bad', role: 'alert' }, h('strong', { text: 'Nothing was changed. ' }),
                e.message.replace(/^nothing was changed:?\s*/i, '')));
        } finally { reload.disabled = false; }
    } } });
    put(main, head('Settings', reload), msg, body);

    const draw = async () => {
        let j, st, strategies;
        try {
            [j, st, strategies] = await Promise.all([api('GET', 'settings'), refreshStatus(), api('GET', 'strategies')]);
        } catch (e) { problem(body, e, 'the settings could not be read'); return; }
        const strat = j.settings['routing.strategy'];
        const sel = h('select', { 'aria-label': 'Routing strategy' }, (strat.options || []).map(o => h('option', { value: o, text: o, selected: o === strat.value })));
        const apply = h('button', { type: 'button', class: 'primary', text: 'Apply', on: { click: async () => {
            try {
                await api('POST', 'settings', { 'routing.strategy': sel.value });
                fill(msg, h('div', { class: 'banner good', role: 'status', text: 'Every worker routes by ' + sel.value + ' from its next request.' }));
                draw();
            } catch (e) { fill(msg, h('div', { class: 'banner bad', role: 'alert', text: e.message })); }
        } } });
        const revert = strat.source === 'runtime' ? h('button', { type: 'button', text: 'Back to the file\'s (' + strat.file_value + ')', on: { click: async () => {
            try { await api('POST', 'settings', { 'routing.strategy': null }); draw(); } catch (e) { fill(msg, h('div', { class: 'banner bad', text: e.message })); }
        } } }) : null;
        const store = st.store;
        fill(body, 
            h('div', { class: 'cards' },
                h('div', { class: 'card' }, h('h2', { text: 'Routing strategy' }),
                    h('div', { class: 'toolbar' }, sel, apply, revert),
                    h('p', { class: 'muted' }, 'Now ', h('strong', { text: strat.value }), ', ', sourceText(strat), '.'),
                    tableOf([
                        { t: 'Strategy', f: x => h('span', { class: 'mono', text: x.name + (x.current ? ' ✓' : '') }) },
                        { t: 'What it does', f: x => x.description + (x.plugin ? ' (a module)' : '') },
                    ], strategies.strategies || [])),
                h('div', { class: 'card' }, h('h2', { text: 'This gateway' }), h('dl', { class: 'kv' },
                    h('dt', { text: 'Version' }), h('dd', { text: st.gateway.version }),
                    h('dt', { text: 'Up' }), h('dd', { text: fmtClock(st.gateway.uptime_seconds) }),
                    h('dt', { text: 'Configuration' }), h('dd', { class: 'mono', text: (j.config_file || '—') + ' (load ' + j.config_generation + ')' }),
                    h('dt', { text: 'Store' }), h('dd', { text: store.backend + (store.path ? ' ' + store.path : '') + (store.url ? ' ' + store.url : '') + ' — ' + store.state + (store.error ? ': ' + store.error : '') }),
                    store.secret_key ? [h('dt', { text: 'Sealing key' }), h('dd', { text: store.secret_key.source + (store.secret_key.path ? ' ' + store.secret_key.path : '') + ', id ' + store.secret_key.id })] : null,
                    h('dt', { text: 'Prices' }), h('dd', { text: j.pricing ? (j.pricing.builtin_as_of ? 'built in, as of ' + j.pricing.builtin_as_of + ' (' + j.pricing.builtin_models + ' models)' : 'none built in') + (j.pricing.file_models ? ', ' + j.pricing.file_models + ' from the file' : '') : 'none: costs are unknown' }),
                    h('dt', { text: 'Accounts' }), h('dd', { text: st.pool.total + ' (' + st.pool.ready + ' ready)' }),
                    h('dt', { text: 'Queue' }), h('dd', { text: st.queue.depth + ' waiting, at most ' + st.queue.max_size }),
                    h('dt', { text: 'Keys' }), h('dd', { text: String((st.keys || []).length) })))),
            h('div', { class: 'card' }, h('h2', { text: 'What runs, and where each value came from' }),
                tableOf([
                    { t: 'Setting', f: x => h('span', { class: 'mono', text: x[0] }) },
                    { t: 'Value', f: x => h('span', { class: 'mono', text: JSON.stringify(x[1].value) }) },
                    { t: 'From', f: x => sourceText(x[1]) },
                ], Object.entries(j.settings))));
    };
    draw();
}

function sourceText(v) {
    if (v.source === 'runtime') {
        return 'set here (the file says ' + JSON.stringify(v.file_value) + ')';
    }
    return v.source === 'file' ? 'from the file' : 'the default';
}

/* ---- Connect a client ---- */

function pageConnect(main) {
    const out = h('div');
    /* a name no other key has: the day, and a few letters of the clock */
    const fresh = () => 'client-' + new Date().toISOString().slice(0, 10) + '-' + Date.now().toString(36).slice(-4);
    const name = h('input', { value: fresh(), 'aria-label': 'The new key\'s name' });
    const err = h('p', { class: 'error', role: 'alert' });
    const mint = h('button', { type: 'button', class: 'primary', text: 'Mint a key for this client', on: { click: async () => {
        err.textContent = '';
        try {
            const j = await api('POST', 'keys', { name: name.value.trim() });
            fill(out, showSecret(j.key, 'Key “' + j.record.name + '”', true), snippets(j.key));
            name.value = fresh();
        } catch (e) { err.textContent = e.message; }
    } } });
    const mine = h('button', { type: 'button', text: 'Use the key I signed in with', on: { click: () => {
        fill(out, h('p', { class: 'banner note', text: 'This is an admin key: fine for you on this machine; give others a key of their own.' }), snippets(S.key));
    } } });
    put(main, head('Connect a client'),
        h('p', null, 'Any Anthropic client works unchanged: point it at this gateway with two environment variables. Claude Code, the SDKs and curl read them.'),
        S.open ? h('div', { class: 'card' }, h('p', { text: 'This gateway is in open mode: it asks no key of programs on this machine, so any token does.' }), snippets('unused'))
               : h('div', { class: 'card' }, h('div', { class: 'toolbar' }, name, mint, h('span', { class: 'muted', text: 'or' }), mine), err),
        out);
}

function snippets(key) {
    const lines = exportLines(key);
    const curl = 'curl ' + location.origin + '/v1/messages \\\n' +
                 '  -H "x-api-key: $ANTHROPIC_AUTH_TOKEN" -H "anthropic-version: 2023-06-01" \\\n' +
                 '  -H "content-type: application/json" \\\n' +
                 '  -d \'{"model": "claude-haiku-4-5", "max_tokens": 64, "messages": [{"role": "user", "content": "Hello"}]}\'';
    return h('div', { class: 'card' },
        h('h2', { text: 'In a shell, then run claude' }),
        h('div', { class: 'copyrow' }, h('pre', { class: 'code', 'data-export': '1', text: lines }), copyButton(lines)),
        h('h3', { text: 'Try it with curl' }),
        h('div', { class: 'copyrow' }, h('pre', { class: 'code', text: curl }), copyButton(curl)),
        h('p', { class: 'muted', text: 'The Python and TypeScript SDKs read the same two variables: Anthropic() and new Anthropic() need no argument.' }));
}

/* ---- First run: add a credential, verify it, connect ---- */

function pageWelcome(main) {
    const steps = ['Credential', 'Account', 'Verify', 'Connect'];
    const rail = h('ol', { class: 'rail', 'aria-label': 'Steps' }, steps.map(t => h('li', { text: t })));
    const body = h('div', { class: 'card' });
    const empty = S.status && !S.status.accounts.length;
    put(main, head(empty ? 'Welcome: add your first account' : 'Add an account'),
        empty ? h('p', null, 'The pool is empty. Add a Claude API credential, check what its answers tell the router, and connect a client.') : null,
        rail, body);
    let account = null;

    const at = (n) => {
        [...rail.children].forEach((li, i) => {
            li.className = i < n ? 'done' : '';
            if (i === n) { li.setAttribute('aria-current', 'step'); } else { li.removeAttribute('aria-current'); }
        });
        clear(body);
    };

    const routes = [
        { id: 'anthropic_api', t: 'Anthropic API key', d: 'sk-ant-api03-… from the Claude Console', ok: true },
        { id: 'subscription', t: 'Claude subscription', d: 'not available in this build', ok: false },
        { id: 'bedrock', t: 'Amazon Bedrock', d: 'in the YAML file (docs/providers.md): its credentials never pass through a browser', ok: false },
        { id: 'vertex', t: 'Google Vertex AI', d: 'in the YAML file (docs/providers.md): a service account key stays on the server', ok: false },
    ];

    const step1 = () => {
        at(0);
        put(body, h('h2', { text: 'Which credential?' }),
            h('div', { class: 'routes' }, routes.map(r => h('button', {
                type: 'button', class: 'route', disabled: !r.ok, 'aria-pressed': 'false',
                on: { click: step2 } }, h('strong', { text: r.t }), h('small', { text: r.d })))));
        body.querySelector('.route').focus();
    };

    const step2 = () => {
        at(1);
        const name = h('input', { placeholder: 'primary', required: true });
        const key = h('input', { type: 'password', autocomplete: 'off', spellcheck: 'false', required: true, placeholder: 'sk-ant-api03-…' });
        const id = h('input', { placeholder: 'from the name' });
        const base = h('input', { placeholder: 'https://api.anthropic.com' });
        const prio = h('input', { type: 'number', value: '0', step: '1' });
        const err = h('p', { class: 'error', role: 'alert' });
        const go = h('button', { type: 'submit', class: 'primary', text: 'Test and add' });
        const form = h('form', null, h('h2', { text: 'The account' }),
            h('div', { class: 'form-grid' }, field('Name', name), field('API key', key)),
            h('details', null, h('summary', { text: 'Advanced' }),
                h('div', { class: 'form-grid' }, field('Id', id), field('Base URL', base), field('Priority (lower goes first)', prio))),
            h('p', { class: 'muted', text: 'The credential is tried with one max_tokens: 1 request before anything is stored; stored, it is sealed (AES-256-GCM) and never shown again.' }),
            h('div', { class: 'toolbar' }, h('button', { type: 'button', text: 'Back', on: { click: step1 } }), go), err);
        form.addEventListener('submit', async (ev) => {
            ev.preventDefault();
            err.textContent = '';
            go.disabled = true;
            go.textContent = 'Testing…';
            const slug = (id.value.trim() || name.value.trim().toLowerCase().replace(/[^a-z0-9_-]+/g, '-').replace(/^-+|-+$/g, '')).slice(0, 64) || 'account';
            const b = { id: slug, name: name.value.trim() || slug, api_key: key.value.trim(), priority: Number(prio.value || 0) };
            if (base.value.trim()) { b.base_url = base.value.trim(); }
            try {
                const j = await api('POST', 'accounts', b);
                key.value = '';
                account = j.id || slug;
                refreshStatus().catch(() => null);
                step3();
            } catch (e) {
                err.textContent = e.message;
                go.disabled = false;
                go.textContent = 'Test and add';
            }
        });
        put(body, form);
        name.focus();
    };

    const step3 = async () => {
        at(2);
        put(body, h('h2', { text: 'Verify: what its answers tell the router' }), h('p', { class: 'muted', text: 'Asking the upstream once more (max_tokens: 1)…' }));
        let t;
        try {
            t = await api('POST', 'accounts/' + encodeURIComponent(account) + '/test', {});
        } catch (e) {
            put(body, h('div', { class: 'banner bad', role: 'alert', text: e.message }));
            return;
        }
        fill(body, h('h2', { text: 'Verify: what its answers tell the router' }),
            h('p', null, h('strong', { text: account + ' was added. ' }), probeLine(t)),
            headerCheck(t),
            h('div', { class: 'toolbar' }, h('button', { type: 'button', class: 'primary', text: 'Connect a client', on: { click: step4 } })));
    };

    const step4 = async () => {
        at(3);
        put(body, h('h2', { text: 'Connect a client' }));
        if (S.open) {
            put(body, h('p', { text: 'This gateway is in open mode (no keys): programs on this machine need none.' }), snippets('unused'));
            return;
        }
        const mintOne = async () => {
            try {
                const j = await api('POST', 'keys', { name: 'first-client-' + Date.now().toString(36) });
                put(body, h('p', { text: 'A key of its own for your client (not an admin key):' }), showSecret(j.key, 'Key “' + j.record.name + '”', true), snippets(j.key),
                    h('p', null, h('a', { href: '#/overview', text: 'Go to the overview' })));
            } catch (e) {
                put(body, h('div', { class: 'banner bad', role: 'alert', text: e.message }));
            }
        };
        /* a client key already there (`tokenbiryani init` makes one): no
         * second one unasked; its secret is the operator's, not ours */
        let clients = [];
        try { clients = (await api('GET', 'keys')).keys.filter(k => !k.admin); } catch (e) { clients = []; }
        if (!clients.length) {
            await mintOne();
            return;
        }
        const another = h('button', { type: 'button', text: 'Mint another key', on: { click: () => { another.disabled = true; mintOne(); } } });
        put(body, h('p', null, 'This gateway has client key' + (clients.length > 1 ? 's' : '') + ' already: ' +
                clients.map(k => k.name).join(', ') + '. The export lines `tokenbiryani init` printed carry one; a key\'s secret is shown only when it is minted. ',
                'For another client, mint a key of its own: '), h('div', { class: 'toolbar' }, another),
            h('p', null, h('a', { href: '#/overview', text: 'Go to the overview' })));
    };

    step1();
}

function headerCheck(t) {
    const checked = t.checked || [];
    const parsed = t.parsed || {};
    let note;
    if (t.family === 'none') {
        note = h('div', { class: 'banner note', text: 'No rate-limit header came back yet. That is not an error: the router serves this account on assumed headroom and reads its limits from the first answer that carries them.' });
    } else if (t.family === 'unified') {
        note = h('div', { class: 'banner note', text: 'It answered with unified (subscription) limits instead of the nine per-window headers.' });
    } else if (t.missing && t.missing.length) {
        note = h('div', { class: 'banner bad', text: 'Missing: ' + t.missing.join(', ') + '. The router cannot see that part of this account\'s limits.' });
    } else {
        note = h('div', { class: 'banner good', text: 'All nine headers came back: ' + (t.consequence || 'routing sees this account\'s limits') + '.' });
    }
    const win = (hdr) => {
        const m = /anthropic-ratelimit-(requests|input-tokens|output-tokens)-(limit|remaining|reset)/.exec(hdr);
        if (!m) { return '—'; }
        const w = parsed[m[1].replace('-', '_')];
        if (!w) { return '—'; }
        const v = m[2] === 'reset' ? w.reset_in_seconds : w[m[2]];
        return v === null || v === undefined ? '—' : (m[2] === 'reset' ? 'in ' + fmtClock(v) : fmtInt(v));
    };
    return [note, tableOf([
        { t: '', f: c => h('span', { class: c.present ? 'yes' : 'no', text: c.present ? '✓' : '✕', 'aria-label': c.present ? 'present' : 'missing' }) },
        { t: 'Header', f: c => h('span', { class: 'check', text: c.header }) },
        { t: 'Value', f: c => h('span', { class: 'check', text: c.present ? c.value : 'not sent' }) },
        { t: 'Read as', n: true, f: c => c.present ? win(c.header) : '—' },
    ], checked)];
}

const PAGES = {
    overview: pageOverview, accounts: pageAccounts, usage: pageUsage, requests: pageRequests,
    efficiency: pageEfficiency, keys: pageKeys, settings: pageSettings, connect: pageConnect,
    welcome: pageWelcome,
};

const TITLES = {
    overview: 'Overview', accounts: 'Accounts', usage: 'Usage', requests: 'Requests',
    efficiency: 'Efficiency', keys: 'Keys', settings: 'Settings', connect: 'Connect a client',
    welcome: 'Add an account',
};

/* ---- theme and wiring ---- */

function applyTheme(t) {
    document.documentElement.dataset.theme = t === 'light' ? 'light' : 'dark';
}

document.addEventListener('DOMContentLoaded', () => {
    $('gate-form').addEventListener('submit', async (ev) => {
        ev.preventDefault();
        const k = $('gate-key').value.trim();
        if (!k) { return; }
        if (/^sk-ant-/.test(k)) {
            /* an upstream credential: neither kept here nor sent */
            $('gate-key').value = '';
            $('gate-error').textContent = 'That is an Anthropic API key (sk-ant-…), not this gateway\'s: sign in with an admin key of the gateway ' +
                '(bir_…, in tokenbiryani.yaml, or the one `tokenbiryani init` or `make run` printed). Anthropic keys are added as accounts once you are in.';
            return;
        }
        S.key = k;
        save(KEY_STORE, k);
        $('gate-key').value = '';
        await signIn();
    });
    $('signout').addEventListener('click', () => {
        save(KEY_STORE, null);
        S.key = null;
        gate('Signed out: the key was removed from this browser.');
    });
    $('theme').addEventListener('click', () => {
        const t = document.documentElement.dataset.theme === 'light' ? 'dark' : 'light';
        save(THEME_STORE, t);
        applyTheme(t);
    });
    $('dialog').addEventListener('click', (ev) => { if (ev.target === $('dialog')) { closeDialog(); } });
    window.addEventListener('hashchange', route);
    /* the page's own link in the menu starts it afresh */
    $('nav').addEventListener('click', (ev) => {
        const a = ev.target.closest('a');
        if (a && a.getAttribute('href') === location.hash) { route(); }
    });
    setInterval(tick, 1000);
    start();
});

})();
