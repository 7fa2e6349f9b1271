#!/usr/bin/env python3
"""Dynamic Scoring Framework scorers for scoreflow's tests, written from DSF's documented REST API
only (GET /healthz, GET /config, POST /scoring with {"data": <Prometheus matrix>} answered by
{"results": [{"metric": {...}, "score": <float>}]}), with nothing but Python's standard library.

    python3 dsf_scorer.py KIND [--token-file FILE] [--query Q] [--sleep SECONDS]

KIND is one of:
  sample       the mean of each series (DSF's sample scorer scores time series)
  llm          a forecast, last + (last - first), behind a bearer token read from --token-file
               on every request (stands in for the LLM forecast scorer and its vLLM token)
  static       source type none: fixed performance and power tables at /performance/... and
               /powerconsumption/..., with app and device labels (DSF's static scorer)
  broken       /scoring answers 500
  refusing     /scoring answers 422
  slow         /scoring answers after --sleep seconds
  unhealthy    /healthz answers 503

It listens on a free loopback port and prints "listening on http://127.0.0.1:PORT".
"""
import argparse
import json
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

STATIC = {
    "performance": [
        ({"cluster": "worker01", "app": "app01", "device": "gpu0"}, 150.0),
        ({"cluster": "worker02", "app": "app01", "device": "gpu0"}, 42.5),
        ({"cluster": "worker02", "app": "app02", "device": "cpu"}, -7.4),
    ],
    "powerconsumption": [
        ({"cluster": "worker01", "app": "app01", "device": "gpu0"}, -250.0),
        ({"cluster": "worker02", "app": "app01", "device": "gpu0"}, 80.0),
    ],
}


def config(args, name, path, source):
    return {
        "name": name.replace("_", "-"),
        "description": "a test scorer",
        "source": source,
        "scoring": {"path": path, "params": {"name": name, "interval": 30}},
    }


def prometheus_source(args):
    return {
        "type": "prometheus",
        # A managed cluster's own Prometheus, as DSF's samples name it: the hub cannot reach it.
        "host": "http://kube-prometheus-kube-prome-prometheus.monitoring.svc:9090",
        "path": "/api/v1/query_range",
        "params": {"query": args.query, "range": 120, "step": 60},
    }


def values(series):
    return [float(v) for _, v in series["values"]]


class Handler(BaseHTTPRequestHandler):
    args = None

    def log_message(self, fmt, *a):  # quiet: the test reads stdout
        pass

    def answer(self, status, body):
        b = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(b)))
        self.end_headers()
        self.wfile.write(b)

    def do_GET(self):
        kind = self.args.kind
        if self.path == "/healthz":
            return self.answer(503 if kind == "unhealthy" else 200, {"status": "ok"})
        if kind == "static":
            for table in STATIC:
                if self.path == "/%s/config" % table:
                    return self.answer(200, config(self.args, "example_%s_score" % table, "/%s/scoring" % table, {"type": "none"}))
        elif self.path == "/config":
            name = "llm_forecast_score" if kind == "llm" else "sample_my_score"
            return self.answer(200, config(self.args, name, "/scoring", prometheus_source(self.args)))
        self.answer(404, {"detail": "not found"})

    def do_POST(self):
        kind = self.args.kind
        length = int(self.headers.get("Content-Length", "0"))
        try:
            body = json.loads(self.rfile.read(length))
            data = body["data"]
        except (ValueError, KeyError):
            return self.answer(400, {"detail": "want {\"data\": [...]}"})
        if self.headers.get("Content-Type", "").split(";")[0] != "application/json":
            return self.answer(415, {"detail": "want application/json"})

        if kind == "static":
            for table, rows in STATIC.items():
                if self.path == "/%s/scoring" % table:
                    if data != []:
                        return self.answer(400, {"detail": "source type none: want no data"})
                    return self.answer(200, {"results": [{"metric": m, "score": s} for m, s in rows]})
            return self.answer(404, {"detail": "not found"})
        if self.path != "/scoring":
            return self.answer(404, {"detail": "not found"})
        if kind == "broken":
            return self.answer(500, {"detail": "the model is not loaded"})
        if kind == "refusing":
            return self.answer(422, {"detail": "unprocessable"})
        if kind == "slow":
            time.sleep(self.args.sleep)
        if kind == "llm":
            with open(self.args.token_file) as f:  # re-read: the token may rotate
                token = f.read().strip()
            if self.headers.get("Authorization") != "Bearer " + token:
                return self.answer(401, {"detail": "bad token"})
            results = [{"metric": s["metric"], "score": values(s)[-1] + (values(s)[-1] - values(s)[0])} for s in data]
        else:
            results = [{"metric": s["metric"], "score": sum(values(s)) / len(values(s))} for s in data]
        self.answer(200, {"results": results})


def main():
    p = argparse.ArgumentParser()
    p.add_argument("kind", choices=["sample", "llm", "static", "broken", "refusing", "slow", "unhealthy"])
    p.add_argument("--token-file")
    p.add_argument("--query", default="cpu_usage")
    p.add_argument("--sleep", type=float, default=5)
    Handler.args = p.parse_args()
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print("listening on http://127.0.0.1:%d" % srv.server_address[1], flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
