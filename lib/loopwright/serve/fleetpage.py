"""The Fleet section of the monitor's page (page.py puts it in): every fleet loop with its host,
status, iteration, spend, outcome and goal's first line (the whole goal on demand), a waiting
gate with its answers, Stop and Cancel; the queue's counts; the workers with their slots, last
heartbeat and account; the fleet's spend today against its cap and each account's pause; a
loop's timeline on demand, a bounded slice at a time.

It shows when the monitor's database is a server (PostgreSQL) one, a fleet's, or when the
SQLite one holds any fleet loop or worker. It updates from the page's one event stream
(``fleet`` events, sent when the database says something changed). Every text in it comes from
the database, which whoever can write a row can fill with anything: it goes on the page with
textContent only, and into URLs through encodeURIComponent."""

from __future__ import annotations

CSS = """
 #fleet { margin-top: 1.5rem; } #fleet h2, #fleet h3 { font-size: 1.05rem; }
 #fleet-summary span, #fleet-summary div { margin-right: .9rem; }
 .pause { color: #b60; } .fleet-goal { max-width: 32em; overflow-wrap: anywhere; color: #444; }
 .fleet-goal pre, #ftl-rows td { white-space: pre-wrap; overflow-wrap: anywhere; }
 .reason { color: #666; font-size: .85rem; overflow-wrap: anywhere; }
 #fleet-submit { display: grid; grid-template-columns: max-content 1fr; gap: .3rem .6rem; max-width: 48em; }
 #fleet-submit textarea { min-height: 4em; } #fleet-submitted { grid-column: 2; }
"""

HTML = """
<section id="fleet" hidden>
 <h2>Fleet</h2>
 <div id="fleet-summary"><div id="fleet-queue"></div><div id="fleet-spend"></div>
 <div id="fleet-pauses"></div></div>
 <table>
  <thead><tr><th>loop</th><th>host</th><th>status</th><th>iteration</th><th>spend</th><th>outcome</th>
  <th></th></tr></thead>
  <tbody id="fleet-loops"></tbody>
 </table>
 <p id="fleet-more" hidden></p>
 <details id="fleet-new"><summary>Queue a loop</summary>
  <form id="fleet-submit">
   <label for="fs-repo">repository</label><input id="fs-repo" name="repo" required
     placeholder="https://github.com/acme/api.git">
   <label for="fs-goal">goal</label><textarea id="fs-goal" name="goal" required></textarea>
   <label for="fs-branch">from branch</label><input id="fs-branch" name="branch" placeholder="its default">
   <label for="fs-name">name</label><input id="fs-name" name="name" placeholder="drawn">
   <label for="fs-account">account</label><input id="fs-account" name="account" placeholder="default">
   <label for="fs-iter">max iterations</label><input id="fs-iter" name="max_iterations" type="number" min="1">
   <label for="fs-dollars">max dollars</label><input id="fs-dollars" name="max_dollars" type="number"
     min="0" step="0.01">
   <span></span><button type="submit">Queue</button>
   <span></span><span id="fleet-submitted" role="status"></span>
  </form>
 </details>
 <h3>Workers</h3>
 <table>
  <thead><tr><th>host</th><th>worker</th><th>slots used</th><th>last heartbeat</th><th>account</th>
  </tr></thead>
  <tbody id="fleet-workers"></tbody>
 </table>
 <section id="fleet-timeline" hidden>
  <h3>timeline of fleet loop <span id="ftl-name"></span> <button id="ftl-close">close</button></h3>
  <table>
   <thead><tr><th>at (UTC)</th><th>claim</th><th>event</th><th>iteration</th><th>outcome</th><th>spend</th>
   <th>detail</th></tr></thead>
   <tbody id="ftl-rows"></tbody>
  </table>
  <button id="ftl-more" hidden>more</button>
 </section>
</section>
"""

