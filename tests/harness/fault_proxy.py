"""A fault-injecting HTTP proxy in front of the real kube-apiserver, for tests of how
a client lives through faults a real server only shows now and then: watch streams
that are cut, errors on chosen requests. It is no API server: every request goes to
the real one (TLS, with the client's own Authorization header), every answer comes
back as the server gave it, watch streams chunk by chunk. Like toxiproxy, it only
adds faults on command:

    POST /fault-proxy/drop-watches   cut every open watch stream (no final chunk)
    POST /fault-proxy/inject-error   {"verb": "update", "resource": "leases",
                                      "code": 500, "count": 1}: the next `count`
                                      matching requests get that error, as a Status
    POST /fault-proxy/hold           {"verb": "update", "resource": "leases", "count": 1}:
                                      the next `count` matching requests wait (a server
                                      that does not answer) until
    POST /fault-proxy/release        lets every held request on to the server
    GET  /fault-proxy/held?at_least=N  {"held": M}: requests held now, answered once
                                      M >= N (at most 30 s later)
    GET  /fault-proxy/watches        {"open": N}: watch streams open now
    POST /fault-proxy/compact        compact etcd past every revision written so far:
                                      with the server's watch cache off, a watch from
                                      any older resourceVersion is 410 Expired

Verbs are the API's (get, list, watch, create, update, patch, delete,
deletecollection), resources the plural, optionally with "subresource".
"""
import base64
import http.client
import http.server
import json
import socket
import socketserver
import ssl
import threading
import urllib.parse
import urllib.request

_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade",
               "proxy-authorization", "proxy-authenticate", "content-length"}
_REASONS = {400: "BadRequest", 403: "Forbidden", 404: "NotFound", 409: "Conflict", 410: "Expired",
            429: "TooManyRequests", 500: "InternalError", 503: "ServiceUnavailable", 504: "Timeout"}


def request_attributes(method, path, query):
    """(verb, resource, subresource) of an API request path, as the server's authorizer sees it."""
    parts = [p for p in path.split("/") if p]
    if parts[:1] == ["api"]:
        parts = parts[2:]
    elif parts[:1] == ["apis"]:
        parts = parts[3:]
    else:
        return None, None, None
    if len(parts) >= 2 and parts[0] == "namespaces" and len(parts) != 2:
        parts = parts[2:]  # a namespaced resource (not the namespace itself)
    resource = parts[0] if parts else None
    name = parts[1] if len(parts) > 1 else None
    subresource = parts[2] if len(parts) > 2 else None
    watch = query.get("watch", [""])[0] in ("1", "true")
    verb = {"POST": "create", "PUT": "update", "PATCH": "patch"}.get(method)
    if method == "GET":
        verb = "watch" if watch else ("get" if name else "list")
    elif method == "DELETE":
        verb = "delete" if name else "deletecollection"
    return verb, resource, subresource


