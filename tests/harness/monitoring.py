"""Monitoring helpers for integration tests: a real Prometheus server scraping
real paci processes, the Grafana dashboards' queries run against it, and
promtool on the alert rules.

Uses Debian's `prometheus` and `promtool` binaries and only the standard
library, so any test run by /usr/bin/python3 can import it:

    prom = monitoring.start_prometheus(workdir, ["127.0.0.1:9101", "127.0.0.1:9102"])
    try:
        prom.wait_for_targets_up(2, timeout=30)
        ...  # run something
        variables = monitoring.resolve_variables(prom, dashboard, {"trainingjob": "kjv"})
        missing = monitoring.panels_without_data(prom, [dashboard], variables)
    finally:
        prom.stop()
"""
import json
import math
import os
import re
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request

# What Grafana would put for its built-in variables when Prometheus scrapes every
# second: $__rate_interval is max(4 x scrape interval, $__interval + scrape interval).
DEFAULT_VARIABLES = {
    "__rate_interval": "15s",
    "__interval": "1s",
    "__range": "1h",
    "__range_s": "3600",
    "datasource": "prometheus",
}


def free_port():
    """A TCP port on 127.0.0.1 that was free a moment ago (for programs that cannot take port 0)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _binary(name):
    path = shutil.which(name) or os.path.join("/usr/bin", name)
    if not os.path.exists(path):
        raise FileNotFoundError("%s not found: install Debian's prometheus package" % name)
    return path


class Prometheus:
    """A Prometheus server process started by start_prometheus(); stop() ends it.

    Not thread-safe: use it from the test's thread.
    """

    def __init__(self, process, url, workdir, log_path):
        self.process = process
        self.url = url
        self.workdir = workdir
        self.log_path = log_path
        self.started = time.time()

    def _get(self, path, params):
        query = urllib.parse.urlencode(params)
        try:
            with urllib.request.urlopen("%s%s?%s" % (self.url, path, query), timeout=30) as r:
                body = json.load(r)
        except urllib.error.HTTPError as e:
            raise RuntimeError("prometheus %s %s: %s" % (path, params, e.read().decode()))
        if body.get("status") != "success":
            raise RuntimeError("prometheus %s %s: %s" % (path, params, body))
        return body["data"]

    def query(self, expr, at=None):
        """Instant query; returns the result list ([] when nothing matched).

        Raises RuntimeError when Prometheus refuses the expression.
        """
        params = {"query": expr}
        if at is not None:
            params["time"] = "%.3f" % at
        return self._get("/api/v1/query", params)["result"]

    def query_range(self, expr, start, end, step=1.0):
        """Range query (as a Grafana time series panel runs it); returns the result list."""
        return self._get("/api/v1/query_range", {
            "query": expr, "start": "%.3f" % start, "end": "%.3f" % end, "step": "%g" % step})["result"]

    def targets(self):
        """The active targets, as /api/v1/targets returns them."""
        return self._get("/api/v1/targets", {"state": "active"})["activeTargets"]

    def wait_for_targets_up(self, n, timeout=30):
        """Blocks until at least n targets have health "up"; raises AssertionError on timeout."""
        deadline = time.monotonic() + timeout
        targets = []
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError("prometheus exited:\n" + self.log())
            try:
                targets = self.targets()
                if sum(1 for t in targets if t["health"] == "up") >= n:
                    return targets
            except (OSError, RuntimeError):
                pass  # not listening yet
            time.sleep(0.2)  # polling interval
        raise AssertionError("fewer than %d targets up after %ss: %s" % (
            n, timeout, [(t["scrapeUrl"], t["health"], t["lastError"]) for t in targets]))

    def wait_for(self, expr, timeout=30):
        """Blocks until the instant query expr returns a non-empty result; returns it."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            result = self.query(expr)
            if result:
                return result
            time.sleep(0.2)  # polling interval
        raise AssertionError("no result for %s after %ss" % (expr, timeout))

    def log(self):
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def stop(self):
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def write_config(path, targets, scrape_interval="1s", job_name="paci", rule_files=()):
    """Writes a prometheus.yml scraping the host:port targets (no honor_labels:
    paci's series carry no target label)."""
    lines = [
        "global:",
        "  scrape_interval: %s" % scrape_interval,
        "  evaluation_interval: %s" % scrape_interval,
    ]
    if rule_files:
        lines.append("rule_files:")
        lines += ["  - %s" % json.dumps(os.path.abspath(p)) for p in rule_files]
    lines += [
        "scrape_configs:",
        "  - job_name: %s" % json.dumps(job_name),
        "    scrape_timeout: %s" % scrape_interval,
        "    static_configs:",
        "      - targets: %s" % json.dumps(list(targets)),
    ]
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def start_prometheus(workdir, targets, scrape_interval="1s", job_name="paci", rule_files=()):
    """Starts Debian's prometheus on 127.0.0.1 scraping targets ("host:port" each,
    path /metrics) every scrape_interval, with its TSDB and log in workdir.

    Returns a Prometheus once its HTTP API answers; raises RuntimeError if it
    exits first. Call .stop() when done.
    """
    os.makedirs(workdir, exist_ok=True)
    config = os.path.join(workdir, "prometheus.yml")
    write_config(config, targets, scrape_interval, job_name, rule_files)
    return start_prometheus_with_config(workdir, config)


