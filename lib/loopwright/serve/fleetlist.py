"""The fleet part of the monitor's page, its script's first half: what needs the operator (the
attention strip, each count a filter), the workers with their state and the loops they hold,
the fleet's spend and pauses, and the list of loops: filters by status, host, account and tag, a
search box, most pressing first (a gate, a failure, running, stuck, queued, ended; oldest first
within each, ended ones newest first), a page of rows at a time. fleetrows.py builds each row.

Rows are kept by loop id and put back unchanged when their data did not change, so a change
elsewhere in the fleet never rebuilds (nor takes the focus from) a row someone is working in.
Every text comes from the database: it reaches the page through textContent only."""

from __future__ import annotations

from loopwright.core import jsoncodec
from loopwright.core.attention import PERSON_STOPS, SUCCESSES

JS = """
const fleet = {data: null, got: 0, goals: new Map(), open: new Set(), tl: null, rows: new Map(),
  f: {status: 'all', host: '', account: '', tag: '', q: ''}, page: 0, quietOnly: false,
  raise: null, confirm: null};
const PAGE_SIZE = 30;
const SUCCESSES = __SUCCESSES__, PERSON_STOPS = __PERSON_STOPS__;
const STATE_WORDS = {gate: 'needs an answer', failed: 'failed', running: 'running', stuck: 'stuck',
  queued: 'queued', done: 'ended'};
const RANK = {gate: 0, failed: 1, running: 2, stuck: 3, queued: 4, done: 5};
const STATUS_CHIPS = [['all', 'all'], ['gate', 'waiting'], ['failed', 'failed'], ['running', 'running'],
  ['stuck', 'stuck'], ['queued', 'queued'], ['done', 'ended']];
function money(x) { return '$' + Number(x || 0).toFixed(2); }
function num(x) { const n = Number(x); return Number.isFinite(n) ? n : 0; }
function text(x) { return typeof x === 'string' ? x : (x == null ? '' : String(x)); }
function fleetPath(id, what) { return '/api/fleet/' + encodeURIComponent(id) + (what ? '/' + what : ''); }
function dbNow() { return num(fleet.data.now) + (Date.now() - fleet.got) / 1000; }
function utc(epoch) {
  const d = new Date(num(epoch) * 1000);
  return isNaN(d) ? '' : d.toISOString().slice(0, 16).replace('T', ' ') + ' UTC';
}
function ago(seconds) {
  const s = Math.max(0, Math.round(seconds));
  if (s < 120) return s + 's';
  if (s < 7200) return Math.round(s / 60) + ' min';
  return s < 172800 ? Math.round(s / 3600) + ' h' : Math.round(s / 86400) + ' d';
}
function failedOutcome(o) {
  return typeof o !== 'string' || !o || (!SUCCESSES.includes(o) && !o.startsWith(PERSON_STOPS));
}
function stateOf(l) {
  if (l.status === 'waiting_gate') return 'gate';
  if (l.status === 'running') return 'running';
  if (l.status === 'queued') return l.stuck ? 'stuck' : 'queued';
  if (l.status === 'ended') return l.failed ? 'failed' : 'done';
  return 'other';
}
function searchText(l) {
  const tags = Array.isArray(l.tags) ? l.tags.join(' ') : '';
  return [l.name, l.id, l.goal, l.repo, l.branch, l.work_branch, l.host, l.account, tags, l.outcome,
    l.reason, l.cause, l.stuck, l.last_error].map(text).join('\\n').toLowerCase();
}
function renderFleet(data) {
  fleet.data = data; fleet.got = Date.now();
  document.getElementById('fleet').hidden = !data.show;
  if (typeof localShown === 'function') localShown();
  if (!data.show) return;
  data.loops = Array.isArray(data.loops) ? data.loops : [];
  for (const l of data.loops) { l.state = stateOf(l); l.text = searchText(l); }
  fleetAttention(data);
  fleetWorkers(data);
  fleetSpend(data);
  fleetPickers(data.loops, Array.isArray(data.workers) ? data.workers : []);
  fleetList();
  if (!performance.getEntriesByName('loopwright-fleet-shown').length)
    performance.mark('loopwright-fleet-shown');  // bench/bench_fleet_page.py reads it
  if (fleet.tl) { fleetTimelineCause(); if (!fleet.tl.more) fleetTimelineRead(); }
}
// The attention strip: what needs the operator, each a count that filters what is shown.
// Why the queue's loops wait, the two commonest reasons, counted over the whole queue
// (stuck_why: the monitor groups every queued loop, listed or not).
function stuckWhy(data) {
  const why = Array.isArray(data.stuck_why) ? data.stuck_why : [];
  return why.slice(0, 2).map(([reason, n]) => (why.length > 1 ? n + ': ' : '') + text(reason)).join('; ');
}
function fleetAttention(data) {
  const a = data.attention || {}, box = document.getElementById('attention');
  const plural = (n, one, many) => n + ' ' + (n === 1 ? one : many);
  const chips = [
    ['gates', num(a.gates), n => plural(n, 'gate waits', 'gates wait') + ' for you'],
    ['failed', num(a.failed), n => plural(n, 'loop', 'loops') + ' failed'],
    ['stuck', num(a.stuck), n => plural(n, 'loop', 'loops') + ' stuck in the queue'],
    ['workers', num(a.workers), n => plural(n, 'worker', 'workers') + ' went quiet'],
  ].filter(([, n]) => n > 0);
  if (!chips.length) {
    box.replaceChildren(el('span', 'Nothing needs you: no gate waits, no loop failed or is stuck, ' +
      'every worker is alive.', 'att-ok'));
    return;
  }
  box.replaceChildren(...chips.map(([key, n, words]) => {
    const b = el('button', null, 'att att-' + key); b.type = 'button'; b.dataset.filter = key;
    b.appendChild(el('span', words(n), 'att-n'));
    if (key === 'stuck') b.appendChild(el('span', stuckWhy(data), 'att-why'));
    const on = key === 'workers' ? fleet.quietOnly : fleet.f.status === {gates: 'gate'}[key] ||
      fleet.f.status === key;
    b.setAttribute('aria-pressed', String(on));
    b.onclick = () => attentionFilter(key);
    return b;
  }));
}
function attentionFilter(key) {
  if (key === 'workers') {
    fleet.quietOnly = !fleet.quietOnly;
    fleetWorkers(fleet.data); fleetAttention(fleet.data);
    return;
  }
  const status = key === 'gates' ? 'gate' : key;
  setFilter({status: fleet.f.status === status ? 'all' : status});
}
function setFilter(change) {
  Object.assign(fleet.f, change); fleet.page = 0;
  fleetList(); fleetAttention(fleet.data);
}
// The workers: alive, stale or stopped (judged by the server from the database's clock), each
// with the loops it holds; the ones that went quiet first, those that said they left last.
function fleetWorkers(data) {
  const all = Array.isArray(data.workers) ? data.workers : [];
  const rank = w => w.quiet ? 0 : w.state === 'alive' ? 1 : 2;
  const shown = all.filter(w => !fleet.quietOnly || w.quiet).sort((a, b) => rank(a) - rank(b));
  document.getElementById('fleet-workers').replaceChildren(...shown.map(workerItem));
  const alive = all.filter(w => w.state === 'alive').length;
  document.getElementById('fleet-workers-sum').textContent = all.length
    ? `${alive} of ${all.length} alive` : 'none has beaten yet: start one with loopwright worker';
}
function workerItem(w) {
  const state = ['alive', 'stale', 'stopped'].includes(w.state) ? w.state : 'stopped';
  // A worker that said it left is grey, not red: nothing went wrong (w.quiet is false).
  const li = el('li', null, state === 'stopped' && !w.quiet ? 'w-left' : 'w-' + state);
  li.dataset.worker = text(w.worker); li.dataset.state = state;
  const beat = el('span', 'beat ' + ago(dbNow() - num(w.beat_at)) + ' ago', 'beat');
  beat.dataset.beatAt = num(w.beat_at);
  const holds = Array.isArray(w.holds) ? w.holds : [];
  li.append(el('span', state, 'wstate'), el('strong', w.host, 'host'), el('span', w.worker, 'worker'),
    el('span', `${num(w.used)}/${num(w.slots)} slots`, 'slots'), beat,
    el('span', w.account ? 'account ' + w.account : 'any account', 'account'),
    el('span', holds.length ? 'holds ' + holds.join(', ') : 'holds no loop', 'holds'));
  return li;
}
function fleetSpend(data) {
  const limits = data.limits || {}, spend = limits.spend || {};
  const caps = Array.isArray(limits.limits) ? limits.limits : [], own = caps.find(l => l.scope === 'fleet');
  const capped = own && own.max_dollars_per_day != null;
  const cap = capped ? ' of ' + money(own.max_dollars_per_day) : ' (no daily cap)';
  const line = document.getElementById('fleet-spend');
  // What running loops hold for iterations begun and not recorded: a claim counts it as spent.
  const held = l => num(l && l.held) > 0 ? `, ${money(l.held)} held by running loops` : '';
  const today = `fleet spend today (${text(limits.day)} UTC): ${money(spend.fleet)}${cap}${held(own)}`;
  line.replaceChildren(el('span', today));
  for (const l of caps.filter(l => l.scope !== 'fleet')) {
    const parts = [];
    if (l.max_dollars_per_day != null)
      parts.push(`${money(l.spent_today)} of ${money(l.max_dollars_per_day)} today${held(l)}`);
    if (l.max_running != null) parts.push(`${num(l.running)} of ${num(l.max_running)} running`);
    line.appendChild(el('span', `${l.scope}: ${parts.join(', ')}`));
  }
  const pauses = Array.isArray(limits.pauses) ? limits.pauses : [];
  document.getElementById('fleet-pauses').replaceChildren(...pauses.map(p => {
    const left = (num(p.until) - num(limits.now)) / 60;
    const d = el('div', `account ${p.account} paused until ${utc(p.until)} (in ${Math.ceil(left)} min)` +
      (p.reason ? ': ' + p.reason : ''), 'pause');
    d.dataset.account = text(p.account);
    return d;
  }));
}
// Filters: the pickers list what the fleet holds (and a value chosen that went away, so that the
// filter in force stays in sight).
function fleetPickers(loops, workers) {
  const tags = loops.flatMap(l => Array.isArray(l.tags) ? l.tags : []);
  pick('ff-host', 'host', 'every host', [...loops.map(l => l.host), ...workers.map(w => w.host)]);
  pick('ff-account', 'account', 'every account', loops.map(l => l.account));
  pick('ff-tag', 'tag', 'every tag', tags);
}
function pick(id, key, all, values) {
  const s = document.getElementById(id), chosen = fleet.f[key];
  const found = [...new Set([...values, chosen].filter(v => typeof v === 'string' && v))].sort();
  const sig = found.join('\\n');
  if (s.dataset.sig !== sig) {
    s.dataset.sig = sig;
    s.replaceChildren(new Option(all, ''), ...found.map(v => new Option(v, v)));
  }
  s.value = chosen;
  s.onchange = () => setFilter({[key]: s.value});
}
function narrowed(l) {
  const f = fleet.f;
  return (!f.host || l.host === f.host) && (!f.account || l.account === f.account) &&
    (!f.tag || (Array.isArray(l.tags) && l.tags.includes(f.tag))) && (!f.q || l.text.includes(f.q));
}
function inStatus(l, status) {
  return status === 'all' || l.state === status || (status === 'queued' && l.state === 'stuck');
}
function chipCounts(loops, narrowing) {
  const d = fleet.data, q = d.queue || {}, c = {all: 0};
  if (!narrowing) return {all: d.total, gate: q.waiting_gate, failed: d.failed, running: q.running,
    stuck: (d.attention || {}).stuck, queued: q.queued, done: num(q.ended) - num(d.failed)};
  for (const l of loops) {
    c.all++; c[l.state] = (c[l.state] || 0) + 1;
    if (l.state === 'stuck') c.queued = (c.queued || 0) + 1;
  }
  return c;
}
function statusChips(counts) {
  const box = document.getElementById('fleet-status');
  if (!box.children.length) for (const [key, word] of STATUS_CHIPS) {
    const b = el('button', null, 'chip'); b.type = 'button'; b.dataset.status = key;
    b.append(el('span', word), ' ', el('span', '0', 'n'));
    b.onclick = () => setFilter({status: key});
    box.appendChild(b);
  }
  for (const b of box.children) {
    b.querySelector('.n').textContent = String(num(counts[b.dataset.status]));
    b.setAttribute('aria-pressed', String(fleet.f.status === b.dataset.status));
  }
}
function ageKey(l) {
  return l.state === 'failed' || l.state === 'done' ? -num(l.ended_at || l.created_at) : num(l.created_at);
}
function byStateThenAge(a, b) { return (RANK[a.state] ?? 4) - (RANK[b.state] ?? 4) || ageKey(a) - ageKey(b); }
function fleetList() {
  const d = fleet.data, all = d.loops, f = fleet.f;
  const narrowing = Boolean(f.host || f.account || f.tag || f.q);
  const some = narrowing ? all.filter(narrowed) : all;
  statusChips(chipCounts(some, narrowing));
  const shown = some.filter(l => inStatus(l, f.status)).sort(byStateThenAge);
  const pages = Math.max(1, Math.ceil(shown.length / PAGE_SIZE));
  fleet.page = Math.min(fleet.page, pages - 1);
  const first = fleet.page * PAGE_SIZE, slice = shown.slice(first, first + PAGE_SIZE);
  placeRows(document.getElementById('fleet-loops'), slice.map(rowFor));
  for (const id of fleet.rows.keys()) if (!all.some(l => l.id === id)) fleet.rows.delete(id);
  document.getElementById('fleet-table').hidden = !shown.length;
  const empty = document.getElementById('fleet-empty');
  empty.hidden = Boolean(shown.length);
  empty.textContent = all.length ? 'No fleet loop matches these filters.' :
    'No fleet loop yet: queue one below or with loopwright submit.';
  const pager = document.getElementById('fleet-pager');
  pager.hidden = pages < 2;
  document.getElementById('fp-where').textContent =
    `${first + 1}–${first + slice.length} of ${shown.length}`;
  document.getElementById('fp-prev').disabled = fleet.page === 0;
  document.getElementById('fp-next').disabled = fleet.page >= pages - 1;
  const more = document.getElementById('fleet-more');
  more.hidden = !(num(d.total) > all.length);
  more.textContent = `The page holds ${all.length} of ${num(d.total)} loops: every waiting and ` +
    'running one first, then the newest failures, the head of the queue and the newest ended.';
}
function rowFor(l) {
  const key = JSON.stringify(l) + (fleet.raise && fleet.raise.id === l.id ? '|raise' : '') +
    (fleet.confirm === l.id ? '|confirm' : '') + (fleet.open.has(l.id) ? '|open' : '');
  const had = fleet.rows.get(l.id);
  if (had && had.key === key) return had.tr;
  const tr = fleetRow(l);
  fleet.rows.set(l.id, {key, tr});
  return tr;
}
function placeRows(body, trs) {  // moves only what moved: a row in place keeps its focus
  trs.forEach((tr, i) => { if (body.children[i] !== tr) body.insertBefore(tr, body.children[i] || null); });
  while (body.children.length > trs.length) body.lastChild.remove();
}
document.getElementById('fp-prev').onclick = () => { fleet.page--; fleetList(); };
document.getElementById('fp-next').onclick = () => { fleet.page++; fleetList(); };
let searching = null;
document.getElementById('ff-search').oninput = ev => {
  clearTimeout(searching);
  searching = setTimeout(() => setFilter({q: ev.target.value.trim().toLowerCase()}), 120);
};
setInterval(() => {  // ages tick here: the database is asked only when something changed
  if (!fleet.data) return;
  for (const s of document.querySelectorAll('#fleet-workers .beat'))
    s.textContent = 'beat ' + ago(dbNow() - Number(s.dataset.beatAt)) + ' ago';
  for (const td of document.querySelectorAll('#fleet-loops td.age'))
    td.textContent = ago(dbNow() - Number(td.dataset.since));
}, 1000);
""".replace("__SUCCESSES__", jsoncodec.dumps(list(SUCCESSES)).decode()).replace(
    "__PERSON_STOPS__", jsoncodec.dumps(PERSON_STOPS).decode()
)
