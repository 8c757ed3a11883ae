// The object list's extras: selection and Delete selected, the details
// panel (fields, versions, share link, preview), and usage figures.
// Every name and every previewed byte reaches the page as text
// (textContent, Text nodes, attribute values), never as markup; images
// are loaded from the console's `image` route, which serves only PNG,
// JPEG, GIF and WebP typed by their own bytes.

import { api } from "./api.js";

/**
 * Wires the object list's extras. `ctx` has the page's helpers and
 * `ctx.where()` → { bucket, prefix, readOnly }; `ctx.refresh()` reloads
 * the listing.
 */
export function mountObjects(ctx) {
  const { $, el, formatSize, formatTime, say, showError, clearError, attempt, confirmDelete } = ctx;
  const selected = new Set();
  let shown = { bucket: "", key: "" };

  // ---- selection and Delete selected ----

  function updateSelection() {
    const n = selected.size;
    $("delete-selected").disabled = n === 0;
    $("selected-count").textContent = n ? `${n} selected` : "";
    const boxes = [...document.querySelectorAll("#object-rows input[type=checkbox]")];
    $("select-all").checked = boxes.length > 0 && boxes.every((b) => b.checked);
  }

  /** Whether the object at `key` is selected (its row's box is checked). */
  function isSelected(key) {
    return selected.has(key);
  }

  /** Ticks or clears one row's box and the selection with it. */
  function pick(box, on) {
    box.checked = on;
    const key = box.closest("tr").dataset.key;
    if (on) selected.add(key);
    else selected.delete(key);
  }

  // The rows' boxes, served here for every row (rows have no listeners).
  $("object-rows").addEventListener("change", (e) => {
    if (!e.target.matches("input[type=checkbox]")) return;
    pick(e.target, e.target.checked);
    updateSelection();
  });

  /** Forgets the selection (a new folder, page or bucket). */
  function resetSelection() {
    selected.clear();
    updateSelection();
  }

  $("select-all").addEventListener("change", (e) => {
    const want = e.target.checked;
    for (const box of document.querySelectorAll("#object-rows input[type=checkbox]")) pick(box, want);
    updateSelection();
  });

  $("delete-selected").addEventListener("click", async () => {
    clearError();
    const { bucket } = ctx.where();
    const keys = [...selected];
    if (keys.length === 0) return;
    const named = keys.length <= 5 ? keys.map((k) => `"${k}"`).join(", ") : `${keys.length} objects`;
    if (!(await confirmDelete(`Delete ${named} from ${bucket}? This cannot be undone.`))) return;
    const done = await attempt(() => api.deleteMany(bucket, keys));
    if (!done) return;
    resetSelection();
    if (done.errors.length > 0) {
      const first = done.errors[0];
      showError({
        code: first.code,
        message: `${done.errors.length} not deleted: ${done.errors.map((e) => `${e.key}: ${e.code} ${e.message || ""}`).join("; ")}`,
      });
    }
    say(`Deleted ${done.deleted.length} object${done.deleted.length === 1 ? "" : "s"}.`);
    if (keys.includes(shown.key)) closeDetails();
    ctx.refresh();
  });

  // ---- the details panel ----

  function field(list, name, value) {
    list.push(el("dt", {}, name), el("dd", {}, value === null || value === undefined || value === "" ? "—" : String(value)));
  }

  async function openDetails(key) {
    clearError();
    const { bucket } = ctx.where();
    const data = await attempt(() => api.details(bucket, key));
    if (!data) return;
    shown = { bucket, key };
    $("details-key").textContent = key;
    const list = [];
    field(list, "Size", `${formatSize(data.size)} (${data.size} bytes)`);
    field(list, "ETag", data.etag);
    field(list, "Content type", data.content_type);
    field(list, "Modified", formatTime(data.last_modified));
    field(list, "Version ID", data.version_id || (data.versioning ? "null" : "— (versioning off)"));
    for (const [name, value] of Object.entries(data.checksums)) field(list, `Checksum ${name}`, value);
    if (data.checksum_type) field(list, "Checksum type", data.checksum_type);
    const meta = Object.entries(data.metadata);
    if (meta.length === 0) field(list, "Metadata", "none");
    for (const [name, value] of meta) field(list, `Metadata ${name}`, value);
    if (data.tags.length === 0) field(list, "Tags", "none");
    for (const t of data.tags) field(list, `Tag ${t.key}`, t.value);
    $("details-fields").replaceChildren(...list);
    showVersions(data.versions);
    $("share-out").hidden = true;
    $("share-url").value = "";
    $("share-form").hidden = false;
    $("details").hidden = false;
    $("details-title").focus();
    loadPreview(bucket, key);
  }

  function showVersions(versions) {
    $("versions").hidden = !versions;
    if (!versions) return;
    $("version-rows").replaceChildren(
      ...versions.map((v) =>
        el(
          "tr",
          {},
          el(
            "td",
            { class: "name" },
            v.version_id || "null",
            v.latest ? el("span", { class: "head-mark" }, "latest") : "",
            v.delete_marker ? el("span", { class: "muted" }, " (delete marker)") : "",
          ),
          el("td", {}, v.delete_marker ? "" : formatSize(v.size)),
          el("td", {}, formatTime(v.last_modified)),
          el(
            "td",
            { class: "actions" },
            v.delete_marker || !v.version_id
              ? ""
              : el("a", {
                  class: "button",
                  href: api.downloadUrl(shown.bucket, shown.key, v.version_id),
                  download: "",
                  "aria-label": `Download version ${v.version_id}`,
                  text: "Download",
                }),
          ),
        ),
      ),
    );
  }

  function closeDetails() {
    $("details").hidden = true;
    $("preview").replaceChildren();
    shown = { bucket: "", key: "" };
  }

  async function loadPreview(bucket, key) {
    const box = $("preview");
    box.replaceChildren(el("p", { class: "muted" }, "Loading the preview…"));
    const data = await attempt(() => api.preview(bucket, key));
    if (!data || shown.key !== key || shown.bucket !== bucket) return;
    if (data.kind === "text") {
      const note = data.truncated ? `The first 64 KiB of ${formatSize(data.size)}.` : "";
      box.replaceChildren(
        el("pre", { class: "preview-text", tabindex: "0", "aria-label": `Text preview of ${key}` }, data.text),
        note ? el("p", { class: "muted" }, note) : "",
      );
    } else if (data.kind === "image") {
      const size = el("p", { class: "muted" });
      const img = el("img", { src: api.imageUrl(bucket, key), alt: `Preview of ${key}`, class: "preview-image" });
      img.addEventListener("load", () => {
        size.textContent = `${data.type}, ${img.naturalWidth} × ${img.naturalHeight} px`;
      });
      box.replaceChildren(img, size);
    } else {
      box.replaceChildren(el("p", { class: "muted" }, `No preview: ${data.reason}.`));
    }
  }

  /** Closes the panel and gives the focus back to the row's Details. */
  function closeAndReturn() {
    const key = shown.key;
    closeDetails();
    const again = [...document.querySelectorAll("#object-rows button")].find(
      (b) => b.getAttribute("aria-label") === `Details ${key}`,
    );
    if (again) again.focus();
  }

  $("details-close").addEventListener("click", closeAndReturn);
  $("details").addEventListener("keydown", (e) => {
    if (e.key === "Escape") closeAndReturn();
  });

  // ---- share links ----

  $("share-form").addEventListener("submit", async (e) => {
    e.preventDefault();
    clearError();
    const expires = Number($("share-expiry").value);
    const data = await attempt(() => api.share(shown.bucket, shown.key, expires));
    if (!data) return;
    $("share-url").value = data.url;
    $("share-until").textContent = `Works until ${new Date(data.expires_at * 1000).toLocaleString()}.`;
    $("share-out").hidden = false;
    $("share-url").focus();
    $("share-url").select();
  });

  $("share-copy").addEventListener("click", async () => {
    try {
      await navigator.clipboard.writeText($("share-url").value);
      say("Link copied.");
    } catch {
      $("share-url").select();
      say("Select the link and copy it.");
    }
  });

  // ---- usage ----

  async function loadUsage() {
    const { bucket } = ctx.where();
    $("usage").textContent = "";
    const data = await attempt(() => api.usage(bucket));
    if (!data || ctx.where().bucket !== bucket) return;
    const b = data.bucket;
    const s = data.store;
    const of = (v, limit, fmt) => (limit === null || limit === undefined ? fmt(v) : `${fmt(v)} of ${fmt(limit)}`);
    const quota = s.max_objects === null && s.max_bytes === null ? " (no quota)" : "";
    $("usage").textContent =
      `This bucket: ${b.complete ? "" : "at least "}${b.objects} object${b.objects === 1 ? "" : "s"}, ${formatSize(b.bytes)}. ` +
      `Store: ${of(s.objects, s.max_objects, String)} objects, ${of(s.bytes, s.max_bytes, formatSize)}${quota}.`;
  }

  return { isSelected, resetSelection, updateSelection, openDetails, closeDetails, loadUsage };
}
