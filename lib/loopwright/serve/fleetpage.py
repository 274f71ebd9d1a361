"""The Fleet section of the monitor's page (page.py puts it first): an operator's view of the
fleet. At the top what needs them (gates waiting, failed loops, loops stuck in the queue with the
reason, stale or stopped workers; each a count that filters the list), then the workers with
their state and the loops each holds, then the loops, most pressing first, filtered, searched and
paged (fleetlist.py), one line each (fleetrows.py), with a loop's timeline on demand and a form
that queues a loop. At 390 px wide the rows become cards: nothing scrolls sideways.

It shows when the monitor's database is a server (PostgreSQL) one, a fleet's, or when the
SQLite one holds any fleet loop or worker. It updates from the page's one event stream
(``fleet`` events, sent when the database says something changed). Every text in it comes from
the database, which whoever can write a row can fill with anything: it goes on the page with
textContent only, and into URLs through encodeURIComponent."""

from __future__ import annotations

from loopwright.serve import fleetlist, fleetrows

CSS = """
 #fleet h2 { font-size: 1.05rem; margin: 1rem 0 .4rem; } .quiet { color: #666; font-weight: normal; }
 #attention { display: flex; flex-wrap: wrap; gap: .5rem; margin: .4rem 0 .8rem; }
 .att { border: 1px solid #999; border-radius: 1rem; padding: .3rem .8rem; background: #fff; cursor: pointer;
   text-align: left; max-width: 100%; }
 .att-n { font-weight: bold; } .att-why { display: block; font-size: .8rem; overflow-wrap: anywhere; }
 .att-gates { border-color: #b60; color: #7a4100; background: #fff4dc; }
 .att-failed { border-color: #c00; color: #a00; background: #fdecec; }
 .att-stuck { border-color: #b60; color: #7a4100; background: #fffaf0; }
 .att-workers { border-color: #c00; color: #a00; background: #fff; }
 .att[aria-pressed=true], .chip[aria-pressed=true] { box-shadow: inset 0 0 0 2px #333; }
 .att-ok { color: #075; }
 #fleet-workers { list-style: none; padding: 0; margin: .2rem 0; display: flex; flex-wrap: wrap; gap: .4rem; }
 #fleet-workers li { border: 1px solid #cde; border-radius: .4rem; padding: .2rem .5rem; font-size: .85rem;
   max-width: 100%; overflow-wrap: anywhere; }
 #fleet-workers li > * { margin-right: .45rem; } .wstate { font-weight: bold; color: #075; }
 li.w-stale { border-color: #b60; background: #fff6e0; } li.w-stale .wstate { color: #a50; }
 li.w-stopped { border-color: #c00; background: #fdecec; } li.w-stopped .wstate { color: #b00; }
 li.w-left { border-color: #ccc; background: #f6f6f6; color: #555; } li.w-left .wstate { color: #666; }
 #fleet-spend span { margin-right: .9rem; } #fleet-spend, #fleet-pauses { font-size: .85rem; }
 .pause { color: #a50; }
 #fleet-filters { display: flex; flex-wrap: wrap; gap: .4rem .8rem; align-items: center;
   margin-bottom: .4rem; }
 #fleet-status { display: flex; flex-wrap: wrap; gap: .3rem; }
 .chip { border: 1px solid #bbb; border-radius: .8rem; background: #f6f6f6; padding: .15rem .55rem; }
 .pickers { display: flex; flex-wrap: wrap; gap: .3rem; } .pickers select { max-width: 11em; }
 #ff-search { width: 16em; max-width: 100%; }
 #fleet-said:empty { display: none; } #fleet-said, .raise-error, .cause, #ftl-cause { color: #b00; }
 #fleet-table { table-layout: fixed; }
 #fleet-table td { white-space: nowrap; overflow: hidden; text-overflow: ellipsis; padding: .25rem .4rem; }
 #fleet-table th:nth-child(1) { width: 10em; } #fleet-table th:nth-child(3) { width: 10em; }
 #fleet-table th:nth-child(4) { width: 6.5em; } #fleet-table th:nth-child(5) { width: 4.5em; }
 #fleet-table th:nth-child(6) { width: 12em; } #fleet-table th:nth-child(7) { width: 4.5em; }
 #fleet-table th:nth-child(8) { width: 2.6em; } #fleet-table th:nth-child(9) { width: 16em; }
 #fleet-table td.name .line { overflow: hidden; text-overflow: ellipsis; }
 #fleet-table .cause { white-space: normal; overflow-wrap: anywhere; }  /* a failure's cause whole */
 .fleet-goal { color: #555; } details.fleet-goal { display: inline; }
 details.fleet-goal summary { display: inline; cursor: pointer; } details.fleet-goal[open] { display: block; }
 .fleet-goal pre { white-space: pre-wrap; overflow-wrap: anywhere; margin: .2rem 0; }
 tr.st-failed { background: #fff4f4; } tr.st-failed td.status { color: #b00; font-weight: bold; }
 tr.st-gate { background: #fffaf0; } tr.st-gate td.status, tr.st-stuck td.status, .why-stuck { color: #a50; }
 tr.st-running td.status { color: #075; } tr.st-done td.status { color: #555; }
 .gate { white-space: normal; margin-top: .15rem; } .gate-q { color: #7a4100; margin-right: .4rem; }
 .gate button, td.actions button { margin: .1rem .25rem .1rem 0; font-size: .85rem; padding: .1rem .45rem; }
 .raise { display: inline-flex; flex-wrap: wrap; gap: .25rem .4rem; align-items: center; }
 .raise input { width: 7em; } .confirm-q { white-space: normal; margin-right: .3rem; }
 #fleet-table td.actions { overflow: visible; } #fleet-table td.confirming { white-space: normal; }
 .bar { display: inline-block; width: 3.2em; height: .55em; background: #e4e4e4; border-radius: .3em;
   margin-right: .3rem; overflow: hidden; vertical-align: middle; }
 .bar > span { display: block; height: 100%; background: #48c; } .bar.hot > span { background: #d70; }
 #fleet-pager { margin: .4rem 0; } #fleet-pager button { margin: 0 .4rem; }
 #ftl-rows { list-style: none; padding: 0; margin: .3rem 0; font-size: .9rem; }
 #ftl-rows li { padding: .15rem 0; border-bottom: 1px solid #eee; overflow-wrap: anywhere; }
 #ftl-rows li > span { margin-right: .5rem; } #ftl-rows .at, #ftl-rows .gen { color: #777; }
 #ftl-rows li.failed { color: #b00; }
 #fleet-submit { display: grid; grid-template-columns: max-content 1fr; gap: .3rem .6rem; max-width: 48em; }
 #fleet-submit textarea { min-height: 4em; } #fleet-submitted { grid-column: 2; }
 @media (max-width: 760px) {
  #fleet-table thead { display: none; }
  #fleet-table, #fleet-table tbody, #fleet-table tr { display: block; width: auto; }
  #fleet-table tr { border: 1px solid #ddd; border-radius: .4rem; margin: .4rem 0; padding: .3rem .5rem; }
  #fleet-table td { display: inline-block; border: 0; padding: .1rem 0; margin-right: .7rem; max-width: 100%;
    white-space: normal; vertical-align: middle; }
  #fleet-table td.name, #fleet-table td.actions { display: block; margin-right: 0; }
  #fleet-table td.name .line { white-space: normal; overflow-wrap: anywhere; }
  #fleet-submit { grid-template-columns: 1fr; } #fleet-submitted { grid-column: 1; }
  .pickers select { max-width: 8.5em; }
 }
"""

