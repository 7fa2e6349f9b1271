// scoreflow live page. Plain JavaScript, no build step, nothing loaded from elsewhere.
// The server streams `scores`, `placements` and `events` (server-sent events, ./stream);
// everything shown is built with DOM calls and textContent, never from HTML strings: event
// fields are chosen by whoever sent the event.
"use strict";

const MAX_EVENTS = 200;
const state = { scores: null, placements: [], events: [], offset: 0, resetEvents: true };
const $ = (id) => document.getElementById(id);

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined && text !== null) e.textContent = String(text);
  return e;
}

// The server's clock: ages are measured against it, not the browser's.
const now = () => Date.now() + state.offset;

function ago(ms) {
  const s = Math.max(0, Math.round(ms / 1000));
  if (s < 60) return s + "s";
  if (s < 3600) return Math.floor(s / 60) + "m" + (s % 60 ? String(s % 60).padStart(2, "0") + "s" : "");
  if (s < 86400) return Math.floor(s / 3600) + "h" + String(Math.floor((s % 3600) / 60)).padStart(2, "0") + "m";
  return Math.floor(s / 86400) + "d";
}

function clock(t) {
  const d = new Date(t);
  return d.toLocaleTimeString([], { hour12: false }) + "." + String(d.getMilliseconds()).padStart(3, "0");
}

// Diverging colour: red below 0, green above, a dark neutral at 0.
function mix(a, b, t) { return a.map((x, i) => Math.round(x + (b[i] - x) * t)); }
function heat(v) {
  const neutral = [43, 50, 64], low = [224, 72, 61], high = [47, 191, 113];
  const t = Math.min(1, Math.abs(v) / 100);
  const c = v < 0 ? mix(neutral, low, t) : mix(neutral, high, t);
  return "rgb(" + c.join(",") + ")";
}

// ---- heat map ------------------------------------------------------------------------------

let lastValues = {}; // "cluster|column" -> value, to flash what changed
const changedAt = {}; // "cluster|column" -> when its value last changed (browser clock)

function chosenBy() {
  const m = {};
  for (const p of state.placements) for (const c of p.current.clusters || []) (m[c] = m[c] || []).push(p.name);
  return m;
}

function renderHeat() {
  const v = state.scores;
  const table = $("heatmap");
  table.replaceChildren();
  const empty = !v || !v.clusters || v.clusters.length === 0;
  $("heat-empty").hidden = !empty;
  if (empty) return;
  // Header: resources spanning their scores.
  const thead = el("thead"), r1 = el("tr"), r2 = el("tr");
  r1.append(el("th")); r2.append(el("th"));
  const groups = [];
  for (const col of v.columns) {
    const i = col.indexOf("/"), res = col.slice(0, i), score = col.slice(i + 1);
    if (!groups.length || groups[groups.length - 1].res !== res) groups.push({ res, n: 0 });
    groups[groups.length - 1].n++;
    r2.append(el("th", "score", score));
  }
  for (const g of groups) { const th = el("th", "resource", g.res); th.colSpan = g.n; r1.append(th); }
  thead.append(r1, r2);
  const tbody = el("tbody");
  const picks = chosenBy();
  const next = {};
  for (const cluster of v.clusters) {
    const tr = el("tr");
    const th = el("th", "cluster", cluster);
    for (const p of picks[cluster] || []) { const b = el("span", "pick", "▲ " + p); b.title = "chosen by Placement " + p; th.append(b); }
    tr.append(th);
    for (const col of v.columns) {
      const cell = (v.cells[cluster] || {})[col];
      const td = el("td", "cell");
      td.dataset.cluster = cluster;
      td.dataset.column = col;
      if (!cell) {
        td.classList.add("none");
        td.append(el("span", "value", "–"));
        td.title = cluster + ": no " + col;
      } else {
        td.style.backgroundColor = heat(cell.value);
        td.append(el("span", "value", cell.value), el("span", "age"));
        const bar = el("span", "bar"); bar.append(el("i")); td.append(bar);
        if (cell.observed) td.dataset.observed = cell.observed;
        if (cell.validUntil) td.dataset.validUntil = cell.validUntil;
        const key = cluster + "|" + col;
        next[key] = cell.value;
        if (key in lastValues && lastValues[key] !== cell.value) changedAt[key] = Date.now();
        if (Date.now() - (changedAt[key] || 0) < 1200) td.classList.add("changed");
      }
      tr.append(td);
    }
    tbody.append(tr);
  }
  lastValues = next;
  table.append(thead, tbody);
  tickAges();
}

