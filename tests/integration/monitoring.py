"""Monitoring helpers for integration tests: a real Prometheus server scraping
real paci processes, the Grafana dashboards' queries run against it, and
promtool on the alert rules.

Uses Debian's `prometheus` and `promtool` binaries and only the standard
library, so any test run by /usr/bin/python3 can import it:

    prom = monitoring.start_prometheus(workdir, ["127.0.0.1:9101", "127.0.0.1:9102"])
    try:
        prom.wait_for_targets_up(2, timeout=30)
        ...  # run something
        missing = monitoring.panels_without_data(prom, [dashboard], {"job": "my-job"})
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
    """Writes a prometheus.yml scraping the host:port targets with honor_labels
    (paci's series carry their own `job` label, the training job)."""
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
        "    honor_labels: true",
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
        sd_file = os.path.join(workdir, "sd-%s.json" % job["job_name"])
        with open(sd_file, "w") as f:
            json.dump(discovered.get(job["job_name"], []), f)
        job["file_sd_configs"] = [{"files": [sd_file], "refresh_interval": "1s"}]
    out = os.path.join(workdir, "prometheus.yml")
    with open(out, "w") as f:
        yaml.safe_dump(config, f, sort_keys=False)
    return out


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
