// Uploads: by the file picker and by drag and drop, one progress bar and
// one Cancel per file. Files up to one part go as one PUT; larger ones as
// a multipart upload (8 MiB parts, a few at a time), aborted on cancel.
// The server's request-body limit (`--max-request-bytes`) bounds both: a
// smaller limit means smaller parts, down to S3's 5 MiB minimum.

import { api, upload, uploadPart, abortOnExit, ApiError } from "./api.js";

/** Size of a multipart part (and the size above which a file goes multipart). */
export const PART_BYTES = 8 * 1024 * 1024;
/** S3's smallest part (all but the last). */
const MIN_PART_BYTES = 5 * 1024 * 1024;
const MAX_PARTS = 10000;
const PARALLEL_PARTS = 3;

/** Multipart uploads under way ({ bucket, key, upload }), aborted if the page goes. */
const inProgress = new Set();

window.addEventListener("pagehide", () => {
  for (const u of inProgress) abortOnExit(u.bucket, u.key, u.upload);
  inProgress.clear();
});

function cancelledError() {
  return new ApiError(0, "cancelled", "the upload was cancelled");
}

/**
 * The part size for a file: 8 MiB, or more so that it fits 10,000 parts,
 * but no more than the server takes in one request (`limit`); null when
 * no part size fits both.
 */
export function partSize(size, limit) {
  const wanted = Math.max(PART_BYTES, Math.ceil(size / MAX_PARTS));
  const part = Math.min(wanted, limit);
  return part >= MIN_PART_BYTES && part * MAX_PARTS >= size ? part : null;
}

function tooLargeError(size, limit) {
  return new ApiError(413, "too_large", `the file (${size} bytes) cannot be sent in parts of at most ${limit} bytes`);
}

/**
 * Uploads `file` as a multipart upload, reporting progress (0..1).
 * Returns { promise, cancel }; cancel (or any failure) aborts the upload
 * on the server.
 */
export function multipartUpload(bucket, key, file, onProgress) {
  let stopped = false;
  let uploadId = null;
  const inFlight = new Set();
  const sent = new Map();
  const report = () => {
    let total = 0;
    for (const n of sent.values()) total += n;
    onProgress(file.size ? total / file.size : 1);
  };
  const stop = () => {
    stopped = true;
    for (const job of inFlight) job.cancel();
  };
  let cancelled = false;
  let entry = null;
  const promise = (async () => {
    try {
      const created = await api.createMultipart(bucket, key, file.type || "application/octet-stream");
      uploadId = created.upload;
      entry = { bucket, key, upload: uploadId };
      inProgress.add(entry);
      if (stopped) throw cancelledError();
      const size = partSize(file.size, created.max_part_bytes);
      if (size === null) throw tooLargeError(file.size, created.max_part_bytes);
      const count = Math.max(1, Math.ceil(file.size / size));
      const parts = [];
      let next = 1;
      const worker = async () => {
        while (next <= count && !stopped) {
          const n = next;
          next += 1;
          const blob = file.slice((n - 1) * size, Math.min(n * size, file.size));
          const job = uploadPart(bucket, key, uploadId, n, blob, (loaded) => {
            sent.set(n, loaded);
            report();
          });
          inFlight.add(job);
          try {
            const done = await job.promise;
            parts[n - 1] = { number: n, etag: done.etag };
          } catch (err) {
            stop();
            throw err;
          } finally {
            inFlight.delete(job);
          }
        }
      };
      await Promise.all(Array.from({ length: Math.min(PARALLEL_PARTS, count) }, worker));
      if (stopped) throw cancelledError();
      const done = await api.completeMultipart(bucket, key, uploadId, parts);
      onProgress(1);
      return done;
    } catch (err) {
      stop();
      if (uploadId) await api.abortMultipart(bucket, key, uploadId).catch(() => undefined);
      throw cancelled ? cancelledError() : err;
    } finally {
      inProgress.delete(entry);
    }
  })();
  return {
    promise,
    cancel: () => {
      cancelled = true;
      stop();
    },
  };
}

