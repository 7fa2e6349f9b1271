#!/usr/bin/env python3
"""Stand-ins for the Dynamic Scoring Framework scorers whose code needs what Debian does not
package (darts, pandas), and for scorers that misbehave, with nothing but Python's standard
library. DSF's own sample, static and LLM forecast scorers are run unmodified instead (from
../shared/dsf-upstream, harness/dsfupstream): these exist only where DSF's code cannot run here.

Each behaves as DSF's code does where a client can tell: the same /config answer, field for field
(source type "Prometheus", the managed cluster's own Prometheus as source host, a query without a
cluster label), results that carry the series' own labels and nothing else.

    python3 dsf_scorer.py KIND [--sleep SECONDS] [--to URL]

KIND is one of:
  simple-prediction  samples/simple-prediction-scorer: per series, how far its last value is over
                     its mean, in percent (darts' forecast stands in for nothing else); adds meta
  ai-workload        samples/ai-workload-scorer: /performance/... a static table per app and
                     device; /power/... a headroom score per app and device from the power series
  broken             /scoring answers 500 (as FastAPI does when a series holds NaN)
  refusing           /scoring answers 422
  slow               /scoring answers after --sleep seconds
  unhealthy          /healthz answers 503
  redirect           /scoring answers 302 to --to

Those without a /config of their own serve DSF's sample scorer's. It listens on a free loopback
port and prints "listening on http://127.0.0.1:PORT".
"""
import argparse
import json
import math
import re
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MANAGED_PROMETHEUS = "http://kube-prometheus-kube-prome-prometheus.monitoring.svc:9090"
OPENSHIFT_THANOS = "https://thanos-querier.openshift-monitoring.svc.cluster.local:9091"
POD_CPU = 'sum by (node, namespace, pod) (rate(container_cpu_usage_seconds_total{container!="", pod!=""}[1m]))'


def config(name, description, source, path, score, interval):
    return {
        "name": name,
        "description": description,
        "source": source,
        "scoring": {"path": path, "params": {"name": score, "interval": interval}},
    }


def prometheus(host, query, rng, step):
    return {"type": "Prometheus", "host": host, "path": "/api/v1/query_range",
            "params": {"query": query, "range": rng, "step": step}}


CONFIGS = {
    # samples/simple-prediction-scorer/app/main.py get_config
    ("simple-prediction", "/config"): config(
        "simple-prediction-scorer", "A simple prediction score for time series data",
        prometheus(MANAGED_PROMETHEUS, POD_CPU, 3600, 30), "/scoring", "simple_prediction_score", 30),
    # samples/ai-workload-scorer/app/main.py get_performance_config, get_power_config
    ("ai-workload", "/performance/config"): config(
        "ai-workload-perf-scorer", "A performance score for ai workloads based on token generation rate.",
        prometheus(OPENSHIFT_THANOS, "sum(irate(vllm:generation_tokens_total[1m])) by (pod)", 3600, 60),
        "/performance/scoring", "ai_workload_perf_score", 30),
    ("ai-workload", "/power/config"): config(
        "ai-workload-power-scorer", "A power score for ai workloads based on power usage.",
        prometheus(OPENSHIFT_THANOS, "sum(DCGM_FI_DEV_POWER_USAGE) by (GPU_I_ID, GPU_I_PROFILE, exported_pod, Hostname)", 3600, 60),
        "/power/scoring", "ai_workload_power_score", 30),
}
SAMPLE_CONFIG = config("sample-scorer", "A sample score for time series data",
                       prometheus(MANAGED_PROMETHEUS, POD_CPU, 3600, 60), "/scoring", "sample_my_score", 30)

# samples/ai-workload-scorer/app/static/config.json: applications, their pods and devices.
APPS = {"app01": "app01*", "app02": "app02*"}
DEVICES = ["all", "2g.24gb", "3g.48gb"]
PERFORMANCE = [("app01", "all", 80), ("app02", "all", 80), ("app01", "3g.48gb", 60),
               ("app02", "3g.48gb", 55), ("app01", "2g.24gb", 10), ("app02", "2g.24gb", 15)]


