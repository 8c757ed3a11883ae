// The console's JSON API (/_stow/console/api/), same origin only.
// State-changing calls send the session's CSRF token in X-Stow-CSRF.

/** An API refusal: `code` is the server's machine code (S3's for S3 errors). */
export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

let csrf = "";

/** Remembers the session's CSRF token (from sign-in or `session`). */
export function setCsrf(token) {
  csrf = token || "";
}

/** The URL of an API route with query parameters (relative to the page). */
export function apiUrl(route, params = {}) {
  const query = new URLSearchParams();
  for (const [name, value] of Object.entries(params)) {
    if (value !== undefined && value !== null && value !== "") query.set(name, String(value));
  }
  const q = query.toString();
  return `api/${route}${q ? `?${q}` : ""}`;
}

async function call(method, route, params, body, headers = {}) {
  const init = { method, headers: { ...headers }, credentials: "same-origin", cache: "no-store" };
  if (method !== "GET" && method !== "HEAD") init.headers["X-Stow-CSRF"] = csrf;
  if (body !== undefined) {
    if (body instanceof Blob) {
      init.body = body;
    } else {
      init.body = JSON.stringify(body);
      init.headers["Content-Type"] = "application/json";
    }
  }
  const resp = await fetch(apiUrl(route, params), init);
  let data = null;
  try {
    data = await resp.json();
  } catch {
    data = null;
  }
  if (!resp.ok) {
    const err = (data && data.error) || {};
    throw new ApiError(resp.status, err.code || `http_${resp.status}`, err.message || resp.statusText);
  }
  return data;
}

export const api = {
  session: () => call("GET", "session"),
  signIn: (accessKey, secretKey) => call("POST", "session", {}, { access_key: accessKey, secret_key: secretKey }),
  signOut: () => call("DELETE", "session"),
  buckets: () => call("GET", "buckets"),
  createBucket: (name) => call("POST", "buckets", {}, { name }),
  deleteBucket: (name) => call("DELETE", "bucket", { name }),
  objects: (bucket, prefix, token) => call("GET", "objects", { bucket, prefix, token }),
  deleteObject: (bucket, key) => call("DELETE", "object", { bucket, key }),
  deleteMany: (bucket, keys) => call("POST", "delete", {}, { bucket, keys }),
  downloadUrl: (bucket, key, version) => apiUrl("object", { bucket, key, version }),
  details: (bucket, key, version) => call("GET", "details", { bucket, key, version }),
  preview: (bucket, key) => call("GET", "preview", { bucket, key }),
  imageUrl: (bucket, key) => apiUrl("image", { bucket, key }),
  share: (bucket, key, expires) => call("POST", "share", {}, { bucket, key, expires }),
  usage: (bucket) => call("GET", "usage", { bucket }),
  createMultipart: (bucket, key, contentType) =>
    call("POST", "multipart", {}, { bucket, key, content_type: contentType }),
  completeMultipart: (bucket, key, upload, parts) => call("POST", "complete", {}, { bucket, key, upload, parts }),
  abortMultipart: (bucket, key, upload) => call("DELETE", "multipart", { bucket, key, upload }),
  // Workspace pages (`workspace serve`).
  checkpoints: (cursor) => call("GET", "checkpoints", { cursor }),
  status: (cursor) => call("GET", "status", { cursor }),
  diff: (from, to) => call("GET", "diff", { from, to }),
  fileDiff: (from, to, path) => call("GET", "filediff", { from, to, path }),
  rewindPlan: (to) => call("POST", "rewind", {}, { to, dry_run: true }),
  rewind: (to, requestKey) => call("POST", "rewind", {}, { to, dry_run: false, request_key: requestKey }),
};

/**
 * Aborts a multipart upload from a page that is going away: a `keepalive`
 * request outlives the page (and, unlike a beacon, carries the CSRF token).
 */
export function abortOnExit(bucket, key, upload) {
  fetch(apiUrl("multipart", { bucket, key, upload }), {
    method: "DELETE",
    keepalive: true,
    credentials: "same-origin",
    headers: { "X-Stow-CSRF": csrf },
  }).catch(() => undefined);
}

/** A fresh request key: one per confirmed rewind, so a retry replays it. */
export function requestKey() {
  const bytes = new Uint8Array(16);
  crypto.getRandomValues(bytes);
  return `console-${[...bytes].map((b) => b.toString(16).padStart(2, "0")).join("")}`;
}

/**
 * Uploads one file with a single PUT, reporting progress (0..1) through
 * `onProgress`. XMLHttpRequest, because fetch reports no upload progress.
 * Returns { promise, cancel }.
 */
export function upload(bucket, key, file, onProgress) {
  return put(apiUrl("object", { bucket, key }), file, file.type || "application/octet-stream", (loaded) =>
    onProgress(file.size ? loaded / file.size : 1),
  );
}

/** Sends one part of a multipart upload; `onProgress` gets bytes sent. */
export function uploadPart(bucket, key, upload, number, blob, onProgress) {
  return put(apiUrl("part", { bucket, key, upload, number }), blob, "application/octet-stream", onProgress);
}

function put(url, blob, contentType, onProgress) {
  const xhr = new XMLHttpRequest();
  const promise = new Promise((resolve, reject) => {
    xhr.open("PUT", url);
    xhr.setRequestHeader("X-Stow-CSRF", csrf);
    xhr.setRequestHeader("Content-Type", contentType);
    xhr.upload.onprogress = (e) => {
      if (e.lengthComputable) onProgress(e.loaded);
    };
    xhr.onload = () => {
      let data = null;
      try {
        data = JSON.parse(xhr.responseText);
      } catch {
        data = null;
      }
      if (xhr.status >= 200 && xhr.status < 300) {
        onProgress(blob.size);
        resolve(data);
      } else {
        const err = (data && data.error) || {};
        reject(new ApiError(xhr.status, err.code || `http_${xhr.status}`, err.message || xhr.statusText));
      }
    };
    xhr.onerror = () => reject(new ApiError(0, "network", "the upload failed (network error)"));
    xhr.onabort = () => reject(new ApiError(0, "cancelled", "the upload was cancelled"));
    xhr.send(blob);
  });
  return { promise, cancel: () => xhr.abort() };
}
