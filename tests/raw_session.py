"""A Streamlit session opened on a raw socket, for requests a browser cannot make (e.g. a
header line sent twice): the websocket upgrade that Streamlit reads ``st.context.headers``
and the client's address from, written byte for byte, then the browser's first message
(a rerun of the app) and Streamlit's answers read back until the run finishes.

Import as ``from tests.raw_session import rendered_text`` (nothing here is a fixture).
"""

import base64
import os
import socket
import struct
import time

from google.protobuf.json_format import MessageToJson
from streamlit.proto.BackMsg_pb2 import BackMsg
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

RENDER_TIMEOUT_SECONDS = 60.0
"""A cold first run of the app under load (imports, first query) takes seconds."""
BINARY, CLOSE = 0x2, 0x8
"""Websocket opcodes (RFC 6455 §5.2)."""


def _frame(opcode: int, payload: bytes) -> bytes:
    """One final, masked client frame (RFC 6455 §5.2; a client must mask)."""
    mask = os.urandom(4)
    size = len(payload)
    if size < 126:
        head = struct.pack("!BB", 0x80 | opcode, 0x80 | size)
    elif size < 1 << 16:
        head = struct.pack("!BBH", 0x80 | opcode, 0x80 | 126, size)
    else:
        head = struct.pack("!BBQ", 0x80 | opcode, 0x80 | 127, size)
    return head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


def _read_exactly(sock: socket.socket, count: int) -> bytes:
    data = b""
    while len(data) < count:
        chunk = sock.recv(count - len(data))
        if not chunk:
            raise ConnectionError("the server closed the connection")
        data += chunk
    return data


def _read_message(sock: socket.socket) -> tuple[int, bytes]:
    """The next whole message as (opcode, payload), fragments joined (a server's frames
    are not masked)."""
    opcode, payload = None, b""
    while True:
        first, second = _read_exactly(sock, 2)
        size = second & 0x7F
        if size == 126:
            (size,) = struct.unpack("!H", _read_exactly(sock, 2))
        elif size == 127:
            (size,) = struct.unpack("!Q", _read_exactly(sock, 8))
        payload += _read_exactly(sock, size)
        if opcode is None:
            opcode = first & 0x0F
        if first & 0x80:
            return opcode, payload


def rendered_text(
    url: str, header_lines: list[str], *, host: str | None = None, page: str = ""
) -> str:
    """Run the app at ``url`` once in a session whose websocket upgrade request carries
    ``header_lines`` verbatim (``"Name: value"`` each, repeats kept); return every message
    Streamlit sent until the run finished (past a run that ends early for the rerun of
    ``st.switch_page``), as JSON text (rendered text is in it as written,
    e.g. ``Signed in as `a@example.com` · viewer``).

    Args:
        url: the dashboard's base URL, ``http://<address>:<port>``.
        header_lines: extra request header lines, in order.
        host: the ``Host`` header (default: the URL's address and port).
        page: the page's URL path (``events`` opens ``…/events``; ``""``: the root).

    Raises:
        AssertionError: the server refused the upgrade, or the run did not finish within
            ``RENDER_TIMEOUT_SECONDS``.
    """
    address, port = url.removeprefix("http://").rsplit(":", 1)
    key = base64.b64encode(os.urandom(16)).decode()
    head = [
        "GET /_stcore/stream HTTP/1.1",
        f"Host: {host or f'{address}:{port}'}",
        "Upgrade: websocket",
        "Connection: Upgrade",
        f"Sec-WebSocket-Key: {key}",
        "Sec-WebSocket-Version: 13",
        "Sec-WebSocket-Protocol: streamlit",
        *header_lines,
        "",
        "",
    ]
    target = (address.strip("[]"), int(port))
    with socket.create_connection(target, timeout=RENDER_TIMEOUT_SECONDS) as sock:
        sock.sendall("\r\n".join(head).encode("latin-1"))
        response = b""
        while b"\r\n\r\n" not in response:
            response += _read_exactly(sock, 1)
        assert response.startswith(b"HTTP/1.1 101"), response.decode("latin-1")
        rerun = BackMsg()
        rerun.rerun_script.query_string = ""
        rerun.rerun_script.page_script_hash = ""
        rerun.rerun_script.page_name = page
        sock.sendall(_frame(BINARY, rerun.SerializeToString()))
        texts = []
        deadline = time.monotonic() + RENDER_TIMEOUT_SECONDS
        while time.monotonic() < deadline:
            opcode, payload = _read_message(sock)
            if opcode == CLOSE:
                break
            if opcode != BINARY:
                continue
            message = ForwardMsg()
            message.ParseFromString(payload)
            texts.append(MessageToJson(message, ensure_ascii=False))
            if (
                message.WhichOneof("type") == "script_finished"
                # "/" sends to /overview (st.switch_page): that run ends early, the next follows
                and message.script_finished != ForwardMsg.FINISHED_EARLY_FOR_RERUN
            ):
                sock.sendall(_frame(CLOSE, struct.pack("!H", 1000)))
                return "\n".join(texts)
    raise AssertionError("the app's run did not finish:\n" + "\n".join(texts)[-3000:])
