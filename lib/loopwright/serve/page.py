"""The monitor's live page: every loop, its goal, progress and spend, waiting gates with
their answers, links to its report and handoff, a timeline of its iterations, and a Stop
button per run. It updates from the server-sent events stream. A loop this user's
loopwright did not sign shows only its name and why it is not trusted. On a fleet's monitor the
fleet comes first (fleetpage.py) and this machine's loops show only when there are some.

Everything the agent or a file wrote (goals, reasons, gate questions) is put on the page
with textContent, never as HTML. State-changing calls carry the page's CSRF token."""

from __future__ import annotations

import html

from loopwright.serve import fleetpage

PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="csrf" content="__CSRF__">
<title>loopwright</title>
<style>
 * { box-sizing: border-box; }
 body { font: 14px system-ui, sans-serif; margin: 1rem 1.5rem; color: #222; }
 h1 { font-size: 1.2rem; margin: 0 0 .3rem; } #local h2, #timeline h2 { font-size: 1.05rem; }
 button, input, select, textarea { font: inherit; max-width: 100%; }
 table { border-collapse: collapse; width: 100%; }
 th, td { text-align: left; padding: .35rem .5rem; border-bottom: 1px solid #ddd; vertical-align: top; }
 .state-active { color: #0a6; } .state-ended { color: #555; } .state-waiting { color: #b60; }
 .state-untrusted { color: #c00; font-weight: bold; } tr.untrusted .problem { color: #c00; }
 .goal { max-width: 32em; overflow-wrap: anywhere; color: #444; }
 .goal pre, #timeline td { white-space: pre-wrap; overflow-wrap: anywhere; }
 .links a, .links button { margin-right: .4rem; font-size: .85rem; }
 #timeline { margin-top: 1.5rem; }
 .gate { background: #fff6e0; padding: .3rem; margin: .2rem 0; }
 button { margin-right: .3rem; }
 svg rect { fill: #48c; }
 #live { color: #888; font-size: .85rem; font-weight: normal; }
 .problem { color: #c00; }
 @media (max-width: 760px) {
  body { margin: .6rem; }
  #local-table thead, #timeline thead { display: none; }
  #local-table, #local-table tbody, #local-table tr, #timeline table, #timeline tbody, #timeline tr
    { display: block; width: auto; }
  #local-table tr, #timeline tr { border: 1px solid #ddd; border-radius: .4rem; margin: .4rem 0;
    padding: .3rem; }
  #local-table td, #timeline td { display: inline-block; border: 0; padding: .1rem .3rem; max-width: 100%;
    overflow-wrap: anywhere; }
  #local-table td.name { display: block; } .goal { max-width: 100%; }
 }
__FLEET_CSS__</style>
</head>
<body>
<h1>loopwright <span id="live">connecting…</span></h1>
__FLEET_HTML__
<section id="local" hidden>
 <h2>Loops on this machine</h2>
 <p id="local-none" hidden>No local loops in the projects this monitor serves.</p>
 <table id="local-table">
  <thead><tr><th>loop</th><th>mode</th><th>project</th><th>iteration</th><th>time</th><th>spend</th>
  <th>state</th><th>last reason</th><th>spend per iteration</th><th></th></tr></thead>
  <tbody id="loops"></tbody>
 </table>
</section>
<section id="timeline" hidden>
 <h2>timeline of <span id="tl-name"></span> <button id="tl-close">close</button></h2>
 <table>
  <thead><tr><th>iteration</th><th>ended</th><th>status line</th><th>spend</th><th>gates</th>
  <th>outcome</th></tr></thead>
  <tbody id="tl-rows"></tbody>
 </table>
 <button id="tl-older" hidden>older iterations</button>
</section>
<script>
const csrf = document.querySelector('meta[name=csrf]').content;
function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  if (cls) e.className = cls;
  return e;
}
async function call(method, path, body) {
  const res = await fetch(path, {method, headers: {'Content-Type': 'application/json',
    'X-Loopwright-CSRF': csrf}, body: body ? JSON.stringify(body) : undefined});
  if (!res.ok) alert((await res.json()).error || res.statusText);
}
function chart(spend) {
  const ns = 'http://www.w3.org/2000/svg', svg = document.createElementNS(ns, 'svg');
  const max = Math.max(0.000001, ...spend.map(s => s.dollars));
  svg.setAttribute('width', 8 * Math.max(1, spend.length)); svg.setAttribute('height', 24);
  spend.forEach((s, i) => {
    const r = document.createElementNS(ns, 'rect'), h = Math.max(1, 22 * s.dollars / max);
    r.setAttribute('x', 8 * i); r.setAttribute('y', 24 - h); r.setAttribute('width', 6);
    r.setAttribute('height', h);
    const t = document.createElementNS(ns, 'title');
    t.textContent = `iteration ${s.iteration}: $${s.dollars}`;
    r.appendChild(t); svg.appendChild(r);
  });
  return svg;
}
function state(l, run) {
  if (l.status === 'ended') return ['ended ' + l.outcome, 'state-ended'];
  if (run && run.status === 'waiting_quota') return ['waiting for the usage limit', 'state-waiting'];
  if (l.paused) return ['paused', 'state-waiting'];
  if (l.wrapping_up) return ['wrapping up (handoff)', 'state-waiting'];
  if ((l.pending_gates || []).length) return ['waiting for an answer', 'state-waiting'];
  return [run && run.status === 'running' ? 'running' : 'active', 'state-active'];
}
const openGoals = new Set();
function link(text, href) {
  const a = el('a', text, text); a.href = href; a.target = '_blank'; a.rel = 'noopener';
  return a;
}
function loopPath(project, name, what, params) {
  const q = new URLSearchParams(Object.assign({project}, params || {}));
  return '/api/loops/' + encodeURIComponent(name) + '/' + what + '?' + q;
}
function nameCell(p, l) {
  // The goal is the agent's and the user's text: textContent only, first line until opened.
  const td = el('td', null, 'name'); td.appendChild(el('strong', l.name));
  const goal = String(l.prompt || ''), first = goal.split('\\n')[0];
  const head = first.length > 120 ? first.slice(0, 120) + '…' : first;
  if (goal && goal.trim() !== head.trim()) {
    const d = el('details', null, 'goal'), key = p.project + '\\n' + l.name;
    d.open = openGoals.has(key);
    d.ontoggle = () => d.open ? openGoals.add(key) : openGoals.delete(key);
    d.appendChild(el('summary', head)); d.appendChild(el('pre', goal));
    td.appendChild(d);
  } else if (goal) td.appendChild(el('div', head, 'goal'));
  const links = el('div', null, 'links');
  if (l.report) links.appendChild(link('report', loopPath(p.project, l.name, 'report')));
  if (l.handoff) links.appendChild(link('handoff', loopPath(p.project, l.name, 'handoff')));
  const t = el('button', 'timeline', 'timeline'); t.onclick = () => showTimeline(p.project, l.name);
  links.appendChild(t);
  // Whether a spent budget still gets one last turn for handoff.md (core/wrapup.py).
  if (l.status === 'active') links.appendChild(el('span', 'wrap-up ' + (l.wrap_up ? 'on' : 'off'), 'wrapup'));
  td.appendChild(links);
  return td;
}
function untrustedRow(p, l) {
  // Not signed by this user's loopwright (or damaged): its name and why, none of its numbers.
  const tr = el('tr', null, 'untrusted'); tr.dataset.loop = l.name;
  tr.appendChild(el('td', l.name, 'name'));
  ['', p.project, '', '', ''].forEach(v => tr.appendChild(el('td', v)));
  tr.appendChild(el('td', l.status === 'damaged' ? 'damaged' : 'untrusted', 'state state-untrusted'));
  tr.appendChild(el('td', l.problem || '', 'problem'));
  tr.appendChild(el('td')); tr.appendChild(el('td'));
  return tr;
}
// The local section: hidden while the fleet's page shows and no loop runs here, else "none".
let localCount = null;
function localShown() {
  const fleetOn = typeof fleet !== 'undefined' && fleet.data && fleet.data.show;
  document.getElementById('local').hidden = localCount === null || (localCount === 0 && Boolean(fleetOn));
  document.getElementById('local-table').hidden = !localCount;
  document.getElementById('local-none').hidden = localCount !== 0;
}
function render(data) {
  const body = document.getElementById('loops');
  body.replaceChildren();
  localCount = data.projects.reduce((n, p) => n + p.loops.length, 0);
  localShown();
  for (const p of data.projects) for (const l of p.loops) {
    if (l.trusted === false || !['active', 'ended'].includes(l.status)) {
      body.appendChild(untrustedRow(p, l));
      continue;
    }
    const run = data.runs.find(r => r.project === p.project && r.loop === l.name &&
      ['starting', 'running', 'waiting_quota'].includes(r.status));
    const tr = el('tr'); tr.dataset.loop = l.name;
    const [word, cls] = state(l, run);
    const money = '$' + (l.dollars_estimate || 0).toFixed(2) + (l.max_dollars ? ' / $' + l.max_dollars : '');
    tr.appendChild(nameCell(p, l));
    [l.mode, p.project, `${l.iteration}/${l.max_iterations}`,
     `${(l.minutes_elapsed || 0).toFixed(1)}/${l.max_minutes} min`, money]
      .forEach(v => tr.appendChild(el('td', v)));
    tr.appendChild(el('td', word, 'state ' + cls));
    const why = el('td', l.last_reason || '');
    for (const g of l.waiting_gates || []) {
      const box = el('div', null, 'gate'); box.dataset.gate = g.name;
      box.appendChild(el('div', `${g.name}: ${g.question}`));
      for (const o of g.options) {
        const b = el('button', o); b.dataset.answer = o;
        const answer = {project: p.project, loop: l.name, gate: g.name, answer: o};
        b.onclick = () => call('POST', '/api/gates', answer);
        box.appendChild(b);
      }
      why.appendChild(box);
    }
    tr.appendChild(why);
    const c = el('td'); c.appendChild(chart(l.spend || [])); tr.appendChild(c);
    const act = el('td');
    if (l.status === 'active') {
      const b = el('button', 'Stop', 'stop');
      b.onclick = () => run ? call('DELETE', '/api/runs/' + run.id)
                            : call('POST', '/api/loops/stop', {project: p.project, loop: l.name});
      act.appendChild(b);
    }
    tr.appendChild(act);
    body.appendChild(tr);
  }
  if (tl) refreshTimeline();
}
// The timeline: a bounded slice of the history at a time, newest first; "older" reads on.
let tl = null, tlBusy = null;
const tlRows = document.getElementById('tl-rows'), tlOlder = document.getElementById('tl-older');
function tlRow(e) {
  const tr = el('tr'); tr.dataset.offset = e.offset;
  if (e.problem) { const td = el('td', e.problem, 'problem'); td.colSpan = 6; tr.appendChild(td); return tr; }
  tr.dataset.iteration = e.iteration;
  const gates = (e.gates || []).map(g => g.name + '=' + (g.answer == null ? '(waiting)' : g.answer));
  const fired = (e.stop_conditions || []).join(', ');
  const outcome = e.outcome + (fired ? ' (' + fired + ')' : '');
  [e.iteration + (e.counted ? '' : ' (wait/gate)'), e.ended_at || '', e.status_line || '',
   '$' + Number(e.dollars || 0).toFixed(4), gates.join('; '), outcome]
    .forEach(v => tr.appendChild(el('td', v)));
  return tr;
}
async function tlFetch(params) {
  const res = await fetch(loopPath(tl.project, tl.name, 'history', params));
  const data = await res.json();
  if (!res.ok) throw new Error(data.error || res.statusText);
  return data;
}
async function showTimeline(project, name) {
  tl = {project, name, size: 0};
  document.getElementById('timeline').hidden = false;
  document.getElementById('tl-name').textContent = name;
  tlRows.replaceChildren(); tlOlder.hidden = true;
  await refreshTimeline();
}
async function refreshTimeline() {
  // New iterations only: those that start at or after where the file ended last time.
  const want = tl;
  if (tlBusy === want) return;
  tlBusy = want;
  try {
    const data = await tlFetch({limit: 50});
    if (want !== tl) return;
    const fresh = data.entries.filter(e => e.offset >= tl.size);
    if (!tl.size) { tl.before = data.before; tlOlder.hidden = !data.before; }
    tl.size = Math.max(tl.size, data.end);
    for (const e of fresh) tlRows.insertBefore(tlRow(e), tlRows.firstChild);
  } catch (err) {
    if (want === tl) tlRows.replaceChildren(tlRow({offset: -1, problem: String(err.message)}));
  } finally { if (tlBusy === want) tlBusy = null; }
}
tlOlder.onclick = async () => {
  const data = await tlFetch({limit: 50, before: tl.before});
  for (const e of data.entries.slice().reverse()) tlRows.appendChild(tlRow(e));
  tl.before = data.before; tlOlder.hidden = !data.before;
};
document.getElementById('tl-close').onclick = () => {
  tl = null; document.getElementById('timeline').hidden = true;
};
__FLEET_JS__
// The page's frame is painted first and its data asked for after: a fleet's first message
// (hundreds of rows) handled before the first paint held the whole page back.
let started = false;
function start() {
  if (started) return;
  started = true;
  fetch('/api/loops').then(r => r.json()).then(render);
  const events = new EventSource('/api/events');
  events.addEventListener('loops', e => {
    document.getElementById('live').textContent = 'live';
    render(JSON.parse(e.data));
  });
  events.addEventListener('fleet', e => renderFleet(JSON.parse(e.data)));
  events.onerror = () => { document.getElementById('live').textContent = 'reconnecting…'; };
}
requestAnimationFrame(() => setTimeout(start, 0));
setTimeout(start, 100);  // a page opened in a background tab gets no frames until shown
</script>
</body>
</html>
"""


PAGE = (
    PAGE.replace("__FLEET_CSS__", fleetpage.CSS.lstrip("\n"))
    .replace("__FLEET_HTML__", fleetpage.HTML.strip("\n"))
    .replace("__FLEET_JS__", fleetpage.JS.strip("\n"))
)


def render(csrf: str) -> str:
    return PAGE.replace("__CSRF__", html.escape(csrf, quote=True))


LOGIN_NEEDED = (
    "<!doctype html><title>loopwright</title><p>Open the one-time sign-in link that "
    "<code>loopwright serve</code> printed when it started, or run <code>loopwright serve "
    "--login</code> for a new one.</p>"
)
LOGIN_USED = (
    "<!doctype html><title>loopwright</title><p>This sign-in link is used up, expired or unknown. "
    "Run <code>loopwright serve --login</code> for a new one.</p>"
)
LOGIN_FOREIGN = (
    "<!doctype html><title>loopwright</title><p>Sign in from the link itself, not from another "
    "site. Run <code>loopwright serve --login</code> for a new link.</p>"
)
SIGN_IN = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>loopwright: sign in</title>
<style>body { font: 14px system-ui, sans-serif; margin: 2rem; }</style></head>
<body><h1>loopwright monitor</h1>
<form method="post" action="/login">
<input type="hidden" name="code" value="__CODE__">
<button type="submit" id="sign-in">Sign in</button>
</form>
<p>The link works once, when you press the button.</p>
</body></html>
"""


def sign_in(code: str) -> str:
    """The page a sign-in link opens: a button, so a link preview (a GET) does not use it up."""
    return SIGN_IN.replace("__CODE__", html.escape(code, quote=True))
