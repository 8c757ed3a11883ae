// The S3 calls the package makes itself: CreateBucket for a session's
// bucket and the admin reset (POST /_stow/reset), signed with SigV4
// (node:crypto; the package has no runtime dependencies). Internal: used by
// ./index.ts.
import { createHash, createHmac } from "node:crypto";
import { request } from "node:http";

/** An S3 request of the package failed: `code` is S3's error code (`BucketAlreadyExists`, …) or `network`. */
export class StowS3Error extends Error {
  readonly code: string;
  /** The HTTP status (0 when no response came). */
  readonly status: number;
  constructor(message: string, code: string, status: number, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "StowS3Error";
    this.code = code;
    this.status = status;
  }
}

export interface SignedTarget {
  endpoint: string;
  region: string;
  accessKeyId: string;
  secretAccessKey: string;
}

const sha256 = (data: string) => createHash("sha256").update(data).digest("hex");
const hmac = (key: Buffer | string, data: string) => createHmac("sha256", key).update(data).digest();

/** RFC 3986 encoding of a path segment, as SigV4 wants it. */
function encodeSegment(s: string): string {
  return encodeURIComponent(s).replace(/[!'()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`);
}

/** The status and body text of a signed request. */
interface SignedResponse {
  status: number;
  body: string;
}

/** `method path` with no body, signed with SigV4 (path-style); resolves with any HTTP answer, rejects with `network`. */
function signedRequest(
  target: SignedTarget,
  method: string,
  path: string,
  what: string,
  opts: { timeoutMs: number; signal?: AbortSignal | undefined },
): Promise<SignedResponse> {
  const url = new URL(target.endpoint);
  const amzDate = new Date().toISOString().replace(/[-:]/g, "").replace(/\.\d{3}/, "");
  const day = amzDate.slice(0, 8);
  const payload = sha256("");
  const headers: Record<string, string> = {
    host: url.host,
    "x-amz-content-sha256": payload,
    "x-amz-date": amzDate,
  };
  const signed = Object.keys(headers).sort();
  // Method, path, query, headers (each line ends in a newline), signed header names, payload hash.
  const canonicalHeaders = signed.map((h) => `${h}:${headers[h]}\n`).join("");
  const canonical = [method, path, "", canonicalHeaders, signed.join(";"), payload].join("\n");
  const scope = `${day}/${target.region}/s3/aws4_request`;
  const toSign = ["AWS4-HMAC-SHA256", amzDate, scope, sha256(canonical)].join("\n");
  let key = hmac(`AWS4${target.secretAccessKey}`, day);
  for (const part of [target.region, "s3", "aws4_request"]) key = hmac(key, part);
  const signature = createHmac("sha256", key).update(toSign).digest("hex");
  headers.authorization =
    `AWS4-HMAC-SHA256 Credential=${target.accessKeyId}/${scope}, SignedHeaders=${signed.join(";")}, Signature=${signature}`;
  headers["content-length"] = "0";

  return new Promise((resolve, reject) => {
    const req = request(
      { method, hostname: url.hostname, port: url.port, path, headers, timeout: opts.timeoutMs, signal: opts.signal },
      (res) => {
        const chunks: Buffer[] = [];
        res.on("data", (c: Buffer) => chunks.push(c));
        res.on("error", reject);
        res.on("end", () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString("utf8") }));
      },
    );
    req.on("timeout", () => req.destroy(new Error(`${what} timed out after ${opts.timeoutMs} ms`)));
    req.on("error", (err) => {
      reject(err instanceof StowS3Error ? err : new StowS3Error(`${what}: ${err.message}`, "network", 0, { cause: err }));
    });
    req.end();
  });
}

/** The error of a refused request: S3's code and message from its XML body. */
function refusal(what: string, res: SignedResponse): StowS3Error {
  const code = /<Code>([^<]*)<\/Code>/.exec(res.body)?.[1] ?? `http_${res.status}`;
  const message = /<Message>([^<]*)<\/Message>/.exec(res.body)?.[1];
  return new StowS3Error(`${what} failed: ${res.status} ${code}${message ? `: ${message}` : ""}`, code, res.status);
}

/** `PUT /<bucket>` (CreateBucket, no body), signed; resolves on 200, rejects with {@link StowS3Error} otherwise. */
export async function createBucket(
  target: SignedTarget,
  bucket: string,
  opts: { timeoutMs: number; signal?: AbortSignal | undefined },
): Promise<void> {
  const what = `CreateBucket ${JSON.stringify(bucket)}`;
  const res = await signedRequest(target, "PUT", `/${encodeSegment(bucket)}`, what, opts);
  if (res.status !== 200) throw refusal(what, res);
}

/** What `POST /_stow/reset` removed (the server's JSON answer). */
export interface StowResetResult {
  reset: true;
  /** Buckets removed. */
  buckets: number;
  /** Objects removed. */
  objects: number;
  /** Bytes of objects and in-flight parts released. */
  bytes: number;
  /** Multipart uploads in progress that were dropped. */
  uploads: number;
  /** Save receipts forgotten. */
  receipts: number;
}

/** `POST /_stow/reset`, signed; resolves with the server's report, rejects with {@link StowS3Error} otherwise. */
export async function resetStore(
  target: SignedTarget,
  opts: { timeoutMs: number; signal?: AbortSignal | undefined },
): Promise<StowResetResult> {
  const res = await signedRequest(target, "POST", "/_stow/reset", "reset", opts);
  if (res.status !== 200) throw refusal("reset", res);
  try {
    return JSON.parse(res.body) as StowResetResult;
  } catch (err) {
    throw new StowS3Error(`reset answered 200 with a body that is not JSON: ${res.body.slice(0, 200)}`, "protocol", 200, { cause: err });
  }
}
