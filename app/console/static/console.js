// Engram memory console: plain DOM, no framework, nothing loaded from elsewhere.
// Every string that comes from the API (memory text, turns, entity names) reaches the page
// as textContent or an attribute value, never as markup.
"use strict";

(function () {
  const KEY = "engram.console.key";
  const SVG = "http://www.w3.org/2000/svg";
  const state = { user: null, memory: null, usersCursor: null, memoriesCursor: null };

  const $ = (id) => document.getElementById(id);

  function el(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }

  function svgEl(tag, attrs, text) {
    const node = document.createElementNS(SVG, tag);
    for (const [name, value] of Object.entries(attrs || {})) node.setAttribute(name, String(value));
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }

  function clear(node) {
    while (node.firstChild) node.removeChild(node.firstChild);
  }

  function say(message, isError) {
    const status = $("status");
    status.textContent = message || "";
    status.className = isError ? "error" : "muted";
  }

  function when(value) {
    if (!value) return "";
    const at = new Date(value);
    return isNaN(at) ? String(value) : at.toISOString().replace("T", " ").slice(0, 16);
  }

  function day(value) {
    return when(value).slice(0, 10);
  }

  // -- the key: from the URL fragment or the form, into this tab's sessionStorage ----------

  function readFragment() {
    const params = new URLSearchParams(location.hash.slice(1));
    const key = params.get("key");
    if (key) {
      sessionStorage.setItem(KEY, key);
      params.delete("key");
      const rest = params.toString();
      history.replaceState(null, "", location.pathname + location.search + (rest ? "#" + rest : ""));
    }
    return params;
  }

  function writeFragment() {
    const params = new URLSearchParams();
    if (state.user) params.set("user", state.user);
    if (state.memory) params.set("memory", state.memory);
    const rest = params.toString();
    history.replaceState(null, "", location.pathname + location.search + (rest ? "#" + rest : ""));
  }

  function showKeyState() {
    $("key-state").textContent = sessionStorage.getItem(KEY) ? "key set" : "no key";
  }

  async function api(path, options) {
    const key = sessionStorage.getItem(KEY);
    if (!key) throw new Error("paste a tenant API key first");
    const init = Object.assign({}, options || {});
    init.headers = Object.assign({ Authorization: "Bearer " + key }, init.headers || {});
    const response = await fetch(path, init);
    const body = await response.json().catch(() => null);
    if (!response.ok) {
      const detail = body && body.detail;
      const message = detail && typeof detail === "object" ? detail.message : detail;
      throw new Error(response.status + ": " + (message || response.statusText));
    }
    return body;
  }

  // -- users -------------------------------------------------------------------------------

  async function loadUsers(more) {
    const tbody = $("users").tBodies[0];
    if (!more) {
      clear(tbody);
      state.usersCursor = null;
    }
    let path = "v1/users?limit=50";
    if (more && state.usersCursor) path += "&cursor=" + encodeURIComponent(state.usersCursor);
    const page = await api(path);
    for (const user of page.users) {
      const row = el("tr", "pick");
      row.dataset.user = user.user_id;
      row.append(el("td", "", user.user_id), el("td", "num", user.memories), el("td", "num", user.turns));
      row.addEventListener("click", () => selectUser(user.user_id).catch(fail));
      tbody.append(row);
    }
    state.usersCursor = page.next_cursor;
    $("users-more").hidden = !page.next_cursor;
    markSelected(tbody, "user", state.user);
    return page.users;
  }

  function markSelected(tbody, field, value) {
    for (const row of tbody.rows) row.classList.toggle("selected", row.dataset[field] === value);
  }

  async function selectUser(user) {
    state.user = user;
    state.memory = null;
    writeFragment();
    markSelected($("users").tBodies[0], "user", user);
    $("memories-user").textContent = user;
    $("search-input").value = "";
    clearDetail();
    await loadMemories(false);
  }

  // -- memories: the list, and search --------------------------------------------------------

  function memoryRow(memory) {
    const row = el("tr", "pick memory-row");
    row.dataset.memory = memory.id;
    const importance = memory.importance === null || memory.importance === undefined
      ? "" : Number(memory.importance).toFixed(3);
    row.append(
      el("td", "when", when(memory.occurred_at)),
      el("td", "kind", memory.kind),
      el("td", "num", importance),
      el("td", "memory-text", memory.content),
    );
    row.addEventListener("click", () => selectMemory(memory.id).catch(fail));
    return row;
  }

  async function loadMemories(more) {
    const tbody = $("memories").tBodies[0];
    if (!more) {
      clear(tbody);
      state.memoriesCursor = null;
    }
    let path = "v1/memories?limit=50&user_id=" + encodeURIComponent(state.user);
    if (more && state.memoriesCursor) path += "&cursor=" + encodeURIComponent(state.memoriesCursor);
    const page = await api(path);
    for (const memory of page.memories) tbody.append(memoryRow(memory));
    state.memoriesCursor = page.next_cursor;
    $("memories-more").hidden = !page.next_cursor;
    markSelected(tbody, "memory", state.memory);
    say(page.memories.length ? "" : "no memories for " + state.user);
  }

  async function searchMemories(query) {
    // An operator's look, not the user's retrieval: record nothing (no access, decay or Hebbian change).
    const body = {
      user_id: state.user,
      query: query,
      unit: "memories",
      limit: 50,
      include_turns: false,
      record: false,
    };
    const result = await api("v1/search", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify(body),
    });
    const tbody = $("memories").tBodies[0];
    clear(tbody);
    $("memories-more").hidden = true;
    const hits = result.hits.filter((hit) => hit.layer === "memory");
    for (const hit of hits) tbody.append(memoryRow(hit));
    markSelected(tbody, "memory", state.memory);
    say(hits.length + " memories match (an operator's search: nothing is recorded)");
  }

  // -- one memory: detail, source turns, graph, importance --------------------------------

  function clearDetail() {
    const detail = $("memory-detail");
    clear(detail);
    detail.textContent = "pick a memory";
    clear($("turns").tBodies[0]);
    clear($("entity-pick"));
    clear($("entity-graph"));
    clear($("importance-chart"));
    $("importance-note").textContent = "";
  }

  async function selectMemory(id) {
    state.memory = id;
    writeFragment();
    markSelected($("memories").tBodies[0], "memory", id);
    const memory = await api("v1/memories/" + encodeURIComponent(id) + "?recall=2");
    if (!state.user) {
      state.user = memory.user_id;
      writeFragment();
    }
    showDetail(memory);
    await Promise.all([loadEntities(id, memory.user_id), loadImportance(id)]);
  }

  function showDetail(memory) {
    const detail = $("memory-detail");
    clear(detail);
    detail.className = "";
    detail.append(el("p", "content", memory.content));
    const facts = [
      memory.kind,
      "importance " + Number(memory.importance).toFixed(3),
      "accessed " + (memory.access_count || 0) + "×",
      "occurred " + when(memory.occurred_at),
    ];
    if ((memory.tags || []).length) facts.push("tags: " + memory.tags.join(", "));
    if (memory.archived_at) facts.push("archived " + when(memory.archived_at));
    if (memory.valid_to) facts.push("superseded " + when(memory.valid_to));
    detail.append(el("p", "facts", facts.join(" · ")));
    const tbody = $("turns").tBodies[0];
    clear(tbody);
    const turns = memory.recall || [];
    for (const turn of turns) {
      const row = el("tr", turn.is_source ? "turn source" : "turn");
      row.append(
        el("td", "when", when(turn.occurred_at)),
        el("td", "", turn.speaker || turn.role),
        el("td", "", turn.content),
      );
      tbody.append(row);
    }
    if (!turns.length) {
      const row = el("tr");
      const cell = el("td", "muted", "no source turns (an explicit memory)");
      cell.colSpan = 3;
      row.append(cell);
      tbody.append(row);
    }
  }

  async function loadEntities(id, user) {
    const found = await api("v1/memories/" + encodeURIComponent(id) + "/entities");
    const pick = $("entity-pick");
    clear(pick);
    for (const entity of found.entities) {
      const option = el("option", "", entity.name);
      option.value = entity.name;
      pick.append(option);
    }
    pick.onchange = () => drawGraph(pick.value, user).catch(fail);
    if (found.entities.length) {
      await drawGraph(found.entities[0].name, user);
    } else {
      const graph = $("entity-graph");
      clear(graph);
      graph.append(svgEl("text", { x: 20, y: 30, class: "empty" }, "this memory names no entity"));
    }
  }

  async function drawGraph(name, user) {
    const path = "v1/entities/" + encodeURIComponent(name) + "/graph?depth=2&limit=40&user_id="
      + encodeURIComponent(user);
    const graph = await api(path);
    renderGraph($("entity-graph"), graph);
  }

  // Rings by hop distance from the entity, nodes spread evenly around each ring.
  function renderGraph(svg, graph) {
    clear(svg);
    const width = 640, height = 300, cx = width / 2, cy = height / 2;
    const center = graph.entity.id;
    const names = new Map([[center, graph.entity.name]]);
    const links = new Map();
    for (const edge of graph.edges) {
      names.set(edge.source_id, edge.source);
      names.set(edge.target_id, edge.target);
      for (const [a, b] of [[edge.source_id, edge.target_id], [edge.target_id, edge.source_id]]) {
        if (!links.has(a)) links.set(a, []);
        links.get(a).push(b);
      }
    }
    const hops = new Map([[center, 0]]);
    const queue = [center];
    while (queue.length) {
      const node = queue.shift();
      for (const next of links.get(node) || []) {
        if (!hops.has(next)) {
          hops.set(next, hops.get(node) + 1);
          queue.push(next);
        }
      }
    }
    const rings = new Map();
    for (const [node, hop] of hops) {
      if (!rings.has(hop)) rings.set(hop, []);
      rings.get(hop).push(node);
    }
    const at = new Map([[center, [cx, cy]]]);
    for (const [hop, nodes] of rings) {
      if (hop === 0) continue;
      nodes.sort((a, b) => names.get(a).localeCompare(names.get(b)));
      const radius = Math.min(35 + hop * 55, 125);
      nodes.forEach((node, i) => {
        const angle = (2 * Math.PI * i) / nodes.length + hop * 0.4 - Math.PI / 2;
        at.set(node, [cx + radius * 1.45 * Math.cos(angle), cy + radius * Math.sin(angle)]);
      });
    }
    for (const edge of graph.edges) {
      const [x1, y1] = at.get(edge.source_id);
      const [x2, y2] = at.get(edge.target_id);
      const stroke = 1 + 3 * Math.max(0, Math.min(1, Number(edge.weight) || 0));
      svg.append(svgEl("line", { class: "edge", x1, y1, x2, y2, "stroke-width": stroke.toFixed(2) }));
      svg.append(svgEl("text", {
        class: "edge-label", x: (x1 + x2) / 2, y: (y1 + y2) / 2 - 3, "text-anchor": "middle",
      }, edge.relation));
    }
    for (const [node, [x, y]] of at) {
      const group = svgEl("g", { class: "node-group" });
      group.append(svgEl("title", {}, names.get(node)));
      group.append(svgEl("circle", { class: node === center ? "node center" : "node", cx: x, cy: y, r: node === center ? 11 : 8 }));
      group.append(svgEl("text", { class: "node-label", x: x, y: y + 22, "text-anchor": "middle" }, names.get(node)));
      svg.append(group);
    }
    if (!graph.edges.length) {
      svg.append(svgEl("text", { x: 20, y: 30, class: "empty" }, "no relations around this entity yet"));
    }
  }

  async function loadImportance(id) {
    const data = await api("v1/memories/" + encodeURIComponent(id) + "/importance?points=80");
    renderImportance($("importance-chart"), data);
    const note = [
      "half-life " + data.half_life_days.toFixed(1) + " days (base " + data.base_half_life_days + ")",
      "importance now " + data.importance_now.toFixed(3),
      "archive floor " + data.floor,
    ];
    if (data.archived_at) note.push("archived " + when(data.archived_at));
    else if (data.archive_at) note.push("archived around " + day(data.archive_at) + " unless used");
    note.push(data.accesses.length + " recorded accesses");
    $("importance-note").textContent = note.join(" · ");
  }

  function renderImportance(svg, data) {
    clear(svg);
    const width = 640, height = 200, left = 40, right = 16, top = 14, bottom = 28;
    const times = data.curve.map((p) => Date.parse(p.at));
    for (const t of [data.created_at, data.now].concat(data.accesses)) times.push(Date.parse(t));
    const t0 = Math.min.apply(null, times);
    const t1 = Math.max(Math.max.apply(null, times), t0 + 1);
    const x = (t) => left + ((Date.parse(t) - t0) / (t1 - t0)) * (width - left - right);
    const y = (v) => top + (1 - v) * (height - top - bottom);
    svg.append(svgEl("line", { class: "axis", x1: left, y1: y(0), x2: width - right, y2: y(0) }));
    svg.append(svgEl("line", { class: "axis", x1: left, y1: y(0), x2: left, y2: y(1) }));
    for (const v of [0, 0.5, 1]) {
      svg.append(svgEl("text", { class: "tick", x: left - 6, y: y(v) + 3, "text-anchor": "end" }, v));
    }
    svg.append(svgEl("text", { class: "tick", x: left, y: height - 8 }, day(new Date(t0).toISOString())));
    svg.append(svgEl("text", { class: "tick", x: width - right, y: height - 8, "text-anchor": "end" },
      day(new Date(t1).toISOString())));
    svg.append(svgEl("line", { class: "floor", x1: left, y1: y(data.floor), x2: width - right, y2: y(data.floor) }));
    const nowX = x(data.now);
    svg.append(svgEl("line", { class: "now", x1: nowX, y1: y(0), x2: nowX, y2: y(1) }));
    svg.append(svgEl("text", { class: "tick", x: nowX + 3, y: y(1) + 10 }, "now"));
    const d = data.curve.map((p, i) => (i ? "L" : "M") + x(p.at).toFixed(1) + " " + y(p.importance).toFixed(1)).join(" ");
    svg.append(svgEl("path", { id: "importance-curve", class: "curve", d: d }));
    for (const at of data.accesses) {
      const marker = svgEl("circle", { class: "access", cx: x(at), cy: y(0), r: 4 });
      marker.append(svgEl("title", {}, "accessed " + when(at)));
      svg.append(marker);
    }
  }

  // -- jobs ----------------------------------------------------------------------------------

  async function loadJobs() {
    const result = await api("v1/jobs?limit=20");
    const tbody = $("jobs").tBodies[0];
    clear(tbody);
    for (const run of result.jobs) {
      const row = el("tr", "job-row");
      row.append(
        el("td", "when", when(run.started_at)),
        el("td", "", run.job),
        el("td", "", run.scope || ""),
        el("td", "", run.status),
        el("td", "num", run.rows),
        el("td", "num", run.errors),
      );
      if (run.error) row.title = run.error;
      tbody.append(row);
    }
    if (!result.jobs.length) {
      const row = el("tr");
      const cell = el("td", "muted", "no job runs for this tenant yet");
      cell.colSpan = 6;
      row.append(cell);
      tbody.append(row);
    }
  }

  // -- start -----------------------------------------------------------------------------------

  function fail(error) {
    say(error && error.message ? error.message : String(error), true);
  }

  async function start(params) {
    showKeyState();
    if (!sessionStorage.getItem(KEY)) {
      say("paste a tenant API key to begin");
      return;
    }
    const [users] = await Promise.all([loadUsers(false), loadJobs()]);
    const user = params.get("user") || (users.length ? users[0].user_id : null);
    if (user) await selectUser(user);
    const query = params.get("q");
    if (user && query) {
      $("search-input").value = query;
      await searchMemories(query);
    }
    const memory = params.get("memory");
    if (memory) await selectMemory(memory);
    document.body.dataset.ready = "true";
  }

  document.addEventListener("DOMContentLoaded", () => {
    const params = readFragment();
    $("key-form").addEventListener("submit", (event) => {
      event.preventDefault();
      const key = $("key-input").value.trim();
      $("key-input").value = "";
      if (key) sessionStorage.setItem(KEY, key);
      start(new URLSearchParams()).catch(fail);
    });
    $("key-forget").addEventListener("click", () => {
      sessionStorage.removeItem(KEY);
      location.reload();
    });
    $("users-more").addEventListener("click", () => loadUsers(true).catch(fail));
    $("memories-more").addEventListener("click", () => loadMemories(true).catch(fail));
    $("search-form").addEventListener("submit", (event) => {
      event.preventDefault();
      const query = $("search-input").value.trim();
      if (!state.user) return fail(new Error("pick a user first"));
      (query ? searchMemories(query) : loadMemories(false)).catch(fail);
    });
    $("search-clear").addEventListener("click", () => {
      $("search-input").value = "";
      if (state.user) loadMemories(false).catch(fail);
    });
    start(params).catch(fail);
  });
})();