HTML = """
<section id="fleet" hidden>
 <div id="attention" aria-label="what needs you"></div>
 <section id="fleet-workers-box">
  <h2>Workers <span id="fleet-workers-sum" class="quiet"></span></h2>
  <ul id="fleet-workers"></ul>
  <div id="fleet-spend"></div>
  <div id="fleet-pauses"></div>
 </section>
 <section id="fleet-list">
  <h2>Fleet loops</h2>
  <div id="fleet-filters">
   <div id="fleet-status" role="group" aria-label="status"></div>
   <div class="pickers">
    <select id="ff-host" aria-label="host"></select>
    <select id="ff-account" aria-label="account"></select>
    <select id="ff-tag" aria-label="tag"></select>
    <input id="ff-search" type="search" placeholder="search name, goal, repo, cause" aria-label="search">
   </div>
  </div>
  <p id="fleet-said" role="alert"></p>
  <table id="fleet-table">
   <thead><tr><th>state</th><th>loop</th><th>repository</th><th>host</th><th>iter.</th><th>spend</th>
   <th>age</th><th title="failovers">↻</th><th></th></tr></thead>
   <tbody id="fleet-loops"></tbody>
  </table>
  <p id="fleet-empty" hidden></p>
  <div id="fleet-pager" hidden><button id="fp-prev" type="button">‹ previous</button>
   <span id="fp-where"></span><button id="fp-next" type="button">next ›</button></div>
  <p id="fleet-more" class="quiet" hidden></p>
 </section>
 <section id="fleet-timeline" hidden>
  <h2>timeline of fleet loop <span id="ftl-name"></span>
   <button id="ftl-close" type="button">close</button></h2>
  <p id="ftl-cause" hidden></p>
  <ol id="ftl-rows"></ol>
  <button id="ftl-more" type="button" hidden>more</button>
 </section>
 <details id="fleet-new"><summary>Queue a loop</summary>
  <form id="fleet-submit">
   <label for="fs-repo">repository</label><input id="fs-repo" name="repo" required
     placeholder="https://github.com/acme/api.git">
   <label for="fs-goal">goal</label><textarea id="fs-goal" name="goal" required></textarea>
   <label for="fs-branch">from branch</label><input id="fs-branch" name="branch" placeholder="its default">
   <label for="fs-name">name</label><input id="fs-name" name="name" placeholder="drawn">
   <label for="fs-account">account</label><input id="fs-account" name="account" placeholder="default">
   <label for="fs-tags">tags</label><input id="fs-tags" name="tags" placeholder="comma-separated">
   <label for="fs-verify">verify</label><input id="fs-verify" name="verify"
     placeholder="a command a worker's --allow-verify accepts, run at each completion claim">
   <label for="fs-iter">max iterations</label><input id="fs-iter" name="max_iterations" type="number" min="1">
   <label for="fs-dollars">max dollars</label><input id="fs-dollars" name="max_dollars" type="number"
     min="0" step="0.01">
   <span></span><button type="submit">Queue</button>
   <span></span><span id="fleet-submitted" role="status"></span>
  </form>
 </details>
</section>
"""

JS = fleetlist.JS + fleetrows.JS