/**
 * Wires the Upload button, the file input and the drop zone. `ctx` has
 * the page's helpers; `ctx.where()` is { bucket, prefix, readOnly } and
 * `ctx.done(bucket, prefix)` refreshes the listing after a batch.
 */
export function mountUploads(ctx) {
  const { $, el, say, showError, clearError } = ctx;
  const drop = $("drop");

  async function uploadAll(files) {
    const { bucket, prefix, readOnly } = ctx.where();
    if (!bucket || readOnly || files.length === 0) return;
    clearError();
    const queue = files.map((file) => {
      const key = prefix + file.name;
      const bar = el("progress", { max: "1", value: "0", "aria-label": `Upload progress of ${file.name}` });
      const note = el("span", { class: "muted" }, "queued");
      const item = { file, key, bar, note, job: null, cancelled: false };
      const cancel = el("button", {
        type: "button",
        text: "Cancel",
        "aria-label": `Cancel upload of ${file.name}`,
        onclick: () => {
          item.cancelled = true;
          if (item.job) item.job.cancel();
        },
      });
      item.cancel = cancel;
      item.row = el("li", {}, el("span", { class: "name" }, file.name), bar, note, cancel);
      $("uploads").append(item.row);
      return item;
    });
    for (const item of queue) {
      if (item.cancelled) {
        finish(item, "cancelled");
        continue;
      }
      const multipart = item.file.size > Math.min(PART_BYTES, ctx.maxUploadBytes());
      item.note.textContent = multipart ? "uploading in parts" : "uploading";
      const progress = (fraction) => {
        item.bar.value = fraction;
      };
      item.job = multipart
        ? multipartUpload(bucket, item.key, item.file, progress)
        : upload(bucket, item.key, item.file, progress);
      try {
        await item.job.promise;
        say(`Uploaded ${item.key}.`);
        item.row.remove();
      } catch (err) {
        finish(item, err.code === "cancelled" ? "cancelled" : "failed");
        if (err.code !== "cancelled") showError(err);
      }
    }
    ctx.done(bucket, prefix);
  }

  /** Marks a row cancelled or failed; its Cancel becomes Dismiss. */
  function finish(item, word) {
    item.note.textContent = word;
    item.cancel.replaceWith(
      el("button", {
        type: "button",
        text: "Dismiss",
        "aria-label": `Dismiss ${item.file.name}`,
        onclick: () => item.row.remove(),
      }),
    );
  }

  $("upload").addEventListener("click", () => $("upload-input").click());
  $("upload-input").addEventListener("change", (e) => {
    const files = [...e.target.files];
    e.target.value = "";
    uploadAll(files);
  });

  const hasFiles = (e) => e.dataTransfer && [...e.dataTransfer.types].includes("Files");
  drop.addEventListener("dragenter", (e) => {
    if (!hasFiles(e)) return;
    e.preventDefault();
    drop.classList.add("over");
  });
  drop.addEventListener("dragover", (e) => {
    if (!hasFiles(e)) return;
    e.preventDefault();
    e.dataTransfer.dropEffect = "copy";
  });
  drop.addEventListener("dragleave", () => drop.classList.remove("over"));
  drop.addEventListener("drop", (e) => {
    e.preventDefault();
    drop.classList.remove("over");
    if (!e.dataTransfer) return;
    // A dropped folder arrives as an unreadable "file": leave it out.
    const items = [...e.dataTransfer.items].filter((i) => i.kind === "file");
    const folders = items.filter((i) => i.webkitGetAsEntry && i.webkitGetAsEntry()?.isDirectory).length;
    const files = items
      .filter((i) => !(i.webkitGetAsEntry && i.webkitGetAsEntry()?.isDirectory))
      .map((i) => i.getAsFile())
      .filter((f) => f !== null);
    if (folders > 0) say(`${folders} folder${folders === 1 ? "" : "s"} left out: drop the files inside instead.`);
    uploadAll(files);
  });
  return { uploadAll };
}
