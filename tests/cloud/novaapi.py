"""nova-api in the test cloud: nova's own WSGI application
(``nova.wsgi.osapi_compute``, the module uWSGI or mod_wsgi loads) under a
threaded WSGI server on loopback, with the paste pipeline and nova.conf of
``--config-dir`` (nova reads ``api-paste.ini`` and ``nova.conf`` there, as
``OS_NOVA_CONFIG_DIR``). Run as::

    python -m tests.cloud.novaapi --config-dir DIR --portfile PATH

The port is chosen by the OS and written to ``--portfile`` once the server
listens; SIGTERM ends the process.
"""

import argparse
import os
import signal
import socketserver
import sys
from wsgiref import simple_server


class _Server(socketserver.ThreadingMixIn, simple_server.WSGIServer):
    daemon_threads = True

    def server_bind(self):
        # No getfqdn() (HTTPServer.server_bind): a reverse lookup can hang.
        socketserver.TCPServer.server_bind(self)
        self.server_name = "127.0.0.1"
        self.server_port = self.server_address[1]
        self.setup_environ()


class _Handler(simple_server.WSGIRequestHandler):
    def log_message(self, format, *args):
        # nova's request_log filter logs every request already.
        return


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config-dir", required=True)
    parser.add_argument("--portfile", required=True)
    args = parser.parse_args(argv)
    os.environ["OS_NOVA_CONFIG_DIR"] = args.config_dir
    # nova parses sys.argv as its own command line.
    sys.argv = [sys.argv[0]]
    from nova.wsgi import osapi_compute

    server = _Server(("127.0.0.1", 0), _Handler)
    server.set_app(osapi_compute.application)
    tmp = f"{args.portfile}.tmp"
    with open(tmp, "w") as f:
        f.write(f"{server.server_port}\n")
    os.replace(tmp, args.portfile)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        server.serve_forever()
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