class FaultProxy:
    def __init__(self, upstream, ca_file, etcd_url=None):
        url = urllib.parse.urlsplit(upstream)
        self.host, self.port = url.hostname, url.port
        self.context = ssl.create_default_context(cafile=ca_file)
        self.etcd_url = etcd_url
        self.lock = threading.Lock()
        self.injections = []
        self.released = threading.Event()  # set by the release command that ends the holds
        self.holding = 0  # requests held now
        self.held_changed = threading.Condition(self.lock)
        self.watches = {}  # client socket -> upstream connection, of open watch streams
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                proxy.handle(self)
            do_POST = do_PUT = do_PATCH = do_DELETE = do_GET

        class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
            daemon_threads = True

        self.server = Server(("127.0.0.1", 0), Handler)
        self.url = "http://127.0.0.1:%d" % self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True, name="fault-proxy").start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()
        self.drop_watches()

    # -- faults ------------------------------------------------------------------

    def drop_watches(self):
        with self.lock:
            streams = list(self.watches.items())
            self.watches.clear()
        for client, upstream in streams:
            for sock in (client, upstream.sock):
                try:
                    if sock is not None:
                        sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
        return len(streams)

    def compact(self):
        def call(path, body):
            req = urllib.request.Request(self.etcd_url + path, data=json.dumps(body).encode(), method="POST")
            with urllib.request.urlopen(req, timeout=10) as resp:
                return json.loads(resp.read())
        # A write outside the API server's keys first, so that the compaction covers every
        # revision the server has written (etcd keeps the revision it compacts at).
        key = base64.b64encode(b"/fault-proxy/compaction").decode()
        revision = int(call("/v3/kv/put", {"key": key, "value": key})["header"]["revision"])
        call("/v3/kv/compaction", {"revision": revision, "physical": True})
        return revision

    def injected(self, verb, resource, subresource):
        with self.lock:
            for injection in self.injections:
                if injection["count"] <= 0:
                    continue
                if injection.get("verb") not in (None, verb) or injection.get("resource") not in (None, resource):
                    continue
                if injection.get("subresource", subresource) != subresource:
                    continue
                injection["count"] -= 1
                return injection
        return None

    # -- requests ----------------------------------------------------------------

    def reply_json(self, handler, code, body):
        data = json.dumps(body).encode()
        handler.send_response(code)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)

    def control(self, handler, what, body):
        if handler.command == "POST" and what == "drop-watches":
            return self.reply_json(handler, 200, {"dropped": self.drop_watches()})
        if handler.command == "POST" and what == "compact":
            return self.reply_json(handler, 200, {"compactedRevision": str(self.compact())})
        if handler.command == "GET" and what == "held":
            wanted = int(urllib.parse.parse_qs(urllib.parse.urlsplit(handler.path).query).get("at_least", ["0"])[0])
            with self.held_changed:
                self.held_changed.wait_for(lambda: self.holding >= wanted, timeout=30)
                return self.reply_json(handler, 200, {"held": self.holding})
        if handler.command == "GET" and what == "watches":
            with self.lock:
                return self.reply_json(handler, 200, {"open": len(self.watches)})
        if handler.command == "POST" and what == "hold":
            spec = json.loads(body or b"{}")
            with self.lock:
                self.injections.append(dict(spec, count=int(spec.get("count", 1)), held=self.released))
            return self.reply_json(handler, 200, {})
        if handler.command == "POST" and what == "release":
            with self.lock:
                released, self.released = self.released, threading.Event()
            released.set()
            return self.reply_json(handler, 200, {})
        if handler.command == "POST" and what == "inject-error":
            spec = json.loads(body or b"{}")
            if "code" not in spec:
                return self.reply_json(handler, 400, {"message": 'inject-error wants {"code": N, ...}'})
            with self.lock:
                self.injections.append(dict(spec, count=int(spec.get("count", 1))))
            return self.reply_json(handler, 200, {})
        return self.reply_json(handler, 404, {"message": "no fault-proxy command %s %s" % (handler.command, what)})

    def handle(self, handler):
        length = int(handler.headers.get("Content-Length") or 0)
        body = handler.rfile.read(length) if length else None
        url = urllib.parse.urlsplit(handler.path)
        if url.path.startswith("/fault-proxy/"):
            return self.control(handler, url.path[len("/fault-proxy/"):], body)
        verb, resource, subresource = request_attributes(handler.command, url.path,
                                                         urllib.parse.parse_qs(url.query))
        injection = self.injected(verb, resource, subresource)
        if injection and "held" in injection:
            with self.held_changed:
                self.holding += 1
                self.held_changed.notify_all()
            try:
                injection["held"].wait(timeout=300)  # then on to the server, late
            finally:
                with self.held_changed:
                    self.holding -= 1
                    self.held_changed.notify_all()
            injection = None
        if injection:
            code = injection["code"]
            return self.reply_json(handler, code, {
                "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": injection.get("message", "injected error for %s %s" % (verb, resource)),
                "reason": _REASONS.get(code, "InternalError"), "code": code})
        headers = {k: v for k, v in handler.headers.items() if k.lower() not in _HOP_BY_HOP and
                   k.lower() != "host"}
        upstream = http.client.HTTPSConnection(self.host, self.port, timeout=None if verb == "watch" else 60,
                                               context=self.context)
        try:
            upstream.request(handler.command, handler.path, body=body, headers=headers)
            resp = upstream.getresponse()
            handler.send_response(resp.status)
            for key, value in resp.getheaders():
                if key.lower() not in _HOP_BY_HOP:
                    handler.send_header(key, value)
            if verb != "watch":
                data = resp.read()
                handler.send_header("Content-Length", str(len(data)))
                handler.end_headers()
                handler.wfile.write(data)
                return
            handler.send_header("Transfer-Encoding", "chunked")
            handler.end_headers()
            handler.wfile.flush()
            with self.lock:
                self.watches[handler.connection] = upstream
            try:
                while True:
                    line = resp.readline()
                    if not line:
                        break
                    handler.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                    handler.wfile.flush()
                handler.wfile.write(b"0\r\n\r\n")  # the server ended the stream cleanly
            except (OSError, http.client.HTTPException):
                pass  # cut: by drop-watches or by the client
            finally:
                with self.lock:
                    self.watches.pop(handler.connection, None)
                handler.close_connection = True
        finally:
            upstream.close()
