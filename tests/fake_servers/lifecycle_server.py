"""A tiny fake engine server for lifecycle tests (stdlib only, starts in ~50 ms).

``python tests/fake_servers/lifecycle_server.py --port P [--mode MODE] [--children N]``

Modes: ``ok`` (``/health`` 200 after ``--delay`` s); ``never_healthy`` (listens, ``/health``
always 503, logs progress lines); ``exit_early`` (logs a fatal line and exits 3 before
listening); ``ignore_sigterm`` (healthy, but SIGTERM is ignored: only SIGKILL stops it).
Always: ``GET /crash`` makes it exit 1 at once (a crash mid-run); ``--children N`` spawns N
sleeping grandchildren in its process group (they must die with the group). ``/v1/models``
lists ``fake-model``; ``POST /v1/completions`` answers a fixed non-streaming completion.
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--mode", default="ok", choices=["ok", "never_healthy", "exit_early", "ignore_sigterm"])
    ap.add_argument("--children", type=int, default=0)
    ap.add_argument("--delay", type=float, default=0.0)
    ap.add_argument("--text", default=" Paris.")
    args, _unknown = ap.parse_known_args()
    print(f"fake server pid={os.getpid()} mode={args.mode} OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}", flush=True)
    for _ in range(args.children):
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    if args.mode == "exit_early":
        print("fatal: could not allocate the KV cache (fake)", flush=True)
        sys.exit(3)
    if args.mode == "ignore_sigterm":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    ready_at = time.monotonic() + args.delay

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *a):  # keep the log to our own lines
            pass

        def _send(self, code: int, obj: dict) -> None:
            data = json.dumps(obj).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            if self.path == "/crash":
                print("segfault in the fake attention kernel", flush=True)
                os._exit(1)
            healthy = args.mode != "never_healthy" and time.monotonic() >= ready_at
            if self.path == "/health":
                self._send(200 if healthy else 503, {"ok": healthy})
            elif self.path == "/v1/models":
                self._send(200 if healthy else 503, {"object": "list", "data": [{"id": "fake-model"}]})
            else:
                self._send(404, {})

        def do_POST(self):
            n = int(self.headers.get("Content-Length", 0))
            body = json.loads(self.rfile.read(n) or b"{}")
            self._send(200, {"id": "x", "object": "text_completion", "model": body.get("model"),
                             "choices": [{"index": 0, "text": args.text, "finish_reason": "stop"}],
                             "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}})

    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    if args.mode == "never_healthy":
        def progress():
            i = 0
            while True:
                i += 1
                print(f"loading weights shard {i}/999", flush=True)
                time.sleep(0.2)
        threading.Thread(target=progress, daemon=True).start()
    server.serve_forever()


if __name__ == "__main__":
    main()