// Ages, validity bars and expiry move every second without a message from the server.
function tickAges() {
  const t = now();
  for (const td of document.querySelectorAll("td.cell[data-observed], td.cell[data-valid-until]")) {
    const obs = td.dataset.observed ? Date.parse(td.dataset.observed) : null;
    const vu = td.dataset.validUntil ? Date.parse(td.dataset.validUntil) : null;
    const expired = vu !== null && vu <= t;
    td.classList.toggle("expired", expired);
    const age = td.querySelector(".age");
    let text = obs !== null ? ago(t - obs) + " ago" : "";
    if (expired) text = "expired " + ago(t - vu) + " ago";
    else if (vu === null) text += " · no expiry";
    age.textContent = text;
    const bar = td.querySelector(".bar i");
    let left = 1;
    if (vu !== null && obs !== null && vu > obs) left = Math.max(0, Math.min(1, (vu - t) / (vu - obs)));
    else if (vu !== null) left = expired ? 0 : 1;
    bar.style.width = (left * 100).toFixed(1) + "%";
    td.classList.toggle("stale", !expired && left < 0.25);
    td.title = td.dataset.cluster + " · " + td.dataset.column +
      (obs !== null ? "\nobserved " + new Date(obs).toLocaleString() : "") +
      (vu !== null ? "\nvalid until " + new Date(vu).toLocaleString() + (expired ? " (expired: Placements count 0)" : " (in " + ago(vu - t) + ")") : "\nnever expires");
  }
}

// ---- placements ----------------------------------------------------------------------------

const palette = ["#5ab0ff", "#f2a93b", "#b48cf2", "#2fbf71", "#ef7bb0", "#4fd1c5", "#e6d35a", "#ff8a65"];
const clusterColour = {};
function colourOf(name) {
  if (!(name in clusterColour)) clusterColour[name] = palette[Object.keys(clusterColour).length % palette.length];
  return clusterColour[name];
}

function prioLabel(x) {
  return (x.type === "AddOn" ? x.column : x.name) + " × " + x.weight;
}

function whyTable(p, why) {
  const t = el("table", "why");
  const h = el("tr");
  h.append(el("th", null, "cluster"));
  for (const x of p.prioritizers) h.append(el("th", x.type === "AddOn" ? null : "builtin", prioLabel(x)));
  h.append(el("th", null, "total"));
  t.append(h);
  for (const w of why) {
    const tr = el("tr", w.chosen ? "chosen" : "");
    tr.dataset.cluster = w.cluster;
    tr.append(el("td", null, w.cluster));
    for (const term of w.terms) {
      let text = term.score + " × " + term.weight + " = " + term.score * term.weight;
      if (term.missing) text = "no score → 0";
      if (term.expired) text = "expired → 0";
      if (term.unknown) text = "not shown";
      tr.append(el("td", term.missing || term.expired || term.unknown ? "zero" : "", text));
    }
    tr.append(el("td", "total", w.total));
    t.append(tr);
  }
  return t;
}

function renderPlacements() {
  const list = $("placement-list");
  list.replaceChildren();
  $("placements-empty").hidden = state.placements.length > 0;
  for (const p of state.placements) {
    const card = el("div", "placement");
    card.dataset.placement = p.namespace + "/" + p.name;
    const title = el("div", "title");
    title.append(el("span", "name", p.namespace + "/" + p.name),
      el("span", "meta", "mode " + p.mode + (p.numberOfClusters != null ? " · picks " + p.numberOfClusters : " · picks all that fit")));
    card.append(title);

    const prios = el("div", "chips");
    prios.append(el("span", "muted", "prioritizers:"));
    if (!p.prioritizers.length) prios.append(el("span", "chip builtin", "none: every cluster ties, the first by name wins"));
    for (const x of p.prioritizers) {
      prios.append(x.type === "AddOn" ? el("span", "chip prio", prioLabel(x)) :
        el("span", "chip builtin", prioLabel(x) + (x.default ? " (BuiltIn, added by Additive mode)" : " (BuiltIn)")));
    }
    card.append(prios);

    const dec = el("div", "chips decision");
    dec.append(el("span", "muted", "decides:"));
    if (!p.current.clusters || !p.current.clusters.length) dec.append(el("span", "chip", "no cluster yet"));
    for (const c of p.current.clusters || []) dec.append(el("span", "chip chosen", c));
    if (p.current.at) dec.append(el("span", "muted", "since " + clock(p.current.at)));
    card.append(dec);

    if (p.prioritizers.length) card.append(whyTable(p, p.current.why));

    // The decision over time: one segment per decision, as wide as it lasted.
    const hist = p.history || [];
    if (hist.length) {
      const strip = el("div", "timeline");
      const t0 = Date.parse(hist[0].at), tEnd = now();
      const span = Math.max(1, tEnd - t0);
      hist.forEach((d, i) => {
        const from = Date.parse(d.at), to = i + 1 < hist.length ? Date.parse(hist[i + 1].at) : tEnd;
        const seg = el("span", null, (d.clusters || []).join(", ") || "none");
        seg.style.flexGrow = String(Math.max(0.01, (to - from) / span));
        seg.style.backgroundColor = d.clusters && d.clusters.length ? colourOf(d.clusters.join(",")) : "#3a4150";
        seg.title = clock(from) + ": " + ((d.clusters || []).join(", ") || "no cluster");
        strip.append(seg);
      });
      card.append(strip);
      const ol = el("ol", "history");
      for (const d of hist.slice().reverse()) {
        const li = el("li");
        li.append(el("span", null, clock(d.at) + "  "), el("b", null, (d.clusters || []).join(", ") || "no cluster"));
        const top = (d.why || []).slice(0, 3).map((w) => w.cluster + " " + w.total).join(" · ");
        if (top) li.append(el("span", null, "   (totals then: " + top + ")"));
        ol.append(li);
      }
      card.append(ol);
    }
    if (p.prioritizers.some((x) => x.name === "Steady")) {
      card.append(el("div", "note", "Steady gives the clusters the Placement holds 100: another cluster takes over only when it leads by more. Balance gives 100 to a cluster no other Placement holds, less the more others hold it."));
    }
    if (p.prioritizers.some((x) => x.type === "BuiltIn" && x.name !== "Steady" && x.name !== "Balance")) {
      card.append(el("div", "note", "ResourceAllocatable prioritizers count in the controller's decision but are not shown: they read ManagedCluster status, which the page does not watch."));
    }
    list.append(card);
  }
}