def start_prometheus_with_config(workdir, config):
    """Starts Debian's prometheus on 127.0.0.1 with the given config file, its
    TSDB and log in workdir. Returns a Prometheus once its HTTP API answers."""
    os.makedirs(workdir, exist_ok=True)
    log_path = os.path.join(workdir, "prometheus.log")
    for _ in range(3):  # the free port may be taken again before prometheus binds it
        port = free_port()
        with open(log_path, "w") as log:
            process = subprocess.Popen(
                [_binary("prometheus"), "--config.file=" + os.path.abspath(config),
                 "--storage.tsdb.path=" + os.path.join(workdir, "tsdb"),
                 "--web.listen-address=127.0.0.1:%d" % port,
                 "--storage.tsdb.retention.time=1d", "--log.level=warn"],
                stdout=log, stderr=subprocess.STDOUT, cwd=workdir)
        prom = Prometheus(process, "http://127.0.0.1:%d" % port, workdir, log_path)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and process.poll() is None:
            try:
                with urllib.request.urlopen(prom.url + "/-/ready", timeout=2) as r:
                    if r.status == 200:
                        return prom
            except OSError:
                pass
            time.sleep(0.1)  # polling interval
        prom.stop()
        if "address already in use" not in prom.log():
            break
    raise RuntimeError("prometheus did not start:\n" + prom.log())


def kubernetes_config_on_file_sd(config_path, workdir, discovered, scrape_interval="1s"):
    """Rewrites a cluster prometheus.yml for a machine without Kubernetes (and
    for Debian's prometheus, which is built without kubernetes_sd): every
    scrape job's kubernetes_sd_configs becomes a file_sd_configs whose file
    holds discovered[job_name], a list of target groups
    ({"targets": ["host:port"], "labels": {"__meta_kubernetes_...": ...}}) as
    Kubernetes discovery would produce them, so the job's relabel_configs run
    unchanged. Intervals become scrape_interval; rule files are made absolute.
    Writes <workdir>/prometheus.yml and returns its path. Needs python3-yaml.
    """
    import yaml
    with open(config_path) as f:
        config = yaml.safe_load(f)
    base = os.path.dirname(os.path.abspath(config_path))
    config.setdefault("global", {})
    config["global"]["scrape_interval"] = scrape_interval
    config["global"]["evaluation_interval"] = scrape_interval
    config["rule_files"] = [os.path.join(base, r) for r in config.get("rule_files", [])]
    os.makedirs(workdir, exist_ok=True)
    for job in config.get("scrape_configs", []):
        job.pop("scrape_interval", None)
        job["scrape_timeout"] = scrape_interval
        if job.pop("kubernetes_sd_configs", None) is None:
            continue
        sd_file = _sd_file(workdir, job["job_name"])
        job["file_sd_configs"] = [{"files": [sd_file], "refresh_interval": "1s"}]
    write_discovered(workdir, discovered)
    for job in config.get("scrape_configs", []):  # jobs with nothing discovered yet
        if "file_sd_configs" in job and not os.path.exists(_sd_file(workdir, job["job_name"])):
            write_discovered(workdir, {job["job_name"]: []})
    out = os.path.join(workdir, "prometheus.yml")
    with open(out, "w") as f:
        yaml.safe_dump(config, f, sort_keys=False)
    return out


def _sd_file(workdir, job_name):
    return os.path.join(workdir, "sd-%s.json" % job_name)


def write_discovered(workdir, discovered):
    """Replaces what the file discovery of kubernetes_config_on_file_sd(workdir, ...)
    finds for each scrape job named in discovered (job name -> target groups);
    Prometheus picks it up within a second. Each file is replaced atomically."""
    for job_name, groups in discovered.items():
        path = _sd_file(workdir, job_name)
        with open(path + ".tmp", "w") as f:
            json.dump(groups, f)
        os.rename(path + ".tmp", path)


