// stow-s3 console: sign-in, buckets and objects.
// Every name from the server reaches the page as text (textContent, Text
// nodes, attribute values), never as markup.

import { api, setCsrf } from "./api.js";
import { mountObjects } from "./objects.js";
import { mountUploads } from "./uploads.js";
import { mountWorkspace } from "./workspace.js";

const $ = (id) => document.getElementById(id);

const state = {
  session: null, // { access_key, read_only, ... }
  bucket: "",
  prefix: "",
  tokens: [""], // continuation token of each page seen, the current one last
  next: null,
  filter: "", // the prefix filter, under the folder's prefix
};

/** Creates an element. Strings among `children` become Text nodes. */
function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(props)) {
    if (name === "class") node.className = value;
    else if (name === "text") node.textContent = value;
    else if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else if (value === true) node.setAttribute(name, "");
    else if (value !== false && value !== null && value !== undefined) node.setAttribute(name, String(value));
  }
  node.append(...children);
  return node;
}

function formatSize(n) {
  if (n === null || n === undefined) return "";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  let v = n;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i += 1;
  }
  return i === 0 ? `${n} B` : `${v.toFixed(1)} ${units[i]}`;
}

// One formatter for every time shown: `toLocaleString` builds a new one
// per call, which costs a second or more over a page of 1,000 rows.
const timeFormat = new Intl.DateTimeFormat(undefined, { dateStyle: "short", timeStyle: "medium" });

function formatTime(iso) {
  if (!iso) return "";
  const d = new Date(iso);
  return Number.isNaN(d.getTime()) ? iso : timeFormat.format(d);
}

function say(text) {
  $("status").textContent = text;
}

function showError(err) {
  const box = $("error");
  box.textContent = err.code ? `${err.code}: ${err.message}` : String(err.message || err);
  box.hidden = false;
}

function clearError() {
  $("error").hidden = true;
  $("error").textContent = "";
}

/** Runs an action; a lost session goes back to sign-in, other errors are shown. */
async function attempt(action) {
  try {
    return await action();
  } catch (err) {
    if (err.status === 401) {
      // Several calls may be refused at once; the first signs out.
      if (state.session) signedOut("Your session has ended; sign in again.");
    } else {
      showError(err);
    }
    return undefined;
  }
}

function showOnly(id) {
  for (const section of ["sign-in", "buckets", "objects", "checkpoints"]) $(section).hidden = section !== id;
}

function confirmDelete(text) {
  const dialog = $("confirm");
  $("confirm-text").textContent = text;
  dialog.returnValue = "";
  return new Promise((resolve) => {
    dialog.addEventListener("close", () => resolve(dialog.returnValue === "ok"), { once: true });
    dialog.showModal();
    $("confirm-ok").focus();
  });
}

// ---- session ----

function signedIn(session) {
  state.session = session;
  setCsrf(session.csrf);
  $("who").textContent = `${session.access_key}${session.read_only ? " (read-only)" : ""}`;
  $("sign-out").hidden = false;
  for (const node of document.querySelectorAll("#create-bucket-form, #upload, #drop, #delete-selected")) {
    node.hidden = session.read_only;
  }
  $("select-all").hidden = session.read_only;
  $("ws-nav").hidden = !session.workspace;
  route();
}

function signedOut(message) {
  state.session = null;
  setCsrf("");
  $("who").textContent = "";
  $("sign-out").hidden = true;
  $("ws-nav").hidden = true;
  showOnly("sign-in");
  say("");
  if (message) showError({ message });
  $("sign-in-form").elements.access_key.focus();
}

$("sign-in-form").addEventListener("submit", async (e) => {
  e.preventDefault();
  clearError();
  const form = e.target;
  try {
    const session = await api.signIn(form.elements.access_key.value, form.elements.secret_key.value);
    form.elements.secret_key.value = "";
    signedIn(session);
  } catch (err) {
    showError(err);
  }
});

$("sign-out").addEventListener("click", async () => {
  await attempt(() => api.signOut());
  signedOut("");
  say("Signed out.");
});

// ---- routing: #b=<bucket>&p=<prefix> ----

function link(bucket, prefix) {
  if (!bucket) return "#/";
  const params = new URLSearchParams({ b: bucket });
  if (prefix) params.set("p", prefix);
  return `#${params.toString()}`;
}

