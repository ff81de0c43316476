// dsh operator console: the live view (approvals, owners with their terminals and jobs,
// the call feed) and the figures. Plain JS, no build step; xterm.js is vendored.
//
// Every API request carries `X-Dsh-Console: 1` (EventSource cannot send headers: the
// server exempts its SSE GETs). `window.dshConsole` exposes counters for the tests and
// the benchmark (`frames`: screen + output events received over all terminals).
"use strict";

(function () {
  // ------------------------------------------------------------------ login page

  if (document.body && document.body.classList.contains("login-page")) {
    if (new URLSearchParams(location.search).get("failed") === "1") {
      const failed = document.getElementById("login-failed");
      if (failed) failed.hidden = false;
    }
    return;
  }

  // ------------------------------------------------------------------ constants

  const STATE_EVERY_MS = 1000;
  const FIGURES_EVERY_MS = 2000;
  const FEED_MAX_ROWS = 200;
  const JOB_TEXT_MAX = 64 * 1024;
  const APPROVAL_ARGS_MAX = 300;
  const FEED_ARGS_MAX = 80;
  // The most terminals and jobs one watch names (the server's limit).
  const MAX_WATCHED = 64;
  const STREAM_RETRY_MS = 2000;
  const MONO = 'ui-monospace, "SFMono-Regular", "Cascadia Mono", "DejaVu Sans Mono", Menlo, Consolas, "Liberation Mono", monospace';

  const dsh = (window.dshConsole = {
    frames: 0, // screen + output events over all terminals
    states: 0, // state polls answered
    events: 0, // call-feed records received
    streams: 0, // watch streams open (terminals and jobs share one: 0 or 1)
    watches: 0, // watch streams opened so far
    watching: [], // what the open watch names: "term=OWNER/ID", "job=OWNER/ID"
    terminals: new Map(), // "owner\u0000id" -> terminal view
    jobs: new Map(), // "owner\u0000id" -> job view
  });

  // ------------------------------------------------------------------ helpers

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k === "class") node.className = v;
      else if (k === "text") node.textContent = v;
      else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
      else if (k === "dataset") Object.assign(node.dataset, v);
      else node.setAttribute(k, v === true ? "" : String(v));
    }
    for (const c of children) if (c !== null && c !== undefined) node.append(c);
    return node;
  }

  function cut(s, max) {
    s = String(s);
    return s.length > max ? s.slice(0, max - 1) + "…" : s;
  }

  function json(v) {
    try {
      return JSON.stringify(v);
    } catch (_) {
      return String(v);
    }
  }

  function clock(ms) {
    if (typeof ms !== "number") return "";
    const d = new Date(ms);
    const p = (n, w = 2) => String(n).padStart(w, "0");
    return `${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}.${p(d.getMilliseconds(), 3)}`;
  }

  function duration(ms) {
    if (typeof ms !== "number" || !isFinite(ms)) return "";
    if (ms < 1) return `${Math.round(ms * 1000)} µs`;
    if (ms < 1000) return `${ms < 10 ? ms.toFixed(1) : Math.round(ms)} ms`;
    if (ms < 60000) return `${(ms / 1000).toFixed(ms < 10000 ? 2 : 1)} s`;
    const s = Math.round(ms / 1000);
    return `${Math.floor(s / 60)} min ${s % 60} s`;
  }

  function b64bytes(s) {
    const bin = atob(s);
    const out = new Uint8Array(bin.length);
    for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
    return out;
  }

  function q(owner, id) {
    return `owner=${encodeURIComponent(owner)}&id=${encodeURIComponent(id)}`;
  }

  function key(owner, id) {
    return `${owner}\u0000${id}`;
  }

  function toLogin() {
    location.assign("/console/login");
  }

  // fetch with the console header; a 401 means the login is gone.
  async function api(path, init) {
    init = init || {};
    const headers = Object.assign({ "X-Dsh-Console": "1" }, init.headers || {});
    const res = await fetch(path, Object.assign({}, init, { headers, credentials: "same-origin", cache: "no-store" }));
    if (res.status === 401) {
      toLogin();
      throw new Error("logged out");
    }
    return res;
  }

  // The `message` of an error answer ({"code", "message"}), or the status line.
  async function failure(res) {
    let text = "";
    try {
      text = await res.text();
      const body = JSON.parse(text);
      if (body && (body.code || body.message)) return `${body.code || res.status}: ${body.message || ""}`;
    } catch (_) {
      /* not JSON */
    }
    return `HTTP ${res.status}${text ? ": " + cut(text, 200) : ""}`;
  }

  const statusEl = document.getElementById("status");
  function setStatus(text, ok) {
    statusEl.textContent = text;
    statusEl.classList.toggle("ok", !!ok);
    statusEl.classList.toggle("bad", !ok);
  }

  // ------------------------------------------------------------------ tabs

  const views = { live: document.getElementById("view-live"), figures: document.getElementById("view-figures") };
  let currentTab = "live";
  function showTab(name) {
    currentTab = name;
    for (const [n, view] of Object.entries(views)) view.hidden = n !== name;
    for (const b of document.querySelectorAll("#tabs .tab")) {
      const on = b.dataset.tab === name;
      b.classList.toggle("active", on);
      b.setAttribute("aria-selected", on ? "true" : "false");
    }
    if (name === "figures") pollFigures();
  }
  for (const b of document.querySelectorAll("#tabs .tab")) b.addEventListener("click", () => showTab(b.dataset.tab));
  if (location.hash === "#figures") showTab("figures");

  // ------------------------------------------------------------------ the watch (one stream for all)

  // Every terminal and job the page shows streams over ONE EventSource,
  // `/console/api/watch?term=OWNER/ID&job=OWNER/ID@NEXT…` (a browser opens only six
  // HTTP/1.1 connections to a host). When the set of what is shown changes, the watch is
  // closed and opened again naming the new set: jobs resume from the byte count they had
  // (`@next`), terminals get a fresh `screen`. A terminal whose `exit`, a job whose
  // `job-end` or a target whose `gone` was seen is not named again.
  const watch = {
    es: null,
    views: new Map(), // watchKey -> view named by the open watch
    retryAt: 0, // no new watch before this (ms), after a lost one
  };

  function targetsOf(kind) {
    return kind === "term" ? dsh.terminals : dsh.jobs;
  }

  function finished(view) {
    return view.closed || view.done();
  }

  // Opens, keeps or closes the watch so that it names what the page shows and still
  // streams. Called after each state poll and when a lost watch may be retried.
  function syncWatch() {
    const wanted = [];
    for (const v of dsh.terminals.values()) if (!finished(v)) wanted.push(v);
    for (const v of dsh.jobs.values()) if (!finished(v)) wanted.push(v);
    const named = wanted.slice(0, MAX_WATCHED);
    for (const v of wanted.slice(MAX_WATCHED)) {
      v.setStreamNote(`not streamed: a page watches at most ${MAX_WATCHED} terminals and jobs`);
    }
    const keys = new Set(named.map((v) => v.watchKey()));
    if (watch.es) {
      // Unchanged when everything wanted is named, and nothing named that still streams
      // has left the page (a finished target's stream has ended on its own).
      const missing = named.some((v) => !watch.views.has(v.watchKey()));
      const stale = [...watch.views].some(([k, v]) => !keys.has(k) && (v.closed || !v.done()));
      if (!missing && !stale) return;
    }
    closeWatch();
    if (!named.length || Date.now() < watch.retryAt) return;

    const url = "/console/api/watch?" + named.map((v) => v.watchParam()).join("&");
    const es = new EventSource(url);
    watch.es = es;
    watch.views = new Map(named.map((v) => [v.watchKey(), v]));
    dsh.streams = 1;
    dsh.watches++;
    dsh.watching = [...keys];
    for (const v of named) v.setStreamNote("");

    const on = (type, handle) =>
      es.addEventListener(type, (ev) => {
        if (watch.es !== es) return;
        let data;
        try {
          data = JSON.parse(ev.data);
        } catch (_) {
          return;
        }
        if (!data || typeof data.owner !== "string" || typeof data.id !== "string") return;
        handle(data);
      });
    const terminal = (f) => (data) => {
      const view = dsh.terminals.get(key(data.owner, data.id));
      if (view && !view.closed) f(view, data);
    };
    const job = (f) => (data) => {
      const view = dsh.jobs.get(key(data.owner, data.id));
      if (view && !view.closed) f(view, data);
    };
    on("screen", terminal((v, d) => v.onScreen(d)));
    on("output", terminal((v, d) => v.onOutput(d)));
    on("held", terminal((v, d) => v.setHeld(d.held_by ?? null, true)));
    on("exit", terminal((v, d) => v.onExit(d)));
    on("job-output", job((v, d) => v.onOutput(d)));
    on("job-end", job((v, d) => v.onEnd(d)));
    on("gone", (d) => {
      const view = targetsOf(d.kind).get(key(d.owner, d.id));
      if (view && !view.closed) view.onGone(d);
    });
    es.addEventListener("open", () => {
      if (watch.es !== es) return;
      for (const v of watch.views.values()) if (!finished(v)) v.setStreamNote("");
    });
    es.addEventListener("error", () => {
      // A dropped watch is not left to EventSource's own retry (it would ask again for
      // the job output it has from the cursors of the first request): open a new one,
      // naming the current cursors, after a pause.
      if (watch.es !== es) return;
      const views = [...watch.views.values()];
      closeWatch();
      watch.retryAt = Date.now() + STREAM_RETRY_MS;
      for (const v of views) if (!finished(v)) v.setStreamNote("stream lost; reconnecting");
      setTimeout(syncWatch, STREAM_RETRY_MS);
    });
  }

  function closeWatch() {
    if (watch.es) watch.es.close();
    watch.es = null;
    watch.views = new Map();
    dsh.streams = 0;
    dsh.watching = [];
  }

  // ------------------------------------------------------------------ owners

  const ownersEl = document.getElementById("owners");
  const owners = new Map(); // owner -> {section, terminals, jobs}

  function ownerSection(owner) {
    let o = owners.get(owner);
    if (o) return o;
    const terminals = el("div", { class: "terminals" });
    const jobs = el("div", { class: "jobs" });
    const counts = el("span", { class: "sub counts" });
    const section = el(
      "section",
      { class: "owner", dataset: { owner } },
      el("h3", {}, el("span", { class: "owner-name", text: owner }), " ", counts),
      el("div", { class: "owner-body" }, terminals, jobs)
    );
    o = { section, terminals, jobs, counts };
    owners.set(owner, o);
    ownersEl.append(section);
    return o;
  }

  // ------------------------------------------------------------------ terminals

  class TerminalView {
    constructor(owner, info) {
      this.owner = owner;
      this.id = info.id;
      this.closed = false;
      this.gotExit = false; // the watch said it exited: not named again
      this.gone = false; // the watch said there is no such terminal
      this.info = info;
      this.heldBy = info.held_by || null;
      this.heldAt = 0; // when held_by last came from the stream or a button (ms)
      this.exited = !info.alive;
      this.pending = ""; // typed, not yet sent
      this.sending = false;

      this.heldEl = el("span", { class: "held" });
      this.metaEl = el("span", { class: "meta" });
      this.stateEl = el("span", { class: "tstate" });
      this.noteEl = el("span", { class: "stream-note" });
      this.errorEl = el("span", { class: "error" });
      this.takeBtn = el("button", { class: "take", type: "button", text: "Take over", onclick: () => this.take() });
      this.releaseBtn = el("button", { class: "release", type: "button", text: "Release", onclick: () => this.release() });
      this.host = el("div", { class: "xterm-host" });
      this.root = el(
        "div",
        { class: "terminal", dataset: { owner, id: info.id } },
        el(
          "div",
          { class: "bar" },
          el("span", { class: "tid", text: info.id }),
          this.stateEl,
          this.metaEl,
          this.heldEl,
          el("span", { class: "spacer" }),
          this.noteEl,
          this.errorEl,
          this.takeBtn,
          this.releaseBtn
        ),
        this.host
      );
      ownerSection(owner).terminals.append(this.root);

      this.term = new window.Terminal({
        cols: Math.max(2, info.cols || 80),
        rows: Math.max(1, info.rows || 24),
        fontFamily: MONO,
        fontSize: 13,
        lineHeight: 1.0,
        scrollback: 2000,
        cursorBlink: false,
        allowProposedApi: false,
        theme: { background: "#0d1117", foreground: "#d6dde6", cursor: "#e6edf3" },
      });
      this.term.open(this.host);
      this.term.onData((data) => this.typed(data));
      this.update(info, 0);
      // Watched (the next syncWatch names it), an exited one too: its last screen, then `exit`.
    }

    watchKey() {
      return `term=${this.owner}/${this.id}`;
    }

    watchParam() {
      return `term=${encodeURIComponent(`${this.owner}/${this.id}`)}`;
    }

    // Nothing more will come for it.
    done() {
      return this.gotExit || this.gone;
    }

    setStreamNote(text) {
      this.noteEl.textContent = text;
    }

    onScreen(ev) {
      dsh.frames++;
      this.term.reset();
      this.term.write(b64bytes(ev.data || ""));
    }

    onOutput(ev) {
      dsh.frames++;
      this.term.write(b64bytes(ev.data || ""));
    }

    onExit(ev) {
      this.info = Object.assign({}, this.info, { alive: false, exit_code: ev.exit_code ?? null });
      this.exited = true;
      this.gotExit = true;
      this.render();
    }

    onGone(ev) {
      this.gone = true;
      this.exited = true;
      this.info = Object.assign({}, this.info, { alive: false });
      this.setStreamNote(`gone: ${ev.message || ev.code || "no such terminal"}`);
      this.render();
    }

    // From a state poll started at `polledAt` (ms).
    update(info, polledAt) {
      const resized = info.cols !== this.term.cols || info.rows !== this.term.rows;
      if (resized && info.cols > 0 && info.rows > 0) this.term.resize(info.cols, info.rows);
      // A terminal the watch said is gone is not live, whatever an older poll says.
      if (this.gone) info = Object.assign({}, info, { alive: false });
      this.info = info;
      // The watch names it until its `exit` event: that carries the last output.
      if (!info.alive) this.exited = true;
      // A poll that started before the stream (or a button) said who holds it is older news.
      if (polledAt >= this.heldAt) this.heldBy = info.held_by || null;
      this.render();
    }

    setHeld(heldBy, authoritative) {
      this.heldBy = heldBy || null;
      if (authoritative) this.heldAt = Date.now();
      this.render();
    }

    render() {
      const i = this.info;
      this.metaEl.textContent = `${i.shell || "shell"} in ${i.cwd || "?"}, ${i.cols}x${i.rows}`;
      this.stateEl.textContent = i.alive ? "live" : this.gone && !this.gotExit && i.exit_code == null ? "gone" : `exited${i.exit_code !== null && i.exit_code !== undefined ? ` (code ${i.exit_code})` : ""}`;
      this.stateEl.classList.toggle("dead", !i.alive);
      const held = this.heldBy;
      this.heldEl.textContent = held ? `held by ${held}` : "";
      this.heldEl.hidden = !held;
      this.root.dataset.heldBy = held || "";
      this.root.classList.toggle("held-by-console", held === "console");
      this.root.classList.toggle("held-by-other", !!held && held !== "console");
      this.root.classList.toggle("exited", !i.alive);
      this.takeBtn.disabled = !i.alive || held === "console";
      this.releaseBtn.disabled = held !== "console";
      this.term.options.disableStdin = held !== "console";
      this.term.options.cursorBlink = held === "console";
    }

    async take() {
      await this.post("take", () => {
        this.setHeld("console", true);
        this.term.focus();
      });
    }

    async release() {
      await this.post("release", () => this.setHeld(null, true));
    }

    async post(what, done) {
      this.errorEl.textContent = "";
      try {
        const res = await api(`/console/api/terminal/${what}?${q(this.owner, this.id)}`, { method: "POST" });
        if (!res.ok) {
          this.errorEl.textContent = await failure(res);
          return;
        }
        done();
      } catch (e) {
        this.errorEl.textContent = String(e.message || e);
      }
    }

    // Keystrokes go out in order, one request at a time; what is typed meanwhile is
    // sent in the next one.
    typed(data) {
      if (this.heldBy !== "console" || this.exited) return;
      this.pending += data;
      if (!this.sending) this.flush();
    }

    async flush() {
      this.sending = true;
      try {
        while (this.pending && !this.closed) {
          const body = this.pending;
          this.pending = "";
          try {
            const res = await api(`/console/api/terminal/input?${q(this.owner, this.id)}`, {
              method: "POST",
              headers: { "Content-Type": "text/plain; charset=utf-8" },
              body,
            });
            if (!res.ok) {
              this.errorEl.textContent = await failure(res);
              if (res.status === 409 || res.status === 404) this.pending = ""; // not held any more: drop
            } else {
              this.errorEl.textContent = "";
            }
          } catch (e) {
            this.errorEl.textContent = String(e.message || e);
            this.pending = "";
          }
        }
      } finally {
        this.sending = false;
      }
    }

    remove() {
      this.closed = true;
      this.term.dispose();
      this.root.remove();
    }
  }

  // ------------------------------------------------------------------ jobs

  class JobView {
    constructor(owner, info) {
      this.owner = owner;
      this.id = info.id;
      this.closed = false;
      this.ended = info.state !== "running";
      this.gotEnd = false; // the watch said it ended: not named again
      this.gone = false; // the watch said there is no such job
      this.next = 0; // bytes of output received: the watch resumes from here
      this.info = info;
      this.text = "";

      this.stateEl = el("span", { class: "jstate" });
      this.descEl = el("span", { class: "desc" });
      this.runtimeEl = el("span", { class: "runtime" });
      this.noteEl = el("span", { class: "stream-note" });
      this.cmdEl = el("code", { class: "command" });
      this.pre = el("pre", { class: "output" });
      this.root = el(
        "div",
        { class: "job", dataset: { owner, id: info.id } },
        el(
          "div",
          { class: "bar" },
          el("span", { class: "jid", text: info.id }),
          el("span", { class: "kind", text: info.kind || "" }),
          this.stateEl,
          this.descEl,
          el("span", { class: "spacer" }),
          this.noteEl,
          this.runtimeEl
        ),
        el("div", { class: "cmdline" }, this.cmdEl),
        this.pre
      );
      ownerSection(owner).jobs.append(this.root);
      this.update(info);
      // Watched (the next syncWatch names it), an ended one too: its output, then `job-end`.
    }

    watchKey() {
      return `job=${this.owner}/${this.id}`;
    }

    // Always with the cursor (`@0` at first), so an id holding an `@` reads right.
    watchParam() {
      return `job=${encodeURIComponent(`${this.owner}/${this.id}@${this.next}`)}`;
    }

    // Nothing more will come for it.
    done() {
      return this.gotEnd || this.gone;
    }

    setStreamNote(text) {
      this.noteEl.textContent = text;
    }

    onOutput(ev) {
      if (typeof ev.next === "number" && ev.next >= this.next) this.next = ev.next;
      const chunk = ev.text;
      if (chunk !== undefined && chunk !== null) this.append(typeof chunk === "string" ? chunk : json(chunk));
    }

    // `state` ("exited", "killed", "failed") and `detail` (the state with its fields, e.g.
    // {"Exited": {"code": 0}}).
    onEnd(ev) {
      let fields = ev.detail;
      if (fields && typeof fields === "object" && !("code" in fields || "signal" in fields || "reason" in fields)) {
        fields = Object.values(fields)[0];
      }
      fields = fields && typeof fields === "object" ? fields : {};
      const end = { state: ev.state || this.info.state };
      if (typeof fields.code === "number") end.exit_code = fields.code;
      if (typeof fields.signal === "number") end.signal = fields.signal;
      if (typeof fields.reason === "string") end.reason = fields.reason;
      this.info = Object.assign({}, this.info, end);
      this.gotEnd = true;
      this.ended = true;
      this.render();
    }

    onGone(ev) {
      this.gone = true;
      this.setStreamNote(`gone: ${ev.message || ev.code || "no such job"}`);
      this.render();
    }

    append(chunk) {
      const pre = this.pre;
      const atBottom = pre.scrollHeight - pre.scrollTop - pre.clientHeight < 4;
      this.text += chunk;
      if (this.text.length > JOB_TEXT_MAX) this.text = this.text.slice(this.text.length - JOB_TEXT_MAX);
      pre.textContent = this.text;
      if (atBottom) pre.scrollTop = pre.scrollHeight;
    }

    update(info) {
      // The watch's `job-end` is newer than a poll that still says running; the poll
      // does not carry the exit code, the signal or the reason.
      if (this.gotEnd) {
        const { state, exit_code, signal, reason } = this.info;
        info = Object.assign({}, info, { exit_code, signal, reason });
        if (info.state === "running") info.state = state;
      }
      this.info = info;
      this.render();
    }

    render() {
      const i = this.info;
      const code =
        i.exit_code !== undefined && i.exit_code !== null
          ? ` (code ${i.exit_code})`
          : i.signal !== undefined && i.signal !== null
            ? ` (signal ${i.signal})`
            : "";
      const state = this.gone && !this.gotEnd ? "gone" : i.state || "?";
      this.stateEl.textContent = `${state}${code}`;
      this.stateEl.title = i.reason || "";
      this.stateEl.className = `jstate ${state === "running" ? "running" : "ended"}`;
      this.root.dataset.state = state === "?" ? "" : state;
      this.descEl.textContent = i.description || "";
      this.cmdEl.textContent = i.command || "";
      this.runtimeEl.textContent = duration(i.runtime_ms);
    }

    remove() {
      this.closed = true;
      this.root.remove();
    }
  }

  // ------------------------------------------------------------------ approvals

  const approvalsEl = document.getElementById("approvals");
  const approvalsCount = document.getElementById("approvals-count");
  const approvals = new Map(); // id -> element

  function approvalCard(a) {
    const note = el("input", { class: "note", type: "text", placeholder: "note (optional)", "aria-label": "note" });
    const error = el("span", { class: "error" });
    const card = el("div", { class: "approval", dataset: { id: a.id, owner: a.owner || "", callId: a.call_id || "" } });
    const decide = async (decision) => {
      error.textContent = "";
      for (const b of card.querySelectorAll("button")) b.disabled = true;
      try {
        const res = await api(`/console/api/approvals/${encodeURIComponent(a.id)}`, {
          method: "POST",
          headers: { "Content-Type": "application/json" },
          body: JSON.stringify({ decision, note: note.value }),
        });
        if (res.ok) {
          card.classList.add("decided");
          approvals.delete(a.id);
          card.remove();
          renderApprovalsEmpty();
          return;
        }
        error.textContent = await failure(res);
      } catch (e) {
        error.textContent = String(e.message || e);
      }
      for (const b of card.querySelectorAll("button")) b.disabled = false;
    };
    const args = cut(json(a.args), APPROVAL_ARGS_MAX);
    card.append(
      el(
        "div",
        { class: "head" },
        el("span", { class: "tool", text: a.tool || "?" }),
        el("span", { class: "owner-name", text: a.owner || "" }),
        el("span", { class: "call-id", text: a.call_id || "" }),
        el("span", { class: "guard", text: a.guard ? `asked by ${a.guard}` : "" }),
        el("span", { class: "asked", text: a.asked_at_ms ? `since ${clock(a.asked_at_ms)}` : "" })
      ),
      el("div", { class: "reason", text: a.reason || "" }),
      el("pre", { class: "args", text: args }),
      el(
        "div",
        { class: "actions" },
        note,
        el("button", { class: "approve", type: "button", text: "Approve", onclick: () => decide("approve") }),
        el("button", { class: "deny", type: "button", text: "Deny", onclick: () => decide("deny") }),
        error
      )
    );
    return card;
  }

  function renderApprovalsEmpty() {
    approvalsCount.textContent = String(approvals.size);
    approvalsCount.classList.toggle("hot", approvals.size > 0);
    let empty = approvalsEl.querySelector(".empty");
    if (approvals.size === 0 && !empty) approvalsEl.append(el("p", { class: "empty", text: "No call is waiting for an approval." }));
    if (approvals.size > 0 && empty) empty.remove();
  }

  function renderApprovals(list) {
    const seen = new Set();
    for (const a of list || []) {
      seen.add(a.id);
      if (!approvals.has(a.id)) {
        const card = approvalCard(a);
        approvals.set(a.id, card);
        approvalsEl.append(card);
      }
    }
    for (const [id, card] of approvals) {
      if (!seen.has(id)) {
        approvals.delete(id);
        card.remove();
      }
    }
    renderApprovalsEmpty();
  }

  // ------------------------------------------------------------------ state poll

  function renderState(state, polledAt) {
    renderApprovals(state.approvals);
    const seenOwners = new Set();
    const seenTerms = new Set();
    const seenJobs = new Set();
    for (const o of state.owners || []) {
      seenOwners.add(o.owner);
      const section = ownerSection(o.owner);
      section.counts.textContent = `${(o.terminals || []).length} terminals, ${(o.jobs || []).length} jobs`;
      for (const t of o.terminals || []) {
        const k = key(o.owner, t.id);
        seenTerms.add(k);
        const view = dsh.terminals.get(k);
        if (view) view.update(t, polledAt);
        else dsh.terminals.set(k, new TerminalView(o.owner, t));
      }
      for (const j of o.jobs || []) {
        const k = key(o.owner, j.id);
        seenJobs.add(k);
        const view = dsh.jobs.get(k);
        if (view) view.update(j);
        else dsh.jobs.set(k, new JobView(o.owner, j));
      }
    }
    for (const [k, v] of dsh.terminals) if (!seenTerms.has(k)) (v.remove(), dsh.terminals.delete(k));
    for (const [k, v] of dsh.jobs) if (!seenJobs.has(k)) (v.remove(), dsh.jobs.delete(k));
    syncWatch();
    for (const [owner, o] of owners) {
      if (!seenOwners.has(owner)) {
        o.section.remove();
        owners.delete(owner);
      }
    }
    const empty = ownersEl.querySelector(":scope > .empty");
    if (owners.size === 0 && !empty) ownersEl.append(el("p", { class: "empty", text: "No agent is connected." }));
    if (owners.size > 0 && empty) empty.remove();
  }

  async function pollState() {
    const polledAt = Date.now();
    try {
      const res = await api("/console/api/state");
      if (!res.ok) throw new Error(await failure(res));
      const state = await res.json();
      renderState(state, polledAt);
      dsh.states++;
      setStatus("live", true);
    } catch (e) {
      setStatus(`no state: ${e.message || e}`, false);
    }
    setTimeout(pollState, STATE_EVERY_MS);
  }

  // ------------------------------------------------------------------ call feed

  const feedEl = document.getElementById("feed");
  const byCall = new Map(); // call_id -> rows of that call id, newest first

  // The row of the call a record is about: same call id, and the same session and owner
  // where the record names them (approval records may name neither).
  function findRow(ev) {
    for (const row of byCall.get(ev.call_id) || []) {
      if (ev.session && row.dataset.session && row.dataset.session !== ev.session) continue;
      if (ev.owner && row.dataset.owner && row.dataset.owner !== ev.owner) continue;
      return row;
    }
    return null;
  }

  function newRow(ev) {
    const row = el(
      "tr",
      { class: "call pending", dataset: { callId: ev.call_id, owner: ev.owner || "", session: ev.session || "" } },
      el("td", { class: "time" }),
      el("td", { class: "owner" }),
      el("td", { class: "tool" }),
      el("td", { class: "args" }),
      el("td", { class: "decision" }),
      el("td", { class: "duration" }),
      el("td", { class: "code" })
    );
    const list = byCall.get(ev.call_id) || [];
    list.unshift(row);
    byCall.set(ev.call_id, list);
    feedEl.prepend(row);
    while (feedEl.children.length > FEED_MAX_ROWS) {
      const last = feedEl.lastElementChild;
      const same = byCall.get(last.dataset.callId) || [];
      const i = same.indexOf(last);
      if (i >= 0) same.splice(i, 1);
      if (!same.length) byCall.delete(last.dataset.callId);
      last.remove();
    }
    return row;
  }

  function feedRow(ev) {
    return findRow(ev) || newRow(ev);
  }

  function cell(row, cls, text, title) {
    const td = row.querySelector(`td.${cls}`);
    td.textContent = text;
    if (title !== undefined) td.title = title;
    return td;
  }

  function onRecord(ev) {
    dsh.events++;
    if (!ev || !ev.call_id) return;
    if (ev.event === "tool/call") {
      // A call id seen again with a new call (another session's, or a replay of this one).
      let row = findRow(ev);
      if (row && row.dataset.ts && row.dataset.ts !== String(ev.ts_ms)) row = null;
      row = row || newRow(ev);
      row.dataset.ts = String(ev.ts_ms);
      if (ev.owner) row.dataset.owner = ev.owner;
      if (ev.session) row.dataset.session = ev.session;
      cell(row, "time", clock(ev.ts_ms));
      cell(row, "owner", ev.owner || "");
      cell(row, "tool", ev.tool || "");
      const args = json(ev.args ?? {});
      cell(row, "args", cut(args, FEED_ARGS_MAX), cut(args, 2000));
    } else if (ev.event === "tool/result") {
      const row = feedRow(ev);
      if (!row.querySelector("td.time").textContent) {
        cell(row, "time", clock(ev.ts_ms));
        cell(row, "owner", ev.owner || "");
        cell(row, "tool", ev.tool || "");
      }
      cell(row, "duration", typeof ev.duration_us === "number" ? duration(ev.duration_us / 1000) : "");
      const ok = !ev.is_error && (ev.code === null || ev.code === undefined);
      const code = ok ? "ok" : ev.code || "error";
      cell(row, "code", code).className = `code ${ok ? "ok" : "err"}`;
      row.classList.remove("pending");
      row.classList.toggle("failed", !ok);
    } else if (ev.event === "approval") {
      const row = feedRow(ev);
      const how = [ev.decision, ev.channel ? `(${ev.channel})` : ""].filter(Boolean).join(" ");
      const td = cell(row, "decision", how, ev.note ? `note: ${ev.note}` : "");
      td.className = `decision ${/^approved/.test(ev.decision || "") ? "approved" : "denied"}`;
    }
  }

  function openFeed() {
    const es = new EventSource("/console/api/events");
    es.addEventListener("message", (m) => {
      let ev;
      try {
        ev = JSON.parse(m.data);
      } catch (_) {
        return;
      }
      onRecord(ev);
    });
    es.addEventListener("error", () => {
      if (es.readyState === EventSource.CLOSED) {
        es.close();
        setTimeout(openFeed, STREAM_RETRY_MS);
      }
    });
  }

  // ------------------------------------------------------------------ figures

  let figuresBusy = false;
  let lastSamples = [];

  async function pollFigures() {
    if (currentTab !== "figures" || figuresBusy) return;
    figuresBusy = true;
    try {
      const res = await api("/console/api/figures");
      if (!res.ok) throw new Error(await failure(res));
      const body = await res.json();
      lastSamples = body.samples || [];
      drawFigures(lastSamples);
    } catch (e) {
      setStatus(`no figures: ${e.message || e}`, false);
    } finally {
      figuresBusy = false;
    }
  }

  // Per-second series from the cumulative samples: [{t, v}] with v null where undefined.
  function series(samples) {
    const calls = [];
    const latency = [];
    const jobs = [];
    for (let i = 0; i < samples.length; i++) {
      const s = samples[i];
      jobs.push({ t: s.t_ms, v: s.jobs_running });
      if (i === 0) continue;
      const p = samples[i - 1];
      const dt = (s.t_ms - p.t_ms) / 1000;
      const dCalls = s.calls_total - p.calls_total;
      calls.push({ t: s.t_ms, v: dt > 0 && dCalls >= 0 ? dCalls / dt : null });
      const dCount = s.duration_count - p.duration_count;
      const dSum = s.duration_sum_s - p.duration_sum_s;
      latency.push({ t: s.t_ms, v: dCount > 0 ? (dSum / dCount) * 1000 : null });
    }
    return { calls, latency, jobs };
  }

  function drawFigures(samples) {
    const { calls, latency, jobs } = series(samples);
    const last = samples[samples.length - 1];
    const set = (name, text) => {
      const td = document.querySelector(`#figures-now [data-figure="${name}"]`);
      if (td) td.textContent = text;
    };
    if (last) {
      set("calls_total", String(last.calls_total));
      set("errors_total", String(last.errors_total));
      set("mean_latency", last.duration_count > 0 ? duration((last.duration_sum_s / last.duration_count) * 1000) : "–");
      set("jobs_running", String(last.jobs_running));
      set("terminals_live", String(last.terminals_live));
      const back = samples[Math.max(0, samples.length - 11)];
      const dt = (last.t_ms - back.t_ms) / 1000;
      set("rate", dt > 0 ? ((last.calls_total - back.calls_total) / dt).toFixed(2) : "–");
    }
    const now = last ? last.t_ms : Date.now();
    plot(document.getElementById("plot-calls"), calls, now, { color: "#58a6ff" });
    plot(document.getElementById("plot-latency"), latency, now, { color: "#d29922" });
    plot(document.getElementById("plot-jobs"), jobs, now, { color: "#3fb950", integer: true, step: true });
  }

  // A round step for about four gridlines up to `v` (whole numbers for counts).
  function niceStep(v, integer) {
    const raw = v > 0 ? v / 4 : 0.25;
    const p = Math.pow(10, Math.floor(Math.log10(raw)));
    let step = 10 * p;
    for (const m of [1, 2, 2.5, 5]) {
      if (raw <= m * p) {
        step = m * p;
        break;
      }
    }
    return integer ? Math.max(1, Math.ceil(step)) : step;
  }

  function label(v) {
    return String(Math.round(v * 100) / 100);
  }

  // A line plot of the last 300 s, drawn by hand.
  function plot(canvas, points, now, opts) {
    const dpr = window.devicePixelRatio || 1;
    const w = canvas.clientWidth || 400;
    const h = canvas.clientHeight || 160;
    if (canvas.width !== Math.round(w * dpr) || canvas.height !== Math.round(h * dpr)) {
      canvas.width = Math.round(w * dpr);
      canvas.height = Math.round(h * dpr);
    }
    const g = canvas.getContext("2d");
    g.setTransform(dpr, 0, 0, dpr, 0, 0);
    g.clearRect(0, 0, w, h);
    const left = 44;
    const right = 8;
    const top = 8;
    const bottom = 20;
    const pw = w - left - right;
    const ph = h - top - bottom;
    const span = 300 * 1000;
    const top_ = Math.max(0, ...points.map((p) => (p.v === null || p.v === undefined ? 0 : p.v)));
    const step = niceStep(top_, opts.integer);
    const max = Math.max(step, Math.ceil(top_ / step - 1e-9) * step);
    const x = (t) => left + pw * (1 - (now - t) / span);
    const y = (v) => top + ph * (1 - v / max);

    g.font = `11px ${getComputedStyle(document.body).fontFamily}`;
    g.fillStyle = "#8b949e";
    g.strokeStyle = "#30363d";
    g.lineWidth = 1;
    g.textBaseline = "middle";
    g.textAlign = "right";
    for (let v = 0; v <= max + step / 2; v += step) {
      const yy = Math.round(y(v)) + 0.5;
      g.beginPath();
      g.moveTo(left, yy);
      g.lineTo(left + pw, yy);
      g.stroke();
      g.fillText(label(v), left - 6, yy);
    }
    g.textBaseline = "top";
    for (const s of [300, 240, 180, 120, 60, 0]) {
      g.textAlign = s === 0 ? "right" : s === 300 ? "left" : "center";
      g.fillText(s === 0 ? "now" : `-${s}s`, x(now - s * 1000), top + ph + 5);
    }

    g.save();
    g.beginPath();
    g.rect(left, top, pw, ph);
    g.clip();
    g.strokeStyle = opts.color;
    g.lineWidth = 1.5;
    g.beginPath();
    let pen = false;
    let prevY = 0;
    for (const p of points) {
      if (p.v === null || p.v === undefined) {
        pen = false;
        continue;
      }
      const xx = x(p.t);
      const yy = y(p.v);
      if (!pen) g.moveTo(xx, yy);
      else {
        if (opts.step) g.lineTo(xx, prevY);
        g.lineTo(xx, yy);
      }
      pen = true;
      prevY = yy;
    }
    g.stroke();
    g.restore();
    if (!points.some((p) => p.v !== null && p.v !== undefined)) {
      g.fillStyle = "#8b949e";
      g.textAlign = "center";
      g.textBaseline = "middle";
      g.fillText("no data yet", left + pw / 2, top + ph / 2);
    }
  }

  window.addEventListener("resize", () => {
    if (currentTab === "figures") drawFigures(lastSamples);
  });

  // ------------------------------------------------------------------ start

  if (typeof window.Terminal !== "function") {
    setStatus("xterm.js did not load", false);
  }
  openFeed();
  pollState();
  setInterval(pollFigures, FIGURES_EVERY_MS);
})();