def values(series):
    return [float(v) for _, v in series["values"]]


def device_of(profile):
    # resolve_device_profile in samples/ai-workload-scorer/app/main.py
    if not profile:
        return "unknown"
    if profile.startswith("3g.47gb"):
        return "3g.48gb"
    if profile.startswith("2g"):
        return "2g.24gb"
    if profile.startswith("1g"):
        return "1g.12gb"
    return "all"


def app_of(pod):
    for app, pattern in APPS.items():
        if re.fullmatch(pattern.replace("*", ".*"), pod or ""):
            return app
    return "unknown"


def power_scores(data):
    # The upstream scorer forecasts each node's total power with darts and adds each app and
    # device's peak; here the total is the last values' sum. Its headroom score is the same
    # sigmoid: (1 - 1/(1 + exp(-(estimate - 200)))) * 90 + 10.
    total = sum(values(s)[-1] for s in data if values(s))
    peak = {}
    for s in data:
        m = s["metric"]
        key = (app_of(m.get("exported_pod")), device_of(m.get("GPU_I_PROFILE", "all")))
        peak[key] = max(peak.get(key, 0.0), max(values(s) or [0.0]))
    out = []
    for app in APPS:
        for device in DEVICES:
            if (app, device) not in peak:
                score = 10.0
            else:
                x = peak[(app, device)] + total - 200
                score = (1 - 1 / (1 + math.exp(-max(min(x, 700), -700)))) * 90 + 10
            out.append({"metric": {"app": app, "device": device}, "score": score})
    return out


class Handler(BaseHTTPRequestHandler):
    args = None

    def log_message(self, fmt, *a):  # quiet: the test reads stdout
        pass

    def answer(self, status, body, headers=()):
        b = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(b)))
        for k, v in headers:
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(b)

    def do_GET(self):
        kind = self.args.kind
        if self.path == "/healthz":
            return self.answer(503 if kind == "unhealthy" else 200, {"status": "ok"})
        c = CONFIGS.get((kind, self.path))
        if c is None and self.path == "/config" and kind not in ("simple-prediction", "ai-workload"):
            c = SAMPLE_CONFIG
        if c is None:
            return self.answer(404, {"detail": "Not Found"})
        self.answer(200, c)

    def do_POST(self):
        kind = self.args.kind
        length = int(self.headers.get("Content-Length", "0"))
        try:
            data = json.loads(self.rfile.read(length))["data"]
        except (ValueError, KeyError, TypeError):
            return self.answer(422, {"detail": [{"loc": ["body", "data"], "msg": "field required"}]})
        if kind == "ai-workload" and self.path == "/performance/scoring":
            return self.answer(200, {"results": [{"metric": {"app": a, "device": d}, "score": s} for a, d, s in PERFORMANCE]})
        if kind == "ai-workload" and self.path == "/power/scoring":
            return self.answer(200, {"results": power_scores(data)})
        if self.path != "/scoring":
            return self.answer(404, {"detail": "Not Found"})
        if kind == "broken":
            return self.answer(500, {"detail": "Internal Server Error"})
        if kind == "refusing":
            return self.answer(422, {"detail": "unprocessable"})
        if kind == "redirect":
            return self.answer(302, {}, [("Location", self.args.to + "/scoring")])
        if kind == "slow":
            time.sleep(self.args.sleep)
        results = []
        for s in data:
            vs = values(s)
            mean = sum(vs) / len(vs) if vs else 0
            metric = dict(s["metric"])
            if kind == "simple-prediction":
                metric["meta"] = "over_mean"
                score = 100 * (vs[-1] - mean) / mean if vs and mean else 0
            else:
                score = mean
            results.append({"metric": metric, "score": score})
        self.answer(200, {"results": results})


def main():
    p = argparse.ArgumentParser()
    p.add_argument("kind", choices=["simple-prediction", "ai-workload", "broken", "refusing", "slow", "unhealthy", "redirect"])
    p.add_argument("--sleep", type=float, default=5)
    p.add_argument("--to", default="http://127.0.0.1:1")
    Handler.args = p.parse_args()
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print("listening on http://127.0.0.1:%d" % srv.server_address[1], flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
