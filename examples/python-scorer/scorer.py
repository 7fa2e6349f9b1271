#!/usr/bin/env python3
"""A custom scoreflow scorer in Python, standard library only.

It scores clusters by what they cost: its PingSource's data names the AddOnPlacementScore and each
cluster's hourly cost, and every ping is answered with one io.scoreflow.score.updated whose score
"cheap" is 100 minus the cost, so a Placement can prefer cheap clusters. The score-writer vets every
value: a cost outside [0, 200] gives a value outside [-100, 100], which the writer refuses
(OutOfRange) and reports as io.scoreflow.score.write.failed on the broker.

    {"resource": "cost", "costs": {"cluster1": 20, "cluster2": 70}}

It scores only the resources its deployment names ($RESOURCES, comma-separated; empty: any), and
puts the resource in the scoreflowresource extension of every score.updated too, as every
scoreflow scorer does: with sender identity on, the Broker's EventPolicy for the scorer admits it
for those resources only (docs/security.md).

Listens on $PORT (Knative sets it; 0 picks a free port) and prints "listening on <url>" first.
"""

import json
import os
import sys
import uuid
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PING = "dev.knative.sources.ping"
SOURCE = "scoreflow-examples/python-scorer"


def score(config):
    """The score.updated data for a ping's configuration; ValueError when the configuration is bad."""
    resource, costs = config.get("resource"), config.get("costs")
    if not isinstance(resource, str) or not resource or not isinstance(costs, dict):
        raise ValueError('configuration needs "resource" (a name) and "costs" ({cluster: cost})')
    owned = [r for r in os.environ.get("RESOURCES", "").split(",") if r]
    if owned and resource not in owned:
        raise ValueError(f"resource {resource[:64]!r} is not one this scorer may score ({', '.join(owned)})")
    items = []
    for cluster, cost in sorted(costs.items()):
        if not isinstance(cost, (int, float)) or isinstance(cost, bool):
            raise ValueError(f"cost of {cluster} is not a number")
        # No clamping: the writer is the judge of what a score may be.
        items.append({"cluster": cluster, "scores": [{"name": "cheap", "value": round(100 - cost)}]})
    return {"resource": resource, "items": items}


class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        # Probes.
        self.send_response(200 if self.path in ("/healthz", "/readyz") else 404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        ctype = self.headers.get("Content-Type", "")
        if ctype.startswith("application/cloudevents+json"):  # structured mode
            event = json.loads(body or b"{}")
            etype, data = event.get("type"), event.get("data")
        else:  # binary mode
            etype = self.headers.get("Ce-Type")
            data = json.loads(body) if body else None
        if etype != PING:
            return self.fail(400, "WrongType", f"cannot score events of type {etype}")
        try:
            result = score(data if isinstance(data, dict) else {})
        except ValueError as err:
            return self.fail(400, "BadConfig", str(err))
        self.reply(200, "io.scoreflow.score.updated", result, {"scoreflowresource": result["resource"]})

    def fail(self, status, reason, message):
        """A 4xx with an io.scoreflow.score.failed saying why: not retried, it is dead-lettered."""
        self.log(reason, message)
        self.reply(status, "io.scoreflow.score.failed",
                   {"input": {"source": self.headers.get("Ce-Source", ""), "id": self.headers.get("Ce-Id", ""),
                              "type": self.headers.get("Ce-Type", "")},
                    "reason": reason, "message": message[:300]})

    def reply(self, status, etype, data, extensions=None):
        out = json.dumps(data).encode()
        self.send_response(status)
        self.send_header("Ce-Specversion", "1.0")
        self.send_header("Ce-Id", str(uuid.uuid4()))
        self.send_header("Ce-Source", SOURCE)
        self.send_header("Ce-Type", etype)
        self.send_header("Ce-Time", datetime.now(timezone.utc).isoformat())
        for name, value in (extensions or {}).items():
            self.send_header("Ce-" + name, value)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log(self, reason, message):
        print(json.dumps({"level": "WARN", "msg": "refused", "reason": reason, "message": message}), flush=True)

    def log_message(self, *args):
        pass  # one JSON line per refusal instead of an access log


def main():
    server = ThreadingHTTPServer(("", int(os.environ.get("PORT", "8080"))), Handler)
    host = os.environ.get("ADDRESS") or "127.0.0.1"
    print(f"listening on http://{host}:{server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
