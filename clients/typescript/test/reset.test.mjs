// session.reset(): one server for a suite, a clean S3 state per test (the
// package's public names only).
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";

import {
  CreateMultipartUploadCommand,
  ListBucketsCommand,
  ListMultipartUploadsCommand,
  ListObjectsV2Command,
  PutObjectCommand,
  S3Client,
} from "@aws-sdk/client-s3";
import { openStow, StowSessionClosedError } from "@chester-hill-solutions/stow-s3";

describe("a suite sharing one filesystem-backed session, reset before each test", () => {
  let session;
  let s3;
  before(async () => {
    session = await openStow();
    s3 = new S3Client(session.awsSdkV3Config());
  });
  after(async () => {
    s3.destroy();
    await session.close();
  });

  for (let n = 0; n < 50; n++) {
    test(`test ${n} sees only the session's empty bucket`, async () => {
      await session.reset();
      const buckets = (await s3.send(new ListBucketsCommand({}))).Buckets ?? [];
      assert.deepEqual(buckets.map((b) => b.Name), [session.bucket]);
      const listed = await s3.send(new ListObjectsV2Command({ Bucket: session.bucket }));
      assert.equal(listed.KeyCount, 0);
      const uploads = await s3.send(new ListMultipartUploadsCommand({ Bucket: session.bucket }));
      assert.deepEqual(uploads.Uploads ?? [], []);
      await s3.send(new PutObjectCommand({ Bucket: session.bucket, Key: `k-${n}`, Body: "x".repeat(n * 1000) }));
      await s3.send(new CreateMultipartUploadCommand({ Bucket: session.bucket, Key: "in-flight" }));
      await s3.send(new PutObjectCommand({ Bucket: session.bucket, Key: "same-key", Body: String(n) }));
    });
  }
});

test("reset reports what it removed, with a file body and an upload", async () => {
  const session = await openStow();
  const s3 = new S3Client(session.awsSdkV3Config());
  try {
    await s3.send(new PutObjectCommand({ Bucket: session.bucket, Key: "big", Body: Buffer.alloc(100_000, 1) }));
    await s3.send(new CreateMultipartUploadCommand({ Bucket: session.bucket, Key: "up" }));
    assert.deepEqual(await session.reset(), {
      reset: true, buckets: 1, objects: 1, bytes: 100_000, uploads: 1, receipts: 0,
    });
  } finally {
    s3.destroy();
    await session.close();
  }
  await assert.rejects(session.reset(), StowSessionClosedError);
});