JS = """
const fleet = {data: null, got: 0, goals: new Map(), open: new Set(), tl: null};
const STATUS_WORDS = {queued: 'queued', running: 'running', waiting_gate: 'waiting for an answer',
  ended: 'ended'};
function money(x) { return '$' + Number(x || 0).toFixed(2); }
function num(x) { const n = Number(x); return Number.isFinite(n) ? n : 0; }
function fleetPath(id, what) { return '/api/fleet/' + encodeURIComponent(id) + (what ? '/' + what : ''); }
function dbNow() { return num(fleet.data.now) + (Date.now() - fleet.got) / 1000; }
function utc(epoch) {
  const d = new Date(num(epoch) * 1000);
  return isNaN(d) ? '' : d.toISOString().slice(0, 16).replace('T', ' ') + ' UTC';
}
function ago(seconds) {
  const s = Math.max(0, Math.round(seconds));
  return s < 120 ? s + 's ago' : Math.round(s / 60) + ' min ago';
}
function renderFleet(data) {
  fleet.data = data; fleet.got = Date.now();
  document.getElementById('fleet').hidden = !data.show;
  if (!data.show) return;
  fleetSummary(data);
  fleetRows(data.loops || []);
  const more = document.getElementById('fleet-more');
  more.hidden = !(data.total > (data.loops || []).length);
  more.textContent = `the newest ${(data.loops || []).length} of ${data.total} loops are shown`;
  document.getElementById('fleet-workers').replaceChildren(...(data.workers || []).map(workerRow));
  if (fleet.tl && !fleet.tl.more) fleetTimelineRead();
}
// The first rows go on screen at once, the rest a chunk per frame: a long list never holds the
// page's first paint (a newer render drops the chunks an older one had left).
const FIRST_ROWS = 60, ROWS_PER_FRAME = 120;
function fleetRows(loops) {
  const body = document.getElementById('fleet-loops'), render = (fleet.render || 0) + 1;
  fleet.render = render;
  body.replaceChildren(...loops.slice(0, FIRST_ROWS).map(fleetRow));
  if (!performance.getEntriesByName('loopwright-fleet-shown').length)
    performance.mark('loopwright-fleet-shown');  // bench/bench_fleet_page.py reads it
  let next = FIRST_ROWS;
  const more = () => {
    if (fleet.render !== render || next >= loops.length) return;
    body.append(...loops.slice(next, next + ROWS_PER_FRAME).map(fleetRow));
    next += ROWS_PER_FRAME;
    requestAnimationFrame(more);
  };
  requestAnimationFrame(more);
}
function fleetSummary(data) {
  const queue = document.getElementById('fleet-queue');
  queue.replaceChildren(el('strong', 'queue:'));
  for (const [status, n] of Object.entries(data.queue || {})) {
    const s = el('span', `${n} ${STATUS_WORDS[status] || status}`); s.dataset.status = status;
    queue.appendChild(s);
  }
  const limits = data.limits || {}, spend = limits.spend || {};
  const caps = limits.limits || [], own = caps.find(l => l.scope === 'fleet');
  const capped = own && own.max_dollars_per_day != null;
  const cap = capped ? ' of ' + money(own.max_dollars_per_day) : ' (no daily cap)';
  const line = document.getElementById('fleet-spend'), day = limits.day || '';
  line.replaceChildren(el('span', `fleet spend today (${day} UTC): ${money(spend.fleet)}${cap}`));
  for (const l of caps.filter(l => l.scope !== 'fleet')) {
    const parts = [];
    if (l.max_dollars_per_day != null)
      parts.push(`${money(l.spent_today)} of ${money(l.max_dollars_per_day)} today`);
    if (l.max_running != null) parts.push(`${l.running} of ${l.max_running} running`);
    line.appendChild(el('span', `${l.scope}: ${parts.join(', ')}`));
  }
  const pauses = document.getElementById('fleet-pauses');
  pauses.replaceChildren(...(limits.pauses || []).map(p => {
    const left = (num(p.until) - num(limits.now)) / 60;
    const d = el('div', `account ${p.account} paused until ${utc(p.until)} (in ${Math.ceil(left)} min)` +
      (p.reason ? ': ' + p.reason : ''), 'pause');
    d.dataset.account = p.account;
    return d;
  }));
}
function fleetGoal(l) {
  if (!l.goal_more) return el('div', l.goal, 'fleet-goal');
  const d = el('details', null, 'fleet-goal'), pre = el('pre', fleet.goals.get(l.id) || '…');
  d.appendChild(el('summary', l.goal)); d.appendChild(pre);
  d.open = fleet.open.has(l.id);
  d.ontoggle = async () => {
    if (!d.open) { fleet.open.delete(l.id); return; }
    fleet.open.add(l.id);
    if (!fleet.goals.has(l.id)) {
      const res = await fetch(fleetPath(l.id)), got = await res.json();
      fleet.goals.set(l.id, res.ok ? String(got.loop.goal) : String(got.error));
    }
    pre.textContent = fleet.goals.get(l.id);
  };
  return d;
}
function gateBox(l) {
  const g = l.gate || {}, box = el('div', null, 'gate'); box.dataset.gate = g.name;
  box.appendChild(el('div', `${g.name}: ${g.question || ''}`));
  for (const o of Array.isArray(g.options) ? g.options : []) {
    const b = el('button', o); b.dataset.answer = o;
    b.onclick = () => call('POST', fleetPath(l.id, 'gate'), {answer: String(o)});
    box.appendChild(b);
  }
  return box;
}
function fleetRow(l) {
  const tr = el('tr'); tr.dataset.fleetLoop = l.name; tr.dataset.id = l.id;
  const name = el('td', null, 'name'); name.appendChild(el('strong', l.name));
  name.appendChild(fleetGoal(l));
  const t = el('button', 'timeline', 'timeline'); t.onclick = () => fleetTimeline(l);
  const links = el('div', null, 'links'); links.appendChild(t); name.appendChild(links);
  tr.appendChild(name);
  tr.appendChild(el('td', l.host || '', 'host'));
  const asked = l.control && l.status !== 'ended' ? ` (${l.control} asked)` : '';
  const word = (STATUS_WORDS[l.status] || l.status) + asked;
  const cls = {running: 'state-active', ended: 'state-ended'}[l.status] || 'state-waiting';
  tr.appendChild(el('td', word, 'status ' + cls));
  const lim = l.limits || {};
  const of = lim.max_iterations ? '/' + lim.max_iterations : '';
  tr.appendChild(el('td', `${num(l.iteration)}${of}`, 'iteration'));
  tr.appendChild(el('td', money(l.dollars) + (lim.max_dollars ? ' / ' + money(lim.max_dollars) : '') +
    ` · ${num(l.minutes).toFixed(1)} min`, 'spend'));
  const out = el('td', l.outcome || '', 'outcome');
  if (l.reason) out.appendChild(el('div', l.reason, 'reason'));
  tr.appendChild(out);
  const act = el('td', null, 'actions');
  if (l.status === 'waiting_gate' && l.gate) act.appendChild(gateBox(l));
  if (l.status !== 'ended') for (const what of ['stop', 'cancel']) {
    const b = el('button', what === 'stop' ? 'Stop' : 'Cancel', what);
    b.onclick = () => call('POST', fleetPath(l.id, what));
    act.appendChild(b);
  }
  tr.appendChild(act);
  return tr;
}
function workerRow(w) {
  const tr = el('tr'); tr.dataset.worker = w.worker;
  const beat = el('td', ago(dbNow() - num(w.beat_at)), 'beat'); beat.dataset.beatAt = num(w.beat_at);
  [[w.host, 'host'], [w.worker, 'worker'], [`${num(w.used)}/${num(w.slots)}`, 'slots']]
    .forEach(([v, c]) => tr.appendChild(el('td', v, c)));
  tr.appendChild(beat);
  tr.appendChild(el('td', w.account || 'any', 'account'));
  return tr;
}
setInterval(() => {  // heartbeat ages tick here: the database is asked only when something changed
  if (!fleet.data) return;
  for (const td of document.querySelectorAll('#fleet-workers td.beat'))
    td.textContent = ago(dbNow() - Number(td.dataset.beatAt));
}, 1000);
// A loop's timeline: oldest first, a slice at a time ("more"); new events join while it is open.
const ftlRows = document.getElementById('ftl-rows'), ftlMore = document.getElementById('ftl-more');
function ftlRow(e) {
  const d = e.data && typeof e.data === 'object' ? e.data : {}, tr = el('tr'); tr.dataset.event = e.id;
  if (d.iteration != null) tr.dataset.iteration = d.iteration;
  const when = new Date(num(e.at) * 1000);
  const at = isNaN(when) ? '' : when.toISOString().slice(0, 19).replace('T', ' ');
  const gates = Array.isArray(d.gates) ? d.gates : [];
  const detail = e.kind === 'iteration' ? gates.map(g => `${g.name}=${g.answer ?? '(waiting)'}`).join('; ')
    : JSON.stringify(e.data);
  const spent = d.dollars_this_iter != null ? '$' + num(d.dollars_this_iter).toFixed(4) : '';
  const text = String(detail || '').slice(0, 300);
  [at, 'g' + e.generation, e.kind, d.iteration ?? '', d.outcome ?? '', spent, text]
    .forEach(v => tr.appendChild(el('td', v)));
  return tr;
}
async function fleetTimelineRead() {
  const tl = fleet.tl;
  if (!tl) return;
  if (tl.busy) { tl.again = true; return; }  // a change came during a read: read on after it
  tl.busy = true;
  try {
    const query = new URLSearchParams({after: tl.next, limit: 100});
    const res = await fetch(fleetPath(tl.id, 'events') + '?' + query);
    const data = await res.json();
    if (tl !== fleet.tl) return;
    if (!res.ok) {
      const tr = el('tr'); tr.appendChild(el('td', data.error || res.statusText, 'problem'));
      ftlRows.replaceChildren(tr);
      return;
    }
    for (const e of data.events) ftlRows.appendChild(ftlRow(e));
    tl.next = data.next; tl.more = data.more; ftlMore.hidden = !data.more;
  } finally {
    tl.busy = false;
    if (tl.again && tl === fleet.tl) { tl.again = false; fleetTimelineRead(); }
  }
}
function fleetTimeline(l) {
  fleet.tl = {id: l.id, next: 0, more: false};
  document.getElementById('fleet-timeline').hidden = false;
  document.getElementById('ftl-name').textContent = l.name;
  ftlRows.replaceChildren(); ftlMore.hidden = true;
  fleetTimelineRead();
}
ftlMore.onclick = fleetTimelineRead;
document.getElementById('ftl-close').onclick = () => {
  fleet.tl = null; document.getElementById('fleet-timeline').hidden = true;
};
// Queue a loop: the same checks as `loopwright submit`, made by the server; its one line shows here.
document.getElementById('fleet-submit').onsubmit = async (ev) => {
  ev.preventDefault();
  const form = ev.target, said = document.getElementById('fleet-submitted'), body = {};
  for (const [k, v] of new FormData(form)) {
    if (String(v).trim() === '') continue;
    body[k] = k.startsWith('max_') ? Number(v) : String(v);
  }
  const res = await fetch('/api/loops', {method: 'POST', headers: {'Content-Type': 'application/json',
    'X-Loopwright-CSRF': csrf}, body: JSON.stringify(body)});
  const got = await res.json().catch(() => ({}));
  said.textContent = res.ok ? `queued ${got.loop ? got.loop.name : got.name}` : (got.error || res.statusText);
  said.className = res.ok ? '' : 'problem';
  if (res.ok) form.reset();
};
// No fetch of /api/fleet here: the event stream's first message is the fleet as it is now.
"""
