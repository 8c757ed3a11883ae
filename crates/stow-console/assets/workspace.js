// stow-s3 console: a workspace's checkpoints (`workspace serve` only) —
// the timeline, status, diffs, and rewind with its plan first and undo after.
// Every string from the server reaches the page as text (textContent, Text
// nodes, attribute values), never as markup.

import { api, requestKey } from "./api.js";

/** Mounts the Checkpoints page; `ui` holds app.js's helpers. Returns { show }. */
export function mountWorkspace(ui) {
  const { $, el, formatSize, formatTime, say, showError, clearError, attempt } = ui;
  const ws = {
    cursors: [""], // cursor of each timeline page seen, the current one last
    next: null,
    statusCursor: null,
    plan: null, // { to, label, key } once a dry run is shown
    undo: null, // the undo checkpoint of the last rewind
    diffTo: null, // the "to" side of the diff shown ("live": the live tree)
  };

  const short = (id) => (id || "").replace(/^cp_/, "").slice(0, 12);
  const label = (c) => `${short(c.checkpoint_id)} ${c.message || "(no message)"}`;

  /** The size column of a change: one size, or "before → after". */
  function sizeOf(change) {
    const from = change.from ? change.from.size : null;
    const to = change.to ? change.to.size : null;
    if (from !== null && to !== null && from !== to) return `${formatSize(from)} → ${formatSize(to)}`;
    return formatSize(to !== null ? to : from);
  }

  /** What changed in a changed file besides its size: mode, content. */
  function detailOf(change) {
    if (!change.from || !change.to) return "";
    const parts = [];
    if (change.from.mode !== change.to.mode) {
      parts.push(`mode ${change.from.mode.toString(8)} → ${change.to.mode.toString(8)}`);
    }
    if (change.from.sha256 !== change.to.sha256) parts.push("content");
    return parts.length ? ` (${parts.join(", ")})` : "";
  }

  /**
   * Table rows for files and links that changed; with `between`
   * ({ from, to }) each file offers its text diff.
   */
  function changeRows(changes, links, between) {
    const rows = (changes || []).map((c) =>
      el(
        "tr",
        {},
        el("td", { class: `kind-${c.kind}` }, c.kind.replace("_", " ")),
        el("td", { class: "name" }, c.path),
        el("td", {}, sizeOf(c) + detailOf(c)),
        between
          ? el(
              "td",
              { class: "actions" },
              el("button", {
                type: "button",
                "aria-label": `Text diff of ${c.path}`,
                text: "Text diff",
                onclick: () => fileDiff(between.from, between.to, c.path),
              }),
            )
          : "",
      ),
    );
    for (const l of links || []) {
      rows.push(el("tr", {}, el("td", { class: `kind-${l.kind}` }, l.kind), el("td", { class: "name" }, l.path), el("td", {}, "link")));
    }
    return rows;
  }

  // ---- timeline ----

  async function show() {
    document.title = "Checkpoints · stow-s3";
    $("ws-id").textContent = ui.workspace();
    const data = await attempt(() => api.checkpoints(ws.cursors[ws.cursors.length - 1]));
    if (!data) return;
    const rows = data.checkpoints.map((c) =>
      el(
        "tr",
        {},
        el(
          "td",
          { class: "name" },
          c.message || "(no message)",
          el("span", { class: "muted" }, ` ${short(c.checkpoint_id)}`),
          c.head ? el("span", { class: "head-mark", title: "the checkpoint the tree last matched" }, "head") : "",
        ),
        el("td", {}, c.origin),
        el("td", {}, formatTime(c.created)),
        el("td", {}, String(c.files)),
        el("td", {}, formatSize(c.bytes)),
        el(
          "td",
          { class: "actions" },
          el("button", {
            type: "button",
            "aria-label": `Rewind to ${label(c)}`,
            text: "Rewind to here",
            onclick: () => plan(c.checkpoint_id, label(c)),
          }),
        ),
      ),
    );
    $("ws-rows").replaceChildren(...rows);
    $("ws-none").hidden = rows.length > 0;
    ws.next = data.next_cursor || null;
    $("ws-older").hidden = !ws.next;
    $("ws-newest").hidden = ws.cursors.length < 2;
    fillDiffChoices(data.checkpoints);
  }

  /** The diff form's choices: the live tree and the page's checkpoints. */
  function fillDiffChoices(checkpoints) {
    const options = (selected) =>
      checkpoints.map((c) => el("option", { value: c.checkpoint_id, selected: c.checkpoint_id === selected }, label(c)));
    const head = (checkpoints.find((c) => c.head) || checkpoints[0] || {}).checkpoint_id;
    $("ws-diff-from").replaceChildren(...options(head));
    $("ws-diff-to").replaceChildren(el("option", { value: "live", selected: true }, "Live tree"), ...options(null));
  }

  $("ws-older").addEventListener("click", () => {
    if (!ws.next) return;
    ws.cursors.push(ws.next);
    show();
  });
  $("ws-newest").addEventListener("click", () => {
    ws.cursors = [""];
    show();
  });
  $("ws-refresh").addEventListener("click", () => {
    clearError();
    show();
  });

  // ---- status ----

  async function status(more) {
    clearError();
    const data = await attempt(() => api.status(more ? ws.statusCursor : ""));
    if (!data) return;
    $("ws-status").hidden = false;
    $("ws-status-summary").textContent = data.clean
      ? `The live tree matches the head ${short(data.checkpoint_id)}.`
      : `Against the head ${short(data.checkpoint_id)}: ${data.added} added, ${data.changed} changed, ${data.deleted} deleted.`;
    const rows = changeRows(data.changes, data.links, { from: data.checkpoint_id, to: "live" });
    if (more) $("ws-status-rows").append(...rows);
    else $("ws-status-rows").replaceChildren(...rows);
    ws.statusCursor = data.next_cursor || null;
    $("ws-status-more").hidden = !ws.statusCursor;
  }

  $("ws-status-button").addEventListener("click", () => status(false));
  $("ws-status-more").addEventListener("click", () => status(true));

  // ---- diff ----

  $("ws-diff-form").addEventListener("submit", async (e) => {
    e.preventDefault();
    clearError();
    const from = $("ws-diff-from").value;
    const to = $("ws-diff-to").value;
    if (!from) return;
    const data = await attempt(() => api.diff(from, to));
    if (!data) return;
    const changes = data.changes || [];
    // A status (the live side) tells modified, mode and type changes
    // apart; the summary counts them all as changed, as a diff does.
    const broad = (kind) => (kind === "added" || kind === "deleted" ? kind : "changed");
    const count = (kind) => changes.filter((c) => broad(c.kind) === kind).length;
    const toName = to === "live" ? "the live tree" : short(to);
    ws.diffTo = to;
    $("ws-diff").hidden = false;
    $("ws-diff-summary").textContent =
      `${short(from)} → ${toName}: ${count("added")} added, ${count("changed")} changed, ${count("deleted")} deleted` +
      (data.next_cursor ? " (first page)." : ".");
    // Portable checkpoints: the private store's buckets and objects too.
    const stored = [
      ...(data.buckets || []).map((b) => el("tr", {}, el("td", { class: `kind-${b.kind}` }, b.kind), el("td", { class: "name" }, `bucket ${b.bucket}`), el("td", {}), el("td", {}))),
      ...(data.objects || []).map((o) =>
        el("tr", {}, el("td", { class: `kind-${o.kind}` }, o.kind), el("td", { class: "name" }, `object ${o.bucket}/${o.key}`), el("td", {}, sizeOf(o)), el("td", {})),
      ),
    ];
    $("ws-diff-rows").replaceChildren(...changeRows(changes, data.links, { from, to }), ...stored);
  });

  /** One file's line diff, or why it is not shown as text. */
  async function fileDiff(from, to, path) {
    clearError();
    const data = await attempt(() => api.fileDiff(from, to, path));
    if (!data) return;
    $("ws-file").hidden = false;
    $("ws-file-path").textContent = path;
    const toName = to === "live" ? "the live tree" : short(to);
    const sizes = `${formatSize(data.from_size) || "absent"} → ${formatSize(data.to_size) || "absent"}`;
    if (!data.text) {
      const why = data.reason === "binary" ? "not text" : "too large for a text view";
      $("ws-file-summary").textContent = `${short(from)} → ${toName}: ${sizes}; ${why}.`;
      $("ws-file-lines").replaceChildren();
    } else {
      $("ws-file-summary").textContent = `${short(from)} → ${toName}: ${sizes}.`;
      const cls = { "+": "add", "-": "del", "…": "fold", " ": "same" };
      $("ws-file-lines").replaceChildren(
        ...data.lines.map((l) =>
          el("span", { class: cls[l.op] || "same" }, l.op === "…" ? `… ${l.text} unchanged lines\n` : `${l.op} ${l.text}\n`),
        ),
      );
    }
    $("ws-file").scrollIntoView({ block: "nearest" });
  }

  // ---- rewind: the plan first, then the rewind, then undo ----

  function rewindButtons({ go, undo }) {
    $("ws-rewind-go").hidden = !go;
    $("ws-rewind-cancel").hidden = !go;
    $("ws-undo").hidden = !undo;
  }

  async function plan(to, name) {
    clearError();
    ws.plan = null;
    const data = await attempt(() => api.rewindPlan(to));
    if (!data) return;
    // One key per confirmation: a repeated click replays the same rewind.
    ws.plan = { to, name, key: requestKey() };
    $("ws-rewind").hidden = false;
    $("ws-rewind-summary").textContent =
      `Plan (nothing has changed yet): rewind to ${name} writes ${data.written}, deletes ${data.deleted}, ` +
      `leaves ${data.unchanged} unchanged. The live tree against that checkpoint:`;
    $("ws-rewind-table").hidden = false;
    $("ws-rewind-rows").replaceChildren(...changeRows(data.changes, data.links));
    rewindButtons({ go: true, undo: false });
    $("ws-rewind").scrollIntoView({ block: "nearest" });
    $("ws-rewind-go").focus();
  }

  /** Rewinds to `to` with `key` and shows what was done. */
  async function perform(to, name, key) {
    clearError();
    rewindButtons({ go: false, undo: false });
    const data = await attempt(() => api.rewind(to, key));
    if (!data) {
      if (ws.plan) rewindButtons({ go: true, undo: false });
      return;
    }
    ws.plan = null;
    ws.undo = data.undo_checkpoint_id || null;
    const conflicts = data.conflicts || [];
    $("ws-rewind-summary").textContent =
      `Rewound to ${name}: ${data.written} written, ${data.deleted} deleted, ${conflicts.length} conflicts` +
      (data.replayed ? " (replayed)." : ".") +
      (ws.undo ? ` Undo rewinds to ${short(ws.undo)}.` : "");
    $("ws-rewind-table").hidden = conflicts.length === 0;
    $("ws-rewind-rows").replaceChildren(
      ...conflicts.map((c) => el("tr", {}, el("td", { class: "kind-changed" }, "conflict"), el("td", { class: "name" }, c.path), el("td", {}, c.reason))),
    );
    if (data.error) showError(data.error);
    rewindButtons({ go: false, undo: Boolean(ws.undo) });
    say(`Rewound to ${name}.`);
    // What the status and a diff against the live tree said is stale now
    // (a diff between two checkpoints still holds).
    $("ws-status").hidden = true;
    $("ws-status-summary").textContent = "";
    $("ws-status-rows").replaceChildren();
    if (ws.diffTo === "live") {
      $("ws-diff").hidden = true;
      $("ws-diff-summary").textContent = "";
      $("ws-diff-rows").replaceChildren();
    }
    $("ws-file").hidden = true;
    show();
  }

  $("ws-rewind-go").addEventListener("click", () => {
    if (ws.plan) perform(ws.plan.to, ws.plan.name, ws.plan.key);
  });
  $("ws-rewind-cancel").addEventListener("click", () => {
    ws.plan = null;
    $("ws-rewind").hidden = true;
  });
  $("ws-undo").addEventListener("click", () => {
    if (ws.undo) perform(ws.undo, `the undo checkpoint ${short(ws.undo)}`, requestKey());
  });

  return { show };
}