// ---- events --------------------------------------------------------------------------------

function shortType(t) { return t.startsWith("io.scoreflow.") ? t.slice("io.scoreflow.".length) : t; }

function eventItem(e, fresh) {
  const li = el("li", e.refusal ? "refusal" : (e.type.endsWith(".done") ? "done" : ""));
  if (fresh) li.classList.add("fresh");
  li.dataset.type = e.type;
  li.dataset.seq = e.seq;
  const head = el("div", "ev-head");
  head.append(el("span", "ev-time", clock(e.received)), el("span", "ev-type", shortType(e.type)), el("span", "ev-source", "from " + e.source));
  li.append(head);
  if (e.refusal && e.reason) {
    const why = el("div", "ev-message");
    why.append(el("span", "reason", e.reason), document.createTextNode(e.message || ""));
    li.append(why);
  }
  if (e.summary) li.append(el("div", "ev-summary", e.summary));
  if (e.items && e.items.length) {
    const ul = el("ul", "ev-items");
    for (const it of e.items) ul.append(el("li", null, it.cluster + ": " + it.reason + (it.message ? " (" + it.message + ")" : "")));
    if (e.more) ul.append(el("li", null, "and " + e.more + " more clusters"));
    li.append(ul);
  }
  if (e.counts) li.append(el("div", "ev-summary", Object.entries(e.counts).map(([k, n]) => k + " " + n).join(", ")));
  return li;
}

// As the server does: drop the oldest routine event first, so refusals stay in view; refusals
// keep at most half the room.
function trimEvents(evs) {
  const refusals = evs.filter((e) => e.refusal).length;
  const dropRefusal = refusals > MAX_EVENTS / 2 || refusals === evs.length;
  const i = evs.findIndex((e) => e.refusal === dropRefusal);
  return evs.slice(0, i).concat(evs.slice(i + 1));
}

function renderEvents(freshFrom) {
  const list = $("event-list");
  const only = $("refusals-only").checked;
  list.replaceChildren();
  let shown = 0;
  for (let i = state.events.length - 1; i >= 0; i--) {
    const e = state.events[i];
    if (only && !e.refusal) continue;
    list.append(eventItem(e, freshFrom !== undefined && e.seq >= freshFrom));
    shown++;
  }
  const refusals = state.events.filter((e) => e.refusal).length;
  $("event-count").textContent = "(" + state.events.length + ", " + refusals + " refused)";
  $("events-empty").hidden = shown > 0;
}

// ---- stream --------------------------------------------------------------------------------

function connect() {
  const es = new EventSource("stream");
  es.onopen = () => {
    $("conn").className = "dot on";
    $("conn-text").textContent = "live";
    state.resetEvents = true; // a new stream starts with every event the server keeps
  };
  es.onerror = () => {
    $("conn").className = "dot off";
    $("conn-text").textContent = "reconnecting…";
    // EventSource retries a dropped stream by itself, but not one the server refused (this
    // browser's tabs at their bound, or the page full): try again a little later.
    if (es.readyState === EventSource.CLOSED) {
      setTimeout(connect, 5000 + Math.random() * 5000);
    }
  };
  const stamp = () => { $("updated").textContent = "updated " + clock(now()); };
  es.addEventListener("scores", (m) => {
    state.scores = JSON.parse(m.data);
    state.offset = Date.parse(state.scores.now) - Date.now();
    renderHeat();
    stamp();
  });
  es.addEventListener("placements", (m) => {
    state.placements = JSON.parse(m.data) || [];
    renderPlacements();
    renderHeat(); // the ▲ marks of chosen clusters
    stamp();
  });
  es.addEventListener("events", (m) => {
    const evs = JSON.parse(m.data) || [];
    let fresh;
    if (state.resetEvents) {
      state.events = evs;
      state.resetEvents = false;
    } else {
      fresh = evs.length ? evs[0].seq : undefined;
      state.events = state.events.concat(evs);
    }
    while (state.events.length > MAX_EVENTS) state.events = trimEvents(state.events);
    renderEvents(fresh);
    stamp();
  });
}

$("refusals-only").addEventListener("change", () => renderEvents());
setInterval(() => { tickAges(); }, 1000);
setInterval(() => { if (state.placements.length) renderPlacements(); }, 5000); // timeline widths
connect();
