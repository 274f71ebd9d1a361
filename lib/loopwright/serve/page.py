"""The monitor's live page: every loop, its progress and spend, waiting gates with their
answers, and a Stop button per run. It updates from the server-sent events stream.

Everything the agent or a file wrote (goals, reasons, gate questions) is put on the page
with textContent, never as HTML. State-changing calls carry the page's CSRF token."""

from __future__ import annotations

import html

PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="csrf" content="__CSRF__">
<title>loopwright</title>
<style>
 body { font: 14px system-ui, sans-serif; margin: 1.5rem; color: #222; }
 h1 { font-size: 1.2rem; }
 table { border-collapse: collapse; width: 100%; }
 th, td { text-align: left; padding: .35rem .5rem; border-bottom: 1px solid #ddd; vertical-align: top; }
 .state-active { color: #0a6; } .state-ended { color: #555; } .state-waiting { color: #b60; }
 .gate { background: #fff6e0; padding: .3rem; margin: .2rem 0; }
 button { margin-right: .3rem; }
 svg rect { fill: #48c; }
 #live { color: #888; font-size: .85rem; }
</style>
</head>
<body>
<h1>loopwright <span id="live">connecting…</span></h1>
<table>
 <thead><tr><th>loop</th><th>mode</th><th>project</th><th>iteration</th><th>time</th><th>spend</th>
 <th>state</th><th>last reason</th><th>spend per iteration</th><th></th></tr></thead>
 <tbody id="loops"></tbody>
</table>
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
  if ((l.pending_gates || []).length) return ['waiting for an answer', 'state-waiting'];
  return [run && run.status === 'running' ? 'running' : 'active', 'state-active'];
}
function render(data) {
  const body = document.getElementById('loops');
  body.replaceChildren();
  for (const p of data.projects) for (const l of p.loops) {
    const run = data.runs.find(r => r.project === p.project && r.loop === l.name &&
      ['starting', 'running', 'waiting_quota'].includes(r.status));
    const tr = el('tr'); tr.dataset.loop = l.name;
    const [word, cls] = state(l, run);
    const money = '$' + (l.dollars_estimate || 0).toFixed(2) + (l.max_dollars ? ' / $' + l.max_dollars : '');
    [l.name, l.mode, p.project, `${l.iteration}/${l.max_iterations}`,
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
}
fetch('/api/loops').then(r => r.json()).then(render);
const events = new EventSource('/api/events');
events.addEventListener('loops', e => {
  document.getElementById('live').textContent = 'live';
  render(JSON.parse(e.data));
});
events.onerror = () => { document.getElementById('live').textContent = 'reconnecting…'; };
</script>
</body>
</html>
"""


def render(csrf: str) -> str:
    return PAGE.replace("__CSRF__", html.escape(csrf, quote=True))


LOGIN_NEEDED = (
    "<!doctype html><title>loopwright</title><p>Open the one-time login link that "
    "<code>loopwright serve</code> printed when it started.</p>"
)
