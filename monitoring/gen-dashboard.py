#!/usr/bin/env python3
# Generates monitoring/dashboards/scoreflow.json and its Grafana-sidecar ConfigMap (needs PyYAML).
# Edit the panels here, run it, and commit both files.
import json, yaml
DS = {"type": "prometheus", "uid": "${datasource}"}
C = 'cluster=~"$cluster"'
panels = []
y = 0
def panel(title, desc, targets, unit="short", kind="timeseries", w=12, h=8, x=0, extra=None):
    global y
    p = {"id": len(panels) + 1, "type": kind, "title": title, "description": desc, "datasource": DS,
         "gridPos": {"x": x, "y": y, "w": w, "h": h},
         "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
         "targets": [dict({"refId": chr(65 + i), "datasource": DS}, **t) for i, t in enumerate(targets)]}
    if extra: p.update(extra)
    panels.append(p)
def row(title):
    global y
    panels.append({"id": len(panels) + 1, "type": "row", "title": title, "collapsed": False, "gridPos": {"x": 0, "y": y, "w": 24, "h": 1}, "panels": []})
    y += 1
row("Scores")
panel("Scores", "scoreflow_score: each score the writer has on the hub, per cluster, AddOnPlacementScore and score name (up to the writer's --max-score-series per-cluster series; see Score series).",
      [{"expr": f'scoreflow_score{{{C}}}', "legendFormat": "{{cluster}} {{resource}}/{{score}}"}], w=16)
panel("Scores now", "The latest value of every score, as a table.",
      [{"expr": f'max by (cluster, resource, score) (scoreflow_score{{{C}}})', "instant": True, "format": "table"}], kind="table", w=8, x=16)
y += 8
panel("Score age", "Seconds since the writer last wrote new scores into each AddOnPlacementScore (rewrites that only drop expired scores do not count). Scorers ping every minute.",
      [{"expr": f'time() - scoreflow_score_updated_timestamp_seconds{{{C}}}', "legendFormat": "{{cluster}} {{resource}}"}], unit="s")
panel("Time to expiry", "Seconds until each AddOnPlacementScore's validUntil; a Placement counts an expired score as 0.",
      [{"expr": f'scoreflow_score_valid_until_timestamp_seconds{{{C}}} - time()', "legendFormat": "{{cluster}} {{resource}}"}], unit="s", x=12)
y += 8
panel("Oldest score age by resource", "Per AddOnPlacementScore name, seconds since the writer last wrote new scores into its stalest object, over every cluster (whatever --max-score-series); ScoreflowScoresStale fires above 600.",
      [{"expr": 'time() - scoreflow_score_oldest_updated_timestamp_seconds', "legendFormat": "{{resource}}"}], unit="s")
panel("Score series", "Per-cluster series the writer exports (scoreflow_score and its freshness gauges, at most --max-score-series), and those it did not set because the bound was reached, per second.",
      [{"expr": 'sum(scoreflow_writer_score_series)', "legendFormat": "exported"},
       {"expr": 'sum(rate(scoreflow_writer_score_series_dropped_total[5m]))', "legendFormat": "dropped/s"}], x=12)
y += 8
row("Writer")
panel("Write latency", "From an item's arrival at the score-writer to its scores being on the hub.",
      [{"expr": f'histogram_quantile({q}, sum by (le) (rate(scoreflow_writer_write_latency_seconds_bucket[5m])))', "legendFormat": f"p{int(q*100)}"} for q in (0.5, 0.95, 0.99)], unit="s", w=8)
panel("Items by outcome", "Cluster items of score.updated events per second: Written, Skipped (Unchanged: the value is already on the hub; Duplicate; Stale) or Failed.",
      [{"expr": 'sum by (outcome) (rate(scoreflow_writer_items_total[5m]))', "legendFormat": "{{outcome}}"}], unit="ops", w=8, x=8)
panel("Refusals by reason", "Items the writer refused in the last hour, by reason (OutOfRange, UnknownCluster, Masked, ...). Each came back as a write.failed naming its producer.",
      [{"expr": 'sum by (reason) (increase(scoreflow_writer_items_total{outcome="Failed"}[1h]))', "legendFormat": "{{reason}}"}], w=8, x=16)
y += 8
panel("Hub API requests", "The writer's requests to the hub, by verb and result (ok, conflict, error).",
      [{"expr": 'sum by (verb, result) (rate(scoreflow_writer_api_requests_total[5m]))', "legendFormat": "{{verb}} {{result}}"}], unit="reqps", w=8)