def _meta_name(key):
    """A Kubernetes label or annotation key as discovery spells it in a meta label."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", key)


def endpoint_target_group(address, namespace, service, port_name, pod, service_labels=None):
    """A target group as Kubernetes discovery (role endpoints) reports one
    address of a Service's endpoints: its namespace, Service, port name, pod and
    the Service's labels as __meta_kubernetes_service_label_* ."""
    labels = {"__meta_kubernetes_namespace": namespace,
              "__meta_kubernetes_service_name": service,
              "__meta_kubernetes_endpoint_port_name": port_name,
              "__meta_kubernetes_pod_name": pod}
    for key, value in (service_labels or {}).items():
        labels["__meta_kubernetes_service_label_" + _meta_name(key)] = value
    return {"targets": [address], "labels": labels}


def pod_target_groups(pod):
    """The target groups Kubernetes discovery (role pod) reports for a pod
    object (as the API returns it): one target per declared container port
    (the pod's IP alone when none is declared), with its namespace, name,
    phase, labels and annotations as __meta_kubernetes_pod_* labels."""
    meta, status = pod["metadata"], pod.get("status", {})
    labels = {"__meta_kubernetes_namespace": meta.get("namespace", "default"),
              "__meta_kubernetes_pod_name": meta["name"],
              "__meta_kubernetes_pod_phase": status.get("phase", "Pending"),
              "__meta_kubernetes_pod_ip": status.get("podIP", "")}
    for key, value in meta.get("labels", {}).items():
        labels["__meta_kubernetes_pod_label_" + _meta_name(key)] = value
    for key, value in meta.get("annotations", {}).items():
        labels["__meta_kubernetes_pod_annotation_" + _meta_name(key)] = value
    ip = status.get("podIP")
    if not ip:
        return []
    groups = []
    for container in pod["spec"].get("containers", []):
        for port in container.get("ports", []):
            groups.append({"targets": ["%s:%d" % (ip, port["containerPort"])], "labels": dict(
                labels, __meta_kubernetes_pod_container_name=container["name"],
                __meta_kubernetes_pod_container_port_name=port.get("name", ""))})
    return groups or [{"targets": [ip], "labels": labels}]


# ------------------------------------------------------------------ dashboards

def dashboard_panels(path):
    """Yields every panel of a Grafana dashboard JSON, rows' nested panels included."""
    with open(path) as f:
        dashboard = json.load(f)

    def walk(panels):
        for panel in panels:
            if panel.get("type") == "row":
                yield from walk(panel.get("panels", []))
            else:
                yield panel
    yield from walk(dashboard.get("panels", []))


def substitute(expr, variables=None):
    """Replaces Grafana variables ($x, ${x}, [[x]], ${x:fmt}) in expr: first from
    variables, then DEFAULT_VARIABLES; any other variable becomes `.+` (its
    "All" value, which the dashboards use inside =~ matchers).
    """
    values = dict(DEFAULT_VARIABLES)
    values.update(variables or {})

    def value(name):
        return str(values.get(name, ".+"))
    expr = re.sub(r"\$\{(\w+)(?::\w+)?\}", lambda m: value(m.group(1)), expr)
    expr = re.sub(r"\[\[(\w+)\]\]", lambda m: value(m.group(1)), expr)
    return re.sub(r"\$(\w+)", lambda m: value(m.group(1)), expr)


def _regex_escape(value):
    """A value inside a PromQL =~ string, escaped as Grafana's Prometheus data
    source escapes a multi-value variable's values."""
    return re.sub(r"([\\^$*+?.()|{}\[\]])", r"\\\\\1", value)


def _format_values(values):
    escaped = [_regex_escape(v) for v in values]
    return escaped[0] if len(escaped) == 1 else "(" + "|".join(escaped) + ")"


def _variable_options(prom, query, start, end):
    """The texts a Grafana Prometheus query variable lists for query."""
    m = re.fullmatch(r"\s*label_values\((.*),\s*(\w+)\s*\)\s*", query, re.S)
    if m:
        found = prom._get("/api/v1/series", {"match[]": m.group(1), "start": "%.3f" % start,
                                              "end": "%.3f" % end})
        return [s[m.group(2)] for s in found if s.get(m.group(2))]
    m = re.fullmatch(r"\s*label_values\(\s*(\w+)\s*\)\s*", query)
    if m:
        return prom._get("/api/v1/label/%s/values" % m.group(1),
                         {"start": "%.3f" % start, "end": "%.3f" % end})
    m = re.fullmatch(r"\s*query_result\((.*)\)\s*", query, re.S)
    if m:
        texts = []
        for r in prom.query(m.group(1), at=end):
            metric = dict(r["metric"])
            name = metric.pop("__name__", "")
            texts.append("%s{%s} %s %d" % (name, ",".join('%s="%s"' % kv for kv in metric.items()),
                                            r["value"][1], int(float(r["value"][0]) * 1000)))
        return texts
    raise ValueError("variable query not understood: %s" % query)


