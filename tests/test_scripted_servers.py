"""The scripted model servers the suite talks to keep honest records (they are the tests' witness).

A request the server never received whole (the app was sending it when the server was killed) is
not recorded as one it answered: a test counting "requests the server saw" must not count a body
that never arrived (a loaded CI run recorded an empty /api/chat body that way and a helper choked
on it).
"""

import socket

import httpx
import pytest

from scripted_ollama import ScriptedOllama
from scripted_openai import ScriptedOpenAI
from waiting import wait_for


def _cut_post(url: str, path: str, sent: bytes) -> None:
    """Send a POST's headers and ``sent`` of its 400-byte body, then hang up (the connection dies
    mid-request, as when the server is killed while the app sends)."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=5) as conn:
        conn.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     f"Content-Length: 400\r\n\r\n".encode() + sent)
        conn.shutdown(socket.SHUT_WR)
        conn.settimeout(5)
        while conn.recv(4096):
            pass


@pytest.mark.parametrize("server_class,path", [(ScriptedOllama, "/api/chat"),
                                               (ScriptedOpenAI, "/v1/chat/completions")])
@pytest.mark.parametrize("sent", [b"", b'{"model": "tiny:1b", "messages": ['], ids=["no body", "half a body"])
def test_a_request_that_never_arrived_whole_is_not_recorded(server_class, path, sent):
    with server_class() as server:
        _cut_post(server.url, path, sent)
        body = {"model": "tiny:1b", "messages": [{"role": "user", "content": "hi"}], "stream": False}
        httpx.post(server.url + path, json=body, timeout=10)          # a whole one after it
        wait_for(lambda: len(server.requests) >= 1, 10, "the whole request recorded")
        posts = [r for r in server.requests if r.method == "POST"]
        assert [r.body.get("messages") for r in posts] == [body["messages"]]
