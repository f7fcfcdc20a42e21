/*
 * The tokenbiryani console's building blocks: the browser's storage, the
 * DOM (every string as text, never as markup), numbers and time.  Loaded
 * before console.js, which takes them from TBUI; nothing here touches the
 * admin API or the key.
 */

'use strict';

const TBUI = (function () {

/* ---- storage (a browser may refuse it: the key then lasts the tab) ---- */

function load(name) {
    try { return window.localStorage.getItem(name); } catch (e) { return null; }
}

function save(name, value) {
    try {
        if (value === null) {
            window.localStorage.removeItem(name);
        } else {
            window.localStorage.setItem(name, value);
        }
    } catch (e) { /* private mode: kept in memory only */ }
}

/* ---- DOM ---- */

function h(tag, props, ...kids) {
    const el = document.createElement(tag);
    set(el, props);
    add(el, kids);
    return el;
}

const SVGNS = 'http://www.w3.org/2000/svg';

function s(tag, attrs, ...kids) {
    const el = document.createElementNS(SVGNS, tag);
    for (const k in attrs || {}) {
        if (attrs[k] !== null && attrs[k] !== undefined) {
            el.setAttribute(k, String(attrs[k]));
        }
    }
    add(el, kids);
    return el;
}

function set(el, props) {
    for (const k in props || {}) {
        const v = props[k];
        if (v === null || v === undefined || v === false) {
            continue;
        }
        if (k === 'class') {
            el.className = v;
        } else if (k === 'text') {
            el.textContent = v;
        } else if (k === 'on') {
            for (const ev in v) { el.addEventListener(ev, v[ev]); }
        } else if (k === 'data') {
            for (const d in v) { el.dataset[d] = v[d]; }
        } else if (k === 'style') {
            for (const p in v) { el.style.setProperty(p, v[p]); }
        } else if (k in el && typeof v !== 'string') {
            el[k] = v;
        } else {
            el.setAttribute(k, v === true ? '' : String(v));
        }
    }
}

function add(el, kids) {
    for (const k of kids) {
        if (k === null || k === undefined || k === false) {
            continue;
        }
        if (Array.isArray(k)) {
            add(el, k);
        } else if (k instanceof Node) {
            el.appendChild(k);
        } else {
            el.appendChild(document.createTextNode(String(k)));
        }
    }
}

function clear(el) {
    while (el.firstChild) { el.removeChild(el.firstChild); }
    return el;
}

/* append, skipping null and false (Element.append would write "null") */
function put(el, ...kids) {
    add(el, kids);
    return el;
}

function fill(el, ...kids) {
    return put(clear(el), ...kids);
}

function $(id) { return document.getElementById(id); }

/* ---- numbers and time ---- */

function fmtInt(n) {
    return n === null || n === undefined ? '—' : Math.round(n).toLocaleString('en-US');
}

function fmtTokens(n) {
    if (n === null || n === undefined || n < 0) { return '—'; }
    if (n >= 1e9) { return (n / 1e9).toFixed(2) + 'B'; }
    if (n >= 1e6) { return (n / 1e6).toFixed(n >= 1e7 ? 1 : 2) + 'M'; }
    if (n >= 1e4) { return Math.round(n / 1e3) + 'k'; }
    if (n >= 1e3) { return (n / 1e3).toFixed(1) + 'k'; }
    return String(Math.round(n));
}

function fmtUsd(n) {
    if (n === null || n === undefined) { return '—'; }
    if (n === 0) { return '$0.00'; }
    /* a batch's hold of a few requests: its own digits, not "$0.0000" */
    if (Math.abs(n) < 0.000001) { return (n < 0 ? '-' : '') + '<$0.000001'; }
    if (Math.abs(n) < 0.0001) { return '$' + n.toFixed(6); }
    if (Math.abs(n) < 0.01) { return '$' + n.toFixed(4); }
    if (Math.abs(n) < 100) { return '$' + n.toFixed(2); }
    return '$' + Math.round(n).toLocaleString('en-US');
}

function fmtPct(f) {
    if (f === null || f === undefined || isNaN(f)) { return '—'; }
    const p = f * 100;
    return (p > 0 && p < 1 ? p.toFixed(1) : Math.round(p)) + '%';
}

function fmtClock(secs) {
    if (secs === null || secs === undefined) { return '—'; }
    secs = Math.max(0, Math.ceil(secs));
    if (secs >= 86400) {
        return Math.floor(secs / 86400) + 'd ' + Math.floor(secs % 86400 / 3600) + 'h';
    }
    if (secs >= 3600) {
        return Math.floor(secs / 3600) + 'h' + String(Math.floor(secs % 3600 / 60)).padStart(2, '0') + 'm';
    }
    return Math.floor(secs / 60) + ':' + String(secs % 60).padStart(2, '0');
}

/* a span of time in words: a bucket's width, an uptime */
function fmtSpan(secs) {
    if (secs === null || secs === undefined) { return '—'; }
    const units = [[86400, 'day'], [3600, 'hour'], [60, 'minute'], [1, 'second']];
    for (const [n, w] of units) {
        if (secs >= n && secs % n === 0) {
            const k = secs / n;
            return k + ' ' + w + (k === 1 ? '' : 's');
        }
    }
    return fmtClock(secs);
}

function fmtMs(ms) {
    if (ms === null || ms === undefined || ms < 0) { return '—'; }
    return ms < 1000 ? Math.round(ms) + ' ms' : (ms / 1000).toFixed(2) + ' s';
}

function fmtAgo(secs) {
    if (secs === null || secs === undefined) { return '—'; }
    secs = Math.max(0, secs);
    if (secs < 60) { return Math.floor(secs) + 's ago'; }
    if (secs < 3600) { return Math.floor(secs / 60) + 'm ago'; }
    if (secs < 86400) { return Math.floor(secs / 3600) + 'h ago'; }
    return Math.floor(secs / 86400) + 'd ago';
}

function parseTime(iso) {
    const t = Date.parse(iso);
    return isNaN(t) ? null : t;
}

/* a countdown: the element keeps its deadline and the ticker rewrites it */
function countdown(secs, prefix) {
    const el = h('span', { class: 'num' });
    if (secs === null || secs === undefined) {
        el.textContent = '—';
        return el;
    }
    el.dataset.until = String(Date.now() + secs * 1000);
    el.dataset.prefix = prefix || '';
    el.textContent = (prefix || '') + fmtClock(secs);
    return el;
}

function since(ms) {
    const el = h('span', { class: 'num' });
    el.dataset.since = String(ms);
    el.textContent = fmtAgo((Date.now() - ms) / 1000);
    return el;
}

function tick() {
    const now = Date.now();
    for (const el of document.querySelectorAll('[data-until]')) {
        el.textContent = el.dataset.prefix + fmtClock((Number(el.dataset.until) - now) / 1000);
    }
    for (const el of document.querySelectorAll('[data-since]')) {
        el.textContent = fmtAgo((now - Number(el.dataset.since)) / 1000);
    }
}

return {
    load, save, h, s, set, add, clear, put, fill, $,
    fmtInt, fmtTokens, fmtUsd, fmtPct, fmtClock, fmtSpan, fmtMs, fmtAgo,
    parseTime, countdown, since, tick,
};

}());
