#!/usr/bin/python3
"""A test Kubernetes API server: plain HTTP on 127.0.0.1, everything in memory.

No kube-apiserver can run where the tests run, so this stands in for one and keeps
the semantics that clients (the real kubectl, the operator's C++ client) rely on:

* one global resourceVersion counter; every write bumps it; no-op writes do not;
* discovery (/version, /api, /api/v1, /apis, /apis/G/V; the legacy formats, which
  kubectl accepts when it asks for aggregated discovery) and an OpenAPI v3 index
  that tells kubectl the server validates fields (so it sends fieldValidation);
* core/v1 namespaces, pods, services, events, configmaps, secrets, serviceaccounts,
  nodes; coordination.k8s.io/v1 leases; apps/v1 deployments, policy/v1
  poddisruptionbudgets and rbac.authorization.k8s.io/v1 roles, rolebindings,
  clusterroles, clusterrolebindings (stored and validated: selectors that match
  their pod template, role references, immutable fields; no controller acts on
  them); apiextensions.k8s.io/v1
  customresourcedefinitions: creating a CRD serves its resource at once, with
  schema validation (types, ranges, enums, patterns, required), defaults, pruning
  and `fieldValidation=Strict`, printer columns and the status subresource;
* get, list (label and field selectors), create (generateName), update (409 on a
  stale resourceVersion), patch (merge, strategic merge, JSON patch, apply as a
  merge), delete (finalizers, deletionTimestamp, owner-reference cascade,
  propagationPolicy Orphan), `dryRun=All`; the status subresource; metadata.generation
  bumped only by spec changes; Table output for `kubectl get` (and `get -w`);
* Pod Security admission (tests/kube/pod_security.py): pods in a namespace labelled
  `pod-security.kubernetes.io/enforce: baseline|restricted` that break the level are
  refused (403 Forbidden, the real wording); `.../warn` answers with a Warning header;
* watch (`?watch=true`): chunked newline-delimited JSON events
  `{"type": "ADDED|MODIFIED|DELETED|BOOKMARK|ERROR", "object": {...}}`, replayed from
  `resourceVersion` out of a bounded history, or starting with ADDED for every
  current object; a resourceVersion older than the history gets HTTP 200 with one
  ERROR event (a Status with code 410, reason Expired) and the stream ends;
  `timeoutSeconds` ends a watch cleanly; `allowWatchBookmarks` adds BOOKMARKs.

Every error is a JSON `Status` (kind Status, apiVersion v1, status Failure, message,
reason, code, details{name, group, kind[, causes]}), worded like the real server's.

Test-only endpoints:
  POST /testing/drop-watches   close every open watch stream abruptly (no final chunk),
                               as a dropped connection would; answers {"dropped": N}
  POST /testing/compact        forget the event history: a watch or list from any
                               earlier resourceVersion gets 410 Expired
  GET  /testing/requests       {"total": N, "byVerb": {...}, "byPath": {"GET /api/v1/...": n}}
  POST /testing/reset-requests zero those counts
  GET  /testing/watches        {"open": N, "byResource": {"pods": n, ...}}: open watch streams
  POST /testing/inject-error   body {"verb": "update", "resource": "trainingjobs",
                               "subresource": "status", "code": 500, "count": 1}: the next
                               `count` matching requests fail with that code (verb,
                               resource, subresource optional; omitted matches any)

Not supported: authentication and authorisation (any bearer token or none is
accepted), protobuf, server-side apply field ownership (apply patches are merge
patches), deletecollection, aggregated discovery, pods/log.

Run: /usr/bin/python3 tests/kube/apiserver.py --port 0 --port-file FILE [--history N]
In-process: server = ApiServer(port=0).start(); server.url; ...; server.stop()
"""

import argparse
import base64
import collections
import copy
import datetime
import hashlib
import json
import os
import queue
import random
import re
import select
import signal
import socket
import sys
import threading
import time
import traceback
import urllib.parse
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pod_security  # tests/kube/pod_security.py: Pod Security admission

try:
    import yaml
except ImportError:  # YAML request bodies are a convenience only.
    yaml = None

SERVER_VERSION = {
    "major": "1", "minor": "32", "gitVersion": "v1.32.0-paci-test",
    "gitCommit": "0000000000000000000000000000000000000000", "gitTreeState": "clean",
    "buildDate": "2026-01-01T00:00:00Z", "goVersion": "go1.23.0", "compiler": "gc",
    "platform": "linux/amd64",
}

DNS1123_SUBDOMAIN = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
DNS1123_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
RBAC_NAME = r"[^/%]+"  # RBAC names are path segments ("system:controller:x" is one)
GENERATE_CHARS = "bcdfghjklmnpqrstvwxz2456789"
ALL_VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]


def now_rfc3339():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(value):
    try:
        text = value.replace("Z", "+00:00")
        parsed = datetime.datetime.fromisoformat(text)
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=datetime.timezone.utc)
        return parsed
    except (AttributeError, ValueError):
        return None