panel("Pending updates", "Updates the writer accepted and has not yet written.",
      [{"expr": 'sum(scoreflow_writer_pending_updates)', "legendFormat": "pending"}], w=8, x=8)
panel("Dead letters", "Events the broker dead-lettered in the last hour, by what the dead-letter function did with them.",
      [{"expr": 'sum by (outcome) (increase(scoreflow_dead_letters_total[1h]))', "legendFormat": "{{outcome}}"}], w=8, x=16)
y += 8
row("Functions")
panel("Events received", "CloudEvents each function received, by type and the HTTP status it answered.",
      [{"expr": 'sum by (job, type, code) (rate(scoreflow_events_received_total[5m]))', "legendFormat": "{{job}} {{type}} {{code}}"}], unit="ops")
panel("Handling time (p95)", "Time from receiving a CloudEvent to answering it, per function and type.",
      [{"expr": 'histogram_quantile(0.95, sum by (job, type, le) (rate(scoreflow_event_handle_seconds_bucket[5m])))', "legendFormat": "{{job}} {{type}}"}], unit="s", x=12)
y += 8
row("Broker delivery (Knative Eventing, config-observability metrics-protocol: prometheus)")
panel("Deliveries by trigger and status", "Knative's broker filter: events dispatched to each Trigger's subscriber, by the HTTP status it answered (kn.eventing.dispatch.duration).",
      [{"expr": 'sum by (messaging_destination_name, http_response_status_code) (rate(kn_eventing_dispatch_duration_seconds_count{kn_broker_namespace="scoreflow"}[5m]))', "legendFormat": "{{messaging_destination_name}} {{http_response_status_code}}"}], unit="ops")
panel("Delivery latency (p95)", "Knative's broker filter: time to dispatch an event to each Trigger's subscriber.",
      [{"expr": 'histogram_quantile(0.95, sum by (messaging_destination_name, le) (rate(kn_eventing_dispatch_duration_seconds_bucket{kn_broker_namespace="scoreflow"}[5m])))', "legendFormat": "{{messaging_destination_name}}"}], unit="s", x=12)
y += 8
dash = {
  "uid": "scoreflow", "title": "scoreflow", "tags": ["scoreflow", "knative", "ocm"],
  "description": "Scores, their freshness, the score-writer's latency and refusals, dead letters and Knative broker delivery.",
  "schemaVersion": 39, "version": 1, "editable": True, "graphTooltip": 1,
  "time": {"from": "now-1h", "to": "now"}, "refresh": "30s",
  "templating": {"list": [
    {"name": "datasource", "type": "datasource", "query": "prometheus", "label": "Prometheus", "current": {}, "hide": 0},
    {"name": "cluster", "type": "query", "label": "Cluster", "datasource": DS,
     "query": {"query": "label_values(scoreflow_score, cluster)", "refId": "clusters"},
     "definition": "label_values(scoreflow_score, cluster)", "includeAll": True, "multi": True, "allValue": ".*",
     "current": {"text": "All", "value": "$__all"}, "refresh": 2, "sort": 1, "hide": 0}]},
  "annotations": {"list": []},
  "panels": panels,
}
import os
root = os.path.dirname(os.path.abspath(__file__)) + '/'
js = json.dumps(dash, indent=2) + "\n"
open(root + 'dashboards/scoreflow.json', 'w').write(js)
class Lit(str): pass
yaml.SafeDumper.add_representer(Lit, lambda d, s: d.represent_scalar('tag:yaml.org,2002:str', s, style='|'))
cm = {"apiVersion": "v1", "kind": "ConfigMap",
      "metadata": {"name": "scoreflow-dashboard", "namespace": "monitoring",
                   "labels": {"grafana_dashboard": "1", "app.kubernetes.io/part-of": "scoreflow"},
                   "annotations": {"grafana_folder": "scoreflow"}},
      "data": {"scoreflow.json": Lit(js)}}
hdr = ("# monitoring/dashboards/scoreflow.json as a ConfigMap for the Grafana sidecar (kube-prometheus-stack's\n"
       "# grafana.sidecar.dashboards watches the label grafana_dashboard: \"1\"; set its namespace to where the\n"
       "# sidecar looks). Generated by monitoring/gen-dashboard.py; monitoring/monitoring_test.go keeps it equal\n# to the JSON file.\n")
open(root + 'grafana-dashboard-configmap.yaml', 'w').write(hdr + yaml.safe_dump(cm, sort_keys=False, width=200))