function route() {
  if (!state.session) return;
  clearError();
  say("");
  if (location.hash === "#ws" && state.session.workspace) {
    showOnly("checkpoints");
    workspacePages.show();
    return;
  }
  const params = new URLSearchParams(location.hash.replace(/^#\/?/, ""));
  const bucket = params.get("b") || "";
  const prefix = params.get("p") || "";
  if (bucket) {
    const moved = bucket !== state.bucket || prefix !== state.prefix;
    if (moved) {
      state.tokens = [""];
      state.filter = "";
      $("filter").value = "";
      objectPages.resetSelection();
      objectPages.closeDetails();
    }
    const otherBucket = bucket !== state.bucket;
    state.bucket = bucket;
    state.prefix = prefix;
    showObjects();
    if (otherBucket) objectPages.loadUsage();
  } else {
    state.bucket = "";
    showBuckets();
  }
}

window.addEventListener("hashchange", route);

// ---- buckets ----

async function showBuckets() {
  showOnly("buckets");
  document.title = "Buckets · stow-s3";
  const data = await attempt(() => api.buckets());
  if (!data) return;
  const rows = data.buckets.map((b) =>
    el(
      "tr",
      {},
      el("td", { class: "name" }, el("a", { href: link(b.name, "") }, b.name)),
      el("td", {}, formatTime(b.created)),
      el(
        "td",
        { class: "actions" },
        el("button", {
          type: "button",
          class: "danger",
          hidden: state.session.read_only,
          "aria-label": `Delete bucket ${b.name}`,
          text: "Delete",
          onclick: () => deleteBucket(b.name),
        }),
      ),
    ),
  );
  $("bucket-rows").replaceChildren(...rows);
  $("no-buckets").hidden = rows.length > 0;
}

$("create-bucket-form").addEventListener("submit", async (e) => {
  e.preventDefault();
  clearError();
  const input = e.target.elements.name;
  const name = input.value.trim();
  const done = await attempt(() => api.createBucket(name));
  if (done) {
    input.value = "";
    say(`Created bucket ${name}.`);
    showBuckets();
  }
});

async function deleteBucket(name) {
  clearError();
  if (!(await confirmDelete(`Delete the bucket "${name}"? Only an empty bucket can be deleted.`))) return;
  const done = await attempt(() => api.deleteBucket(name));
  if (done) {
    say(`Deleted bucket ${name}.`);
    showBuckets();
  }
}

// ---- objects ----

function crumbs() {
  const parts = [el("a", { href: "#/" }, "Buckets"), el("span", { class: "sep", "aria-hidden": "true" }, "/")];
  parts.push(el("a", { href: link(state.bucket, "") }, state.bucket));
  let at = "";
  for (const segment of state.prefix.split("/").filter((s) => s !== "")) {
    at += `${segment}/`;
    parts.push(el("span", { class: "sep", "aria-hidden": "true" }, "/"));
    parts.push(el("a", { href: link(state.bucket, at) }, segment));
  }
  $("crumbs").replaceChildren(...parts);
}

async function showObjects() {
  showOnly("objects");
  document.title = `${state.bucket} · stow-s3`;
  $("bucket-name").textContent = state.bucket;
  crumbs();
  const token = state.tokens[state.tokens.length - 1];
  const listed = state.prefix + state.filter;
  const data = await attempt(() => api.objects(state.bucket, listed, token));
  if (!data) {
    $("object-rows").replaceChildren();
    return;
  }
  if (data.prefix !== state.prefix + state.filter) return; // a newer filter is on its way
  const readOnly = state.session.read_only;
  const folders = data.folders.map((folder) =>
    el(
      "tr",
      { role: "row" },
      el("td", { role: "cell", class: "pick" }),
      el(
        "td",
        { role: "cell", class: "name" },
        el("a", { href: link(state.bucket, folder) }, folder.slice(state.prefix.length)),
      ),
      el("td", { role: "cell" }, "folder"),
      el("td", { role: "cell" }),
      el("td", { role: "cell" }),
    ),
  );
  // One insertion of every row: cloned rows cost little to build, and a
  // single layout of the fixed-layout table is cheaper than one per frame.
  const rows = data.objects.map((o) => objectRowFor(o, readOnly));
  $("object-rows").replaceChildren(...folders, ...rows);
  objectPages.updateSelection();
  $("no-objects").hidden = folders.length + data.objects.length > 0;
  state.next = data.next;
  $("next-page").hidden = !data.next;
  $("prev-page").hidden = state.tokens.length < 2;
}

/**
 * An object's row: Select, Name, Size, Modified, and Details / Download /
 * Delete. Rows are clones of one built row (a page holds up to 1,000), and
 * their controls are served by the listeners on `#object-rows` below, so a
 * row carries its key in `data-key` and no listener of its own. The key
 * reaches the row only as text and attribute values, never as markup.
 */
function objectRowFor(o, readOnly) {
  const row = OBJECT_ROW.cloneNode(true);
  row.dataset.key = o.key;
  const [pick, name, size, modified, actions] = row.cells;
  const box = pick.firstChild;
  if (readOnly) box.remove();
  else {
    box.setAttribute("aria-label", `Select ${o.key}`);
    box.checked = objectPages.isSelected(o.key);
  }
  name.textContent = o.key.slice(state.prefix.length);
  size.textContent = formatSize(o.size);
  modified.textContent = formatTime(o.last_modified);
  const [details, download, remove] = actions.children;
  details.setAttribute("aria-label", `Details ${o.key}`);
  download.setAttribute("href", api.downloadUrl(state.bucket, o.key));
  download.setAttribute("aria-label", `Download ${o.key}`);
  remove.setAttribute("aria-label", `Delete ${o.key}`);
  remove.hidden = readOnly;
  return row;
}

/**
 * The row every object's row is cloned from. Roles are explicit: the
 * stylesheet lays the object table out as a grid (app.css), and the
 * roles keep it a table to assistive technology.
 */
const OBJECT_ROW = el(
  "tr",
  { role: "row" },
  el("td", { role: "cell", class: "pick" }, el("input", { type: "checkbox" })),
  el("td", { role: "cell", class: "name" }),
  el("td", { role: "cell" }),
  el("td", { role: "cell" }),
  el(
    "td",
    { role: "cell", class: "actions" },
    el("button", { type: "button", "data-act": "details", text: "Details" }),
    el("a", { class: "button", download: "", text: "Download" }),
    el("button", { type: "button", class: "danger", "data-act": "delete", text: "Delete" }),
  ),
);

$("object-rows").addEventListener("click", (e) => {
  const button = e.target.closest("button[data-act]");
  const key = button && button.closest("tr").dataset.key;
  if (key === undefined) return;
  if (button.dataset.act === "details") objectPages.openDetails(key);
  else deleteObject(key);
});

async function deleteObject(key) {
  clearError();
  if (!(await confirmDelete(`Delete "${key}" from ${state.bucket}? This cannot be undone.`))) return;
  const done = await attempt(() => api.deleteObject(state.bucket, key));
  if (done) {
    say(`Deleted ${key}.`);
    objectPages.closeDetails();
    refreshObjects();
  }
}

/** Reloads the listing and the usage figures after a change. */
function refreshObjects() {
  showObjects();
  objectPages.loadUsage();
}

let filterTimer = 0;
$("filter").addEventListener("input", () => {
  clearTimeout(filterTimer);
  filterTimer = setTimeout(() => {
    state.filter = $("filter").value;
    state.tokens = [""];
    objectPages.resetSelection();
    showObjects();
  }, 200);
});

$("filter-form").addEventListener("submit", (e) => {
  e.preventDefault();
  clearTimeout(filterTimer);
  state.filter = $("filter").value;
  state.tokens = [""];
  objectPages.resetSelection();
  showObjects();
});

$("next-page").addEventListener("click", () => {
  if (!state.next) return;
  state.tokens.push(state.next);
  objectPages.resetSelection();
  showObjects();
});

$("prev-page").addEventListener("click", () => {
  if (state.tokens.length > 1) state.tokens.pop();
  objectPages.resetSelection();
  showObjects();
});

$("refresh").addEventListener("click", () => refreshObjects());

const objectPages = mountObjects({
  $,
  el,
  formatSize,
  formatTime,
  say,
  showError,
  clearError,
  attempt,
  confirmDelete,
  where: () => ({ bucket: state.bucket, prefix: state.prefix, readOnly: !state.session || state.session.read_only }),
  refresh: () => refreshObjects(),
});

mountUploads({
  $,
  el,
  say,
  showError,
  clearError,
  where: () => ({ bucket: state.bucket, prefix: state.prefix, readOnly: !state.session || state.session.read_only }),
  maxUploadBytes: () => (state.session ? state.session.max_upload_bytes : Infinity),
  done: (bucket, prefix) => {
    if (state.bucket === bucket && state.prefix === prefix) refreshObjects();
  },
});

// ---- workspace pages (workspace serve) ----

const workspacePages = mountWorkspace({
  $,
  el,
  formatSize,
  formatTime,
  say,
  showError,
  clearError,
  attempt,
  workspace: () => (state.session && state.session.workspace) || "",
});

// ---- start ----

api
  .session()
  .then(signedIn)
  .catch(() => signedOut(""));
