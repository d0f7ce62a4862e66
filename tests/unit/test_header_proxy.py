"""The tests' header proxy (tests/proxy_support.py) stops without leaving a socket to the GC:
pytest turns an unclosed transport's ResourceWarning into an error of whatever test runs
next (a loaded run saw it fail ``test_signin_browser`` at teardown)."""

import gc
import socket
import threading
import warnings

from tests.proxy_support import HeaderProxy


def test_stopping_with_connections_just_accepted_leaves_no_transport_open():
    upstream = socket.create_server(("127.0.0.1", 0))  # accepts, never answers
    proxy = HeaderProxy(upstream.getsockname()[1], {"X-Forwarded-Email": "a@example.com"})
    proxy.start()
    clients, opened = [], threading.Event()

    def connect() -> None:
        for _ in range(200):
            try:
                client = socket.create_connection(("127.0.0.1", proxy.port))
            except ConnectionRefusedError:  # the proxy stopped listening
                return
            clients.append(client)
            if len(clients) == 20:
                opened.set()

    connecting = threading.Thread(target=connect)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        connecting.start()
        assert opened.wait(10)
        proxy.stop()  # while connections arrive: some accepted, their handler not yet run
        connecting.join(10)
        gc.collect()
    for client in clients:
        client.close()
    upstream.close()
    leaked = [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)]
    assert leaked == [], leaked[:3]
    assert len(clients) >= 20
