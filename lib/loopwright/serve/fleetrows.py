"""The fleet part of the monitor's page, its script's second half: one loop's row (one line:
state, name and goal, repository and branch, host, iteration of its limit, spend against its
ceiling as a bar, age, failovers; a failure's cause, a stuck loop's reason or a gate's question
under the name), the gate's answers (``raise`` asks for the new ceilings and checks them before
they are sent), Stop, and Cancel after a confirmation; a loop's timeline, failures in colour and
each gate's answer with who gave it; and the form that queues a loop.

Every text comes from the database: it reaches the page through textContent only, and URLs
through encodeURIComponent."""

from __future__ import annotations

from loopwright.core import jsoncodec
from loopwright.fleet.spec import LIMITS

BOUNDS = {k: ["int" if kind is int else "float", lo, hi] for k, (kind, lo, hi) in LIMITS.items()}

JS = """
const LIMIT_BOUNDS = __BOUNDS__;
const DIM_KEYS = {iterations: 'max_iterations', minutes: 'max_minutes', tokens: 'max_tokens',
  dollars: 'max_dollars', prs: 'max_prs'};
const USED_OF = {max_iterations: 'iteration', max_minutes: 'minutes', max_tokens: 'tokens',
  max_dollars: 'dollars'};
function shortRepo(repo) {
  const parts = text(repo).replace(/\\.git$/, '').split(/[/:]/).filter(Boolean);
  return parts.slice(-2).join('/');
}
function fleetGoal(l) {
  if (!l.goal_more) return el('span', l.goal, 'fleet-goal');
  const d = el('details', null, 'fleet-goal'), pre = el('pre', fleet.goals.get(l.id) || '…');
  d.appendChild(el('summary', l.goal)); d.appendChild(pre);
  d.open = fleet.open.has(l.id);
  d.ontoggle = async () => {
    if (!d.open) { fleet.open.delete(l.id); return; }
    fleet.open.add(l.id);
    if (!fleet.goals.has(l.id)) {
      const res = await fetch(fleetPath(l.id)), got = await res.json();
      fleet.goals.set(l.id, res.ok ? text(got.loop.goal) : text(got.error));
    }
    pre.textContent = fleet.goals.get(l.id);
  };
  return d;
}
function fleetNameCell(l) {
  const td = el('td', null, 'name'), line = el('div', null, 'line');
  line.append(el('strong', l.name), ' ');
  if (l.state === 'stuck') {  // why first, on the one line: the goal is the loop's, the reason the fleet's
    const why = el('span', l.stuck, 'why-stuck'); why.title = text(l.stuck);
    line.append(why, ' · ');
  }
  line.appendChild(fleetGoal(l));
  td.appendChild(line);
  if (l.state === 'failed') td.appendChild(el('div', l.cause || l.outcome, 'cause'));
  if (l.state === 'gate' && l.gate) td.appendChild(gateBox(l));
  return td;
}
function spendCell(l, lim) {
  const td = el('td', null, 'spend'), cap = num(lim.max_dollars), spent = num(l.dollars);
  if (cap > 0) {
    const bar = el('span', null, 'bar' + (spent >= 0.8 * cap ? ' hot' : '')), fill = el('span');
    fill.style.width = Math.min(100, 100 * spent / cap).toFixed(1) + '%';
    bar.appendChild(fill); td.appendChild(bar);
  }
  td.appendChild(el('span', money(spent) + (cap > 0 ? ' / ' + money(cap) : ''), 'money'));
  td.title = `${money(spent)} spent in ${num(l.minutes).toFixed(1)} min` +
    (cap > 0 ? ` of ${money(cap)}` : '');
  return td;
}
function stateWord(l) {
  if (l.state === 'done') return {LOOP_DONE: 'done', CANCELLED: 'cancelled'}[l.outcome] ||
    (text(l.outcome).startsWith(PERSON_STOPS) ? 'stopped at its gate' : 'stopped');
  const asked = l.control && l.status !== 'ended' ? ` (${l.control} asked)` : '';
  return (STATE_WORDS[l.state] || text(l.status)) + asked;
}
function fleetRow(l) {
  const tr = el('tr', null, 'st-' + l.state); tr.dataset.fleetLoop = l.name; tr.dataset.id = l.id;
  tr.dataset.state = l.state;
  const st = el('td', stateWord(l), 'status'); st.title = [l.outcome, l.reason].filter(Boolean).join(': ');
  tr.append(st, fleetNameCell(l));
  const repo = el('td', shortRepo(l.repo) + (l.branch ? ' · ' + l.branch : ''), 'repo');
  repo.title = text(l.repo) + ' → ' + text(l.work_branch);
  const lim = l.limits || {}, of = lim.max_iterations ? '/' + lim.max_iterations : '';
  const since = l.state === 'failed' || l.state === 'done' ? (l.ended_at || l.created_at) : l.created_at;
  const age = el('td', ago(dbNow() - num(since)), 'age'); age.dataset.since = num(since);
  tr.append(repo, el('td', l.host || '', 'host'), el('td', `${num(l.iteration)}${of}`, 'iteration'),
    spendCell(l, lim), age, el('td', num(l.failovers) ? '↻' + num(l.failovers) : '', 'failovers'),
    actions(l));
  return tr;
}
async function fleetCall(method, path, body, said) {
  const res = await fetch(path, {method, headers: {'Content-Type': 'application/json',
    'X-Loopwright-CSRF': csrf}, body: body ? JSON.stringify(body) : undefined});
  const got = await res.json().catch(() => ({}));
  const where = said || document.getElementById('fleet-said');
  where.textContent = res.ok ? '' : text(got.error || res.statusText);
  return res.ok;
}
function actions(l) {
  const act = el('td', null, 'actions');
  const t = el('button', 'timeline', 'timeline'); t.type = 'button'; t.onclick = () => fleetTimeline(l);
  act.appendChild(t);
  if (l.status === 'ended') return act;
  if (fleet.confirm === l.id) {
    act.classList.add('confirming');
    const yes = el('button', 'Yes, cancel it', 'confirm-yes'), no = el('button', 'No', 'confirm-no');
    yes.onclick = async () => {
      fleet.confirm = null;
      await fleetCall('POST', fleetPath(l.id, 'cancel'));
      fleetList();
    };
    no.onclick = () => { fleet.confirm = null; fleetList(); };
    act.append(el('span', `Cancel ${l.name} for good?`, 'confirm-q'), yes, no);
    return act;
  }
  const stop = el('button', 'Stop', 'stop'), cancel = el('button', 'Cancel', 'cancel');
  stop.onclick = () => fleetCall('POST', fleetPath(l.id, 'stop'));
  cancel.onclick = () => { fleet.confirm = l.id; fleetList(); };
  act.append(stop, cancel);
  return act;
}
// A gate's answers; "raise" (budget-escalation) first asks for the new ceilings.
function gateBox(l) {
  const g = l.gate || {}, box = el('div', null, 'gate'); box.dataset.gate = text(g.name);
  box.appendChild(el('span', `${text(g.name)}: ${text(g.question)}`, 'gate-q'));
  if (fleet.raise && fleet.raise.id === l.id) { box.appendChild(raiseForm(l)); return box; }
  for (const o of Array.isArray(g.options) ? g.options : []) {
    const raising = o === 'raise' && g.name === 'budget-escalation';
    const b = el('button', raising ? 'raise…' : o); b.type = 'button'; b.dataset.answer = text(o);
    b.onclick = raising ? () => { fleet.raise = {id: l.id, values: {}}; fleetList(); }
                        : () => fleetCall('POST', fleetPath(l.id, 'gate'), {answer: text(o)});
    box.appendChild(b);
  }
  return box;
}
function raiseKeys(g, lim) {
  const dims = Array.isArray(g.dimensions) ? g.dimensions : [];
  const keys = dims.map(d => DIM_KEYS[d]).filter(Boolean);
  if (keys.length) return keys;
  const have = Object.values(DIM_KEYS).filter(k => lim[k] != null);
  return have.length ? have : ['max_dollars'];
}
function shownCap(key, v) { return key === 'max_dollars' ? money(v) : String(v); }
function suggested(key, cap) {  // as the server raises it when no ceiling is given (core/budget.py)
  if (cap == null) return '';
  return key === 'max_dollars' ? Math.round(cap * 150) / 100 : Math.max(Math.ceil(cap * 1.5), cap + 1);
}
function raiseForm(l) {
  const lim = l.limits || {}, form = el('form', null, 'raise'), st = fleet.raise;
  for (const key of raiseKeys(l.gate || {}, lim)) {
    const id = 'raise-' + key, label = el('label', 'new ' + key.replace('_', ' ') +
      (lim[key] != null ? ` (now ${shownCap(key, lim[key])})` : ''));
    const input = el('input'); input.type = 'number'; input.step = 'any'; input.name = key; input.id = id;
    label.htmlFor = id; input.value = st.values[key] ?? String(suggested(key, lim[key]));
    input.oninput = () => { st.values[key] = input.value; };
    form.append(label, input);
  }
  const go = el('button', 'Raise', 'raise-go'), back = el('button', 'back', 'raise-back');
  go.type = 'submit'; back.type = 'button';
  back.onclick = () => { fleet.raise = null; fleetList(); };
  const said = el('span', st.error || '', 'raise-error'); said.setAttribute('role', 'alert');
  form.append(go, back, said);
  form.onsubmit = ev => { ev.preventDefault(); sendRaise(l, form, said); };
  return form;
}
function checkCeiling(key, typed, l) {
  const words = String(typed).trim(), v = Number(words), cap = (l.limits || {})[key];
  const [kind, lo, hi] = LIMIT_BOUNDS[key] || ['float', 0, Infinity], used = l[USED_OF[key]];
  if (!words || !Number.isFinite(v)) return [null, `Give the new ${key} as a number.`];
  if (kind === 'int' && !Number.isInteger(v)) return [null, `${key} must be a whole number.`];
  if (cap != null && v <= cap) return [null, `${key} must be above its ceiling now (${shownCap(key, cap)}).`];
  if (used != null && v <= num(used)) return [null, `${key} must be above what the loop used (${used}).`];
  if (v < lo || v > hi) return [null, `${key} must be between ${lo} and ${hi}.`];
  return [v, null];
}
async function sendRaise(l, form, said) {
  const raise_to = {};
  for (const input of form.querySelectorAll('input')) {
    const [v, why] = checkCeiling(input.name, input.value, l);
    if (why) { said.textContent = fleet.raise.error = why; input.focus(); return; }
    raise_to[input.name] = v;
  }
  said.textContent = '';
  if (await fleetCall('POST', fleetPath(l.id, 'gate'), {answer: 'raise', raise_to}, said)) {
    fleet.raise = null; fleetList();
  } else fleet.raise.error = said.textContent;
}
// A loop's timeline: oldest first, a slice at a time ("more"); new events join while it is open.
const ftlRows = document.getElementById('ftl-rows'), ftlMore = document.getElementById('ftl-more');
function stamp(at) {
  const when = new Date(num(at) * 1000);
  return isNaN(when) ? '' : when.toISOString().slice(0, 19).replace('T', ' ');
}
function gist(d) {  // a readable line of an event of a kind this page does not know
  return Object.entries(d).map(([k, v]) => k + ' ' + (typeof v === 'object' ? JSON.stringify(v) : text(v))
    .slice(0, 120)).join(' · ');
}
function eventText(kind, d) {
  if (kind === 'iteration') {
    const gates = (Array.isArray(d.gates) ? d.gates : [])
      .map(g => `${text(g.name)}=${g.answer ?? '(waiting)'}`);
    const parts = [`iteration ${text(d.iteration)}`, text(d.outcome || 'continued')];
    if (d.dollars_this_iter != null) parts.push('$' + num(d.dollars_this_iter).toFixed(4));
    if (gates.length) parts.push('gates ' + gates.join('; '));
    if (d.status_line) parts.push(text(d.status_line));
    return parts.join(' · ');
  }
  if (kind === 'gate') {
    const raised = Object.entries(d.raised && typeof d.raised === 'object' ? d.raised : {})
      .map(([k, v]) => `${k} ${Array.isArray(v) ? `${v[0] ?? 'none'} → ${v[1]}` : text(v)}`);
    return `gate ${text(d.gate)} answered ${text(d.answer)} by ${text(d.user || 'someone')} (${text(d.by)})` +
      (raised.length ? ': ' + raised.join(', ') : '');
  }
  return text(kind) + ': ' + gist(d);
}
function eventFailed(kind, d) {
  const o = d.outcome;
  const ending = typeof o === 'string' && /^[A-Z][A-Z_]*(:|$)/.test(o);  // an outcome, not 'continued'
  return /fail|error/i.test(text(kind)) || (ending && failedOutcome(o));
}
function ftlRow(e) {
  const d = e.data && typeof e.data === 'object' && !Array.isArray(e.data) ? e.data : {};
  const li = el('li', null, eventFailed(e.kind, d) ? 'failed' : ''); li.dataset.event = e.id;
  li.dataset.kind = text(e.kind);
  if (d.iteration != null) li.dataset.iteration = d.iteration;
  li.append(el('span', stamp(e.at), 'at'), el('span', 'g' + num(e.generation), 'gen'),
    el('span', eventText(e.kind, d).slice(0, 600), 'what'));
  return li;
}
function fleetTimelineCause() {
  const l = (fleet.data.loops || []).find(x => x.id === fleet.tl.id);
  const said = document.getElementById('ftl-cause');
  const line = !l ? '' : l.state === 'failed' ? 'failed: ' + text(l.cause || l.outcome)
    : l.state === 'stuck' ? 'stuck: ' + text(l.stuck) : '';
  said.textContent = line; said.hidden = !line;
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
    if (!res.ok) { ftlRows.replaceChildren(el('li', data.error || res.statusText, 'failed')); return; }
    for (const e of data.events) ftlRows.appendChild(ftlRow(e));
    tl.next = data.next; tl.more = data.more; ftlMore.hidden = !data.more;
  } finally {
    tl.busy = false;
    if (tl.again && tl === fleet.tl) { tl.again = false; fleetTimelineRead(); }
  }
}
function fleetTimeline(l) {
  fleet.tl = {id: l.id, next: 0, more: false};
  const box = document.getElementById('fleet-timeline');
  box.hidden = false;
  document.getElementById('ftl-name').textContent = l.name;
  ftlRows.replaceChildren(); ftlMore.hidden = true;
  fleetTimelineCause();
  fleetTimelineRead();
  box.scrollIntoView({block: 'nearest'});
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
    body[k] = k.startsWith('max_') ? Number(v)
      : k === 'tags' ? String(v).split(',').map(t => t.trim()).filter(Boolean) : String(v);
  }
  const res = await fetch('/api/loops', {method: 'POST', headers: {'Content-Type': 'application/json',
    'X-Loopwright-CSRF': csrf}, body: JSON.stringify(body)});
  const got = await res.json().catch(() => ({}));
  said.textContent = res.ok ? `queued ${got.loop ? got.loop.name : got.name}` : (got.error || res.statusText);
  said.className = res.ok ? '' : 'problem';
  if (res.ok) form.reset();
};
// No fetch of /api/fleet here: the event stream's first message is the fleet as it is now.
""".replace("__BOUNDS__", jsoncodec.dumps(BOUNDS).decode())
