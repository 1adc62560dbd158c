# A local HTTP sink for timing `hpctl push` (bench; docs/performance.md "Continuous push"): answers
# every POST with 200 and an empty body (an empty ExportProfilesServiceResponse) and keeps the last
# request body in FILE. Usage: python3 otlp_sink.py PORT FILE
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        n = int(self.headers.get("Content-Length", 0))
        body = self.rfile.read(n)
        open(sys.argv[2], "wb").write(body)
        self.send_response(200); self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0"); self.end_headers()
    def log_message(self, *a): pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
