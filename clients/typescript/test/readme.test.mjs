// Every ```js block of README.md runs as written (blocks tagged `sdk` need
// @aws-sdk/client-s3 and run only when it is installed).
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

const pkgDir = fileURLToPath(new URL("..", import.meta.url));
const readme = readFileSync(join(pkgDir, "README.md"), "utf8");
const blocks = [...readme.matchAll(/^```js( [a-z]+)?\n([\s\S]*?)^```$/gm)].map((m) => ({ tag: (m[1] ?? "").trim(), code: m[2] }));

let haveSdk = true;
try {
  createRequire(join(pkgDir, "package.json")).resolve("@aws-sdk/client-s3");
} catch {
  haveSdk = false;
}

test("README has examples", () => assert.ok(blocks.length >= 3));

// Inside the package so that `@chester-hill-solutions/stow-s3` resolves to it (self-reference).
const runDir = join(pkgDir, ".readme-examples");
mkdirSync(runDir, { recursive: true });
test.after(() => rmSync(runDir, { recursive: true, force: true }));

blocks.forEach(({ tag, code }, i) => {
  test(`README example ${i + 1}${tag ? ` (${tag})` : ""}`, { skip: tag === "sdk" && !haveSdk && "@aws-sdk/client-s3 not installed" }, async () => {
    const file = join(runDir, `example-${i + 1}.mjs`);
    writeFileSync(file, code);
    const home = mkdtempSync(join(tmpdir(), "stow-ts-readme-"));
    try {
      const { stdout } = await promisify(execFile)(process.execPath, [file], {
        cwd: home,
        env: { ...process.env, HOME: home, XDG_CONFIG_HOME: join(home, ".config") },
        timeout: 60_000,
      });
      // Where the example shows its output in a comment, check it.
      for (const m of code.matchAll(/console\.log\(.*\); \/\/ (.+)$/gm)) {
        const expected = m[1].replace(/^"(.*)"$/, "$1");
        assert.ok(stdout.includes(expected), `expected ${JSON.stringify(expected)} in output:\n${stdout}`);
      }
    } finally {
      rmSync(home, { recursive: true, force: true });
    }
  });
});
