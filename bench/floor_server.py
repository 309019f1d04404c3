"""The floor under a first answer from a spawned Python daemon (bench_start.py).

    python bench/floor_server.py STATE_FILE [SOCKET]

The least any daemon in Python does to answer its first `resume`: the interpreter
starts, the socket is taken (systemd's descriptor 3 when LISTEN_FDS is set, else
bound at SOCKET), and each request line is parsed and answered; a `resume` reads
STATE_FILE and parses it and answers with the number of stories. Nothing is checked,
no unit built, no git asked, no thread started. Parsed with the C scanner behind
`json.loads` (as storyd's reads are), without `json`'s own import of `re`.
"""

import _json
import os
import socket
import sys


class _Plain:
    """json.loads's defaults, as the C scanner reads them."""

    strict = True
    object_hook = object_pairs_hook = None
    parse_float, parse_int, parse_constant = float, int, float


_scan = _json.make_scanner(_Plain())


def loads(data: bytes) -> object:
    """One JSON document (UTF-8, no BOM, nothing after it checked)."""
    return _scan(data.decode("utf-8"), 0)[0]


def main() -> None:
    """Answer until killed."""
    state = sys.argv[1]
    if os.environ.get("LISTEN_FDS"):
        listener = socket.socket(fileno=3)
    else:
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(sys.argv[2])
        listener.listen(64)
    while True:
        conn, _ = listener.accept()
        with conn:
            data = b""
            while not data.endswith(b"\n"):
                chunk = conn.recv(65536)
                if not chunk:
                    break
                data += chunk
            request = loads(data)
            reply = b'{"ok":true}\n'
            if request.get("op") == "resume":
                with open(state, "rb") as file:
                    stories = len(loads(file.read())["stories"])
                reply = b'{"ok":true,"stories":%d}\n' % stories
            conn.sendall(reply)


if __name__ == "__main__":
    main()