def resolve_variables(prom, path, chosen=None, start=None, end=None):
    """The values Grafana would put for the query variables of the dashboard at
    path, in their order: each variable's query (earlier variables and
    DEFAULT_VARIABLES substituted) runs against prom over [start, end]
    (default: since Prometheus started, until now), its regex picks the
    options, and chosen (name -> a value or a list of values; default "All")
    selects among them. "All" is the variable's allValue if it has one, else
    its options as a regex alternation. Raises AssertionError when a chosen
    value is not among the options. Returns {name: value}, for substitute()."""
    end = time.time() if end is None else end
    start = prom.started if start is None else start
    chosen = chosen or {}
    with open(path) as f:
        dashboard = json.load(f)
    values = {}
    for var in dashboard.get("templating", {}).get("list", []):
        if var.get("type") != "query":
            continue
        query = var.get("query")
        query = substitute(query.get("query", "") if isinstance(query, dict) else query, values)
        options = _variable_options(prom, query, start, end)
        if var.get("regex"):
            pattern = re.compile(var["regex"].strip("/"))
            options = [m.group(1) if m.groups() else m.group(0)
                       for m in map(pattern.search, options) if m]
        options = sorted(set(options))
        pick = chosen.get(var["name"], "All")
        if pick == "All":
            values[var["name"]] = var["allValue"] if var.get("allValue") else _format_values(options)
            continue
        picks = [pick] if isinstance(pick, str) else list(pick)
        missing = [p for p in picks if p not in options]
        if missing:
            raise AssertionError("$%s: %s not among its options %s" % (var["name"], missing, options))
        values[var["name"]] = _format_values(picks)
    return values


def dashboard_queries(path, variables=None, select=None):
    """Yields (panel title, expr) for every target of every panel of the
    dashboard at path, variables substituted (see substitute()).

    select: optional predicate on the panel dict (e.g. by title prefix); only
    panels it accepts are yielded.
    """
    for panel in dashboard_panels(path):
        if select is not None and not select(panel):
            continue
        for target in panel.get("targets", []):
            if target.get("hide") or not target.get("expr"):
                continue
            yield panel.get("title", ""), substitute(target["expr"], variables)


def title_prefix(*prefixes):
    """A select predicate for panels whose title starts with one of prefixes."""
    return lambda panel: panel.get("title", "").startswith(prefixes)


def title_not_prefix(*prefixes):
    """A select predicate for panels whose title starts with none of prefixes."""
    return lambda panel: not panel.get("title", "").startswith(prefixes)


def _has_value(result):
    for series in result:
        samples = series.get("values") or ([series["value"]] if "value" in series else [])
        for _, v in samples:
            if not math.isnan(float(v)):
                return True
    return False


def panels_without_data(prom, dashboard_paths, variables=None, select=None, start=None,
                        end=None, step=1.0):
    """Runs every panel target as a range query over [start, end] (default: since
    Prometheus started, until now), as Grafana would, and returns the
    (dashboard file name, panel title, expr) of each target that returned no
    series or only NaN points. A refused expression is reported the same way,
    with the error appended to expr.
    """
    end = time.time() if end is None else end
    start = prom.started if start is None else start
    missing = []
    for path in dashboard_paths:
        for title, expr in dashboard_queries(path, variables, select):
            try:
                if not _has_value(prom.query_range(expr, start, end, step)):
                    missing.append((os.path.basename(path), title, expr))
            except RuntimeError as e:
                missing.append((os.path.basename(path), title, "%s  [error: %s]" % (expr, e)))
    return missing


# ------------------------------------------------------------------ promtool

def rules_check(paths, test_paths=()):
    """promtool check rules on the rule files in paths, then promtool test rules
    on the unit-test files (those in test_paths, and those in paths named
    *_test.yml or *_test.yaml; each run from its own folder, as its rule_files
    are relative). Returns promtool's combined output; raises AssertionError
    with it when a check or a test fails.
    """
    promtool = _binary("promtool")
    is_test = re.compile(r"_test\.ya?ml$")
    test_paths = list(test_paths) + [p for p in paths if is_test.search(p)]
    paths = [p for p in paths if not is_test.search(p)]
    outputs = []
    runs = [([promtool, "check", "rules"] + list(paths), None)]
    runs += [([promtool, "test", "rules", os.path.basename(t)], os.path.dirname(os.path.abspath(t)))
             for t in test_paths]
    for args, cwd in runs:
        r = subprocess.run(args, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True)
        outputs.append(r.stdout)
        if r.returncode != 0:
            raise AssertionError("%s failed:\n%s" % (" ".join(args[1:]), r.stdout))
    return "".join(outputs)


def config_check(path):
    """promtool check config on a prometheus.yml; returns its output, raises
    AssertionError when it fails."""
    r = subprocess.run([_binary("promtool"), "check", "config", path], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        raise AssertionError("promtool check config %s failed:\n%s" % (path, r.stdout))
    return r.stdout