def human_duration(seconds):
    """k8s.io/apimachinery/pkg/util/duration.HumanDuration, as kubectl prints ages."""
    s = int(seconds)
    if s < -1:
        return "<invalid>"
    if s < 0:
        return "0s"
    if s < 120:
        return "%ds" % s
    minutes = s // 60
    if minutes < 10:
        return "%dm" % minutes if s % 60 == 0 else "%dm%ds" % (minutes, s % 60)
    if minutes < 180:
        return "%dm" % minutes
    hours = s // 3600
    if hours < 8:
        return "%dh" % hours if minutes % 60 == 0 else "%dh%dm" % (hours, minutes % 60)
    if hours < 48:
        return "%dh" % hours
    if hours < 24 * 8:
        return "%dd" % (hours // 24) if hours % 24 == 0 else "%dd%dh" % (hours // 24, hours % 24)
    if hours < 24 * 365 * 2:
        return "%dd" % (hours // 24)
    if hours < 24 * 365 * 8:
        days = (hours // 24) % 365
        years = hours // 24 // 365
        return "%dy" % years if days == 0 else "%dy%dd" % (years, days)
    return "%dy" % (hours // 24 // 365)


def go_value(value):
    """A value as Go's field.Error prints it (%v for numbers, %q for strings)."""
    if value is None:
        return '"null"'
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e21:
        return str(int(value))
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    return json.dumps(value, sort_keys=True)


# ---------------------------------------------------------------------------
# Errors


class ApiError(Exception):
    """An HTTP error answered as a metav1.Status."""

    def __init__(self, code, reason, message, details=None, headers=None):
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message
        self.details = details
        self.headers = headers or {}

    def status(self):
        body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": self.message, "reason": self.reason, "code": self.code}
        if self.details is not None:
            body["details"] = self.details
        return body


def status_object(code, reason, message, details=None):
    return ApiError(code, reason, message, details).status()


def not_found(rt, name):
    return ApiError(404, "NotFound", '%s "%s" not found' % (rt.group_resource, name),
                    {"name": name, "group": rt.group, "kind": rt.plural})


def bad_request(message):
    return ApiError(400, "BadRequest", message)


class FieldError:
    """k8s.io/apimachinery/pkg/util/validation/field.Error."""

    REASONS = {"Invalid value": "FieldValueInvalid", "Required value": "FieldValueRequired",
               "Unsupported value": "FieldValueNotSupported", "Forbidden": "FieldValueForbidden",
               "Too long": "FieldValueTooLong", "Too many": "FieldValueTooMany",
               "Duplicate value": "FieldValueDuplicate", "Not found": "FieldValueNotFound"}

    def __init__(self, kind, field, value=None, detail="", show_value=True):
        self.kind, self.field, self.value, self.detail = kind, field, value, detail
        self.show_value = show_value

    def body(self):
        text = self.kind
        if self.show_value:
            text += ": " + go_value(self.value)
        if self.detail:
            text += ": " + self.detail
        return text

    def __str__(self):
        return "%s: %s" % (self.field, self.body())

    def cause(self):
        return {"reason": self.REASONS.get(self.kind, "FieldValueInvalid"),
                "message": self.body(), "field": self.field}


def invalid(rt, name, errors):
    qualified = rt.kind if not rt.group else "%s.%s" % (rt.kind, rt.group)
    listed = str(errors[0]) if len(errors) == 1 else "[" + ", ".join(map(str, errors)) + "]"
    return ApiError(422, "Invalid", '%s "%s" is invalid: %s' % (qualified, name, listed),
                    {"name": name, "group": rt.group, "kind": rt.kind,
                     "causes": [e.cause() for e in errors]})


# ---------------------------------------------------------------------------
# Structural schema: pruning, defaulting, validation (apiextensions semantics)


def _type_name(value):
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _is_integer(value):
    if isinstance(value, bool):
        return False
    return isinstance(value, int) or (isinstance(value, float) and value.is_integer())


def _join(path, key):
    return key if not path else path + "." + key


def prune_and_default(value, schema, path, unknown):
    """Drops fields the schema does not declare (recording their paths in `unknown`)
    and fills in defaults, recursively; returns the new value."""
    if not isinstance(schema, dict):
        return value
    if isinstance(value, dict) and (schema.get("type") == "object" or "properties" in schema
                                    or "additionalProperties" in schema):
        props = schema.get("properties") or {}
        addl = schema.get("additionalProperties")
        preserve = schema.get("x-kubernetes-preserve-unknown-fields") is True
        result = {}
        for key, item in value.items():
            if key in props:
                result[key] = prune_and_default(item, props[key], _join(path, key), unknown)
            elif isinstance(addl, dict):
                result[key] = prune_and_default(item, addl, "%s[%s]" % (path, key), unknown)
            elif addl is True or preserve:
                result[key] = item
            else:
                unknown.append(_join(path, key))
        for key, sub in props.items():
            if key not in result and isinstance(sub, dict) and "default" in sub:
                result[key] = prune_and_default(copy.deepcopy(sub["default"]), sub,
                                                _join(path, key), unknown)
        return result
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [prune_and_default(item, schema["items"], "%s[%d]" % (path, i), unknown)
                for i, item in enumerate(value)]
    return value


def validate_value(value, schema, path, errors):
    """Appends a FieldError for each way `value` breaks `schema` (kube-openapi wording)."""
    if not isinstance(schema, dict):
        return
    if value is None:
        if schema.get("nullable") or not schema.get("type"):
            return
        errors.append(FieldError("Invalid value", path, "null",
                                 '%s in body must be of type %s: "null"' % (path, schema["type"])))
        return
    if schema.get("x-kubernetes-int-or-string"):
        if not (_is_integer(value) or isinstance(value, str)):
            errors.append(FieldError("Invalid value", path, _type_name(value),
                                     '%s in body must be of type integer,string: "%s"'
                                     % (path, _type_name(value))))
            return
    kind = schema.get("type")
    ok = True
    if kind == "object":
        ok = isinstance(value, dict)
    elif kind == "array":
        ok = isinstance(value, list)
    elif kind == "string":
        ok = isinstance(value, str)
    elif kind == "integer":
        ok = _is_integer(value)
    elif kind == "number":
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    elif kind == "boolean":
        ok = isinstance(value, bool)
    if not ok:
        errors.append(FieldError("Invalid value", path, _type_name(value),
                                 '%s in body must be of type %s: "%s"'
                                 % (path, kind, _type_name(value))))
        return
    if "enum" in schema and value not in schema["enum"]:
        allowed = ", ".join(json.dumps(v) for v in schema["enum"])
        errors.append(FieldError("Unsupported value", path, value, "supported values: " + allowed))
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        low, high = schema.get("minimum"), schema.get("maximum")
        if low is not None:
            if schema.get("exclusiveMinimum") is True and not value > low:
                errors.append(FieldError("Invalid value", path, value,
                                         "%s in body should be greater than %s" % (path, go_value(low))))
            elif schema.get("exclusiveMinimum") is not True and value < low:
                errors.append(FieldError("Invalid value", path, value,
                                         "%s in body should be greater than or equal to %s"
                                         % (path, go_value(low))))
        if high is not None:
            if schema.get("exclusiveMaximum") is True and not value < high:
                errors.append(FieldError("Invalid value", path, value,
                                         "%s in body should be less than %s" % (path, go_value(high))))
            elif schema.get("exclusiveMaximum") is not True and value > high:
                errors.append(FieldError("Invalid value", path, value,
                                         "%s in body should be less than or equal to %s"
                                         % (path, go_value(high))))
        step = schema.get("multipleOf")
        if step and (value / step) != int(value / step):
            errors.append(FieldError("Invalid value", path, value,
                                     "%s in body should be a multiple of %s" % (path, go_value(step))))
    if isinstance(value, str):
        if "minLength" in schema and len(value) < schema["minLength"]:
            errors.append(FieldError("Invalid value", path, value, "%s in body should be at least %d chars long"
                                     % (path, schema["minLength"])))
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            errors.append(FieldError("Too long", path, value, "may not be longer than %d"
                                     % schema["maxLength"], show_value=False))
        if "pattern" in schema and not re.search(schema["pattern"], value):
            errors.append(FieldError("Invalid value", path, value, "%s in body should match '%s'"
                                     % (path, schema["pattern"])))
        if schema.get("format") == "date-time" and parse_time(value) is None:
            errors.append(FieldError("Invalid value", path, value, '%s in body must be of type date-time: %s'
                                     % (path, json.dumps(value))))
    if isinstance(value, list):
        if "minItems" in schema and len(value) < schema["minItems"]:
            errors.append(FieldError("Invalid value", path, len(value), "%s in body should have at least %d items"
                                     % (path, schema["minItems"])))
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            errors.append(FieldError("Too many", path, len(value), "must have at most %d items"
                                     % schema["maxItems"]))
        for i, item in enumerate(value):
            validate_value(item, schema.get("items"), "%s[%d]" % (path, i), errors)
        if schema.get("x-kubernetes-list-type") == "map":
            keys = schema.get("x-kubernetes-list-map-keys") or []
            seen = set()
            for i, item in enumerate(value):
                if isinstance(item, dict):
                    key = tuple(json.dumps(item.get(k)) for k in keys)
                    if key in seen:
                        errors.append(FieldError("Duplicate value", "%s[%d]" % (path, i),
                                                 {k: item.get(k) for k in keys}))
                    seen.add(key)
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        for key in schema.get("required") or []:
            if key not in value:
                errors.append(FieldError("Required value", _join(path, key), show_value=False))
        for key, item in value.items():
            if key in props:
                validate_value(item, props[key], _join(path, key), errors)
            elif isinstance(schema.get("additionalProperties"), dict):
                validate_value(item, schema["additionalProperties"], "%s[%s]" % (path, key), errors)
        if "minProperties" in schema and len(value) < schema["minProperties"]:
            errors.append(FieldError("Invalid value", path, len(value), "%s in body should have at least %d properties"
                                     % (path, schema["minProperties"])))
        if "maxProperties" in schema and len(value) > schema["maxProperties"]:
            errors.append(FieldError("Too many", path, len(value), "must have at most %d items"
                                     % schema["maxProperties"]))


# ---------------------------------------------------------------------------
# Patches


def merge_patch(target, patch):
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


# Merge keys of the lists kubectl's strategic merge patches touch (from the Go types).
SMP_MERGE_KEYS = {
    "containers": "name", "initContainers": "name", "ephemeralContainers": "name",
    "env": "name", "volumes": "name", "volumeMounts": "mountPath", "ports": "containerPort",
    "conditions": "type", "ownerReferences": "uid", "imagePullSecrets": "name",
    "containerStatuses": "name", "hostAliases": "ip", "envFrom": None, "finalizers": None,
}


def strategic_merge_patch(target, patch):
    """A strategic merge patch, close enough for kubectl: lists of named objects
    merge by their key, `$patch: delete|replace` and `$retainKeys` are honoured,
    `$setElementOrder` is ignored; other lists are replaced."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    directive = patch.get("$patch")
    if directive == "delete":
        return None
    if directive == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if not k.startswith("$")}
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if key.startswith("$"):
            continue
        if value is None:
            result.pop(key, None)
            continue
        merge_key = SMP_MERGE_KEYS.get(key)
        current = result.get(key)
        if (isinstance(value, list) and merge_key and isinstance(current, list)
                and all(isinstance(x, dict) for x in current + value)):
            merged = [copy.deepcopy(x) for x in current]
            for item in value:
                index = next((i for i, x in enumerate(merged)
                              if x.get(merge_key) == item.get(merge_key)), None)
                if item.get("$patch") == "delete":
                    if index is not None:
                        merged.pop(index)
                elif index is not None:
                    merged[index] = strategic_merge_patch(merged[index], item)
                else:
                    merged.append(strategic_merge_patch({}, item))
            result[key] = merged
        else:
            patched = strategic_merge_patch(current, value)
            if patched is None:
                result.pop(key, None)
            else:
                result[key] = patched
    for key, value in patch.items():
        if key.startswith("$deleteFromPrimitiveList/") and isinstance(value, list):
            field = key.split("/", 1)[1]
            if isinstance(result.get(field), list):
                result[field] = [x for x in result[field] if x not in value]
    if isinstance(patch.get("$retainKeys"), list):
        result = {k: v for k, v in result.items() if k in patch["$retainKeys"]}
    return result


def _pointer(path):
    if path == "":
        return []
    if not path.startswith("/"):
        raise bad_request("invalid JSON pointer: %s" % path)
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def json_patch(doc, operations):
    """RFC 6902 JSON patch."""
    if not isinstance(operations, list):
        raise bad_request("json patch must be a list of operations")
    doc = copy.deepcopy(doc)

    def parent(parts):
        node = doc
        for part in parts[:-1]:
            if isinstance(node, list):
                node = node[int(part)]
            else:
                node = node[part]
        return node

    def get(parts):
        node = doc
        for part in parts:
            node = node[int(part)] if isinstance(node, list) else node[part]
        return node

    for op in operations:
        try:
            kind, parts = op["op"], _pointer(op["path"])
            if kind in ("add", "replace"):
                if not parts:
                    doc = copy.deepcopy(op["value"])
                    continue
                node, last = parent(parts), parts[-1]
                if isinstance(node, list):
                    if last == "-":
                        node.append(copy.deepcopy(op["value"]))
                    elif kind == "add":
                        node.insert(int(last), copy.deepcopy(op["value"]))
                    else:
                        node[int(last)] = copy.deepcopy(op["value"])
                else:
                    if kind == "replace" and last not in node:
                        raise KeyError(last)
                    node[last] = copy.deepcopy(op["value"])
            elif kind == "remove":
                node, last = parent(parts), parts[-1]
                if isinstance(node, list):
                    node.pop(int(last))
                else:
                    del node[last]
            elif kind in ("move", "copy"):
                source = _pointer(op["from"])
                value = copy.deepcopy(get(source))
                if kind == "move":
                    node = parent(source)
                    if isinstance(node, list):
                        node.pop(int(source[-1]))
                    else:
                        del node[source[-1]]
                doc = json_patch(doc, [{"op": "add", "path": op["path"], "value": value}])
            elif kind == "test":
                if get(parts) != op["value"]:
                    raise ApiError(422, "Invalid", "the server rejected our request due to an error "
                                   "in our request: testing value %s failed" % op["path"])
            else:
                raise bad_request("unknown json patch operation %r" % kind)
        except ApiError:
            raise
        except (KeyError, IndexError, ValueError, TypeError) as error:
            raise ApiError(422, "Invalid", "the server rejected our request due to an error in our "
                           "request: json patch %s operation does not apply: %s" % (op.get("op"), error))
    return doc


# ---------------------------------------------------------------------------
# Selectors


def _split_selector(text):
    parts, depth, current = [], 0, ""
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += ch
    parts.append(current)
    return [p.strip() for p in parts if p.strip()]


LABEL_KEY = r"[A-Za-z0-9][-A-Za-z0-9_./]*"


def parse_label_selector(text):
    """Returns a predicate over a labels dict."""
    requirements = []
    for part in _split_selector(text or ""):
        m = re.fullmatch(r"(%s)\s+(in|notin)\s*\(([^)]*)\)" % LABEL_KEY, part)
        if m:
            values = {v.strip() for v in m.group(3).split(",") if v.strip()}
            key, op = m.group(1), m.group(2)
            if op == "in":
                requirements.append(lambda l, k=key, v=values: l.get(k) in v)
            else:
                requirements.append(lambda l, k=key, v=values: l.get(k) not in v)
            continue
        m = re.fullmatch(r"(%s)\s*(==|!=|=)\s*([-A-Za-z0-9_.]*)" % LABEL_KEY, part)
        if m:
            key, op, value = m.groups()
            if op == "!=":
                requirements.append(lambda l, k=key, v=value: l.get(k) != v)
            else:
                requirements.append(lambda l, k=key, v=value: k in l and l[k] == v)
            continue
        m = re.fullmatch(r"(!?)\s*(%s)" % LABEL_KEY, part)
        if m:
            negate, key = m.groups()
            if negate:
                requirements.append(lambda l, k=key: k not in l)
            else:
                requirements.append(lambda l, k=key: k in l)
            continue
        raise bad_request("unable to parse requirement: %s" % part)
    return lambda labels: all(r(labels or {}) for r in requirements)


def label_selector_matches(selector, labels):
    """Whether a metav1.LabelSelector (matchLabels, matchExpressions) selects `labels`."""
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


def field_value(obj, path):
    node = obj
    for part in path.split("."):
        if not isinstance(node, dict):
            return ""
        node = node.get(part)
    if node is None:
        return ""
    if isinstance(node, bool):
        return "true" if node else "false"
    return str(node)


def parse_field_selector(text):
    requirements = []
    for part in _split_selector(text or ""):
        m = re.fullmatch(r"([A-Za-z0-9_.]+)\s*(==|!=|=)\s*(.*)", part)
        if not m:
            raise bad_request('invalid field selector: "%s"' % part)
        key, op, value = m.groups()
        if op == "!=":
            requirements.append(lambda o, k=key, v=value: field_value(o, k) != v)
        else:
            requirements.append(lambda o, k=key, v=value: field_value(o, k) == v)
    return lambda obj: all(r(obj) for r in requirements)


# ---------------------------------------------------------------------------
# Resource types


class ResourceType:
    """One served resource: where it lives, its names, and how it is checked."""

    def __init__(self, group, version, plural, kind, namespaced, singular=None, short_names=(),
                 categories=(), status_subresource=False, list_kind=None, schema=None,
                 printer_columns=None, crd_name=None, name_pattern=DNS1123_SUBDOMAIN):
        self.group, self.version, self.plural, self.kind = group, version, plural, kind
        self.namespaced = namespaced
        self.singular = singular or kind.lower()
        self.short_names = list(short_names)
        self.categories = list(categories)
        self.status_subresource = status_subresource
        self.list_kind = list_kind or kind + "List"
        self.schema = schema
        self.printer_columns = printer_columns
        self.crd_name = crd_name
        self.name_pattern = name_pattern

    @property
    def api_version(self):
        return self.version if not self.group else "%s/%s" % (self.group, self.version)

    @property
    def group_resource(self):
        return self.plural if not self.group else "%s.%s" % (self.plural, self.group)

    @property
    def key(self):
        return (self.group, self.plural)

    def discovery(self):
        entries = [{"name": self.plural, "singularName": self.singular, "namespaced": self.namespaced,
                    "kind": self.kind, "verbs": ALL_VERBS}]
        if self.short_names:
            entries[0]["shortNames"] = self.short_names
        if self.categories:
            entries[0]["categories"] = self.categories
        if self.status_subresource:
            entries.append({"name": self.plural + "/status", "singularName": "",
                            "namespaced": self.namespaced, "kind": self.kind,
                            "verbs": ["get", "patch", "update"]})
        return entries


BUILTIN_TYPES = [
    ResourceType("", "v1", "namespaces", "Namespace", False, short_names=["ns"],
                 status_subresource=True, name_pattern=DNS1123_LABEL),
    ResourceType("", "v1", "pods", "Pod", True, short_names=["po"], categories=["all"],
                 status_subresource=True),
    ResourceType("", "v1", "services", "Service", True, short_names=["svc"], categories=["all"],
                 status_subresource=True, name_pattern=DNS1123_LABEL),
    ResourceType("", "v1", "events", "Event", True, short_names=["ev"]),
    ResourceType("", "v1", "configmaps", "ConfigMap", True, short_names=["cm"]),
    ResourceType("", "v1", "secrets", "Secret", True),
    ResourceType("", "v1", "serviceaccounts", "ServiceAccount", True, short_names=["sa"]),
    ResourceType("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim", True, short_names=["pvc"],
                 status_subresource=True),
    ResourceType("", "v1", "nodes", "Node", False, short_names=["no"], status_subresource=True),
    ResourceType("coordination.k8s.io", "v1", "leases", "Lease", True),
    # What a Helm chart or kustomize installs: stored and validated (selectors,
    # role references, immutable fields), but no controller acts on them.
    ResourceType("apps", "v1", "deployments", "Deployment", True, short_names=["deploy"],
                 categories=["all"], status_subresource=True),
    ResourceType("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", True,
                 short_names=["pdb"], status_subresource=True),
    ResourceType("rbac.authorization.k8s.io", "v1", "roles", "Role", True, name_pattern=RBAC_NAME),
    ResourceType("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding", True,
                 name_pattern=RBAC_NAME),
    ResourceType("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", False,
                 name_pattern=RBAC_NAME),
    ResourceType("rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding", False,
                 name_pattern=RBAC_NAME),
    ResourceType("apiextensions.k8s.io", "v1", "customresourcedefinitions",
                 "CustomResourceDefinition", False, short_names=["crd", "crds"],
                 status_subresource=True),
]


def meta(obj):
    return obj.setdefault("metadata", {})


def parse_resource_version(text):
    """The resourceVersion query parameter as an int; None for "" and "0" (any)."""
    if not text or text == "0":
        return None
    try:
        return int(text)
    except ValueError:
        raise ApiError(400, "BadRequest", 'resourceVersion: Invalid value: "%s": must be a number' % text)


class Watch:
    """One open watch stream: what it selects, and the queue the store feeds."""

    DROP = object()  # abrupt close
    END = object()   # clean close

    def __init__(self, rt, namespace, name, labels, fields):
        self.rt, self.namespace, self.name = rt, namespace, name
        self.labels, self.fields = labels, fields
        self.queue = queue.Queue()

    def selects(self, obj):
        if obj is None:
            return False
        m = obj.get("metadata", {})
        if self.namespace and m.get("namespace") != self.namespace:
            return False
        if self.name and m.get("name") != self.name:
            return False
        return self.labels(m.get("labels")) and self.fields(obj)

    def offer(self, key, etype, obj, old):
        """Queues the event as this watch sees it (label changes turn into ADDED/DELETED)."""
        if key != self.rt.key:
            return
        now, before = self.selects(obj), self.selects(old)
        if etype == "ADDED" and now:
            self.queue.put(("ADDED", obj))
        elif etype == "DELETED" and now:
            self.queue.put(("DELETED", obj))
        elif etype == "MODIFIED":
            if now and before:
                self.queue.put(("MODIFIED", obj))
            elif now:
                self.queue.put(("ADDED", obj))
            elif before:
                self.queue.put(("DELETED", obj))


class Store:
    """Every object, the event history and the open watches, under one lock."""

    def __init__(self, history=1000):
        self.lock = threading.RLock()
        self.rv = 0
        self.history = collections.deque()
        self.history_limit = max(1, history)
        self.compacted_rv = 0  # events up to this resourceVersion are forgotten
        self.types = {}        # (group, version, plural) -> ResourceType
        self.objects = {}      # (group, plural) -> {(namespace, name): object}
        self.watches = set()
        for rt in BUILTIN_TYPES:
            self.add_type(rt)
        for ns in ("default", "kube-system", "kube-public", "kube-node-lease"):
            self.create(self.types[("", "v1", "namespaces")], None,
                        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}, {})

    # -- types ---------------------------------------------------------------

    def add_type(self, rt):
        self.types[(rt.group, rt.version, rt.plural)] = rt
        self.objects.setdefault(rt.key, {})

    def find_type(self, group, version, plural):
        return self.types.get((group, version, plural))

    def group_versions(self):
        """{group: [versions]} in registration order."""
        result = collections.OrderedDict()
        for (group, version, _), _rt in self.types.items():
            versions = result.setdefault(group, [])
            if version not in versions:
                versions.append(version)
        return result

    # -- events --------------------------------------------------------------

    def _commit(self, rt, etype, obj, old):
        """Bumps the resourceVersion, stores or removes `obj`, records and fans out the event."""
        self.rv += 1
        meta(obj)["resourceVersion"] = str(self.rv)
        m = obj["metadata"]
        key = (m.get("namespace") if rt.namespaced else None, m["name"])
        if etype == "DELETED":
            self.objects[rt.key].pop(key, None)
        else:
            self.objects[rt.key][key] = obj
        snapshot = copy.deepcopy(obj)
        old_snapshot = copy.deepcopy(old) if old is not None else None
        self.history.append((self.rv, rt.key, etype, snapshot, old_snapshot))
        while len(self.history) > self.history_limit:
            self.compacted_rv = self.history.popleft()[0]
        for watch in list(self.watches):
            watch.offer(rt.key, etype, snapshot, old_snapshot)
        return obj

    def compact(self):
        with self.lock:
            self.history.clear()
            self.compacted_rv = self.rv

    def too_old(self, rv):
        return rv < self.compacted_rv

    def expired(self, rv):
        return ApiError(410, "Expired", "too old resource version: %d (%d)" % (rv, self.compacted_rv + 1))

    def open_watch(self, watch, since):
        """Registers `watch` and queues what it must replay first; raises 410 if `since` is too old."""
        with self.lock:
            if since is None:
                for obj in sorted(self.objects[watch.rt.key].values(),
                                  key=lambda o: int(o["metadata"]["resourceVersion"])):
                    if watch.selects(obj):
                        watch.queue.put(("ADDED", copy.deepcopy(obj)))
            else:
                if self.too_old(since):
                    raise self.expired(since)
                for rv, key, etype, obj, old in self.history:
                    if rv > since:
                        watch.offer(key, etype, obj, old)
            self.watches.add(watch)

    def close_watch(self, watch):
        with self.lock:
            self.watches.discard(watch)

    def drop_watches(self):
        with self.lock:
            watches = list(self.watches)
            self.watches.clear()
        for watch in watches:
            watch.queue.put((Watch.DROP, None))
        return len(watches)

    # -- reads ---------------------------------------------------------------

    def get(self, rt, namespace, name):
        with self.lock:
            obj = self.objects[rt.key].get((namespace if rt.namespaced else None, name))
            if obj is None:
                raise not_found(rt, name)
            return copy.deepcopy(obj)

    def list(self, rt, namespace, labels, fields):
        with self.lock:
            items = [copy.deepcopy(o) for (ns, _), o in sorted(self.objects[rt.key].items(),
                                                              key=lambda kv: (kv[0][0] or "", kv[0][1]))
                     if (not namespace or ns == namespace)
                     and labels(o["metadata"].get("labels")) and fields(o)]
            return items, str(self.rv)

    def find_uid(self, uid):
        for objects in self.objects.values():
            for obj in objects.values():
                if obj["metadata"].get("uid") == uid:
                    return obj
        return None

    # -- writes --------------------------------------------------------------

    def _check_name(self, rt, name):
        if len(name) > 253 or not re.fullmatch(rt.name_pattern, name):
            if rt.name_pattern == DNS1123_LABEL:
                detail = ("a lowercase RFC 1123 label must consist of lower case alphanumeric characters or "
                          "'-', and must start and end with an alphanumeric character (e.g. 'my-name',  or "
                          "'123-abc', regex used for validation is '%s')" % DNS1123_LABEL)
            else:
                detail = ("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, "
                          "'-' or '.', and must start and end with an alphanumeric character (e.g. "
                          "'example.com', regex used for validation is '%s')" % DNS1123_SUBDOMAIN)
            raise invalid(rt, name, [FieldError("Invalid value", "metadata.name", name, detail)])

    def _check_body(self, rt, body):
        if not isinstance(body, dict):
            raise bad_request("the body of the request was in an unknown format")
        if body.get("kind") and body["kind"] != rt.kind:
            raise bad_request("%s in version \"%s\" cannot be handled as a %s: the object kind is %s"
                              % (rt.kind, rt.version, rt.kind, body["kind"]))
        if body.get("apiVersion") and body["apiVersion"] != rt.api_version:
            raise bad_request("the API version in the data (%s) does not match the expected API version (%s)"
                              % (body["apiVersion"], rt.api_version))
        if not isinstance(body.get("metadata", {}), dict):
            raise bad_request("metadata must be an object")

    def _shape(self, rt, obj, validation, warnings):
        """Schema pruning, defaulting and validation of a custom resource; built-in
        types get their few server-side defaults."""
        name = obj["metadata"].get("name", "")
        if rt.schema is not None:
            unknown = []
            body = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind", "metadata")}
            shaped = prune_and_default(body, rt.schema, "", unknown)
            if unknown:
                listed = ", ".join('unknown field "%s"' % u for u in unknown)
                if validation == "Strict":
                    raise bad_request('%s in version "%s" cannot be handled as a %s: strict decoding error: %s'
                                      % (rt.kind, rt.version, rt.kind, listed))
                if validation != "Ignore":
                    warnings.extend('unknown field "%s"' % u for u in unknown)
            errors = []
            validate_value(shaped, rt.schema, "", errors)
            if errors:
                raise invalid(rt, name, errors)
            shaped.update({k: obj[k] for k in ("apiVersion", "kind", "metadata") if k in obj})
            obj.clear()
            obj.update(shaped)
        elif rt.key == ("", "pods"):
            spec = obj.setdefault("spec", {})
            containers = spec.get("containers")
            if not isinstance(containers, list) or not containers:
                raise invalid(rt, name, [FieldError("Required value", "spec.containers", show_value=False)])
            for i, c in enumerate(containers):
                if not isinstance(c, dict) or not c.get("name"):
                    raise invalid(rt, name, [FieldError("Required value", "spec.containers[%d].name" % i,
                                                        show_value=False)])
            spec.setdefault("restartPolicy", "Always")
            spec.setdefault("terminationGracePeriodSeconds", 30)
            spec.setdefault("dnsPolicy", "ClusterFirst")
            spec.setdefault("schedulerName", "default-scheduler")
        elif rt.key == ("", "services"):
            spec = obj.setdefault("spec", {})
            spec.setdefault("type", "ClusterIP")
        elif rt.key == ("", "secrets"):
            # stringData is write-only: merged into data (base64), then dropped.
            data = obj.setdefault("data", {}) or {}
            for key, value in (obj.pop("stringData", None) or {}).items():
                data[key] = base64.b64encode(str(value).encode()).decode()
            obj["data"] = data
            obj.setdefault("type", "Opaque")
        elif rt.key == ("", "persistentvolumeclaims"):
            spec = obj.setdefault("spec", {})
            if not spec.get("accessModes"):
                raise invalid(rt, name, [FieldError("Required value", "spec.accessModes", show_value=False)])
            spec.setdefault("volumeMode", "Filesystem")
            obj.setdefault("status", {}).setdefault("phase", "Pending")
        elif rt.key == ("apiextensions.k8s.io", "customresourcedefinitions"):
            self._check_crd(rt, obj)

    def _validate_builtin(self, rt, obj, old):
        """The real server's validation of the workload and RBAC types, as far as a
        chart's objects need it: a Deployment's or PodDisruptionBudget's selector
        (required, matching the pod template, immutable), RBAC role references
        (kind, name; immutable); the real wording."""
        name = obj["metadata"].get("name", "")
        spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
        errors = []
        if rt.key == ("apps", "deployments"):
            selector = spec.get("selector")
            labels = ((spec.get("template") or {}).get("metadata") or {}).get("labels") or {}
            if not isinstance(selector, dict) or not (selector.get("matchLabels") or
                                                      selector.get("matchExpressions")):
                errors.append(FieldError("Required value", "spec.selector", show_value=False))
            elif not label_selector_matches(selector, labels):
                errors.append(FieldError(
                    "Invalid value", "spec.template.metadata.labels", labels,
                    "`selector` does not match template `labels`"))
            containers = ((spec.get("template") or {}).get("spec") or {}).get("containers")
            if not isinstance(containers, list) or not containers:
                errors.append(FieldError("Required value", "spec.template.spec.containers", show_value=False))
            if old is not None and selector != (old.get("spec") or {}).get("selector"):
                errors.append(FieldError("Invalid value", "spec.selector", selector,
                                         "field is immutable"))
            spec.setdefault("replicas", 1)
            spec.setdefault("strategy", {"type": "RollingUpdate",
                                         "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}})
        elif rt.key == ("policy", "poddisruptionbudgets"):
            if "minAvailable" in spec and "maxUnavailable" in spec:
                errors.append(FieldError("Invalid value", "spec", spec,
                                         "minAvailable and maxUnavailable cannot be both set"))
        elif rt.key in (("rbac.authorization.k8s.io", "rolebindings"),
                        ("rbac.authorization.k8s.io", "clusterrolebindings")):
            ref = obj.get("roleRef") if isinstance(obj.get("roleRef"), dict) else {}
            kinds = ["Role", "ClusterRole"] if rt.kind == "RoleBinding" else ["ClusterRole"]
            if ref.get("kind") not in kinds:
                errors.append(FieldError("Unsupported value", "roleRef.kind", ref.get("kind", ""),
                                         "supported values: %s" % ", ".join('"%s"' % k for k in kinds)))
            if not ref.get("name"):
                errors.append(FieldError("Required value", "roleRef.name", show_value=False))
            if old is not None and ref != old.get("roleRef"):
                errors.append(FieldError("Invalid value", "roleRef", ref, "cannot change roleRef"))
            for i, subject in enumerate(obj.get("subjects") or []):
                if subject.get("kind") == "ServiceAccount" and not subject.get("namespace"):
                    errors.append(FieldError("Required value", "subjects[%d].namespace" % i, show_value=False))
        if errors:
            raise invalid(rt, name, errors)

    def _admit(self, rt, obj, old, warnings):
        """Pod Security admission (tests/kube/pod_security.py) of a pod or namespace
        being created (old None) or updated; raises the refusal, appends warnings."""
        if rt.key == ("", "pods"):
            m = obj["metadata"]
            namespace = self.objects[("", "namespaces")].get((None, m.get("namespace")))
            labels = (namespace or {}).get("metadata", {}).get("labels")
            refusal, found = pod_security.admit_pod(labels, obj, old)
            if refusal:
                raise ApiError(403, "Forbidden", 'pods "%s" is forbidden: %s' % (m["name"], refusal),
                               {"name": m["name"], "kind": "pods"})
            warnings.extend(found)
        elif rt.key == ("", "namespaces"):
            m = obj["metadata"]
            old_labels = old["metadata"].get("labels") if old is not None else None
            errors = pod_security.label_errors(m.get("labels"), old_labels)
            if errors:
                raise invalid(rt, m["name"], [FieldError("Invalid value", field, value, detail)
                                              for field, value, detail in errors])
            if old is not None:
                pods = [p for (ns, _), p in sorted(self.objects[("", "pods")].items()) if ns == m["name"]]
                warnings.extend(pod_security.namespace_update_warnings(m["name"], m.get("labels"),
                                                                       old_labels, pods))

    def create(self, rt, namespace, body, query, dry_run=False, warnings=None):
        warnings = [] if warnings is None else warnings
        self._check_body(rt, body)
        obj = copy.deepcopy(body)
        m = meta(obj)
        with self.lock:
            if rt.namespaced:
                if m.get("namespace") and m["namespace"] != namespace:
                    raise bad_request("the namespace of the provided object does not match the namespace "
                                      "sent on the request")
                m["namespace"] = namespace
                if (None, namespace) not in self.objects[("", "namespaces")]:
                    raise ApiError(404, "NotFound", 'namespaces "%s" not found' % namespace,
                                   {"name": namespace, "kind": "namespaces"})
            else:
                m.pop("namespace", None)
            if not m.get("name"):
                if m.get("generateName"):
                    for _ in range(20):
                        m["name"] = m["generateName"] + "".join(random.choice(GENERATE_CHARS)
                                                                for _ in range(5))
                        if (namespace if rt.namespaced else None, m["name"]) not in self.objects[rt.key]:
                            break
                else:
                    raise invalid(rt, "", [FieldError("Required value", "metadata.name", show_value=False,
                                                      detail="name or generateName is required")])
            name = m["name"]
            self._check_name(rt, name)
            if (namespace if rt.namespaced else None, name) in self.objects[rt.key]:
                raise ApiError(409, "AlreadyExists", '%s "%s" already exists' % (rt.group_resource, name),
                               {"name": name, "group": rt.group, "kind": rt.plural})
            obj["apiVersion"], obj["kind"] = rt.api_version, rt.kind
            if rt.status_subresource:
                obj.pop("status", None)
            for key in ("deletionTimestamp", "deletionGracePeriodSeconds", "resourceVersion", "managedFields"):
                m.pop(key, None)
            m["uid"] = str(uuid.uuid4())
            m["creationTimestamp"] = now_rfc3339()
            m["generation"] = 1
            self._shape(rt, obj, query.get("fieldValidation", "Warn"), warnings)
            self._validate_builtin(rt, obj, None)
            self._admit(rt, obj, None, warnings)
            if rt.key == ("", "pods"):
                obj["status"] = {"phase": "Pending", "qosClass": "BestEffort"}
            elif rt.key == ("", "namespaces"):
                obj["status"] = {"phase": "Active"}
                obj.setdefault("spec", {"finalizers": ["kubernetes"]})
            elif rt.key == ("", "services"):
                obj["status"] = {"loadBalancer": {}}
                if obj["spec"].get("clusterIP") != "None":
                    obj["spec"]["clusterIP"] = "10.96.%d.%d" % (random.randint(0, 255), random.randint(1, 254))
                    obj["spec"]["clusterIPs"] = [obj["spec"]["clusterIP"]]
            elif rt.crd_name is None and rt.key == ("apiextensions.k8s.io", "customresourcedefinitions"):
                obj["status"] = self._crd_status(obj)
            if dry_run:
                m["resourceVersion"] = str(self.rv)
                return copy.deepcopy(obj)
            self._commit(rt, "ADDED", obj, None)
            if rt.key == ("apiextensions.k8s.io", "customresourcedefinitions"):
                self._serve_crd(obj)
            return copy.deepcopy(obj)

    def update(self, rt, namespace, name, body, query, subresource=None, dry_run=False, warnings=None,
               allow_create=False):
        """PUT semantics: the body replaces the object (or only its status for /status)."""
        warnings = [] if warnings is None else warnings
        self._check_body(rt, body)
        with self.lock:
            key = (namespace if rt.namespaced else None, name)
            current = self.objects[rt.key].get(key)
            if current is None:
                if allow_create:
                    body = copy.deepcopy(body)
                    meta(body).setdefault("name", name)
                    return self.create(rt, namespace, body, query, dry_run, warnings), True
                raise not_found(rt, name)
            bm = body.get("metadata") or {}
            if bm.get("name") and bm["name"] != name:
                raise bad_request("the name of the object (%s) does not match the name on the URL (%s)"
                                  % (bm["name"], name))
            if bm.get("resourceVersion") and bm["resourceVersion"] != current["metadata"]["resourceVersion"]:
                raise ApiError(409, "Conflict", 'Operation cannot be fulfilled on %s "%s": the object has been '
                               "modified; please apply your changes to the latest version and try again"
                               % (rt.group_resource, name),
                               {"name": name, "group": rt.group, "kind": rt.plural})
            if bm.get("uid") and bm["uid"] != current["metadata"]["uid"]:
                raise ApiError(409, "Conflict", 'Operation cannot be fulfilled on %s "%s": Precondition failed: '
                               "UID in precondition: %s, UID in object meta: %s"
                               % (rt.group_resource, name, bm["uid"], current["metadata"]["uid"]),
                               {"name": name, "group": rt.group, "kind": rt.plural})
            cm = current["metadata"]
            if subresource == "status":
                obj = copy.deepcopy(current)
                if "status" in body:
                    obj["status"] = copy.deepcopy(body["status"])
                else:
                    obj.pop("status", None)
            else:
                obj = copy.deepcopy(body)
                obj["apiVersion"], obj["kind"] = rt.api_version, rt.kind
                m = meta(obj)
                for k in ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds",
                          "namespace", "generation"):
                    if k in cm:
                        m[k] = cm[k]
                    else:
                        m.pop(k, None)
                m["name"] = name
                m.pop("managedFields", None)
                if rt.status_subresource:
                    if "status" in current:
                        obj["status"] = copy.deepcopy(current["status"])
                    else:
                        obj.pop("status", None)
                if cm.get("deletionTimestamp"):
                    added = set(m.get("finalizers") or []) - set(cm.get("finalizers") or [])
                    if added:
                        raise invalid(rt, name, [FieldError(
                            "Forbidden", "metadata.finalizers", show_value=False,
                            detail="no new finalizers can be added if the object is being deleted, found new "
                                   "finalizers []string{%s}" % ", ".join(json.dumps(f) for f in sorted(added)))])
            meta(obj)["resourceVersion"] = cm["resourceVersion"]
            self._shape(rt, obj, query.get("fieldValidation", "Warn"), warnings)
            if subresource is None:
                self._validate_builtin(rt, obj, current)
                self._admit(rt, obj, current, warnings)
            if rt.key == ("apiextensions.k8s.io", "customresourcedefinitions"):
                obj["status"] = self._crd_status(obj)

            def essence(o):
                return {k: v for k, v in o.items() if k not in ("metadata", "status")}

            if essence(obj) != essence(current):
                meta(obj)["generation"] = int(cm.get("generation", 1)) + 1
            if obj == current:
                return copy.deepcopy(current), False
            if dry_run:
                return copy.deepcopy(obj), False
            if obj["metadata"].get("deletionTimestamp") and not obj["metadata"].get("finalizers"):
                self._remove(rt, obj, current, "Background")
            else:
                self._commit(rt, "MODIFIED", obj, current)
                if rt.key == ("apiextensions.k8s.io", "customresourcedefinitions"):
                    self._serve_crd(obj)
            return copy.deepcopy(obj), False

    def patch(self, rt, namespace, name, patch, content_type, query, subresource=None, dry_run=False,
              warnings=None):
        with self.lock:
            key = (namespace if rt.namespaced else None, name)
            current = self.objects[rt.key].get(key)
            apply = content_type.startswith("application/apply-patch")
            if current is None:
                if apply and isinstance(patch, dict):
                    body = copy.deepcopy(patch)
                    meta(body)["name"] = name
                    return self.create(rt, namespace, body, query, dry_run, warnings), True
                raise not_found(rt, name)
            if content_type.startswith("application/json-patch+json"):
                patched = json_patch(current, patch)
            elif content_type.startswith("application/strategic-merge-patch+json"):
                if rt.schema is not None:
                    raise ApiError(415, "UnsupportedMediaType", "the body of the request was in an unknown "
                                   "format - accepted media types include: application/json-patch+json, "
                                   "application/merge-patch+json, application/apply-patch+yaml")
                if not isinstance(patch, dict):
                    raise bad_request("strategic merge patch must be an object")
                patched = strategic_merge_patch(current, patch)
            elif content_type.startswith("application/merge-patch+json") or apply:
                if not isinstance(patch, dict):
                    raise bad_request("merge patch must be an object")
                patched = merge_patch(current, patch)
            else:
                raise ApiError(415, "UnsupportedMediaType", "the body of the request was in an unknown format - "
                               "accepted media types include: application/json-patch+json, "
                               "application/merge-patch+json, application/apply-patch+yaml, "
                               "application/strategic-merge-patch+json")
            if not isinstance(patched, dict):
                raise bad_request("the patched object is not an object")
            pm = patched.setdefault("metadata", {})
            if not pm.get("resourceVersion"):
                pm["resourceVersion"] = current["metadata"]["resourceVersion"]
            return self.update(rt, namespace, name, patched, query, subresource, dry_run, warnings)[0], False

    def delete(self, rt, namespace, name, options, dry_run=False):
        with self.lock:
            key = (namespace if rt.namespaced else None, name)
            current = self.objects[rt.key].get(key)
            if current is None:
                raise not_found(rt, name)
            pre = options.get("preconditions") or {}
            cm = current["metadata"]
            for field in ("uid", "resourceVersion"):
                if pre.get(field) and pre[field] != cm.get(field):
                    raise ApiError(409, "Conflict", 'Operation cannot be fulfilled on %s "%s": Precondition failed: '
                                   "%s in precondition: %s, %s in object meta: %s"
                                   % (rt.group_resource, name, field.replace("uid", "UID").replace(
                                       "resourceVersion", "ResourceVersion"), pre[field],
                                      field.replace("uid", "UID").replace("resourceVersion", "ResourceVersion"),
                                      cm.get(field)),
                                   {"name": name, "group": rt.group, "kind": rt.plural})
            policy = options.get("propagationPolicy") or ("Orphan" if options.get("orphanDependents") else
                                                         "Background")
            if dry_run:
                return copy.deepcopy(current)
            if cm.get("finalizers"):
                if cm.get("deletionTimestamp"):
                    return copy.deepcopy(current)
                obj = copy.deepcopy(current)
                obj["metadata"]["deletionTimestamp"] = now_rfc3339()
                obj["metadata"]["deletionGracePeriodSeconds"] = 0
                self._commit(rt, "MODIFIED", obj, current)
                if policy == "Orphan":
                    self._collect(cm["uid"], "Orphan")
                return copy.deepcopy(obj)
            obj = copy.deepcopy(current)
            self._remove(rt, obj, current, policy)
            return obj

    def _remove(self, rt, obj, old, policy):
        """Removes an object for good: DELETED event, then its dependents."""
        self._commit(rt, "DELETED", obj, old)
        uid = obj["metadata"]["uid"]
        if rt.key == ("apiextensions.k8s.io", "customresourcedefinitions"):
            self._unserve_crd(obj)
        if rt.key == ("", "namespaces"):
            for objects_key, objects in list(self.objects.items()):
                for (ns, _), child in list(objects.items()):
                    if ns == obj["metadata"]["name"]:
                        child_rt = self._type_of(objects_key)
                        self._remove(child_rt, copy.deepcopy(child), child, "Background")
        self._collect(uid, policy)

    def _type_of(self, key):
        return next(rt for rt in self.types.values() if rt.key == key)

    def _collect(self, uid, policy):
        """The garbage collector: dependents of a removed owner are deleted (after their own
        finalizers) when no other owner of theirs exists; Orphan only drops the reference."""
        for objects_key, objects in list(self.objects.items()):
            for child in list(objects.values()):
                refs = child["metadata"].get("ownerReferences") or []
                if not any(r.get("uid") == uid for r in refs):
                    continue
                child_rt = self._type_of(objects_key)
                others = [r for r in refs if r.get("uid") != uid and self.find_uid(r.get("uid"))]
                if policy == "Orphan" or others:
                    updated = copy.deepcopy(child)
                    remaining = [r for r in refs if r.get("uid") != uid]
                    if remaining:
                        updated["metadata"]["ownerReferences"] = remaining
                    else:
                        updated["metadata"].pop("ownerReferences", None)
                    self._commit(child_rt, "MODIFIED", updated, child)
                    continue
                m = child["metadata"]
                current_key = (m.get("namespace") if child_rt.namespaced else None, m["name"])
                if current_key not in objects:
                    continue
                self.delete(child_rt, m.get("namespace"), m["name"], {"propagationPolicy": "Background"})

    # -- CustomResourceDefinitions --------------------------------------------

    def _check_crd(self, rt, obj):
        spec = obj.get("spec") or {}
        names = spec.get("names") or {}
        name = obj["metadata"].get("name", "")
        errors = []
        for field, value in (("spec.group", spec.get("group")), ("spec.names.plural", names.get("plural")),
                             ("spec.names.kind", names.get("kind"))):
            if not value:
                errors.append(FieldError("Required value", field, show_value=False))
        if spec.get("scope") not in ("Namespaced", "Cluster"):
            errors.append(FieldError("Unsupported value", "spec.scope", spec.get("scope", ""),
                                     'supported values: "Cluster", "Namespaced"'))
        versions = spec.get("versions") or []
        if not versions:
            errors.append(FieldError("Required value", "spec.versions", show_value=False))
        if versions and sum(1 for v in versions if v.get("storage")) != 1:
            errors.append(FieldError("Invalid value", "spec.versions", versions,
                                     "must have exactly one version marked as storage version"))
        if not errors and name != "%s.%s" % (names["plural"], spec["group"]):
            errors.append(FieldError("Invalid value", "metadata.name", name,
                                     'must be spec.names.plural+"."+spec.group'))
        if errors:
            raise invalid(rt, name, errors)
        names.setdefault("singular", names["kind"].lower())
        names.setdefault("listKind", names["kind"] + "List")

    def _crd_status(self, obj):
        spec = obj.get("spec") or {}
        now = now_rfc3339()
        storage = [v["name"] for v in spec.get("versions") or [] if v.get("storage")]
        return {
            "conditions": [
                {"type": "NamesAccepted", "status": "True", "lastTransitionTime": now,
                 "reason": "NoConflicts", "message": "no conflicts found"},
                {"type": "Established", "status": "True", "lastTransitionTime": now,
                 "reason": "InitialNamesAccepted", "message": "the initial names have been accepted"},
            ],
            "acceptedNames": copy.deepcopy(spec.get("names") or {}),
            "storedVersions": storage,
        }

    def _serve_crd(self, crd):
        crd_name = crd["metadata"]["name"]
        for key in [k for k, rt in self.types.items() if rt.crd_name == crd_name]:
            del self.types[key]
        spec = crd["spec"]
        names = spec["names"]
        for version in spec.get("versions") or []:
            if not version.get("served"):
                continue
            schema = ((version.get("schema") or {}).get("openAPIV3Schema")
                      or {"type": "object", "x-kubernetes-preserve-unknown-fields": True})
            schema = copy.deepcopy(schema)
            props = schema.setdefault("properties", {})
            props.pop("metadata", None)
            props.pop("apiVersion", None)
            props.pop("kind", None)
            has_status = "status" in (version.get("subresources") or {})
            self.add_type(ResourceType(
                spec["group"], version["name"], names["plural"], names["kind"],
                spec.get("scope") == "Namespaced", singular=names.get("singular"),
                short_names=names.get("shortNames") or [], categories=names.get("categories") or [],
                status_subresource=has_status, list_kind=names.get("listKind"), schema=schema,
                printer_columns=version.get("additionalPrinterColumns") or [
                    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}],
                crd_name=crd_name))

    def _unserve_crd(self, crd):
        crd_name = crd["metadata"]["name"]
        for key in [k for k, rt in self.types.items() if rt.crd_name == crd_name]:
            rt = self.types.pop(key)
            if not any(other.key == rt.key for other in self.types.values()):
                for obj in list(self.objects.get(rt.key, {}).values()):
                    self._commit(rt, "DELETED", copy.deepcopy(obj), obj)
                self.objects.pop(rt.key, None)


# ---------------------------------------------------------------------------
# Tables (kubectl get)


def jsonpath_simple(obj, path):
    node = obj
    for part in re.findall(r"[^.\[\]]+|\[\d+\]", path or ""):
        if part.startswith("["):
            index = int(part[1:-1])
            if not isinstance(node, list) or index >= len(node):
                return None
            node = node[index]
        else:
            if not isinstance(node, dict) or part not in node:
                return None
            node = node[part]
    return node


def _age(timestamp):
    created = parse_time(timestamp or "")
    if created is None:
        return "<unknown>"
    return human_duration((datetime.datetime.now(datetime.timezone.utc) - created).total_seconds())


def _cell(kind, value):
    if value is None:
        return None
    if kind == "date":
        return _age(value) if isinstance(value, str) else None
    if kind == "integer" and _is_integer(value):
        return int(value)
    if kind == "number" and isinstance(value, (int, float)) and not isinstance(value, bool):
        return value
    if kind == "boolean" and isinstance(value, bool):
        return value
    if isinstance(value, (dict, list)):
        return json.dumps(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _pod_cells(pod):
    status = pod.get("status") or {}
    statuses = status.get("containerStatuses") or []
    containers = (pod.get("spec") or {}).get("containers") or []
    ready = sum(1 for s in statuses if s.get("ready"))
    reason = status.get("reason") or status.get("phase") or "Unknown"
    for s in statuses:
        state = s.get("state") or {}
        if "terminated" in state and state["terminated"].get("reason"):
            reason = state["terminated"]["reason"]
        elif "waiting" in state and state["waiting"].get("reason"):
            reason = state["waiting"]["reason"]
    if pod["metadata"].get("deletionTimestamp"):
        reason = "Terminating"
    restarts = sum(int(s.get("restartCount", 0)) for s in statuses)
    return ["%d/%d" % (ready, len(containers)), reason, restarts,
            _age(pod["metadata"].get("creationTimestamp")),
            status.get("podIP") or "<none>", (pod.get("spec") or {}).get("nodeName") or "<none>"]


def table_for(rt, items, list_rv, include):
    name_column = {"name": "Name", "type": "string", "format": "name", "priority": 0,
                   "description": "Name must be unique within a namespace."}
    if rt.printer_columns is not None:
        columns = [name_column] + [
            {"name": c["name"], "type": c.get("type", "string"), "format": c.get("format", ""),
             "description": c.get("description", ""), "priority": c.get("priority", 0)}
            for c in rt.printer_columns]

        def cells(obj):
            return [obj["metadata"]["name"]] + [_cell(c.get("type", "string"), jsonpath_simple(obj, c["jsonPath"]))
                                                for c in rt.printer_columns]
    elif rt.key == ("", "pods"):
        columns = [name_column] + [
            {"name": n, "type": t, "format": "", "description": "", "priority": p}
            for n, t, p in (("Ready", "string", 0), ("Status", "string", 0), ("Restarts", "string", 0),
                            ("Age", "string", 0), ("IP", "string", 1), ("Node", "string", 1))]

        def cells(obj):
            return [obj["metadata"]["name"]] + _pod_cells(obj)
    elif rt.key == ("", "namespaces"):
        columns = [name_column, {"name": "Status", "type": "string", "format": "", "description": "",
                                 "priority": 0},
                   {"name": "Age", "type": "string", "format": "", "description": "", "priority": 0}]

        def cells(obj):
            return [obj["metadata"]["name"], (obj.get("status") or {}).get("phase", ""),
                    _age(obj["metadata"].get("creationTimestamp"))]
    else:
        columns = [name_column, {"name": "Age", "type": "string", "format": "", "description": "",
                                 "priority": 0}]

        def cells(obj):
            return [obj["metadata"]["name"], _age(obj["metadata"].get("creationTimestamp"))]

    rows = []
    for obj in items:
        row = {"cells": cells(obj)}
        if include == "Object":
            row["object"] = obj
        elif include != "None":
            row["object"] = {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                             "metadata": obj["metadata"]}
        rows.append(row)
    return {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": {"resourceVersion": list_rv},
            "columnDefinitions": columns, "rows": rows}


# ---------------------------------------------------------------------------
# HTTP


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "paci-test-apiserver"

    # BaseHTTPRequestHandler calls this from send_response.
    def log_request(self, code="-", size="-"):
        self.server.api.log("%s %s %s%s" % (self.command, self.path, code,
                                            "" if self.headers.get("Authorization") else " (no token)"))

    def log_message(self, fmt, *args):
        self.server.api.log(fmt % args)

    def setup(self):
        super().setup()
        # Small responses and watch events go out at once (no Nagle/delayed-ACK stalls).
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.server.api.track(self.connection, True)

    def finish(self):
        try:
            super().finish()
        finally:
            self.server.api.track(self.connection, False)

    def do_GET(self):
        self.dispatch("GET")

    def do_POST(self):
        self.dispatch("POST")

    def do_PUT(self):
        self.dispatch("PUT")

    def do_PATCH(self):
        self.dispatch("PATCH")

    def do_DELETE(self):
        self.dispatch("DELETE")

    # -- plumbing ------------------------------------------------------------

    def read_body(self):
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            data = b""
            while True:
                size = int(self.rfile.readline().strip().split(b";")[0], 16)
                if size == 0:
                    self.rfile.readline()
                    return data
                data += self.rfile.read(size)
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def parse_body(self, raw):
        if not raw.strip():
            return None
        content_type = (self.headers.get("Content-Type") or "").lower()
        try:
            if "yaml" in content_type and yaml is not None:
                return yaml.safe_load(raw)
            return json.loads(raw)
        except (ValueError, Exception) as error:  # yaml raises its own types
            raise bad_request("the body of the request was in an unknown format: %s" % error)

    def send_json(self, code, obj, headers=None):
        data = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for key, value in (headers or {}).items():
            for one in value if isinstance(value, list) else [value]:
                self.send_header(key, one)
        # Headers and body in one write.
        self._headers_buffer.append(b"\r\n")
        if self.command != "HEAD":
            self._headers_buffer.append(data)
        self.flush_headers()

    def dispatch(self, method):
        api = self.server.api
        parsed = urllib.parse.urlsplit(self.path)
        query = {k: v[-1] for k, v in urllib.parse.parse_qs(parsed.query, keep_blank_values=True).items()}
        segments = [urllib.parse.unquote(s) for s in parsed.path.split("/") if s]
        verb = "?"
        try:
            raw = self.read_body()
            body = self.parse_body(raw)
            verb, response = self.route(method, segments, query, body)
            if response is not None:
                code, obj, headers = response
                self.send_json(code, obj, headers)
        except ApiError as error:
            self.send_json(error.code, error.status(), error.headers)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception as error:  # a bug here must not kill the connection silently
            traceback.print_exc(file=sys.stderr)
            self.send_json(500, status_object(500, "InternalError", "Internal error occurred: %s" % error))
        finally:
            api.count(method, parsed.path, verb)

    def route(self, method, segs, query, body):
        api = self.server.api
        store = api.store
        if not segs:
            paths = ["/api", "/api/v1", "/apis", "/healthz", "/livez", "/openapi/v3", "/readyz", "/version"]
            return "get", (200, {"paths": paths}, None)
        if segs[0] in ("healthz", "livez", "readyz") and method == "GET":
            data = b"ok"
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return "get", None
        if segs == ["version"]:
            return "get", (200, SERVER_VERSION, None)
        if segs[0] == "testing":
            return "testing", self.testing(method, segs[1:], body)
        if segs[0] == "openapi":
            return "get", self.openapi(segs[1:])
        if segs[0] == "api" and len(segs) == 1:
            host = "%s:%d" % self.server.server_address[:2]
            return "get", (200, {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [
                {"clientCIDR": "0.0.0.0/0", "serverAddress": host}]}, None)
        if segs[0] == "apis" and len(segs) == 1:
            with store.lock:
                groups = [self.api_group(g, vs) for g, vs in store.group_versions().items() if g]
            return "get", (200, {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}, None)
        if segs[0] == "apis" and len(segs) == 2:
            with store.lock:
                versions = store.group_versions().get(segs[1])
                if not versions:
                    raise ApiError(404, "NotFound", "the server could not find the requested resource")
                group = self.api_group(segs[1], versions)
            return "get", (200, dict(group, kind="APIGroup", apiVersion="v1"), None)
        if segs[0] == "api" and len(segs) >= 2:
            group, version, rest = "", segs[1], segs[2:]
        elif segs[0] == "apis" and len(segs) >= 3:
            group, version, rest = segs[1], segs[2], segs[3:]
        else:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if not rest:
            with store.lock:
                resources = [e for rt in store.types.values() if rt.group == group and rt.version == version
                             for e in rt.discovery()]
            if not resources:
                raise ApiError(404, "NotFound", "the server could not find the requested resource")
            return "get", (200, {"kind": "APIResourceList", "apiVersion": "v1",
                                 "groupVersion": "%s/%s" % (group, version) if group else version,
                                 "resources": resources}, None)
        watch = query.get("watch") in ("true", "1")
        if rest[0] == "watch":
            watch, rest = True, rest[1:]
        namespace = None
        with store.lock:
            # /namespaces/{ns}/{plural}... unless {plural} is a subresource of a namespace.
            inner = store.find_type(group, version, rest[2]) if len(rest) >= 3 else None
            if rest[0] == "namespaces" and inner is not None and inner.namespaced:
                namespace, rest = rest[1], rest[2:]
            rt = store.find_type(group, version, rest[0]) if rest else None
        if rt is None or len(rest) > 3:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        name = rest[1] if len(rest) >= 2 else None
        subresource = rest[2] if len(rest) == 3 else None
        if subresource and (subresource != "status" or not rt.status_subresource):
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if rt.namespaced and name is not None and namespace is None:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        verb = {"GET": "watch" if watch else ("get" if name else "list"), "POST": "create", "PUT": "update",
                "PATCH": "patch", "DELETE": "delete"}[method]
        api.maybe_inject(verb, rt.plural, subresource)
        dry_run = query.get("dryRun") == "All"
        warnings = []

        def done(code, obj):
            headers = {}
            if warnings:
                # One Warning header each, as the real server sends them; kubectl prints each.
                headers["Warning"] = ['299 - "%s"' % w.replace('"', '\\"') for w in warnings]
            return code, obj, headers

        if method == "GET" and watch:
            self.serve_watch(rt, namespace, name, query)
            return verb, None
        if method == "GET":
            accept = self.headers.get("Accept") or ""
            table = "as=Table" in accept
            if name is not None:
                obj = store.get(rt, namespace, name)
                if table:
                    return verb, (200, table_for(rt, [obj], obj["metadata"]["resourceVersion"],
                                                 query.get("includeObject")), None)
                return verb, (200, obj, None)
            labels = parse_label_selector(query.get("labelSelector"))
            fields = parse_field_selector(query.get("fieldSelector"))
            rv = parse_resource_version(query.get("resourceVersion"))
            if rv is not None and query.get("resourceVersionMatch") == "Exact":
                with store.lock:
                    if store.too_old(rv):
                        raise store.expired(rv)
            items, list_rv = store.list(rt, namespace, labels, fields)
            if table:
                return verb, (200, table_for(rt, items, list_rv, query.get("includeObject")), None)
            return verb, (200, {"kind": rt.list_kind, "apiVersion": rt.api_version,
                                "metadata": {"resourceVersion": list_rv, "continue": ""},
                                "items": items}, None)
        if method == "POST" and name is None:
            if rt.namespaced and namespace is None:
                raise ApiError(404, "NotFound", "the server could not find the requested resource")
            obj = store.create(rt, namespace, body, query, dry_run, warnings)
            return verb, done(201, obj)
        if method == "PUT" and name is not None:
            obj, created = store.update(rt, namespace, name, body, query, subresource, dry_run, warnings)
            return verb, done(201 if created else 200, obj)
        if method == "PATCH" and name is not None:
            content_type = (self.headers.get("Content-Type") or "").lower()
            if body is None:
                raise bad_request("the body of the request was empty")
            obj, created = store.patch(rt, namespace, name, body, content_type, query, subresource, dry_run,
                                       warnings)
            return verb, done(201 if created else 200, obj)
        if method == "DELETE" and name is not None and subresource is None:
            options = body if isinstance(body, dict) else {}
            for key in ("propagationPolicy", "gracePeriodSeconds"):
                if key in query:
                    options[key] = query[key]
            if query.get("orphanDependents") == "true":
                options["orphanDependents"] = True
            obj = store.delete(rt, namespace, name, options, dry_run or "All" in (options.get("dryRun") or []))
            return verb, (200, obj, None)
        raise ApiError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")

    def api_group(self, group, versions):
        entries = [{"groupVersion": "%s/%s" % (group, v), "version": v} for v in versions]
        return {"name": group, "versions": entries, "preferredVersion": entries[0]}

    # -- watch ---------------------------------------------------------------

    def serve_watch(self, rt, namespace, name, query):
        api, store = self.server.api, self.server.api.store
        labels = parse_label_selector(query.get("labelSelector"))
        fields = parse_field_selector(query.get("fieldSelector"))
        watch = Watch(rt, namespace, name, labels, fields)
        since = parse_resource_version(query.get("resourceVersion"))
        timeout = float(query.get("timeoutSeconds") or 1800)
        bookmarks = query.get("allowWatchBookmarks") in ("true", "1")
        as_table = "as=Table" in (self.headers.get("Accept") or "")
        expired = None
        try:
            store.open_watch(watch, since)
        except ApiError as error:
            expired = error
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        deadline = time.monotonic() + timeout
        next_bookmark = time.monotonic() + api.bookmark_seconds

        def chunk(event):
            data = (json.dumps(event) + "\n").encode()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()

        try:
            if expired is not None:
                chunk({"type": "ERROR", "object": expired.status()})
                self.wfile.write(b"0\r\n\r\n")
                return
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or api.stopping:
                    break
                try:
                    etype, obj = watch.queue.get(timeout=min(remaining, 0.5))
                except queue.Empty:
                    if self.client_gone():
                        self.close_connection = True
                        return
                    if bookmarks and time.monotonic() >= next_bookmark:
                        next_bookmark = time.monotonic() + api.bookmark_seconds
                        with store.lock:
                            current = str(store.rv)
                        chunk({"type": "BOOKMARK", "object": {"kind": rt.kind, "apiVersion": rt.api_version,
                                                              "metadata": {"resourceVersion": current}}})
                    continue
                if etype is Watch.DROP:
                    self.close_connection = True
                    try:
                        self.connection.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass
                    return
                if etype is Watch.END:
                    break
                if as_table:  # kubectl get -w: each event carries a one-row Table
                    obj = table_for(rt, [obj], obj["metadata"]["resourceVersion"], query.get("includeObject"))
                chunk({"type": etype, "object": obj})
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError, OSError):
            self.close_connection = True
        finally:
            store.close_watch(watch)

    def client_gone(self):
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            if readable:
                return self.connection.recv(1, socket.MSG_PEEK) == b""
        except OSError:
            return True
        return False

    # -- openapi -------------------------------------------------------------

    def openapi(self, segs):
        """An OpenAPI v3 index whose documents list each resource's PATCH operation with
        the fieldValidation and dryRun parameters: kubectl then leaves validation to the
        server (fieldValidation=Strict) instead of validating against a schema itself."""
        store = self.server.api.store
        if not segs or segs[0] != "v3":
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        with store.lock:
            docs = {}
            for g, versions in store.group_versions().items():
                for v in versions:
                    path = "api/%s" % v if not g else "apis/%s/%s" % (g, v)
                    docs[path] = self.openapi_document(g, v)
        if len(segs) == 1:
            paths = {}
            for path, doc in docs.items():
                digest = hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:32].upper()
                paths[path] = {"serverRelativeURL": "/openapi/v3/%s?hash=%s" % (path, digest)}
            return 200, {"paths": paths}, None
        doc = docs.get("/".join(segs[1:]))
        if doc is None:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        return 200, doc, None

    def openapi_document(self, group, version):
        store = self.server.api.store
        paths = {}
        for rt in store.types.values():
            if rt.group != group or rt.version != version:
                continue
            prefix = "/api/%s" % version if not group else "/apis/%s/%s" % (group, version)
            base = prefix + ("/namespaces/{namespace}/" if rt.namespaced else "/") + rt.plural
            gvk = {"group": group, "version": version, "kind": rt.kind}
            params = [{"name": n, "in": "query", "schema": {"type": "string", "uniqueItems": True}}
                      for n in ("dryRun", "fieldManager", "fieldValidation")]
            ok = {"200": {"description": "OK"}}
            content = {t: {"schema": {"type": "object"}} for t in
                       ("application/json-patch+json", "application/merge-patch+json",
                        "application/apply-patch+yaml")}
            if rt.schema is None:
                content["application/strategic-merge-patch+json"] = {"schema": {"type": "object"}}
            item = {
                "get": {"operationId": "read" + rt.kind, "responses": ok,
                        "x-kubernetes-action": "get", "x-kubernetes-group-version-kind": gvk},
                "put": {"operationId": "replace" + rt.kind, "parameters": params, "responses": ok,
                        "x-kubernetes-action": "put", "x-kubernetes-group-version-kind": gvk},
                "patch": {"operationId": "patch" + rt.kind, "parameters": params + [
                    {"name": "force", "in": "query", "schema": {"type": "boolean", "uniqueItems": True}}],
                    "requestBody": {"content": content, "required": True}, "responses": ok,
                    "x-kubernetes-action": "patch", "x-kubernetes-group-version-kind": gvk},
                "delete": {"operationId": "delete" + rt.kind, "parameters": params[:1], "responses": ok,
                           "x-kubernetes-action": "delete", "x-kubernetes-group-version-kind": gvk},
            }
            paths[base + "/{name}"] = item
            paths[base] = {
                "get": {"operationId": "list" + rt.kind, "responses": ok, "x-kubernetes-action": "list",
                        "x-kubernetes-group-version-kind": gvk},
                "post": {"operationId": "create" + rt.kind, "parameters": params, "responses": ok,
                         "x-kubernetes-action": "post", "x-kubernetes-group-version-kind": gvk},
            }
            if rt.status_subresource:
                paths[base + "/{name}/status"] = {
                    k: item[k] for k in ("get", "put", "patch")}
        return {"openapi": "3.0.0", "info": {"title": "Kubernetes", "version": SERVER_VERSION["gitVersion"]},
                "paths": paths, "components": {}}

    # -- test control --------------------------------------------------------

    def testing(self, method, segs, body):
        api, store = self.server.api, self.server.api.store
        what = "/".join(segs)
        if method == "POST" and what == "drop-watches":
            return 200, {"dropped": store.drop_watches()}, None
        if method == "POST" and what == "compact":
            store.compact()
            return 200, {"compactedResourceVersion": str(store.compacted_rv)}, None
        if method == "GET" and what == "requests":
            with api.counts_lock:
                return 200, {"total": sum(api.by_verb.values()), "byVerb": dict(api.by_verb),
                             "byPath": dict(api.by_path)}, None
        if method == "POST" and what == "reset-requests":
            with api.counts_lock:
                api.by_verb.clear()
                api.by_path.clear()
            return 200, {}, None
        if method == "GET" and what == "watches":
            with store.lock:
                by_resource = collections.Counter(w.rt.plural for w in store.watches)
            return 200, {"open": sum(by_resource.values()), "byResource": dict(by_resource)}, None
        if method == "POST" and what == "inject-error":
            if not isinstance(body, dict) or not isinstance(body.get("code"), int):
                raise bad_request("inject-error wants {\"code\": N, \"count\": N, \"verb\": ..., \"resource\": ...}")
            with api.counts_lock:
                api.injections.append(dict(body, count=int(body.get("count", 1))))
            return 200, {}, None
        raise ApiError(404, "NotFound", "no such test endpoint: %s %s" % (method, what))


class _HttpServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    block_on_close = False


class ApiServer:
    """The test API server. Owns its HTTP server thread; start() returns once it
    listens, stop() closes the listener and every open connection. Thread-safe."""

    def __init__(self, host="127.0.0.1", port=0, history=1000, log=None, bookmark_seconds=10.0):
        self.store = Store(history)
        self.stopping = False
        self.bookmark_seconds = bookmark_seconds
        self._log = log if log is not None else sys.stderr
        self._log_lock = threading.Lock()
        self.counts_lock = threading.Lock()
        self.by_verb = collections.Counter()
        self.by_path = collections.Counter()
        self.injections = []
        self._connections = set()
        self._http = _HttpServer((host, port), Handler)
        self._http.api = self
        self._thread = None

    @property
    def port(self):
        return self._http.server_address[1]

    @property
    def url(self):
        return "http://127.0.0.1:%d" % self.port

    def start(self):
        self._thread = threading.Thread(target=self._http.serve_forever, kwargs={"poll_interval": 0.2},
                                        name="apiserver", daemon=True)
        self._thread.start()
        return self

    def serve_forever(self):
        self._http.serve_forever(poll_interval=0.2)

    def stop(self):
        self.stopping = True
        self._http.shutdown()
        self.store.drop_watches()
        with self.counts_lock:
            connections = list(self._connections)
        for conn in connections:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self._http.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def log(self, line):
        if self._log is None:
            return
        with self._log_lock:
            try:
                self._log.write("apiserver: %s\n" % line)
                self._log.flush()
            except ValueError:
                pass

    def track(self, connection, opened):
        with self.counts_lock:
            if opened:
                self._connections.add(connection)
            else:
                self._connections.discard(connection)

    def count(self, method, path, verb):
        with self.counts_lock:
            self.by_verb[verb] += 1
            self.by_path["%s %s" % (method, path)] += 1

    def maybe_inject(self, verb, resource, subresource):
        with self.counts_lock:
            for injection in self.injections:
                if injection["count"] <= 0:
                    continue
                if injection.get("verb") not in (None, verb):
                    continue
                if injection.get("resource") not in (None, resource):
                    continue
                if injection.get("subresource", subresource) != subresource:
                    continue
                injection["count"] -= 1
                code = injection["code"]
                reasons = {409: "Conflict", 410: "Expired", 429: "TooManyRequests", 500: "InternalError",
                           503: "ServiceUnavailable", 504: "Timeout"}
                headers = {"Retry-After": "1"} if code == 429 else None
                raise ApiError(code, reasons.get(code, "InternalError"), injection.get(
                    "message", "injected error for %s %s" % (verb, resource)), headers=headers)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--port-file", help="write the chosen port here once listening")
    parser.add_argument("--history", type=int, default=1000, help="watch events kept for replay")
    parser.add_argument("--bookmark-seconds", type=float, default=10.0)
    parser.add_argument("--quiet", action="store_true", help="do not log each request")
    args = parser.parse_args()
    server = ApiServer(port=args.port, history=args.history, log=None if args.quiet else sys.stderr,
                       bookmark_seconds=args.bookmark_seconds)
    if args.port_file:
        tmp = args.port_file + ".tmp"
        with open(tmp, "w") as f:
            f.write("%d\n" % server.port)
        os.replace(tmp, args.port_file)
    server.log("listening on %s" % server.url)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    server.start()
    stop.wait()
    server.stop()


if __name__ == "__main__":
    main()
