#!/usr/bin/env python3
"""A capture racing a writer: a fresh workspace of 3,000 files / 60 MB and a
log file appended every 30 ms. Prints each attempt's time and outcome, the
blobs the refusals kept, and the capture after the writer stopped.

    python3 bench/scripts/refused_capture.py [STOW_BIN]

Issue 17 measured, before refused captures kept their progress: three
refusals keeping no blobs, then 0.51 s for the capture after the writer
stopped (a whole first capture again).
"""

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path


def main() -> None:
    stow = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("STOW_BIN", "target/release/stow-s3")
    with tempfile.TemporaryDirectory(prefix="stow-refused-") as top:
        top_p = Path(top)
        for i in range(3000):
            d = top_p / "src" / f"d{i % 50:02}"
            d.mkdir(parents=True, exist_ok=True)
            (d / f"f{i:04}.bin").write_bytes(os.urandom(20000))
        (top_p / "task.json").write_text(json.dumps({
            "version": 1, "root": str(top_p / "ws"), "registry_dir": str(top_p / "reg"),
            "max_bytes": 400_000_000, "inputs": [{"source": str(top_p / "src"), "destination": "."}],
        }))
        prep = json.loads(subprocess.run([stow, "workspace", "prepare", "--manifest", str(top_p / "task.json")],
                                         check=True, capture_output=True, text=True).stdout)
        ws = prep["workspace_id"]
        subprocess.run(["sync"], check=True)
        stop = threading.Event()

        def writer() -> None:
            with open(top_p / "ws" / "app.log", "a") as f:
                while not stop.is_set():
                    f.write(f"line {time.time()}\n")
                    f.flush()
                    time.sleep(0.03)

        def capture() -> tuple[float, dict]:
            t0 = time.perf_counter()
            r = subprocess.run([stow, "workspace", "checkpoint", "--id", ws, "--registry-dir", str(top_p / "reg")],
                               capture_output=True, text=True)
            return (time.perf_counter() - t0) * 1e3, json.loads(r.stdout)

        t = threading.Thread(target=writer)
        t.start()
        time.sleep(0.1)
        for attempt in range(1, 4):
            ms, out = capture()
            print(f"attempt {attempt} with the writer running: {ms:.0f} ms, "
                  f"{out.get('error', {}).get('code', 'committed')}")
        stop.set()
        t.join()
        blobs = sum(len(files) for _, _, files in os.walk(top_p / "reg" / ".stow" / "blobs"))
        print(f"blobs in the store (payloads and tree nodes): {blobs}")
        ms, out = capture()
        print(f"after the writer stopped: {ms:.0f} ms, stored_bytes {out.get('stored_bytes')}")


if __name__ == "__main__":
    main()
